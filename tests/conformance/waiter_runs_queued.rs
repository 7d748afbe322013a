//! An I/O its issuer waits for before any worker has picked it up is run by the waiter itself
//! (the worker method's hand-off costs a wakeup and a context switch for nothing then), and
//! is never run twice: the worker that later pops the queue entry finds it claimed and drops
//! it. So is one an issuer has queued when it waits for any of its I/Os to complete. On the
//! other methods the same program simply runs each I/O once.
//! Guards against: a request taken back still counted as queued in the view while its stale
//! entry waits for the busy worker; an I/O run twice, by the waiter that took it back and again by the worker that
//! later pops its stale queue entry (the no-op fault rule counts executions); and a waiter, in
//! `wait` or in `wait_any`, that sleeps until the held (or stopped) worker is free instead of
//! running the queued I/O itself (the worker is freed only after that wait returns: a hang).

use crate::support::*;
use dbaio::{Aio, FaultAction, FaultRule, IoBuf, IoMethodKind, OpenOptions};
use std::time::Duration;

/// Worker processes: the only worker is stopped (SIGSTOP) instead of held mid-completion
/// (completions run in the embedder there, so a hold would not keep it busy).
fn on_processes() {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start_with(IoMethodKind::Worker, |s| {
        s.io_workers = 1;
        s.io_worker_try_cached = false; // the reads must be queued, not run at submit
    });
    let me = aio.register_issuer("waits").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    aio.inject_fault(FaultRule::new(FaultAction::Delay(Duration::ZERO)).offsets(8192..8193));
    let pid = aio.worker_pool().unwrap().workers[0].tid;
    let stopped = stop_worker_process(pid);
    // Queued for the stopped worker, and waited for: the waiter takes it back and runs it.
    let queued = me.acquire().unwrap().read(&f, 8192, IoBuf::new(4096));
    assert_pattern(&me.wait(queued).into_buf(), 8192);
    assert_eq!(executed_by(&aio, "waits", "waiter"), 1);
    assert_nothing_queued(&aio);
    drop(stopped);
    // The worker, running again, finds the stale queue bit's request taken back and skips it.
    // (Polled, not waited for: a waiting issuer would take this one back too.)
    let later = me.acquire().unwrap().read(&f, 16384, IoBuf::new(4096));
    while !later.is_done() {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_pattern(&me.wait(later).into_buf(), 16384);
    assert_eq!(aio.faults_injected(), 1, "the queued read's one execution");
    assert_eq!(executed_by(&aio, "waits", "worker 0"), 1);
    let done: u64 = aio
        .worker_pool()
        .unwrap()
        .workers
        .iter()
        .map(|w| w.ios_done)
        .sum();
    assert_eq!(done, 1, "the worker ran only the later read");
    // An issuer waiting for any of its I/Os, with the worker stopped, takes a queued one
    // back and runs it instead of sleeping until the worker is free.
    let stopped = stop_worker_process(pid);
    let direct = aio.open(&path, &OpenOptions::read().direct(true)).unwrap();
    let queued = me.acquire().unwrap().read(&direct, 24576, IoBuf::new(4096));
    me.wait_any();
    assert!(queued.is_done());
    assert_pattern(&me.wait(queued).into_buf(), 24576);
    assert_eq!(executed_by(&aio, "waits", "waiter"), 2);
    assert_nothing_queued(&aio);
    drop(stopped);
}

fn scenario(m: IoMethodKind) {
    if crate::support::on_processes() {
        return on_processes();
    }
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start_with(m, |s| {
        s.io_workers = 1;
        s.io_worker_try_cached = false; // the reads must be queued, not run at submit
    });
    let me = aio.register_issuer("waits").unwrap();
    // After the issuer: dropped first, so a failed assertion releases the held read before
    // the issuer's drop waits for it (else the test hangs instead of failing).
    let _release = ReleaseHeldOnDrop(aio.clone());
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    // Every completion of the read at 8192 is counted by a rule that changes nothing.
    aio.inject_fault(FaultRule::new(FaultAction::Delay(Duration::ZERO)).offsets(8192..8193));
    if m != IoMethodKind::Worker {
        let io = me.acquire().unwrap().read(&f, 8192, IoBuf::new(4096));
        assert_pattern(&me.wait(io).into_buf(), 8192);
        assert_eq!(aio.faults_injected(), 1, "executed once");
        return;
    }
    // The only worker is kept busy by a read held mid-completion.
    let busy = hold_the_worker(&aio, &me, &f);
    // Queued behind it, and waited for: the waiter runs it.
    let queued = me.acquire().unwrap().read(&f, 8192, IoBuf::new(4096));
    assert_pattern(&me.wait(queued).into_buf(), 8192);
    assert_eq!(executed_by(&aio, "waits", "waiter"), 1);
    assert_nothing_queued(&aio);
    aio.release_held();
    assert_pattern(&me.wait(busy).into_buf(), 0);
    // A read the worker runs (polled: a waiting issuer would run it itself): by the time it
    // is done, the worker has popped the stale entry before it and dropped it.
    let later = me.acquire().unwrap().read(&f, 16384, IoBuf::new(4096));
    while !later.is_done() {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_pattern(&me.wait(later).into_buf(), 16384);
    assert_eq!(
        aio.faults_injected(),
        2,
        "the hold, and the queued read's one execution"
    );
    assert_eq!(executed_by(&aio, "waits", "worker 0"), 2);
    // An issuer waiting for any of its I/Os, with the worker busy again, runs a queued one
    // itself instead of sleeping until the worker is free.
    let busy = hold_the_worker(&aio, &me, &f);
    // (O_DIRECT: a read that waits for the device. A buffered read the page cache may
    // serve is CPU work the workers spread over the CPUs, and stays theirs.)
    let direct = aio.open(&path, &OpenOptions::read().direct(true)).unwrap();
    let queued = me.acquire().unwrap().read(&direct, 24576, IoBuf::new(4096));
    me.wait_any();
    assert!(queued.is_done() && !busy.is_done());
    assert_pattern(&me.wait(queued).into_buf(), 24576);
    assert_eq!(executed_by(&aio, "waits", "waiter"), 2);
    assert_nothing_queued(&aio);
    aio.release_held();
    assert_pattern(&me.wait(busy).into_buf(), 0);
    assert_eq!(executed_by(&aio, "waits", "worker 0"), 3);
}

/// The pool's `queued` leaves out a request its waiter took back, though its entry (threads)
/// or its bit (processes, if a worker had already taken it) waits for the busy worker to drop
/// it: the view would otherwise show a request queued that nobody will run.
fn assert_nothing_queued(aio: &Aio) {
    let pool = aio.worker_pool().unwrap();
    assert_eq!(pool.queued, 0, "taken back, not queued: {pool:?}");
}

crate::for_every_method!(scenario);
