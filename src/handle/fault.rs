//! Fault injection: rewrite an I/O's raw result just before its shared callbacks run — the
//! same point in every method (PostgreSQL's `aio-process-completion-before-shared`), so tests
//! can fake EIO or short transfers on sync, worker and io_uring alike. Off by default; when
//! off it costs one relaxed load per completion. `Hold` parks a completion until released. See `docs/design.md`, "Fault injection".

use crate::handle::op::Op;
use dbaio_workers::futex;
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// What an armed rule does to a matching I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Fail with this errno.
    Errno(i32),
    /// Transfer at most this many bytes (a short read or write).
    Short(u32),
    /// Park the completer (in state COMPLETED_IO) until [`Aio::release_held`] is called, so
    /// tests can look at an I/O mid-flight.
    ///
    /// [`Aio::release_held`]: crate::Aio::release_held
    Hold,
}

/// One injection rule: which I/Os it hits, what it does, how many times.
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
}

#[derive(Default)]
pub(crate) struct FaultInjector {
    armed: AtomicBool,
    rules: Mutex<Vec<FaultRule>>,
    /// Bumped by `release_held`; held completers wait for it to change.
    release: AtomicU32,
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

    pub(crate) fn release_held(&self) {
        self.release.fetch_add(1, Ordering::AcqRel);
        futex::wake(&self.release, u32::MAX);
    }

    /// Returns the raw result to use for an I/O (`op` on `file` at `offset`) that got `raw`,
    /// and, for a `Hold` rule, the release count to pass to [`FaultInjector::hold`].
    pub(crate) fn apply(&self, op: Op, file: u32, offset: u64, raw: i32) -> (i32, Option<u32>) {
        if !self.armed.load(Ordering::Relaxed) {
            return (raw, None);
        }
        let mut rules = self.rules.lock();
        let hit = rules.iter_mut().position(|r| {
            r.op.is_none_or(|o| o == op)
                && r.file.is_none_or(|f| f == file)
                && r.offsets.as_ref().is_none_or(|o| o.contains(&offset))
                && r.times != Some(0)
        });
        let Some(i) = hit else {
            return (raw, None);
        };
        let rule = &mut rules[i];
        if let Some(t) = rule.times.as_mut() {
            *t -= 1;
        }
        let raw = match rule.action {
            FaultAction::Errno(e) => -e,
            FaultAction::Short(n) if raw > n as i32 => n as i32,
            FaultAction::Short(_) => raw,
            FaultAction::Hold => return (raw, Some(self.release.load(Ordering::Acquire))),
        };
        (raw, None)
    }

    /// Parks the caller until `release_held` is called after `seen` was read.
    pub(crate) fn hold(&self, seen: u32) {
        while self.release.load(Ordering::Acquire) == seen {
            futex::wait(&self.release, seen, None);
        }
    }
}
