//! Notices, and `Shared`'s attach and deliver (a part of `Shared` kept with the notice protocol).
//!
//! Notices: how a finished I/O reaches whoever cares about it when no issuer-bound
//! `InFlight` will redeem it — a `Ticket` redeemed on any thread or awaited as a future, or a
//! detached I/O with an error callback.
//!
//! A [`Notice`] is attached to a handle after the I/O started (its address goes in the slot's
//! `notice` word) and is *delivered* exactly once: its outcome (the shared result, and the
//! error in words) is recorded, a registered waker is woken, and a failure goes to the error
//! callback. Delivery is done by the first of:
//!
//! - the completer, after the shared callbacks and before COMPLETED_SHARED, if it sees the
//!   notice word set;
//! - the attacher, if it finds the I/O already past COMPLETED_IO (it waits for
//!   COMPLETED_SHARED, which is never long, then delivers itself);
//! - the owning issuer's reclaim, before it recycles the handle (a safety net: the two above
//!   cover every interleaving).
//!
//! The completer stores COMPLETED_IO and then reads the notice word; the attacher stores the
//! notice word and then reads the state, with a sequentially consistent fence between each
//! store and load (Dekker's pattern): at least one of them sees the other, so a notice is
//! never missed. Both may see each other; the notice's lock makes the second delivery a
//! no-op. Nothing touches a notice after COMPLETED_SHARED through the slot: whoever holds it
//! (the ticket, the issuer until reclaim) keeps it alive.
//!
//! Error callbacks run on one thread, `dbaio-notify`, started on first use, in delivery
//! order; never on an issuer's or a worker's thread (a callback may then start I/O, or block,
//! without stalling anyone). [`Aio::shutdown`](crate::Aio) runs the ones still queued.

use super::bell::safety_net_ended;
use super::error::IoError;
use super::op::Op;
use super::result::{IoResult, Status};
use super::shared::Shared;
use super::slot::HandleState;
use parking_lot::{Mutex, MutexGuard};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{Ordering, fence};
use std::sync::mpsc;
use std::task::Waker;
use std::thread::JoinHandle;

