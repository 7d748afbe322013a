//! Tickets, groups and detached I/Os, and the `InFlight` methods that make them (kept with them).
//!
//! Completion styles beyond the issuer-bound [`InFlight`]: a [`Ticket`] (`Send`, redeemed on
//! any thread, or awaited as a `Future` with the `async` feature), an [`IoGroup`] of tickets
//! that reports the first error, and a detached I/O with an error callback
//! ([`InFlight::on_error`]). All are one mechanism: the I/O's memory moves into a shared cell
//! with a [`Notice`] that the completer delivers (see `handle/notice.rs`); the issuer keeps a
//! reference to the cell until it recycles the handle, so the memory outlives the I/O
//! whatever the caller drops. See `docs/design.md`, "Completion styles".

use super::io::{Completion, InFlight, IoMemory};
use super::subsystem::AioInner;
use crate::handle::error::IoError;
use crate::handle::notice::{Notice, OnError};
use crate::handle::slot::{HandleState, WaitRef};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A started I/O's result and memory, shared by its ticket (if any) and its issuer.
pub(crate) struct TicketCell {
    pub(crate) notice: Notice,
    /// The I/O's memory, parked here (not in the issuer) from the moment the I/O got a notice.
    pub(crate) memory: Mutex<IoMemory>,
    /// Bytes of the memory skipped (a resumed partial transfer).
    pub(crate) skip: u32,
}

/// A started I/O that any thread can redeem: `Send + Sync`, `'static`, it borrows nothing.
/// Get one with [`InFlight::into_ticket`]; redeem it with [`Ticket::wait`] (or `.await` it
/// with the `async` feature) for the result and the memory.
///
/// Dropping a ticket unredeemed detaches the I/O: it finishes, its memory is freed once it is
/// done, and a failure is logged as a warning (exactly once). The handle stays with the
/// issuer that started the I/O, which recycles it the next time it looks for a free handle.
///
/// A ticket's result is the one the shared callbacks leave (local callbacks run later, when
/// the issuer recycles the handle). An I/O still staged in its issuer's batch is submitted
/// at `end_batch`; [`Ticket::wait`] runs it itself rather than wait for that.
#[must_use = "a Ticket is redeemed with wait(); dropping it detaches the I/O"]
pub struct Ticket {
    aio: Arc<AioInner>,
    cell: Arc<TicketCell>,
    wref: WaitRef,
    /// io_uring's watcher was asked to reap this I/O's ring (for a future).
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    watched: bool,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("io_id", &self.wref.io_id())
            .field("generation", &self.wref.generation())
            .field("done", &self.is_done())
            .finish()
    }
}

impl Ticket {
    /// The I/O's wait reference.
    pub fn wait_ref(&self) -> WaitRef {
        self.wref
    }

    /// True once the I/O is complete. Never blocks; does not drive completion (see
    /// [`Ticket::check_done`]; with worker processes, a request left queued beside idle
    /// workers for a millisecond gets one woken), and does not start an I/O still staged in
    /// its issuer's open batch (it completes once the batch ends).
    pub fn is_done(&self) -> bool {
        if self.cell.notice.is_delivered() {
            return true;
        }
        // Completes nothing: no need to look again.
        self.aio.method.nudge();
        false
    }

    /// True once the I/O is complete, after reaping whatever completions are ready now
    /// (io_uring's ring, without waiting). Never blocks; on `sim` it completes the next
    /// simulated I/O due in the calling thread (an injected `FaultAction::Delay` on it is
    /// slept there).
    pub fn check_done(&self) -> bool {
        if self.cell.notice.is_delivered() {
            return true;
        }
        let shared = &self.aio.shared;
        let s = shared.slot(self.wref.index);
        if s.generation.load(Ordering::Acquire) == self.wref.generation
            && s.state() == HandleState::Submitted
        {
            self.aio
                .method
                .poll(shared, s.owner.load(Ordering::Relaxed));
        }
        self.is_done()
    }

    /// Waits for the I/O (from any thread) and takes its result and memory.
    ///
    /// # Panics
    ///
    /// Inside a handle callback or a future's waker, unless the I/O is already complete:
    /// they must not block (in a callback the panic fails the callback's own I/O). And on a
    /// ticket whose future already returned its completion: a ticket is redeemed once.
    pub fn wait(self) -> Completion {
        if let Some(c) = self.take() {
            return c;
        }
        assert!(
            !self.cell.notice.taken(),
            "Ticket::wait on a ticket whose future already returned its completion (Ready): \
             a ticket is redeemed once"
        );
        // Submitted: wait for it (reaping the ring under io_uring); staged in a batch: run
        // it here. Its notice is delivered before it counts as complete.
        if let Err(e) = self.aio.wait_done(self.wref.index, self.wref.generation) {
            panic!("Ticket::wait: {e}");
        }
        self.take()
            .expect("a ticket's notice is delivered before its I/O completes")
    }

    /// Takes the result if the I/O is complete; hands the ticket back otherwise. Never blocks.
    pub fn try_wait(self) -> Result<Completion, Ticket> {
        if !self.check_done() {
            return Err(self);
        }
        Ok(self.wait())
    }

    fn take(&self) -> Option<Completion> {
        let outcome = self.cell.notice.take()?;
        let memory = std::mem::take(&mut *self.cell.memory.lock());
        Some(Completion::from_outcome(outcome, memory, self.cell.skip))
    }

