//! [`Aio`]: the started subsystem. It holds the shared table (handles, files, callbacks), the
//! method and the statistics; it registers issuers, opens files, lets any thread wait on a
//! [`WaitRef`], and drains everything in flight on shutdown. It is started in `start.rs`, the
//! one place where the layers are put together. See `docs/design.md`, "The API".

use super::file::{File, OpenOptions};
use super::issuer::Issuer;
use crate::handle::error::AioError;
use crate::handle::fault::FaultRule;
use crate::handle::settings::{IoMethodKind, Settings};
use crate::handle::shared::Shared;
use crate::handle::slot::{HandleState, WaitRef};
use crate::introspect::socket::Introspection;
use crate::introspect::stats::{AdviceRow, IssuerStatsRow, StatsTable};
use crate::introspect::view::{AdviceBudgetRow, AioRow, WaitRow, WorkerPoolRow};
use crate::method::IoMethod;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

pub(crate) struct AioInner {
    /// Declared first so it stops before the method does.
    pub _introspection: Option<Introspection>,
    pub shared: Arc<Shared>,
    pub method: Box<dyn IoMethod>,
    pub stats: Arc<StatsTable>,
    /// The worker method's pool, for the view (a weak observer: the pool stops with the
    /// method).
    pub pool: Option<dbaio_workers::PoolObserver>,
    /// The simulated disk the files live on (`io_method = sim`).
    pub sim_disk: Option<crate::SimDisk>,
    /// The process that started the subsystem: a child made by `fork` may not use it.
    pub owner: dbaio_sys::Owner,
    /// Tells the issuers threads keep for [`Aio::with_issuer`] when this subsystem's drop has
    /// waited for their I/Os (`any_thread.rs`).
    pub retired: Arc<Retired>,
}

/// How a subsystem's drop went, for the issuers threads keep for [`Aio::with_issuer`] (which
/// do not keep the subsystem alive): once it has waited for their I/Os, the memory those I/Os
/// used is theirs to free; if it never does (a panic in the drop), it is leaked.
#[derive(Default)]
pub(crate) struct Retired {
    /// 0 while the subsystem lives or its drop runs; `WAITED`; `GAVE_UP`.
    state: parking_lot::Mutex<u8>,
    changed: parking_lot::Condvar,
}

impl Retired {
    const WAITED: u8 = 1;
    const GAVE_UP: u8 = 2;

    fn set(&self, state: u8) {
        *self.state.lock() = state;
        self.changed.notify_all();
    }

    /// Waits until the subsystem's drop is over its wait; true if every I/O is done.
    pub(crate) fn wait(&self) -> bool {
        let mut state = self.state.lock();
        while *state == 0 {
            self.changed.wait(&mut state);
        }
        *state == Self::WAITED
    }
}

/// The last reference gone. Issuers the threads keep for [`Aio::with_issuer`] do not count
/// (`any_thread.rs`): one may still hold I/Os — staged in a batch, or started and dropped —
/// that its own drop would have waited for. Waited for here, before the method stops.
impl Drop for AioInner {
    fn drop(&mut self) {
        if self.owner.forked_since() {
            // A child made by fork: the handle table, the issuers' slots, the rings and the
            // workers are the parent's. Shutting down waited for the parent's I/Os, and the
            // io_uring method's drop reaped the shared rings, taking the parent's completions
            // (its next wait, or its own drop, then waited for ever; found by a caller-side
            // attack). The child forgets its copy of the method and leaves the rest alone.
            let method = std::mem::replace(&mut self.method, Box::new(crate::method::SyncMethod));
            std::mem::forget(method);
            self.retired.set(Retired::WAITED);
            return;
        }
        if must_not_wait_here() && self.retire_elsewhere() {
            return;
        }
        /// Says the drop gave up if it unwinds before it has waited.
        struct GaveUp<'a>(&'a Retired);
        impl Drop for GaveUp<'_> {
            fn drop(&mut self) {
                self.0.set(Retired::GAVE_UP);
            }
        }
        let gave_up = GaveUp(&self.retired);
        if self
            .shared
            .issuers
            .iter()
            .any(|i| i.in_use.load(Ordering::Acquire))
        {
            self.shut_down();
            // Their handles not yet reclaimed keep their files open; every `File` is gone
            // with the last reference, so nobody else holds these (an issuer's own drop would
            // have given them back at reclaim).
            for (_, fd) in self.shared.files.open_files() {
                if let Some(store) = &self.shared.storage {
                    store.closing(fd);
                }
                // SAFETY: the file table's descriptor, which no I/O uses any more (all are
                // done) and nothing else will close: the table goes with this subsystem.
                unsafe { libc::close(fd) };
            }
        }
        // Error callbacks of detached I/Os still queued run before the drop returns, as at a
        // shutdown: an engine that drops the subsystem and exits lost them (found by a
        // caller-side attack, 2026-12-07). A forked child has no notifier thread to wait for.
        if !self.owner.forked_since() {
            self.shared.notifier.finish();
        }
        std::mem::forget(gave_up);
        self.retired.set(Retired::WAITED);
    }
}

