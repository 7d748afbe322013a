//! `Issuer`'s handle lifecycle (private methods of `Issuer`, kept apart so `issuer.rs` is the API).
//!
//! What happens to a handle inside its issuer, behind the API in `issuer.rs`: the issuer's
//! private bookkeeping (idle stack, staged batch, in-flight list, parked memory), defining
//! and staging an I/O, handing staged ones to the method, waiting with a wait event
//! published, and reclaiming a finished handle (local callbacks, statistics, the memory
//! back). These are private methods of [`Issuer`]; the API's file stays short enough to read
//! as a list of what an issuer can do. See `docs/design.md`, "The API".

use super::io::{Completion, IoMemory};
use super::issuer::{Issuer, SUBMIT_BATCH_SIZE};
use super::ticket::TicketCell;
use crate::aio::file::File;
use crate::handle::callback::IoContext;
use crate::handle::error::{AioError, IoError};
use crate::handle::files::NO_FILE;
use crate::handle::notice::Notice;
use crate::handle::op::{HandleFlags, Op};
use crate::handle::result::{ERROR_DATA_PANICKED, IoResult, Status};
use crate::handle::shared::checked;
use crate::handle::slot::{Executor, HandleState, WaitRef};
use crate::handle::wait_event::WaitEvent;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

pub(super) const NIL: u32 = u32::MAX;

/// Issuer-private state of one handle.
pub(super) struct LocalHandle {
    /// An `InFlight` value exists for it: only its owner may reclaim it.
    pub(super) held: bool,
    pub(super) memory: IoMemory,
    pub(super) skip: u32,
    pub(super) file: u32,
    /// The path of a `File` of another subsystem the I/O was asked on (it fails, and its
    /// message names the file).
    pub(super) foreign: Option<Arc<std::path::Path>>,
    /// The I/O's ticket cell (memory and notice), once it got a ticket or was detached with a
    /// notice; kept until the handle is recycled.
    pub(super) notice: Option<Arc<TicketCell>>,
    pub(super) prev: u32,
    pub(super) next: u32,
}

impl LocalHandle {
    pub(super) fn new() -> LocalHandle {
        LocalHandle {
            held: false,
            memory: IoMemory::None,
            skip: 0,
            file: NO_FILE,
            foreign: None,
            notice: None,
            prev: NIL,
            next: NIL,
        }
    }
}

impl Local {
    /// Frees the memory (and ticket cells) of every I/O left here, which the caller knows
    /// are all done: their subsystem's drop waited for them (`any_thread.rs`).
    pub(super) fn free_memory_of_done_ios(&mut self) {
        for h in &mut self.h {
            drop(std::mem::take(&mut h.memory));
            drop(h.notice.take());
        }
    }
}

impl Drop for Local {
    /// Memory still parked here when the bookkeeping goes belongs to an I/O that was never
    /// reclaimed: the issuer's drop was cut short (a panic). The kernel or a worker may still
    /// be writing into it, so it is leaked, never freed (the buffer-ownership rule).
    fn drop(&mut self) {
        let mut leaked = 0;
        for h in &mut self.h {
            match std::mem::take(&mut h.memory) {
                IoMemory::None => {}
                m => {
                    std::mem::forget(m);
                    leaked += 1;
                }
            }
            // A ticket's memory lives in its cell: keep the cell alive for ever too.
            if let Some(cell) = h.notice.take() {
                std::mem::forget(cell);
                leaked += 1;
            }
        }
        if leaked > 0 {
            tracing::error!(
                leaked,
                "an issuer went away with I/Os not reclaimed; their memory is leaked, not freed"
            );
        }
    }
}

