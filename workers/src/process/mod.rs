//! Worker *processes*: the embedder's side of `io_worker_kind = process`.
//!
//! [`ProcessPool`] creates the control segment (a memfd, `control.rs`), installs the shared
//! arena (`arena.rs`), and runs two threads:
//!
//! - the **supervisor** starts each worker by executing the embedder's own program again with
//!   `DBAIO_IO_WORKER` set (`child.rs` takes over before `main`; nothing is forked without an
//!   exec), watches every worker through a pidfd, replaces one that dies, queues again the
//!   requests it was executing (all ops sent to processes are safe to execute twice: reads,
//!   writes of the same bytes from a buffer nobody may touch until completion, fsync,
//!   fdatasync, fadvise, fallocate, ftruncate), and grows the pool while the queue backs up.
//!   It is also the workers' parent thread, so that `PR_SET_PDEATHSIG` kills them when the
//!   embedder dies: the supervisor lives until the pool is dropped.
//! - the **completer** sleeps until a worker posts a result, then hands each result to the
//!   [`ProcessSink`] (which completes the handle, runs its callbacks and wakes its waiters
//!   in the embedder, where the callbacks' code and data live). An embedder thread waiting
//!   for its I/Os completes what is posted itself instead (`ProcessPool::drive`); how it is
//!   woken is `wake.rs`, model-checked.
//!
//! A request lost with its worker three times (a request that kills every worker that runs
//! it) is completed as lost ([`ProcessSink::lost`]) instead of being tried for ever.

mod child;
mod control;
mod wake;

use crate::pool::{PoolSize, PoolSnapshot, WorkerRow};
use crate::tally::WakeTally;
use control::{
    Control, DONE, FREE, LOST, Layout, MAGIC, QUEUED, RUNNING, W_ABSENT, W_BUSY, W_IDLE, W_STARTING,
};
use dbaio_sys::Request;
use dbaio_sys::arena::{self, SharedArena};
use dbaio_sys::futex;
use nix::sys::memfd::{MemFdCreateFlag, memfd_create};
use parking_lot::Mutex;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, fence};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use child::ENV as WORKER_ENV;
pub use control::MAX_IOV;

/// Times a request may lose its worker before it is completed as lost.
const MAX_LOSSES: u32 = 3;
/// The longest a file's close waits for the worker processes to close their descriptors of it.
const CLOSE_WAIT_LIMIT: Duration = Duration::from_secs(1);
/// How often that wait looks again without a wake (a worker may die meanwhile).
const CLOSE_WAIT_SLICE: Duration = Duration::from_millis(10);
/// In `Inner::stuck`: the worker's `swept` value is in the low 32 bits.
const STUCK: u64 = 1 << 32;

/// What [`ProcessPool::file_closed`] found of the workers' descriptors of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosedInWorkers {
    /// Every running worker has closed its descriptor.
    All,
    /// One had not when the wait reached its limit (stopped, or in a very long I/O); it
    /// closes it when it next looks.
    Expired,
    /// Only workers an earlier close already waited for in vain have not; not waited for
    /// again.
    NotByStuck,
}

/// How long polls must keep seeing requests queued beside idle workers before one wakes a
/// worker for them (`ProcessPool::rescue_stranded`).
const STRANDED_NS: u64 = 1_000_000;
/// How long a starting worker may take to reach its loop.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs before `main` in every program linking this crate (see `child.rs`): a process started
/// as a worker becomes one here and never reaches `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static WORKER_ENTRY: extern "C" fn() = {
    extern "C" fn entry() {
        child::entry()
    }
    entry
};

/// Receives the results of requests worker processes executed. Called on the completer
/// thread (or, for a request lost with its worker, possibly the supervisor's).
pub trait ProcessSink: Send + Sync + 'static {
    /// Request cell `slot` finished with `result` (bytes or `-errno`) in worker `worker`.
    fn complete(&self, worker: u32, slot: u32, result: i32);
    /// Request cell `slot` was being executed by worker `worker` each time one died, and was
    /// given up on: fail it, naming the lost worker.
    fn lost(&self, worker: u32, slot: u32);
    /// Posting the result of request cell `slot` panicked (in the embedder's completion code,
    /// not in the worker): fail it if it is not complete, so that it is never left hanging.
    fn panicked(&self, worker: u32, slot: u32);
}

/// What a process pool is made for.
#[derive(Clone, Debug)]
pub struct ProcessConfig {
    /// How many workers, and how that changes.
    pub size: PoolSize,
    /// Request cells (one per handle of the embedder).
    pub handles: u32,
    /// File slots.
    pub files: u32,
    /// The program to execute as a worker: the embedder's own (its `dbaio` dependency makes
    /// it one when `DBAIO_IO_WORKER` is set).
    pub program: PathBuf,
    /// Workers run under `SCHED_BATCH` ([`dbaio_sys::sched::run_as_batch`]).
    pub batch_scheduling: bool,
}

/// The control segment's mapping in this process: unmapped when its last holder goes (the
/// pool, and the [`ProcessWaker`] the embedder's completions use).
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping holds only atomics (the control segment), reached through shared
// references; the pointer itself is never written through non-atomically.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `ProcessPool::start`, used by no one any more (this is
        // its last holder).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Wakes the pool's waiters for a completion made in the embedder rather than posted by a
/// worker (a waiter that took its request back and ran it, a read served from the page
/// cache, a request run locally): one of them may be waiting for it. Holds the control
/// segment, not the pool.
pub struct ProcessWaker {
    map: Arc<Mapping>,
}

impl ProcessWaker {
    /// A completion was published in this process: wake the waiters, if any.
    pub fn completed_here(&self) {
        // SAFETY: the header lies at the start of the mapping, which `map` keeps alive.
        let h = unsafe { &*self.map.base.cast::<control::Header>() };
        wake::Wake::of(h).drained(1);
    }
}