impl AioInner {
    /// Moves this drop to a thread of its own, leaving placeholders behind (true: there is
    /// nothing left for this drop to do). On one of the subsystem's own threads — a worker
    /// completing an I/O whose ticket's waker dropped the last reference, an error callback
    /// on the notifier's thread — the drop could neither wait for the I/O that thread is
    /// completing nor stop the pool the thread belongs to (found by a caller-side attack,
    /// 2026-12-07: it waited there for ever).
    fn retire_elsewhere(&mut self) -> bool {
        let moved = AioInner {
            _introspection: self._introspection.take(),
            shared: Arc::clone(&self.shared),
            method: std::mem::replace(&mut self.method, Box::new(crate::method::SyncMethod)),
            stats: Arc::clone(&self.stats),
            pool: self.pool.take(),
            sim_disk: self.sim_disk.take(),
            owner: self.owner,
            retired: Arc::clone(&self.retired),
        };
        if let Err((moved, e)) = drop_on_retire_thread(moved) {
            tracing::error!(
                "could not start a thread to drop the AIO subsystem ({e}): dropping it on one \
                 of its own threads, which may wait for ever"
            );
            RETIRING_HERE.with(|r| r.set(true));
            drop(moved);
            RETIRING_HERE.with(|r| r.set(false));
        }
        true
    }
}

/// Drops `value` on a thread of its own (`dbaio-retire`), where a drop may wait for I/Os;
/// hands it back if that thread cannot start.
pub(super) fn drop_on_retire_thread<T: Send + 'static>(
    value: T,
) -> Result<(), (T, std::io::Error)> {
    let slot = Arc::new(parking_lot::Mutex::new(Some(value)));
    let theirs = Arc::clone(&slot);
    let spawned = std::thread::Builder::new()
        .name(RETIRE_THREAD.into())
        .spawn(move || drop(theirs.lock().take()));
    match spawned {
        Ok(_) => Ok(()),
        Err(e) => Err((slot.lock().take().expect("not taken: no thread ran"), e)),
    }
}

thread_local! {
    /// Set while a drop `retire_elsewhere` could not move runs where it is.
    static RETIRING_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The name of the thread a subsystem's drop moves to (`AioInner::retire_elsewhere`).
const RETIRE_THREAD: &str = "dbaio-retire";

/// True where a drop or a shutdown must not wait for I/Os: on a thread the subsystem
/// started (workers, completer, watcher, notifier, socket server: all named `dbaio-…`), but
/// the one a drop moves to, and inside a future's waker, which runs on whatever thread
/// completes its I/O — the waiting thread itself on `sim`, or an issuer running its queued
/// read — before that I/O counts as complete.
pub(super) fn must_not_wait_here() -> bool {
    !RETIRING_HERE.with(|r| r.get())
        && (crate::handle::notice::in_waker()
            || crate::handle::callback::in_callback()
            || std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("dbaio-") && n != RETIRE_THREAD))
}

