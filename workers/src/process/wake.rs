//! How embedder threads waiting for worker processes' results are woken — the one protocol
//! of the process pool that sleeps, written once over small atomic-word traits so that the
//! pool runs it on the control segment's atomics and the futex, and the model check
//! (`--cfg loom`, below) runs the very same functions on loom's atomics.
//!
//! Three parties touch four words of the control segment's header:
//!
//! - a **waiter** (an embedder thread in `ProcessPool::drive`) counts itself in `waiters`,
//!   lowers `wake_at` to the number of `posts` it needs to see, and sleeps on `waiter_seq`
//!   unless a result is already waiting in the done bitmap;
//! - a **poster** (a worker process, after setting its request's done bit) counts the post;
//!   the post that reaches `wake_at` raises it to `u64::MAX` and wakes every waiter, so a
//!   waiter that needs four results is woken once, not four times; a post short of it wakes
//!   the completer instead (unless it naps), since it may be no waiter's;
//! - a **drainer** (a waiter before it leaves, or the completer thread) takes results out of
//!   the bitmap and completes their handles. A drainer may complete an I/O that another
//!   waiter, already asleep, waits for — a result posted before that waiter set its target,
//!   or one the supervisor completed as lost, or one the pool ran in the embedder (neither
//!   counts as a post). So a drainer that completed anything while someone waits wakes the
//!   waiters too. Without that, such a waiter slept until the next post or its 100 ms
//!   timeout (the model check below found it).
//!
//! Why no waiter sleeps through its last result: a waiter reads `waiter_seq` before it counts
//! itself and sleeps only while the word still holds that value. A poster or drainer counts
//! or completes first and reads `waiters` after a SeqCst fence; the waiter counts itself,
//! fences, then reads what it needs and the bitmap. Either the waker sees the waiter counted
//! (and bumps `waiter_seq`, so the sleep returns at once), or the waiter sees the result (and
//! does not sleep).

use std::sync::atomic::Ordering::{self, SeqCst};
use std::time::Duration;

/// A 32-bit word waiters can sleep on (the futex), also used as a counter.
pub(crate) trait Futex32 {
    fn load(&self, o: Ordering) -> u32;
    fn fetch_add(&self, v: u32, o: Ordering) -> u32;
    fn fetch_sub(&self, v: u32, o: Ordering) -> u32;
    /// Sleeps while the word holds `expected`, for at most `timeout` (or spuriously);
    /// true if the timeout ended it.
    fn wait(&self, expected: u32, timeout: Duration) -> bool;
    fn wake_all(&self);
}

/// A 64-bit counter.
pub(crate) trait Word64 {
    fn load(&self, o: Ordering) -> u64;
    fn fetch_add(&self, v: u64, o: Ordering) -> u64;
    fn fetch_min(&self, v: u64, o: Ordering) -> u64;
    fn compare_exchange(&self, cur: u64, new: u64, s: Ordering, f: Ordering) -> Result<u64, u64>;
}

/// How long a waiter sleeps at most: a safety net, never the way it is woken (the model
/// check runs without it).
pub(crate) const WAIT_LIMIT: Duration = Duration::from_millis(100);

/// The header's four words, borrowed, and the fence of their kind.
pub(crate) struct Wake<'a, F, W> {
    pub waiters: &'a F,
    pub waiter_seq: &'a F,
    pub posts: &'a W,
    pub wake_at: &'a W,
    pub fence: fn(Ordering),
}

impl<'a> Wake<'a, std::sync::atomic::AtomicU32, std::sync::atomic::AtomicU64> {
    /// The control segment header's words.
    pub(crate) fn of(h: &'a super::control::Header) -> Self {
        Wake {
            waiters: &h.waiters,
            waiter_seq: &h.waiter_seq,
            posts: &h.posts,
            wake_at: &h.wake_at,
            fence: std::sync::atomic::fence,
        }
    }
}

