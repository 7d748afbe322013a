//! The `worker` method: I/Os go to a pool of workers (fixed by `io_workers`, or sized by load
//! between `io_min_workers` and `io_max_workers`).
//!
//! With `io_worker_kind = thread` the workers are threads pulling from a bounded queue; they
//! run the shared callbacks, so completion never needs the issuer. When the queue is full the
//! issuer runs the overflow itself, after queueing the rest.
//!
//! With `io_worker_kind = process` they are processes (`dbaio_workers::process`): an I/O is
//! copied into its request cell in the shared control segment (its buffers named by offsets
//! in the shared arena), a process executes it, and the pool's completer thread completes it
//! here, where the callbacks live. An I/O whose memory a process cannot reach (a buffer made
//! before the arena existed, an `unlink` path) runs in the issuer, counted in the view.
//!
//! With either kind, a buffered read of up to 16 KiB is first tried in the issuer at submit
//! without blocking (`io_worker_try_cached`, [`CachedReads`]): a page-cache hit completes
//! there, and only a miss is handed to a worker.
//! See `docs/design.md`, "Methods" and "Worker processes".

use super::IoMethod;
use crate::handle::error::AioError;
use crate::handle::op::HandleFlags;
use crate::handle::settings::{IoMethodKind, IoWorkerKind, Settings};
use crate::handle::shared::{Completed, Drive, Shared};
use crate::handle::slot::{Executor, HandleSlot, HandleState};
use dbaio_sys::{Cached, Op, try_read_cached};
use dbaio_workers::process::{ClosedInWorkers, ProcessConfig, ProcessPool, ProcessSink};
use dbaio_workers::{CompletionSink, PoolObserver, PoolSize, WorkerPool};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::time::Duration;

/// How many of its newest unfinished I/Os an issuer about to sleep may run itself.
const HELP_CANDIDATES: usize = 4;

/// Posts worker completions into the shared table.
struct Sink(Arc<Shared>);

impl CompletionSink for Sink {
    fn prepare(&self, worker: u32, req: &mut dbaio_sys::Request) -> bool {
        let s = self.0.slot(req.user_data as u32);
        // A thread waiting for it may have taken it and run it already.
        if !s.take_queued((req.user_data >> 32) as u32) {
            return false;
        }
        // Shown in the aios view while the worker executes it.
        s.executor
            .store(Executor::Worker(worker).encode(), Ordering::Relaxed);
        true
    }

    fn complete(&self, worker: u32, user_data: u64, result: i32) {
        let (i, ex) = (user_data as u32, Executor::Worker(worker));
        if self.0.complete(i, result, ex) == Completed::Retry {
            // EAGAIN/EINTR: this worker executes it again at once.
            self.0.run_here(i, ex);
        }
    }

    fn panicked(&self, worker: u32, user_data: u64) {
        let i = user_data as u32;
        // This worker was the I/O's completer: if it is not complete, nobody else will do it.
        if self.0.slot(i).state() == HandleState::Submitted {
            self.0.fail_panicked(i, Executor::Worker(worker));
        }
    }
}

/// Posts worker-process completions into the shared table (on the pool's completer thread).
struct ProcSink(Arc<Shared>);

impl ProcessSink for ProcSink {
    fn complete(&self, worker: u32, i: u32, result: i32) {
        let ex = Executor::Worker(worker);
        if self.0.complete(i, result, ex) == Completed::Retry {
            // EAGAIN/EINTR: executed again here, at once.
            self.0.run_here(i, ex);
        }
    }

    fn lost(&self, worker: u32, i: u32) {
        self.0.fail_worker_lost(i, Executor::Worker(worker));
    }

    fn panicked(&self, worker: u32, i: u32) {
        if self.0.slot(i).state() == HandleState::Submitted {
            self.0.fail_panicked(i, Executor::Worker(worker));
        }
    }
}

