//! Fault injection: rewrite an I/O's raw result just before its shared callbacks run — the
//! same point in every method (PostgreSQL's `aio-process-completion-before-shared`), so tests
//! can fake EIO or short transfers on sync, worker and io_uring alike. Off by default; when
//! off it costs one relaxed load per completion. See `docs/design.md`, "Fault injection".

use crate::op::Op;
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

/// What an armed rule does to a matching I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Fail with this errno.
    Errno(i32),
    /// Transfer at most this many bytes (a short read or write).
    Short(u32),
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
    /// Restricts it to I/Os on `file`.
    pub fn on_file(mut self, file: &crate::File) -> FaultRule {
        self.file = Some(file.slot);
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

    /// Returns the raw result to use for an I/O (`op` on `file` at `offset`) that got `raw`.
    pub(crate) fn apply(&self, op: Op, file: u32, offset: u64, raw: i32) -> i32 {
        if !self.armed.load(Ordering::Relaxed) {
            return raw;
        }
        let mut rules = self.rules.lock();
        let hit = rules.iter_mut().position(|r| {
            r.op.is_none_or(|o| o == op)
                && r.file.is_none_or(|f| f == file)
                && r.offsets.as_ref().is_none_or(|o| o.contains(&offset))
                && r.times != Some(0)
        });
        let Some(i) = hit else { return raw };
        let rule = &mut rules[i];
        if let Some(t) = rule.times.as_mut() {
            *t -= 1;
        }
        match rule.action {
            FaultAction::Errno(e) => -e,
            FaultAction::Short(n) if raw > n as i32 => n as i32,
            FaultAction::Short(_) => raw,
        }
    }
}