thread_local! {
    /// Wakers running on this thread (one may complete another's I/O and wake again).
    static IN_WAKER: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// True inside a future's waker: this thread is completing an I/O, which does not count as
/// complete until the waker returns (a drop or a shutdown there must not wait for it).
pub(crate) fn in_waker() -> bool {
    IN_WAKER.with(|c| c.get() > 0)
}

/// An error callback of a detached I/O.
pub(crate) type OnError = Box<dyn FnOnce(IoError) + Send + 'static>;

/// What a delivered notice records.
pub(crate) struct Outcome {
    pub result: IoResult,
    pub op: Op,
    pub offset: u64,
    pub length: u64,
    /// The failure or short transfer, in words (None: success).
    pub error: Option<IoError>,
}

/// What happens to a failure nobody will redeem.
enum Report {
    /// A ticket may still take it: keep it.
    Keep,
    /// Log it as a warning (a ticket dropped unredeemed, or a detached I/O with the default).
    Log,
    /// Hand it to this callback, on the notifier thread.
    Call(OnError),
}

struct State {
    outcome: Option<Outcome>,
    delivered: bool,
    /// A ticket took the outcome.
    taken: bool,
    /// The ticket was dropped before delivery: a failure is logged, not kept.
    abandoned: bool,
    /// A detached I/O: failures go to `on_error` (or are logged).
    detached: bool,
    on_error: Option<OnError>,
    waker: Option<Waker>,
}

/// Where one I/O's completion goes (see the module documentation).
pub(crate) struct Notice {
    state: Mutex<State>,
}

impl Notice {
    /// A notice for a ticket: the outcome is kept for whoever redeems it.
    pub(crate) fn for_ticket() -> Notice {
        Notice::new(false, None)
    }

    /// A notice for a detached I/O: a failure goes to `on_error`, or is logged.
    pub(crate) fn detached(on_error: Option<OnError>) -> Notice {
        Notice::new(true, on_error)
    }

    fn new(detached: bool, on_error: Option<OnError>) -> Notice {
        Notice {
            state: Mutex::new(State {
                outcome: None,
                delivered: false,
                taken: false,
                abandoned: false,
                detached,
                on_error,
                waker: None,
            }),
        }
    }

    /// True once delivered.
    pub(crate) fn is_delivered(&self) -> bool {
        self.state.lock().delivered
    }

    /// Records handle `i`'s outcome, wakes the waker and reports a failure as this notice's
    /// style says — unless it was delivered already. The handle must be past COMPLETED_IO
    /// with its result distilled (`result`), and not yet recycled.
    pub(crate) fn deliver(
        &self,
        shared: &Shared,
        i: u32,
        result: IoResult,
        foreign: Option<&std::sync::Arc<std::path::Path>>,
    ) {
        if self.state.lock().delivered {
            return;
        }
        // Described before the lock is taken: the description runs the embedder's `message`
        // and `report`, and one that took the ticket's outcome deadlocked on this lock (found
        // by a caller-side attack, 2026-12-07).
        let s = shared.slot(i);
        let error = matches!(result.status, Status::Error | Status::Partial)
            .then(|| shared.describe(i, result, foreign));
        let st = self.state.lock();
        if st.delivered {
            return;
        }
        let outcome = Outcome {
            result,
            op: s.op(),
            offset: s.offset.load(Ordering::Relaxed),
            length: s.length.load(Ordering::Relaxed),
            error,
        };
        Notice::settle(st, shared, outcome);
    }

    /// Records an outcome known already (an I/O's result its issuer kept before the notice
    /// came: `aio/lifecycle.rs`, `Kept`), as [`Notice::deliver`] does.
    pub(crate) fn deliver_outcome(&self, shared: &Shared, outcome: Outcome) {
        let st = self.state.lock();
        if !st.delivered {
            Notice::settle(st, shared, outcome);
        }
    }

    /// Delivers `outcome` under the notice's lock (not delivered yet): keeps it, or reports
    /// its failure as the notice's style says; then wakes the waker.
    fn settle(mut st: MutexGuard<'_, State>, shared: &Shared, mut outcome: Outcome) {
        st.delivered = true;
        let report = match (&outcome.error, st.detached || st.abandoned) {
            (None, _) | (Some(_), false) => Report::Keep,
            (Some(_), true) => st.on_error.take().map_or(Report::Log, Report::Call),
        };
        match report {
            Report::Keep => {}
            Report::Log => {
                if let Some(e) = outcome.error.take() {
                    tracing::warn!("{e}");
                }
            }
            Report::Call(f) => {
                let e = outcome.error.take().expect("a failure to report");
                shared.notifier.call(f, e);
            }
        }
        st.outcome = Some(outcome);
        let waker = st.waker.take();
        drop(st);
        // A waker runs the caller's code on the thread completing the I/O, before the I/O
        // counts as complete: a panic there must not leave it half done (every wait on it,
        // `Aio::shutdown` and the subsystem's drop then waited for ever: found by a
        // caller-side attack, 2026-12-07).
        if let Some(w) = waker {
            IN_WAKER.with(|c| c.set(c.get() + 1));
            let woken = catch_unwind(AssertUnwindSafe(|| w.wake()));
            IN_WAKER.with(|c| c.set(c.get() - 1));
            if woken.is_err() {
                tracing::error!("a future's waker panicked; its I/O completes all the same");
            }
        }
    }

    /// Takes the outcome for the ticket (None if not delivered yet).
    pub(crate) fn take(&self) -> Option<Outcome> {
        let mut st = self.state.lock();
        let o = st.outcome.take();
        st.taken |= o.is_some();
        o
    }

    /// True once the outcome was taken (a ticket's future returned it).
    pub(crate) fn taken(&self) -> bool {
        self.state.lock().taken
    }

    /// Takes the outcome if delivered; otherwise keeps `waker` to wake at delivery.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) fn take_or_register(&self, waker: &Waker) -> Option<Outcome> {
        let mut st = self.state.lock();
        if st.delivered {
            assert!(!st.taken, "a Ticket polled again after it was ready");
            let o = st.outcome.take();
            st.taken |= o.is_some();
            return o;
        }
        match &st.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => st.waker = Some(waker.clone()),
        }
        None
    }

    /// The ticket goes unredeemed: a failure delivered and not taken is logged now, one not
    /// yet delivered will be logged at delivery. Exactly once either way.
    pub(crate) fn abandon(&self) {
        let mut st = self.state.lock();
        st.abandoned = true;
        st.waker = None;
        if st.taken {
            return;
        }
        if let Some(e) = st.outcome.as_mut().and_then(|o| o.error.take()) {
            tracing::warn!("an I/O's ticket was dropped unredeemed: {e}");
        }
    }
}

