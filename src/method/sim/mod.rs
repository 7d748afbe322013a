//! The `sim` method: I/Os on a simulated disk in memory ([`SimDisk`]), for engines' own tests
//! of what happens under faults and power loss. See `docs/design.md`, "The simulated disk".
//!
//! - `disk.rs` — the disk: media, volatile cache, directory entries, [`SimDisk::crash`].
//! - `store.rs` — the disk as the handle layer's `Storage`: open, execute, faults.
//! - `rng.rs` — the seeded draws.
//!
//! Time is simulated. A submitted I/O is given a completion time, the simulated clock now
//! plus a latency drawn from `sim_latency_min .. sim_latency_max` (evenly, or with an
//! exponential tail: `sim_latency_distribution`; times 100 for a slow outlier), and waits in a queue; nothing completes by itself. Whoever waits or polls
//! advances the clock to the earliest completion time and executes that I/O then (on its
//! own thread, through the one road, `Shared::run_here`: executor `sim`) — so I/Os complete
//! out of submission order, as on real devices, and a single-threaded engine sees exactly
//! the same completions, in the same order, with the same results, every time it runs with
//! the same `sim_seed` and makes the same calls.

mod disk;
mod rng;
mod store;

pub use disk::SimDisk;
pub(crate) use store::SimStore;