impl AioInner {
    /// [`Aio::shutdown`]: refuses new I/O, waits for every I/O started, runs the error
    /// callbacks of detached I/Os.
    fn shut_down(&self) {
        let shared = &self.shared;
        shared.shutting_down.store(true, Ordering::SeqCst);
        for i in 0..shared.n_handles {
            let s = shared.slot(i);
            let g = s.generation.load(Ordering::Acquire);
            if matches!(
                s.state(),
                HandleState::Defined
                    | HandleState::Staged
                    | HandleState::Submitted
                    | HandleState::CompletedIo
            ) {
                let _ = self.wait_done(i, g);
            }
        }
        // Detached I/Os' error callbacks, queued as they completed, run before we return.
        shared.notifier.finish();
    }

    /// Where `point` is: the subsystem's own, or its method's (None if it has no such point).
    fn test_hold(&self, point: crate::TestPoint) -> Option<&crate::method::TestHold> {
        match point {
            crate::TestPoint::Recycling => Some(&self.shared.recycling_hold),
            crate::TestPoint::Executing => Some(&self.shared.executing_hold),
            _ => self.method.test_hold(point),
        }
    }

    /// Waits until I/O `(i, generation)` is complete, letting the method move it on from this
    /// thread when it can (io_uring reaps the issuer's ring; the worker method runs it if no
    /// worker has taken it).
    pub(crate) fn wait_done(&self, i: u32, generation: u64) -> Result<(), AioError> {
        self.shared.wait_done(i, generation, |i, g| {
            self.method.drive_one(&self.shared, i, g)
        })
    }

    /// Drops one reference to file slot `slot`, closing the fd when it was the last.
    pub(crate) fn release_file(&self, slot: u32) {
        if let Some(fd) = self.shared.files.release(slot) {
            // A child made by fork closes only its copy of the descriptor: the rings' file
            // tables and the worker processes' segment are the parent's, shared with it, and
            // the file is still open there (so is the buffer pool's memory).
            let child = self.owner.forked_since();
            if !child {
                self.method.file_closed(slot);
            }
            if let Some(store) = &self.shared.storage {
                store.closing(fd);
            }
            // SAFETY: the table handed us the fd exactly once (refcount reached zero), no I/O
            // references it any more, and no one else will close it.
            if unsafe { libc::close(fd) } < 0 {
                tracing::warn!(
                    "could not close file slot {slot}: {}",
                    std::io::Error::last_os_error()
                );
            }
            // The layer above (the buffer manager) forgets the file before the slot is reused.
            if let Some(a) = self.shared.attachment_hooks().filter(|_| !child) {
                a.file_closed(slot, self.shared.shutting_down.load(Ordering::SeqCst));
            }
            self.shared.files.free_slot(slot);
        }
    }
}

/// The started AIO subsystem. Cheap to clone; every clone names the same subsystem.
///
/// ```
/// use dbaio::{Aio, IoBuf, OpenOptions, Settings};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("data");
/// std::fs::write(&path, vec![7u8; 8192]).unwrap();
///
/// let aio = Aio::start(Settings::default()).unwrap();          // io_method = worker
/// let issuer = aio.register_issuer("example").unwrap();
/// let file = aio.open(&path, &OpenOptions::read()).unwrap();
/// let io = issuer.acquire().unwrap().read(&file, 0, IoBuf::new(8192));
/// let done = issuer.wait(io);
/// assert!(done.result().is_ok());
/// assert_eq!(done.bytes(), 8192);
/// assert!(done.into_buf().iter().all(|&b| b == 7));
/// ```
#[derive(Clone)]
pub struct Aio {
    pub(crate) inner: Arc<AioInner>,
}

impl Aio {
    /// The method actually running (after any io_uring fallback).
    pub fn io_method(&self) -> IoMethodKind {
        self.inner.method.kind()
    }