pub(super) struct Local {
    pub(super) idle: Vec<u32>,
    pub(super) handed_out: Option<u32>,
    pub(super) in_batch: bool,
    pub(super) staged: Vec<u32>,
    pub(super) head: u32,
    pub(super) tail: u32,
    pub(super) in_flight: u32,
    pub(super) h: Vec<LocalHandle>,
    /// Scratch for `wait_for_completions`: the I/Os it waits for (sized at registration, so
    /// waiting allocates nothing).
    pub(super) awaited: Vec<(u32, u64)>,
    /// The staging time of the batch being staged (see `Issuer::staging_clock`).
    pub(super) batch_clock: u64,
    /// Results reclaimed before their `InFlight` came for them, so that their handles could
    /// start other I/Os (`Issuer::keep_held`), by (handle, generation): a caller may hold
    /// thousands and redeem them in any order. A wait for a free handle keeps one when
    /// every handle is held (the oldest, after waiting for it); the handle goes back to the
    /// idle stack with a new generation, and the `InFlight` naming the old one finds its
    /// completion here — PostgreSQL's wait reference, with the result in the owner's return
    /// slot.
    pub(super) kept: HashMap<(u32, u64), Completion>,
}

impl Local {
    /// What an issuer keeps once its bookkeeping has moved to another thread
    /// (`Issuer::retire_elsewhere`): nothing.
    pub(super) fn moved_out() -> Local {
        Local {
            idle: Vec::new(),
            handed_out: None,
            in_batch: false,
            staged: Vec::new(),
            head: NIL,
            tail: NIL,
            in_flight: 0,
            h: Vec::new(),
            awaited: Vec::new(),
            batch_clock: 0,
            kept: HashMap::new(),
        }
    }

    pub(super) fn link(&mut self, li: u32) {
        self.h[li as usize].prev = self.tail;
        self.h[li as usize].next = NIL;
        if self.tail == NIL {
            self.head = li;
        } else {
            self.h[self.tail as usize].next = li;
        }
        self.tail = li;
        self.in_flight += 1;
    }

    pub(super) fn unlink(&mut self, li: u32) {
        let (p, n) = (self.h[li as usize].prev, self.h[li as usize].next);
        if p == NIL {
            self.head = n;
        } else {
            self.h[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.h[n as usize].prev = p;
        }
        self.in_flight -= 1;
    }
}

/// The completion kept for the I/O `(li, generation)` names, taken out of `l.kept` (whose
/// memory goes once a burst of kept results is all redeemed).
fn take_kept(l: &mut Local, li: u32, generation: u64) -> Option<Completion> {
    let c = l.kept.remove(&(li, generation))?;
    if l.kept.is_empty() && l.kept.capacity() > KEPT_RETAINED {
        l.kept.shrink_to(KEPT_RETAINED);
    }
    Some(c)
}

/// Kept results' room retained once none is left.
const KEPT_RETAINED: usize = 64;

/// What a reclaim hands back.
pub(crate) struct Reclaimed {
    pub result: IoResult,
    pub op: Op,
    pub offset: u64,
    pub length: u64,
    pub skip: u32,
    pub memory: IoMemory,
    /// Boxed: a reclaim and its `Completion` move in a few words, not an `IoError`'s ~130 bytes.
    pub error: Option<Box<IoError>>,
}

/// What an I/O start needs besides the handle.
pub(crate) struct Definition<'f> {
    pub op: Op,
    pub file: Option<&'f File>,
    pub offset: u64,
    /// Length for non-data ops; data ops take it from the memory.
    pub length: u64,
    pub memory: IoMemory,
    pub skip: u32,
    pub raw_iov: Option<&'f [libc::iovec]>,
}

impl Issuer {
    pub(super) fn info(&self) -> &crate::handle::shared::IssuerSlot {
        &self.aio.shared.issuers[self.slot as usize]
    }

