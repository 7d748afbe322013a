//! Foreign completion: while the issuer is blocked elsewhere (here on a channel), or busy
//! computing without a system call, another thread waiting on its I/O gets it completed —
//! under io_uring by reaping the issuer's ring itself, under worker by the worker. The shared
//! callback records which thread ran it. Guards against: an issuer that blocks stalling
//! everyone waiting on its I/Os; and, under io_uring, a busy issuer whose ring's task work
//! (cooperative: no interrupt per completion) would never run while it computes.

use crate::support::*;
use dbaio::{Aio, HandleCallbacks, IoBuf, IoContext, IoMethodKind, IoResult, OpenOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

struct RecordThread(Arc<Mutex<Vec<String>>>);

impl HandleCallbacks for RecordThread {
    fn name(&self) -> &'static str {
        "record-thread"
    }
    fn complete_shared(&self, _io: &IoContext<'_>, prior: IoResult, _data: u8) -> IoResult {
        let t = std::thread::current();
        self.0
            .lock()
            .unwrap()
            .push(t.name().unwrap_or("?").to_string());
        prior
    }
}

fn scenario(m: IoMethodKind) {
    one(m, false);
    one(m, true);
}

/// `spin`: the issuer spins on an atomic flag in user space instead of blocking.
fn one(m: IoMethodKind, spin: bool) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut s = settings(m);
    // The read must reach a worker: a page-cache hit would otherwise run in the issuer.
    s.io_worker_try_cached = false;
    let mut b = Aio::builder(s);
    let cb = b.callback(RecordThread(Arc::clone(&seen))).unwrap();
    let aio = b.start().unwrap();
    let (to_issuer, issuer_rx) = mpsc::channel::<()>();
    let go_on = Arc::new(AtomicBool::new(false));
    let go_on2 = Arc::clone(&go_on);
    let (refs_tx, refs_rx) = mpsc::channel();
    let a2 = aio.clone();
    let issuer = std::thread::Builder::new()
        .name("issuer".into())
        .spawn(move || {
            let me = a2.register_issuer("blocked").unwrap();
            // O_DIRECT when spinning: a device completion, whose task work io_uring posts
            // at the issuer's next entry into the kernel (a page-cache hit completes at
            // submit and would test nothing).
            let f = a2.open(&path, &OpenOptions::read().direct(spin)).unwrap();
            let mut h = me.acquire().unwrap();
            h.add_callback(cb, 0).unwrap();
            let io = h.read(&f, 4096, IoBuf::new(4096));
            refs_tx.send(io.wait_ref()).unwrap();
            if spin {
                // Busy: no system call until told to go on (the waiter has its I/O by then).
                while !go_on2.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            } else {
                issuer_rx.recv().unwrap(); // blocked, not reaping anything
            }
            let c = me.wait(io);
            c.check().unwrap();
            assert_pattern(&c.into_buf(), 4096);
        })
        .unwrap();
    let wref = refs_rx.recv().unwrap();
    std::thread::Builder::new()
        .name("waiter".into())
        .spawn(move || aio.wait(wref).unwrap())
        .unwrap()
        .join()
        .unwrap();
    let completer = seen.lock().unwrap()[0].clone();
    match m {
        IoMethodKind::Sync => assert_eq!(completer, "issuer"),
        // A worker thread, or the waiter itself if it found the read still queued and ran
        // it; with worker processes, the pool's completer thread in this process (the
        // callback's code lives here) or the waiter, which completes what it waits for.
        IoMethodKind::Worker => assert!(
            completer.starts_with("dbaio-io-worker")
                || completer == "waiter"
                || (crate::support::on_processes() && completer == "dbaio-io-completer"),
            "{completer}"
        ),
        IoMethodKind::IoUring => {
            assert_eq!(completer, "waiter", "the waiter reaped the issuer's ring")
        }
        // The waiter moved the simulated clock on and executed the read itself.
        IoMethodKind::Sim => assert_eq!(completer, "waiter"),
    }
    go_on.store(true, Ordering::Release);
    to_issuer.send(()).unwrap();
    issuer.join().unwrap();
}

crate::for_every_method!(scenario);
