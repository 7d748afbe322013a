//! A staged I/O its issuer blocks on — `wait` on it in batch mode, or `wait_any` with it the
//! only I/O in flight — runs on the issuer under the worker method, threads or processes:
//! handing it to a worker would cost a wakeup and two context switches (with processes, two
//! more through the shared segment) for a result the issuer sleeps through anyway. The other
//! staged I/Os still go to the workers. io_uring submits it with the rest, and `sync` ran it
//! at `start`. Every I/O runs exactly once on every method.
//! Guards against: an awaited staged I/O run twice (by the waiting issuer and by the worker it was
//! also handed to) or handed to a worker anyway; the issuer's wait keeping the batch's other
//! staged I/Os from the workers, so they finish only when waited for; and io_uring running
//! I/Os in the issuer after all.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start_with(m, |s| {
        s.io_workers = 2;
        s.io_worker_try_cached = false; // every read must reach the method
    });
    let me = aio.register_issuer("awaits").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let by_issuer = || executed_by(&aio, "awaits", "issuer");

    // Three staged reads; the issuer blocks on the middle one.
    me.begin_batch().unwrap();
    let mut ios: Vec<_> = (0..3u64)
        .map(|k| me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096)))
        .collect();
    let last = ios.pop().unwrap();
    let middle = ios.pop().unwrap();
    let first = ios.pop().unwrap();
    assert_pattern(&me.wait(middle).into_buf(), 4096);
    // The other two were handed over before the issuer ran its own: polled, not waited for
    // (a wait could run them here too).
    eventually(10, "the other two reads done", || {
        first.is_done() && last.is_done()
    });
    assert_pattern(&me.wait(first).into_buf(), 0);
    assert_pattern(&me.wait(last).into_buf(), 8192);
    me.end_batch();
    let expected = match m {
        IoMethodKind::Sync => 3,
        IoMethodKind::Worker => 1,
        _ => 0,
    };
    assert_eq!(by_issuer(), expected, "{m:?}: reads run on the issuer");
    let total: u64 = aio
        .stats()
        .into_iter()
        .filter(|r| r.issuer == "awaits")
        .flat_map(|r| r.executors)
        .map(|e| e.ios)
        .sum();
    assert_eq!(total, 3, "each read ran once");

    // A lone staged read under `wait_any`.
    me.begin_batch().unwrap();
    let io = me.acquire().unwrap().read(&f, 12288, IoBuf::new(4096));
    me.wait_any();
    assert!(io.is_done());
    assert_pattern(&me.wait(io).into_buf(), 12288);
    me.end_batch();
    let expected = match m {
        IoMethodKind::Sync => 4,
        IoMethodKind::Worker => 2,
        _ => 0,
    };
    assert_eq!(by_issuer(), expected, "{m:?}: the lone read under wait_any");

    // Two staged reads under `wait_any`: not lone, both are handed over (a worker-method
    // issuer may still take one back rather than sleep: executor `waiter`, not `issuer`).
    me.begin_batch().unwrap();
    let a = me.acquire().unwrap().read(&f, 16384, IoBuf::new(4096));
    let b = me.acquire().unwrap().read(&f, 20480, IoBuf::new(4096));
    me.wait_any();
    assert!(a.is_done() || b.is_done());
    assert_pattern(&me.wait(a).into_buf(), 16384);
    assert_pattern(&me.wait(b).into_buf(), 20480);
    me.end_batch();
    let expected = if m == IoMethodKind::Sync { 6 } else { expected };
    assert_eq!(by_issuer(), expected, "{m:?}: two reads under wait_any");
}

crate::for_every_method!(scenario);
