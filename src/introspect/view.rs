//! The aios view: a snapshot of every non-idle handle with PostgreSQL's `pg_aios` columns plus
//! dbaio's (issuer, tid, executor, age), and a snapshot of what each issuer is waiting for.
//!
//! Taken without stopping I/O, as PostgreSQL's `pg_get_aios` does: read the generation, read
//! the state, copy the slot (every field is an atomic, so the copy cannot race), then re-check.
//! A changed generation means a newer I/O: skip the slot (retrying could chase fast I/Os
//! forever). A changed state only: retry (states only move forward through a finite set).
//! Fields whose generation (`fields_generation`) is not the slot's belong to an I/O being
//! recycled: skip. Within one state nothing is re-checked, so a result is shown only once
//! the state says the I/O completed.
//! See `docs/aios.md`.

use crate::handle::files::NO_FILE;
use crate::handle::op::{HandleFlags, Op};
use crate::handle::result::IoResult;
use crate::handle::shared::Shared;
use crate::handle::slot::{Executor, HandleState, NO_BLOCK};
use crate::handle::wait_event::WaitEvent;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{Ordering, fence};

/// One row of the aios view. Columns up to `f_buffered` are PostgreSQL's `pg_aios`, with its
/// null rules: idle handles are not listed; while HANDED_OUT every column after `state` is
/// null; `raw_result` is set only once the I/O completed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AioRow {
    /// Process id of the issuer (this process).
    pub pid: i32,
    /// Handle index; stable across reuse.
    pub io_id: u32,
    /// The handle's generation at snapshot time.
    pub io_generation: u64,
    /// `HANDED_OUT`, `DEFINED`, `STAGED`, `SUBMITTED`, `COMPLETED_IO`, `COMPLETED_SHARED`,
    /// `COMPLETED_LOCAL`.
    pub state: String,
    /// `readv`, `writev`, `fsync`, …
    pub operation: Option<String>,
    /// File offset in bytes.
    pub off: Option<u64>,
    /// Bytes (data ops) or the length argument.
    pub length: Option<u64>,
    /// Target kind: `file`, or `path` for unlink and rename.
    pub target: Option<String>,
    /// Handle data words set by the issuer (for buffer I/O: the number of buffers).
    pub handle_data_len: Option<u16>,
    /// Raw result (bytes or -errno), only once completed.
    pub raw_result: Option<i32>,
    /// `UNKNOWN`, `OK`, `PARTIAL`, `WARNING`, `ERROR`.
    pub result: Option<String>,
    /// e.g. `blocks 7..23 in file "base/5/16403"`.
    pub target_desc: Option<String>,
    /// Flag SYNCHRONOUS.
    pub f_sync: Option<bool>,
    /// Flag REFERENCES_LOCAL.
    pub f_localmem: Option<bool>,
    /// Flag BUFFERED.
    pub f_buffered: Option<bool>,
    /// dbaio: the issuer's name.
    pub issuer: String,
    /// dbaio: the issuer's OS thread id.
    pub tid: i32,
    /// dbaio: who executes or executed it (`issuer`, `worker N`, `io_uring`; `-` not yet).
    pub executor: String,
    /// dbaio: microseconds since it was staged (0 while handed out or defined).
    pub age_us: u64,
}

/// One device's readahead-advice budget (see `Settings::io_advice_budget`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AdviceBudgetRow {
    /// The device, `major:minor`.
    pub device: String,
    /// Blocks advised and not yet read, all issuers together.
    pub in_use: u32,
    /// The most in use at once since start.
    pub peak: u32,
    /// The cap (`io_advice_budget`).
    pub limit: u32,
}

/// Every device's advice budget seen so far.
pub(crate) fn advice_budget(shared: &Shared) -> Vec<AdviceBudgetRow> {
    shared
        .advice
        .rows()
        .into_iter()
        .map(|r| AdviceBudgetRow {
            device: format!("{}:{}", libc::major(r.dev), libc::minor(r.dev)),
            in_use: r.in_use,
            peak: r.peak,
            limit: r.limit,
        })
        .collect()
}