/// The worker pool's sizing: `io_workers` fixed when set (1..32), otherwise
/// `io_min_workers .. io_max_workers` (a minimum above the maximum is refused at start by
/// [`Settings::validate`]; the clamp below only keeps this function total), growing no
/// faster than `io_worker_launch_interval`, shrinking after `io_worker_idle_timeout`.
fn pool_size(settings: &Settings) -> PoolSize {
    if settings.io_workers > 0 {
        return PoolSize::fixed(settings.io_workers);
    }
    let max = settings.io_max_workers.max(1);
    PoolSize {
        min: settings.io_min_workers.clamp(1, max),
        max,
        idle_timeout: Duration::from_millis(settings.io_worker_idle_timeout.into()),
        launch_interval: Duration::from_millis(settings.io_worker_launch_interval.into()),
    }
}

pub(crate) struct WorkerMethod {
    engine: Engine,
    /// `io_worker_try_cached`: buffered reads are first tried here, without blocking.
    cached: Option<CachedReads>,
}

/// What the issuers have learnt about trying each file's buffered reads without blocking:
/// per file slot, how many tries in a row missed the page cache (or [`UNSUPPORTED`]). Shared
/// by all issuers and updated with plain loads and stores: two issuers racing on one file
/// only blur the count, which is a heuristic.
struct CachedReads {
    misses: Box<[AtomicU8]>,
    /// Counts skipped tries on files that keep missing, so that one in [`SAMPLE`] still tries.
    tick: AtomicU32,
}

/// A file whose file system refuses non-blocking reads (tmpfs): never tried again while open.
const UNSUPPORTED: u8 = u8::MAX;
/// Misses in a row after which a file's reads are tried only one time in [`SAMPLE`]: a cold
/// file then costs the issuer one wasted system call per `SAMPLE` reads, not one per read.
const MISSES_BEFORE_SAMPLING: u8 = 8;
const SAMPLE: u32 = 32;
/// Larger reads always go to a worker. A hit saves a hand-off but copies on the issuer's
/// thread, one read after another, where workers copy in parallel: measured from the page
/// cache at depth 32, trying reads here wins at 4 KiB, ties at 16 KiB (with half the CPU)
/// and loses from 32 KiB up (docs/benchmarks.md, "Page-cache reads on the worker and
/// io_uring methods"). PostgreSQL's single blocks (8 KiB) are tried; combined reads go to
/// the workers.
const MAX_TRY_BYTES: u64 = 16 << 10;

/// A buffered read of at most [`MAX_TRY_BYTES`]: the reads tried in the page cache at
/// submit, so those that reach the queue missed it.
fn small_buffered_read(s: &HandleSlot) -> bool {
    s.op() == Op::Readv
        && s.flags().contains(HandleFlags::BUFFERED)
        && s.length.load(Ordering::Relaxed) <= MAX_TRY_BYTES
}

impl CachedReads {
    /// Runs buffered read `i` (SUBMITTED, claimed by the caller) in the calling thread if
    /// the page cache holds all of it; true if it did (the read is complete).
    fn try_read(&self, shared: &Shared, i: u32) -> bool {
        let s = shared.slot(i);
        if !small_buffered_read(s) {
            return false;
        }
        let Some(misses) = self.misses.get(s.file.load(Ordering::Relaxed) as usize) else {
            return false;
        };
        let n = misses.load(Ordering::Relaxed);
        if n == UNSUPPORTED {
            return false;
        }
        if n >= MISSES_BEFORE_SAMPLING {
            let t = self.tick.load(Ordering::Relaxed).wrapping_add(1);
            self.tick.store(t, Ordering::Relaxed);
            if t % SAMPLE != 0 {
                return false;
            }
        }
        // SAFETY: the handle is SUBMITTED and claimed by the caller; its iovecs name memory
        // the issuer parks in the handle until reclaim, which cannot come before the
        // completion below.
        match unsafe { try_read_cached(&shared.request(i)) } {
            Cached::Done(bytes) => {
                if n != 0 {
                    misses.store(0, Ordering::Relaxed);
                }
                if shared.complete_catching(i, bytes, Executor::Issuer) == Completed::Retry {
                    shared.run_here(i, Executor::Issuer);
                }
                true
            }
            Cached::Miss => {
                misses.store(n.saturating_add(1).min(UNSUPPORTED - 1), Ordering::Relaxed);
                false
            }
            Cached::Unsupported => {
                misses.store(UNSUPPORTED, Ordering::Relaxed);
                false
            }
        }
    }
}