impl Shared {
    /// Attaches `notice` to handle `i` (started by the caller, its owner). Returns once the
    /// notice will be delivered: if the I/O is already complete it is delivered here.
    ///
    /// # Safety
    ///
    /// `notice` must stay valid until handle `i` is recycled (its owner keeps it until it
    /// reclaims the handle).
    pub(crate) unsafe fn attach_notice(
        &self,
        i: u32,
        notice: &Notice,
        foreign: Option<&std::sync::Arc<std::path::Path>>,
    ) {
        let s = self.slot(i);
        // The caller owns the handle: it is not recycled while this runs.
        let generation = s.generation.load(Ordering::Acquire);
        s.notice
            .store(notice as *const Notice as usize, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let mut st = s.state();
        if st < HandleState::CompletedIo {
            return; // the completer will see the notice
        }
        // It may have read the word before we stored it: deliver here, once its shared
        // callbacks are done.
        while st == HandleState::CompletedIo {
            let since = std::time::Instant::now();
            let timed_out = s.sleep_while(st, generation);
            st = s.state();
            if timed_out {
                let slept = safety_net_ended(since, st != HandleState::CompletedIo);
                self.note_sleep(s.owner.load(Ordering::Relaxed), slept);
            }
        }
        notice.deliver(self, i, s.distilled(), foreign);
    }

    /// The completer's half: delivers handle `i`'s notice, if one is attached (returns whether one
    /// was). Called after COMPLETED_IO is published and the result distilled, before
    /// COMPLETED_SHARED.
    pub(crate) fn deliver_notice(&self, i: u32, result: IoResult) -> bool {
        fence(Ordering::SeqCst);
        let p = self.slot(i).notice.load(Ordering::SeqCst);
        if p != 0 {
            // SAFETY: an attached notice stays valid until the handle is recycled, which
            // cannot happen before the COMPLETED_SHARED this completer has yet to publish.
            let notice = unsafe { &*(p as *const Notice) };
            notice.deliver(self, i, result, None);
        }
        p != 0
    }
}

/// Runs error callbacks on the `dbaio-notify` thread, in order.
pub(crate) struct Notifier {
    inner: Mutex<NotifierInner>,
    /// Signalled when the thread has been joined (`NotifierInner::joining` falls).
    joined: parking_lot::Condvar,
}

struct NotifierInner {
    tx: Option<mpsc::Sender<(OnError, IoError)>>,
    thread: Option<JoinHandle<()>>,
    /// The notifier thread, once started (it never waits for itself).
    thread_id: Option<std::thread::ThreadId>,
    /// A [`Notifier::finish`] is joining the thread: other callers wait for it.
    joining: bool,
    /// After [`Notifier::finish`]: callbacks run inline.
    finished: bool,
}

impl Notifier {
    pub(crate) fn new() -> Notifier {
        Notifier {
            inner: Mutex::new(NotifierInner {
                tx: None,
                thread: None,
                thread_id: None,
                joining: false,
                finished: false,
            }),
            joined: parking_lot::Condvar::new(),
        }
    }

    /// Queues `f(error)` for the notifier thread (started on first use).
    pub(crate) fn call(&self, f: OnError, error: IoError) {
        let mut g = self.inner.lock();
        if g.finished {
            drop(g);
            run_callback(f, error);
            return;
        }
        if g.tx.is_none() {
            let (tx, rx) = mpsc::channel::<(OnError, IoError)>();
            let spawned = std::thread::Builder::new()
                .name("dbaio-notify".into())
                .spawn(move || {
                    for (f, e) in rx {
                        run_callback(f, e);
                    }
                });
            match spawned {
                Ok(t) => {
                    g.tx = Some(tx);
                    g.thread_id = Some(t.thread().id());
                    g.thread = Some(t);
                }
                Err(e) => {
                    drop(g);
                    tracing::warn!(
                        "could not start the dbaio-notify thread ({e}); running an error callback inline"
                    );
                    run_callback(f, error);
                    return;
                }
            }
        }
        let tx = g.tx.as_ref().expect("started above");
        if let Err(mpsc::SendError((f, e))) = tx.send((f, error)) {
            drop(g);
            run_callback(f, e);
        }
    }

    /// No callback is queued any more (later ones run inline) and every queued one has run
    /// when this returns: the first caller joins the thread, the others wait for that join
    /// (all but the first returned at once before, with callbacks still queued: found by a
    /// caller-side attack, 2026-12-07). On the notifier's own thread (a callback calling
    /// it) nothing is waited for: the thread ends once that callback returns.
    pub(crate) fn finish(&self) {
        let mut g = self.inner.lock();
        g.finished = true;
        g.tx = None;
        if g.thread_id == Some(std::thread::current().id()) {
            drop(g.thread.take());
            return;
        }
        if let Some(t) = g.thread.take() {
            g.joining = true;
            drop(g);
            let _ = t.join();
            self.inner.lock().joining = false;
            self.joined.notify_all();
            return;
        }
        while g.joining {
            self.joined.wait(&mut g);
        }
    }
}

/// Runs one error callback; a panic in it is logged, not propagated.
fn run_callback(f: OnError, error: IoError) {
    let text = error.to_string();
    if catch_unwind(AssertUnwindSafe(|| f(error))).is_err() {
        tracing::error!("an I/O error callback panicked (the error was: {text})");
    }
}