    /// Frees at least one handle: reclaims finished ones, or keeps a finished result its
    /// `InFlight` has yet to collect (`Local::kept`); else submits staged ones and waits for the
    /// oldest in-flight I/O no `InFlight` waits for, or, with every handle held by one, for
    /// the oldest, whose result is then kept.
    pub(super) fn wait_for_free(&self) -> Result<(), AioError> {
        self.aio.method.poll(&self.aio.shared, self.slot);
        if self.reclaim_completed() > 0 || self.keep_finished_held() {
            return Ok(());
        }
        let (oldest, held) = {
            let mut l = self.local_mut();
            self.submit_staged_locked(&mut l);
            let mut li = l.head;
            while li != NIL && l.h[li as usize].held {
                li = l.h[li as usize].next;
            }
            if li == NIL {
                (l.head, true)
            } else {
                (li, false)
            }
        };
        if oldest == NIL {
            // No handle idle and none in flight: the only other place is the caller's hand.
            return Err(AioError::ApiViolation(
                "only one I/O handle can be handed out at a time",
            ));
        }
        let idx = self.base + oldest;
        let generation = self.aio.shared.slot(idx).generation.load(Ordering::Relaxed);
        self.wait_as(WaitEvent::AioHandleFree, idx, generation)?;
        let mut l = self.local_mut();
        if held {
            self.keep_held(&mut l, oldest);
        } else {
            self.reclaim_locked(&mut l, oldest);
        }
        Ok(())
    }

    /// Keeps the oldest finished result an `InFlight` has yet to collect, if there is one,
    /// freeing its handle without waiting; true if it did.
    pub(super) fn keep_finished_held(&self) -> bool {
        let mut l = self.local_mut();
        let mut li = l.head;
        while li != NIL {
            if l.h[li as usize].held
                && self.aio.shared.slot(self.base + li).state() == HandleState::CompletedShared
            {
                self.keep_held(&mut l, li);
                return true;
            }
            li = l.h[li as usize].next;
        }
        false
    }

    /// Reclaims complete handle `li`, held by an `InFlight`, into `Local::kept`, where that
    /// `InFlight` finds its completion; the handle is idle again.
    fn keep_held(&self, l: &mut Local, li: u32) {
        let s = self.aio.shared.slot(self.base + li);
        let generation = s.generation.load(Ordering::Relaxed);
        let completion = Completion::from_reclaimed(self.reclaim_locked(l, li));
        l.kept.insert((li, generation), completion);
    }

    /// The kept completion of the I/O `(li, generation)` names, taken out of the keeping.
    pub(super) fn take_kept(&self, li: u32, generation: u64) -> Option<Completion> {
        let mut l = self.local_mut();
        take_kept(&mut l, li, generation)
    }

    #[inline]
    pub(super) fn submit_staged_locked(&self, l: &mut Local) {
        // Nothing staged (a batch of buffer hits): no batch array to fill, no method call.
        if l.staged.is_empty() {
            return;
        }
        let (batch, n) = self.prepare_staged(l);
        if n > 0 {
            self.aio
                .method
                .submit(&self.aio.shared, self.slot, &batch[..n]);
        }
    }

    /// Moves every staged handle onto the in-flight list; returns their indices for the
    /// method, which claims them.
    pub(super) fn prepare_staged(&self, l: &mut Local) -> ([u32; SUBMIT_BATCH_SIZE], usize) {
        let mut batch = [0u32; SUBMIT_BATCH_SIZE];
        let n = l.staged.len();
        let mut staged = std::mem::take(&mut l.staged);
        for (entry, &li) in batch.iter_mut().zip(&staged) {
            // Still STAGED: the method claims each (STAGED → SUBMITTED) as it hands it over,
            // unless a waiter found it first and ran it.
            l.link(li);
            *entry = self.base + li;
        }
        staged.clear();
        l.staged = staged;
        (batch, n)
    }

    /// Before the issuer blocks on handle `idx`: submits what is staged. Under a method that
    /// [runs awaited I/O here](crate::method::IoMethod::runs_awaited_io_here), `idx` itself,
    /// if still staged, is not handed over but run on this thread once the others are on
    /// their way: the issuer would only sleep until an executor had done it.
    pub(super) fn submit_if_staged(&self, idx: u32) {
        let shared = &self.aio.shared;
        if !matches!(
            shared.slot(idx).state(),
            HandleState::Defined | HandleState::Staged
        ) {
            return;
        }
        let mut l = self.local_mut();
        let li = idx - self.base;
        let mine = self.aio.method.runs_awaited_io_here()
            && l.staged
                .iter()
                .position(|&s| s == li)
                .map(|k| l.staged.remove(k))
                .is_some();
        if mine {
            l.link(li);
        }
        self.submit_staged_locked(&mut l);
        drop(l);
        if mine && shared.claim_submit(idx) {
            shared.run_here(idx, Executor::Issuer);
        }
    }