enum Engine {
    Threads(WorkerPool),
    Processes(ProcessPool),
}

impl WorkerMethod {
    pub(crate) fn start(
        settings: &Settings,
        shared: &Arc<Shared>,
    ) -> Result<WorkerMethod, AioError> {
        let engine = match settings.io_worker_kind {
            IoWorkerKind::Thread => {
                let pool = WorkerPool::start(
                    pool_size(settings),
                    settings.io_worker_queue_size as usize,
                    "dbaio-io-worker",
                    Arc::new(Sink(Arc::clone(shared))),
                    settings.io_worker_batch_scheduling,
                )
                .map_err(AioError::Start)?;
                Engine::Threads(pool)
            }
            IoWorkerKind::Process => {
                // The running program's own image, even if its file has been replaced or
                // removed since it started (an upgrade in place): `/proc/self/exe`, read in
                // the new process before it executes, names the embedder's executable.
                let program = match &settings.io_worker_program {
                    Some(p) => p.clone(),
                    None => std::path::PathBuf::from("/proc/self/exe"),
                };
                let pool = ProcessPool::start(
                    ProcessConfig {
                        size: pool_size(settings),
                        handles: shared.handle_count(),
                        files: settings.max_files,
                        program,
                        batch_scheduling: settings.io_worker_batch_scheduling,
                    },
                    Arc::new(ProcSink(Arc::clone(shared))),
                )
                .map_err(AioError::Start)?;
                // Waiters for worker processes sleep on the pool's word, which posts from
                // the processes wake; a completion in this process wakes it too.
                let wake = pool.waker();
                let _ = shared
                    .on_completion
                    .set(Box::new(move || wake.completed_here()));
                Engine::Processes(pool)
            }
        };
        let cached = settings.io_worker_try_cached.then(|| CachedReads {
            misses: (0..settings.max_files).map(|_| AtomicU8::new(0)).collect(),
            tick: AtomicU32::new(0),
        });
        Ok(WorkerMethod { engine, cached })
    }

    /// Whether handle `i` (this issuer's, in flight) is an I/O that mostly waits for the
    /// device, which its issuer may run itself rather than sleep: an O_DIRECT read or write,
    /// or a buffered read small enough to have been tried in the page cache first (so it
    /// missed). Not a buffered copy from or to the page cache: those are CPU work, which the
    /// workers already spread over the CPUs, and the issuer taking its share of those was
    /// slower at 32–64 KiB (docs/benchmarks.md, "Page-cache reads on the worker and io_uring
    /// methods").
    fn waits_for_device(&self, shared: &Shared, i: u32) -> bool {
        let s = shared.slot(i);
        s.op().transfers_data()
            && (!s.flags().contains(HandleFlags::BUFFERED)
                || (self.cached.is_some() && small_buffered_read(s)))
    }
}

impl IoMethod for WorkerMethod {
    fn kind(&self) -> IoMethodKind {
        IoMethodKind::Worker
    }

    fn needs_synchronous_execution(&self, shared: &Shared, i: u32) -> bool {
        shared
            .slot(i)
            .flags()
            .contains(HandleFlags::REFERENCES_LOCAL)
    }

    /// Both kinds of worker: the issuer would sleep through the hand-off, and a worker
    /// process's isolation is not at stake (the embedder's own `pread` into its own memory
    /// — what a waiter that takes a request back does already).
    fn runs_awaited_io_here(&self) -> bool {
        true
    }

