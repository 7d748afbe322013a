//! [`Shared`]: what every thread (and, with worker processes, every process) sees of the
//! subsystem — the handle table in the shared region, the issuer slots, the file table, the
//! callback registry, the fault injector — and the two paths every method shares: processing
//! a completion and waiting for one. The methods hold an `Arc<Shared>` (never the `Aio`), so
//! there is no reference cycle between the subsystem and its worker threads. See
//! `docs/design.md`, "The handle layer".

use super::atomics::STD_FENCE;
use super::bell::{Bell, Slept};
use super::callback::{CallbackRegistry, IoContext};
use super::error::AioError;
use super::fault::{FaultInjector, FaultSite};
use super::files::FileTable;
use super::fixed_memory::FixedMemory;
use super::op::Op;
use super::result::{
    ERROR_DATA_IMPOSSIBLE, ERROR_DATA_PANICKED, ERROR_DATA_WORKER_LOST, IoResult, Status,
};
use super::settings::Settings;
use super::shmem::SharedRegion;
use super::slot::{Executor, HandleSlot, HandleState, WaitRef};
use super::storage::Storage;
use super::wait_event::WaitEvent;
use crossbeam_utils::CachePadded;
use dbaio_sys::Request;
use parking_lot::Mutex;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

/// Per-issuer-slot information other threads may read.
pub(crate) struct IssuerSlot {
    pub in_use: AtomicBool,
    pub tid: AtomicI32,
    pub name: Mutex<String>,
    /// Rung by every completion of this issuer's I/Os on another thread and by every
    /// hand-off of its ring; where a wait for several of its I/Os sleeps (`bell.rs`).
    pub bell: Bell<AtomicU32, AtomicU32>,
    /// Waits on this issuer's I/Os that the safety net ended although what they waited for
    /// had happened (missed wakes): 0 unless there is a bug. Since the issuer registered.
    pub backstop_wakes: AtomicU64,
    /// Waits on this issuer's I/Os that lasted the whole safety net, whatever ended them: an
    /// I/O slower than [`SAFETY_NET`](super::bell::SAFETY_NET), or a missed wake (counted in
    /// `backstop_wakes` too). Since the issuer registered.
    pub long_waits: AtomicU64,
    /// What the issuer is waiting for now (a `WaitEvent` code; 0: nothing).
    pub wait_event: AtomicU32,
    /// What it waits on (an io_id, a count…), meaning per event.
    pub wait_object: AtomicU64,
    /// Since when (ns since the subsystem started).
    pub wait_since_ns: AtomicU64,
    /// This issuer's I/Os whose result went to a ticket or an `on_error` notice and that
    /// finished since the issuer last looked: its next `acquire` reclaims them, so that their
    /// statistics are counted and their `File`s let go without waiting for the issuer to run
    /// out of handles (found by a caller-side attack, 2026-12-07).
    pub unclaimed: AtomicU32,
}

impl IssuerSlot {
    /// Publishes that the issuer starts waiting for `event` on `object`.
    pub(crate) fn begin_wait(&self, event: WaitEvent, object: u64, now_ns: u64) {
        self.wait_object.store(object, Ordering::Relaxed);
        self.wait_since_ns.store(now_ns, Ordering::Relaxed);
        self.wait_event.store(event as u32, Ordering::Release);
    }

    /// The wait published now.
    fn current_wait(&self) -> Wait {
        (
            self.wait_event.load(Ordering::Relaxed),
            self.wait_object.load(Ordering::Relaxed),
            self.wait_since_ns.load(Ordering::Relaxed),
        )
    }

    /// Publishes `wait` (from [`IssuerSlot::current_wait`]) again.
    fn resume_wait(&self, (event, object, since): Wait) {
        self.wait_object.store(object, Ordering::Relaxed);
        self.wait_since_ns.store(since, Ordering::Relaxed);
        self.wait_event.store(event, Ordering::Release);
    }

    /// Publishes that the wait is over.
    pub(crate) fn end_wait(&self) {
        self.wait_event
            .store(WaitEvent::None as u32, Ordering::Release);
    }
}

pub(crate) use dbaio_sys::retry_transient;

/// A published wait: event, object, since.
type Wait = (u32, u64, u64);

/// What a method did for a thread that waits on I/O (see `IoMethod::drive_one`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drive {
    /// Something may have changed (an I/O ran here, a ring was reaped, a sleep ended): the
    /// waiter looks at the states again.
    Progressed,
    /// Nothing to do here: the waiter sleeps until the I/O's completer wakes it (on the
    /// handle's state word for one I/O, on the issuer's bell for several).
    Sleep,
}

