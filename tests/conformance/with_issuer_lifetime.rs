//! The issuers `Aio::with_issuer` keeps for each thread, over the subsystem's life: they do
//! not keep it alive, and a panic does not leave one in batch mode.
//! Guards against (both found by a caller-side attack, 2026-12-07): a thread that had once
//! called `with_issuer` keeping the whole subsystem — its threads, worker processes, socket
//! and memory — after the engine let go of every `Aio`, `File`, `Issuer` and `Ticket`, until
//! that thread ended (a pool's threads may never end: an engine reopening its database on
//! one leaked a subsystem per reopen); the I/Os such a thread's issuer still held (staged in a
//! batch, started and dropped) lost when the subsystem then goes; and a panic inside
//! `with_issuer` after `begin_batch` leaving the thread's issuer in batch mode, so that the
//! thread's next task staged its I/Os for good and a ticket on them never completed; and the
//! last reference going on the thread that completes an I/O (a ticket dropped by its future's
//! waker, with the thread's issuer parked elsewhere): the subsystem's drop waited there for
//! that very I/O, for ever (found by the attack on the first fix); and an issuer parked on
//! the library's own notifier thread by an error callback, which hung the drop; and a nested
//! call's caught panic ending the outer call's batch.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};
use std::sync::mpsc;
use std::time::Duration;

/// A pool thread writes through `with_issuer`, leaving a write staged in an open batch, and
/// stays alive; the engine then drops everything it holds. The subsystem goes at once (its
/// socket file is removed), the staged write lands first, the file is closed (its handle,
/// never reclaimed by the parked issuer, kept it open: found by the next attack), and the
/// thread can then use a new subsystem.
fn does_not_keep_the_subsystem(m: IoMethodKind) {
    let Watched {
        d,
        path,
        socket,
        aio,
        disk,
        file: f,
    } = watched(m);
    let (to_pool, tasks) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
    let (done, finished) = mpsc::channel::<()>();
    let pool_thread = std::thread::Builder::new()
        .name("pool-0".into())
        .spawn(move || {
            for task in tasks {
                task();
                done.send(()).unwrap();
            }
        })
        .unwrap();
    let wait_task = || {
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("the pool thread's task did not finish (hang)")
    };
    {
        let (aio, f) = (aio.clone(), f.clone());
        to_pool
            .send(Box::new(move || {
                aio.with_issuer(|iss| {
                    iss.write_all_at(&f, 0, IoBuf::from_slice(&[1u8; 4096]))
                        .unwrap();
                    // Left staged in an open batch when the call returns.
                    iss.begin_batch().unwrap();
                    drop(
                        iss.acquire()
                            .unwrap()
                            .write(&f, 4096, IoBuf::from_slice(&[2u8; 4096])),
                    );
                    // (sync and io_uring run a buffered write at once, batch or not)
                    assert!(iss.staged() <= 1);
                })
                .unwrap();
            }))
            .unwrap();
    }
    wait_task();
    assert!(
        socket.exists(),
        "the socket is served while the subsystem runs"
    );
    drop(f);
    drop(aio);
    assert!(
        !socket.exists(),
        "the subsystem outlived every reference the engine held (kept by the pool thread's issuer)"
    );
    let open = descriptors_of(&path);
    assert_eq!(
        open, 0,
        "the file stayed open after the subsystem went (its staged write's handle was never reclaimed)"
    );
    let written = written(disk.as_ref(), &path);
    assert_eq!(written.len(), 8192, "the staged write was lost");
    assert!(written[..4096].iter().all(|&b| b == 1));
    assert!(
        written[4096..].iter().all(|&b| b == 2),
        "the staged write was lost"
    );
    // The same thread, with a new subsystem.
    let aio = start(m);
    let again = d.path().join("again");
    let f = aio.open(&again, &OpenOptions::read_write()).unwrap();
    {
        let (aio, f) = (aio.clone(), f.clone());
        to_pool
            .send(Box::new(move || {
                aio.with_issuer(|iss| iss.write_all_at(&f, 0, IoBuf::from_slice(b"again")))
                    .unwrap()
                    .unwrap();
            }))
            .unwrap();
    }
    wait_task();
    assert_eq!(contents(&aio, &again), b"again");
    drop(to_pool);
    pool_thread.join().unwrap();
}