struct Inner {
    segment: OwnedFd,
    ctl: Control,
    map: Arc<Mapping>,
    arena: &'static SharedArena,
    size: PoolSize,
    program: PathBuf,
    sink: Arc<dyn ProcessSink>,
    epoch: AtomicU64,
    /// Requests that ran in the embedder because their memory or op cannot go to a process.
    local: AtomicU64,
    grown: AtomicU32,
    retired: AtomicU32,
    replaced: AtomicU32,
    /// Requests queued again after their worker died.
    requeued: AtomicU64,
    /// Per worker: `STUCK | swept` once a close waited for it to its limit, while its
    /// `swept` has not moved since (later closes do not wait for it); else 0.
    stuck: Box<[AtomicU64]>,
    /// Closes whose wait for a worker's descriptor reached `CLOSE_WAIT_LIMIT`.
    close_waits_expired: AtomicU64,
    /// Tests only: the completer's naps and sleeps last until someone wakes it.
    timers_held: AtomicBool,
    /// Waiter sleeps that ran to their safety limit although an awaited I/O completed.
    missed_wakes: AtomicU64,
    /// When a poll or a watch first saw requests queued while workers slept idle, in this
    /// stretch of seeing it (CLOCK_MONOTONIC ns; 0: it did not): `rescue_stranded`.
    stranded_since: AtomicU64,
    /// How the wakes since the supervisor last looked went: not calm (no wake found enough
    /// idle workers, or more than three found too few for each that did) is a queue that
    /// backs up.
    tally: WakeTally,
    stopping: AtomicBool,
    completer_stop: AtomicBool,
    /// Wakes the supervisor (pool stopping).
    bell: OwnedFd,
}

/// A pool of I/O worker processes (see the module documentation). Dropping it lets the
/// workers finish the queue, waits for them, and posts the last completions.
pub struct ProcessPool {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The process that started the supervisor, the completer and the workers.
    owner: dbaio_sys::Owner,
}

/// Reads a process pool's snapshot without keeping the pool alive.
#[derive(Clone)]
pub struct ProcessObserver(Weak<Inner>);

/// Tests only: the steps of a worker process's retirement, where a test may have retiring
/// workers stop themselves (SIGSTOP) to kill them there (`Header::hold_at_retire`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetireStep {
    /// Idle long enough and no longer advertised idle; not yet counted out of `live`.
    Leaving = 1,
    /// Counted out of `live`; its cell not yet marked retired.
    CountedOut = 2,
    /// Its cell marked retired; not yet exited.
    MarkedRetired = 3,
}

impl ProcessObserver {
    /// The pool now, or None once dropped.
    pub fn snapshot(&self) -> Option<PoolSnapshot> {
        self.0.upgrade().map(|i| snapshot(&i))
    }

    /// See [`PoolObserver::taken`](crate::PoolObserver::taken).
    pub(crate) fn taken(&self) -> Vec<(u32, u32, u32)> {
        let Some(i) = self.0.upgrade() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (slot, c) in i.ctl.used_reqs().iter().enumerate() {
            let st = c.state.load(Ordering::Acquire);
            if st & 0xff != RUNNING && st & 0xff != DONE {
                continue;
            }
            let generation = c.generation.load(Ordering::Acquire);
            // The same request still (a cell freed and queued again between the two loads
            // holds another generation).
            if c.state.load(Ordering::Acquire) == st {
                out.push((slot as u32, generation, st >> 8));
            }
        }
        out
    }

    /// Tests only: see [`PoolObserver::set_drainer_window`](crate::PoolObserver).
    pub(crate) fn set_drainer_window(&self, window: std::time::Duration) {
        if let Some(i) = self.0.upgrade() {
            let ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
            i.ctl.header().drainer_window_ns.store(ns, Ordering::SeqCst);
            // As if an embedder thread had drained just now.
            i.ctl.header().mark_drained();
            wake_completer(&i);
        }
    }

    /// Tests only: see [`PoolObserver::hold_completer_timers`](crate::PoolObserver).
    pub(crate) fn hold_completer_timers(&self, hold: bool) {
        if let Some(i) = self.0.upgrade() {
            i.timers_held.store(hold, Ordering::SeqCst);
            wake_completer(&i);
        }
    }

    /// Tests only: see [`PoolObserver::hold_retiring_workers`](crate::PoolObserver).
    pub(crate) fn hold_retiring_workers(&self, at: Option<RetireStep>) {
        if let Some(i) = self.0.upgrade() {
            i.ctl
                .header()
                .hold_at_retire
                .store(at.map_or(0, |s| s as u32), Ordering::SeqCst);
        }
    }
}

