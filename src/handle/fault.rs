//! Fault injection: rewrite an I/O's raw result just before its shared callbacks run — the
//! same point in every method (PostgreSQL's `aio-process-completion-before-shared`), so tests
//! can fake EIO, ENOSPC, transient EAGAIN/EINTR, short transfers, slow completions and
//! panicking executors on sync, worker and io_uring alike. Rules choose I/Os by op, file,
//! offset range, a count and a probability; the probability draws from a hash of the seed and
//! the I/O's identity (op, file, offset, handle, generation, attempt), so a failing run
//! replays with the same seed. Off by default; when off it costs one relaxed load per completion. See
//! `docs/design.md`, "Fault injection", and `docs/reliability.md`.

use super::op::Op;
use dbaio_sys::futex;
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// What an armed rule does to a matching I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Fail with this errno (EIO, ENOSPC, …). EAGAIN and EINTR are transient: the I/O is
    /// executed again, as after a real one, up to 16 times in all.
    Errno(i32),
    /// Transfer at most this many bytes (a short read or write).
    Short(u32),
    /// Park the completer (in state COMPLETED_IO) until [`Aio::release_held`] is called, so
    /// tests can look at an I/O mid-flight. Only a release after the completer parked counts:
    /// wait until the view shows the I/O COMPLETED_IO before releasing it. The completer is
    /// whichever thread completes the I/O — a worker, the thread reaping an io_uring ring
    /// (often the waiter), or the issuer itself where the I/O runs at submission (`sync`, a
    /// cached read with `io_worker_try_cached`): there the call that starts the I/O parks
    /// until another thread releases it. Rules are applied when the completion is processed,
    /// so on io_uring `clear_faults` still reaches an I/O the kernel finished but nobody has
    /// reaped.
    ///
    /// [`Aio::release_held`]: crate::Aio::release_held
    Hold,
    /// Make the completion this much later (a slow device), in the completing thread.
    Delay(Duration),
    /// Panic in the completing thread before the I/O is complete (a crashing executor): the
    /// I/O must fail with an error, never hang.
    Panic,
}

/// One injection rule: which I/Os it hits, what it does, how many times. Every rule that
/// matches an I/O applies: `Delay`s add up, a `Hold` holds, and the first matching `Errno`,
/// `Short` or `Panic` (in the order the rules were added) decides the result; a later one of
/// those is not counted against its `times`.
#[derive(Clone, Debug)]
pub struct FaultRule {
    /// Only this op (None: any).
    pub op: Option<Op>,
    /// Only this file slot (None: any); set with [`FaultRule::on_file`].
    pub file: Option<u32>,
    /// Only I/Os starting in this offset range (None: any).
    pub offsets: Option<Range<u64>>,
    /// The fault.
    pub action: FaultAction,
    /// How many I/Os to hit (None: every one).
    pub times: Option<u32>,
    /// The chance, from 0.0 to 1.0, that a matching I/O is hit (1.0: every one).
    pub probability: f64,
}

impl FaultRule {
    /// A rule hitting every I/O with `action`.
    pub fn new(action: FaultAction) -> FaultRule {
        FaultRule {
            op: None,
            file: None,
            offsets: None,
            action,
            times: None,
            probability: 1.0,
        }
    }
    /// Restricts it to `op`.
    pub fn op(mut self, op: Op) -> FaultRule {
        self.op = Some(op);
        self
    }
    /// Restricts it to I/Os starting in `offsets`.
    pub fn offsets(mut self, offsets: Range<u64>) -> FaultRule {
        self.offsets = Some(offsets);
        self
    }
    /// Hits at most `n` I/Os.
    pub fn times(mut self, n: u32) -> FaultRule {
        self.times = Some(n);
        self
    }
    /// Hits each matching I/O with probability `p` (drawn from the injector's seed, see
    /// [`Aio::seed_faults`](crate::Aio::seed_faults)).
    pub fn probability(mut self, p: f64) -> FaultRule {
        self.probability = p.clamp(0.0, 1.0);
        self
    }
}

/// The I/O a completion belongs to, as fault rules see it.
pub(crate) struct FaultSite {
    pub op: Op,
    pub file: u32,
    pub offset: u64,
    pub io_id: u32,
    pub generation: u64,
    /// Times the I/O was already executed again (after EAGAIN/EINTR): each attempt draws anew.
    pub attempt: u8,
}