    /// Asks the method to complete this I/O without anyone waiting on it (io_uring: the
    /// subsystem's watcher thread reaps the ring), once.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    fn watch(&mut self) {
        if !self.watched {
            self.watched = true;
            watch(&self.aio, self.wref);
        }
    }
}

/// Has the method complete I/O `wref` with nobody waiting (see [`Ticket::watch`]).
fn watch(aio: &AioInner, wref: WaitRef) {
    let s = aio.shared.slot(wref.index);
    if s.generation.load(Ordering::Acquire) == wref.generation && !s.state().is_complete() {
        aio.method
            .watch(s.owner.load(Ordering::Relaxed), wref.index);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.cell.notice.abandon();
    }
}

#[cfg(feature = "async")]
impl std::future::Future for Ticket {
    type Output = Completion;

    /// Ready with the result once the I/O is complete; woken by whoever completes it (a
    /// worker, the thread that reaps the ring, or io_uring's watcher thread). Dropping the
    /// future before it is ready detaches the I/O, as dropping the ticket does.
    ///
    /// Polling never starts an I/O: one still staged in its issuer's open batch
    /// ([`Issuer::begin_batch`](crate::Issuer::begin_batch)) completes once the issuer ends
    /// the batch (on `sync` and `io_uring` a buffered write may run at once regardless).
    /// Await a ticket after `end_batch`; a task that awaits its own staged I/O before
    /// ending the batch waits for ever ([`Ticket::wait`], which blocks, runs it instead).
    ///
    /// The waker runs on the thread completing the I/O, before the I/O counts as complete,
    /// as a handle callback does: a wait there for an I/O not yet complete is refused
    /// (`Aio::wait` returns an API-violation error, `Ticket::wait` panics), and so are
    /// `Aio::with_issuer` and `Aio::register_issuer`. Wake a task; do not do its work there.
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Completion> {
        if let Some(outcome) = self.cell.notice.take_or_register(cx.waker()) {
            let memory = std::mem::take(&mut *self.cell.memory.lock());
            return std::task::Poll::Ready(Completion::from_outcome(
                outcome,
                memory,
                self.cell.skip,
            ));
        }
        self.watch();
        std::task::Poll::Pending
    }
}

impl InFlight<'_> {
    /// Turns this I/O into a [`Ticket`] that any thread can redeem.
    pub fn into_ticket(self) -> Ticket {
        let issuer = self.owner();
        let (li, generation) = self.into_parts();
        let cell = issuer.attach_notice(li, generation, Notice::for_ticket());
        Ticket {
            aio: Arc::clone(&issuer.aio),
            cell,
            wref: issuer
                .aio
                .shared
                .wait_ref(issuer.handle_index(li), generation),
            watched: false,
        }
    }

    /// Detaches this I/O (fire and forget): the issuer never waits for it, its memory is
    /// freed once it is done, and if it fails (or transfers less than asked) `on_error` is
    /// called exactly once with the error in words, on the `dbaio-notify` thread (in
    /// completion order; it may block or start I/O without stalling anyone).
    /// [`Aio::shutdown`](crate::Aio::shutdown) completes detached I/Os and runs their
    /// callbacks. Dropping an `InFlight` also detaches it; then a failure is only logged.
    pub fn on_error(self, on_error: impl FnOnce(IoError) + Send + 'static) {
        self.detach_with(Some(Box::new(on_error)));
    }

    /// Detaches this I/O, logging a failure (as a `tracing` warning naming op, file and
    /// errno) as soon as it completes, rather than when its issuer recycles the handle.
    pub fn detach(self) {
        self.detach_with(None);
    }

    fn detach_with(self, on_error: Option<OnError>) {
        let issuer = self.owner();
        let (li, generation) = self.into_parts();
        let cell = issuer.attach_notice(li, generation, Notice::detached(on_error));
        if !cell.notice.is_delivered() {
            let wref = issuer
                .aio
                .shared
                .wait_ref(issuer.handle_index(li), generation);
            watch(&issuer.aio, wref);
        }
    }
}

/// A set of tickets redeemed together: push the I/Os of a write-behind as they start, then
/// [`IoGroup::wait`] for all of them and get the first failure. `Send + Sync`: any thread may
/// push and wait.
#[derive(Debug, Default)]
pub struct IoGroup {
    tickets: Mutex<Vec<Ticket>>,
}

impl IoGroup {
    /// An empty group.
    pub fn new() -> IoGroup {
        IoGroup::default()
    }

    /// Adds a started I/O.
    pub fn push(&self, ticket: Ticket) {
        self.tickets.lock().push(ticket);
    }

    /// I/Os pushed and not yet waited for.
    pub fn len(&self) -> usize {
        self.tickets.lock().len()
    }

    /// True if no I/O is pending in the group.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits for every I/O pushed so far (all of them, even after one failed), frees their
    /// memory, and returns the first failure or short transfer in push order. Each failure is
    /// reported once: by this call, or logged if a later one is not returned. A write cut
    /// short (what a filling disk answers first: the kernel writes what fits) is reported as
    /// such, `wrote only N of M bytes` with no errno; `Issuer::write_all_at` finishes short
    /// writes and so reports the errno (ENOSPC).
    pub fn wait(&self) -> Result<(), IoError> {
        let tickets = std::mem::take(&mut *self.tickets.lock());
        let mut first = None;
        for t in tickets {
            if let Err(e) = t.wait().check() {
                match first {
                    None => first = Some(e),
                    Some(_) => tracing::warn!("{e}"),
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}