    /// Waits for another reader's I/O on a buffer (wait event `BufferIo`), after submitting
    /// this issuer's staged I/Os so nobody waits on them.
    pub(crate) fn wait_for_buffer_io(&self, wref: WaitRef) -> Result<(), AioError> {
        self.submit_staged();
        self.wait_as(WaitEvent::BufferIo, wref.index, wref.generation)?;
        self.reclaim_completed();
        Ok(())
    }

    /// Waits for I/O `(idx, generation)` with `event` published as this issuer's wait event.
    pub(super) fn wait_as(
        &self,
        event: WaitEvent,
        idx: u32,
        generation: u64,
    ) -> Result<(), AioError> {
        let info = self.info();
        info.begin_wait(event, u64::from(idx), self.aio.shared.io_clock_ns());
        let waited = self.aio.wait_done(idx, generation);
        info.end_wait();
        waited
    }

    /// This issuer's oldest in-flight, unfinished I/O on file slot `file` (NIL if none);
    /// with `changing`, only one that changes the file (a write, a truncation, an
    /// allocation).
    pub(super) fn first_unfinished_on(&self, file: u32, changing: bool) -> u32 {
        let l = self.local_ref();
        let mut li = l.head;
        while li != NIL {
            let s = self.aio.shared.slot(self.base + li);
            let done = s.state().is_complete();
            if l.h[li as usize].file == file && !done && (!changing || s.op().changes_file()) {
                return li;
            }
            li = l.h[li as usize].next;
        }
        NIL
    }

    /// Gives started I/O `(li, generation)` (held by an `InFlight` being converted) a
    /// notice: its memory moves into a shared cell, the notice is attached in the slot
    /// (delivered here if the I/O is complete already), and the handle is no longer held —
    /// recycled like a dropped I/O once complete, its result having gone to the notice. A
    /// kept result (`Local::kept`) is delivered to the new cell at once.
    pub(crate) fn attach_notice(
        &self,
        li: u32,
        generation: u64,
        notice: Notice,
    ) -> Arc<TicketCell> {
        if let Some(c) = self.take_kept(li, generation) {
            let (outcome, memory, skip) = c.into_outcome();
            let cell = Arc::new(TicketCell {
                notice,
                memory: parking_lot::Mutex::new(memory),
                skip,
            });
            cell.notice.deliver_outcome(&self.aio.shared, outcome);
            return cell;
        }
        let mut l = self.local_mut();
        let lh = &mut l.h[li as usize];
        let cell = Arc::new(TicketCell {
            notice,
            memory: parking_lot::Mutex::new(std::mem::take(&mut lh.memory)),
            skip: lh.skip,
        });
        lh.held = false;
        lh.notice = Some(Arc::clone(&cell));
        let foreign = lh.foreign.clone();
        // SAFETY: the issuer keeps the cell (and so the notice) in `lh.notice` until it
        // recycles the handle.
        unsafe {
            self.aio
                .shared
                .attach_notice(self.base + li, &cell.notice, foreign.as_ref())
        };
        if cell.notice.is_delivered() {
            // Done before the notice came (on the issuer's own thread, as `sync` and a ring
            // reaped here run it): no completer will count it for the next `acquire`.
            self.aio.shared.count_unclaimed(self.slot);
        }
        cell
    }

    // ---- used by Handle -------------------------------------------------------------------

    pub(crate) fn handle_index(&self, li: u32) -> u32 {
        self.base + li
    }

