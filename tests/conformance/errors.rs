//! Errors: an injected EIO (at the completion point shared by every method) comes back naming op,
//! file, offset, length and errno; an injected short transfer is PARTIAL and `resume` finishes it;
//! EINVAL on an O_DIRECT file carries the alignment hint, and only when something is off the
//! alignment; `write_all_at`, `write_all_from` and `read_exact_at` that fail part-way name the
//! caller's request and what it moved before the failure.
//! Guards against: an error that loses or garbles its op, offset, length, errno or file, or is
//! worded otherwise than PostgreSQL's; a `times(1)` rule that fires again; a short write reported
//! OK or as an error instead of PARTIAL with its byte count, or a `resume` that rewrites from the
//! start; an O_DIRECT EINVAL without the alignment hint, or with it where everything was
//! aligned; and a continued transfer's failure named after the part it met (the rest of a short
//! write, a read-modify-write's aligned block) rather than the request.

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoBuf, IoMethodKind, Op, OpenOptions, Status};

/// The I/O failure inside `e` (any other error fails the test).
fn io_error(e: dbaio::AioError) -> dbaio::IoError {
    match e {
        dbaio::AioError::Io(e) => *e,
        e => panic!("not an I/O error: {e}"),
    }
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start(m);
    let me = aio.register_issuer("errors").unwrap();
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();

    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .op(Op::Readv)
            .on_file(&f)
            .offsets(8192..8193)
            .times(1),
    );
    let c = me.wait(me.acquire().unwrap().read(&f, 8192, IoBuf::new(4096)));
    let e = c.check().unwrap_err();
    assert_eq!(
        (e.op, e.offset, e.length, e.errno),
        (Op::Readv, 8192, 4096, libc::EIO)
    );
    assert_eq!(
        e.to_string(),
        format!(
            "could not read 4096 bytes at offset 8192 of file \"{}\": Input/output error (errno 5)",
            path.display()
        )
    );
    // The rule fired once; the same read now works.
    assert_pattern(&me.read_exact_at(&f, 8192, IoBuf::new(4096)).unwrap(), 8192);

    aio.inject_fault(
        FaultRule::new(FaultAction::Short(1000))
            .op(Op::Writev)
            .on_file(&f)
            .times(1),
    );
    let c = me.wait(
        me.acquire()
            .unwrap()
            .write(&f, 0, IoBuf::from_slice(&[1u8; 4096])),
    );
    assert_eq!((c.result().status, c.bytes()), (Status::Partial, 1000));
    let rest = me.wait(c.resume(me.acquire().unwrap(), &f));
    rest.check().unwrap();
    assert_eq!(rest.bytes(), 3096);
    assert_eq!(&contents(&aio, &path)[..4096], &[1u8; 4096][..]);
    aio.clear_faults();

    // O_DIRECT with a misaligned offset.
    let direct = aio.open(&path, &OpenOptions::read().direct(true)).unwrap();
    let c = me.wait(me.acquire().unwrap().read(&direct, 100, IoBuf::new(4096)));
    let e = c.check().unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    assert!(
        e.to_string().contains("HINT:  O_DIRECT needs the offset"),
        "{e}"
    );
    // Aligned O_DIRECT works.
    assert_pattern(
        &me.read_exact_at(&direct, 4096, IoBuf::new(4096)).unwrap(),
        4096,
    );
}