/// What completing an I/O did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Completed {
    /// It is complete (COMPLETED_SHARED), successfully or not.
    Done,
    /// A transient error: execute it again and complete it again (it is still SUBMITTED).
    Retry,
}

/// A layer above the handle layer that keeps state of its own about files and issuers (the
/// buffer manager): told when an issuer registers and when a file's last reference goes, and
/// reachable, typed, from anything that holds the [`Shared`] (see [`Shared::attachment`]).
pub(crate) trait Attachment: Send + Sync + 'static {
    /// Issuer slot `slot` was just taken by a new issuer.
    fn issuer_registered(&self, _slot: u32) {}
    /// File slot `slot` lost its last reference; its descriptor is closed and the slot is
    /// about to be reused. `shutting_down`: no file can be opened any more.
    fn file_closed(&self, _slot: u32, _shutting_down: bool) {}
    /// Memory that I/Os of the attachment read into and write from, mapped to the same
    /// pages for the subsystem's whole life (never unmapped, advised away or punched): a
    /// method may register it with the kernel (io_uring's fixed buffers).
    fn fixed_memory(&self) -> FixedMemory {
        FixedMemory::None
    }
}

/// The attachment, with what typed access needs (its concrete type and address).
struct Attached {
    hooks: Arc<dyn Attachment>,
    type_id: std::any::TypeId,
    ptr: *const (),
}

/// Numbers the subsystems of this process (for [`WaitRef`]s).
static SUBSYSTEMS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

pub(crate) struct Shared {
    /// This subsystem's number in the process.
    pub id: u32,
    pub settings: Settings,
    region: SharedRegion,
    handles_off: usize,
    iovecs_off: usize,
    data_off: usize,
    pub n_handles: u32,
    pub per_issuer: u32,
    pub max_iov: u32,
    pub issuers: Box<[CachePadded<IssuerSlot>]>,
    pub files: FileTable,
    pub callbacks: CallbackRegistry,
    pub faults: FaultInjector,
    /// Readahead advice in flight, per device (see `advice_budget.rs`).
    pub advice: super::advice_budget::AdviceBudget,
    /// Told of every completion made on a thread other than its issuer's, after it is
    /// published (set once by a method whose waiters sleep elsewhere: worker processes).
    pub on_completion: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Every missed wake a safety net caught, all issuers, since start (see `backstop_wakes`
    /// of [`IssuerSlot`]).
    pub backstop_wakes: AtomicU64,
    /// Every wait that lasted the whole safety net, all issuers, since start (see
    /// `long_waits` of [`IssuerSlot`]).
    pub long_waits: AtomicU64,
    /// Where the files live when not in the kernel's file systems (`io_method = sim`).
    pub storage: Option<Arc<dyn Storage>>,
    attached: Option<Attached>,
    pub epoch: Instant,
    /// `epoch` on the monotonic clock, in nanoseconds (for [`Shared::now_ns`]).
    epoch_ns: u64,
    pub shutting_down: AtomicBool,
    /// Runs detached I/Os' error callbacks (see `notice.rs`).
    pub notifier: super::notice::Notifier,
    /// Tests only: `TestPoint::Executing` and `TestPoint::Recycling`.
    pub executing_hold: super::test_hold::TestHold,
    pub recycling_hold: super::test_hold::TestHold,
}

fn round_up(v: usize, a: usize) -> usize {
    v.div_ceil(a) * a
}

// SAFETY: `Attached::ptr` points into the `Arc` in `hooks`, whose target is `Send + Sync`
// (the `Attachment` bound); the pointer is only read, to hand out shared references.
unsafe impl Send for Attached {}
// SAFETY: as above.
unsafe impl Sync for Attached {}

impl Shared {
    /// Lays out the shared region for `settings` and builds the tables. `attachment` is the
    /// layer above that wants to hear of issuers and files (the buffer manager), if any.
    pub(crate) fn new<A: Attachment>(
        settings: Settings,
        callbacks: CallbackRegistry,
        attachment: Option<Arc<A>>,
        storage: Option<Arc<dyn Storage>>,
    ) -> Result<Shared, AioError> {
        let per_issuer = settings.effective_io_max_concurrency();
        let advice_budget = settings.advice_budget_blocks();
        let n_handles = per_issuer
            .checked_mul(settings.max_issuers)
            .expect("handle count fits in u32");
        let max_iov = settings.io_max_combine_limit;
        let handles_off = 0;
        let iovecs_off = round_up(n_handles as usize * size_of::<HandleSlot>(), 64);
        let iov_bytes = n_handles as usize * max_iov as usize * size_of::<libc::iovec>();
        let data_off = round_up(iovecs_off + iov_bytes, 64);
        let total = data_off + n_handles as usize * max_iov as usize * size_of::<AtomicU64>();
        let region = SharedRegion::new(total).map_err(AioError::Start)?;
        let attached = attachment.map(|a| Attached {
            type_id: std::any::TypeId::of::<A>(),
            ptr: Arc::as_ptr(&a).cast::<()>(),
            hooks: a,
        });
        let shared = Shared {
            id: SUBSYSTEMS.fetch_add(1, Ordering::Relaxed),
            issuers: (0..settings.max_issuers)
                .map(|_| {
                    CachePadded::new(IssuerSlot {
                        in_use: AtomicBool::new(false),
                        tid: AtomicI32::new(0),
                        name: Mutex::new(String::new()),
                        bell: Bell {
                            word: AtomicU32::new(0),
                            followers: AtomicU32::new(0),
                            waiting: AtomicU32::new(0),
                            wake_at: AtomicU32::new(0),
                        },
                        backstop_wakes: AtomicU64::new(0),
                        long_waits: AtomicU64::new(0),
                        wait_event: AtomicU32::new(0),
                        wait_object: AtomicU64::new(0),
                        wait_since_ns: AtomicU64::new(0),
                        unclaimed: AtomicU32::new(0),
                    })
                })
                .collect(),
            files: FileTable::new(settings.max_files),
            settings,
            region,
            handles_off,
            iovecs_off,
            data_off,
            n_handles,
            per_issuer,
            max_iov,
            callbacks,
            faults: FaultInjector::default(),
            advice: super::advice_budget::AdviceBudget::new(advice_budget),
            on_completion: std::sync::OnceLock::new(),
            backstop_wakes: AtomicU64::new(0),
            long_waits: AtomicU64::new(0),
            storage,
            attached,
            epoch: Instant::now(),
            epoch_ns: monotonic_ns(),
            shutting_down: AtomicBool::new(false),
            notifier: super::notice::Notifier::new(),
            executing_hold: Default::default(),
            recycling_hold: Default::default(),
        };
        for i in 0..n_handles {
            let s = shared.slot(i);
            s.owner.store(i / per_issuer, Ordering::Relaxed);
            s.generation.store(1, Ordering::Relaxed);
            s.reset();
        }
        Ok(shared)
    }