    /// What `io_uring_registered_buffers` and `io_uring_registered_io_bufs` achieved so far:
    /// None unless the method is io_uring with either on.
    pub fn registered_buffers(&self) -> Option<crate::RegisteredBuffers> {
        self.inner.method.registered_buffers().map(|read| read())
    }

    /// The simulated disk its files live on (`io_method = sim`; None on the other methods):
    /// to look at what a file holds, or to [`crash`](crate::SimDisk::crash) it.
    pub fn sim_disk(&self) -> Option<crate::SimDisk> {
        self.inner.sim_disk.clone()
    }

    /// The settings it was started with.
    pub fn settings(&self) -> &Settings {
        &self.inner.shared.settings
    }

    /// Handles each issuer owns (`io_max_concurrency`, resolved).
    pub fn handles_per_issuer(&self) -> u32 {
        self.inner.shared.per_issuer
    }

    /// Registers the calling thread as an issuer named `name`.
    ///
    /// Refused (an API-violation error) inside a handle callback or a future's waker, which
    /// run inside the completion protocol and must not start or wait for I/O.
    pub fn register_issuer(&self, name: &str) -> Result<Issuer, AioError> {
        Issuer::register(&self.inner, name)
    }

    /// Opens a file as an I/O target.
    pub fn open(&self, path: impl AsRef<Path>, opts: &OpenOptions) -> Result<File, AioError> {
        File::open(&self.inner, path.as_ref(), opts)
    }

    /// Waits, from any thread, until the I/O `wref` names is complete. Returns at once if the
    /// handle was recycled since. When the method allows (io_uring), the caller drives the
    /// completion itself rather than depending on the issuer.
    ///
    /// An I/O still staged in a batch its issuer has not submitted is run by the caller
    /// itself (executor `waiter`), so waiting never depends on the issuer coming back.
    /// A reference from another subsystem is an API-violation error, and so is a wait inside
    /// a handle callback or a future's waker for an I/O not yet complete (they must not
    /// block).
    pub fn wait(&self, wref: WaitRef) -> Result<(), AioError> {
        self.check_ref(wref)?;
        self.inner.wait_done(wref.index, wref.generation)
    }

    /// True once the I/O `wref` names is complete (or long done: its handle was recycled),
    /// after reaping whatever completions of its issuer are ready now. Never blocks — unlike
    /// PostgreSQL's `pgaio_wref_check_done`, it also makes progress under io_uring. On
    /// `sim` it completes the next simulated I/O due, in the calling thread (so an injected
    /// `FaultAction::Delay` on that I/O is slept there).
    pub fn check_done(&self, wref: WaitRef) -> Result<bool, AioError> {
        self.check_ref(wref)?;
        let shared = &self.inner.shared;
        let s = shared.slot(wref.index);
        let done =
            || s.generation.load(Ordering::Acquire) != wref.generation || s.state().is_complete();
        if !done() && s.state() == HandleState::Submitted {
            self.inner
                .method
                .poll(shared, s.owner.load(Ordering::Relaxed));
        }
        Ok(done())
    }

    /// Refuses a wait reference of another subsystem.
    fn check_ref(&self, wref: WaitRef) -> Result<(), AioError> {
        let shared = &self.inner.shared;
        if wref.subsystem != shared.id || wref.index >= shared.n_handles {
            return Err(AioError::ApiViolation(
                "the wait reference belongs to another AIO subsystem",
            ));
        }
        Ok(())
    }

    /// True if the I/O `wref` names is complete (or long recycled). Never blocks.
    ///
    /// # Panics
    ///
    /// If `wref` belongs to another subsystem (a bug in the caller: it names nothing here).
    pub fn is_done(&self, wref: WaitRef) -> bool {
        if let Err(e) = self.check_ref(wref) {
            panic!("Aio::is_done: {e}");
        }
        let shared = &self.inner.shared;
        let s = shared.slot(wref.index);
        if s.generation.load(Ordering::Acquire) != wref.generation || s.state().is_complete() {
            return true;
        }
        self.inner
            .method
            .poll(shared, s.owner.load(Ordering::Relaxed));
        s.generation.load(Ordering::Acquire) != wref.generation || s.state().is_complete()
    }

