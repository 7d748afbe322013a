//! Every kind of injected fault, on every method, through the one injection point: EIO and ENOSPC
//! come back as errors with their errno; EAGAIN and EINTR are transient, executed again and never
//! reported; short reads and writes come back PARTIAL; delays only delay, and compose with the
//! other rules (every matching rule applies; the first errno decides); a panicking executor
//! fails its I/O (an error without an errno); and once the rules are cleared the file reads back
//! intact. Rules with a probability draw from the seed and each I/O's identity, so the same seed
//! and program fail the same I/Os (about 40% of them): the run is replayed and must match, and
//! another seed must not.
//! Guards against: a method whose I/Os bypass the shared injection point (nothing is hit); EAGAIN
//! or EINTR reported instead of retried; a short transfer reported OK or as an error; a panicking
//! executor that leaves its I/O hanging instead of failing it; draws that depend on timing or on
//! which thread completes (a replay fails other I/Os) or ignore the seed; and a faulted or retried
//! write that leaves wrong bytes in the file.

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoBuf, IoMethodKind, OpenOptions, Status};
use std::time::Duration;

/// One run: 64 reads and 64 writes under `action` with probability 0.4; returns which
/// offsets failed and how.
fn run(m: IoMethodKind, action: FaultAction, seed: u64) -> Vec<(u64, Status, i32)> {
    let d = dir();
    let path = data_file(&d, "f", 64 * 4096);
    let aio = start(m);
    aio.seed_faults(seed);
    let me = aio.register_issuer("faults").unwrap();
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    aio.inject_fault(FaultRule::new(action).probability(0.4));
    let mut outcomes = Vec::new();
    // (A panicking executor logs an error; keep the test output readable.)
    let quiet = capture_logs(|| {
        for k in 0..64u64 {
            let off = k * 4096;
            let c = me.wait(me.acquire().unwrap().read(&f, off, IoBuf::new(4096)));
            let r = c.result();
            outcomes.push((off, r.status, c.check().err().map_or(0, |e| e.errno)));
            if r.status == Status::Ok {
                assert_pattern(&c.into_buf(), off);
            }
            let data: Vec<u8> = (0..4096u64).map(|i| pattern_byte(off + i)).collect();
            let c = me.wait(
                me.acquire()
                    .unwrap()
                    .write(&f, off, IoBuf::from_slice(&data)),
            );
            let r = c.result();
            outcomes.push((off | 1, r.status, c.check().err().map_or(0, |e| e.errno)));
        }
    });
    drop(quiet);
    // Whatever was injected, the loops that finish transfers still get the data right.
    aio.clear_faults();
    assert_pattern(&me.read_exact_at(&f, 0, IoBuf::new(64 * 4096)).unwrap(), 0);
    outcomes
}

fn scenario(m: IoMethodKind) {
    for (action, expect) in [
        (
            FaultAction::Errno(libc::EIO),
            Some((Status::Error, libc::EIO)),
        ),
        (
            FaultAction::Errno(libc::ENOSPC),
            Some((Status::Error, libc::ENOSPC)),
        ),
        (FaultAction::Errno(libc::EAGAIN), None),
        (FaultAction::Errno(libc::EINTR), None),
        (FaultAction::Short(1000), Some((Status::Partial, 0))),
        (FaultAction::Delay(Duration::from_micros(200)), None),
        (FaultAction::Panic, Some((Status::Error, 0))),
    ] {
        let first = run(m, action, 42);
        let hit: Vec<_> = first.iter().filter(|o| o.1 != Status::Ok).collect();
        match expect {
            None => assert!(hit.is_empty(), "{action:?} is not reported: {hit:?}"),
            Some(want) => {
                assert!(
                    (10..=90).contains(&hit.len()),
                    "{action:?} hit about 40% of 128 I/Os: {}",
                    hit.len()
                );
                assert!(
                    hit.iter().all(|o| (o.1, o.2) == want),
                    "{action:?}: {hit:?}"
                );
            }
        }
        assert_eq!(
            run(m, action, 42),
            first,
            "{action:?}: the same seed replays"
        );
        if expect.is_some() {
            assert_ne!(run(m, action, 7), first, "{action:?}: another seed differs");
        }
    }
}

/// Rules compose: a delay armed for every I/O and an error armed for one block both apply
/// to that block (the first matching rule alone applied, and the delay hid the error: found
/// by a caller-side attack); of two error rules the first decides, and the second keeps its
/// count for a later I/O.
fn rules_compose(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 8 * 4096);
    let aio = start(m);
    let me = aio.register_issuer("faults").unwrap();
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    aio.inject_fault(FaultRule::new(FaultAction::Delay(Duration::from_micros(
        100,
    ))));
    aio.inject_fault(FaultRule::new(FaultAction::Errno(libc::EIO)).offsets(4096..8192));
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::ENOSPC))
            .offsets(0..8192)
            .times(1),
    );
    let errno = |off: u64| {
        me.wait(me.acquire().unwrap().read(&f, off, IoBuf::new(4096)))
            .check()
            .err()
            .map_or(0, |e| e.errno)
    };
    assert_eq!(errno(4096), libc::EIO, "the delayed block's error");
    assert_eq!(
        errno(4096),
        libc::EIO,
        "again: the first error rule decides"
    );
    assert_eq!(
        errno(0),
        libc::ENOSPC,
        "the second error rule kept its one hit"
    );
    assert_eq!(errno(0), 0, "and spent it");
    assert_eq!(errno(8192), 0, "outside both: only delayed");
    // A short count past `i32::MAX` cuts nothing (cast, it made a read fail with EPERM:
    // found by a caller-side attack).
    aio.clear_faults();
    aio.inject_fault(FaultRule::new(FaultAction::Short(u32::MAX)));
    let c = me.wait(me.acquire().unwrap().read(&f, 0, IoBuf::new(4096)));
    assert_eq!(
        (c.result().status, c.bytes()),
        (Status::Ok, 4096),
        "{:?}",
        c.failure()
    );
}

crate::for_every_method!(scenario, rules_compose);