    /// The attachment, if it is an `A` (one type-id comparison, no virtual call: the buffer
    /// manager finds its pool this way on every read).
    #[inline]
    pub(crate) fn attachment<A: Attachment>(&self) -> Option<&A> {
        let a = self.attached.as_ref()?;
        (a.type_id == std::any::TypeId::of::<A>()).then(|| {
            // SAFETY: `ptr` is the address of the `A` inside `hooks` (same type id), kept
            // alive by that `Arc` for as long as `self` lives.
            unsafe { &*a.ptr.cast::<A>() }
        })
    }

    /// The attachment's hooks, if there is one.
    pub(crate) fn attachment_hooks(&self) -> Option<&dyn Attachment> {
        self.attached.as_ref().map(|a| &*a.hooks)
    }

    /// A wait reference to use `generation` of handle `i`.
    pub(crate) fn wait_ref(&self, i: u32, generation: u64) -> WaitRef {
        WaitRef {
            subsystem: self.id,
            index: i,
            generation,
        }
    }

    /// How many handles the table has.
    pub(crate) fn handle_count(&self) -> u32 {
        self.n_handles
    }

    /// The handle slot `i`.
    pub(crate) fn slot(&self, i: u32) -> &HandleSlot {
        assert!(i < self.n_handles, "handle index {i} out of range");
        // SAFETY: the region holds n_handles HandleSlots at handles_off (sized in `new`), is
        // 64-byte aligned (mmap gives page alignment), zero-filled memory is a valid HandleSlot
        // (all fields are atomics), and the region lives as long as `self`.
        unsafe {
            &*self
                .region
                .base()
                .add(self.handles_off)
                .cast::<HandleSlot>()
                .add(i as usize)
        }
    }

    /// Handle `i`'s iovec array (`max_iov` entries). Written only by the owning issuer while
    /// the handle is HANDED_OUT; read by executors after it is published.
    pub(crate) fn iovecs(&self, i: u32) -> *mut libc::iovec {
        assert!(i < self.n_handles, "handle index {i} out of range");
        debug_assert!(
            self.iovecs_off + (i as usize + 1) * self.max_iov as usize * 16 <= self.region.len()
        );
        // SAFETY: in bounds of the region by the layout computed in `new`.
        unsafe {
            self.region
                .base()
                .add(self.iovecs_off)
                .cast::<libc::iovec>()
                .add(i as usize * self.max_iov as usize)
        }
    }

