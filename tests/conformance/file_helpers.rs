//! The issuer's wait-for-it helpers on a file — `fsync`, `fdatasync`, `ftruncate`,
//! `fallocate` — run in the caller's thread where they can (as slice I/O does) and keep
//! everything the full path gives: each does its job (the file's length after `fallocate`
//! and `ftruncate`); each is in the aios view while it runs, with the issuer's wait event; each
//! is counted in the issuer's statistics; a failure reads word for word as the full path's
//! (forced by arming a fault rule that matches nothing); no handle is left busy; and a handle
//! held by the caller makes a helper an API violation, as on the full path.
//! Guards against: a helper that skips its work or reports the wrong length, one missing from the
//! view or the statistics while it runs inline, an inline failure worded otherwise than the full
//! path's, and a helper that slips past a handle the caller holds.

use crate::support::*;
use dbaio::{FaultAction, FaultRule, IoMethodKind, Op, OpenOptions};
use std::sync::atomic::{AtomicBool, Ordering};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = d.path().join("helpers");
    let aio = start(m);

    // Each does its job, and each is counted once.
    let me = aio.register_issuer("helpers").unwrap();
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    me.write_all_from(&f, 0, &[5u8; 8192]).unwrap();
    me.fdatasync(&f).unwrap();
    me.fsync(&f).unwrap();
    me.fallocate(&f, 0, 1 << 20).unwrap();
    assert_eq!(f.len().unwrap(), 1 << 20);
    me.ftruncate(&f, 12345).unwrap();
    assert_eq!(f.len().unwrap(), 12345);
    let mut back = [0u8; 8192];
    me.read_exact_into(&f, 0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 5));
    let rows = aio.stats();
    let row = rows.iter().find(|r| r.issuer == "helpers").unwrap();
    for op in ["fdatasync", "fsync", "fallocate", "ftruncate"] {
        let o = row.ops.iter().find(|o| o.op == op);
        assert_eq!(
            o.map(|o| (o.count, o.errors)),
            Some((1, 0)),
            "{op}: {row:?}"
        );
    }
    assert!(
        aio.aios().is_empty(),
        "a handle left busy: {:?}",
        aio.aios()
    );

    // Seen while it runs: another issuer writes and syncs until the view has shown a sync.
    // (On the simulated disk the helpers take the full path, where the issuer waits for the
    // I/O's completion.)
    let sync_wait = if m == IoMethodKind::Sim {
        "AioIoCompletion"
    } else {
        "DataFileSync"
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let syncer = s.spawn(|| {
            let me = aio.register_issuer("syncer").unwrap();
            let f = aio
                .open(d.path().join("synced"), &OpenOptions::read_write())
                .unwrap();
            let data = vec![9u8; 64 << 10];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                me.write_all_from(&f, (n % 16) * (64 << 10), &data).unwrap();
                me.fdatasync(&f).unwrap();
                n += 1;
            }
        });
        let (mut row_seen, mut wait_seen) = (false, false);
        eventually(120, "a running fdatasync in the view", || {
            assert!(!syncer.is_finished(), "the syncer died");
            for r in aio.aios().into_iter().filter(|r| r.issuer == "syncer") {
                if r.state == "SUBMITTED" && r.operation.as_deref() == Some("fdatasync") {
                    assert_eq!(r.raw_result, None, "{r:?}");
                    row_seen = true;
                }
            }
            wait_seen |= waits_on(&aio, "syncer", sync_wait);
            row_seen && wait_seen
        });
        stop.store(true, Ordering::Relaxed);
    });

    // A failure (truncating a file opened read-only) reads as on the full path.
    let ro = aio.open(&path, &OpenOptions::read()).unwrap();
    let inline_err = me.ftruncate(&ro, 4096).unwrap_err();
    aio.inject_fault(FaultRule::new(FaultAction::Errno(libc::EIO)).op(Op::Unlink));
    let full_err = me.ftruncate(&ro, 4096).unwrap_err();
    aio.clear_faults();
    assert_eq!(inline_err.to_string(), full_err.to_string());
    assert!(
        inline_err.to_string().contains("could not truncate file"),
        "{inline_err}"
    );
    assert!(inline_err.to_string().contains("helpers"), "{inline_err}");
    assert_eq!(
        f.len().unwrap(),
        12345,
        "a failed truncate changed the file"
    );
    let rows = aio.stats();
    let row = rows.iter().find(|r| r.issuer == "helpers").unwrap();
    let o = row.ops.iter().find(|o| o.op == "ftruncate").unwrap();
    assert_eq!((o.count, o.errors), (3, 2), "{row:?}");

    // A handle held by the caller: refused, as on the full path.
    let h = me.acquire().unwrap();
    let e = me.fdatasync(&f).unwrap_err();
    assert!(e.to_string().contains("one I/O handle"), "{e}");
    drop(h);
    me.fdatasync(&f).unwrap();
    assert!(
        aio.aios().is_empty(),
        "a handle left busy: {:?}",
        aio.aios()
    );
}

crate::for_every_method!(scenario);
