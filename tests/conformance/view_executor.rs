//! Who executes an I/O is in the view while it runs, not only once it has completed: the
//! issuer running its own I/O (`sync`), and a waiter that took a queued I/O back from the
//! worker queue and runs it (worker threads and processes). (io_uring's and sim's I/Os are
//! executed by the kernel and the simulated disk; a worker process executing a request is
//! `worker_processes`' `a_request_a_worker_process_runs_shows_its_worker`.)
//! Guards against: an I/O that a waiter ran itself for as long as an fsync takes shown as
//! SUBMITTED with executor `-` — "queued for a worker" with every worker idle — until it
//! completed (found by a caller-side attack, 2026-12-07: a real 160 ms fsync); here the
//! executing thread is stopped where it starts (`TestPoint::Executing`).

use crate::support::*;
use dbaio::{Aio, AioRow, IoBuf, IoMethodKind, OpenOptions, TestPoint, WaitRow};

/// The view's row of I/O `io_id`, and the waits, while a thread is stopped starting to
/// execute it.
fn row_while_stopped(aio: &Aio, io_id: impl Fn() -> u32 + Send) -> (Vec<AioRow>, Vec<WaitRow>) {
    let _release = ReleaseHoldOnDrop(aio, TestPoint::Executing);
    eventually(60, "a thread stopped starting an I/O", || {
        aio.held_at(TestPoint::Executing)
    });
    let id = io_id();
    let rows = aio.aios().into_iter().filter(|r| r.io_id == id).collect();
    (rows, aio.waits())
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start_with(m, |s| {
        s.io_workers = 1;
        s.io_worker_try_cached = false; // the reads must be queued, not run at submit
    });
    let me = aio.register_issuer("runs").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    match m {
        IoMethodKind::Sync => {
            // The issuer runs each I/O as it starts it.
            let id = std::sync::atomic::AtomicU32::new(u32::MAX);
            aio.hold_next(TestPoint::Executing);
            let rows = std::thread::scope(|t| {
                let looker = t.spawn(|| {
                    row_while_stopped(&aio, || id.load(std::sync::atomic::Ordering::SeqCst))
                });
                let h = me.acquire().unwrap();
                id.store(h.wait_ref().io_id(), std::sync::atomic::Ordering::SeqCst);
                let io = h.read(&f, 8192, IoBuf::new(4096));
                let (rows, _) = looker.join().unwrap();
                assert_pattern(&me.wait(io).into_buf(), 8192);
                rows
            });
            assert_running(&rows, "issuer");
        }
        IoMethodKind::Worker => {
            // The only worker kept from the queue: held mid-completion (threads) or stopped
            // (processes, whose completions run in the embedder).
            let _release = ReleaseHeldOnDrop(aio.clone());
            let (busy, stopped) = if on_processes() {
                let pid = aio.worker_pool().unwrap().workers[0].tid;
                (None, Some(stop_worker_process(pid)))
            } else {
                (Some(hold_the_worker(&aio, &me, &f)), None)
            };
            let queued = me.acquire().unwrap().read(&f, 8192, IoBuf::new(4096));
            let id = queued.wait_ref().io_id();
            aio.hold_next(TestPoint::Executing);
            let (rows, waits) = std::thread::scope(|t| {
                let looker = t.spawn(|| row_while_stopped(&aio, || id));
                // The wait takes the queued read back and runs it: stopped as it starts.
                assert_pattern(&me.wait(queued).into_buf(), 8192);
                looker.join().unwrap()
            });
            assert_running(&rows, "waiter");
            // Its issuer waits for the read by reading it, and says so.
            let w = waits
                .iter()
                .find(|w| w.issuer == "runs")
                .expect("the issuer's wait");
            assert_eq!(
                (w.wait_event.as_str(), w.waiting_on.as_str()),
                ("DataFileRead", format!("io {id}").as_str()),
                "{waits:?}"
            );
            drop(stopped);
            aio.release_held();
            if let Some(busy) = busy {
                assert_pattern(&me.wait(busy).into_buf(), 0);
            }
        }
        IoMethodKind::IoUring | IoMethodKind::Sim => {}
    }
}

fn assert_running(rows: &[AioRow], executor: &str) {
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].state.as_str(), rows[0].executor.as_str()),
        ("SUBMITTED", executor),
        "{rows:?}"
    );
}

crate::for_every_method!(scenario);
