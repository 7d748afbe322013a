//! [`Issuer`]: a registered participant (PostgreSQL's backend). It owns a fixed slice of
//! handles, the memory its in-flight I/Os use, its batch, and its list of in-flight I/Os.
//! It is `Send` but not `Sync`, so its hot path takes no lock.
//!
//! Rules kept here: at most one handle handed out at a time; acquiring with none free reclaims
//! finished handles, submits staged ones, then waits for the oldest in flight (so it cannot
//! deadlock); an issuer never waits on its own unsubmitted I/O; I/O memory stays parked in the
//! issuer until the I/O is complete, whatever the caller drops.
//!
//! This file is the issuer's API. Its private steps (bookkeeping, define and stage, submit,
//! reclaim) are in `lifecycle.rs`; its buffer-pool reads (`read_block`, page verification)
//! are in `bufmgr/read.rs`, because the buffer manager sits above this layer. See
//! `docs/design.md`, "The API".

use super::file::File;
use super::inline::Inline;
use super::io::{Completion, Handle, InFlight};
use super::iobuf::IoBuf;
use super::lifecycle::{Local, LocalHandle, NIL};
use super::subsystem::AioInner;
use crate::handle::atomics::STD_FENCE;
use crate::handle::error::AioError;
use crate::handle::op::Op;
use crate::handle::shared::{Drive, Shared};
use crate::handle::slot::Executor;
use crate::handle::slot::{HandleState, WaitRef};
use crate::handle::wait_event::WaitEvent;
use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The error of an issuer registered, or a handle acquired, in a child made by `fork`: the
/// subsystem's tables are shared with the parent, whose I/Os they hold.
const FORKED: &str = "this Aio was started by the parent process: a child made by fork must not \
                      use it (start another Aio there)";

/// Staged I/Os are submitted automatically once this many accumulate (PostgreSQL's
/// `PGAIO_SUBMIT_BATCH_SIZE`).
pub const SUBMIT_BATCH_SIZE: usize = 32;

/// A registered issuer. Create one per thread with [`Aio::register_issuer`](crate::Aio).
pub struct Issuer {
    pub(crate) aio: Arc<AioInner>,
    pub(super) slot: u32,
    pub(super) base: u32,
    pub(super) local: RefCell<Local>,
    /// Read streams open on this issuer (they share its handles: `bufmgr/stream.rs`).
    streams: Cell<u32>,
    _not_sync: PhantomData<Cell<()>>,
}

