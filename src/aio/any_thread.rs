//! `Aio`'s any-thread access (a part of `Aio` kept apart: it owns a thread-local issuer table).
//!
//! [`Aio::with_issuer`] gives code that owns no thread (a `&self` method of a `Send + Sync`
//! storage backend, called from whatever thread the engine runs on) the calling thread's own
//! issuer, registered on first use and released when the thread ends (it does not keep the
//! subsystem alive: [`Parked`]).
//!
//! Each thread keeps its issuers in a thread-local list, one per subsystem (by the
//! subsystem's number), so the hot path is a thread-local lookup and no lock. The issuer is
//! registered on the thread that uses it, named after the thread, so the aios view and the
//! statistics attribute its I/Os to the right thread. A thread holds an issuer slot from its
//! first I/O until it ends: a pool of N threads needs `max_issuers` of at least N (plus the
//! issuers registered explicitly). After [`Aio::shutdown`] the call fails with
//! [`AioError::ShutDown`] and the thread's issuer is released. On the library's own threads
//! (an error callback on the notifier, a waker on a worker) nothing is parked: each call
//! registers an issuer for itself, as those threads end inside the subsystem's drop.

use super::issuer::Issuer;
use super::subsystem::{Aio, AioInner, Retired};
use crate::handle::error::AioError;
use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

thread_local! {
    /// This thread's issuers, by subsystem number.
    static ISSUERS: RefCell<Vec<Rc<Parked>>> = const { RefCell::new(Vec::new()) };
}

/// A thread's issuer for one subsystem, kept in the thread's list between calls.
///
/// It must not keep the subsystem alive: an engine that lets its last `Aio`, `File`, `Issuer`
/// and `Ticket` go expects the subsystem's threads, worker processes, socket and memory to
/// go with them, not to linger until every thread that once called `with_issuer` ends (a
/// thread pool's threads may never end). So the issuer's own `Arc` of the subsystem is not
/// counted: its count is given back as soon as the issuer is registered. That is sound
/// because the issuer is only used inside `with_issuer`, whose caller holds an `Aio` (a
/// counted reference), and when the list lets it go, which first takes a counted reference
/// through `subsystem` (or, if the subsystem is gone, never touches it).
///
/// When the subsystem goes first, its drop waits for the I/Os of the issuers parked so
/// (`AioInner::drop`), as an issuer's own drop would.
struct Parked {
    id: u32,
    subsystem: Weak<AioInner>,
    /// When the subsystem goes first: when its drop has waited for this issuer's I/Os.
    retired: Arc<Retired>,
    /// Holds an uncounted `Arc` of the subsystem: never dropped as it is (see `Drop`).
    issuer: ManuallyDrop<Issuer>,
}

impl Parked {
    /// Parks `issuer` (registered by the caller of `with_issuer`, who holds `aio`).
    fn new(aio: &Arc<AioInner>, issuer: Issuer) -> Parked {
        debug_assert!(Arc::ptr_eq(aio, &issuer.aio));
        // SAFETY: the issuer's `Arc` was counted (cloned at registration); giving its count
        // back leaves at least the caller's, so the subsystem lives on. From here on the
        // issuer's `Arc` is used only while a counted reference is held (the type's docs).
        unsafe { Arc::decrement_strong_count(Arc::as_ptr(&issuer.aio)) };
        Parked {
            id: aio.shared.id,
            subsystem: Arc::downgrade(aio),
            retired: Arc::clone(&aio.retired),
            issuer: ManuallyDrop::new(issuer),
        }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        match self.subsystem.upgrade() {
            Some(alive) => {
                // SAFETY: `alive` keeps the subsystem; the issuer's `Arc` gets its count back,
                // so the issuer's drop (which waits for its I/Os and frees its slot, then
                // drops that `Arc`) runs as for any issuer. Dropped once: `self` is dropping.
                unsafe {
                    Arc::increment_strong_count(Arc::as_ptr(&alive));
                    ManuallyDrop::drop(&mut self.issuer);
                }
                drop(alive);
            }
            None => {
                // The subsystem is gone, or going on another thread: its drop waits for this
                // issuer's I/Os and closes the files they kept open; its slot goes with the
                // table. Once it has waited, the memory those I/Os used (still parked in
                // this issuer's lists, never reclaimed) is freed here; if it never did, it is
                // leaked (`Local::drop`). The issuer's `Arc` (dangling) is not touched.
                if self.retired.wait() {
                    self.issuer.local.get_mut().free_memory_of_done_ios();
                }
                // SAFETY: `local` is dropped once, here, and the rest of the issuer never.
                unsafe { std::ptr::drop_in_place(&mut self.issuer.local) };
            }
        }
    }
}

