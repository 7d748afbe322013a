//! Statistics like `pg_stat_io`, per issuer: for every op, count, bytes, errors, total time and
//! an HDR latency histogram (staging to completion); per executor, how many I/Os it ran. The
//! issuer records at reclaim under its own slot's mutex, which only it and an occasional
//! reader take, so there is no shared lock on the hot path. See `docs/aios.md`, "Stats".

use crate::handle::op::Op;
use crate::handle::shared::Shared;
use crate::handle::slot::Executor;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Ops in stats order (index = `Op as usize - 1`).
pub(crate) const OPS: [Op; 8] = [
    Op::Readv,
    Op::Writev,
    Op::Fsync,
    Op::Fdatasync,
    Op::Unlink,
    Op::FadviseWillneed,
    Op::Fallocate,
    Op::Ftruncate,
];

/// Executor slots: issuer, io_uring, then workers 0..32.
const EXECUTORS: usize = 2 + 32;

struct OpCounters {
    count: u64,
    bytes: u64,
    errors: u64,
    time_ns: u64,
    hist: Histogram<u64>,
}

/// One issuer's counters. Created when the issuer slot is first used; never reallocated.
pub(crate) struct IssuerStats {
    ops: Vec<OpCounters>,
    executors: [u64; EXECUTORS],
    since: Instant,
}

impl IssuerStats {
    pub(crate) fn new() -> IssuerStats {
        let ops = OPS
            .iter()
            .map(|_| OpCounters {
                count: 0,
                bytes: 0,
                errors: 0,
                time_ns: 0,
                // 1 µs .. 100 s with 2 significant digits: ~20 KiB per histogram.
                hist: Histogram::new_with_bounds(1, 100_000_000, 2).expect("valid bounds"),
            })
            .collect();
        IssuerStats {
            ops,
            executors: [0; EXECUTORS],
            since: Instant::now(),
        }
    }

    /// Records one completed I/O.
    pub(crate) fn record(&mut self, op: Op, bytes: u64, latency_ns: u64, ok: bool, ex: Executor) {
        let Some(i) = (op as usize).checked_sub(1).filter(|&i| i < OPS.len()) else {
            return;
        };
        let c = &mut self.ops[i];
        c.count += 1;
        c.bytes += bytes;
        c.time_ns += latency_ns;
        if !ok {
            c.errors += 1;
        }
        c.hist.saturating_record((latency_ns / 1000).max(1));
        let e = match ex {
            Executor::Issuer | Executor::None => 0,
            Executor::Ring => 1,
            Executor::Worker(n) => 2 + (n as usize).min(EXECUTORS - 3),
        };
        self.executors[e] += 1;
    }

    pub(crate) fn reset(&mut self) {
        for c in &mut self.ops {
            c.count = 0;
            c.bytes = 0;
            c.errors = 0;
            c.time_ns = 0;
            c.hist.reset();
        }
        self.executors = [0; EXECUTORS];
        self.since = Instant::now();
    }

    pub(crate) fn snapshot(&self, slot: u32, issuer: String, tid: i32) -> IssuerStatsRow {
        let ops = OPS
            .iter()
            .zip(&self.ops)
            .filter(|(_, c)| c.count > 0)
            .map(|(op, c)| OpStatsRow {
                op: op.name().to_string(),
                count: c.count,
                bytes: c.bytes,
                errors: c.errors,
                time_us: c.time_ns as f64 / 1000.0,
                lat_us: LatencyRow {
                    p50: c.hist.value_at_quantile(0.5),
                    p99: c.hist.value_at_quantile(0.99),
                    p999: c.hist.value_at_quantile(0.999),
                    max: c.hist.max(),
                },
            })
            .collect();
        let executors = self
            .executors
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, &n)| ExecutorRow {
                executor: match i {
                    0 => "issuer".to_string(),
                    1 => "io_uring".to_string(),
                    w => format!("worker {}", w - 2),
                },
                ios: n,
            })
            .collect();
        IssuerStatsRow {
            slot,
            issuer,
            tid,
            since_s: self.since.elapsed().as_secs_f64(),
            ops,
            executors,
        }
    }
}

/// Every issuer slot's statistics, created when the slot is first used.
pub(crate) struct StatsTable {
    slots: Box<[Mutex<Option<Box<IssuerStats>>>]>,
}

impl StatsTable {
    pub(crate) fn new(issuers: u32) -> StatsTable {
        StatsTable {
            slots: (0..issuers).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// A new issuer took slot `slot`: its counters start from zero (allocated the first time).
    pub(crate) fn issuer_registered(&self, slot: u32) {
        let mut st = self.slots[slot as usize].lock();
        match st.as_mut() {
            Some(st) => st.reset(),
            None => *st = Some(Box::new(IssuerStats::new())),
        }
    }

    /// Records one completed I/O of issuer slot `slot`.
    pub(crate) fn record(
        &self,
        slot: u32,
        op: Op,
        bytes: u64,
        latency_ns: u64,
        ok: bool,
        ex: Executor,
    ) {
        if let Some(st) = self.slots[slot as usize].lock().as_mut() {
            st.record(op, bytes, latency_ns, ok, ex);
        }
    }

    /// Stats of every issuer slot ever used.
    pub(crate) fn rows(&self, shared: &Shared) -> Vec<IssuerStatsRow> {
        let mut rows = Vec::new();
        for (slot, st) in self.slots.iter().enumerate() {
            let info = &shared.issuers[slot];
            let name = info.name.lock().clone();
            if let Some(st) = st.lock().as_ref() {
                rows.push(st.snapshot(slot as u32, name, info.tid.load(Ordering::Relaxed)));
            }
        }
        rows
    }

    /// Zeroes every issuer's stats.
    pub(crate) fn reset(&self) {
        for st in self.slots.iter() {
            if let Some(st) = st.lock().as_mut() {
                st.reset();
            }
        }
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
}