    fn submit(&self, shared: &Shared, _issuer: u32, handles: &[u32]) {
        let pool = match &self.engine {
            Engine::Threads(pool) => pool,
            Engine::Processes(procs) => return self.submit_to_processes(procs, shared, handles),
        };
        let mut queued = 0u32;
        let mut overflow_from = None;
        for (k, &i) in handles.iter().enumerate() {
            if !shared.claim_submit(i) {
                continue; // a waiter found it staged and ran it
            }
            if self.read_cached(shared, i) {
                continue;
            }
            match queue(pool, shared, i) {
                true => queued += 1,
                false => {
                    overflow_from = Some(k);
                    break;
                }
            }
        }
        pool.wake(queued);
        if let Some(k) = overflow_from {
            // handles[k] is claimed already; the later ones are not yet.
            for (n, &i) in handles[k..].iter().enumerate() {
                if n > 0 && !shared.claim_submit(i) {
                    continue;
                }
                // A later entry may fit now that workers drained some.
                if queue(pool, shared, i) {
                    pool.wake(1);
                } else {
                    shared.run_here(i, Executor::Issuer);
                }
            }
        }
    }

    /// An I/O its waiter finds still queued, not yet picked up by a worker, is run by the
    /// waiter itself: it would otherwise pay a worker's wakeup and hand-off for nothing
    /// (PostgreSQL's workers cannot do this: the queue is theirs alone). The queue mark
    /// (threads) or the request cell's QUEUED → FREE take-back (processes) makes sure exactly
    /// one of the waiter and a worker runs it. An I/O a worker process holds is waited for
    /// by completing what the processes post (`ProcessPool::drive`); anything else — a worker
    /// thread runs it, or it never went to a worker — by sleeping on the handle.
    fn drive_one(&self, shared: &Shared, i: u32, generation: u64) -> Drive {
        let procs = match &self.engine {
            Engine::Threads(pool) => {
                if !shared.slot(i).take_queued_exact(generation) {
                    return Drive::Sleep; // a worker has it: it wakes the handle
                }
                pool.taken_back();
                shared.run_here(i, Executor::Waiter);
                return Drive::Progressed;
            }
            Engine::Processes(procs) => procs,
        };
        if procs.take_back(i, generation as u32) {
            shared.run_here(i, Executor::Waiter);
            return Drive::Progressed;
        }
        if !procs.holds(i, generation as u32) {
            return Drive::Sleep;
        }
        let s = shared.slot(i);
        let mine = || {
            s.generation.load(Ordering::Acquire) == generation
                && s.state() == HandleState::Submitted
        };
        procs.drive(|| u32::from(mine()), || false);
        Drive::Progressed
    }

    /// The issuer is about to sleep until workers finish its I/Os; one of them still in the
    /// queue, run here, is a completion sooner than any sleep gives and, on a device, one
    /// read more in flight than the workers alone keep (a ninth executor beside 8). The
    /// newest go first: workers take the oldest, so those are the least contested. With
    /// worker processes the issuer also completes what the workers post itself while it
    /// waits, instead of being woken by the completer thread once that has (one hand-off
    /// fewer).
    fn drive_many(
        &self,
        shared: &Shared,
        issuer: u32,
        staged: &[u32],
        awaited: &[(u32, u64)],
        need: u32,
    ) -> Drive {
        let help = || {
            awaited
                .iter()
                .rev()
                .take(HELP_CANDIDATES)
                .any(|&(i, generation)| self.help_with(shared, i, generation))
        };
        let Engine::Processes(procs) = &self.engine else {
            if !staged.is_empty() {
                self.submit(shared, issuer, staged);
            }
            return if help() {
                Drive::Progressed
            } else {
                Drive::Sleep
            };
        };
        if !staged.is_empty() {
            self.submit_to_processes(procs, shared, staged);
        }
        let complete = || {
            awaited
                .iter()
                .filter(|&&(i, g)| {
                    let s = shared.slot(i);
                    s.generation.load(Ordering::Acquire) != g || s.state().is_complete()
                })
                .count() as u32
        };
        procs.drive(|| need.saturating_sub(complete()), help);
        Drive::Progressed
    }

