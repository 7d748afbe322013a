//! `io_worker_batch_scheduling`: the worker method's workers, threads or processes, run under
//! `SCHED_BATCH` when it is on (the default) and under the normal policy when it is off; the
//! issuer's own thread is never changed. Guards against: the setting not reaching one kind
//! of worker (a replacement or a process started by exec missing it), and the policy leaking
//! into the embedder's threads.

use dbaio::{Aio, IoBuf, IoMethodKind, OpenOptions, Settings, settings::IoWorkerKind};
use std::time::{Duration, Instant};

/// The scheduling policy of thread or process `tid`.
fn policy(tid: i32) -> i32 {
    // SAFETY: sched_getscheduler takes a thread id and reads nothing else.
    unsafe { libc::sched_getscheduler(tid) }
}

fn workers_run_under(kind: IoWorkerKind, batch: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, vec![7u8; 65536]).unwrap();
    let aio = Aio::start(Settings {
        io_method: IoMethodKind::Worker,
        io_worker_kind: kind,
        io_workers: 2,
        io_worker_batch_scheduling: batch,
        ..Settings::default()
    })
    .unwrap();
    // A read through the pool, so that every worker has started serving.
    let me = aio.register_issuer("reader").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    me.wait(me.acquire().unwrap().read(&f, 0, IoBuf::new(4096)))
        .check()
        .unwrap();
    let want = if batch {
        libc::SCHED_BATCH
    } else {
        libc::SCHED_OTHER
    };
    // A worker sets its policy as it starts serving; a process may still be getting there.
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let pool = aio.worker_pool().unwrap();
        let tids: Vec<i32> = pool.workers.iter().map(|w| w.tid).collect();
        let policies: Vec<i32> = tids.iter().map(|&t| policy(t)).collect();
        if tids.len() == 2 && tids.iter().all(|&t| t > 0) && policies.iter().all(|&p| p == want) {
            break;
        }
        assert!(
            Instant::now() < end,
            "{kind:?}, batch {batch}: workers {tids:?} run under policies {policies:?}, \
             not {want}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: gettid has no preconditions.
    let me_tid = unsafe { libc::gettid() };
    assert_eq!(policy(me_tid), libc::SCHED_OTHER, "the embedder's thread");
}

#[test]
fn worker_threads_run_under_the_policy_the_setting_names() {
    workers_run_under(IoWorkerKind::Thread, true);
    workers_run_under(IoWorkerKind::Thread, false);
}

#[test]
fn worker_processes_run_under_the_policy_the_setting_names() {
    workers_run_under(IoWorkerKind::Process, true);
    workers_run_under(IoWorkerKind::Process, false);
}
