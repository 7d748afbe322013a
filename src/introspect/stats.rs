//! Statistics like `pg_stat_io`, per issuer: for every op, count, bytes, errors, total time and
//! a latency histogram (staging to completion); per executor, how many I/Os it ran.
//!
//! Reading never blocks the I/O path: every counter and histogram bucket is an atomic that
//! only the issuer writes (at reclaim, with plain loads and stores, no locked instruction),
//! and a reader copies them with relaxed loads and computes percentiles on its own time. A
//! reset does not touch the issuer's counters: the reader side remembers a baseline and
//! subtracts it. The histogram is log-linear with 64 steps per power of two (within 1.6%), from
//! 1 µs to 2^30 µs; `hdrhistogram` has no variant that a writer can record into while readers
//! copy it without a lock. See `docs/aios.md`, "Stats".

use crate::handle::advice_budget::{ADVICE_EVENTS, AdviceEvent};
use crate::handle::op::Op;
use crate::handle::shared::Shared;
use crate::handle::slot::Executor;
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ops in stats order (index = `Op as usize - 1`).
pub(crate) const OPS: [Op; 9] = [
    Op::Readv,
    Op::Writev,
    Op::Fsync,
    Op::Fdatasync,
    Op::Unlink,
    Op::FadviseWillneed,
    Op::Fallocate,
    Op::Ftruncate,
    Op::Rename,
];

/// Executor slots: issuer, io_uring, waiter, then workers 0..32.
const EXECUTORS: usize = 4 + 32;

/// Exact values below this; above, 64 buckets per power of two.
const LINEAR: u64 = 128;
/// Buckets: 128 exact, then 64 for each power of two from 2^7 to 2^29.
const BUCKETS: usize = 128 + 23 * 64;
/// The largest value recorded exactly enough (larger ones land in the last bucket).
const MAX_US: u64 = (1 << 30) - 1;

/// A latency histogram one thread records into while others read it.
struct Histogram {
    buckets: Box<[AtomicU64]>,
    max: AtomicU64,
}

/// Adds `n` to a counter only one thread writes: a load and a store, no locked instruction.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

fn bucket_of(us: u64) -> usize {
    let v = us.clamp(1, MAX_US);
    if v < LINEAR {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize; // 7..=29
    let top = (v >> (e - 6)) as usize; // 64..=127
    128 + (e - 7) * 64 + (top - 64)
}

/// The highest value bucket `b` holds (what a percentile reports, as HDR histograms do).
fn bucket_high(b: usize) -> u64 {
    if b < LINEAR as usize {
        return b as u64;
    }
    let e = (b - 128) / 64 + 7;
    let top = ((b - 128) % 64 + 64) as u64;
    ((top + 1) << (e - 6)) - 1
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max: AtomicU64::new(0),
        }
    }

    fn record(&self, us: u64) {
        bump(&self.buckets[bucket_of(us)], 1);
        if us > self.max.load(Ordering::Relaxed) {
            self.max.store(us, Ordering::Relaxed);
        }
    }

    fn copy(&self) -> Vec<u64> {
        self.buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }

    fn clear(&self) {
        for b in self.buckets.iter() {
            b.store(0, Ordering::Relaxed);
        }
        self.max.store(0, Ordering::Relaxed);
    }
}

/// The value at quantile `q` of bucket counts `counts`.
fn quantile(counts: &[u64], q: f64) -> u64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0;
    }
    let want = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (b, &n) in counts.iter().enumerate() {
        seen += n;
        if seen >= want {
            return bucket_high(b);
        }
    }
    bucket_high(counts.len() - 1)
}

struct OpCounters {
    count: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    time_ns: AtomicU64,
    hist: Histogram,
}

/// One issuer slot's counters, written by its issuer only.
struct IssuerStats {
    ops: Vec<OpCounters>,
    executors: Vec<AtomicU64>,
    advice: [AtomicU64; ADVICE_EVENTS],
}

/// What a reader copied of one op (or the baseline a reset left).
#[derive(Clone, Default)]
struct OpCopy {
    count: u64,
    bytes: u64,
    errors: u64,
    time_ns: u64,
    hist: Vec<u64>,
    max: u64,
}

