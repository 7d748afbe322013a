//! Handle lifecycle and reuse: a handle goes idle → … → idle again, its generation grows with
//! every use, and a wait reference to an earlier use is stale and returns at once.
//! Guards against: generations not bumped (stale waiters blocking on a new I/O).

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 64 * 1024);
    let aio = start_with(m, |s| s.io_max_concurrency = 1);
    let me = aio.register_issuer("lifecycle").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let mut refs = Vec::new();
    for i in 0..5u64 {
        let h = me.acquire().unwrap();
        let wref = h.wait_ref();
        let io = h.read(&f, i * 4096, IoBuf::new(4096));
        assert_eq!(io.wait_ref(), wref);
        let c = me.wait(io);
        c.check().unwrap();
        assert_eq!(c.bytes(), 4096);
        assert_pattern(&c.into_buf(), i * 4096);
        refs.push(wref);
    }
    // One handle, reused five times: same io_id, strictly growing generations.
    assert!(
        refs.windows(2)
            .all(|w| w[0].io_id() == w[1].io_id() && w[0].generation() < w[1].generation())
    );
    for r in refs {
        assert!(aio.is_done(r));
        aio.wait(r).unwrap();
    }
    assert_eq!(me.in_flight(), 0);
}

crate::for_every_method!(scenario);
