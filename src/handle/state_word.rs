//! The handle state word: its one mutator and its sleep, generic over the word (std's atomic
//! and futex in the subsystem, loom's in the model check below) so the model checker runs
//! exactly this code. The word holds the state in its low byte and `WAITERS` in bit 31: a
//! thread about to sleep sets the bit, re-checks, and sleeps only if the word is unchanged; a
//! transition clears the bit with its compare-and-swap and wakes sleepers if it was set. See
//! `docs/design.md`, "Handles", and docs/reliability.md, "Model checking".

use super::atomics::{Fence, FutexWord};
use super::bell::SAFETY_NET;
use super::slot::HandleState;
use std::sync::atomic::Ordering;

/// Set in the state word by a thread about to sleep on it; the next transition wakes it.
pub(crate) const WAITERS: u32 = 1 << 31;

/// Moves `word` from `from` to `to` if it holds `from` (a compare-and-swap: of two threads
/// racing to claim a STAGED handle, exactly one wins). `Err` carries the state found, and
/// nothing changed. Publishes everything written before it (release), keeps later writes
/// from overtaking it (a release fence, for readers that copy and re-check), and wakes
/// sleepers. Inlined so that the fence (a function pointer, loom's or std's) becomes a direct
/// call — for std's release fence, no instruction at all on x86.
#[inline]
pub(crate) fn transition<W: FutexWord>(
    word: &W,
    from: HandleState,
    to: HandleState,
    fence: Fence,
) -> Result<(), HandleState> {
    assert!(
        to.may_follow(from),
        "illegal handle state transition {} -> {}",
        from.name(),
        to.name()
    );
    let mut old = word.load(Ordering::Relaxed);
    loop {
        let found = HandleState::from_word(old);
        if found != from {
            return Err(found);
        }
        // The new word drops the waiter bit: whoever set it is woken below and sets it again
        // if it still has to wait.
        match word.compare_exchange_weak(old, to as u32, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => break,
            Err(now) => old = now,
        }
    }
    // Fields written after this (the next I/O's, once the handle is recycled) must not become
    // visible before the new state to a reader that copies the slot and then re-checks the
    // state (the aios view): the writer's half of a seqlock.
    fence(Ordering::Release);
    if old & WAITERS != 0 {
        word.wake_all();
    }
    Ok(())
}

/// Sleeps until the state differs from `seen` (or spuriously), for at most the safety net
/// ([`SAFETY_NET`]), if `same()` — the waiter's I/O is still the handle's — holds once the
/// waiter bit is set. The caller re-checks. True if the safety net ended the sleep (the
/// caller tells a slow I/O from a missed wake by what it finds).
///
/// `same` closes a gap the state alone leaves: between the caller's look and the bit, the
/// I/O may complete and the handle be recycled into the same state for its next I/O (a
/// LIFO idle list makes that quick), with no transition left to wake a sleeper on the old
/// one. The recycling bumps the generation before its transitions (release), and the bit's
/// read-modify-write orders after them or is seen by them: so either a transition wakes us
/// or `same` sees the new generation.
pub(crate) fn sleep_while<W: FutexWord>(
    word: &W,
    seen: HandleState,
    same: impl Fn() -> bool,
) -> bool {
    let w = word.fetch_or(WAITERS, Ordering::AcqRel) | WAITERS;
    if HandleState::from_word(w) != seen || !same() {
        return false;
    }
    word.wait_for(w, SAFETY_NET)
}

