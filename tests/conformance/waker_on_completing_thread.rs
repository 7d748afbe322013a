//! What a future's waker may do on the thread that completes its I/O (a worker, the worker
//! processes' completer, io_uring's watcher): it runs there before the I/O counts as
//! complete, so whatever it does must not leave the I/O half done or wait for it.
//! Guards against (found by a caller-side attack, 2026-12-07): a panicking waker leaving its
//! I/O in COMPLETED_IO for good, so that `Aio::shutdown`, every wait on the I/O and the
//! subsystem's drop waited for ever; and `Aio::shutdown` called from a waker waiting on the
//! completing thread for the very I/O that thread was completing (on sim, where the thread
//! waiting for the ticket completes it, that thread). Where the I/O is done before the first
//! poll (sync) the moment cannot be reached, and the scenarios check only that nothing hangs.

use crate::support::*;
use dbaio::{Aio, FaultAction, FaultRule, IoBuf, IoMethodKind, Issuer, Op, OpenOptions, Ticket};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// A subsystem (worker reads never served at submit) and a 64 KiB patterned file; a read of
/// its first 8 KiB as a ticket, delayed so that the poll comes first, and its issuer (whose
/// drop would wait for the read).
fn delayed_read(m: IoMethodKind) -> (tempfile::TempDir, Aio, dbaio::File, Issuer, Ticket) {
    let d = dir();
    let path = data_file(&d, "data", 1 << 16);
    let aio = start_with(m, |s| s.io_worker_try_cached = false);
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    if m == IoMethodKind::Sim {
        let data: Vec<u8> = (0..1u64 << 16).map(pattern_byte).collect();
        let me = aio.register_issuer("setup").unwrap();
        me.write_all_at(&f, 0, IoBuf::from_slice(&data)).unwrap();
    }
    aio.inject_fault(
        FaultRule::new(FaultAction::Delay(Duration::from_millis(100)))
            .op(Op::Readv)
            .on_file(&f)
            .times(1),
    );
    let me = aio.register_issuer("reader").unwrap();
    let t = me
        .acquire()
        .unwrap()
        .read(&f, 0, IoBuf::new(8192))
        .into_ticket();
    (d, aio, f, me, t)
}

/// A waker that panics on its first wake.
struct Panics(AtomicBool);

impl Wake for Panics {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.0.swap(true, Ordering::SeqCst) {
            panic!("a waker panics");
        }
    }
}

/// The waker panics where the I/O completes; the I/O completes all the same: the ticket
/// gets its bytes, and `shutdown` and the drop end.
fn a_panicking_waker_leaves_its_io_complete(m: IoMethodKind) {
    within(60, "a wait after a waker panicked", move || {
        let (_d, aio, f, me, mut t) = delayed_read(m);
        let panics = Arc::new(Panics(AtomicBool::new(false)));
        let waker = Waker::from(Arc::clone(&panics));
        match std::pin::Pin::new(&mut t).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(c) => assert_pattern(&c.into_buf(), 0),
            Poll::Pending => {
                // Woken where the I/O completes, not by a wait of this thread's (on sim
                // only a wait completes it: then the waker runs here).
                if m != IoMethodKind::Sim {
                    eventually(60, "the waker", || panics.0.load(Ordering::SeqCst));
                }
                assert_pattern(&t.wait().into_buf(), 0);
            }
        }
        aio.shutdown();
        drop((me, f, aio));
    });
}

/// Calls `Aio::shutdown` when woken, with the `Aio` it was given.
struct ShutsDown {
    aio: Mutex<Option<Aio>>,
    returned: AtomicBool,
}

impl Wake for ShutsDown {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(aio) = self.aio.lock().unwrap().take() {
            aio.shutdown();
            self.returned.store(true, Ordering::SeqCst);
        }
    }
}

/// The waker calls `Aio::shutdown` where the I/O completes: the call returns (new I/O is
/// refused from then on), the ticket gets its bytes, and the subsystem goes.
fn shutdown_from_a_waker_returns(m: IoMethodKind) {
    within(60, "shutdown from a waker", move || {
        let (_d, aio, f, me, mut t) = delayed_read(m);
        let wake = Arc::new(ShutsDown {
            aio: Mutex::new(Some(aio.clone())),
            returned: AtomicBool::new(false),
        });
        let waker = Waker::from(Arc::clone(&wake));
        let c = match std::pin::Pin::new(&mut t).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(c) => c,
            Poll::Pending => {
                // Woken where the I/O completes, not by a wait of this thread's (on sim
                // only a wait completes it: then the waker runs here).
                if m != IoMethodKind::Sim {
                    eventually(60, "the waker", || wake.aio.lock().unwrap().is_none());
                }
                t.wait()
            }
        };
        assert_pattern(&c.into_buf(), 0);
        if wake.aio.lock().unwrap().is_none() {
            eventually(60, "the waker's shutdown returns", || {
                wake.returned.load(Ordering::SeqCst)
            });
            assert!(aio.is_shut_down());
        }
        aio.shutdown();
        drop((me, f, aio, waker, wake));
    });
}

/// Drops the issuer it was given when woken.
struct DropsIssuer(Mutex<Option<Issuer>>);

impl Wake for DropsIssuer {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        drop(self.0.lock().unwrap().take());
    }
}

/// The waker drops the issuer that started its I/O, where the I/O completes: the issuer's
/// drop, which waits for its I/Os, must not wait there for the one that thread is
/// completing. The ticket gets its bytes; `shutdown` and the drop end.
fn a_waker_may_drop_the_issuer_that_started_its_io(m: IoMethodKind) {
    within(60, "a waker dropping the issuer", move || {
        let (_d, aio, f, me, mut t) = delayed_read(m);
        let wake = Arc::new(DropsIssuer(Mutex::new(Some(me))));
        let waker = Waker::from(Arc::clone(&wake));
        let c = match std::pin::Pin::new(&mut t).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(c) => c,
            Poll::Pending => {
                // Woken where the I/O completes (on sim only a wait completes it).
                if m != IoMethodKind::Sim {
                    eventually(60, "the waker", || wake.0.lock().unwrap().is_none());
                }
                t.wait()
            }
        };
        assert_pattern(&c.into_buf(), 0);
        aio.shutdown();
        drop((f, aio, waker, wake));
    });
}

crate::for_every_method!(
    a_panicking_waker_leaves_its_io_complete,
    shutdown_from_a_waker_returns,
    a_waker_may_drop_the_issuer_that_started_its_io,
);