use super::IoMethod;
use crate::handle::settings::{IoMethodKind, Settings, SimLatency};
use crate::handle::shared::{Drive, Shared};
use crate::handle::slot::{Executor, HandleState};
use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The store a subsystem on the simulated disk `disk` (or, without one, a new disk seeded by
/// `sim_seed`) executes its I/Os against.
pub(crate) fn store(settings: &Settings, disk: Option<SimDisk>) -> Arc<SimStore> {
    let disk = disk.unwrap_or_else(|| SimDisk::new(settings.sim_seed));
    Arc::new(SimStore::new(disk, settings))
}

/// The I/Os submitted and not yet executed, by simulated completion time.
struct Queue {
    /// Submissions so far (orders I/Os due at the same time).
    seq: u64,
    /// (due, seq, handle), earliest first.
    pending: BinaryHeap<Reverse<(u64, u64, u32)>>,
}

pub(crate) struct SimMethod {
    store: Arc<SimStore>,
    shared: Arc<Shared>,
    queue: Mutex<Queue>,
    latency_ns: (u64, u64),
    distribution: SimLatency,
    slow: f64,
    /// Per issuer: its I/Os must complete with nobody waiting (a future, a detached I/O
    /// with an error callback), so each of its submissions completes what is queued.
    watched: Box<[std::sync::atomic::AtomicBool]>,
    /// Tests: stops a submission between a handle's claim and its queueing.
    claimed_hold: super::TestHold,
}

impl SimMethod {
    pub(crate) fn start(settings: &Settings, shared: &Arc<Shared>, store: Arc<SimStore>) -> Self {
        let (lo, hi) = (settings.sim_latency_min, settings.sim_latency_max);
        SimMethod {
            store,
            shared: Arc::clone(shared),
            queue: Mutex::new(Queue {
                seq: 0,
                pending: BinaryHeap::new(),
            }),
            latency_ns: (u64::from(lo) * 1000, u64::from(hi) * 1000),
            distribution: settings.sim_latency_distribution,
            slow: settings.sim_fault_slow,
            watched: (0..settings.max_issuers)
                .map(|_| std::sync::atomic::AtomicBool::new(false))
                .collect(),
            claimed_hold: super::TestHold::default(),
        }
    }

    /// A latency drawn for one I/O.
    fn latency(&self) -> u64 {
        let mut rng = self.store.rng.lock();
        let l = draw_latency(&mut rng, self.latency_ns, self.distribution);
        if rng.chance(self.slow) { l * 100 } else { l }
    }

    /// Advances the clock to the earliest I/O due and executes it here; false if none waits.
    fn complete_next(&self) -> bool {
        let (next, at) = {
            let mut q = self.queue.lock();
            let Some(Reverse((due, _, i))) = q.pending.pop() else {
                return false;
            };
            // Under the queue's lock, the only place the clock moves.
            let clock = &self.store.clock_ns;
            let now = clock.load(Ordering::Relaxed).max(due);
            clock.store(now, Ordering::Relaxed);
            (i, now)
        };
        self.store
            .executing_at(at, || self.shared.run_here(next, Executor::Sim));
        true
    }

    fn queued(&self, i: u32) -> bool {
        self.queue
            .lock()
            .pending
            .iter()
            .any(|Reverse((_, _, h))| *h == i)
    }
}

/// A latency in `lo..=hi` nanoseconds, drawn as `distribution` says.
fn draw_latency(rng: &mut rng::Rng, (lo, hi): (u64, u64), distribution: SimLatency) -> u64 {
    let span = hi.saturating_sub(lo);
    match distribution {
        SimLatency::Uniform => lo + rng.below(span + 1),
        SimLatency::Exponential => {
            let mean = span as f64 / 4.0;
            lo + ((-mean * (1.0 - rng.unit()).ln()) as u64).min(span)
        }
    }
}

impl IoMethod for SimMethod {
    fn kind(&self) -> IoMethodKind {
        IoMethodKind::Sim
    }

    fn needs_synchronous_execution(&self, _shared: &Shared, _i: u32) -> bool {
        false
    }

    /// Queues each handle, claimed under the queue's lock: a waiter that sees it SUBMITTED
    /// and looks for it in the queue ([`SimMethod::queued`], under the lock) finds it there,
    /// rather than sleeping on a handle that nobody else would drive. A watched issuer's
    /// submission then completes what is queued.
    fn submit(&self, shared: &Shared, issuer: u32, handles: &[u32]) {
        let mut q = self.queue.lock();
        for &i in handles {
            if !shared.claim_submit(i) {
                continue; // a waiter found it staged and ran it
            }
            self.claimed_hold.pass();
            shared
                .slot(i)
                .executor
                .store(Executor::Sim.encode(), Ordering::Relaxed);
            // Staged now in simulated time: with several threads the clock may have moved
            // on since the issuer read it, and the latency is the one drawn.
            let now = self.store.clock_ns.load(Ordering::Relaxed);
            shared.slot(i).staged_ns.store(now, Ordering::Relaxed);
            let due = now + self.latency();
            q.seq += 1;
            let seq = q.seq;
            q.pending.push(Reverse((due, seq, i)));
        }
        drop(q);
        if self
            .watched
            .get(issuer as usize)
            .is_some_and(|w| w.load(Ordering::Acquire))
        {
            while self.complete_next() {}
        }
    }

    /// Advances the simulated clock, one completion at a time, until the I/O is done; if
    /// it is not queued (another thread is executing it) the waiter sleeps on its handle.
    fn drive_one(&self, shared: &Shared, i: u32, generation: u64) -> Drive {
        let s = shared.slot(i);
        loop {
            let mine = s.generation.load(Ordering::Acquire) == generation
                && s.state() == HandleState::Submitted;
            if !mine {
                return Drive::Progressed;
            }
            if !self.queued(i) || !self.complete_next() {
                return Drive::Sleep;
            }
        }
    }

    /// Advances the simulated clock until `need` of `awaited` are done.
    fn drive_many(
        &self,
        shared: &Shared,
        issuer: u32,
        staged: &[u32],
        awaited: &[(u32, u64)],
        need: u32,
    ) -> Drive {
        self.submit(shared, issuer, staged);
        loop {
            let complete = awaited
                .iter()
                .filter(|&&(i, g)| {
                    let s = shared.slot(i);
                    s.generation.load(Ordering::Acquire) != g || s.state().is_complete()
                })
                .count() as u32;
            if complete >= need {
                return Drive::Progressed;
            }
            if !self.complete_next() {
                return Drive::Sleep;
            }
        }
    }

    /// A poll moves the clock on by one completion: polling alone makes progress.
    fn poll(&self, _shared: &Shared, _issuer: u32) {
        self.complete_next();
    }

    fn test_hold(&self, point: super::TestPoint) -> Option<&super::TestHold> {
        (point == super::TestPoint::SimClaimed).then_some(&self.claimed_hold)
    }

    /// Completes everything queued, now and at each of the issuer's later submissions: a
    /// future or a detached I/O must complete with nobody waiting, and there is no thread
    /// to do it later (one still staged when this is called is queued later).
    fn watch(&self, issuer: u32, _i: u32) {
        if let Some(w) = self.watched.get(issuer as usize) {
            w.store(true, Ordering::Release);
        }
        while self.complete_next() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The median of 10,001 draws between 10 and 110 µs.
    fn median(distribution: SimLatency) -> u64 {
        let mut rng = rng::Rng::new(7);
        let mut d: Vec<u64> = (0..10_001)
            .map(|_| draw_latency(&mut rng, (10_000, 110_000), distribution))
            .collect();
        assert!(
            d.iter().all(|l| (10_000..=110_000).contains(l)),
            "out of range"
        );
        d.sort_unstable();
        d[d.len() / 2]
    }

    /// Uniform draws centre on the middle; exponential ones crowd the minimum (median: the
    /// minimum plus ln 2 × a quarter of the span, about 27 µs here) with a tail to the end.
    #[test]
    fn latencies_follow_the_distribution_asked_for() {
        let uniform = median(SimLatency::Uniform);
        assert!((55_000..65_000).contains(&uniform), "{uniform}");
        let exponential = median(SimLatency::Exponential);
        assert!((25_000..30_000).contains(&exponential), "{exponential}");
    }
}
