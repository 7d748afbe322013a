//! `Aio`'s any-thread access (a part of `Aio` kept apart: it owns a thread-local issuer table).
//!
//! [`Aio::with_issuer`] gives code that owns no thread (a `&self` method of a `Send + Sync`
//! storage backend, called from whatever thread the engine runs on) the calling thread's own
//! issuer, registered on first use and released when the thread ends.
//!
//! Each thread keeps its issuers in a thread-local list, one per subsystem (by the
//! subsystem's number), so the hot path is a thread-local lookup and no lock. The issuer is
//! registered on the thread that uses it, named after the thread, so the aios view and the
//! statistics attribute its I/Os to the right thread. A thread holds an issuer slot from its
//! first I/O until it ends: a pool of N threads needs `max_issuers` of at least N (plus the
//! issuers registered explicitly). After [`Aio::shutdown`] the call fails with
//! [`AioError::ShutDown`] and the thread's issuer is released.

use super::issuer::Issuer;
use super::subsystem::Aio;
use crate::handle::error::AioError;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;

thread_local! {
    /// This thread's issuers, by subsystem number.
    static ISSUERS: RefCell<Vec<(u32, Rc<Issuer>)>> = const { RefCell::new(Vec::new()) };
}

impl Aio {
    /// Runs `f` with the calling thread's issuer for this subsystem, registering it on the
    /// thread's first call (named after the thread). Calls may nest. The issuer is released
    /// when the thread ends; [`InFlight`](crate::InFlight)s borrow it only inside `f` — to
    /// let an I/O outlive the call, turn it into a [`Ticket`](crate::Ticket).
    ///
    /// Errors: the subsystem is shut down, or all `max_issuers` slots are taken.
    pub fn with_issuer<R>(&self, f: impl FnOnce(&Issuer) -> R) -> Result<R, AioError> {
        let id = self.inner.shared.id;
        let shut = self.inner.shared.shutting_down.load(Ordering::Relaxed);
        if shut {
            // Let the thread's issuer go (it waits for what it started), unless `f` up the
            // stack still holds it; dropped outside the borrow.
            let gone = ISSUERS.try_with(|list| {
                let mut list = list.borrow_mut();
                let gone: Vec<_> = list.iter().filter(|(s, _)| *s == id).cloned().collect();
                list.retain(|(sub, _)| *sub != id);
                gone
            });
            drop(gone);
            return Err(AioError::ShutDown);
        }
        let found = ISSUERS.try_with(|list| {
            let list = list.borrow();
            list.iter()
                .find(|(sub, _)| *sub == id)
                .map(|(_, i)| Rc::clone(i))
        });
        let issuer = match found {
            Ok(Some(issuer)) => issuer,
            Ok(None) => {
                let issuer = Rc::new(self.register_issuer(&thread_name())?);
                // Registered outside the borrow: registering may log, and logging may run
                // code that comes back here.
                let _ = ISSUERS.try_with(|list| {
                    list.borrow_mut().push((id, Rc::clone(&issuer)));
                });
                issuer
            }
            // The thread is ending and its list is gone: an issuer for this call only.
            Err(_) => Rc::new(self.register_issuer(&thread_name())?),
        };
        Ok(f(&issuer))
    }
}

/// The name a thread's issuer gets: the thread's name, or `thread <tid>`.
fn thread_name() -> String {
    match std::thread::current().name() {
        Some(n) => n.to_string(),
        // SAFETY: gettid has no preconditions.
        None => format!("thread {}", unsafe { libc::gettid() }),
    }
}