/// What the injector decided for one completion.
pub(crate) struct Applied {
    /// The raw result to use.
    pub raw: i32,
    /// For a `Hold` rule: the release count to pass to [`FaultInjector::hold`].
    pub hold: Option<u32>,
}

#[derive(Default)]
pub(crate) struct FaultInjector {
    armed: AtomicBool,
    rules: Mutex<Vec<FaultRule>>,
    seed: AtomicU64,
    /// Bumped by `release_held`; held completers wait for it to change.
    release: AtomicU32,
    /// Faults injected so far (for reports).
    hits: AtomicU64,
}

/// A 64-bit mix (splitmix64's finaliser).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl FaultInjector {
    pub(crate) fn add(&self, rule: FaultRule) {
        self.rules.lock().push(rule);
        self.armed.store(true, Ordering::Release);
    }

    pub(crate) fn clear(&self) {
        self.rules.lock().clear();
        self.armed.store(false, Ordering::Release);
    }

    pub(crate) fn set_seed(&self, seed: u64) {
        self.seed.store(seed, Ordering::Relaxed);
    }

    /// True while any rule may apply (a path that skips `apply` must not run then).
    pub(crate) fn armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub(crate) fn release_held(&self) {
        self.release.fetch_add(1, Ordering::AcqRel);
        futex::wake_private(&self.release, u32::MAX);
    }

    /// Decides what happens to the completion of the I/O at `site` that got `raw`. A `Delay`
    /// sleeps and a `Panic` panics right here, in the completing thread.
    pub(crate) fn apply(&self, site: &FaultSite, raw: i32) -> Applied {
        let unchanged = Applied { raw, hold: None };
        if !self.armed.load(Ordering::Relaxed) {
            return unchanged;
        }
        let draw = mix(self.seed.load(Ordering::Relaxed)
            ^ mix(site.op as u64
                ^ u64::from(site.file) << 8
                ^ site.offset.rotate_left(20)
                ^ u64::from(site.io_id) << 40
                ^ site.generation.rotate_left(52)
                ^ u64::from(site.attempt) << 60));
        // Every matching rule applies (each counts one of its `times`): the delays add up,
        // a hold holds, and the first matching errno, short count or panic decides the result.
        // Only the first matching rule applied before, so a `Delay` armed for every I/O hid
        // an `Errno` armed for one (found by a caller-side attack).
        let mut delay = Duration::ZERO;
        let mut hold = false;
        let mut outcome = None;
        let mut hit = false;
        {
            let mut rules = self.rules.lock();
            for (k, rule) in rules.iter_mut().enumerate() {
                let matches = rule.op.is_none_or(|o| o == site.op)
                    && rule.file.is_none_or(|f| f == site.file)
                    && rule
                        .offsets
                        .as_ref()
                        .is_none_or(|o| o.contains(&site.offset))
                    && rule.times != Some(0)
                    && (rule.probability >= 1.0
                        || ((mix(draw ^ k as u64) >> 11) as f64 / (1u64 << 53) as f64)
                            < rule.probability);
                let decides = !matches!(rule.action, FaultAction::Delay(_) | FaultAction::Hold);
                if !matches || (decides && outcome.is_some()) {
                    continue;
                }
                if let Some(t) = rule.times.as_mut() {
                    *t -= 1;
                }
                hit = true;
                match rule.action {
                    FaultAction::Delay(d) => delay += d,
                    FaultAction::Hold => hold = true,
                    action => outcome = Some(action),
                }
            }
        }
        if !hit {
            return unchanged;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let raw = match outcome {
            Some(FaultAction::Errno(e)) => -e,
            // (A count past `i32::MAX` cuts nothing; cast, it read as a negative errno.)
            Some(FaultAction::Short(n)) => raw.min(i32::try_from(n).unwrap_or(i32::MAX)),
            Some(FaultAction::Panic) => panic!(
                "injected fault: the thread completing {} of I/O {} panics",
                site.op, site.io_id
            ),
            _ => raw,
        };
        Applied {
            raw,
            hold: hold.then(|| self.release.load(Ordering::Acquire)),
        }
    }

    /// Parks the caller until `release_held` is called after `seen` was read.
    pub(crate) fn hold(&self, seen: u32) {
        while self.release.load(Ordering::Acquire) == seen {
            futex::wait_private(&self.release, seen, None);
        }
    }
}