    /// Gives back handed-out handle `li` unused. Like a reclaim, it recycles the slot: a new
    /// generation (so a wait reference taken from the handle is stale, done at once, never
    /// attached to the slot's next I/O) and cleared fields (a callback or flag set on it does
    /// not carry over).
    pub(crate) fn release(&self, li: u32) {
        let mut l = self.local_mut();
        debug_assert_eq!(l.handed_out, Some(li));
        l.handed_out = None;
        let s = self.aio.shared.slot(self.base + li);
        s.next_generation();
        s.set_state(HandleState::HandedOut, HandleState::Idle);
        s.reset();
        l.idle.push(li);
    }

    /// The `InFlight` of I/O `(li, generation)` goes unredeemed: the handle is recycled
    /// once the I/O is done; a kept result goes now, a failure in it logged.
    pub(crate) fn detach(&self, li: u32, generation: u64) {
        if self.aio.owner.forked_since() {
            return; // the handle is the parent's (see `Issuer::drop`)
        }
        let mut l = self.local_mut();
        if !l.kept.is_empty()
            && let Some(c) = take_kept(&mut l, li, generation)
        {
            if let Err(e) = c.check() {
                tracing::warn!(issuer = self.slot, "{e}");
            }
            return;
        }
        l.h[li as usize].held = false;
        if self.aio.shared.slot(self.base + li).state() == HandleState::CompletedShared {
            // Done already: let the next `acquire` reclaim it (its file, its statistics).
            self.aio.shared.count_unclaimed(self.slot);
        }
    }

    /// Defines, stages and (unless batching) submits the handed-out handle `li`; `held`: an
    /// `InFlight` will redeem it. Returns the I/O's generation.
    pub(crate) fn start(&self, li: u32, def: Definition<'_>, held: bool) -> u64 {
        let idx = self.base + li;
        let mut l = self.local_mut();
        assert_eq!(
            l.handed_out,
            Some(li),
            "starting an I/O on a handle that is not handed out"
        );
        l.handed_out = None;
        let generation = self.aio.shared.slot(idx).generation.load(Ordering::Relaxed);
        // A `File` of another subsystem names a slot of another table: the I/O is defined on
        // no file here, and fails with a message naming it.
        let foreign = def
            .file
            .filter(|f| !Arc::ptr_eq(&f.aio, &self.aio))
            .map(|f| f.path());
        let file_slot = self.define(idx, &def, foreign.is_none());
        let lh = &mut l.h[li as usize];
        lh.memory = def.memory;
        lh.skip = def.skip;
        lh.file = file_slot;
        lh.held = held;
        let is_foreign = foreign.is_some();
        lh.foreign = foreign;
        self.launch_defined(&mut l, li, held, is_foreign);
        generation
    }

    /// Writes `def` into handle `idx`'s slot (HANDED_OUT to this issuer): op, offset, length,
    /// the file reference and descriptor (unless `own_file` is false: a foreign file), flags,
    /// iovecs and path. Returns the file slot (`NO_FILE` for none).
    fn define(&self, idx: u32, def: &Definition<'_>, own_file: bool) -> u32 {
        let shared = &self.aio.shared;
        let s = shared.slot(idx);
        let r = Ordering::Relaxed;
        s.fields_generation.store(s.generation.load(r) as u32, r);
        s.op.store(def.op as u8, r);
        s.offset.store(def.offset, r);
        s.length.store(def.length, r);
        let file = def.file.filter(|_| own_file);
        let file_slot = file.map_or(NO_FILE, |f| f.slot);
        s.file.store(file_slot, r);
        if let Some(f) = file {
            shared.files.add_ref(f.slot);
            let fd = shared.files.slots[f.slot as usize]
                .fd
                .load(Ordering::Acquire);
            s.fd.store(fd, r);
            if !f.is_direct() && def.op.transfers_data() {
                // Only the issuer writes a handle's flags (while it holds it): no locked RMW.
                s.flags.store(s.flags.load(r) | HandleFlags::BUFFERED.0, r);
            }
        }
        let (count, total) = self.write_iovecs(idx, def);
        s.iov_count.store(count as u16, r);
        if def.op.transfers_data() {
            s.length.store(total, r);
        }
        if let IoMemory::Paths(p) = &def.memory {
            s.path.store(p.as_ptr() as usize, r);
        }
        file_slot
    }