impl Issuer {
    pub(crate) fn register(aio: &Arc<AioInner>, name: &str) -> Result<Issuer, AioError> {
        // Its waits would be refused there, and its reads with them (found by a caller-side
        // attack: the wait's refusal reached an `unreachable!` in `Issuer::wait`).
        if crate::handle::callback::inside_completion() {
            return Err(AioError::ApiViolation(
                "Aio::register_issuer called from a handle callback or a future's waker: they \
                 run inside the completion protocol and must not start or wait for I/O",
            ));
        }
        let shared = &aio.shared;
        if shared.shutting_down.load(Ordering::Relaxed) {
            return Err(AioError::ShutDown);
        }
        if aio.owner.forked_since() {
            return Err(AioError::ApiViolation(FORKED));
        }
        let slot = shared
            .issuers
            .iter()
            .position(|s| {
                s.in_use
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(AioError::TooManyIssuers(shared.issuers.len() as u32))?
            as u32;
        let info = &shared.issuers[slot as usize];
        // The name first, then the thread id that publishes the slot to `Aio::waits` (a
        // view of a slot being registered showed a blank name and tid 0, or the last
        // owner's name: found by a caller-side attack, 2026-12-07).
        *info.name.lock() = name.to_string();
        // SAFETY: gettid has no preconditions.
        info.tid.store(unsafe { libc::gettid() }, Ordering::Release);
        info.backstop_wakes.store(0, Ordering::Relaxed);
        info.unclaimed.store(0, Ordering::Relaxed);
        info.long_waits.store(0, Ordering::Relaxed);
        aio.stats.issuer_registered(slot, shared.now_ns());
        if let Some(a) = shared.attachment_hooks() {
            a.issuer_registered(slot);
        }
        if let Err(e) = aio.method.init_issuer(shared, slot) {
            info.tid.store(0, Ordering::Relaxed);
            info.in_use.store(false, Ordering::Release);
            return Err(e);
        }
        let n = shared.per_issuer;
        let local = Local {
            idle: (0..n).rev().collect(),
            handed_out: None,
            in_batch: false,
            staged: Vec::with_capacity(SUBMIT_BATCH_SIZE),
            head: NIL,
            tail: NIL,
            in_flight: 0,
            h: (0..n).map(|_| LocalHandle::new()).collect(),
            awaited: Vec::with_capacity(n as usize),
            batch_clock: 0,
            kept: Default::default(),
        };
        Ok(Issuer {
            aio: Arc::clone(aio),
            slot,
            base: slot * n,
            local: RefCell::new(local),
            streams: Cell::new(0),
            _not_sync: PhantomData,
        })
    }

    /// Counts a read stream opened on this issuer; returns how many are open now.
    pub(crate) fn open_stream(&self) -> u32 {
        self.streams.set(self.streams.get() + 1);
        self.streams.get()
    }

    /// Counts a read stream closed.
    pub(crate) fn close_stream(&self) {
        self.streams.set(self.streams.get().saturating_sub(1));
    }

    /// True if at least `want` of this issuer's handles are idle, or held by I/Os no
    /// `InFlight` waits for (finished, detached, tickets: `acquire` reclaims or waits for
    /// them). A read stream leaves the last such handle to a read its consumer is about to
    /// wait for (`bufmgr/stream.rs`).
    pub(crate) fn has_free_handles(&self, want: usize) -> bool {
        let l = self.local_ref();
        let mut free = l.idle.len();
        let mut li = l.head;
        while free < want && li != NIL {
            if !l.h[li as usize].held {
                free += 1;
            }
            li = l.h[li as usize].next;
        }
        free >= want
    }

    /// Read streams open on this issuer.
    pub(crate) fn open_streams(&self) -> u32 {
        self.streams.get()
    }

    /// This issuer's slot number.
    #[inline]
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// I/Os submitted (or staged) and not yet reclaimed.
    pub fn in_flight(&self) -> u32 {
        let l = self.local_ref();
        l.in_flight + l.staged.len() as u32
    }

    /// Acquires a handle, waiting for one to free up if all are busy. When every handle is
    /// held by a live `InFlight`, the oldest one's result is kept for it (after waiting for
    /// it, if unfinished) and its handle is given out: a caller may hold more `InFlight`s
    /// than the issuer has handles (`io_max_concurrency`), as PostgreSQL's wait references
    /// allow.
    ///
    /// Errors: a handle is already handed out (API violation); the subsystem is shut down.
    pub fn acquire(&self) -> Result<Handle<'_>, AioError> {
        loop {
            // (Finished handles are reclaimed by `wait_for_free`, not twice.)
            if let Some(h) = self.acquire_idle(false)? {
                return Ok(h);
            }
            self.wait_for_free()?;
        }
    }

    /// Acquires a handle if one is idle now, or can be made idle without waiting: a finished
    /// I/O whose result no `InFlight` waits for (one dropped, detached, or redeemed through a
    /// ticket elsewhere) is reclaimed first, else a finished result an `InFlight` has yet to
    /// collect is kept for it ([`Issuer::acquire`]). `None` means every handle is in flight
    /// or staged.
    pub fn try_acquire(&self) -> Result<Option<Handle<'_>>, AioError> {
        self.acquire_idle(true)
    }