/// A task panics inside `with_issuer` after `begin_batch`; the thread catches it (as a pool
/// does) and runs its next task, a write turned into a ticket: it is submitted, not staged
/// (so that a future on it completes without a wait to run it), and the staged write of the
/// panicked task landed too.
fn a_panic_ends_the_batch(m: IoMethodKind) {
    let d = dir();
    let path = d.path().join("written");
    let aio = start(m);
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    let (aio2, f2) = (aio.clone(), f.clone());
    let pool_thread = std::thread::spawn(move || {
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            aio2.with_issuer(|iss| {
                iss.begin_batch().unwrap();
                drop(
                    iss.acquire()
                        .unwrap()
                        .write(&f2, 0, IoBuf::from_slice(&[7u8; 4096])),
                );
                panic!("the task fails mid-batch");
            })
        }));
        assert!(panicked.is_err());
        let (in_batch, staged, ticket) = aio2
            .with_issuer(|iss| {
                let ticket = iss
                    .acquire()
                    .unwrap()
                    .write(&f2, 4096, IoBuf::from_slice(&[8u8; 4096]))
                    .into_ticket();
                (iss.in_batch(), iss.staged(), ticket)
            })
            .unwrap();
        assert!(
            !in_batch,
            "the panic left the thread's issuer in batch mode"
        );
        assert_eq!(staged, 0, "the next task's write stays staged");
        ticket.wait().check().unwrap();
    });
    pool_thread.join().unwrap();
    let written = contents(&aio, &path);
    assert_eq!(written.len(), 8192);
    assert!(
        written[..4096].iter().all(|&b| b == 7),
        "the panicked task's write"
    );
    assert!(written[4096..].iter().all(|&b| b == 8));
}

/// A nested `with_issuer` call panics and the outer call's closure catches it, with a batch
/// the outer call opened: the batch stays open with its staged write, for the outer code to
/// end, staging what it staged (the nested call's guard ended it, submitting the outer
/// batch early: found by a caller-side attack, 2026-12-07); the outer code's `end_batch`
/// then submits it.
fn a_nested_panic_leaves_the_outer_batch(m: IoMethodKind) {
    let d = dir();
    let path = d.path().join("written");
    let aio = start(m);
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    let (in_batch, staged) = aio
        .with_issuer(|iss| {
            iss.begin_batch().unwrap();
            let staged_write = iss
                .acquire()
                .unwrap()
                .write(&f, 0, IoBuf::from_slice(&[5u8; 4096]))
                .into_ticket();
            let staged_before = iss.staged();
            let inner = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                aio.with_issuer(|_| panic!("a nested task fails")).unwrap()
            }));
            assert!(inner.is_err());
            let seen = (iss.in_batch(), (staged_before, iss.staged()));
            iss.end_batch();
            staged_write.wait().check().unwrap();
            seen
        })
        .unwrap();
    assert!(in_batch, "the nested panic ended the outer call's batch");
    assert_eq!(staged.1, staged.0, "the outer batch was submitted early");
    assert_eq!(contents(&aio, &path), vec![5u8; 4096]);
}