    /// Fills handle `idx`'s iovec array from `def` (its raw iovecs, or its memory); returns
    /// the count and the bytes they cover.
    fn write_iovecs(&self, idx: u32, def: &Definition<'_>) -> (usize, u64) {
        let shared = &self.aio.shared;
        let iov = shared.iovecs(idx);
        match def.raw_iov {
            Some(raw) => {
                for (k, v) in raw.iter().enumerate() {
                    // SAFETY: `raw.len() <= max_iov` was checked by the caller; the handle is
                    // HANDED_OUT to this issuer, so no one else reads or writes its iovecs.
                    unsafe { iov.add(k).write(*v) };
                }
                (raw.len(), raw.iter().map(|v| v.iov_len as u64).sum())
            }
            // SAFETY: as above — the handle's iovec array has max_iov entries, owned by us now.
            None => unsafe {
                def.memory
                    .fill_iovecs(iov, shared.max_iov as usize, def.skip)
            },
        }
    }

    /// The staging time of an I/O staged now: in a batch, the I/Os staged for one submission
    /// share the first one's clock reading (they reach the method together); else, or for
    /// one run `here`, its own.
    fn staging_clock(&self, l: &mut Local, here: bool) -> u64 {
        if !l.in_batch || here {
            return self.aio.shared.io_clock_ns();
        }
        if l.staged.is_empty() || l.batch_clock == 0 {
            l.batch_clock = self.aio.shared.io_clock_ns();
        }
        l.batch_clock
    }

    /// Hands defined handle `li` on: the direct path for an I/O its issuer runs at once
    /// without callbacks; otherwise the stage callbacks and STAGED, and then failed at once
    /// (a foreign file), run here (SYNCHRONOUS, or an op the method runs inline), or put in
    /// the batch (submitted unless batching). A complete I/O no `InFlight` holds is reclaimed
    /// at once.
    fn launch_defined(&self, l: &mut Local, li: u32, held: bool, is_foreign: bool) {
        let shared = &self.aio.shared;
        let idx = self.base + li;
        let s = shared.slot(idx);
        let here = !is_foreign
            && (s.flags().contains(HandleFlags::SYNCHRONOUS)
                || self.aio.method.needs_synchronous_execution(shared, idx));
        if here && s.num_callbacks.load(Ordering::Relaxed) == 0 {
            l.link(li);
            self.start_direct(idx);
            if !held {
                self.reclaim_locked(l, li);
            }
            return;
        }
        s.set_state(HandleState::HandedOut, HandleState::Defined);
        let stage_panic = self.run_stage_callbacks(idx);
        let ebadf = || IoResult {
            status: Status::Error,
            callback_id: 0,
            error_data: libc::EBADF as u32,
            result: 0,
        };
        let failed = is_foreign.then(ebadf).or(stage_panic);
        s.staged_ns
            .store(self.staging_clock(l, here), Ordering::Relaxed);
        if let Some(result) = failed {
            // Never STAGED, so no waiter can claim and run it: a foreign file's descriptor
            // is not ours, and a panicked stage did not take what the I/O needs.
            s.set_state(HandleState::Defined, HandleState::Submitted);
            l.link(li);
            let raw = if is_foreign { -libc::EBADF } else { -libc::EIO };
            shared.fail(idx, raw, Executor::Issuer, result);
        } else {
            s.set_state(HandleState::Defined, HandleState::Staged);
            if !here {
                l.staged.push(li);
                if !l.in_batch || l.staged.len() >= SUBMIT_BATCH_SIZE {
                    self.submit_staged_locked(l);
                }
                return;
            }
            l.link(li);
            // A waiter that saw it staged may have claimed it first; then it runs it.
            if shared.claim_submit(idx) {
                shared.run_here(idx, Executor::Issuer);
            }
        }
        if !held && s.state() == HandleState::CompletedShared {
            self.reclaim_locked(l, li);
        }
    }