    /// An idle handle, if there is one (after reclaiming finished ones, if `reclaim`).
    fn acquire_idle(&self, reclaim: bool) -> Result<Option<Handle<'_>>, AioError> {
        let Ok(mut l) = self.local.try_borrow_mut() else {
            return Err(AioError::ApiViolation(REENTERED));
        };
        if l.handed_out.is_some() {
            return Err(AioError::ApiViolation(
                "only one I/O handle can be handed out at a time",
            ));
        }
        if self.aio.shared.shutting_down.load(Ordering::Relaxed) {
            return Err(AioError::ShutDown);
        }
        if self.aio.owner.forked_since() {
            return Err(AioError::ApiViolation(FORKED));
        }
        if l.staged.len() >= SUBMIT_BATCH_SIZE {
            self.submit_staged_locked(&mut l);
        }
        // I/Os redeemed through tickets (or detached) finished since the last look: reclaimed
        // now, not when the handles run out, so that their statistics count and their files
        // close (a log writer that opens, writes through a ticket and drops one segment after
        // another pinned up to a handle's worth of them, deleted ones too).
        if self.info().unclaimed.load(Ordering::Relaxed) != 0
            && self.info().unclaimed.swap(0, Ordering::Acquire) != 0
        {
            self.reclaim_finished_locked(&mut l);
        }
        if reclaim && l.idle.is_empty() {
            // Handles whose results nobody collects are reclaimed lazily, by a wait for a
            // free one (`acquire`); a caller that never waits must not find them gone for good.
            drop(l);
            self.aio.method.poll(&self.aio.shared, self.slot);
            if self.reclaim_completed() == 0 {
                self.keep_finished_held();
            }
            l = self.local_mut();
        }
        let Some(li) = l.idle.pop() else {
            return Ok(None);
        };
        self.aio
            .shared
            .slot(self.base + li)
            .set_state(HandleState::Idle, HandleState::HandedOut);
        l.handed_out = Some(li);
        Ok(Some(Handle::new(self, li)))
    }

    /// Counts `n` readahead-advice events of kind `e` in this issuer's statistics (for the
    /// buffer manager's read streams, which do not reach into the statistics themselves).
    pub(crate) fn count_advice(&self, e: crate::handle::advice_budget::AdviceEvent, n: u64) {
        self.aio.stats.record_advice(self.slot, e, n);
    }

    /// Reclaims every finished handle whose result nobody waits for (`InFlight`s dropped,
    /// tickets redeemed elsewhere, detached I/Os), counting them in the statistics; returns
    /// how many. Never blocks: under io_uring it first reaps the completions the ring holds
    /// now, and under `sim` it completes the next I/O due, so that an issuer with nothing
    /// else to do gets its handles back by calling this alone.
    pub fn reclaim_finished(&self) -> usize {
        self.aio.method.poll(&self.aio.shared, self.slot);
        self.reclaim_completed()
    }

    /// Reclaims what [`Issuer::reclaim_finished`] does, without asking the method to reap.
    pub(crate) fn reclaim_completed(&self) -> usize {
        let mut l = self.local_mut();
        self.reclaim_finished_locked(&mut l)
    }

    fn reclaim_finished_locked(&self, l: &mut Local) -> usize {
        let mut n = 0;
        let mut li = l.head;
        while li != NIL {
            let next = l.h[li as usize].next;
            if !l.h[li as usize].held
                && self.aio.shared.slot(self.base + li).state() == HandleState::CompletedShared
            {
                self.reclaim_locked(l, li);
                n += 1;
            }
            li = next;
        }
        n
    }

    /// Enters batch mode: started I/Os accumulate and are submitted together (one system call
    /// under io_uring) at [`Issuer::end_batch`], at [`SUBMIT_BATCH_SIZE`], or before any wait.
    /// An I/O the method runs in the issuer anyway is done when it is started, in a batch
    /// too: every I/O under `sync`, and under `io_uring` a buffered write to a file system that
    /// cannot write without blocking (ext4; its executor in the view is `issuer`).
    ///
    /// A batch orders nothing: its I/Os run at once and complete in any order, like any
    /// I/Os in flight together. A sync started through a handle in the batch does not cover
    /// the batch's writes; [`Issuer::fsync`] and [`Issuer::fdatasync`] do (they wait for
    /// the issuer's writes on the file first).
    #[inline]
    pub fn begin_batch(&self) -> Result<(), AioError> {
        let mut l = self.local_mut();
        if l.in_batch {
            return Err(AioError::ApiViolation(
                "starting batch while batch already in progress",
            ));
        }
        l.in_batch = true;
        Ok(())
    }

    /// Leaves batch mode, submitting what is staged.
    pub fn end_batch(&self) {
        let mut l = self.local_mut();
        l.in_batch = false;
        self.submit_staged_locked(&mut l);
    }

    /// True while in batch mode.
    #[inline]
    pub fn in_batch(&self) -> bool {
        self.local_ref().in_batch
    }

    /// Number of staged, unsubmitted I/Os.
    pub fn staged(&self) -> usize {
        self.local_ref().staged.len()
    }

    /// Submits every staged I/O now.
    pub fn submit_staged(&self) {
        let mut l = self.local_mut();
        self.submit_staged_locked(&mut l);
    }

    /// Waits for an I/O this issuer started and takes its result and memory back.
    ///
    /// An `InFlight` of another issuer (of the same thread) is redeemed through its own
    /// issuer: a handle is always reclaimed by the issuer that owns it.
    pub fn wait(&self, io: InFlight<'_>) -> Completion {
        if !std::ptr::eq(io.owner(), self) {
            return io.owner().wait(io);
        }
        let (li, generation) = io.into_parts();
        let idx = self.base + li;
        if self.aio.shared.slot(idx).generation.load(Ordering::Relaxed) != generation {
            return self
                .take_kept(li, generation)
                .expect("a held handle is recycled only once its result is kept");
        }
        self.submit_if_staged(idx);
        if !self.aio.shared.slot(idx).state().is_complete() {
            if let Err(e) = self.wait_as(WaitEvent::AioIoCompletion, idx, generation) {
                unreachable!("a held handle is not recycled before it is redeemed: {e}");
            }
        }
        let mut l = self.local_mut();
        Completion::from_reclaimed(self.reclaim_locked(&mut l, li))
    }

    /// Takes the result of `io` if it is complete; hands `io` back otherwise. Never blocks.
    pub fn try_wait<'a>(&'a self, io: InFlight<'a>) -> Result<Completion, InFlight<'a>> {
        if !std::ptr::eq(io.owner(), self) {
            return io.owner().try_wait(io);
        }
        if !io.check_done() {
            return Err(io);
        }
        Ok(self.wait(io))
    }

    /// Waits on a wait reference as the issuer: submits staged I/O first, then waits, then
    /// reclaims whatever finished.
    pub fn wait_ref(&self, wref: WaitRef) -> Result<(), AioError> {
        if self.local.try_borrow_mut().is_err() {
            return Err(AioError::ApiViolation(REENTERED));
        }
        if wref.subsystem != self.aio.shared.id {
            return Err(AioError::ApiViolation(
                "the wait reference belongs to another AIO subsystem",
            ));
        }
        let s = self.aio.shared.slot(wref.index);
        let own = wref.index.wrapping_sub(self.base) < self.aio.shared.per_issuer;
        if own
            && s.generation.load(Ordering::Acquire) == wref.generation
            && matches!(s.state(), HandleState::HandedOut | HandleState::Defined)
        {
            return Err(AioError::ApiViolation(
                "waiting on an I/O of this issuer that it has not started",
            ));
        }
        self.submit_staged();
        self.aio.wait_done(wref.index, wref.generation)?;
        self.reclaim_completed();
        Ok(())
    }

    /// Submits staged I/Os, then blocks until at least one of this issuer's I/Os that an
    /// [`InFlight`] will redeem is complete (returns at once if one already is, or if none is
    /// in flight; I/Os dropped in flight are reclaimed as they finish and do not count).
    /// Redeem finished ones with [`InFlight::is_done`] and [`Issuer::wait`]. Under io_uring
    /// the issuer reaps its ring; under the worker method, rather than sleep, it runs one of
    /// its newest I/Os that no worker has picked up yet itself (executor `waiter`).
    pub fn wait_any(&self) {
        self.wait_for_completions(1);
    }

    /// Like [`Issuer::wait_any`], but returns only once `n` of the in-flight I/Os (or all of
    /// them, if fewer) are complete, counting only those an `InFlight` will redeem. Waking
    /// once per `n` completions instead of once per completion is what keeps a deep queue
    /// cheap to drive.
    ///
    /// The wait watches the handles, not a count of events: each round it looks at which
    /// of its I/Os are complete, whoever completed them (a worker, a reaper of its ring, a
    /// thread that waited on one and ran it), lets the method move them on from here
    /// (`IoMethod::drive_many`), and sleeps only on something every completion of the rest
    /// wakes (its bell, or the kernel while only completions there can finish them).
    pub fn wait_for_completions(&self, n: u32) {
        let shared = &self.aio.shared;
        let info = self.info();
        // Staged I/Os go to the method together with the wait (one system call on io_uring).
        let (batch, mut staged) = self.prepare_staged(&mut self.local_mut());
        loop {
            let seen = info.bell.seen();
            // I/Os dropped in flight are reclaimed as they finish, and never count: the
            // caller waits for the ones it will redeem.
            self.reclaim_completed();
            let mut awaited = std::mem::take(&mut self.local_mut().awaited);
            let (complete, total) = self.collect_awaited(&mut awaited);
            let want = n.max(1).min(total);
            let handles = &batch[..std::mem::take(&mut staged)];
            if complete >= want {
                if !handles.is_empty() {
                    self.aio.method.submit(shared, self.slot, handles);
                }
                self.local_mut().awaited = awaited;
                return;
            }
            let need = want - complete;
            if self.run_lone_awaited(handles, total) {
                self.local_mut().awaited = awaited;
                continue;
            }
            info.begin_wait(
                WaitEvent::AioIoCompletions,
                u64::from(need),
                shared.io_clock_ns(),
            );
            let drive = self
                .aio
                .method
                .drive_many(shared, self.slot, handles, &awaited, need);
            // The method may have completed some here, on this thread, which rings no bell:
            // sleep only for what is still missing once it is done.
            let left = need.saturating_sub(count_complete(shared, &awaited));
            if drive == Drive::Sleep && left > 0 {
                let done = || count_complete(shared, &awaited) >= need;
                let slept = info.bell.await_rings(seen, left, STD_FENCE, done);
                shared.note_sleep(self.slot, slept);
            }
            info.end_wait();
            self.local_mut().awaited = awaited;
        }
    }

    /// A lone I/O, staged, with nothing else of ours in flight: under a method that runs
    /// awaited I/O here, run it rather than hand it over and sleep until it is done
    /// (`IoMethod::runs_awaited_io_here`). True if it ran.
    fn run_lone_awaited(&self, handles: &[u32], total: u32) -> bool {
        let [i] = handles else {
            return false;
        };
        // `total` counts the I/Os an `InFlight` will redeem: this one must be it (a detached
        // op staged beside an earlier read is not what the caller awaits).
        let awaited = total == 1 && self.local_ref().h[(*i - self.base) as usize].held;
        if !awaited || !self.aio.method.runs_awaited_io_here() {
            return false;
        }
        let shared = &self.aio.shared;
        if shared.claim_submit(*i) {
            shared.run_here(*i, Executor::Issuer);
        }
        true
    }

    /// Fills `awaited` with this issuer's in-flight I/Os that an `InFlight` will redeem and
    /// that are not complete, as (handle, generation), oldest first; returns (complete,
    /// total) over the ones an `InFlight` will redeem (ones dropped in flight are not
    /// counted: reclaim them first, or a finished one counts as progress for ever).
    fn collect_awaited(&self, awaited: &mut Vec<(u32, u64)>) -> (u32, u32) {
        awaited.clear();
        let l = self.local_ref();
        let mut li = l.head;
        // Kept results are complete ones an `InFlight` will redeem.
        let kept = l.kept.len() as u32;
        let (mut complete, mut total) = (kept, kept);
        while li != NIL {
            if l.h[li as usize].held {
                total += 1;
                let s = self.aio.shared.slot(self.base + li);
                if s.state().is_complete() {
                    complete += 1;
                } else {
                    awaited.push((self.base + li, s.generation.load(Ordering::Relaxed)));
                }
            }
            li = l.h[li as usize].next;
        }
        (complete, total)
    }

    /// Closes `file` for this issuer: submits staged I/Os, waits for this issuer's in-flight
    /// I/Os on it, then drops the reference. (Other issuers' I/Os keep the descriptor open
    /// until they complete; it is never closed under an I/O.)
    pub fn close(&self, file: File) {
        self.wait_for_own_ios_on(&file, false);
        drop(file);
    }

    /// Submits staged I/Os and waits for this issuer's in-flight I/Os on `file` (with
    /// `changing`, only those that change it), leaving their results to their owners.
    fn wait_for_own_ios_on(&self, file: &File, changing: bool) {
        if !Arc::ptr_eq(&file.aio, &self.aio) {
            return; // another subsystem's file: none of our I/Os is on it
        }
        self.submit_staged();
        loop {
            let target = self.first_unfinished_on(file.slot, changing);
            if target == NIL {
                break;
            }
            let idx = self.base + target;
            let g = self.aio.shared.slot(idx).generation.load(Ordering::Relaxed);
            if self.wait_as(WaitEvent::AioIoCompletion, idx, g).is_err() {
                break; // a wait refused (inside the completion protocol): nothing to wait on
            }
        }
        self.reclaim_completed();
    }

    /// Reads `buf.len()` bytes at `offset` and waits, continuing short reads; a read that
    /// reaches end of file first is an error.
    pub fn read_exact_at(&self, file: &File, offset: u64, buf: IoBuf) -> Result<IoBuf, AioError> {
        let io = self.acquire()?.read(file, offset, buf);
        self.finish_transfer(file, io)
    }

    /// Writes all of `buf` at `offset` and waits, continuing short writes.
    pub fn write_all_at(&self, file: &File, offset: u64, buf: IoBuf) -> Result<IoBuf, AioError> {
        let io = self.acquire()?.write(file, offset, buf);
        self.finish_transfer(file, io)
    }

    /// Waits for `io`, resuming it while it is short. A failure part-way is reported for the
    /// whole request, as `read_exact_into` and `write_all_from` do, not for its resumed
    /// remainder: `could not read 8192 bytes at offset 0 …: read only 100 of 8192 bytes` at
    /// end of file, `could not write 65536 bytes at offset 0 …: No space left on device
    /// (errno 28); 61440 of the 65536 bytes were written` on a full disk.
    fn finish_transfer<'a>(&'a self, file: &File, mut io: InFlight<'a>) -> Result<IoBuf, AioError> {
        let mut whole = None; // the first part's (offset, length): the caller's request
        loop {
            let c = self.wait(io);
            let (offset, length) = *whole.get_or_insert((c.offset(), c.length()));
            if let Some(e) = c.failure() {
                // (At end of file too: the part that met it moved nothing, so what was
                // read is what came before it.)
                let e = e.clone();
                let op = e.op;
                return Err(e.for_request(op, offset, length).into());
            }
            if !c.is_partial() {
                return Ok(c.into_buf());
            }
            io = c.resume(self.acquire()?, file);
        }
    }

    /// The name this issuer was registered under (shown in the aios view and statistics).
    pub fn name(&self) -> String {
        self.aio.shared.issuers[self.slot as usize]
            .name
            .lock()
            .clone()
    }

    /// `fsync` and wait. It first waits for this issuer's I/Os in flight that change `file`
    /// — writes, truncations and allocations started through handles on this `File` or its
    /// clones, staged in an open batch too (they are submitted) — so that the sync covers
    /// them: "write the batch, then sync" works as written. A sync covers only changes
    /// complete before it starts, as `fsync(2)` does: writes through another `File` opened
    /// on the same path, and other issuers' writes, are the caller's to wait for. A sync started
    /// through a handle (`Handle::fsync`) is not ordered after anything: I/Os in flight
    /// together run in any order, a batch's too.
    ///
    /// Like slice I/O, this and the three helpers below run the call in this thread
    /// whenever they can (an idle handle, no fault rules, not on the simulated disk): the
    /// caller waits either way, and a hand-off (to a worker, or to io_uring's kernel
    /// workers, which run every sync, truncate and allocate) would only add its latency.
    /// The I/O shows in the aios view while it runs; failures read as on the full path.
    pub fn fsync(&self, file: &File) -> Result<(), AioError> {
        self.wait_for_own_ios_on(file, true);
        self.on_file_and_wait(file, Op::Fsync, 0, 0)
    }

    /// `fdatasync` and wait, after this issuer's I/Os in flight that change `file` (see
    /// [`Issuer::fsync`]).
    pub fn fdatasync(&self, file: &File) -> Result<(), AioError> {
        self.wait_for_own_ios_on(file, true);
        self.on_file_and_wait(file, Op::Fdatasync, 0, 0)
    }

    /// `ftruncate` to `len` bytes and wait (see [`Issuer::fsync`]).
    pub fn ftruncate(&self, file: &File, len: u64) -> Result<(), AioError> {
        self.on_file_and_wait(file, Op::Ftruncate, 0, len)
    }

    /// `fallocate` of `len` bytes at `offset` and wait (see [`Issuer::fsync`]).
    pub fn fallocate(&self, file: &File, offset: u64, len: u64) -> Result<(), AioError> {
        self.on_file_and_wait(file, Op::Fallocate, offset, len)
    }

    /// One of the four helpers above: inline if it can, else the full path.
    fn on_file_and_wait(&self, file: &File, op: Op, offset: u64, len: u64) -> Result<(), AioError> {
        match self.run_inline_on_file(file, op, offset, len) {
            Ok(()) => return Ok(()),
            Err(Inline::Failed(e)) => return Err((*e).into()),
            Err(Inline::Declined) => {}
        }
        let h = self.acquire()?;
        let io = match op {
            Op::Fsync => h.fsync(file),
            Op::Fdatasync => h.fdatasync(file),
            Op::Ftruncate => h.ftruncate(file, len),
            _ => h.fallocate(file, offset, len),
        };
        Ok(self.wait(io).check()?)
    }

    /// `unlink` and wait.
    pub fn unlink(&self, path: &std::path::Path) -> Result<(), AioError> {
        let io = self.acquire()?.unlink(c_path(path)?);
        Ok(self.wait(io).check()?)
    }

    /// `rename` `from` to `to` (replacing `to`) and wait. Durable once the directories
    /// involved are synced (open the directory, `fsync` it), as with `rename(2)`.
    pub fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> Result<(), AioError> {
        let io = self.acquire()?.rename(&c_path(from)?, &c_path(to)?);
        Ok(self.wait(io).check()?)
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        // In a child made by fork the handle table and the issuer's slot are the parent's
        // (a shared mapping): waiting for and reclaiming them there recycled the parent's
        // handles under its own waits (found by a caller-side attack). The child leaves them
        // alone, and leaks its copy of the bookkeeping.
        if self.aio.owner.forked_since() {
            return;
        }
        if super::subsystem::must_not_wait_here() && self.retire_elsewhere() {
            return;
        }
        let leaked = self.local.get_mut().handed_out;
        if let Some(li) = leaked {
            tracing::warn!(
                issuer = self.slot,
                "leaked AIO handle: released at issuer exit"
            );
            self.release(li);
        }
        if self.local.get_mut().in_batch {
            tracing::warn!(
                issuer = self.slot,
                "open AIO batch at issuer exit: submitting its staged I/Os"
            );
            self.local.get_mut().in_batch = false;
        }
        self.submit_staged();
        loop {
            let head = self.local.get_mut().head;
            if head == NIL {
                break;
            }
            let idx = self.base + head;
            let g = self.aio.shared.slot(idx).generation.load(Ordering::Relaxed);
            let _ = self.wait_as(WaitEvent::AioIoCompletion, idx, g);
            let mut l = self.local_mut();
            l.h[head as usize].held = false;
            self.reclaim_locked(&mut l, head);
        }
        let info = &self.aio.shared.issuers[self.slot as usize];
        info.end_wait();
        info.tid.store(0, Ordering::Relaxed);
        info.in_use.store(false, Ordering::Release);
    }
}

