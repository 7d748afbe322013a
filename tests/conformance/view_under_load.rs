//! Snapshots taken while eight issuers hammer I/O never show a torn or impossible row: each
//! I/O's offset encodes its length, so a row mixing two I/Os is caught; states, nulls and
//! raw results are consistent; every row names an issuer whose thread id matches; and under
//! worker, rows executed by workers still name the issuer, not the worker.
//! Guards against: a view that reads a handle while it is being reused, so a row mixes two I/Os'
//! offset and length, or shows a raw result in a state that has none (or none where it should);
//! rows attributed to the wrong issuer or thread id; and, under worker, a row naming the worker
//! that ran the I/O instead of its issuer.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

const STATES: &[&str] = &[
    "HANDED_OUT",
    "DEFINED",
    "STAGED",
    "SUBMITTED",
    "COMPLETED_IO",
    "COMPLETED_SHARED",
    "COMPLETED_LOCAL",
];

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = d.path().join("load");
    std::fs::write(&path, vec![1u8; 40 << 20]).unwrap();
    // The file is cached: with the default, the worker method would read it all in the
    // issuers, and the view would never show a worker executing.
    let aio = start_with(m, |s| s.io_worker_try_cached = false);
    let stop = AtomicBool::new(false);
    let mut seen = 0usize;
    let mut by_worker = 0usize;
    // Stops the issuers even if an assertion below fails (the scope would wait for them).
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let mut issuers = Vec::new();
        for t in 0..8u64 {
            let (aio, path, stop) = (aio.clone(), path.clone(), &stop);
            issuers.push(s.spawn(move || {
                let me = aio.register_issuer(&format!("load-{t}")).unwrap();
                let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
                let mut k = 1 + t;
                while !stop.load(Ordering::Relaxed) {
                    me.begin_batch().unwrap();
                    let ios: Vec<_> = (0..8)
                        .map(|_| {
                            k = k % 32 + 1;
                            // offset = k MiB + t * 4 KiB, length = k * 512: the view must agree.
                            let (off, len) = (k << 20 | t << 12, k as usize * 512);
                            let h = me.acquire().unwrap();
                            if k % 3 == 0 {
                                h.write(&f, off, IoBuf::new(len))
                            } else {
                                h.read(&f, off, IoBuf::new(len))
                            }
                        })
                        .collect();
                    me.end_batch();
                    for io in ios {
                        me.wait(io).check().unwrap();
                    }
                }
            }));
        }
        // Snapshot until enough rows were checked (no time limit: the issuers run until told).
        let mut snapshots = 0;
        while snapshots < 300 || seen < 3000 || (m == IoMethodKind::Worker && by_worker == 0) {
            assert!(
                !issuers.iter().any(|t| t.is_finished()),
                "an issuer thread died"
            );
            snapshots += 1;
            let tids: HashMap<String, i32> =
                aio.waits().into_iter().map(|w| (w.issuer, w.tid)).collect();
            for r in aio.aios() {
                seen += 1;
                assert!(STATES.contains(&r.state.as_str()), "{r:?}");
                assert!(r.issuer.starts_with("load-"), "{r:?}");
                if let Some(tid) = tids.get(&r.issuer) {
                    assert_eq!(*tid, r.tid, "{r:?}");
                }
                if r.state == "HANDED_OUT" {
                    assert!(
                        r.operation.is_none() && r.off.is_none() && r.raw_result.is_none(),
                        "{r:?}"
                    );
                    continue;
                }
                let (off, len) = (r.off.unwrap(), r.length.unwrap());
                assert_eq!(off >> 20, len / 512, "torn row: {r:?}");
                assert_eq!(
                    r.issuer,
                    format!("load-{}", (off >> 12) & 0xff),
                    "row names the wrong issuer: {r:?}"
                );
                let completed = r.state.starts_with("COMPLETED");
                assert_eq!(r.raw_result.is_some(), completed, "{r:?}");
                if completed {
                    assert_eq!(r.raw_result, Some(len as i32), "{r:?}");
                }
                if r.executor.starts_with("worker") {
                    by_worker += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(seen > 0, "the view saw I/O in flight");
    if m == IoMethodKind::Worker {
        assert!(
            by_worker > 0,
            "rows executed by workers were seen and named their issuer"
        );
    }
}

crate::for_every_method!(scenario);