/// A request continued after a short transfer that then fails (a full disk: the kernel
/// writes what fits, and the rest of the write gets ENOSPC) names the caller's request and
/// how much of it was moved, and an unaligned O_DIRECT `write_all_from` whose aligned block
/// write fails names the caller's bytes, not the block. Found by a caller-side attack,
/// 2026-12-08: `could not write 4096 bytes at offset 7335936` for a request of 65536 at
/// 7274496, and `8192 bytes at offset 18446744073709547520` for 100 bytes asked.
fn failures_part_way_name_the_request(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start(m);
    let me = aio.register_issuer("errors").unwrap();
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    let full_after_4k = |f: &dbaio::File| {
        aio.inject_fault(
            FaultRule::new(FaultAction::Short(4096))
                .op(Op::Writev)
                .on_file(f)
                .times(1),
        );
        aio.inject_fault(
            FaultRule::new(FaultAction::Errno(libc::ENOSPC))
                .op(Op::Writev)
                .on_file(f)
                .offsets(4096..u64::MAX),
        );
    };
    let expected = format!(
        "could not write 16384 bytes at offset 0 of file \"{}\": No space left on device \
         (errno 28); 4096 of the 16384 bytes were written",
        path.display()
    );
    full_after_4k(&f);
    let e = me
        .write_all_at(&f, 0, IoBuf::from_slice(&[7u8; 16384]))
        .unwrap_err();
    let e = io_error(e);
    assert_eq!(
        (e.offset, e.length, e.transferred, e.errno),
        (0, 16384, 4096, libc::ENOSPC),
        "{e}"
    );
    assert_eq!(e.to_string(), expected);
    aio.clear_faults();
    full_after_4k(&f);
    let e = me.write_all_from(&f, 0, &[7u8; 16384]).unwrap_err();
    assert_eq!(e.to_string(), expected);
    aio.clear_faults();

    // Reads the same way (a second attack, 2026-12-08: `read_exact_into` named the rest
    // after a short read, and an unaligned O_DIRECT read its aligned blocks).
    aio.inject_fault(
        FaultRule::new(FaultAction::Short(1000))
            .op(Op::Readv)
            .on_file(&f)
            .times(1),
    );
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .op(Op::Readv)
            .on_file(&f)
            .offsets(1000..u64::MAX),
    );
    let mut out = vec![0u8; 8192];
    let e = me.read_exact_into(&f, 0, &mut out).unwrap_err();
    let e = io_error(e);
    assert_eq!(
        (e.offset, e.length, e.transferred, e.errno),
        (0, 8192, 1000, libc::EIO),
        "{e}"
    );
    assert!(
        e.to_string()
            .ends_with("Input/output error (errno 5); 1000 of the 8192 bytes were read"),
        "{e}"
    );
    aio.clear_faults();

    // O_DIRECT, 100 bytes at offset 10 inside the file: the read-modify-write writes the
    // aligned block 0..4096, which fails.
    let direct = aio
        .open(&path, &OpenOptions::read_write().direct(true))
        .unwrap();
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .op(Op::Writev)
            .on_file(&direct),
    );
    let e = me.write_all_from(&direct, 10, &[9u8; 100]).unwrap_err();
    let e = io_error(e);
    assert_eq!(
        (e.offset, e.length, e.transferred, e.errno),
        (10, 100, 0, libc::EIO),
        "{e}"
    );
    aio.clear_faults();
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .op(Op::Readv)
            .on_file(&direct),
    );
    let mut out = vec![0u8; 5000];
    let e = me.read_exact_into(&direct, 100, &mut out).unwrap_err();
    let e = io_error(e);
    assert_eq!(
        (e.offset, e.length, e.transferred, e.errno),
        (100, 5000, 0, libc::EIO),
        "{e}"
    );
    aio.clear_faults();
}

/// The alignment hint comes only where the request is off the alignment: one aligned
/// buffer at an aligned offset that the kernel refuses with EINVAL (an offset where the
/// transfer would pass 2^63 bytes) is refused for another reason (found by a caller-side
/// attack, 2026-12-08: the hint told the caller to align what was aligned).
fn the_alignment_hint_only_for_what_is_unaligned(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start(m);
    let me = aio.register_issuer("errors").unwrap();
    let direct = aio
        .open(&path, &OpenOptions::read_write().direct(true))
        .unwrap();
    let at_the_edge = (1u64 << 63) - 4096;
    let c = me.wait(me.acquire().unwrap().write(
        &direct,
        at_the_edge,
        IoBuf::from_slice(&[1u8; 4096]),
    ));
    let e = c.check().unwrap_err();
    assert_eq!(e.errno, libc::EINVAL, "{e}");
    assert_eq!(e.hint, None, "{e}");
    let c = me.wait(
        me.acquire()
            .unwrap()
            .write(&direct, 0, IoBuf::from_slice(&[1u8; 100])),
    );
    let e = c.check().unwrap_err();
    assert_eq!(e.errno, libc::EINVAL, "{e}");
    assert!(e.hint.is_some(), "{e}");
    drop(direct);
    assert_eq!(contents(&aio, &path).len(), 65536, "nothing was written");
}

/// A read-only open asked to truncate is refused and the file keeps its bytes: Linux
/// truncates a file opened `O_RDONLY | O_TRUNC`, which emptied the file behind a read-only
/// open (found by a caller-side attack on the embedding's lifecycle, 2026-12-08; sync,
/// worker and io_uring).
fn a_read_only_open_that_would_truncate_is_refused(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 8192);
    let aio = start(m);
    // (Opened once first: `sim` takes a real file onto its disk at its first open.)
    let reader = aio.open(&path, &OpenOptions::read()).unwrap();
    let before = contents(&aio, &path);
    let e = match aio.open(&path, &OpenOptions::read().truncate(true)) {
        Ok(_) => panic!("a read-only open that truncates was allowed"),
        Err(e) => e,
    };
    assert!(
        e.to_string()
            .contains("truncating a file requires write access"),
        "{e}"
    );
    assert_eq!(contents(&aio, &path), before, "the file lost its bytes");
    assert_eq!(reader.len().unwrap(), 8192);
    let f = aio
        .open(&path, &OpenOptions::read_write().truncate(true))
        .unwrap();
    assert_eq!(f.len().unwrap(), 0, "a read-write open still truncates");
}

crate::for_every_method!(
    a_read_only_open_that_would_truncate_is_refused,
    scenario,
    failures_part_way_name_the_request,
    the_alignment_hint_only_for_what_is_unaligned
);
