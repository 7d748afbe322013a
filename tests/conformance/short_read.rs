//! Short reads: a file shorter than the request gives PARTIAL with the bytes read; `resume`
//! continues with the rest, which then hits end of file — an error that says how much was
//! read; `read_exact_at` reports the whole request, as `read_exact_into` does.
//! Guards against: a short read reported OK or as an error instead of PARTIAL with its byte count;
//! `resume` from the wrong offset or for the wrong length, or end of file (0 bytes) taken for
//! success; and `read_exact_at` looping for ever at end of file, or naming only the resumed
//! remainder (`could not read 2192 bytes at offset 6000 …: read only 0 of 2192 bytes` for a
//! request made at 4096: found by a caller-side attack on the documentation, 2026-12-07).

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions, Status};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "short", 6000);
    let aio = start(m);
    let me = aio.register_issuer("short").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let c = me.wait(me.acquire().unwrap().read(&f, 0, IoBuf::new(8192)));
    assert_eq!(c.result().status, Status::Partial);
    assert_eq!(c.bytes(), 6000);
    let rest = me.wait(c.resume(me.acquire().unwrap(), &f));
    assert_eq!(rest.result().status, Status::Error);
    let e = rest.check().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "could not read 2192 bytes at offset 6000 of file \"{}\": read only 0 of 2192 bytes",
            path.display()
        )
    );
    let buf = rest.into_buf();
    assert_pattern(&buf[..6000], 0);
    let e = me.read_exact_at(&f, 4096, IoBuf::new(4096)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "could not read 4096 bytes at offset 4096 of file \"{}\": read only 1904 of 4096 bytes",
            path.display()
        )
    );
    let mut slice = vec![0; 4096];
    let e2 = me.read_exact_into(&f, 4096, &mut slice).unwrap_err();
    assert_eq!(
        e2.to_string(),
        e.to_string(),
        "read_exact_into and read_exact_at agree"
    );
    // A read that fits comes back whole.
    assert_pattern(&me.read_exact_at(&f, 1000, IoBuf::new(5000)).unwrap(), 1000);
}

crate::for_every_method!(scenario);