    /// Handle `i`'s data words (`max_iov` entries).
    pub(crate) fn handle_data(&self, i: u32) -> &[AtomicU64] {
        assert!(i < self.n_handles, "handle index {i} out of range");
        // SAFETY: in bounds by the layout computed in `new`; zeroed AtomicU64s are valid and
        // the region outlives `self`'s borrows.
        unsafe {
            std::slice::from_raw_parts(
                self.region
                    .base()
                    .add(self.data_off)
                    .cast::<AtomicU64>()
                    .add(i as usize * self.max_iov as usize),
                self.max_iov as usize,
            )
        }
    }

    /// Nanoseconds since the subsystem started: one `clock_gettime` (read twice per I/O, so
    /// kept to the clock read and a subtraction; `Instant::elapsed` adds its own bookkeeping
    /// to every I/O).
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.epoch_ns)
    }

    /// The clock of the I/O paths (staging, completion, waits, and the view's ages): `now_ns`
    /// with `track_io_timing` on — or, inside [`Shared::one_clock`], the one reading taken
    /// for that whole step; with it off, the same clock at jiffy resolution
    /// (`CLOCK_MONOTONIC_COARSE`, a fraction of the fine clock's cost: docs/settings.md,
    /// `track_io_timing`), and no latency is recorded.
    /// A store that keeps its own time (the simulated disk) gives it instead: a simulated
    /// run's latencies, waits and ages are the simulated ones, the same every run of a seed.
    #[inline]
    pub(crate) fn io_clock_ns(&self) -> u64 {
        if let Some(store) = &self.storage {
            if let Some(t) = store.clock_ns() {
                return t;
            }
        }
        io_clock(self.settings.track_io_timing).saturating_sub(self.epoch_ns)
    }

    /// Runs `f` — one step that completes or stages many I/Os at once, such as a drain of a
    /// ring's completions — with one clock reading for all of their times instead of one
    /// each (`track_io_timing`'s cost per I/O; docs/design.md, "Timing"). The events of one
    /// step are microseconds apart, so their latencies lose nothing a histogram shows. A
    /// step inside another keeps the outer reading. Nothing in `f` may sleep.
    pub(crate) fn one_clock<R>(&self, f: impl FnOnce() -> R) -> R {
        one_clock(self.settings.track_io_timing, f)
    }

    /// The plain request for handle `i` (SUBMITTED), for the worker engine and sync execution.
    pub(crate) fn request(&self, i: u32) -> Request {
        let s = self.slot(i);
        let r = Ordering::Relaxed;
        Request {
            op: s.op(),
            fd: s.fd.load(r),
            file: s.file.load(r),
            offset: s.offset.load(r),
            len: s.length.load(r),
            iov: self.iovecs(i),
            iovcnt: u32::from(s.iov_count.load(r)),
            path: s.path.load(r) as *const libc::c_char,
            // The index, and the generation's low half for the worker's queue mark.
            user_data: u64::from(i) | (s.generation.load(r) << 32),
        }
    }

    /// Claims staged handle `i` for execution: STAGED → SUBMITTED by compare-and-swap. The
    /// issuer's method claims each handle it submits; a thread waiting on a handle that is
    /// still staged (in a batch not yet submitted, or at shutdown) claims it and runs it
    /// itself. Exactly one claim succeeds; false: someone else has it.
    pub(crate) fn claim_submit(&self, i: u32) -> bool {
        self.slot(i)
            .try_set_state(HandleState::Staged, HandleState::Submitted)
    }

    /// Runs handle `i` (SUBMITTED, claimed by the caller) on the calling thread and completes
    /// it: *the* way any thread executes an I/O itself — the issuer (the sync method, a
    /// SYNCHRONOUS handle, the direct path, a queue's overflow, an awaited I/O), a waiter that
    /// claimed it, a worker thread, a reaper retrying an attempt. Each attempt goes through
    /// [`Shared::complete`], so every executor has the same retry policy, fault site, state
    /// edges, callbacks and wake-ups. A panic while executing fails the I/O instead of leaving
    /// it in flight for ever.
    pub(crate) fn run_here(&self, i: u32, executor: Executor) {
        // Shown in the view while it runs (a waiter may run it for seconds: an fsync).
        self.slot(i)
            .executor
            .store(executor.encode(), Ordering::Relaxed);
        let owner = &self.issuers[self.slot(i).owner.load(Ordering::Relaxed) as usize];
        // A waiter that is the I/O's own issuer (its wait took the I/O back from a queue)
        // names the I/O as its wait event while it runs it, as the issuer running its own I/O
        // does, then goes back to the wait it was in.
        let own_waiter =
            executor == Executor::Waiter && owner.tid.load(Ordering::Relaxed) == this_tid();
        let issuer = (executor == Executor::Issuer || own_waiter)
            .then(|| (&**owner, own_waiter.then(|| owner.current_wait())));
        // The first attempt's wait began when the I/O was staged, a moment ago (one clock
        // read fewer per synchronous I/O); a retry's begins now.
        let mut since = self.slot(i).staged_ns.load(Ordering::Relaxed);
        loop {
            let Some(raw) = self.execute_once(i, issuer, since) else {
                self.fail_panicked(i, executor);
                return;
            };
            if self.complete_catching(i, raw, executor) == Completed::Done {
                return;
            }
            since = self.io_clock_ns();
        }
    }

    /// Executes handle `i` (SUBMITTED, claimed by the caller) once in the calling thread: its
    /// raw result, or `None` if executing it panicked. With `issuer` (the I/O's own issuer
    /// runs it) the issuer's wait event names the I/O meanwhile, its wait begun at `since`;
    /// afterwards it has none, or the wait given with it again (a waiter's).
    fn execute_once(
        &self,
        i: u32,
        issuer: Option<(&IssuerSlot, Option<Wait>)>,
        since: u64,
    ) -> Option<i32> {
        let req = self.request(i);
        if let Some((info, _)) = issuer {
            info.begin_wait(
                WaitEvent::for_sync_op(self.slot(i).op()),
                u64::from(i),
                since,
            );
        }
        self.executing_hold.pass();
        // SAFETY: the iovecs and path of a SUBMITTED handle name memory the issuer parked in
        // the handle until reclaim, which cannot happen before the I/O completes, after this.
        let raw = catch_unwind(AssertUnwindSafe(|| unsafe {
            match &self.storage {
                None => dbaio_sys::perform(&req),
                Some(store) => store.perform(&req),
            }
        }));
        match issuer {
            Some((info, Some(wait))) => info.resume_wait(wait),
            Some((info, None)) => info.end_wait(),
            None => {}
        }
        raw.ok()
    }

    /// Completes handle `i` (SUBMITTED) with raw result `raw`: *the* one completion, whatever
    /// executed the I/O. Fault injection, then — unless the result is a transient error to
    /// retry ([`retry_transient`]) — the shared callbacks and COMPLETED_SHARED, waking
    /// waiters (see [`Shared::finish`]).
    ///
    /// `Retry` leaves the handle SUBMITTED: the caller executes it again, outside any lock it
    /// holds, and completes it again.
    ///
    /// A panic in here (a fault rule's, or a bug) unwinds to the caller, which must fail the
    /// I/O ([`Shared::fail_panicked`]) if it is still SUBMITTED: a worker thread does so and
    /// is replaced; [`Shared::complete_catching`] does so for the others.
    #[inline]
    pub(crate) fn complete(&self, i: u32, raw: i32, executor: Executor) -> Completed {
        let s = self.slot(i);
        // Acquire: see everything the issuer wrote before it published SUBMITTED.
        if s.state() != HandleState::Submitted {
            not_submitted(s.state());
        }
        let (raw, hold) = if self.faults.armed() {
            let fault = self.faults.apply(
                &FaultSite {
                    op: s.op(),
                    file: s.file.load(Ordering::Relaxed),
                    offset: s.offset.load(Ordering::Relaxed),
                    io_id: i,
                    generation: s.generation.load(Ordering::Relaxed),
                    attempt: s.attempts.load(Ordering::Relaxed),
                },
                raw,
            );
            (fault.raw, fault.hold)
        } else {
            (raw, None)
        };
        let attempts = s.attempts.load(Ordering::Relaxed);
        if retry_transient(raw, attempts) {
            s.attempts.store(attempts + 1, Ordering::Relaxed);
            return Completed::Retry;
        }
        self.finish(i, raw, executor, None, hold);
        Completed::Done
    }

    /// [`Shared::complete`], failing the I/O if completing it panics (the caller goes on).
    #[inline]
    pub(crate) fn complete_catching(&self, i: u32, raw: i32, executor: Executor) -> Completed {
        match catch_unwind(AssertUnwindSafe(|| self.complete(i, raw, executor))) {
            Ok(c) => c,
            Err(_) => {
                if self.slot(i).state() == HandleState::Submitted {
                    self.fail_panicked(i, executor);
                }
                Completed::Done
            }
        }
    }

    /// Fails handle `i` (SUBMITTED) because the thread executing or completing it panicked.
    pub(crate) fn fail_panicked(&self, i: u32, executor: Executor) {
        tracing::error!(io_id = i, %executor, "the thread executing an I/O panicked; failing the I/O");
        let base = IoResult {
            status: Status::Error,
            callback_id: 0,
            error_data: ERROR_DATA_PANICKED,
            result: 0,
        };
        self.finish(i, -libc::EIO, executor, Some(base), None);
    }

    /// Fails handle `i` (SUBMITTED): every worker process that executed it died first (the
    /// last was `executor`).
    pub(crate) fn fail_worker_lost(&self, i: u32, executor: Executor) {
        tracing::error!(io_id = i, %executor, "the worker processes executing an I/O died; failing the I/O");
        let base = IoResult {
            status: Status::Error,
            callback_id: 0,
            error_data: ERROR_DATA_WORKER_LOST,
            result: 0,
        };
        self.finish(i, -libc::EIO, executor, Some(base), None);
    }

    /// Fails handle `i` (SUBMITTED) with `result` (raw result `raw`), without fault
    /// injection: for an I/O that could not be executed at all (a refused submission).
    pub(crate) fn fail(&self, i: u32, raw: i32, executor: Executor, result: IoResult) {
        self.finish(i, raw, executor, Some(result), None);
    }

    /// Publishes handle `i`'s completion: the raw result, the shared callbacks over the base
    /// result (`base`, or the interpretation of `raw`), the notice, COMPLETED_SHARED (which
    /// wakes the handle's sleepers), and — when the completer is not the issuer's own thread —
    /// the issuer's bell and the method's `on_completion`.
    ///
    /// An I/O without callbacks completed on its issuer's own thread takes the short road:
    /// SUBMITTED → COMPLETED_SHARED in one transition, without the bell (the issuer is not
    /// asleep: it is here). Nothing is lost by skipping COMPLETED_IO there: no callback runs
    /// between the two, and only this same thread can attach a notice, so the notice word is
    /// read without racing an attacher.
    #[inline]
    fn finish(
        &self,
        i: u32,
        raw: i32,
        executor: Executor,
        base: Option<IoResult>,
        hold: Option<u32>,
    ) {
        let s = self.slot(i);
        // Written before the state that publishes them, so the view never sees a completed
        // state without its raw result.
        s.raw_result.store(raw, Ordering::Relaxed);
        s.executor.store(executor.encode(), Ordering::Relaxed);
        s.completed_ns.store(self.io_clock_ns(), Ordering::Relaxed);
        let on_issuer = executor == Executor::Issuer;
        if !on_issuer || hold.is_some() || s.num_callbacks.load(Ordering::Relaxed) != 0 {
            return self.finish_shared(i, raw, on_issuer, base, hold);
        }
        let result = base
            .unwrap_or_else(|| IoResult::from_raw(s.op(), raw, s.length.load(Ordering::Relaxed)));
        s.distilled.store(result.pack(), Ordering::Relaxed);
        // (The owner read before COMPLETED_SHARED, after which the issuer may recycle.)
        let noticed = (s.notice.load(Ordering::Relaxed) != 0 && self.deliver_notice(i, result))
            .then(|| s.owner.load(Ordering::Relaxed));
        s.set_state(HandleState::Submitted, HandleState::CompletedShared);
        if let Some(owner) = noticed {
            self.count_unclaimed(owner);
        }
    }

    /// One more of `owner`'s noticed I/Os is COMPLETED_SHARED (published before this count,
    /// which the issuer reads with `Acquire`): its next `acquire` reclaims it.
    #[inline]
    pub(crate) fn count_unclaimed(&self, owner: u32) {
        self.issuers[owner as usize]
            .unclaimed
            .fetch_add(1, Ordering::Release);
    }

    /// [`Shared::finish`]'s full road: COMPLETED_IO, the shared callbacks, the notice,
    /// COMPLETED_SHARED, and the wake-ups of the issuer's bell and the method.
    #[inline(never)]
    fn finish_shared(
        &self,
        i: u32,
        raw: i32,
        on_issuer: bool,
        base: Option<IoResult>,
        hold: Option<u32>,
    ) {
        let s = self.slot(i);
        s.set_state(HandleState::Submitted, HandleState::CompletedIo);
        if let Some(seen) = hold {
            self.faults.hold(seen);
        }
        let result = self.run_shared_callbacks(i, raw, base);
        s.distilled.store(result.pack(), Ordering::Relaxed);
        // A ticket's or a detached I/O's notice hears of it before anyone can recycle it.
        let noticed = self.deliver_notice(i, result);
        let owner = s.owner.load(Ordering::Relaxed);
        s.set_state(HandleState::CompletedIo, HandleState::CompletedShared);
        if noticed {
            self.count_unclaimed(owner);
        }
        if !on_issuer {
            self.announce_completion(owner);
        }
    }

    /// Runs handle `i`'s shared callbacks, innermost first, over the base result; a
    /// panicking callback fails the I/O.
    fn run_shared_callbacks(&self, i: u32, raw: i32, base: Option<IoResult>) -> IoResult {
        let s = self.slot(i);
        let mut result = base
            .unwrap_or_else(|| IoResult::from_raw(s.op(), raw, s.length.load(Ordering::Relaxed)));
        let n = s.num_callbacks.load(Ordering::Relaxed) as usize;
        let ctx = IoContext {
            shared: self,
            index: i,
        };
        let _inside = (n > 0).then(crate::handle::callback::InCallback::enter);
        for k in (0..n).rev() {
            let id = s.callbacks[k].load(Ordering::Relaxed);
            let data = s.callback_data[k].load(Ordering::Relaxed);
            let Some(cb) = self.callbacks.get(id) else {
                continue;
            };
            match catch_unwind(AssertUnwindSafe(|| cb.complete_shared(&ctx, result, data))) {
                Ok(r) => {
                    let length = s.length.load(Ordering::Relaxed);
                    result = checked((cb.name(), id), i, r, s.op(), length);
                }
                Err(_) => {
                    tracing::error!(
                        callback = cb.name(),
                        io_id = i,
                        "complete_shared callback panicked; failing the I/O"
                    );
                    result = IoResult::failed_by_callback(id, ERROR_DATA_PANICKED);
                }
            }
        }
        result
    }

    /// A completion of one of `owner`'s I/Os was published on another thread: ring its bell
    /// and tell the method.
    #[inline]
    fn announce_completion(&self, owner: u32) {
        self.issuers[owner as usize].bell.ring(STD_FENCE);
        if let Some(hook) = self.on_completion.get() {
            hook();
        }
    }

    /// Counts a missed wake the safety net caught, on a wait for one of `owner`'s I/Os.
    pub(crate) fn count_backstop(&self, owner: u32) {
        self.issuers[owner as usize]
            .backstop_wakes
            .fetch_add(1, Ordering::Relaxed);
        self.backstop_wakes.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            issuer = owner,
            "a wait was ended by its safety-net timeout although what it waited for had \
             happened: a missed wake-up (a bug in dbaio)"
        );
    }

    /// Counts a sleep's outcome: a missed wake is a bug, counted.
    pub(crate) fn note_sleep(&self, owner: u32, slept: Slept) {
        match slept {
            Slept::Woken => {}
            Slept::Quiet => self.count_long_wait(owner),
            Slept::Missed => {
                self.count_long_wait(owner);
                self.count_backstop(owner);
            }
        }
    }

    /// Counts a wait on `owner`'s I/Os that the safety net ended (see `long_waits`).
    pub(crate) fn count_long_wait(&self, owner: u32) {
        self.issuers[owner as usize]
            .long_waits
            .fetch_add(1, Ordering::Relaxed);
        self.long_waits.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits until the I/O `(i, generation)` is complete (or the handle was recycled): the
    /// one wait for one I/O, from any thread. It watches the handle's state, whoever
    /// completes it. A handle still staged in a batch is claimed and run here (executor
    /// `waiter`): its issuer may be waiting for us. While it is submitted, `drive` lets the
    /// method move it on from this thread (io_uring reaps the ring, the worker method runs it
    /// if no worker has taken it); otherwise — or when `drive` says to sleep — the caller
    /// sleeps on the handle's state word, which every transition wakes.
    pub(crate) fn wait_done(
        &self,
        i: u32,
        generation: u64,
        mut drive: impl FnMut(u32, u64) -> Drive,
    ) -> Result<(), AioError> {
        let s = self.slot(i);
        loop {
            let st = s.state();
            if s.generation.load(Ordering::Acquire) != generation {
                return Ok(());
            }
            match st {
                HandleState::CompletedShared | HandleState::CompletedLocal => return Ok(()),
                HandleState::Idle => {
                    return Err(AioError::ApiViolation(
                        "waiting on an I/O that was never started",
                    ));
                }
                // A callback or a waker runs inside the completion protocol, perhaps of this
                // very I/O (which completes only once it returns) or of the ring a drive
                // would reap: it must not block.
                _ if crate::handle::callback::inside_completion() => {
                    return Err(AioError::ApiViolation(
                        "waiting for an I/O inside a handle callback or a future's waker, \
                         which must not block",
                    ));
                }
                // Staged in a batch its issuer has not submitted: run it here rather than
                // wait for the issuer (which may be waiting for us). If the slot was recycled
                // meanwhile, the claim took a newer I/O: it runs here too (nobody else will
                // now), and the loop then finds ours long done.
                HandleState::Staged if self.claim_submit(i) => {
                    self.run_here(i, Executor::Waiter);
                }
                HandleState::Submitted if drive(i, generation) == Drive::Progressed => {}
                // Handed out or being defined (its issuer starts it or gives it back),
                // claimed by another thread, running callbacks, or left to its completer.
                _ => self.sleep_on_handle(i, generation, st),
            }
        }
    }

    /// Sleeps until handle `i` leaves state `st` (or its generation moves on), counting a
    /// missed wake if the safety net finds it did.
    fn sleep_on_handle(&self, i: u32, generation: u64, st: HandleState) {
        let s = self.slot(i);
        let since = Instant::now();
        if s.sleep_while(st, generation) {
            let moved = s.state() != st || s.generation.load(Ordering::Acquire) != generation;
            let slept = super::bell::safety_net_ended(since, moved);
            self.note_sleep(s.owner.load(Ordering::Relaxed), slept);
        }
    }
}