    /// Worker processes: a request left queued beside idle workers for a millisecond gets
    /// one woken (`ProcessPool::rescue`).
    fn nudge(&self) {
        if let Engine::Processes(procs) = &self.engine {
            procs.rescue();
        }
    }

    /// Worker processes: completes what the processes have posted, here (worker threads
    /// complete their I/Os themselves).
    fn poll(&self, _shared: &Shared, _issuer: u32) {
        if let Engine::Processes(procs) = &self.engine {
            procs.poll();
        }
    }

    /// Worker processes: the completer is woken for handle `i`'s result, even while an
    /// embedder thread is draining others (it would otherwise leave it to that thread, up to
    /// 9 ms if the thread stops draining).
    fn watch(&self, _issuer: u32, i: u32) {
        if let Engine::Processes(procs) = &self.engine {
            procs.watch(i);
        }
    }

    fn pool(&self) -> Option<PoolObserver> {
        Some(match &self.engine {
            Engine::Threads(pool) => pool.observer(),
            Engine::Processes(procs) => procs.observer().into(),
        })
    }

    fn file_opened(&self, slot: u32, fd: std::os::fd::RawFd) {
        if let Some(m) = self
            .cached
            .as_ref()
            .and_then(|c| c.misses.get(slot as usize))
        {
            m.store(0, Ordering::Relaxed);
        }
        if let Engine::Processes(procs) = &self.engine {
            procs.file_opened(slot, fd);
        }
    }

    fn file_closed(&self, slot: u32) {
        let Engine::Processes(procs) = &self.engine else {
            return;
        };
        match procs.file_closed(slot) {
            ClosedInWorkers::All => {}
            ClosedInWorkers::Expired => tracing::warn!(
                "a worker process did not close its descriptor of a closed file (slot {slot}) \
                 within 1 s (stopped, or in a long I/O): an unlinked file's space is freed \
                 when it does; later closes do not wait for it until it has"
            ),
            ClosedInWorkers::NotByStuck => tracing::debug!(
                "a closed file (slot {slot}) is still open in a worker process an earlier \
                 close waited for in vain: closed when that worker next looks"
            ),
        }
    }
}

/// Queues claimed handle `i` for the worker threads, marked as waiting to be taken. False if
/// the queue is full: the handle is then still the caller's to run (true if a waiter took it in the
/// meantime and runs it).
fn queue(pool: &WorkerPool, shared: &Shared, i: u32) -> bool {
    let s = shared.slot(i);
    let generation = s.generation.load(Ordering::Relaxed);
    // Claimable from the moment a worker can see it.
    s.mark_queued(generation);
    // SAFETY: the handle is SUBMITTED; its iovecs/path name memory the issuer parks in
    // the handle until reclaim, which waits for the completion the worker (or a waiter
    // that claims it) posts.
    if unsafe { pool.try_submit(shared.request(i)) }.is_ok() {
        return true;
    }
    // Full. Entries of requests their waiters took back stay until a worker pops them, and a
    // busy issuer that runs its own reads can fill the queue with them while the workers
    // wait for a CPU: make room by dropping those (and requeueing any live one met).
    if purge_taken_back(pool, shared)
        // SAFETY: as above.
        && unsafe { pool.try_submit(shared.request(i)) }.is_ok()
    {
        return true;
    }
    // Not queued: take the mark back, unless a waiter saw it and took the I/O first (and
    // counted an entry taken back that never went in).
    if s.take_queued_exact(generation) {
        return false;
    }
    pool.untaken_back();
    true
}

