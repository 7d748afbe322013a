//! The handshake between a lock-free hit and an evictor, generic over the atomics so the
//! model checker runs exactly this code (see `handle/atomics.rs`).
//!
//! A hit publishes the buffer in one of its issuer's hit-pin slots, then reads the buffer's
//! state; an evictor marks the buffer RETAGGING, then reads the hit-pin slots. A sequentially
//! consistent fence sits between each side's write and read (Dekker's pattern), so one of the
//! two sees the other: the hit backs off (it sees RETAGGING or an invalid buffer) or the
//! evictor backs off (it sees the pin). They never both go on. See `docs/design.md`,
//! "Buffer pool".

use super::pool::{IO_IN_PROGRESS, REFCOUNT_MASK, RETAGGING, TAG_VALID, VALID};
use crate::handle::atomics::{Fence, Word32, Word64};
use std::sync::atomic::Ordering;

/// An empty hit-pin slot.
pub(crate) const NO_BUFFER: u32 = u32::MAX;

/// The hit's half: publishes buffer `b` in hit-pin slot `pin`, then reads `state`. Returns
/// the state seen if the buffer is valid, tagged and not being retagged (the pin holds);
/// otherwise withdraws the pin and returns `None`.
#[inline]
pub(crate) fn publish_hit<P: Word32, S: Word64>(
    pin: &P,
    b: u32,
    state: &S,
    fence: Fence,
) -> Option<u64> {
    pin.store(b, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    let s = state.load(Ordering::Acquire);
    if s & (VALID | TAG_VALID | RETAGGING) == VALID | TAG_VALID {
        return Some(s);
    }
    pin.store(NO_BUFFER, Ordering::Release);
    None
}

/// The evictor's half, for a victim the evictor has pinned: if the evictor's pin is the only
/// one and no I/O is on it, marks it RETAGGING, then asks `hit_pinned` whether a hit pin
/// names it. True: the victim is the evictor's to retag (RETAGGING stays until the retag).
/// False: someone has it; RETAGGING, if set, is withdrawn.
#[inline]
pub(crate) fn reserve_for_retag<S: Word64>(
    state: &S,
    hit_pinned: impl FnOnce() -> bool,
    fence: Fence,
) -> bool {
    let s = state.load(Ordering::Acquire);
    if s & REFCOUNT_MASK == 1
        && s & (IO_IN_PROGRESS | RETAGGING) == 0
        && state
            .compare_exchange(s, s | RETAGGING, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    {
        fence(Ordering::SeqCst);
        if !hit_pinned() {
            return true;
        }
        state.fetch_and(!RETAGGING, Ordering::AcqRel);
    }
    false
}

/// The model check: a hit and an evictor racing for one buffer never both win, under every
/// interleaving and weak-memory outcome loom explores.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::handle::atomics::model::LOOM_FENCE;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
    use loom::thread;

    #[test]
    fn a_hit_and_an_evictor_never_both_win() {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        loom::model(|| {
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            const B: u32 = 7;
            // Valid, tagged, pinned once (by the evictor, which found it in the sweep).
            let state = Arc::new(AtomicU64::new(VALID | TAG_VALID | 1));
            let pin = Arc::new(AtomicU32::new(NO_BUFFER));
            let hit_won = Arc::new(AtomicBool::new(false));
            let (s2, p2, h2) = (Arc::clone(&state), Arc::clone(&pin), Arc::clone(&hit_won));
            let hit = thread::spawn(move || {
                if publish_hit(&*p2, B, &*s2, LOOM_FENCE).is_some() {
                    h2.store(true, Ordering::SeqCst);
                }
            });
            let evicted = reserve_for_retag(
                &*state,
                || Word32::load(&*pin, Ordering::SeqCst) == B,
                LOOM_FENCE,
            );
            hit.join().unwrap();
            assert!(
                !(evicted && hit_won.load(Ordering::SeqCst)),
                "the evictor retags a buffer a hit holds"
            );
        });
        eprintln!(
            "loom: a_hit_and_an_evictor_never_both_win explored {} executions",
            RUNS.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
}