/// `complete`'s failure, out of line so that the check inlines.
#[cold]
#[inline(never)]
fn not_submitted(found: HandleState) -> ! {
    panic!(
        "completing an I/O that is not submitted (it is {})",
        found.name()
    );
}

thread_local! {
    /// The clock reading of the step this thread is in ([`Shared::one_clock`]); 0 outside one.
    static STEP_CLOCK: Cell<u64> = const { Cell::new(0) };
    /// This thread's id, once asked (`gettid` is a system call).
    static TID: Cell<i32> = const { Cell::new(0) };
}

/// The calling thread's kernel id.
fn this_tid() -> i32 {
    TID.with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no arguments and cannot fail.
            t.set(unsafe { libc::gettid() });
        }
        t.get()
    })
}

/// The I/O clock, not yet relative to a subsystem's epoch: the step's reading if this thread
/// is in one, else a fresh fine reading (`track` on) or a coarse one.
#[inline]
fn io_clock(track: bool) -> u64 {
    if !track {
        return clock_ns(libc::CLOCK_MONOTONIC_COARSE);
    }
    match STEP_CLOCK.with(Cell::get) {
        0 => monotonic_ns(),
        held => held,
    }
}

/// Runs `f` as one step of this thread with one fine clock reading (see
/// [`Shared::one_clock`]); a step inside another keeps the outer reading.
fn one_clock<R>(track: bool, f: impl FnOnce() -> R) -> R {
    if !track || STEP_CLOCK.with(Cell::get) != 0 {
        return f();
    }
    /// Ends the step, even if `f` unwinds.
    struct EndStep;
    impl Drop for EndStep {
        fn drop(&mut self) {
            STEP_CLOCK.with(|c| c.set(0));
        }
    }
    STEP_CLOCK.with(|c| c.set(monotonic_ns()));
    let _end = EndStep;
    f()
}