    /// The direct path of an I/O its issuer runs at once (the sync method, a SYNCHRONOUS
    /// handle, an op the method lacks) when it has no callbacks: nothing to run at staging,
    /// so it goes HANDED_OUT → SUBMITTED (skipping DEFINED and STAGED) and is run and
    /// completed by the one road every executor takes ([`Shared::run_here`]), whose
    /// completion on the issuer's own thread is a single transition to COMPLETED_SHARED.
    /// Until `start` returns no other thread can claim the I/O (only a STAGED handle can be
    /// claimed) or attach a notice to it (that takes its `InFlight`); one holding a wait
    /// reference (`Handle::wait_ref`, or a stale one) sleeps on the state word, and each
    /// transition, a compare-and-swap that keeps its waiter bit, wakes it as on the full
    /// path. Each transition is a locked instruction: on a page-cache read these, more than
    /// the instructions around them, are what the handle costs over the bare system call
    /// (docs/benchmarks.md, "Instructions per 4 KiB read").
    ///
    /// [`Shared::run_here`]: crate::handle::shared::Shared::run_here
    fn start_direct(&self, idx: u32) {
        let shared = &self.aio.shared;
        let s = shared.slot(idx);
        let r = Ordering::Relaxed;
        s.staged_ns.store(shared.io_clock_ns(), r);
        s.executor.store(Executor::Issuer.encode(), r);
        s.set_state(HandleState::HandedOut, HandleState::Submitted);
        shared.run_here(idx, Executor::Issuer);
    }

    /// Runs handle `idx`'s stage callbacks, innermost first. A panicking one is caught (the
    /// others still run: each takes its own resources, which its completion gives back) and
    /// the I/O is not executed: the result it then fails with is returned. Before, the panic
    /// left the handle DEFINED for ever, and the subsystem's drop waited for it (found by a
    /// caller-side attack, 2026-12-07).
    pub(super) fn run_stage_callbacks(&self, idx: u32) -> Option<IoResult> {
        let shared = &self.aio.shared;
        let s = shared.slot(idx);
        let ctx = IoContext { shared, index: idx };
        let _inside = crate::handle::callback::InCallback::enter();
        let mut failed = None;
        for k in (0..s.num_callbacks.load(Ordering::Relaxed) as usize).rev() {
            let id = s.callbacks[k].load(Ordering::Relaxed);
            let Some(cb) = shared.callbacks.get(id) else {
                continue;
            };
            let data = s.callback_data[k].load(Ordering::Relaxed);
            if catch_unwind(AssertUnwindSafe(|| cb.stage(&ctx, data))).is_err() {
                tracing::error!(
                    callback = cb.name(),
                    io_id = idx,
                    "stage callback panicked; failing the I/O"
                );
                failed.get_or_insert(IoResult::failed_by_callback(id, ERROR_DATA_PANICKED));
            }
        }
        failed
    }

    /// Runs the local callbacks of complete handle `li`, recycles it, and hands back its
    /// result and memory. Issuer only.
    pub(super) fn reclaim_locked(&self, l: &mut Local, li: u32) -> Reclaimed {
        let shared = &self.aio.shared;
        let idx = self.base + li;
        let s = shared.slot(idx);
        let r = Ordering::Relaxed;
        let (result, reclaiming) = self.run_local_callbacks(idx);
        let (op, offset, length) = (s.op(), s.offset.load(r), s.length.load(r));
        let foreign = l.h[li as usize].foreign.take();
        let error = self.report(idx, result, foreign.as_ref());
        let lh = &mut l.h[li as usize];
        let held = std::mem::replace(&mut lh.held, false);
        let memory = std::mem::replace(&mut lh.memory, IoMemory::None);
        let skip = lh.skip;
        let file = std::mem::replace(&mut lh.file, NO_FILE);
        match lh.notice.take() {
            // Its result went to a ticket or an error callback (delivered by now; if not,
            // here, before the slot is recycled: see `handle/notice.rs`).
            Some(cell) => cell
                .notice
                .deliver(shared, idx, s.distilled(), foreign.as_ref()),
            None => {
                if let (false, Some(e)) = (held, &error) {
                    tracing::warn!(issuer = self.slot, io_id = idx, "{e}");
                }
            }
        }
        self.recycle(l, li, reclaiming);
        if file != NO_FILE {
            self.aio.release_file(file);
        }
        Reclaimed {
            result,
            op,
            offset,
            length,
            skip,
            memory,
            error,
        }
    }

