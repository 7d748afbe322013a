//! `Aio::waits` while another thread registers and drops issuers as fast as it can: every row
//! it returns is a whole issuer — a name and a thread id — never a slot caught between its
//! claim and its publication.
//! Guards against: what a caller-side attack found (2026-12-07): a slot is claimed before its
//! name and thread id are written, and `waits()` showed rows with an empty name and tid 0 (and,
//! a slot reused, could show the last owner's name beside the new thread's id).

use crate::support::*;
use dbaio::IoMethodKind;
use std::sync::atomic::{AtomicBool, Ordering};

fn scenario(m: IoMethodKind) {
    let aio = start(m);
    let _me = aio.register_issuer("looker").unwrap();
    let done = AtomicBool::new(false);
    let bad = std::thread::scope(|s| {
        let _stop = StopOnDrop(&done);
        s.spawn(|| {
            for k in 0..5000 {
                drop(aio.register_issuer(&format!("churn {k}")).unwrap());
            }
            done.store(true, Ordering::Relaxed);
        });
        let mut bad = Vec::new();
        while !done.load(Ordering::Relaxed) {
            bad.extend(
                aio.waits()
                    .into_iter()
                    .filter(|w| w.tid == 0 || w.issuer.is_empty()),
            );
        }
        bad
    });
    assert!(
        bad.is_empty(),
        "half-registered issuers in the view: {bad:?}"
    );
}

crate::for_every_method!(scenario);