/// The model check: every interleaving (and weak-memory outcome loom explores) of waiters
/// and completers, on the real functions above. A waiter that is never woken is a deadlock
/// loom reports.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::handle::atomics::Word32;
    use crate::handle::atomics::model::{LOOM_FENCE, LoomFutex};
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicUsize;
    use loom::thread;

    fn wait_complete(w: &LoomFutex) {
        loop {
            let st = HandleState::from_word(w.load(Ordering::Acquire));
            if st.is_complete() {
                return;
            }
            let _ = sleep_while(w, st, || true);
        }
    }

    /// A waiter (or `waiters` of them, with loom's preemption bound `bound`) and a
    /// completer making the two completion transitions.
    fn waiters_wake(waiters: usize, bound: Option<usize>) -> usize {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
        let mut b = loom::model::Builder::new();
        b.preemption_bound = bound;
        b.check(move || {
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let w = Arc::new(LoomFutex::new(HandleState::Submitted as u32));
            let waiters: Vec<_> = (0..waiters)
                .map(|_| {
                    let w = Arc::clone(&w);
                    thread::spawn(move || wait_complete(&w))
                })
                .collect();
            transition(
                &*w,
                HandleState::Submitted,
                HandleState::CompletedIo,
                LOOM_FENCE,
            )
            .unwrap();
            transition(
                &*w,
                HandleState::CompletedIo,
                HandleState::CompletedShared,
                LOOM_FENCE,
            )
            .unwrap();
            for t in waiters {
                t.join().unwrap();
            }
        });
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn waiters_always_wake() {
        let one = waiters_wake(1, None);
        eprintln!("loom: waiters_always_wake, one waiter, explored {one} executions (all)");
        let two = waiters_wake(2, Some(2));
        eprintln!(
            "loom: waiters_always_wake, two waiters, explored {two} executions (preemption bound 2)"
        );
    }

    /// A waiter on one I/O of a handle that completes and is recycled into SUBMITTED for its
    /// next I/O before the waiter sets its bit: the waiter must see the new generation and
    /// not sleep on the next I/O (which here never completes: a sleep is a deadlock). Under
    /// the old rule (the state alone re-checked) loom reports that deadlock.
    #[test]
    fn a_waiter_never_sleeps_on_the_handles_next_io() {
        use loom::sync::atomic::AtomicU64;
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let w = Arc::new(LoomFutex::new(HandleState::Submitted as u32));
            let generation = Arc::new(AtomicU64::new(0));
            let waiter = {
                let (w, generation) = (Arc::clone(&w), Arc::clone(&generation));
                thread::spawn(move || {
                    loop {
                        let st = HandleState::from_word(w.load(Ordering::Acquire));
                        if generation.load(Ordering::Acquire) != 0 || st.is_complete() {
                            return;
                        }
                        let _ = sleep_while(&*w, st, || generation.load(Ordering::Acquire) == 0);
                    }
                })
            };
            use HandleState::*;
            let step = |from, to| transition(&*w, from, to, LOOM_FENCE).unwrap();
            step(Submitted, CompletedIo);
            step(CompletedIo, CompletedShared);
            step(CompletedShared, CompletedLocal);
            generation.store(1, Ordering::Release);
            step(CompletedLocal, Idle);
            step(Idle, HandedOut);
            step(HandedOut, Defined);
            step(Defined, Staged);
            step(Staged, Submitted);
            waiter.join().unwrap();
        });
        eprintln!(
            "loom: a_waiter_never_sleeps_on_the_handles_next_io explored {} executions (preemption bound 3)",
            RUNS.load(std::sync::atomic::Ordering::Relaxed)
        );
    }

    #[test]
    fn one_claim_wins() {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        loom::model(|| {
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let w = Arc::new(LoomFutex::new(HandleState::Staged as u32));
            let wins = Arc::new(AtomicUsize::new(0));
            let claimers: Vec<_> = (0..2)
                .map(|_| {
                    let (w, wins) = (Arc::clone(&w), Arc::clone(&wins));
                    thread::spawn(move || {
                        if transition(&*w, HandleState::Staged, HandleState::Submitted, LOOM_FENCE)
                            .is_ok()
                        {
                            wins.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            for t in claimers {
                t.join().unwrap();
            }
            assert_eq!(wins.load(Ordering::SeqCst), 1, "exactly one claim wins");
            assert_eq!(
                HandleState::from_word(w.load(Ordering::SeqCst)),
                HandleState::Submitted
            );
        });
        eprintln!(
            "loom: one_claim_wins explored {} executions",
            RUNS.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
}
