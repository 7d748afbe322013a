//! Slice I/O: `read_into`, `read_exact_into` and `write_all_from` on a buffered file and on an
//! O_DIRECT file, aligned and not (redb's 9- and 320-byte header I/O at offset 0), checked
//! against the same operations on a `Vec<u8>` model; an unaligned O_DIRECT write past the end
//! leaves the file exactly as long as asked; `IoBuf::set_len` reuses one buffer at several
//! lengths.
//! Guards against: slice I/O that loses or misplaces bytes on an unaligned O_DIRECT request (the
//! bounce path) or across the end of the file; an unaligned O_DIRECT write past the end leaving the
//! file padded to the alignment; `read_into` at the end not returning the short count, or
//! `read_exact_into` not saying how much it read; `IoBuf::set_len` reallocating or reading the
//! wrong length; a read-only O_DIRECT file written through its tail's buffered descriptor; and
//! an empty slice write that grows a file.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn check(aio: &dbaio::Aio, direct: bool) {
    let d = dir();
    let path = data_file(&d, "slices", 64 << 10);
    let mut model = std::fs::read(&path).unwrap();
    let me = aio.register_issuer("slices").unwrap();
    let f = aio
        .open(&path, &OpenOptions::read_write().direct(direct))
        .unwrap();

    let write = |off: usize, data: &[u8], model: &mut Vec<u8>| {
        me.write_all_from(&f, off as u64, data).unwrap();
        if model.len() < off + data.len() {
            model.resize(off + data.len(), 0);
        }
        model[off..off + data.len()].copy_from_slice(data);
    };
    write(0, b"redb-hdr!", &mut model);
    write(4096, &[1u8; 4096], &mut model);
    write(5000, &[2u8; 10000], &mut model);
    write(65530, &[3u8; 20], &mut model); // across the end: extends by 14 bytes
    write(70000, &[4u8; 100], &mut model); // past the end: a hole, then 100 bytes
    assert_eq!(
        contents(aio, &path).len() as u64,
        model.len() as u64,
        "the file is exactly as long as written"
    );

    let mut header = vec![0u8; 320];
    me.read_exact_into(&f, 0, &mut header).unwrap();
    assert_eq!(&header[..], &model[..320]);
    for (off, len) in [(0usize, 9usize), (3, 5000), (4096, 4096), (65000, 1000)] {
        let mut out = vec![0u8; len];
        me.read_exact_into(&f, off as u64, &mut out).unwrap();
        assert_eq!(&out[..], &model[off..off + len], "read of {len} at {off}");
    }
    // At the end: read_into returns what there is, read_exact_into says it is short.
    let mut tail = vec![0u8; 8192];
    let n = me.read_into(&f, 65536, &mut tail).unwrap();
    assert_eq!(n, model.len() - 65536);
    assert_eq!(&tail[..n], &model[65536..]);
    let e = me.read_exact_into(&f, 65536, &mut tail).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("read only {n} of 8192 bytes")),
        "{e}"
    );
    assert_eq!(contents(aio, &path), model, "the file matches the model");

    // One IoBuf reused at several lengths.
    let mut buf = IoBuf::new(16384);
    for len in [4096usize, 16384, 8192] {
        buf.set_len(len);
        buf = me.read_exact_at(&f, 0, buf).unwrap();
        assert_eq!(buf.len(), len);
        assert_eq!(&buf[..], &model[..len]);
    }
    assert_eq!(buf.capacity(), 16384);
}

fn scenario(m: IoMethodKind) {
    let aio = start(m);
    check(&aio, false);
    check(&aio, true);
}

/// On a read-only O_DIRECT file an unaligned `write_all_from` is refused with EBADF, as
/// any write on it, and the file is left as it was: its tail past the end went through a
/// buffered descriptor opened anew for writing, which wrote the read-only file (found by
/// differential testing, 2026-12-07, every method). And empty slice transfers do nothing
/// anywhere: an empty unaligned write to an O_DIRECT file extended it to the offset on sim.
fn read_only_and_empty(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "ro", 10_000);
    let before = std::fs::read(&path).unwrap();
    let aio = start(m);
    let me = aio.register_issuer("ro").unwrap();
    let ro = aio.open(&path, &OpenOptions::read().direct(true)).unwrap();
    for (offset, len) in [(9995u64, 10usize), (60_000, 10), (10, 10)] {
        let e = me
            .write_all_from(&ro, offset, &vec![1u8; len])
            .expect_err("a write on a read-only file");
        let dbaio::AioError::Io(e) = e else {
            panic!("not an I/O error: {e}");
        };
        assert_eq!(e.errno, libc::EBADF, "at {offset}: {e}");
    }
    assert_eq!(ro.len().unwrap(), 10_000, "the read-only file grew");
    let rw = aio
        .open(&path, &OpenOptions::read_write().direct(true))
        .unwrap();
    for f in [&ro, &rw] {
        me.write_all_from(f, 20_000, &[]).unwrap();
        me.write_all_from(f, 512, &[]).unwrap();
        assert_eq!(me.read_into(f, 100, &mut []).unwrap(), 0);
        me.read_exact_into(f, 100, &mut []).unwrap();
    }
    drop((ro, rw));
    drop(aio);
    if m != IoMethodKind::Sim {
        assert_eq!(std::fs::read(&path).unwrap(), before, "the file changed");
    }
}

crate::for_every_method!(scenario, read_only_and_empty);
