//! The atomic operations dbaio's lock-free protocols use — the handle state word with its
//! waiter bit (`state_word.rs`), the issuer's bell (`bell.rs`), and a buffer-pool hit
//! against an evictor (`bufmgr/hit_pin.rs`) — as small traits. The subsystem runs the
//! protocols on std atomics and the futex; the model checks (`--cfg loom`, see docs/reliability.md) run the very same
//! functions on loom's atomics, with a mutex and condition variable standing in for the
//! futex. See `docs/design.md`, "Model checking".

use dbaio_sys::futex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A 32-bit atomic word.
pub(crate) trait Word32 {
    fn load(&self, o: Ordering) -> u32;
    fn store(&self, v: u32, o: Ordering);
    fn compare_exchange_weak(
        &self,
        cur: u32,
        new: u32,
        s: Ordering,
        f: Ordering,
    ) -> Result<u32, u32>;
    fn fetch_or(&self, v: u32, o: Ordering) -> u32;
    fn fetch_add(&self, v: u32, o: Ordering) -> u32;
    fn fetch_sub(&self, v: u32, o: Ordering) -> u32;
    fn swap(&self, v: u32, o: Ordering) -> u32;
}

/// A 32-bit atomic word threads can sleep on until it changes (a futex).
pub(crate) trait FutexWord: Word32 {
    /// Sleeps while the word holds `expected`, for at most `limit` (or spuriously; callers
    /// re-check). True if `limit` ended the sleep.
    fn wait_for(&self, expected: u32, limit: std::time::Duration) -> bool;
    /// Wakes every thread asleep on the word.
    fn wake_all(&self);
}

/// A 64-bit atomic word.
pub(crate) trait Word64 {
    fn load(&self, o: Ordering) -> u64;
    fn compare_exchange(&self, cur: u64, new: u64, s: Ordering, f: Ordering) -> Result<u64, u64>;
    fn fetch_and(&self, v: u64, o: Ordering) -> u64;
}

/// A memory fence of the atomics' own kind (std's, or loom's under the model checker).
pub(crate) type Fence = fn(Ordering);

/// std's fence.
pub(crate) const STD_FENCE: Fence = std::sync::atomic::fence;

impl Word32 for AtomicU32 {
    #[inline]
    fn load(&self, o: Ordering) -> u32 {
        AtomicU32::load(self, o)
    }
    #[inline]
    fn store(&self, v: u32, o: Ordering) {
        AtomicU32::store(self, v, o)
    }
    #[inline]
    fn compare_exchange_weak(
        &self,
        cur: u32,
        new: u32,
        s: Ordering,
        f: Ordering,
    ) -> Result<u32, u32> {
        AtomicU32::compare_exchange_weak(self, cur, new, s, f)
    }
    #[inline]
    fn fetch_or(&self, v: u32, o: Ordering) -> u32 {
        AtomicU32::fetch_or(self, v, o)
    }
    #[inline]
    fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
        AtomicU32::fetch_add(self, v, o)
    }
    #[inline]
    fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
        AtomicU32::fetch_sub(self, v, o)
    }
    #[inline]
    fn swap(&self, v: u32, o: Ordering) -> u32 {
        AtomicU32::swap(self, v, o)
    }
}

/// Private futexes: the words (handle states, bells) live in the handle table, a mapping
/// that only this process's threads wait on and wake — worker processes do not map it, and a
/// child made by fork may not use it (`docs/embedding.md`, §7).
impl FutexWord for AtomicU32 {
    #[inline]
    fn wait_for(&self, expected: u32, limit: std::time::Duration) -> bool {
        futex::wait_private(self, expected, Some(limit))
    }
    #[inline]
    fn wake_all(&self) {
        futex::wake_private(self, u32::MAX);
    }
}

