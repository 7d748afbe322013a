//! `wait_any` waits for an I/O the caller will redeem: one dropped in flight and finished
//! does not count (it is reclaimed). Found by the soak test: a loop of "start, `wait_any`,
//! redeem what is done" spun for ever once a dropped I/O had finished, because `wait_any`
//! kept returning at once while none of the caller's I/Os was done.
//! Guards against: `wait_any` counting a finished I/O the caller dropped, so it returns at once
//! with none of the caller's I/Os done and a "start, `wait_any`, redeem" loop spins for ever; and
//! the dropped I/O's handle never reclaimed.

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoBuf, IoMethodKind, OpenOptions};
use std::time::Duration;

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let aio = start(m);
    let me = aio.register_issuer("any").unwrap();
    // After the issuer, so dropped before it: a failure releases the hold its drop waits for.
    let _release = ReleaseHeldOnDrop(aio.clone());
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    // A read dropped in flight, finished.
    let dropped = me.acquire().unwrap().read(&f, 0, IoBuf::new(4096));
    let w = dropped.wait_ref();
    drop(dropped);
    aio.wait(w).unwrap();
    // A read of ours held in flight for a while.
    aio.inject_fault(
        FaultRule::new(FaultAction::Hold)
            .offsets(8192..8193)
            .times(1),
    );
    // Released after a while, and again every 20 ms until `wait_any` has returned: a hold
    // lets go only at a release after it began, and on a loaded machine the read may reach
    // its hold after any given release (one release alone then hangs the test).
    let waited = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let releaser = {
        let aio = aio.clone();
        let waited = std::sync::Arc::clone(&waited);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            while !waited.load(std::sync::atomic::Ordering::SeqCst) {
                aio.release_held();
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let ours = me.acquire().unwrap().read(&f, 8192, IoBuf::new(4096));
    me.wait_any();
    waited.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        ours.is_done(),
        "wait_any returned with none of the caller's I/Os done"
    );
    assert_pattern(&me.wait(ours).into_buf(), 8192);
    releaser.join().unwrap();
    assert_eq!(me.in_flight(), 0, "the dropped read was reclaimed");
}

crate::for_every_method!(scenario);