impl Aio {
    /// Runs `f` with the calling thread's issuer for this subsystem, registering it on the
    /// thread's first call (named after the thread). Calls may nest. The issuer is released
    /// when the thread ends, or when the subsystem is (it does not keep the subsystem alive);
    /// [`InFlight`](crate::InFlight)s borrow it only inside `f` — to let an I/O outlive the
    /// call, turn it into a [`Ticket`](crate::Ticket). If `f` panics with a batch open
    /// ([`Issuer::begin_batch`]), the batch is ended as the panic leaves: what it staged is
    /// submitted, not left for the thread's next call.
    ///
    /// Errors: the subsystem is shut down, or all `max_issuers` slots are taken.
    pub fn with_issuer<R>(&self, f: impl FnOnce(&Issuer) -> R) -> Result<R, AioError> {
        // A handle callback runs inside the completion protocol (staging or completing an
        // I/O, on the issuer's thread, a worker or a reaper): an I/O started and waited for
        // there deadlocked on io_uring, whose reaper was the waiting thread itself (found by
        // a caller-side attack, 2026-12-07). Refused on every method alike.
        if crate::handle::callback::inside_completion() {
            return Err(AioError::ApiViolation(REENTRANT));
        }
        let id = self.inner.shared.id;
        let shut = self.inner.shared.shutting_down.load(Ordering::Relaxed);
        if shut {
            // Let the thread's issuer go (it waits for what it started), unless `f` up the
            // stack still holds it; dropped outside the borrow.
            let gone = ISSUERS.try_with(|list| {
                let mut list = list.borrow_mut();
                let gone: Vec<_> = list.iter().filter(|p| p.id == id).cloned().collect();
                list.retain(|p| p.id != id);
                gone
            });
            drop(gone);
            return Err(AioError::ShutDown);
        }
        let found = ISSUERS
            .try_with(|list| {
                let list = list.borrow();
                list.iter().find(|p| p.id == id).map(Rc::clone)
            })
            .ok();
        let parked = match found {
            Some(Some(parked)) => parked,
            // On one of the subsystem's own threads (an error callback on the notifier, a
            // waker on a worker) nothing is parked (an issuer for this call only, below):
            // parked there, it went when the thread ended — inside the subsystem's drop,
            // which joins the notifier — and waited for that very drop: both hung (found by
            // a caller-side attack, 2026-12-07). Looked at only here, off the hot path.
            Some(None) if !on_library_thread() => {
                let issuer = self.register_issuer(&thread_name())?;
                let parked = Rc::new(Parked::new(&self.inner, issuer));
                // Pushed outside the borrow: registering may log, and logging may run code
                // that comes back here. Issuers of subsystems gone since leave the list
                // (dropped outside the borrow too).
                let gone = ISSUERS.try_with(|list| {
                    let mut list = list.borrow_mut();
                    let (live, gone) = std::mem::take(&mut *list)
                        .into_iter()
                        .partition(|p| p.subsystem.strong_count() > 0);
                    *list = live;
                    list.push(Rc::clone(&parked));
                    gone
                });
                drop(gone);
                parked
            }
            // The thread is ending and its list is gone, or it is one of the library's: an
            // issuer for this call only.
            Some(None) | None => {
                let issuer = self.register_issuer(&thread_name())?;
                let _batch = EndBatchOnPanic::new(&issuer);
                return Ok(f(&issuer));
            }
        };
        let issuer: &Issuer = &parked.issuer;
        // Inside one of this issuer's own calls — a callback it runs (stage, a completion
        // on its thread) that called back here: its state is borrowed by that call, and
        // using it panicked with `already mutably borrowed` (found by a caller-side attack,
        // 2026-12-07). Nesting `with_issuer` in `f` itself is fine: no call is under way.
        if issuer.local.try_borrow_mut().is_err() {
            return Err(AioError::ApiViolation(REENTRANT));
        }
        let _batch = EndBatchOnPanic::new(issuer);
        Ok(f(issuer))
    }
}

/// `with_issuer` from inside a handle callback, or from inside a call of the thread's own
/// issuer.
const REENTRANT: &str = "Aio::with_issuer called from a handle callback (stage or completion) \
     or a future's waker: they run inside the completion protocol and must not start or wait \
     for I/O";

/// Ends an issuer's open batch if a panic unwinds through `with_issuer`: the thread's next
/// call (a thread pool runs its next task on the same thread) would otherwise stage its I/Os
/// for good, and a ticket or a future on them would never complete. Only a batch this call
/// opened: a nested call's panic, caught by the outer call's closure, leaves the outer
/// batch open for the code that opened it (it ended it before, found by a caller-side
/// attack).
struct EndBatchOnPanic<'a> {
    issuer: &'a Issuer,
    open_before: bool,
}

impl<'a> EndBatchOnPanic<'a> {
    #[inline]
    fn new(issuer: &'a Issuer) -> Self {
        let open_before = issuer.local.try_borrow().is_ok_and(|l| l.in_batch);
        EndBatchOnPanic {
            issuer,
            open_before,
        }
    }
}

impl Drop for EndBatchOnPanic<'_> {
    #[inline]
    fn drop(&mut self) {
        if std::thread::panicking()
            && !self.open_before
            && self.issuer.local.try_borrow().is_ok_and(|l| l.in_batch)
        {
            tracing::warn!(
                issuer = self.issuer.slot,
                "open AIO batch left by a panic in with_issuer: submitting its staged I/Os"
            );
            self.issuer.end_batch();
        }
    }
}

/// True on a thread of the library's (named `dbaio-…`: workers, notifier, watcher,
/// completer, retire), this subsystem's or another's.
fn on_library_thread() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("dbaio-"))
}

/// The name a thread's issuer gets: the thread's name, or `thread <tid>`.
fn thread_name() -> String {
    match std::thread::current().name() {
        Some(n) => n.to_string(),
        // SAFETY: gettid has no preconditions.
        None => format!("thread {}", unsafe { libc::gettid() }),
    }
}
