//! Acquire with every handle busy: the issuer reclaims finished handles, submits staged ones
//! and waits for the oldest in flight — it never deadlocks, even in batch mode. When every
//! handle holds a result an `InFlight` still claims, acquire keeps the oldest result for it
//! and starts the new I/O on its handle (`held_results_kept.rs`).
//! Guards against: an acquire that deadlocks with every handle busy (waiting for I/Os still staged
//! in its own batch, or never reclaiming finished detached ones); an acquire that sleeps for ever
//! when every handle is claimed by a live `InFlight`; and a handle given out twice, so a held
//! read returns another read's bytes; a `try_acquire` that found no handle for good once every
//! handle held a finished read nobody would collect (it never reclaimed them: found by a
//! caller-side attack, 2026-12-07).

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 1 << 20);
    let aio = start_with(m, |s| s.io_max_concurrency = 4);
    let me = aio.register_issuer("busy").unwrap();
    let f = aio.open(&path, &OpenOptions::read()).unwrap();
    // 40 detached reads through 4 handles, in and out of batch mode.
    for round in 0..2 {
        if round == 1 {
            me.begin_batch().unwrap();
        }
        for i in 0..20u64 {
            drop(me.acquire().unwrap().read(&f, i * 4096, IoBuf::new(4096)));
        }
        if round == 1 {
            me.end_batch();
        }
    }
    // Now claim all four and ask for a fifth: it waits for the oldest and keeps its result.
    let mut held: Vec<_> = (0..4u64)
        .map(|i| me.acquire().unwrap().read(&f, i * 4096, IoBuf::new(4096)))
        .collect();
    held.push(me.acquire().unwrap().read(&f, 4 * 4096, IoBuf::new(4096)));
    for (i, io) in held.into_iter().enumerate() {
        assert_pattern(&me.wait(io).into_buf(), i as u64 * 4096);
    }
    assert!(me.acquire().is_ok());
    // `try_acquire`, which never waits, still reclaims what finished with nobody to collect
    // it: every handle's read dropped in flight and finished, then each handle taken again
    // without an `acquire` between.
    let dropped: Vec<_> = (0..4u64)
        .map(|i| {
            let h = me.try_acquire().unwrap().expect("an idle handle");
            h.read(&f, i * 4096, IoBuf::new(4096)).wait_ref()
        })
        .collect();
    for w in dropped {
        aio.wait(w).unwrap();
    }
    let again: Vec<_> = (0..4u64)
        .map(|i| {
            let h = me.try_acquire().unwrap();
            let h = h.expect("a finished, uncollected read's handle is reclaimed");
            h.read(&f, i * 4096, IoBuf::new(4096))
        })
        .collect();
    // All four held: a fifth `try_acquire` never waits; it finds a handle only by keeping a
    // finished read's result.
    let fifth = me.try_acquire().unwrap().is_some();
    assert!(!fifth || again.iter().any(|io| io.is_done()));
    for (i, io) in again.into_iter().enumerate() {
        assert_pattern(&me.wait(io).into_buf(), i as u64 * 4096);
    }
}

crate::for_every_method!(scenario);