impl IssuerStats {
    fn new() -> IssuerStats {
        IssuerStats {
            ops: OPS
                .iter()
                .map(|_| OpCounters {
                    count: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                    time_ns: AtomicU64::new(0),
                    hist: Histogram::new(),
                })
                .collect(),
            executors: (0..EXECUTORS).map(|_| AtomicU64::new(0)).collect(),
            advice: Default::default(),
        }
    }

    #[inline]
    fn record(&self, op: Op, bytes: u64, latency_ns: Option<u64>, ok: bool, ex: Executor) {
        let Some(c) = (op as usize).checked_sub(1).and_then(|i| self.ops.get(i)) else {
            return;
        };
        bump(&c.count, 1);
        bump(&c.bytes, bytes);
        if let Some(latency_ns) = latency_ns {
            bump(&c.time_ns, latency_ns);
            c.hist.record((latency_ns / 1000).max(1));
        }
        if !ok {
            bump(&c.errors, 1);
        }
        let e = match ex {
            Executor::Issuer | Executor::None => 0,
            Executor::Ring => 1,
            Executor::Waiter => 2,
            Executor::Sim => 3,
            Executor::Worker(n) => 4 + (n as usize).min(EXECUTORS - 5),
        };
        bump(&self.executors[e], 1);
    }

    /// Zeroes everything; only the issuer calls it (when it takes the slot).
    fn clear(&self) {
        for c in &self.ops {
            for a in [&c.count, &c.bytes, &c.errors, &c.time_ns] {
                a.store(0, Ordering::Relaxed);
            }
            c.hist.clear();
        }
        for e in self.executors.iter().chain(&self.advice) {
            e.store(0, Ordering::Relaxed);
        }
    }

    fn copy(&self) -> Copied {
        let ops = self
            .ops
            .iter()
            .map(|c| OpCopy {
                count: c.count.load(Ordering::Relaxed),
                bytes: c.bytes.load(Ordering::Relaxed),
                errors: c.errors.load(Ordering::Relaxed),
                time_ns: c.time_ns.load(Ordering::Relaxed),
                hist: c.hist.copy(),
                max: c.hist.max.load(Ordering::Relaxed),
            })
            .collect();
        let ex = self
            .executors
            .iter()
            .map(|e| e.load(Ordering::Relaxed))
            .collect();
        Copied {
            ops,
            executors: ex,
            advice: self.advice.each_ref().map(|a| a.load(Ordering::Relaxed)),
        }
    }
}

/// What a reader copied of one slot's counters.
#[derive(Default)]
struct Copied {
    ops: Vec<OpCopy>,
    executors: Vec<u64>,
    advice: [u64; ADVICE_EVENTS],
}

/// A reset's baseline for one slot: what the counters held then, and when.
#[derive(Default)]
struct Baseline {
    counters: Copied,
    at_ns: u64,
}

/// One issuer slot's statistics: the counters (made when the slot is first used) and the
/// readers' baseline.
struct SlotStats {
    live: OnceLock<IssuerStats>,
    /// Taken by readers only (a snapshot, a reset), never by the issuer.
    baseline: Mutex<Baseline>,
}

/// Every issuer slot's statistics.
pub(crate) struct StatsTable {
    slots: Box<[SlotStats]>,
    /// `track_io_timing`: record latencies (off: counts and bytes only).
    timed: bool,
}

impl StatsTable {
    pub(crate) fn new(issuers: u32, timed: bool) -> StatsTable {
        StatsTable {
            slots: (0..issuers)
                .map(|_| SlotStats {
                    live: OnceLock::new(),
                    baseline: Mutex::new(Baseline::default()),
                })
                .collect(),
            timed,
        }
    }

    /// A new issuer took slot `slot` (called by that issuer): its counters start from zero
    /// (allocated the first time the slot is used).
    pub(crate) fn issuer_registered(&self, slot: u32, now_ns: u64) {
        let s = &self.slots[slot as usize];
        let live = s.live.get_or_init(IssuerStats::new);
        live.clear();
        *s.baseline.lock() = Baseline {
            at_ns: now_ns,
            ..Baseline::default()
        };
    }

    /// Records one completed I/O of issuer slot `slot`. Only that issuer calls it.
    /// Counts `n` advice events of kind `e` for the issuer in `slot` (its own thread only).
    pub(crate) fn record_advice(&self, slot: u32, e: AdviceEvent, n: u64) {
        if let Some(live) = self.slots[slot as usize].live.get() {
            bump(&live.advice[e as usize], n);
        }
    }