impl Word64 for AtomicU64 {
    #[inline]
    fn load(&self, o: Ordering) -> u64 {
        AtomicU64::load(self, o)
    }
    #[inline]
    fn compare_exchange(&self, cur: u64, new: u64, s: Ordering, f: Ordering) -> Result<u64, u64> {
        AtomicU64::compare_exchange(self, cur, new, s, f)
    }
    #[inline]
    fn fetch_and(&self, v: u64, o: Ordering) -> u64 {
        AtomicU64::fetch_and(self, v, o)
    }
}

/// loom's atomics and a futex made of a mutex and a condition variable (whose lock, like
/// the kernel's futex bucket lock, makes "check the value, then sleep" atomic against a
/// wake), for the model checks.
#[cfg(all(test, loom))]
pub(crate) mod model {
    use super::{FutexWord, Word32, Word64};
    use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    use loom::sync::{Condvar, Mutex};

    /// loom's fence.
    pub(crate) const LOOM_FENCE: super::Fence = loom::sync::atomic::fence;

    pub(crate) struct LoomFutex {
        pub word: AtomicU32,
        lock: Mutex<()>,
        changed: Condvar,
    }

    impl LoomFutex {
        pub(crate) fn new(v: u32) -> LoomFutex {
            LoomFutex {
                word: AtomicU32::new(v),
                lock: Mutex::new(()),
                changed: Condvar::new(),
            }
        }
    }

    impl Word32 for LoomFutex {
        fn load(&self, o: Ordering) -> u32 {
            self.word.load(o)
        }
        fn store(&self, v: u32, o: Ordering) {
            self.word.store(v, o)
        }
        fn compare_exchange_weak(
            &self,
            cur: u32,
            new: u32,
            s: Ordering,
            f: Ordering,
        ) -> Result<u32, u32> {
            self.word.compare_exchange_weak(cur, new, s, f)
        }
        fn fetch_or(&self, v: u32, o: Ordering) -> u32 {
            self.word.fetch_or(v, o)
        }
        fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
            self.word.fetch_add(v, o)
        }
        fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
            self.word.fetch_sub(v, o)
        }
        fn swap(&self, v: u32, o: Ordering) -> u32 {
            self.word.swap(v, o)
        }
    }

    impl FutexWord for LoomFutex {
        /// No time in the model: a sleep lasts until a wake, so one that needed the safety
        /// net is a deadlock loom reports.
        fn wait_for(&self, expected: u32, _limit: std::time::Duration) -> bool {
            let g = self.lock.lock().unwrap();
            if self.word.load(Ordering::SeqCst) == expected {
                drop(self.changed.wait(g).unwrap());
            }
            false
        }
        fn wake_all(&self) {
            let _g = self.lock.lock().unwrap();
            self.changed.notify_all();
        }
    }

    impl Word32 for AtomicU32 {
        fn load(&self, o: Ordering) -> u32 {
            AtomicU32::load(self, o)
        }
        fn store(&self, v: u32, o: Ordering) {
            AtomicU32::store(self, v, o)
        }
        fn compare_exchange_weak(
            &self,
            cur: u32,
            new: u32,
            s: Ordering,
            f: Ordering,
        ) -> Result<u32, u32> {
            AtomicU32::compare_exchange_weak(self, cur, new, s, f)
        }
        fn fetch_or(&self, v: u32, o: Ordering) -> u32 {
            AtomicU32::fetch_or(self, v, o)
        }
        fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
            AtomicU32::fetch_add(self, v, o)
        }
        fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
            AtomicU32::fetch_sub(self, v, o)
        }
        fn swap(&self, v: u32, o: Ordering) -> u32 {
            AtomicU32::swap(self, v, o)
        }
    }

    impl Word64 for AtomicU64 {
        fn load(&self, o: Ordering) -> u64 {
            AtomicU64::load(self, o)
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
        fn fetch_and(&self, v: u64, o: Ordering) -> u64 {
            AtomicU64::fetch_and(self, v, o)
        }
    }
}