/// Drops the entries of taken-back requests from the head of a full queue: all of them up to
/// the first live entry after some were dropped, or none if the first `LIVE_LOOKS` are live
/// (a queue full of work, whose overflow runs here as before). A live entry popped goes back
/// at the tail. True if it dropped any.
fn purge_taken_back(pool: &WorkerPool, shared: &Shared) -> bool {
    const LIVE_LOOKS: usize = 32;
    let (mut dropped, mut live) = (false, 0);
    for _ in 0..pool.queue_capacity() {
        if live >= LIVE_LOOKS || (dropped && live > 0) {
            break;
        }
        let Some(req) = pool.pop_oldest() else {
            return true; // the workers emptied it meanwhile
        };
        let s = shared.slot(req.user_data as u32);
        if s.is_queued((req.user_data >> 32) as u32) {
            live += 1;
            // SAFETY: a live request, queued before under the same contract; a slot was
            // freed by the pop, so only a racing submitter can take it (then it is run here).
            let requeued = unsafe { pool.try_submit(req) };
            // A worker that found the queue empty while the request was out of it may have
            // gone to sleep: wake one for it (it may be a detached I/O nobody waits for).
            pool.wake(1);
            if let Err(req) = requeued {
                if s.take_queued((req.user_data >> 32) as u32) {
                    shared.run_here(req.user_data as u32, Executor::Waiter);
                } else {
                    // A waiter took it back meanwhile, and counted an entry that is gone.
                    pool.dropped_taken_back();
                }
            }
        } else {
            pool.dropped_taken_back();
            dropped = true;
        }
    }
    dropped
}

impl WorkerMethod {
    /// Runs handle `i` (this issuer's, in flight, `generation`) here if it waits for the
    /// device and no worker has picked it up yet; true if it did.
    fn help_with(&self, shared: &Shared, i: u32, generation: u64) -> bool {
        if !self.waits_for_device(shared, i) {
            return false;
        }
        let taken = match &self.engine {
            Engine::Threads(pool) => {
                let taken = shared.slot(i).take_queued_if(generation);
                if taken {
                    pool.taken_back();
                }
                taken
            }
            Engine::Processes(procs) => procs.take_back(i, generation as u32),
        };
        if taken {
            shared.run_here(i, Executor::Waiter);
        }
        taken
    }

    /// `io_worker_try_cached`: runs buffered read `i` (claimed) here if the page cache holds
    /// it all; true if it did.
    fn read_cached(&self, shared: &Shared, i: u32) -> bool {
        self.cached.as_ref().is_some_and(|c| c.try_read(shared, i))
    }

    /// Submits to worker processes: each handle goes to its request cell, or, when a process
    /// cannot reach its memory, runs here after the others are on their way.
    fn submit_to_processes(&self, procs: &ProcessPool, shared: &Shared, handles: &[u32]) {
        let mut queued = 0u32;
        let mut here = 0usize;
        let mut local = [0u32; 64];
        for &i in handles {
            if !shared.claim_submit(i) {
                continue; // a waiter found it staged and ran it
            }
            if self.read_cached(shared, i) {
                continue;
            }
            let generation = shared.slot(i).generation.load(Ordering::Relaxed) as u32;
            // SAFETY: the handle is SUBMITTED; its iovecs name memory the issuer parks in the
            // handle until reclaim, which waits for the completion the pool posts.
            if unsafe { procs.try_queue(i, generation, &shared.request(i)) } {
                queued += 1;
            } else if here < local.len() {
                local[here] = i;
                here += 1;
            } else {
                shared.run_here(i, Executor::Issuer);
            }
        }
        procs.wake(queued);
        for &i in &local[..here] {
            shared.run_here(i, Executor::Issuer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_size_follows_the_settings() {
        let mut s = Settings::default();
        let p = pool_size(&s);
        assert_eq!((p.min, p.max), (1, 16), "sized by load by default");
        assert_eq!(p.idle_timeout, Duration::from_secs(60));
        assert_eq!(p.launch_interval, Duration::from_millis(10));
        // `validate` refuses a minimum above the maximum at start; this function alone clamps.
        s.set("io_min_workers", "8").unwrap();
        s.set("io_max_workers", "4").unwrap();
        let p = pool_size(&s);
        assert_eq!((p.min, p.max), (4, 4));
        // io_workers fixes the size, whatever the range says.
        s.set("io_workers", "3").unwrap();
        assert_eq!(pool_size(&s), PoolSize::fixed(3));
    }
}
