//! The worker pool sizes itself (issue 12): I/Os that find every worker busy start another,
//! up to `io_max_workers`; workers idle for `io_worker_idle_timeout` leave, down to
//! `io_min_workers`; the view shows each worker (thread id, busy or idle, I/Os done), in
//! `Aio::worker_pool` and on the socket. Other methods have no pool and say so (None).
//! Guards against: a pool that does not grow while every worker is busy, grows past
//! `io_max_workers`, or does not shrink (or shrinks below `io_min_workers`) once idle; a stopped
//! worker process taken for a dead one and replaced; a queued read run twice or never, by a worker
//! and by its waiter; the socket showing another pool than `Aio::worker_pool`; and a method without
//! a pool reporting one.

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoBuf, IoMethodKind, OpenOptions};

/// Worker processes: workers are kept from the queue by stopping them (SIGSTOP), since
/// completions run in the embedder and a held one would not keep a worker busy. Each stopped
/// worker leaves a request waiting with no idle worker: the supervisor starts another.
fn on_processes() {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let socket = d.path().join("aios.sock");
    let aio = start_with(IoMethodKind::Worker, |s| {
        s.io_min_workers = 1;
        s.io_max_workers = 3;
        s.io_worker_launch_interval = 0;
        // Long enough that a worker just started (idle once it has run its read, or from
        // birth if the waiter took the read back) is still there when the loop below, on a
        // loaded machine, comes to stop it.
        s.io_worker_idle_timeout = 1000;
        s.introspection_socket = Some(socket.clone());
        s.io_worker_try_cached = false; // every read must reach the pool
    });
    let pool = aio.worker_pool().unwrap();
    assert_eq!((pool.min, pool.max, pool.workers.len()), (1, 3, 1));
    assert_eq!(pool.kind, "process");
    let me = aio.register_issuer("grows").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    let mut stopped = Vec::new();
    let mut reads = Vec::new();
    for n in 1..=3usize {
        let pool = aio.worker_pool().unwrap();
        assert_eq!(pool.workers.len(), n, "{pool:?}");
        assert!(
            pool.workers
                .iter()
                .all(|w| w.tid > 0 && w.tid != std::process::id() as i32)
        );
        // Stop the newest worker, then queue a read nobody can take.
        let newest = pool.workers.iter().map(|w| w.tid).max().unwrap();
        stopped.push(stop_worker_process(newest));
        let k = n as u64;
        reads.push((
            k,
            me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096)),
        ));
        if n < 3 {
            eventually(10, "another worker started", || {
                aio.worker_pool().unwrap().workers.len() == n + 1
            });
            // The new worker took the waiting read.
            let (k, io) = reads.pop().unwrap();
            assert_pattern(&me.wait(io).into_buf(), k * 4096);
        }
    }
    // At the maximum: no fourth worker; the waiter takes the last read back and runs it.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let pool = aio.worker_pool().unwrap();
    assert_eq!((pool.workers.len(), pool.grown), (3, 2), "{pool:?}");
    let v = dbaio::introspect::request(&socket, "all").unwrap();
    assert_eq!(v["worker_pool"]["workers"].as_array().unwrap().len(), 3);
    assert_eq!(v["worker_pool"]["kind"], "process");
    for (k, io) in reads {
        assert_pattern(&me.wait(io).into_buf(), k * 4096);
    }
    drop(stopped);
    // Idle for a second: back to the minimum, never below.
    eventually(10, "idle workers leaving", || {
        aio.worker_pool().unwrap().workers.len() == 1
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pool = aio.worker_pool().unwrap();
    assert_eq!(
        (pool.workers.len(), pool.retired, pool.replaced),
        (1, 2, 0),
        "{pool:?}"
    );
    let io = me.acquire().unwrap().read(&f, 4096, IoBuf::new(4096));
    assert_pattern(&me.wait(io).into_buf(), 4096);
}

fn scenario(m: IoMethodKind) {
    if crate::support::on_processes() {
        return on_processes();
    }
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let socket = d.path().join("aios.sock");
    let aio = start_with(m, |s| {
        s.io_min_workers = 1;
        s.io_max_workers = 3;
        s.io_worker_launch_interval = 0;
        s.io_worker_idle_timeout = 100;
        s.introspection_socket = Some(socket.clone());
        s.io_worker_try_cached = false; // every read must reach the pool
    });
    if m != IoMethodKind::Worker {
        assert_eq!(aio.worker_pool(), None);
        return;
    }
    let pool = aio.worker_pool().unwrap();
    assert_eq!((pool.min, pool.max, pool.workers.len()), (1, 3, 1));
    let me = aio.register_issuer("grows").unwrap();
    // Dropped before `me` if an assertion fails: the issuer's drop waits for held reads.
    let _release = ReleaseHeldOnDrop(aio.clone());
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    // Each of the first three reads holds its worker mid-completion, and more follow:
    // requests keep finding every worker busy, so the pool grows to its maximum (one worker
    // per sizing window; the launch interval is 0 here). A wake that found an idle worker (or
    // one on its way) makes its window calm, and the next busy wake closes that window
    // without growing; so reads follow until three workers run, at most 16.
    aio.inject_fault(
        FaultRule::new(FaultAction::Hold)
            .offsets(0..3 * 4096)
            .times(3),
    );
    let held: Vec<_> = (0..3u64)
        .map(|k| me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096)))
        .collect();
    let mut extra = Vec::new();
    while aio.worker_pool().unwrap().workers.len() < 3 {
        assert!(extra.len() < 16, "{:?}", aio.worker_pool());
        let k = 4 + extra.len() as u64;
        extra.push((
            k,
            me.acquire().unwrap().read(&f, k * 4096, IoBuf::new(4096)),
        ));
    }
    eventually(10, "three reads held by three workers", || {
        aio.aios()
            .iter()
            .filter(|r| r.state == "COMPLETED_IO")
            .count()
            == 3
    });
    let pool = aio.worker_pool().unwrap();
    assert_eq!(pool.workers.len(), 3, "{pool:?}");
    assert_eq!(pool.grown, 2);
    assert!(pool.workers.iter().all(|w| w.state == "busy" && w.tid > 0));
    // At the maximum: the later reads wait in the queue (their waiter runs them), no fourth
    // worker.
    let extras = extra.len() as u64;
    for (k, io) in extra {
        assert_pattern(&me.wait(io).into_buf(), k * 4096);
    }
    assert_eq!(aio.worker_pool().unwrap().workers.len(), 3);
    // The socket shows the same pool.
    let v = dbaio::introspect::request(&socket, "all").unwrap();
    assert_eq!(v["worker_pool"]["workers"].as_array().unwrap().len(), 3);
    aio.release_held();
    for (k, io) in held.into_iter().enumerate() {
        assert_pattern(&me.wait(io).into_buf(), k as u64 * 4096);
    }
    let done: u64 = aio
        .worker_pool()
        .unwrap()
        .workers
        .iter()
        .map(|w| w.ios_done)
        .sum();
    // The three held reads, and any extra read a worker popped before the holds filled the
    // pool (a worker that took it was not held by it): each I/O ran exactly once, in a
    // worker or in its waiter.
    let by_waiter = executed_by(&aio, "grows", "waiter");
    assert!(done >= 3, "the three held reads ran in workers");
    assert_eq!(done + by_waiter, 3 + extras, "every read ran once");
    // Idle for 100 ms: back to the minimum, never below.
    eventually(10, "idle workers leaving", || {
        aio.worker_pool().unwrap().workers.len() == 1
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pool = aio.worker_pool().unwrap();
    assert_eq!((pool.workers.len(), pool.retired), (1, 2), "{pool:?}");
    // And it still does I/O.
    let io = me.acquire().unwrap().read(&f, 4096, IoBuf::new(4096));
    assert_pattern(&me.wait(io).into_buf(), 4096);
}

crate::for_every_method!(scenario);
