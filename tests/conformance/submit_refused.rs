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

/// Counts panics "completing an I/O that is not submitted" in this process (caught where an
/// I/O completes, so they fail no test by themselves): a completion that reached a handle
/// twice. The hook chains to the one before it.
fn double_completions() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SEEN: AtomicUsize = AtomicUsize::new(0);
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info
                .to_string()
                .contains("completing an I/O that is not submitted")
            {
                SEEN.fetch_add(1, Ordering::SeqCst);
            }
            before(info);
        }));
    });
    SEEN.load(Ordering::SeqCst)
}

/// A refusal that passes (EAGAIN: no request could be had) of the submission an issuer makes
/// in the same call as its wait for staged I/Os (`wait_for_completions`) is retried, not
/// reported. Guards against that refusal retiring the ring and failing the batch with EAGAIN
/// (found in review, 2026-12-06).
fn a_passing_refusal_while_waiting_on_staged_ios_is_retried(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "h", 8 * 4096);
    let aio = start(m);
    let me = aio.register_issuer("refused for now").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let twice = double_completions();
    // (The ring exists once the issuer has submitted.)
    let first = me.acquire().unwrap().read(&f, 0, IoBuf::new(4096));
    assert_pattern(&me.wait(first).into_buf(), 0);
    aio.inject_submit_error_once(libc::EAGAIN);
    me.begin_batch().unwrap();
    let ios: Vec<_> = (0..4u64)
        .map(|k| me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096)))
        .collect();
    // Still staged: the wait hands them to the method with itself.
    me.wait_for_completions(4);
    for (k, io) in ios.into_iter().enumerate() {
        let c = me.wait(io);
        c.check().unwrap();
        assert_pattern(&c.into_buf(), k as u64 * 4096);
    }
    me.end_batch();
    assert_pattern(
        &me.read_exact_at(&f, 4 * 4096, IoBuf::new(4096)).unwrap(),
        4 * 4096,
    );
    drop(me);
    drop(aio);
    assert_eq!(
        double_completions(),
        twice,
        "{m}: a completion reached a handle twice"
    );
}

fn scenario_refusals(m: IoMethodKind) {
    scenario(m);
    a_passing_refusal_while_waiting_on_staged_ios_is_retried(m);
}

crate::for_every_method!(scenario_refusals);