    /// Runs complete handle `idx`'s local callbacks (a panicking one fails the I/O) over its
    /// distilled result; returns the result and the state the handle is now in
    /// (COMPLETED_LOCAL, or COMPLETED_SHARED without callbacks: nothing local to run).
    fn run_local_callbacks(&self, idx: u32) -> (IoResult, HandleState) {
        let shared = &self.aio.shared;
        let s = shared.slot(idx);
        let r = Ordering::Relaxed;
        let mut result = s.distilled();
        let ctx = IoContext { shared, index: idx };
        let callbacks = s.num_callbacks.load(r) as usize;
        if callbacks == 0 {
            return (result, HandleState::CompletedShared);
        }
        let _inside = crate::handle::callback::InCallback::enter();
        for k in (0..callbacks).rev() {
            let id = s.callbacks[k].load(r);
            let Some(cb) = shared.callbacks.get(id) else {
                continue;
            };
            let data = s.callback_data[k].load(r);
            result = catch_unwind(AssertUnwindSafe(|| cb.complete_local(&ctx, result, data)))
                .map(|got| checked((cb.name(), id), idx, got, s.op(), s.length.load(r)))
                .unwrap_or_else(|_| {
                    tracing::error!(
                        callback = cb.name(),
                        io_id = idx,
                        "complete_local callback panicked; failing the I/O"
                    );
                    IoResult::failed_by_callback(id, ERROR_DATA_PANICKED)
                });
        }
        s.set_state(HandleState::CompletedShared, HandleState::CompletedLocal);
        (result, HandleState::CompletedLocal)
    }

    /// Records complete handle `idx`'s statistics and says what went wrong: its failure or
    /// short transfer as an error (described the same way: "read only N of M bytes"), and a
    /// callback's warning (a zeroed page, an ignored checksum failure) logged once, as
    /// PostgreSQL's WARNING.
    fn report(
        &self,
        idx: u32,
        result: IoResult,
        foreign: Option<&Arc<std::path::Path>>,
    ) -> Option<Box<IoError>> {
        let shared = &self.aio.shared;
        let s = shared.slot(idx);
        let r = Ordering::Relaxed;
        let error = matches!(result.status, Status::Error | Status::Partial)
            .then(|| Box::new(shared.describe(idx, result, foreign)));
        if result.status == Status::Warning {
            let warning = shared.describe(idx, result, foreign);
            tracing::warn!(issuer = self.slot, io_id = idx, "{warning}");
        }
        let op = s.op();
        let latency = s.completed_ns.load(r).saturating_sub(s.staged_ns.load(r));
        let bytes = if op.transfers_data() {
            result.result.max(0) as u64
        } else {
            0
        };
        let executor = Executor::decode(s.executor.load(r));
        let ok = result.status != Status::Error;
        self.aio
            .stats
            .record(self.slot, op, bytes, latency, ok, executor);
        error
    }

    /// Takes handle `li` (in state `from`) off the in-flight list — or out of the batch, if a
    /// waiter found it staged and ran it — and recycles it: a new generation, IDLE, cleared
    /// fields, back on the idle stack.
    fn recycle(&self, l: &mut Local, li: u32, from: HandleState) {
        let s = self.aio.shared.slot(self.base + li);
        match l.staged.iter().position(|&x| x == li) {
            Some(k) => {
                l.staged.remove(k);
            }
            None => l.unlink(li),
        }
        s.next_generation();
        self.aio.shared.recycling_hold.pass();
        s.set_state(from, HandleState::Idle);
        s.reset();
        l.idle.push(li);
    }
}
