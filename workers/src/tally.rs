//! [`WakeTally`]: how the wakes of one sizing window went, for deciding whether a
//! self-sizing pool (threads or processes) grows.
//!
//! A wake is *met* when it found an idle worker (or one already coming) for every request it
//! queued, and *short* when it did not. A window is *calm* when at least one wake in it was
//! met and no more than three were short for each met one; a pool grows at the end of a
//! window that was not calm and while requests still wait. So a depth-1 issuer that now and
//! then meets its worker on the way back to idle (measured: up to half of its wakes short)
//! does not grow the pool, and a pool a worker or two short of the load does, although a
//! batch landing as workers come back meets a wake now and then (measured at depth 32 with 14
//! of 16 workers: 1 met wake in 8 to 30). A window with no wake at all is not calm: requests
//! waited and nobody came.

use std::sync::atomic::{AtomicU32, Ordering};

/// A window stays calm with up to this many short wakes per met one. Both pools count the
/// workers on their way to the queue (woken earlier, or just done with a request) as met, so
/// a depth-1 issuer's wakes were at most about half short (measured, threads and processes);
/// at depth 32 a pool two workers short of the load met 1 wake in 8 to 30.
const SHORT_PER_MET: u32 = 3;

/// Met and short wakes in the present sizing window. The counts are kept with plain loads and
/// stores, not read-modify-writes: a wake costs its submitter no locked instruction, and an
/// increment lost to a race between two submitters only blurs a count that is a majority
/// vote anyway.
#[derive(Default)]
pub(crate) struct WakeTally {
    met: AtomicU32,
    short: AtomicU32,
}

fn bump(c: &AtomicU32) {
    c.store(
        c.load(Ordering::Relaxed).saturating_add(1),
        Ordering::Relaxed,
    );
}

impl WakeTally {
    /// A wake found enough workers.
    pub(crate) fn met(&self) {
        bump(&self.met);
    }

    /// A wake found too few workers.
    pub(crate) fn short(&self) {
        bump(&self.short);
    }

    /// The present window's (met, short) counts.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u32, u32) {
        (
            self.met.load(Ordering::Relaxed),
            self.short.load(Ordering::Relaxed),
        )
    }

    /// Ends the window and starts the next: true if it was calm, that is if at least one wake
    /// was met and no more than [`SHORT_PER_MET`] were short for each met one.
    pub(crate) fn close(&self) -> bool {
        let met = self.met.swap(0, Ordering::Relaxed);
        let short = self.short.swap(0, Ordering::Relaxed);
        met > 0 && short <= met.saturating_mul(SHORT_PER_MET)
    }
}

#[cfg(test)]
mod tests {
    use super::WakeTally;

    #[test]
    fn a_window_without_a_met_wake_is_not_calm() {
        let t = WakeTally::default();
        assert!(
            !t.close(),
            "no wake at all: requests waited and nobody came"
        );
        t.short();
        assert!(!t.close());
    }

    #[test]
    fn a_depth_one_issuer_meeting_its_worker_on_the_way_back_stays_calm() {
        let t = WakeTally::default();
        t.met();
        for _ in 0..3 {
            t.short();
        }
        assert!(t.close(), "3 short wakes to 1 met: calm");
        t.met();
        t.short();
        assert!(t.close(), "half short: calm");
    }

    /// The rule before was "any met wake makes the window calm": a pool of 14 workers at depth
    /// 32 met 1 wake in 8 to 30 and never grew to the 16 the load wanted.
    #[test]
    fn a_few_met_wakes_among_many_short_do_not_stop_growth() {
        let t = WakeTally::default();
        t.met();
        for _ in 0..8 {
            t.short();
        }
        assert!(!t.close(), "8 short wakes to 1 met: the queue backs up");
        assert!(!t.close(), "closing starts the next window from nothing");
    }
}