/// The worker method's pool: its sizing and every running worker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WorkerPoolRow {
    /// Workers it always runs (`io_min_workers`, or `io_workers` when fixed).
    pub min: u32,
    /// The most it runs (`io_max_workers`, or `io_workers` when fixed).
    pub max: u32,
    /// I/Os queued for a worker and not yet picked up. One its waiter took back and ran
    /// itself is left out at once (it can be off by one for a moment while a worker drops
    /// such an entry).
    pub queued: usize,
    /// Workers started because I/Os waited for one, since start.
    pub grown: u32,
    /// Workers that left after `io_worker_idle_timeout`, since start.
    pub retired: u32,
    /// Workers replaced after a panic (threads) or a death (processes), since start.
    pub replaced: u32,
    /// `thread` or `process` (`io_worker_kind`).
    pub kind: String,
    /// I/Os run in the issuer instead of a worker process because the process could not
    /// run them, since start: memory it cannot reach (a buffer made before worker processes
    /// started), an `unlink` or `rename` (the path is the embedder's memory), or more iovecs
    /// than a request cell holds.
    pub ran_locally: u64,
    /// I/Os queued again because the worker process executing them died, since start.
    pub requeued: u64,
    /// Worker processes: waits that slept to their 100 ms safety limit although an awaited
    /// I/O had completed (a missed wake-up), since start. Always 0 unless there is a bug.
    #[serde(default)]
    pub missed_wakes: u64,
    /// Worker processes: closes whose wait for a worker to close its descriptor of the file
    /// reached its second (a worker stopped, or in a very long I/O), since start. A later
    /// close does not wait for that worker again until it has swept; one waiting at the same
    /// time stops when the first gives up, and is not counted.
    #[serde(default)]
    pub close_waits_expired: u64,
    /// Workers the pool counts as running (what its sizing and retiring go by).
    #[serde(default)]
    pub live: u32,
    /// Every running worker, lowest number first.
    pub workers: Vec<WorkerRow>,
}

/// One worker of the pool.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WorkerRow {
    /// Its number: the `executor` column shows `worker N` for the I/Os it runs.
    pub worker: u32,
    /// Its thread id, or its process id for a worker process.
    pub tid: i32,
    /// `busy` (executing an I/O) or `idle`.
    pub state: String,
    /// I/Os it executed since it started.
    pub ios_done: u64,
}

/// The worker pool now; None unless the method is `worker`.
pub(crate) fn worker_pool(pool: Option<&dbaio_workers::PoolObserver>) -> Option<WorkerPoolRow> {
    let snap = pool?.snapshot()?;
    Some(WorkerPoolRow {
        min: snap.size.min,
        max: snap.size.max,
        queued: snap.queued,
        grown: snap.grown,
        retired: snap.retired,
        replaced: snap.replaced,
        kind: if snap.processes { "process" } else { "thread" }.to_string(),
        ran_locally: snap.local,
        requeued: snap.requeued,
        missed_wakes: snap.missed_wakes,
        close_waits_expired: snap.close_waits_expired,
        live: snap.live,
        workers: snap
            .workers
            .into_iter()
            .map(|w| WorkerRow {
                worker: w.id,
                tid: w.tid,
                state: if w.busy { "busy" } else { "idle" }.to_string(),
                ios_done: w.done,
            })
            .collect(),
    })
}

/// What one issuer is waiting for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WaitRow {
    /// Issuer slot.
    pub slot: u32,
    /// Issuer name.
    pub issuer: String,
    /// OS thread id.
    pub tid: i32,
    /// Wait event name (empty: not waiting).
    pub wait_event: String,
    /// What it waits on (e.g. `io 17`, `4 I/Os`).
    pub waiting_on: String,
    /// How long it has been waiting, in microseconds.
    pub wait_us: u64,
}

/// A consistent copy of one slot.
struct SlotCopy {
    state: HandleState,
    generation: u64,
    op: Op,
    offset: u64,
    length: u64,
    file: u32,
    first_block: u32,
    nblocks: u32,
    handle_data_len: u16,
    raw_result: i32,
    distilled: IoResult,
    flags: HandleFlags,
    staged_ns: u64,
    executor: Executor,
    fields_generation: u32,
}

fn copy_slot(shared: &Shared, i: u32) -> Option<SlotCopy> {
    let s = shared.slot(i);
    let r = Ordering::Relaxed;
    let generation = s.generation.load(Ordering::Acquire);
    loop {
        let state = s.state();
        if state == HandleState::Idle {
            return None;
        }
        let copy = SlotCopy {
            state,
            generation,
            op: s.op(),
            offset: s.offset.load(r),
            length: s.length.load(r),
            file: s.file.load(r),
            first_block: s.first_block.load(r),
            nblocks: s.nblocks.load(r),
            handle_data_len: s.handle_data_len.load(r),
            raw_result: s.raw_result.load(r),
            distilled: s.distilled(),
            flags: s.flags(),
            staged_ns: s.staged_ns.load(r),
            executor: Executor::decode(s.executor.load(r)),
            fields_generation: s.fields_generation.load(r),
        };
        // Every load above happens before the re-check below.
        fence(Ordering::Acquire);
        if s.generation.load(Ordering::Acquire) != generation {
            return None;
        }
        if s.state() == state {
            // A handle between its next generation and IDLE (being recycled) still holds
            // the finished I/O's fields under the new generation: the I/O is over, skip it.
            let stale =
                state != HandleState::HandedOut && copy.fields_generation != generation as u32;
            return (!stale).then_some(copy);
        }
    }
}