    /// The aios view: every I/O handle not idle, with PostgreSQL's `pg_aios` columns plus the
    /// issuer, its thread, the executor and the age. Taken without stopping I/O; never a torn
    /// row.
    pub fn aios(&self) -> Vec<AioRow> {
        crate::introspect::view::aios(&self.inner.shared, self.inner.pool.as_ref())
    }

    /// What each registered issuer is waiting for now.
    pub fn waits(&self) -> Vec<WaitRow> {
        crate::introspect::view::waits(&self.inner.shared)
    }

    /// Per-issuer statistics: count, bytes, errors, time and latency percentiles per op, and
    /// I/Os per executor.
    pub fn stats(&self) -> Vec<IssuerStatsRow> {
        self.inner.stats.rows(&self.inner.shared)
    }

    /// Each device's readahead-advice budget: blocks advised and not yet read, all issuers
    /// together, against `io_advice_budget`.
    pub fn advice_budget(&self) -> Vec<AdviceBudgetRow> {
        crate::introspect::view::advice_budget(&self.inner.shared)
    }

    /// The worker method's pool: its sizing, what it grew and shrank, and every running
    /// worker (thread id, busy or idle, I/Os done). None unless the method is `worker`.
    pub fn worker_pool(&self) -> Option<WorkerPoolRow> {
        crate::introspect::view::worker_pool(self.inner.pool.as_ref())
    }

    /// Tests only: how long after a thread of this program completed worker processes'
    /// results the pool's completer leaves the next ones to it (1 ms by default),
    /// counting such a completion now.
    #[doc(hidden)]
    pub fn set_worker_process_drainer_window(&self, window: std::time::Duration) {
        if let Some(p) = &self.inner.pool {
            p.set_drainer_window(window);
        }
    }

    /// Tests only: the worker-process pool's completer naps and sleeps until someone wakes
    /// it (true) — no nap's end, no safety net — or as it normally does (false), so that a
    /// test can tell a real wake from a timer's.
    #[doc(hidden)]
    pub fn hold_worker_process_completer_timers(&self, hold: bool) {
        if let Some(p) = &self.inner.pool {
            p.hold_completer_timers(hold);
        }
    }

    /// Tests only: worker processes that decide to retire stop themselves (SIGSTOP) at step
    /// `at` of retiring (None: they do not), so a test can kill one at that point.
    #[doc(hidden)]
    pub fn hold_retiring_worker_processes(&self, at: Option<crate::RetireStep>) {
        if let Some(p) = &self.inner.pool {
            p.hold_retiring_workers(at);
        }
    }

    /// Readahead advice of every issuer together (the sum of [`Aio::stats`]' rows).
    pub fn advice_totals(&self) -> AdviceRow {
        let mut t = AdviceRow::default();
        for r in self.stats() {
            t += r.advice;
        }
        t
    }

