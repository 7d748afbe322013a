//! The bell: one futex word per issuer that every completion of its I/Os by another thread
//! rings, and the one place a waiter for several of them sleeps. Written once over the
//! atomics traits of `atomics.rs`, so the model check below runs exactly this code. See
//! `docs/design.md`, "Waiting", and docs/reliability.md, "Model checking".
//!
//! Two kinds of sleeper share the word:
//!
//! - the issuer itself, waiting for `n` of its I/Os (`wait_for_completions`): it sets
//!   `wake_at` (the ring count at which it wants to be woken, a hint computed from the
//!   handles it still needs) and `waiting`; a ring short of `wake_at` does not wake it, so a
//!   deep queue wakes it once per `n` completions, not once per completion;
//! - *followers*: threads that must hear of every ring — a waiter on an io_uring ring that
//!   another thread is reaping (the reaper rings the bell when it completes something and
//!   when it lets the ring go), or the issuer while some of what it waits for runs on other
//!   threads. They count themselves in `followers`, and any ring with followers wakes all.
//!
//! The rule that no wake is lost: a sleeper reads the word *before* it looks at the states
//! it waits on, registers, fences, looks again, and sleeps only while the word still holds
//! what it read. A ringer changes the word first, fences, then reads the registrations. So
//! either the ringer sees the sleeper registered (and wakes it, or its futex wait returns at
//! once because the word changed), or the sleeper sees what the ringer did.
//!
//! Every sleep is bounded by [`SAFETY_NET`]; a sleep that runs into it although what it waits
//! for happened is a missed wake — a bug, counted (`backstop_wakes`), never the way waiting
//! works.

use super::atomics::{Fence, FutexWord, Word32};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

/// How long any sleep lasts at most: a safety net, counted when it catches a missed wake.
pub(crate) const SAFETY_NET: Duration = Duration::from_millis(100);

/// How a sleep on the bell ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slept {
    /// Woken, or never slept (the word had changed, or what it waits for had happened).
    Woken,
    /// The safety net ended it and nothing it waits for had happened (a slow I/O).
    Quiet,
    /// The safety net ended it although what it waits for had happened: a missed wake.
    Missed,
}

/// An issuer's bell (see the module documentation), over any futex word and counters.
pub(crate) struct Bell<F, A> {
    /// Rung by every completion of the issuer's I/Os on another thread, and by every
    /// hand-off of its ring; sleepers sleep on it.
    pub word: F,
    /// Threads that sleep on the word and want every ring.
    pub followers: A,
    /// Non-zero while the issuer sleeps until `wake_at`.
    pub waiting: A,
    /// The ring count at which the sleeping issuer wants to be woken.
    pub wake_at: A,
}

impl<F: FutexWord, A: Word32> Bell<F, A> {
    /// The count to pass to a sleep: read it before looking at what to wait for.
    #[inline]
    pub(crate) fn seen(&self) -> u32 {
        self.word.load(SeqCst)
    }

    /// Whether any thread follows the bell now (a hint: one may start following at once).
    #[inline]
    pub(crate) fn followed(&self) -> bool {
        self.followers.load(SeqCst) != 0
    }

    /// Rings: counts one event and wakes whoever it concerns.
    #[inline]
    pub(crate) fn ring(&self, fence: Fence) {
        let c = self.word.fetch_add(1, SeqCst).wrapping_add(1);
        fence(SeqCst);
        let followed = self.followers.load(SeqCst) != 0;
        // The issuer wants waking only once the count reaches its target; of two ringers
        // that both see it reached, one takes the flag.
        let issuer_due = || {
            self.waiting.load(SeqCst) != 0
                && c.wrapping_sub(self.wake_at.load(SeqCst)) as i32 >= 0
                && self.waiting.swap(0, SeqCst) != 0
        };
        if followed || issuer_due() {
            self.word.wake_all();
        }
    }

    /// Rings only if someone sleeps on the bell: for events that are not completions (a ring
    /// let go, entries handed to the kernel), which matter only to followers.
    #[inline]
    pub(crate) fn ring_followers(&self, fence: Fence) {
        fence(SeqCst);
        if self.followers.load(SeqCst) != 0 {
            self.word.fetch_add(1, SeqCst);
            self.word.wake_all();
        }
    }

    /// Sleeps as a follower until the bell rings after `seen`, unless `done()` holds once
    /// registered. The caller re-checks what it waits for afterwards.
    pub(crate) fn follow(&self, seen: u32, fence: Fence, done: impl Fn() -> bool) -> Slept {
        self.followers.fetch_add(1, SeqCst);
        fence(SeqCst);
        let slept = self.sleep(seen, &done);
        self.followers.fetch_sub(1, SeqCst);
        slept
    }

    /// Sleeps as the issuer until the bell has rung `need` times after `seen` (a hint: it
    /// may wake early), unless `done()` holds once registered.
    pub(crate) fn await_rings(
        &self,
        seen: u32,
        need: u32,
        fence: Fence,
        done: impl Fn() -> bool,
    ) -> Slept {
        self.wake_at.store(seen.wrapping_add(need.max(1)), SeqCst);
        self.waiting.store(1, SeqCst);
        fence(SeqCst);
        let slept = self.sleep(seen, &done);
        self.waiting.store(0, SeqCst);
        slept
    }

    fn sleep(&self, seen: u32, done: &impl Fn() -> bool) -> Slept {
        if done() || self.word.load(SeqCst) != seen {
            return Slept::Woken;
        }
        let since = std::time::Instant::now();
        if !self.word.wait_for(seen, SAFETY_NET) {
            return Slept::Woken;
        }
        // The safety net: a wake was missed if what we wait for happened meanwhile and
        // nobody rang (a ring after the limit changed the word: late, not missed).
        safety_net_ended(since, done() && self.word.load(SeqCst) == seen)
    }
}