impl<F: Futex32, W: Word64> Wake<'_, F, W> {
    /// The waiter's half: counts itself in, sets its target from `needs` (results it still
    /// needs) and sleeps unless it needs none or `any_done` sees a result to drain. The
    /// caller drains after this returns. Returns true if a wake-up was missed: the sleep
    /// ran to its safety limit although one of the awaited I/Os completed meanwhile (never,
    /// if this protocol is right; the pool counts it for the view).
    pub(crate) fn wait(&self, needs: impl Fn() -> u32, any_done: impl Fn() -> bool) -> bool {
        let seq = self.waiter_seq.load(SeqCst);
        self.waiters.fetch_add(1, SeqCst);
        (self.fence)(SeqCst);
        let need = needs();
        let mut missed = false;
        if need > 0 {
            let target = self.posts.load(SeqCst) + u64::from(need);
            self.wake_at.fetch_min(target, SeqCst);
            // Against a poster: either it reads our target after its post, or we read its
            // done bit here.
            (self.fence)(SeqCst);
            let since = std::time::Instant::now();
            if !any_done() && self.waiter_seq.wait(seq, WAIT_LIMIT) {
                // Missed: one of ours completed and no one woke us; judged only by a waiter
                // that ran soon after its limit (a busy machine may run it much later, after
                // a completion the limit did not see).
                let prompt = dbaio_sys::futex::ran_promptly(since, WAIT_LIMIT);
                missed = prompt && needs() < need && self.waiter_seq.load(SeqCst) == seq;
            }
        }
        self.waiters.fetch_sub(1, SeqCst);
        missed
    }

    /// The poster's half, after its done bit is set. Returns whether it woke waiters, who
    /// drain it; if it did not, the caller wakes the completer instead. A post short of the
    /// waiters' target is not left for them: it may be no waiter's (a future's, a detached
    /// I/O's), and they may sleep for as long as their own slow I/Os take.
    pub(crate) fn posted(&self) -> bool {
        let posted = self.posts.fetch_add(1, SeqCst) + 1;
        (self.fence)(SeqCst);
        if self.waiters.load(SeqCst) == 0 {
            return false;
        }
        // The post that reaches the target wakes them all.
        let at = self.wake_at.load(SeqCst);
        if posted < at {
            return false;
        }
        // A waiter lowering it meanwhile keeps it low: at worst an extra wake.
        let _ = self.wake_at.compare_exchange(at, u64::MAX, SeqCst, SeqCst);
        self.wake_all();
        true
    }

    /// The drainer's half, after it completed `completed` results (their handles' states
    /// stored): if anyone waits, one of those may be theirs.
    pub(crate) fn drained(&self, completed: u32) {
        if completed == 0 {
            return;
        }
        (self.fence)(SeqCst);
        if self.waiters.load(SeqCst) != 0 {
            self.wake_all();
        }
    }

    fn wake_all(&self) {
        self.waiter_seq.fetch_add(1, SeqCst);
        self.waiter_seq.wake_all();
    }
}

impl Futex32 for std::sync::atomic::AtomicU32 {
    #[inline]
    fn load(&self, o: Ordering) -> u32 {
        self.load(o)
    }
    #[inline]
    fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
        self.fetch_add(v, o)
    }
    #[inline]
    fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
        self.fetch_sub(v, o)
    }
    #[inline]
    fn wait(&self, expected: u32, timeout: Duration) -> bool {
        dbaio_sys::futex::wait(self, expected, Some(timeout))
    }
    #[inline]
    fn wake_all(&self) {
        dbaio_sys::futex::wake(self, u32::MAX);
    }
}

impl Word64 for std::sync::atomic::AtomicU64 {
    #[inline]
    fn load(&self, o: Ordering) -> u64 {
        self.load(o)
    }
    #[inline]
    fn fetch_add(&self, v: u64, o: Ordering) -> u64 {
        self.fetch_add(v, o)
    }
    #[inline]
    fn fetch_min(&self, v: u64, o: Ordering) -> u64 {
        self.fetch_min(v, o)
    }
    #[inline]
    fn compare_exchange(&self, cur: u64, new: u64, s: Ordering, f: Ordering) -> Result<u64, u64> {
        self.compare_exchange(cur, new, s, f)
    }
}