    /// Waits that a safety-net timeout ended although what they waited for had happened —
    /// missed wake-ups, all issuers, since start. Always 0 unless dbaio has a bug; per
    /// issuer in [`Aio::stats`] (`backstop_wakes`).
    pub fn backstop_wakes(&self) -> u64 {
        self.inner
            .shared
            .backstop_wakes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits that lasted the whole 100 ms safety net, all issuers, since start, whatever
    /// ended them: I/Os slower than that, or the missed wake-ups of
    /// [`Aio::backstop_wakes`]. Per issuer in [`Aio::stats`] (`long_waits`).
    pub fn long_waits(&self) -> u64 {
        self.inner
            .shared
            .long_waits
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Zeroes every issuer's statistics.
    pub fn reset_stats(&self) {
        self.inner.stats.reset(self.inner.shared.now_ns())
    }

    /// Arms a fault-injection rule (tests).
    pub fn inject_fault(&self, rule: FaultRule) {
        self.inner.shared.faults.add(rule);
    }

    /// Lets every completion parked by a [`FaultAction::Hold`](crate::FaultAction) rule go on.
    pub fn release_held(&self) {
        self.inner.shared.faults.release_held();
    }

    /// Disarms every fault-injection rule.
    pub fn clear_faults(&self) {
        self.inner.shared.faults.clear();
    }

    /// Seeds the draws of rules with a [`probability`](FaultRule::probability): the same
    /// seed hits the same I/Os (by op, file, offset, handle and generation), so a failure
    /// replays.
    pub fn seed_faults(&self, seed: u64) {
        self.inner.shared.faults.set_seed(seed);
    }

    /// Makes every submission to the kernel fail with `errno` (0: stop), as a broken
    /// `io_uring_enter` would: for tests of that path. Methods that do not submit to the
    /// kernel (sync, worker) ignore it.
    #[doc(hidden)]
    pub fn inject_submit_error(&self, errno: i32) {
        self.inner.method.inject_submit_error(errno);
    }

    /// Makes the next submission to the kernel only (of each issuer's ring) fail with
    /// `errno`, as a refusal that passes would. For tests of that path.
    #[doc(hidden)]
    pub fn inject_submit_error_once(&self, errno: i32) {
        self.inner.method.inject_submit_error_once(errno);
    }

    /// Tests only: the next thread to pass `point` stops there, holding what it holds, until
    /// [`Aio::release_hold`]. A method without that point ignores it.
    #[doc(hidden)]
    pub fn hold_next(&self, point: crate::TestPoint) {
        if let Some(h) = self.inner.test_hold(point) {
            h.arm(None);
        }
    }

    /// Tests only: as [`Aio::hold_next`], but only the calling thread stops at `point`.
    #[doc(hidden)]
    pub fn hold_next_here(&self, point: crate::TestPoint) {
        if let Some(h) = self.inner.test_hold(point) {
            // SAFETY: gettid has no arguments and cannot fail.
            h.arm(Some(unsafe { libc::gettid() }));
        }
    }

    /// Tests only: whether a thread is stopped at `point` now ([`Aio::hold_next`]).
    #[doc(hidden)]
    pub fn held_at(&self, point: crate::TestPoint) -> bool {
        self.inner.test_hold(point).is_some_and(|h| h.holding())
    }

    /// Tests only: lets the thread stopped at `point` go on ([`Aio::hold_next`]).
    #[doc(hidden)]
    pub fn release_hold(&self, point: crate::TestPoint) {
        if let Some(h) = self.inner.test_hold(point) {
            h.release();
        }
    }

    /// How many faults have been injected so far.
    pub fn faults_injected(&self) -> u64 {
        self.inner.shared.faults.hits()
    }

    /// Refuses new I/O and new files, and waits until every started I/O of every issuer is
    /// complete: submitted ones are waited for, and ones still staged in a batch are run
    /// here; the error callbacks of detached I/Os have all run when it returns. Issuers may
    /// still wait on and reclaim what they started.
    ///
    /// Called from a future's waker (which runs on the thread completing its I/O, before
    /// the I/O counts as complete) or on one of the subsystem's own threads (an error
    /// callback), it refuses new I/O at once and returns; the wait and the callbacks run on a
    /// thread of its own (`dbaio-shutdown`). The calling thread may be completing one of the
    /// I/Os the wait is for: waiting there never ended (found by a caller-side attack,
    /// 2026-12-07).
    pub fn shutdown(&self) {
        if !must_not_wait_here() {
            self.inner.shut_down();
            return;
        }
        self.inner
            .shared
            .shutting_down
            .store(true, Ordering::SeqCst);
        let inner = Arc::clone(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("dbaio-shutdown".into())
            .spawn(move || inner.shut_down());
        if let Err(e) = spawned {
            tracing::warn!(
                "could not start a thread to finish the shutdown ({e}): new I/O is refused, started I/O is not waited for"
            );
        }
    }

    /// True once [`Aio::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.inner.shared.shutting_down.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Aio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aio")
            .field("io_method", &self.io_method())
            .finish()
    }
}