impl Issuer {
    /// Moves this drop, with the issuer's bookkeeping, to a thread of its own (true: nothing
    /// is left for this drop to do), if it has I/O to wait for. Inside a future's waker — it
    /// runs on the thread completing its I/O, before that I/O counts as complete — or on a
    /// library thread, the drop would wait for the very I/O its thread is completing (found
    /// by a caller-side attack, 2026-12-07: the waker's thread hung, and the subsystem with
    /// it).
    fn retire_elsewhere(&mut self) -> bool {
        let l = self.local.get_mut();
        if l.head == NIL && l.staged.is_empty() && l.handed_out.is_none() {
            return false;
        }
        let moved = Issuer {
            aio: Arc::clone(&self.aio),
            slot: self.slot,
            base: self.base,
            local: RefCell::new(std::mem::replace(l, Local::moved_out())),
            streams: Cell::new(0),
            _not_sync: PhantomData,
        };
        if let Err((moved, e)) = super::subsystem::drop_on_retire_thread(moved) {
            // Dropped here it would hang this thread: leaked instead (its memory, its slot).
            tracing::error!(
                issuer = self.slot,
                "could not start a thread to finish an issuer's drop ({e}): the issuer is leaked"
            );
            std::mem::forget(moved);
        }
        true
    }
}