/// The model check: every interleaving (and weak-memory outcome loom explores) of a waiter,
/// workers posting and a drainer, on the functions above. The futex is a mutex and a
/// condition variable without the timeout, so a waiter that would need its safety net is a
/// deadlock loom reports.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicU32, AtomicU64, fence};
    use loom::sync::{Arc, Condvar, Mutex};
    use loom::thread;

    struct LoomFutex {
        word: AtomicU32,
        lock: Mutex<()>,
        changed: Condvar,
    }

    impl Futex32 for LoomFutex {
        fn load(&self, o: Ordering) -> u32 {
            self.word.load(o)
        }
        fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
            self.word.fetch_add(v, o)
        }
        fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
            self.word.fetch_sub(v, o)
        }
        fn wait(&self, expected: u32, _timeout: Duration) -> bool {
            let g = self.lock.lock().unwrap();
            if self.word.load(SeqCst) == expected {
                drop(self.changed.wait(g).unwrap());
            }
            false
        }
        fn wake_all(&self) {
            let _g = self.lock.lock().unwrap();
            self.changed.notify_all();
        }
    }

    impl Word64 for AtomicU64 {
        fn load(&self, o: Ordering) -> u64 {
            AtomicU64::load(self, o)
        }
        fn fetch_add(&self, v: u64, o: Ordering) -> u64 {
            AtomicU64::fetch_add(self, v, o)
        }
        fn fetch_min(&self, v: u64, o: Ordering) -> u64 {
            // loom's AtomicU64 has no fetch_min: a compare-exchange loop.
            let mut cur = AtomicU64::load(self, Ordering::Relaxed);
            loop {
                match AtomicU64::compare_exchange(self, cur, cur.min(v), o, Ordering::Relaxed) {
                    Ok(prev) => return prev,
                    Err(now) => cur = now,
                }
            }
        }
        fn compare_exchange(
            &self,
            cur: u64,
            new: u64,
            s: Ordering,
            f: Ordering,
        ) -> Result<u64, u64> {
            AtomicU64::compare_exchange(self, cur, new, s, f)
        }
    }

    fn futex(v: u32) -> LoomFutex {
        LoomFutex {
            word: AtomicU32::new(v),
            lock: Mutex::new(()),
            changed: Condvar::new(),
        }
    }

    /// The header's words, a done bitmap and each I/O's completion flag.
    struct Pool {
        waiters: LoomFutex,
        waiter_seq: LoomFutex,
        posts: AtomicU64,
        wake_at: AtomicU64,
        done: AtomicU64,
        complete: Vec<AtomicU32>,
    }

    impl Pool {
        fn new(ios: usize) -> Pool {
            Pool {
                waiters: futex(0),
                waiter_seq: futex(0),
                posts: AtomicU64::new(0),
                wake_at: AtomicU64::new(u64::MAX),
                done: AtomicU64::new(0),
                complete: (0..ios).map(|_| AtomicU32::new(0)).collect(),
            }
        }
        fn wake(&self) -> Wake<'_, LoomFutex, AtomicU64> {
            Wake {
                waiters: &self.waiters,
                waiter_seq: &self.waiter_seq,
                posts: &self.posts,
                wake_at: &self.wake_at,
                fence,
            }
        }
        /// A worker finishing I/O `i`. If its post woke no waiter, the completer would be
        /// woken to drain it: drained here, standing for the completer.
        fn post(&self, i: usize) {
            self.done.fetch_or(1 << i, SeqCst);
            if !self.wake().posted() {
                self.drain();
            }
        }
        /// A drainer: takes every done bit, completes those I/Os.
        fn drain(&self) {
            let bits = self.done.swap(0, SeqCst);
            for i in 0..self.complete.len() {
                if bits & (1 << i) != 0 {
                    self.complete[i].store(1, Ordering::Release);
                }
            }
            self.wake().drained(bits.count_ones());
        }
        fn needs(&self, ios: &[usize]) -> u32 {
            ios.iter()
                .filter(|&&i| self.complete[i].load(Ordering::Acquire) == 0)
                .count() as u32
        }
        /// `ProcessPool::drive` in a loop until `ios` are complete.
        fn wait_for(&self, ios: &[usize]) {
            loop {
                self.drain();
                if self.needs(ios) == 0 {
                    return;
                }
                let missed = self
                    .wake()
                    .wait(|| self.needs(ios), || self.done.load(SeqCst) != 0);
                assert!(!missed);
                self.drain();
            }
        }
    }

    fn explore(name: &str, bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut b = loom::model::Builder::new();
        b.preemption_bound = bound;
        let counted = std::sync::Arc::clone(&runs);
        b.check(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            f()
        });
        eprintln!(
            "loom: {name} explored {} executions (preemption bound {bound:?})",
            runs.load(std::sync::atomic::Ordering::Relaxed)
        );
    }

    /// One I/O; a worker posts it while the completer thread drains once: the waiter must
    /// wake even when the completer, not a post, completes its I/O.
    #[test]
    fn waiter_wakes_when_the_completer_completes_its_io() {
        explore(
            "waiter_wakes_when_the_completer_completes_its_io",
            Some(3),
            || {
                let p = Arc::new(Pool::new(1));
                let worker = {
                    let p = Arc::clone(&p);
                    thread::spawn(move || p.post(0))
                };
                let completer = {
                    let p = Arc::clone(&p);
                    thread::spawn(move || p.drain())
                };
                p.wait_for(&[0]);
                worker.join().unwrap();
                completer.join().unwrap();
            },
        );
    }

    /// Two I/Os posted by two workers: the waiter needing both is woken by the post that
    /// reaches its target, whichever order they come in.
    #[test]
    fn waiter_needing_two_wakes_at_its_target() {
        explore("waiter_needing_two_wakes_at_its_target", Some(3), || {
            let p = Arc::new(Pool::new(2));
            let workers: Vec<_> = (0..2)
                .map(|i| {
                    let p = Arc::clone(&p);
                    thread::spawn(move || p.post(i))
                })
                .collect();
            p.wait_for(&[0, 1]);
            for w in workers {
                w.join().unwrap();
            }
        });
    }

    /// A waiter needs I/Os 1 and 2; I/O 0, which no waiter needs (a future's, a detached
    /// one), is posted first, and 1 and 2 only once 0 is complete (as when the thread that
    /// would release them waits on 0). The post of 0, short of the waiter's target, must still
    /// be drained: it was left for the waiter, who slept until its safety net.
    #[test]
    fn a_post_no_waiter_needs_is_drained_while_waiters_sleep() {
        explore(
            "a_post_no_waiter_needs_is_drained_while_waiters_sleep",
            Some(3),
            || {
                let p = Arc::new(Pool::new(3));
                let worker = {
                    let p = Arc::clone(&p);
                    thread::spawn(move || {
                        p.post(0);
                        while p.complete[0].load(Ordering::Acquire) == 0 {
                            thread::yield_now();
                        }
                        p.post(1);
                        p.post(2);
                    })
                };
                p.wait_for(&[1, 2]);
                worker.join().unwrap();
            },
        );
    }

    /// Two waiters, one I/O each, one worker posting both: whichever drains, both wake.
    #[test]
    fn two_waiters_both_wake() {
        explore("two_waiters_both_wake", Some(2), || {
            let p = Arc::new(Pool::new(2));
            let worker = {
                let p = Arc::clone(&p);
                thread::spawn(move || {
                    p.post(0);
                    p.post(1);
                })
            };
            let other = {
                let p = Arc::clone(&p);
                thread::spawn(move || p.wait_for(&[1]))
            };
            p.wait_for(&[0]);
            other.join().unwrap();
            worker.join().unwrap();
        });
    }
}