/// The monotonic clock (the one `Instant` reads), in nanoseconds.
#[inline]
fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock` (CLOCK_MONOTONIC or its coarse variant, both always present on Linux) in
/// nanoseconds.
#[inline]
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer and `clock` one of the monotonic clocks.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `r`, which callback `name` (kind `id`) returned for handle `i` (an `op` of `length`
/// bytes), if it is a result the I/O can have; otherwise an error naming the callback
/// (logged with what it returned).
pub(crate) fn checked(
    (name, id): (&str, u8),
    i: u32,
    r: IoResult,
    op: Op,
    length: u64,
) -> IoResult {
    if r.is_possible(op, length) {
        return r;
    }
    tracing::error!(
        callback = name,
        io_id = i,
        status = r.status.name(),
        result = r.result,
        length,
        "a callback returned a result the I/O cannot have; failing the I/O"
    );
    IoResult::failed_by_callback(id, ERROR_DATA_IMPOSSIBLE)
}

#[cfg(test)]
mod tests {
    use super::{io_clock, one_clock};

    /// Sleeps long enough that two fine clock readings around it must differ.
    fn pause() {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }

    #[test]
    fn a_step_times_its_events_by_one_reading_and_ends_even_if_it_unwinds() {
        let step = one_clock(true, || {
            let first = io_clock(true);
            pause();
            assert_eq!(io_clock(true), first, "one reading for the step");
            let inner = one_clock(true, || {
                pause();
                io_clock(true)
            });
            assert_eq!(
                inner, first,
                "a step inside another keeps the outer reading"
            );
            first
        });
        pause();
        assert!(
            io_clock(true) > step,
            "the step ended: fresh readings again"
        );
        let unwound = std::panic::catch_unwind(|| one_clock(true, || panic!("in a step")));
        assert!(unwound.is_err());
        let a = io_clock(true);
        pause();
        assert!(io_clock(true) > a, "a step that unwound ended too");
        // With timing off nothing is held: the coarse clock is read each time.
        one_clock(false, || {
            let a = io_clock(false);
            std::thread::sleep(std::time::Duration::from_millis(30));
            assert!(io_clock(false) > a);
        });
    }
}