    #[inline]
    pub(crate) fn record(
        &self,
        slot: u32,
        op: Op,
        bytes: u64,
        latency_ns: u64,
        ok: bool,
        ex: Executor,
    ) {
        if let Some(live) = self.slots[slot as usize].live.get() {
            live.record(op, bytes, self.timed.then_some(latency_ns), ok, ex);
        }
    }

    /// Stats of every issuer slot ever used, since its issuer registered or the last reset.
    pub(crate) fn rows(&self, shared: &Shared) -> Vec<IssuerStatsRow> {
        let now = shared.now_ns();
        let mut rows = Vec::new();
        for (slot, st) in self.slots.iter().enumerate() {
            let Some(live) = st.live.get() else {
                continue;
            };
            let info = &shared.issuers[slot];
            let copied = live.copy();
            let base = st.baseline.lock();
            rows.push(row(slot as u32, info, &copied, &base, now));
        }
        rows
    }

    /// Zeroes every issuer's stats, as readers see them.
    pub(crate) fn reset(&self, now_ns: u64) {
        for st in self.slots.iter() {
            if let Some(live) = st.live.get() {
                *st.baseline.lock() = Baseline {
                    counters: live.copy(),
                    at_ns: now_ns,
                };
            }
        }
    }
}

/// One slot's row: the copy minus the baseline.
fn row(
    slot: u32,
    info: &crate::handle::shared::IssuerSlot,
    copied: &Copied,
    base: &Baseline,
    now_ns: u64,
) -> IssuerStatsRow {
    let (ops, executors) = (&copied.ops, &copied.executors);
    let advice =
        |e: AdviceEvent| copied.advice[e as usize].saturating_sub(base.counters.advice[e as usize]);
    let empty = OpCopy::default();
    let ops = OPS
        .iter()
        .zip(ops)
        .enumerate()
        .filter_map(|(i, (op, c))| {
            let b = base.counters.ops.get(i).unwrap_or(&empty);
            let count = c.count.saturating_sub(b.count);
            if count == 0 {
                return None;
            }
            let hist: Vec<u64> = c
                .hist
                .iter()
                .enumerate()
                .map(|(k, n)| n.saturating_sub(b.hist.get(k).copied().unwrap_or(0)))
                .collect();
            // The largest recorded since the baseline: the exact maximum when it is new, else
            // the top of the highest bucket in use.
            let top = hist.iter().rposition(|&n| n > 0).map_or(0, bucket_high);
            let max = if c.max > b.max { c.max } else { top };
            Some(OpStatsRow {
                op: op.name().to_string(),
                count,
                bytes: c.bytes.saturating_sub(b.bytes),
                errors: c.errors.saturating_sub(b.errors),
                time_us: c.time_ns.saturating_sub(b.time_ns) as f64 / 1000.0,
                // A bucket's top may pass the exact maximum in it: no percentile above it.
                lat_us: LatencyRow {
                    p50: quantile(&hist, 0.5).min(max),
                    p99: quantile(&hist, 0.99).min(max),
                    p999: quantile(&hist, 0.999).min(max),
                    max,
                },
            })
        })
        .collect();
    let executors = executors
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            (
                i,
                n.saturating_sub(base.counters.executors.get(i).copied().unwrap_or(0)),
            )
        })
        .filter(|&(_, n)| n > 0)
        .map(|(i, n)| ExecutorRow {
            executor: match i {
                0 => "issuer".to_string(),
                1 => "io_uring".to_string(),
                2 => "waiter".to_string(),
                3 => "sim".to_string(),
                w => format!("worker {}", w - 4),
            },
            ios: n,
        })
        .collect();
    IssuerStatsRow {
        slot,
        issuer: info.name.lock().clone(),
        tid: info.tid.load(Ordering::Relaxed),
        since_s: now_ns.saturating_sub(base.at_ns) as f64 / 1e9,
        ops,
        executors,
        advice: AdviceRow {
            issued: advice(AdviceEvent::Issued),
            suppressed_sequential: advice(AdviceEvent::SuppressedSequential),
            refused_by_budget: advice(AdviceEvent::RefusedByBudget),
            useful: advice(AdviceEvent::Useful),
            wasted: advice(AdviceEvent::Wasted),
        },
        backstop_wakes: info.backstop_wakes.load(Ordering::Relaxed),
        long_waits: info.long_waits.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_their_values_within_two_percent() {
        let mut last = 0;
        for v in (1..2_000_000u64).step_by(7).chain([MAX_US]) {
            let b = bucket_of(v);
            assert!(b >= last, "buckets grow with the value");
            last = b;
            let high = bucket_high(b);
            assert!(high >= v, "bucket {b} holds {v} (high {high})");
            assert!(
                (high - v) as f64 <= v as f64 * 0.016 + 1.0,
                "{v} reported as {high}"
            );
        }
        assert_eq!(bucket_of(MAX_US), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_known_spread() {
        let h = Histogram::new();
        for us in 1..=1000 {
            h.record(us);
        }
        let c = h.copy();
        let p50 = quantile(&c, 0.5);
        assert!((500..=508).contains(&p50), "{p50}");
        let p99 = quantile(&c, 0.99);
        assert!((990..=1006).contains(&p99), "{p99}");
        assert_eq!(h.max.load(Ordering::Relaxed), 1000);
    }
}

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct LatencyRow {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Maximum.
    pub max: u64,
}

/// One op's counters for one issuer.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct OpStatsRow {
    /// `readv`, `writev`, …
    pub op: String,
    /// Completed I/Os.
    pub count: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// I/Os that ended in ERROR.
    pub errors: u64,
    /// Sum of latencies (staging to completion).
    pub time_us: f64,
    /// Latency percentiles.
    pub lat_us: LatencyRow,
}

/// How many I/Os one executor ran for an issuer.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct ExecutorRow {
    /// `issuer`, `io_uring` or `worker N`.
    pub executor: String,
    /// I/Os it executed.
    pub ios: u64,
}

