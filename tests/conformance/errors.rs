//! Errors: an injected EIO (at the completion point shared by every method) comes back naming op,
//! file, offset, length and errno; an injected short transfer is PARTIAL and `resume` finishes it;
//! EINVAL on an O_DIRECT file carries the alignment hint.
//! Guards against: an error that loses or garbles its op, offset, length, errno or file, or is
//! worded otherwise than PostgreSQL's; a `times(1)` rule that fires again; a short write reported
//! OK or as an error instead of PARTIAL with its byte count, or a `resume` that rewrites from the
//! start; and an O_DIRECT EINVAL without the alignment hint.

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoBuf, IoMethodKind, Op, OpenOptions, Status};

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

crate::for_every_method!(scenario);