/// The last counted reference is a ticket that its future's waker drops: the waker runs on
/// the thread completing the ticket's write (a worker, with a delay injected so that the
/// future is polled first), and the thread's issuer that started it is parked on another
/// thread. The subsystem goes (its socket file is removed) and the write is on disk. Before,
/// the drop ran on the completing thread and waited for the I/O that thread was completing.
/// Where the write is done before the first poll (sync, io_uring's buffered write, sim) the
/// moment cannot be reached, and the scenario checks only that everything goes.
fn the_last_reference_can_go_on_the_thread_completing_an_io(m: IoMethodKind) {
    use std::future::Future;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Wake, Waker};
    /// Drops the ticket it holds when woken; remembers a wake that came before it held one.
    struct DropOnWake(Mutex<(bool, Option<dbaio::Ticket>)>);
    impl Wake for DropOnWake {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            let ticket = {
                let mut g = self.0.lock().unwrap();
                g.0 = true;
                g.1.take()
            };
            drop(ticket);
        }
    }
    let Watched {
        d: _d,
        path,
        socket,
        aio,
        disk,
        file: f,
    } = watched(m);
    aio.inject_fault(
        dbaio::FaultRule::new(dbaio::FaultAction::Delay(Duration::from_millis(100)))
            .op(dbaio::Op::Writev)
            .on_file(&f)
            .times(1),
    );
    let (tickets, ticket) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let parker = {
        let (aio, f) = (aio.clone(), f.clone());
        std::thread::spawn(move || {
            let t = aio
                .with_issuer(|iss| {
                    iss.acquire()
                        .unwrap()
                        .write(&f, 0, IoBuf::from_slice(&[5u8; 8192]))
                        .into_ticket()
                })
                .unwrap();
            drop((aio, f));
            tickets.send(t).unwrap();
            // Keeps its parked issuer until the test is done.
            let _ = released.recv_timeout(Duration::from_secs(60));
        })
    };
    let mut t = ticket.recv_timeout(Duration::from_secs(60)).unwrap();
    let waker = Arc::new(DropOnWake(Mutex::new((false, None))));
    let w = Waker::from(Arc::clone(&waker));
    match std::pin::Pin::new(&mut t).poll(&mut Context::from_waker(&w)) {
        Poll::Ready(c) => {
            c.check().unwrap();
            drop(t);
        }
        Poll::Pending => {
            let mut g = waker.0.lock().unwrap();
            if g.0 {
                // Woken during the poll (worker processes: the poll found the result posted
                // and completed it on this thread): the moment is missed this time.
                drop(g);
                drop(t);
            } else {
                g.1 = Some(t);
            }
        }
    }
    drop((f, aio));
    let end = std::time::Instant::now() + Duration::from_secs(60);
    while socket.exists() {
        assert!(
            std::time::Instant::now() < end,
            "the subsystem's drop, run by the thread completing the ticket's write, never ended"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    release.send(()).unwrap();
    parker.join().unwrap();
    let written = written(disk.as_ref(), &path);
    assert!(written.len() == 8192 && written.iter().all(|&b| b == 5));
}

/// An error callback (run on the notifier's thread) reads through `with_issuer`; then the
/// engine drops everything. The drop ends and the subsystem goes. Before, the callback's
/// issuer was parked on the notifier's thread: the drop joined that thread, whose ending let
/// the issuer go, which waited for the drop — both for ever (found by a caller-side attack,
/// 2026-12-07; every method).
fn with_issuer_in_an_error_callback_leaves_the_drop_free(m: IoMethodKind) {
    let Watched {
        d: _d,
        socket,
        aio,
        file: f,
        ..
    } = watched(m);
    let me = aio.register_issuer("engine").unwrap();
    me.write_all_at(&f, 0, IoBuf::from_slice(&[7u8; 8192]))
        .unwrap();
    aio.inject_fault(
        dbaio::FaultRule::new(dbaio::FaultAction::Errno(libc::EIO))
            .op(dbaio::Op::Readv)
            .on_file(&f)
            .times(1),
    );
    let (said, heard) = mpsc::channel();
    let (aio2, f2) = (aio.clone(), f.clone());
    me.acquire()
        .unwrap()
        .read(&f, 0, IoBuf::new(4096))
        .on_error(move |_| {
            let again = aio2.with_issuer(|i| i.read_exact_at(&f2, 0, IoBuf::new(4096)));
            let _ = said.send(again.map(|r| r.map(|b| b[0])));
        });
    let again = heard.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(again.unwrap().unwrap(), 7);
    within(
        60,
        "the drop after with_issuer in an error callback",
        move || {
            drop((me, f, aio));
        },
    );
    // The callback's clones go as it returns, after its answer: maybe last, on the
    // notifier's thread (the drop then moves to a thread of its own).
    eventually(60, "the subsystem goes", || !socket.exists());
}

crate::for_every_method!(
    does_not_keep_the_subsystem,
    a_panic_ends_the_batch,
    a_nested_panic_leaves_the_outer_batch,
    the_last_reference_can_go_on_the_thread_completing_an_io,
    with_issuer_in_an_error_callback_leaves_the_drop_free
);

/// This process's descriptors open on `path`.
fn descriptors_of(path: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == path))
        .count()
}

/// A subsystem serving its view on a socket file (which goes when the subsystem does), with a
/// file `written` open for writing, and its simulated disk (to read the file on `sim` once
/// the subsystem is gone).
struct Watched {
    d: tempfile::TempDir,
    path: std::path::PathBuf,
    socket: std::path::PathBuf,
    aio: dbaio::Aio,
    disk: Option<dbaio::SimDisk>,
    file: dbaio::File,
}

fn watched(m: IoMethodKind) -> Watched {
    let d = dir();
    let path = d.path().join("written");
    let socket = d.path().join("aio.sock");
    let aio = start_with(m, |s| s.introspection_socket = Some(socket.clone()));
    let disk = aio.sim_disk();
    let file = aio.open(&path, &OpenOptions::read_write()).unwrap();
    Watched {
        d,
        path,
        socket,
        aio,
        disk,
        file,
    }
}

/// What `path` holds, on the simulated disk `disk` if there is one.
fn written(disk: Option<&dbaio::SimDisk>, path: &std::path::Path) -> Vec<u8> {
    match disk {
        Some(disk) => disk.contents(path).unwrap(),
        None => std::fs::read(path).unwrap(),
    }
}