/// The aios view: every non-idle handle, sorted by issuer slot then age (oldest first).
pub(crate) fn aios(shared: &Shared, pool: Option<&dbaio_workers::PoolObserver>) -> Vec<AioRow> {
    let pid = std::process::id() as i32;
    let now = shared.io_clock_ns();
    let mut rows = Vec::new();
    // Which worker process has what: asked once, and only if a row needs it.
    let mut taken: Option<Vec<(u32, u32, u32)>> = None;
    for i in 0..shared.n_handles {
        let Some(mut c) = copy_slot(shared, i) else {
            continue;
        };
        if c.state == HandleState::Submitted
            && c.executor == Executor::None
            && let Some(pool) = pool
        {
            // (In slot order: a search per row, not a scan.)
            let taken = taken.get_or_insert_with(|| pool.taken());
            if let Ok(k) = taken.binary_search_by_key(&i, |&(slot, _, _)| slot)
                && taken[k].1 == c.generation as u32
            {
                c.executor = Executor::Worker(taken[k].2);
            }
        }
        let owner = i / shared.per_issuer;
        let info = &shared.issuers[owner as usize];
        let mut row = AioRow {
            pid,
            io_id: i,
            io_generation: c.generation,
            state: c.state.name().to_string(),
            operation: None,
            off: None,
            length: None,
            target: None,
            handle_data_len: None,
            raw_result: None,
            result: None,
            target_desc: None,
            f_sync: None,
            f_localmem: None,
            f_buffered: None,
            issuer: info.name.lock().clone(),
            tid: info.tid.load(Ordering::Relaxed),
            executor: c.executor.to_string(),
            age_us: 0,
        };
        if c.state != HandleState::HandedOut {
            let completed = c.state >= HandleState::CompletedIo;
            row.operation = Some(c.op.name().to_string());
            row.off = Some(c.offset);
            row.length = Some(c.length);
            row.target = Some(if c.file == NO_FILE { "path" } else { "file" }.to_string());
            row.handle_data_len = Some(c.handle_data_len);
            row.raw_result = completed.then_some(c.raw_result);
            // (An issuer running an I/O itself stores its result a moment before it moves the
            // state: until then the result is not the I/O's yet.)
            let status = match completed {
                true => c.distilled.status,
                false => crate::handle::result::Status::Unknown,
            };
            row.result = Some(status.name().to_string());
            row.target_desc = Some(describe(shared, &c));
            row.f_sync = Some(c.flags.contains(HandleFlags::SYNCHRONOUS));
            row.f_localmem = Some(c.flags.contains(HandleFlags::REFERENCES_LOCAL));
            row.f_buffered = Some(c.flags.contains(HandleFlags::BUFFERED));
            if c.staged_ns > 0 {
                row.age_us = now.saturating_sub(c.staged_ns) / 1000;
            }
        }
        rows.push(row);
    }
    rows.sort_by(|a, b| {
        (a.io_id / shared.per_issuer, b.age_us).cmp(&(b.io_id / shared.per_issuer, a.age_us))
    });
    rows
}

fn describe(shared: &Shared, c: &SlotCopy) -> String {
    if c.file == NO_FILE {
        // The path itself may be gone by now (the I/O's memory goes with it).
        return format!("{} by path", c.op.name());
    }
    let path = shared.files.path(c.file);
    let p = path.display();
    match c.op {
        // No range: a sync names its file, a truncation the size it sets.
        Op::Fsync | Op::Fdatasync => return format!("file \"{p}\""),
        Op::Ftruncate => return format!("file \"{p}\" to {} bytes", c.length),
        _ => {}
    }
    match (c.first_block, c.nblocks) {
        (NO_BLOCK, _) => format!("{} bytes at offset {} in file \"{p}\"", c.length, c.offset),
        (f, 1) => format!("block {f} in file \"{p}\""),
        (f, n) => format!("blocks {f}..{} in file \"{p}\"", f + n.max(1) - 1),
    }
}

/// What every registered issuer is waiting for.
pub(crate) fn waits(shared: &Shared) -> Vec<WaitRow> {
    let now = shared.io_clock_ns();
    let mut rows = Vec::new();
    for (slot, info) in shared.issuers.iter().enumerate() {
        if !info.in_use.load(Ordering::Acquire) {
            continue;
        }
        // A slot being registered has no thread id yet (published after its name).
        let tid = info.tid.load(Ordering::Acquire);
        if tid == 0 {
            continue;
        }
        let ev = WaitEvent::from_code(info.wait_event.load(Ordering::Acquire));
        let obj = info.wait_object.load(Ordering::Relaxed);
        let since = info.wait_since_ns.load(Ordering::Relaxed);
        let waiting_on = match ev {
            WaitEvent::None => String::new(),
            WaitEvent::AioHandleFree => format!("{} handles busy", shared.per_issuer),
            WaitEvent::AioIoCompletions => format!("{obj} I/Os"),
            _ => format!("io {obj}"),
        };
        rows.push(WaitRow {
            slot: slot as u32,
            issuer: info.name.lock().clone(),
            tid,
            wait_event: ev.name().to_string(),
            waiting_on,
            wait_us: if ev == WaitEvent::None {
                0
            } else {
                now.saturating_sub(since) / 1000
            },
        });
    }
    rows
}