/// How many of `awaited` are complete (or recycled: long complete).
fn count_complete(shared: &Shared, awaited: &[(u32, u64)]) -> u32 {
    awaited
        .iter()
        .filter(|&&(i, g)| {
            let s = shared.slot(i);
            s.generation.load(Ordering::Acquire) != g || s.state().is_complete()
        })
        .count() as u32
}

/// `path` as a C string (a path holding a NUL byte is refused).
fn c_path(path: &std::path::Path) -> Result<CString, AioError> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| AioError::ApiViolation("path contains a NUL byte"))
}

/// An issuer used inside one of its own calls: a handle callback or a future's waker run on
/// its thread by that call (a completion it drives) reached it again.
const REENTERED: &str = "an issuer was used inside one of its own calls (from a handle callback or \
     a future's waker it ran): callbacks and wakers must not use the issuer they run in";

impl Issuer {
    /// The issuer's own state, for one call. A callback or a waker the call runs that uses
    /// the same issuer again is a caller's bug: named here, not by `RefCell` (found by a
    /// caller-side attack: `already borrowed` from a waker run inside `end_batch`).
    #[inline]
    pub(super) fn local_mut(&self) -> std::cell::RefMut<'_, Local> {
        match self.local.try_borrow_mut() {
            Ok(l) => l,
            Err(_) => reentered(),
        }
    }

    /// As [`Issuer::local_mut`], shared.
    #[inline]
    pub(super) fn local_ref(&self) -> std::cell::Ref<'_, Local> {
        match self.local.try_borrow() {
            Ok(l) => l,
            Err(_) => reentered(),
        }
    }
}

#[cold]
#[inline(never)]
fn reentered() -> ! {
    panic!("{REENTERED}")
}
