//! The error callbacks of detached I/Os (`InFlight::on_error`) at the subsystem's end: every
//! one queued has run when any `Aio::shutdown` returns, however many threads call it at
//! once, and when the drop of the last reference returns.
//! Guards against (found by a caller-side attack, 2026-12-07): concurrent shutdowns of which
//! only the first waited for the notifier thread (the others returned with 0 of 5 callbacks
//! run); and a drop of the last reference that did not wait for them at all (0 of 6 run; they
//! ran later, on a thread that outlived the subsystem, or never, if the engine then exited).

use crate::support::*;
use dbaio::{Aio, FaultAction, FaultRule, IoBuf, IoMethodKind, OpenOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const FAILING: usize = 5;

/// A subsystem whose reads past the first block fail, and `FAILING` such reads detached with
/// slow error callbacks that count themselves in `ran`.
fn failing_reads(m: IoMethodKind, ran: &Arc<AtomicUsize>) -> (tempfile::TempDir, Aio) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 16);
    let aio = start(m);
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    aio.inject_fault(
        FaultRule::new(FaultAction::Errno(libc::EIO))
            .on_file(&f)
            .offsets(8192..1 << 16),
    );
    let me = aio.register_issuer("detach").unwrap();
    for i in 0..FAILING as u64 {
        let ran = Arc::clone(ran);
        me.acquire()
            .unwrap()
            .read(&f, 8192 + i * 4096, IoBuf::new(4096))
            .on_error(move |_| {
                std::thread::sleep(Duration::from_millis(20));
                ran.fetch_add(1, Ordering::SeqCst);
            });
    }
    (d, aio)
}

/// Three threads call `shutdown` at once: each sees every callback run when it returns.
fn every_concurrent_shutdown_waits_for_the_callbacks(m: IoMethodKind) {
    let ran = Arc::new(AtomicUsize::new(0));
    let (_d, aio) = failing_reads(m, &ran);
    let seen: Vec<usize> = within(60, "three shutdowns", move || {
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (aio, ran) = (aio.clone(), Arc::clone(&ran));
                std::thread::spawn(move || {
                    aio.shutdown();
                    ran.load(Ordering::SeqCst)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(
        seen, [FAILING; 3],
        "callbacks run when each shutdown returned"
    );
}

/// The last reference dropped with callbacks queued: all have run when the drop returns.
fn the_last_drop_waits_for_the_callbacks(m: IoMethodKind) {
    let ran = Arc::new(AtomicUsize::new(0));
    let (_d, aio) = failing_reads(m, &ran);
    within(60, "the last drop", move || drop(aio));
    assert_eq!(ran.load(Ordering::SeqCst), FAILING);
}

crate::for_every_method!(
    every_concurrent_shutdown_waits_for_the_callbacks,
    the_last_drop_waits_for_the_callbacks,
);