/// What became of one issuer's readahead advice, in blocks (see `docs/design.md`,
/// "Readahead advice").
#[derive(Clone, Copy, Debug, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct AdviceRow {
    /// Blocks advised.
    pub issued: u64,
    /// Blocks not advised: they continued a sequential run (kernel readahead serves those).
    pub suppressed_sequential: u64,
    /// Blocks not advised: the device's advice budget was spent, or no handle was free to
    /// send the advice (docs/aios.md).
    pub refused_by_budget: u64,
    /// Advised blocks found in the page cache when read, among those probed: one advised
    /// block in 16 is looked at (a one-byte non-blocking read) as its turn to be read comes,
    /// so `useful + wasted` is about `issued / 16`; read them as a ratio.
    pub useful: u64,
    /// Probed advised blocks not in the page cache when read (advised too late, or
    /// evicted); see `useful`.
    pub wasted: u64,
}

impl std::ops::AddAssign for AdviceRow {
    fn add_assign(&mut self, o: AdviceRow) {
        self.issued += o.issued;
        self.suppressed_sequential += o.suppressed_sequential;
        self.refused_by_budget += o.refused_by_budget;
        self.useful += o.useful;
        self.wasted += o.wasted;
    }
}

/// One issuer's stats.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct IssuerStatsRow {
    /// Issuer slot.
    pub slot: u32,
    /// Issuer name.
    pub issuer: String,
    /// OS thread id that registered it.
    pub tid: i32,
    /// Seconds since the stats were started or reset.
    pub since_s: f64,
    /// Per-op counters (ops never used are left out).
    pub ops: Vec<OpStatsRow>,
    /// Per-executor counts.
    pub executors: Vec<ExecutorRow>,
    /// What became of its read streams' readahead advice.
    #[serde(default)]
    pub advice: AdviceRow,
    /// Waits on its I/Os that a safety-net timeout ended although what they waited for had
    /// happened — missed wake-ups, since it registered. 0 unless dbaio has a bug.
    #[serde(default)]
    pub backstop_wakes: u64,
    /// Waits on its I/Os that lasted the whole 100 ms safety net, whatever ended them: I/Os
    /// slower than that, or the missed wake-ups counted above. Where every I/O takes less,
    /// 0 unless dbaio has a bug.
    #[serde(default)]
    pub long_waits: u64,
}