impl ProcessPool {
    /// Creates the segment, starts `config.size.min` workers and waits until each has reached
    /// its loop (an error names the program and what went wrong).
    pub fn start(config: ProcessConfig, sink: Arc<dyn ProcessSink>) -> io::Result<ProcessPool> {
        // Keeps the entry point linked into every program that starts a pool.
        std::hint::black_box(&WORKER_ENTRY);
        let size = config.size;
        if size.min == 0 || size.min > size.max || size.max > crate::MAX_WORKERS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a process pool needs 1 <= min <= max <= {}",
                    crate::MAX_WORKERS
                ),
            ));
        }
        let arena = arena::install()?;
        let layout = Layout::new(config.handles, config.files);
        let segment = memfd_create(c"dbaio-control", MemFdCreateFlag::MFD_CLOEXEC)
            .map_err(io::Error::from)?;
        nix::unistd::ftruncate(&segment, layout.len as libc::off_t).map_err(io::Error::from)?;
        let base = arena::map_shared(segment.as_raw_fd(), layout.len)?;
        // SAFETY: a fresh zero-filled mapping of layout.len bytes, unmapped only in Drop.
        let ctl = unsafe { Control::new(base.as_ptr(), layout) };
        let h = ctl.header();
        h.handles.store(config.handles, Ordering::Relaxed);
        h.files.store(config.files, Ordering::Relaxed);
        h.min.store(size.min, Ordering::Relaxed);
        h.max.store(size.max, Ordering::Relaxed);
        let idle_ms = if size.min == size.max || size.idle_timeout == Duration::MAX {
            u64::MAX
        } else {
            (size.idle_timeout.as_millis() as u64).max(1)
        };
        h.idle_timeout_ms.store(idle_ms, Ordering::Relaxed);
        h.batch_scheduling
            .store(u32::from(config.batch_scheduling), Ordering::Relaxed);
        h.drainer_window_ns
            .store(control::DRAINER_ACTIVE_NS, Ordering::Relaxed);
        h.arena_fd.store(arena.fd(), Ordering::Relaxed);
        h.arena_len.store(arena.len() as u64, Ordering::Relaxed);
        // Regions registered now (this subsystem's pool on huge pages) are mapped by every
        // worker of this pool.
        for (id, fd, len) in arena::regions() {
            let reg = &h.regions[id as usize - 1];
            reg[0].store(fd as u64, Ordering::Relaxed);
            reg[1].store(len as u64, Ordering::Relaxed);
        }
        h.wake_at.store(u64::MAX, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        // SAFETY: eventfd takes integers and returns a new descriptor or -1.
        let bell = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if bell < 0 {
            return Err(io::Error::last_os_error());
        }
        let stuck = ctl.workers().iter().map(|_| AtomicU64::new(0)).collect();
        let inner = Arc::new(Inner {
            segment,
            ctl,
            map: Arc::new(Mapping {
                base: base.as_ptr(),
                len: layout.len,
            }),
            arena,
            size,
            program: config.program,
            sink,
            epoch: AtomicU64::new(0),
            local: AtomicU64::new(0),
            grown: AtomicU32::new(0),
            retired: AtomicU32::new(0),
            replaced: AtomicU32::new(0),
            requeued: AtomicU64::new(0),
            stuck,
            close_waits_expired: AtomicU64::new(0),
            timers_held: AtomicBool::new(false),
            missed_wakes: AtomicU64::new(0),
            stranded_since: AtomicU64::new(0),
            tally: WakeTally::default(),
            stopping: AtomicBool::new(false),
            completer_stop: AtomicBool::new(false),
            // SAFETY: eventfd returned a fresh descriptor that we now own.
            bell: unsafe { OwnedFd::from_raw_fd(bell) },
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let sup = {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name("dbaio-io-supervisor".into())
                .spawn(move || supervise(&inner, tx))?
        };
        let comp = {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name("dbaio-io-completer".into())
                .spawn(move || complete_loop(&inner))?
        };
        let pool = ProcessPool {
            inner,
            threads: Mutex::new(vec![sup, comp]),
            owner: dbaio_sys::Owner::here(),
        };
        match rx.recv() {
            Ok(Ok(())) => Ok(pool),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other("the worker supervisor ended at start")),
        }
    }

    /// What the embedder's own completions use to wake the pool's waiters.
    pub fn waker(&self) -> ProcessWaker {
        ProcessWaker {
            map: Arc::clone(&self.inner.map),
        }
    }

    /// True while handle `slot`'s request of `generation` is with the workers: queued,
    /// running, or done and not yet posted (its completion then comes from [`drive`]).
    ///
    /// [`drive`]: ProcessPool::drive
    pub fn holds(&self, slot: u32, generation: u32) -> bool {
        self.inner.ctl.reqs().get(slot as usize).is_some_and(|c| {
            c.generation.load(Ordering::Acquire) == generation
                && matches!(
                    c.state.load(Ordering::Acquire) & 0xff,
                    QUEUED | RUNNING | DONE
                )
        })
    }

    /// A reader of [`ProcessPool::snapshot`] that does not keep the pool alive.
    pub fn observer(&self) -> ProcessObserver {
        ProcessObserver(Arc::downgrade(&self.inner))
    }

    /// Every worker (number, pid, busy or idle, requests done) and the pool's counters.
    pub fn snapshot(&self) -> PoolSnapshot {
        snapshot(&self.inner)
    }

    /// File slot `slot` now holds the embedder's descriptor `fd`.
    pub fn file_opened(&self, slot: u32, fd: RawFd) {
        let Some(c) = self.inner.ctl.files().get(slot as usize) else {
            return;
        };
        // SAFETY: fcntl(F_GETFL) only reads the descriptor's flags.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        c.fd.store(fd, Ordering::Relaxed);
        c.flags.store(flags.max(0), Ordering::Relaxed);
        let epoch = self.inner.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        c.epoch.store(epoch, Ordering::Release);
    }

    /// File slot `slot` was closed: workers close their descriptors for it (idle ones are
    /// woken to do so), and this waits until every running worker has — so that a file
    /// unlinked and then closed has freed its space when `close` returns, as without worker
    /// processes. A busy worker closes them once its request is done. A worker that has not
    /// within `CLOSE_WAIT_LIMIT` (stopped, or in a very long I/O) is not waited for again by
    /// later closes until it has swept: a stopped worker costs one close the limit, not
    /// every close.
    pub fn file_closed(&self, slot: u32) -> ClosedInWorkers {
        let inner = &*self.inner;
        let ctl = &inner.ctl;
        if let Some(c) = ctl.files().get(slot as usize) {
            c.epoch.store(0, Ordering::Release);
        }
        let h = ctl.header();
        // (SeqCst: Dekker with a worker going idle, which sets its idle bit, then looks.)
        let seq = h.close_seq.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        h.close_waiters.fetch_add(1, Ordering::SeqCst);
        wake_idle(ctl, u32::MAX, false);
        let deadline = Instant::now() + CLOSE_WAIT_LIMIT;
        // Workers behind this close: (waited for, known stuck since an earlier close), and
        // the `swept` value each was seen with (a worker marked stuck is marked with that
        // value: read again, it could be one the worker swept meanwhile, and a running worker
        // would then be taken for a stuck one).
        let mut seen = [0u32; crate::MAX_WORKERS as usize];
        let mut behind = || {
            let live = h.live.load(Ordering::SeqCst);
            let (mut waited, mut stuck) = (0u64, 0u64);
            for (w, cell) in ctl.workers().iter().enumerate() {
                let swept = cell.swept.load(Ordering::SeqCst);
                if live & (1 << w) == 0 || (swept.wrapping_sub(seq) as i32) >= 0 {
                    continue;
                }
                if inner.stuck[w].load(Ordering::Relaxed) == STUCK | u64::from(swept) {
                    stuck |= 1 << w;
                } else {
                    waited |= 1 << w;
                    seen[w] = swept;
                }
            }
            (waited, stuck)
        };
        let outcome = loop {
            let word = h.swept_seq.load(Ordering::SeqCst);
            let (waited, stuck) = behind();
            let left = deadline.saturating_duration_since(Instant::now());
            if waited == 0 {
                break if stuck == 0 {
                    ClosedInWorkers::All
                } else {
                    ClosedInWorkers::NotByStuck
                };
            }
            if left.is_zero() {
                for (w, (mark, &swept)) in inner.stuck.iter().zip(&seen).enumerate() {
                    if waited & (1 << w) != 0 {
                        mark.store(STUCK | u64::from(swept), Ordering::Relaxed);
                    }
                }
                inner.close_waits_expired.fetch_add(1, Ordering::Relaxed);
                break ClosedInWorkers::Expired;
            }
            // In slices: a worker that dies meanwhile is counted out without a wake.
            futex::wait(&h.swept_seq, word, Some(left.min(CLOSE_WAIT_SLICE)));
        };
        h.close_waiters.fetch_sub(1, Ordering::SeqCst);
        outcome
    }

    /// Queues handle `slot`'s request `req` (generation `generation`) for the workers; false
    /// when it cannot go to a process (its memory is not in the shared arena, it has too many
    /// iovecs, names no open file, or unlinks or renames a path): the caller runs it, and it
    /// is counted.
    ///
    /// # Safety
    ///
    /// `req.iov` must point at `req.iovcnt` valid iovecs, and their memory must stay valid
    /// and untouched until the completion for `slot` is posted to the sink.
    pub unsafe fn try_queue(&self, slot: u32, generation: u32, req: &Request) -> bool {
        let inner = &*self.inner;
        let ctl = &inner.ctl;
        let queueable = !req.op.on_path() && req.iovcnt as usize <= MAX_IOV;
        let file = ctl.files().get(req.file as usize);
        let epoch = file.map_or(0, |f| f.epoch.load(Ordering::Acquire));
        let Some(c) = ctl.reqs().get(slot as usize) else {
            return false;
        };
        if !queueable || epoch == 0 || c.state.load(Ordering::Acquire) != FREE {
            inner.local.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let r = Ordering::Relaxed;
        for k in 0..req.iovcnt as usize {
            // SAFETY: the caller guarantees `iovcnt` valid iovecs (function contract).
            let v = unsafe { *req.iov.add(k) };
            match arena::shared_offset(inner.arena, v.iov_base.cast(), v.iov_len) {
                Some(off) => {
                    c.iov[k][0].store(off, r);
                    c.iov[k][1].store(v.iov_len as u64, r);
                }
                None => {
                    inner.local.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
            }
        }
        c.op.store(req.op as u32, r);
        c.file.store(req.file, r);
        c.epoch.store(epoch, r);
        c.offset.store(req.offset, r);
        c.len.store(req.len, r);
        c.iovcnt.store(req.iovcnt, r);
        c.attempts.store(0, r);
        c.generation.store(generation, r);
        // Before the cell is queued: a worker can run (and die with) only cells below it.
        let used = &ctl.header().reqs_used;
        if used.load(Ordering::Relaxed) <= slot {
            used.fetch_max(slot + 1, Ordering::SeqCst);
        }
        c.state.store(QUEUED, Ordering::Release);
        ctl.queued().set(slot);
        true
    }

    /// Wakes the lowest-numbered idle worker after `n` requests were queued, if the queue holds
    /// more than the workers returning to it from a read (`Header::returning`) will take: one
    /// wake per submission, the woken worker waking more (`pass_wake_on`).
    pub fn wake(&self, n: u32) {
        if n == 0 {
            return;
        }
        fence(Ordering::SeqCst);
        let ctl = &self.inner.ctl;
        let sized = self.inner.size.min != self.inner.size.max;
        // A fixed pool with no worker idle has no wake to give and nothing to tally: the
        // queue and the returning mask, which busy workers keep changing, are not read.
        // (Dekker with a worker going idle all the same: it sets its bit, then looks.)
        if !sized && ctl.header().idle.load(Ordering::SeqCst) == 0 {
            return;
        }
        let backlog = ctl.queued().count() as u32;
        // For the tally of a pool that sizes itself (a fixed one tallies nothing), read before
        // the wake, which changes both (and the woken worker may wake others at once):
        // workers woken earlier or just done with a request, and not yet back at the queue,
        // each take a request there without a wake; the queue may hold earlier requests too,
        // which they take first.
        let header = ctl.header();
        let counts = sized.then(|| {
            (
                header.coming.load(Ordering::SeqCst).count_ones(),
                header.idle.load(Ordering::SeqCst).count_ones(),
            )
        });
        // One wake per submission; the woken worker wakes more if it still sees a backlog
        // (`pass_wake_on`), as worker threads do.
        wake_idle(ctl, wanted(ctl, backlog).min(1), sized);
        let Some((coming, idle)) = counts else {
            return;
        };
        // Met if the pool had an idle worker for each of this submission's requests beyond
        // the coming ones, as for worker threads.
        let need = n.min(backlog.saturating_sub(coming));
        if idle >= need {
            self.inner.tally.met();
        } else {
            self.inner.tally.short();
        }
    }

    /// Takes handle `slot`'s request back if no worker has picked it up yet (a waiter then
    /// runs it itself). Exactly one of the waiter and a worker gets it.
    pub fn take_back(&self, slot: u32, generation: u32) -> bool {
        let Some(c) = self.inner.ctl.reqs().get(slot as usize) else {
            return false;
        };
        let taken = c.generation.load(Ordering::Relaxed) == generation
            && c.state
                .compare_exchange(QUEUED, FREE, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
        if taken {
            c.watched.store(0, Ordering::Relaxed);
            // No worker will run it: not queued any more (the view's `queued`, the wakes'
            // backlog). A worker that took the bit first finds the cell FREE and skips it.
            self.inner.ctl.queued().clear(slot);
        }
        taken
    }

    /// Completes what the workers have finished, on the calling thread, without blocking
    /// (an embedder thread polling its I/Os: it counts as draining, see `drive`).
    pub fn poll(&self) {
        let inner = &*self.inner;
        if inner.ctl.done().any() {
            drain(inner);
            inner.ctl.header().mark_drained();
        }
        rescue_stranded(&self.inner);
    }

    /// Someone looks at an I/O's state without completing anything (`is_done`): if requests
    /// have stayed queued beside idle workers for a millisecond, wakes one
    /// (`rescue_stranded`). Only every 32nd look on a thread looks at the control segment:
    /// a caller may test a few dozen I/Os per loop (the bench does), and the two lines it
    /// reads are written by every worker.
    pub fn rescue(&self) {
        thread_local! {
            static LOOKS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        let n = LOOKS.with(|c| {
            let n = c.get().wrapping_add(1);
            c.set(n);
            n
        });
        if n % 32 == 0 {
            rescue_stranded(&self.inner);
        }
    }

    /// Someone watches handle `slot`'s I/O without waiting for it (a future): its result is
    /// completed as soon as it is posted — by the completer, woken for it even while it
    /// naps — or here, if it is posted already. The cell is handle `slot`'s alone, and its
    /// previous request was drained (which clears the mark) before the handle could be
    /// reused; so the mark is set whatever generation the cell holds: an I/O still staged in
    /// a batch, not yet queued (the cell holds the previous generation), keeps it until it
    /// is queued and posted. (A stale mark only costs the completer one wake.)
    pub fn watch(&self, slot: u32) {
        let inner = &*self.inner;
        let Some(c) = inner.ctl.reqs().get(slot as usize) else {
            return;
        };
        c.watched.store(1, Ordering::SeqCst);
        // Dekker with the worker's store of DONE then load of `watched`: either it sees
        // the mark and wakes the completer, or we see its result here.
        fence(Ordering::SeqCst);
        if c.state.load(Ordering::SeqCst) & 0xff == DONE {
            drain(inner);
        }
        rescue_stranded(&self.inner);
    }

    /// Completes what the workers have finished, on the calling thread; then, unless
    /// `needs` says the caller's I/Os are complete (0), sleeps until the workers have posted
    /// at least as many more results as it says are still needed, or someone else completed
    /// results (one may be the caller's), and completes again (`wake.rs`; a 100 ms limit is
    /// the safety net, counted in `missed_wakes` if it ever ends a wait that should have
    /// been woken). Waiters call this in a loop: it saves the completer's hand-off for the
    /// I/Os they wait on. Posts for other issuers count too, so a waiter may wake early,
    /// never late. Before sleeping it calls `help`, which may run one of the caller's
    /// queued requests itself (taken back with [`ProcessPool::take_back`]); if it ran one
    /// (true), this returns instead of sleeping.
    pub fn drive(&self, needs: impl Fn() -> u32, help: impl FnOnce() -> bool) {
        let inner = &*self.inner;
        let h = inner.ctl.header();
        drain(inner);
        h.mark_drained();
        if needs() == 0 || help() {
            return;
        }
        if wake::Wake::of(h).wait(needs, || inner.ctl.done().any()) {
            inner.missed_wakes.fetch_add(1, Ordering::Relaxed);
        }
        // Results posted while we were counted woke us, not the completer: ours to post.
        drain(inner);
        h.mark_drained();
    }
}

/// A poll or a watch (whose caller does not take its request back, as a waiter does)
/// that keeps seeing requests queued while workers sleep idle for `STRANDED_NS` wakes
/// one of them. The worker a submission woke may never come: a process stopped
/// (SIGSTOP) or starved by its host after its idle bit was taken. Found by an attack
/// from the caller's side: with the lowest idle worker stopped, a read polled with
/// `check_done` waited for as long as that worker stayed stopped while the others
/// slept. A healthy pool's woken worker arrives within microseconds, so this wakes at
/// most one worker a millisecond, and only while such polls go on. The completer looks
/// too whenever it wakes, so a future polled once is rescued by its next wake (at the
/// latest its 100 ms safety net).
fn rescue_stranded(inner: &Inner) {
    let ctl = &inner.ctl;
    let stranded = ctl.header().idle.load(Ordering::SeqCst) != 0 && ctl.queued().any();
    let since = inner.stranded_since.load(Ordering::Relaxed);
    if !stranded {
        if since != 0 {
            inner.stranded_since.store(0, Ordering::Relaxed);
        }
        return;
    }
    let now = control::monotonic_ns();
    if since == 0 {
        inner.stranded_since.store(now, Ordering::Relaxed);
    } else if now.saturating_sub(since) >= STRANDED_NS {
        inner.stranded_since.store(now, Ordering::Relaxed);
        let sized = inner.size.min != inner.size.max;
        wake_idle(ctl, 1, sized);
    }
}

/// The `backlog` of queued requests beyond the workers returning to the queue from a
/// request (each takes one without a wake): how many idle workers a wake wants.
fn wanted(ctl: &Control, backlog: u32) -> u32 {
    backlog.saturating_sub(ctl.header().returning.load(Ordering::SeqCst).count_ones())
}

/// A worker that has just taken a request and still sees more queued than the returning
/// workers will take wakes up to `WAKE_FANOUT` (2) more (Dekker with a submitter that counted
/// it as returning: it cleared its bit before this look).
pub(crate) fn pass_wake_on(ctl: &Control, sized: bool) {
    fence(Ordering::SeqCst);
    if ctl.header().idle.load(Ordering::SeqCst) != 0 {
        let want = wanted(ctl, ctl.queued().count() as u32).min(crate::WAKE_FANOUT);
        if want > 0 {
            wake_idle(ctl, want, sized);
        }
    }
}

/// Takes and wakes up to `want` idle workers, lowest first; returns how many. `coming`: mark
/// them in `Header::coming` (self-sizing pools, whose wakes count the workers on their way).
fn wake_idle(ctl: &Control, want: u32, coming: bool) -> u32 {
    let h = ctl.header();
    let mut woken = 0;
    while woken < want {
        let mask = h.idle.load(Ordering::SeqCst);
        if mask == 0 {
            break;
        }
        let bit = mask & mask.wrapping_neg();
        if h.idle.fetch_and(!bit, Ordering::SeqCst) & bit != 0 {
            if coming {
                // On its way to the queue until it takes a request or sleeps again.
                h.coming.fetch_or(bit, Ordering::SeqCst);
            }
            let cell = &ctl.workers()[bit.trailing_zeros() as usize];
            cell.word.fetch_add(1, Ordering::SeqCst);
            futex::wake(&cell.word, 1);
            woken += 1;
        }
    }
    woken
}

fn snapshot(inner: &Inner) -> PoolSnapshot {
    let ctl = &inner.ctl;
    let workers = ctl
        .workers()
        .iter()
        .enumerate()
        .filter_map(|(id, c)| {
            let st = c.state.load(Ordering::Relaxed);
            let started = c.pid.load(Ordering::Relaxed) > 0;
            (started && matches!(st, W_STARTING | W_IDLE | W_BUSY)).then(|| WorkerRow {
                id: id as u32,
                tid: c.pid.load(Ordering::Relaxed),
                busy: st == W_BUSY,
                done: c.done.load(Ordering::Relaxed),
            })
        })
        .collect();
    PoolSnapshot {
        size: inner.size,
        queued: ctl.queued().count(),
        grown: inner.grown.load(Ordering::Relaxed),
        retired: inner.retired.load(Ordering::Relaxed),
        replaced: inner.replaced.load(Ordering::Relaxed),
        workers,
        live: ctl.header().live.load(Ordering::Relaxed).count_ones(),
        processes: true,
        local: inner.local.load(Ordering::Relaxed),
        requeued: inner.requeued.load(Ordering::Relaxed),
        missed_wakes: inner.missed_wakes.load(Ordering::Relaxed),
        close_waits_expired: inner.close_waits_expired.load(Ordering::Relaxed),
    }
}

/// Posts every finished request to the sink; wakes the waiters if it posted any (one may
/// be theirs: `wake.rs`).
fn drain(inner: &Inner) {
    let ctl = &inner.ctl;
    let mut posted = 0;
    ctl.done().take_all(|i| {
        let c = &ctl.reqs()[i as usize];
        let st = c.state.load(Ordering::Acquire);
        if st & 0xff != DONE
            || c.state
                .compare_exchange(st, FREE, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return; // a repaired bit for a request already posted
        }
        c.watched.store(0, Ordering::Relaxed);
        let (w, result) = (st >> 8, c.result.load(Ordering::Relaxed));
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if result == LOST {
                inner.sink.lost(w, i);
            } else {
                inner.sink.complete(w, i, result);
            }
        }));
        if done.is_err() {
            inner.sink.panicked(w, i);
        }
        posted += 1;
    });
    wake::Wake::of(ctl.header()).drained(posted);
}

fn complete_loop(inner: &Inner) {
    let h = inner.ctl.header();
    // Woken by someone (a watched result, a repair, the stop, a worker that found the
    // embedder no longer draining), not by the end of a nap.
    let mut woken = false;
    // How long the last nap was: each nap that ends with the embedder still draining makes
    // the next one twice as long, up to `NAP_MAX_NS` (0: not napping).
    let mut nap = 0u64;
    loop {
        rescue_stranded(inner);
        let seq = h.done_seq.load(Ordering::SeqCst);
        let stopping = inner.completer_stop.load(Ordering::SeqCst);
        // While an embedder thread drains, what is posted is its to complete: nap, without
        // draining, until that thread may have stopped (`COMPLETER_NAPPING`).
        let window = h.drainer_window_ns.load(Ordering::Relaxed);
        let since = h.since_drained();
        if since < window && !stopping && !woken {
            // The first nap (0 doubled) ends a window after the latest drain.
            nap = nap
                .saturating_mul(2)
                .clamp(window - since, control::NAP_MAX_NS.max(window));
            h.completer_sleeping
                .store(control::COMPLETER_NAPPING, Ordering::SeqCst);
            // A watched result posted while we were awake, its worker not waking us: drain.
            fence(Ordering::SeqCst);
            let watched = h.watched_posted.swap(0, Ordering::SeqCst) != 0;
            if !watched {
                futex::wait(&h.done_seq, seq, Some(timer(inner, nap)));
            }
            h.completer_sleeping.store(0, Ordering::SeqCst);
            woken = watched
                || h.done_seq.load(Ordering::SeqCst) != seq
                || h.watched_posted.swap(0, Ordering::SeqCst) != 0;
            continue;
        }
        nap = 0;
        drain(inner);
        woken = false;
        if stopping {
            return;
        }
        if h.since_drained() < window {
            continue; // an embedder thread drains (again): nap
        }
        // No embedder thread drains: sleep until a worker posts a result (Dekker with its
        // store-then-check of `completer_sleeping`: either it sees us asleep or we see its
        // done bit).
        h.completer_sleeping
            .store(control::COMPLETER_SLEEPING, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if inner.ctl.done().any() {
            h.completer_sleeping.store(0, Ordering::SeqCst);
            woken = true;
            continue;
        }
        // Asleep, it is still bounded by the safety net, so that nothing posted can wait
        // longer than that whatever happens to its wake. Results it then finds are not
        // counted as missed: they are as likely a waiter's, woken and about to drain.
        futex::wait(
            &h.done_seq,
            seq,
            Some(timer(inner, wake::WAIT_LIMIT.as_nanos() as u64)),
        );
        h.completer_sleeping.store(0, Ordering::SeqCst);
        woken = true;
    }
}

/// How long the completer sleeps for a timer of `ns`: that, unless a test holds its timers
/// (`hold_completer_timers`: an hour, so that only a wake ends the sleep).
fn timer(inner: &Inner, ns: u64) -> Duration {
    if inner.timers_held.load(Ordering::Relaxed) {
        Duration::from_secs(3600)
    } else {
        Duration::from_nanos(ns)
    }
}

fn wake_completer(inner: &Inner) {
    let h = inner.ctl.header();
    h.done_seq.fetch_add(1, Ordering::SeqCst);
    h.completer_sleeping.store(0, Ordering::SeqCst);
    futex::wake(&h.done_seq, 1);
}

/// One running worker, as the supervisor holds it.
struct Running {
    child: Child,
    pidfd: OwnedFd,
}

fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Starts worker `w` (its cell must be absent).
fn launch(inner: &Inner, w: u32) -> io::Result<Running> {
    let cell = &inner.ctl.workers()[w as usize];
    cell.state.store(W_STARTING, Ordering::SeqCst);
    cell.pid.store(0, Ordering::Relaxed);
    let segment = inner.segment.as_fd().try_clone_to_owned()?;
    let spawned = Command::new(&inner.program)
        .arg0("dbaio-io-worker")
        .arg("--dbaio-io-worker")
        .env(WORKER_ENV, format!("{w}:{}", std::process::id()))
        .stdin(Stdio::from(segment))
        .stdout(Stdio::null())
        .spawn();
    let child = match spawned {
        Ok(c) => c,
        Err(e) => {
            cell.state.store(W_ABSENT, Ordering::SeqCst);
            return Err(io::Error::new(
                e.kind(),
                format!("starting {}: {e}", inner.program.display()),
            ));
        }
    };
    cell.pid.store(child.id() as i32, Ordering::Relaxed);
    let pidfd = match pidfd_open(child.id()) {
        Ok(fd) => fd,
        Err(e) => {
            // Unwatchable: it must not run unseen.
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            cell.state.store(W_ABSENT, Ordering::SeqCst);
            return Err(e);
        }
    };
    inner.ctl.header().live.fetch_or(1 << w, Ordering::SeqCst);
    Ok(Running { child, pidfd })
}

/// Waits until worker `w` has reached its loop; an error if it exited first.
fn await_ready(inner: &Inner, w: u32, r: &mut Running) -> io::Result<()> {
    let cell = &inner.ctl.workers()[w as usize];
    let deadline = Instant::now() + START_TIMEOUT;
    while cell.state.load(Ordering::SeqCst) == W_STARTING {
        if let Some(status) = r.child.try_wait()? {
            return Err(io::Error::other(format!(
                "worker process {w} ({}) exited at start ({status}) without becoming a worker: \
                 does the program link dbaio?",
                inner.program.display()
            )));
        }
        if Instant::now() > deadline {
            let _ = r.child.kill();
            return Err(io::Error::other(format!(
                "worker process {w} ({}) did not start within {START_TIMEOUT:?}",
                inner.program.display()
            )));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

fn supervise(inner: &Arc<Inner>, ready: std::sync::mpsc::Sender<io::Result<()>>) {
    let mut sup = Supervisor::new(inner);
    if let Err(e) = sup.start_minimum() {
        let _ = ready.send(Err(e));
        stop_workers(inner, &mut sup.running);
        return;
    }
    let _ = ready.send(Ok(()));
    drop(ready);
    loop {
        let exited = sup.wait_for_exits();
        if inner.stopping.load(Ordering::SeqCst) {
            stop_workers(inner, &mut sup.running);
            return;
        }
        for w in exited {
            sup.handle_exit(w);
        }
        if inner.ctl.header().live.load(Ordering::SeqCst) == 0 {
            // No worker could be started: the embedder executes what is queued.
            run_queue_here(inner);
        }
        sup.grow_if_backed_up();
    }
}

/// The supervisor thread's state: the workers it started, and how the pool's sizing and
/// replacements have gone.
struct Supervisor<'a> {
    inner: &'a Arc<Inner>,
    running: Vec<Option<Running>>,
    dynamic: bool,
    interval: Duration,
    last_launch: Instant,
    backed_up_since: Option<Instant>,
    /// Replacements that died before reaching their loop, in a row: a program that cannot
    /// start workers any more is not restarted for ever.
    failed_starts: u32,
}

impl<'a> Supervisor<'a> {
    fn new(inner: &'a Arc<Inner>) -> Supervisor<'a> {
        Supervisor {
            inner,
            running: (0..inner.size.max).map(|_| None).collect(),
            dynamic: inner.size.min < inner.size.max,
            interval: inner.size.launch_interval.max(Duration::from_millis(1)),
            last_launch: Instant::now(),
            backed_up_since: None,
            failed_starts: 0,
        }
    }

    /// Starts the pool's minimum of workers and waits until each has reached its loop.
    fn start_minimum(&mut self) -> io::Result<()> {
        for w in 0..self.inner.size.min {
            let mut r = launch(self.inner, w)?;
            let ok = await_ready(self.inner, w, &mut r);
            self.running[w as usize] = Some(r);
            ok?;
        }
        Ok(())
    }

    /// Sleeps until a worker exits, the pool stops, or (while a self-sizing pool is below
    /// its maximum) a launch interval passes; returns the workers that exited.
    fn wait_for_exits(&self) -> Vec<usize> {
        let inner = self.inner;
        let mut fds: Vec<libc::pollfd> = vec![libc::pollfd {
            fd: inner.bell.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut who = Vec::new();
        for (w, r) in self.running.iter().enumerate() {
            if let Some(r) = r {
                fds.push(libc::pollfd {
                    fd: r.pidfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                who.push(w);
            }
        }
        let live = inner.ctl.header().live.load(Ordering::SeqCst).count_ones();
        let timeout = if self.dynamic && live < inner.size.max {
            self.interval.as_millis().clamp(1, 1000) as i32
        } else {
            -1
        };
        // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        who.into_iter()
            .enumerate()
            .filter(|&(k, _)| fds[k + 1].revents != 0)
            .map(|(_, w)| w)
            .collect()
    }

    /// Worker `w` exited. Its live bit says whether it had counted itself out (a
    /// retirement, even if it was killed before it could say so in its cell) or not (a
    /// death: its requests go back to the queue and a new worker takes its place).
    fn handle_exit(&mut self, w: usize) {
        let inner = self.inner;
        let ctl = &inner.ctl;
        let Some(mut r) = self.running[w].take() else {
            return;
        };
        let status = r.child.wait().ok();
        let cell = &ctl.workers()[w];
        let bit = 1u64 << w;
        if ctl.header().live.fetch_and(!bit, Ordering::SeqCst) & bit == 0 {
            ctl.repair_after(w as u32, MAX_LOSSES);
            cell.state.store(W_ABSENT, Ordering::SeqCst);
            inner.retired.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Exited by itself (not killed) before reaching its loop: it could not start.
        let could_not_start = cell.state.load(Ordering::SeqCst) == W_STARTING
            && status.is_some_and(|s| s.code().is_some());
        self.failed_starts = if could_not_start {
            self.failed_starts + 1
        } else {
            0
        };
        let requeued = ctl.repair_after(w as u32, MAX_LOSSES);
        inner
            .requeued
            .fetch_add(u64::from(requeued), Ordering::Relaxed);
        cell.state.store(W_ABSENT, Ordering::SeqCst);
        inner.replaced.fetch_add(1, Ordering::Relaxed);
        wake_completer(inner);
        self.replace(w);
        wake_idle(ctl, requeued.max(1), false);
    }

    /// Starts a worker in dead worker `w`'s place, unless replacements keep dying before
    /// they can start.
    fn replace(&mut self, w: usize) {
        if self.failed_starts >= MAX_LOSSES {
            eprintln!(
                "dbaio: I/O worker process {w} died {} times before it could start; not \
                 replacing it (the other workers, or this process, run the queue)",
                self.failed_starts
            );
            return;
        }
        match launch(self.inner, w as u32) {
            Ok(r) => self.running[w] = Some(r),
            Err(e) => eprintln!("dbaio: could not replace I/O worker process {w}: {e}"),
        }
    }

    /// Grows a self-sizing pool by one after a whole launch interval in which requests
    /// waited with no idle worker: the interval was not calm (a depth-1 issuer that now and
    /// then meets its worker on the way back to idle does not grow the pool), and the queue
    /// is backed up at its end.
    fn grow_if_backed_up(&mut self) {
        if !self.dynamic {
            return;
        }
        let inner = self.inner;
        let calm = inner.tally.close();
        let backed_up = !calm
            && inner.ctl.queued().any()
            && inner.ctl.header().idle.load(Ordering::SeqCst) == 0;
        let since = *self.backed_up_since.get_or_insert_with(Instant::now);
        if !backed_up {
            self.backed_up_since = None;
            return;
        }
        if since.elapsed() < self.interval || self.last_launch.elapsed() < self.interval {
            return;
        }
        let Some(w) = (0..inner.size.max as usize).find(|&w| self.running[w].is_none()) else {
            return;
        };
        match launch(inner, w as u32) {
            Ok(r) => {
                self.running[w] = Some(r);
                inner.grown.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => eprintln!("dbaio: could not start an I/O worker process: {e}"),
        }
        self.last_launch = Instant::now();
        self.backed_up_since = None;
    }
}

/// Executes queued requests on the calling thread (no worker process could be started).
fn run_queue_here(inner: &Inner) {
    let ctl = &inner.ctl;
    let me = crate::MAX_WORKERS - 1;
    while let Some(i) = ctl.queued().take_one(0) {
        let c = &ctl.reqs()[i as usize];
        if c.state
            .compare_exchange(
                QUEUED,
                control::state_word(control::RUNNING, me),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            continue;
        }
        let r = Ordering::Relaxed;
        let fd = ctl.files()[c.file.load(r) as usize].fd.load(r);
        let mut spaces: control::Spaces = [(std::ptr::null_mut(), 0); arena::MAX_REGIONS + 1];
        spaces[0] = (inner.arena.base(), inner.arena.len() as u64);
        for (k, space) in spaces.iter_mut().enumerate().skip(1) {
            if let Some((base, len)) = arena::region_base(k as u32) {
                *space = (base, len as u64);
            }
        }
        // SAFETY: the arena is mapped for the life of the process and a registered region
        // until its pool is dropped, which waits for its I/O; the embedder keeps the
        // request's buffers untouched until its completion posts, and `fd` is its own, held
        // open by the I/O's reference to the file.
        let result = unsafe { c.execute(fd, &spaces) };
        c.result.store(result, r);
        c.state
            .store(control::state_word(DONE, me), Ordering::Release);
        ctl.done().set(i);
    }
    wake_completer(inner);
}

/// Tells the workers to finish the queue and leave, and waits for them (killing any that
/// take longer than a minute).
fn stop_workers(inner: &Inner, running: &mut [Option<Running>]) {
    let ctl = &inner.ctl;
    ctl.header().stop.store(1, Ordering::SeqCst);
    for c in ctl.workers() {
        c.word.fetch_add(1, Ordering::SeqCst);
        futex::wake(&c.word, u32::MAX);
    }
    // A stopped worker (SIGSTOP, a debugger's stop) would never see the stop: continue
    // every worker first. Dropping a pool with one stopped blocked for the whole 60 s
    // below, which only a worker hung in its system call should cost.
    for r in running.iter().flatten() {
        // SAFETY: kill sends a signal to a child of ours that we have not reaped yet.
        unsafe { libc::kill(r.child.id() as libc::pid_t, libc::SIGCONT) };
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for r in running.iter_mut().filter_map(Option::take) {
        let mut r = r;
        loop {
            match r.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    let _ = r.child.kill();
                    let _ = r.child.wait();
                    break;
                }
                Ok(None) => {
                    let mut p = libc::pollfd {
                        fd: r.pidfd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut p, 1, 100) };
                }
            }
        }
    }
    for (w, c) in ctl.workers().iter().enumerate() {
        if c.state.load(Ordering::SeqCst) != W_ABSENT {
            // Whatever a killed worker held goes back to the queue and runs here.
            ctl.repair_after(w as u32, u32::MAX);
            c.state.store(W_ABSENT, Ordering::SeqCst);
        }
    }
    ctl.header().live.store(0, Ordering::SeqCst);
    run_queue_here(inner);
}

impl Drop for ProcessPool {
    fn drop(&mut self) {
        // In a child made by fork the supervisor and the completer are not there (joining
        // them panicked), and the workers and the bell are the parent's.
        if self.owner.in_forked_child() {
            std::mem::forget(std::mem::take(self.threads.get_mut()));
            return;
        }
        let inner = &*self.inner;
        inner.stopping.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(inner.bell.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let mut threads = std::mem::take(&mut *self.threads.lock());
        if let Some(sup) = (!threads.is_empty()).then(|| threads.remove(0)) {
            let _ = sup.join();
        }
        inner.completer_stop.store(true, Ordering::SeqCst);
        wake_completer(inner);
        for t in threads {
            let _ = t.join();
        }
    }
}