/// Classifies a sleep begun at `since` that the safety net ended, `done` saying whether
/// what it waited for has happened: a missed wake only if so and the sleeper ran promptly
/// after the limit (`dbaio_sys::futex::ran_promptly`); otherwise a slow wait.
pub(crate) fn safety_net_ended(since: std::time::Instant, done: bool) -> Slept {
    if done && dbaio_sys::futex::ran_promptly(since, SAFETY_NET) {
        Slept::Missed
    } else {
        Slept::Quiet
    }
}

/// The model check: a completer, a waiting issuer and a follower on one bell, on the
/// functions above, with loom's atomics and a futex without a timeout — so a sleeper that
/// would need the safety net is a deadlock loom reports.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::handle::atomics::model::{LOOM_FENCE, LoomFutex};
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU32;
    use loom::thread;

    fn bell() -> Bell<LoomFutex, AtomicU32> {
        Bell {
            word: LoomFutex::new(0),
            followers: AtomicU32::new(0),
            waiting: AtomicU32::new(0),
            wake_at: AtomicU32::new(0),
        }
    }

    /// Two I/Os complete on another thread; the issuer waits for both through `await_rings`
    /// (one wake at the second ring) and a follower for the first through `follow`.
    #[test]
    fn issuer_and_follower_are_woken() {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let bell = Arc::new(bell());
            let done = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let completer = {
                let (bell, done) = (Arc::clone(&bell), Arc::clone(&done));
                thread::spawn(move || {
                    for d in done.iter() {
                        d.store(1, SeqCst);
                        bell.ring(LOOM_FENCE);
                    }
                })
            };
            let follower = {
                let (bell, done) = (Arc::clone(&bell), Arc::clone(&done));
                thread::spawn(move || {
                    loop {
                        let seen = bell.seen();
                        if done[0].load(SeqCst) == 1 {
                            return;
                        }
                        bell.follow(seen, LOOM_FENCE, || done[0].load(SeqCst) == 1);
                    }
                })
            };
            loop {
                let seen = bell.seen();
                let complete = done.iter().filter(|d| d.load(SeqCst) == 1).count() as u32;
                if complete == 2 {
                    break;
                }
                bell.await_rings(seen, 2 - complete, LOOM_FENCE, || {
                    done.iter().all(|d| d.load(SeqCst) == 1)
                });
            }
            completer.join().unwrap();
            follower.join().unwrap();
        });
        eprintln!(
            "loom: issuer_and_follower_are_woken explored {} executions (preemption bound 3)",
            RUNS.load(std::sync::atomic::Ordering::Relaxed)
        );
    }

    /// The io_uring ring's hand-off, in miniature: a kernel posts the completions of two
    /// I/Os into a completion queue; two waiters, one per I/O, each either take the
    /// completion side (drain, sleep "in the kernel" for one completion while the kernel
    /// still holds one, drain, let go and tell the followers) or follow the bell until their
    /// I/O is complete or the completion side is free — as `Uring::reap_or_follow` does. A
    /// follower left asleep while its completion sits unreaped is a deadlock loom reports.
    #[test]
    fn a_follower_takes_over_when_the_reaper_lets_go() {
        use loom::sync::{Condvar, Mutex};
        struct Cq {
            posted: Vec<usize>,
            taken_by_kernel: usize,
        }
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let bell = Arc::new(bell());
            // The completion side's lock word (parking_lot's is one too): 1 while held.
            let side = Arc::new(AtomicU32::new(0));
            let cq = Arc::new((
                Mutex::new(Cq {
                    posted: Vec::new(),
                    taken_by_kernel: 2,
                }),
                Condvar::new(),
            ));
            let done = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let kernel = {
                let cq = Arc::clone(&cq);
                thread::spawn(move || {
                    for io in 0..2 {
                        let mut q = cq.0.lock().unwrap();
                        q.posted.push(io);
                        cq.1.notify_all();
                    }
                })
            };
            let waiter = |me: usize| {
                let (bell, side, cq, done) = (
                    Arc::clone(&bell),
                    Arc::clone(&side),
                    Arc::clone(&cq),
                    Arc::clone(&done),
                );
                thread::spawn(move || {
                    let drain = |q: &mut Cq| {
                        for io in q.posted.drain(..) {
                            q.taken_by_kernel -= 1;
                            done[io].store(1, SeqCst);
                            bell.ring(LOOM_FENCE);
                        }
                    };
                    loop {
                        let seen = bell.seen();
                        if done[me].load(SeqCst) == 1 {
                            return;
                        }
                        if side.compare_exchange(0, 1, SeqCst, SeqCst).is_err() {
                            bell.follow(seen, LOOM_FENCE, || {
                                done[me].load(SeqCst) == 1 || side.load(SeqCst) == 0
                            });
                            continue;
                        }
                        let mut q = cq.0.lock().unwrap();
                        drain(&mut q);
                        if done[me].load(SeqCst) == 0 && q.taken_by_kernel > 0 {
                            while q.posted.is_empty() {
                                q = cq.1.wait(q).unwrap();
                            }
                            drain(&mut q);
                        }
                        drop(q);
                        side.store(0, SeqCst);
                        bell.ring_followers(LOOM_FENCE);
                    }
                })
            };
            let (a, b) = (waiter(0), waiter(1));
            kernel.join().unwrap();
            a.join().unwrap();
            b.join().unwrap();
        });
        eprintln!(
            "loom: a_follower_takes_over_when_the_reaper_lets_go explored {} executions \
             (preemption bound 2)",
            RUNS.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
}
