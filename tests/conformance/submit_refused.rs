//! A submission the kernel refuses: when `io_uring_enter` fails (here an injected EINVAL),
//! the I/Os it held fail with an error that says so — op, file, offset, and the refusal —
//! instead of a panic, and the issuer goes on: its later I/Os run (synchronously on a retired
//! ring) and return the right data. Transient refusals and transient results (EAGAIN, EINTR)
//! are retried, never reported. Methods that do not submit to the kernel are unaffected.
//! Guards against: `panic!("io_uring_enter failed to submit")` (issue 15, item 1).

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoBuf, IoMethodKind, Op, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start(m);
    let me = aio.register_issuer("refused").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();

    // Transient results are executed again, on every method.
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EAGAIN))
            .op(Op::Readv)
            .times(3),
    );
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EINTR))
            .op(Op::Readv)
            .times(2),
    );
    for k in 0..4u64 {
        let c = me.wait(me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096)));
        c.check().unwrap();
        assert_pattern(&c.into_buf(), k * 4096);
    }
    aio.clear_faults();

    aio.inject_submit_error(libc::EINVAL);
    me.begin_batch().unwrap();
    let ios: Vec<_> = (0..3u64)
        .map(|k| me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096)))
        .collect();
    me.end_batch();
    for (k, io) in ios.into_iter().enumerate() {
        let c = me.wait(io);
        if m == IoMethodKind::IoUring {
            let e = c.check().unwrap_err();
            assert_eq!(e.errno, libc::EINVAL);
            assert_eq!(
                e.to_string(),
                format!(
                    "could not read 4096 bytes at offset {} of file \"{}\": io_uring_enter \
                     refused to submit it: Invalid argument (errno 22)",
                    k * 4096,
                    path.display()
                )
            );
        } else {
            assert_pattern(&c.into_buf(), k as u64 * 4096);
        }
    }
    aio.inject_submit_error(0);
    // The issuer goes on (on io_uring its ring is retired: its I/Os now run synchronously).
    for k in 4..8u64 {
        assert_pattern(
            &me.read_exact_at(&f, k * 4096, IoBuf::new(4096)).unwrap(),
            k * 4096,
        );
    }
    let rows = aio.stats();
    let row = rows.iter().find(|r| r.issuer == "refused").unwrap();
    let read = row.ops.iter().find(|o| o.op == "readv").unwrap();
    let failed = if m == IoMethodKind::IoUring { 3 } else { 0 };
    assert_eq!((read.count, read.errors), (11, failed));
}

crate::for_every_method!(scenario);
