//! Test points: places where a test can stop the next thread to pass, holding what it holds
//! there, until the test lets it go ([`crate::Aio::hold_next`]). One load when not armed.

/// Where a test can stop a thread ([`crate::Aio::hold_next`]). Tests only.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestPoint {
    /// io_uring: a reap without waiting that found the completion queue empty, still
    /// holding the ring's completion side.
    EmptyReap,
    /// io_uring: a reap without waiting that found the completion side held by another
    /// thread and has left its want for that thread's let-go.
    ReapLeftToHolder,
    /// sim: a submission that has just claimed a handle (made it SUBMITTED) and not yet
    /// queued it.
    SimClaimed,
    /// Every method: an issuer recycling a handle, between the handle's next generation and
    /// its move to IDLE.
    Recycling,
    /// Every method: a thread about to execute an I/O itself (an issuer, or a waiter that
    /// took it back), its executor and wait event already published.
    Executing,
}

/// A point where a test can stop the next thread to pass, while it holds what it holds
/// there, until the test lets it go: armed, then holding, then off.
#[derive(Default)]
pub(crate) struct TestHold(std::sync::atomic::AtomicU8, std::sync::atomic::AtomicI32);

impl TestHold {
    const OFF: u8 = 0;
    const ARMED: u8 = 1;
    const HOLDING: u8 = 2;

    /// The next thread to pass the point stops there — only thread `only` (a kernel
    /// thread id) if given.
    pub(crate) fn arm(&self, only: Option<i32>) {
        use std::sync::atomic::Ordering::SeqCst;
        self.1.store(only.unwrap_or(0), SeqCst);
        self.0.store(Self::ARMED, SeqCst);
    }

    /// Whether a thread is stopped at the point now.
    pub(crate) fn holding(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst) == Self::HOLDING
    }

    /// Lets the stopped thread go on (and disarms).
    pub(crate) fn release(&self) {
        self.0.store(Self::OFF, std::sync::atomic::Ordering::SeqCst);
    }

    /// The point: stops here if armed, until released. One load when not armed.
    #[inline]
    pub(crate) fn pass(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let for_me = || match self.1.load(SeqCst) {
            0 => true,
            // SAFETY: gettid has no arguments and cannot fail.
            tid => tid == unsafe { libc::gettid() },
        };
        if self.0.load(SeqCst) == Self::ARMED
            && for_me()
            && self
                .0
                .compare_exchange(Self::ARMED, Self::HOLDING, SeqCst, SeqCst)
                .is_ok()
        {
            while self.0.load(SeqCst) == Self::HOLDING {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }
}
