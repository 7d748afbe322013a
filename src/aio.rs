//! [`Aio`]: the started subsystem. It owns the core (handle table, files, callbacks) and the
//! method; it registers issuers, opens files, lets any thread wait on a [`WaitRef`], and drains
//! everything in flight on shutdown. See `docs/design.md`, "Aio".

use crate::callback::{CallbackId, CallbackRegistry, HandleCallbacks, MAX_CALLBACK_KINDS};
use crate::core::Core;
use crate::error::AioError;
use crate::fault::FaultRule;
use crate::handle::{HandleState, WaitRef};
use crate::introspect::Introspection;
use crate::issuer::Issuer;
use crate::method::{self, IoMethod};
use crate::settings::{IoMethodKind, Settings};
use crate::stats::IssuerStatsRow;
use crate::target::{File, OpenOptions};
use crate::verifier::{PageVerifier, PgPageVerifier};
use crate::view::{AioRow, WaitRow};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

pub(crate) struct AioInner {
    /// Declared first so it stops before the method does.
    pub _introspection: Option<Introspection>,
    pub core: Arc<Core>,
    pub method: Box<dyn IoMethod>,
}

impl AioInner {
    /// Drops one reference to file slot `slot`, closing the fd when it was the last.
    pub(crate) fn release_file(&self, slot: u32) {
        if let Some(fd) = self.core.files.release(slot) {
            self.method.file_closed(slot);
            // SAFETY: the table handed us the fd exactly once (refcount reached zero), no I/O
            // references it any more, and no one else will close it.
            if unsafe { libc::close(fd) } < 0 {
                tracing::warn!(
                    "could not close file slot {slot}: {}",
                    std::io::Error::last_os_error()
                );
            }
            // Buffers are tagged by file slot: forget this file's before the slot is reused.
            // After shutdown no file can be opened, so no slot is reused: skip the scan (it
            // costs tens of milliseconds per file on a large, full pool).
            if let (Some(pool), false) = (
                self.core.pool.as_ref(),
                self.core.shutting_down.load(Ordering::SeqCst),
            ) {
                pool.drop_file_buffers(slot);
            }
            self.core.files.free_slot(slot);
        }
    }
}

/// Builds an [`Aio`] with embedder callback kinds.
pub struct AioBuilder {
    settings: Settings,
    callbacks: CallbackRegistry,
    verifier: Arc<dyn PageVerifier>,
}

impl AioBuilder {
    /// Registers a callback kind; handles refer to it by the returned id.
    pub fn callback(&mut self, cb: impl HandleCallbacks) -> Result<CallbackId, AioError> {
        if self.callbacks.kinds.len() >= MAX_CALLBACK_KINDS {
            return Err(AioError::ApiViolation(
                "at most 63 callback kinds can be registered",
            ));
        }
        self.callbacks.kinds.push(Arc::new(cb));
        Ok(CallbackId(self.callbacks.kinds.len() as u8))
    }

    /// Sets the buffer pool's page verifier (default: PostgreSQL's `PageIsVerified` with data
    /// checksums), run on every page an issuer reads with verification on (see
    /// [`Issuer::set_page_verification`](crate::Issuer::set_page_verification)).
    pub fn page_verifier(&mut self, v: impl PageVerifier) -> &mut Self {
        self.verifier = Arc::new(v);
        self
    }

    /// Starts the subsystem.
    pub fn start(self) -> Result<Aio, AioError> {
        let core = Arc::new(Core::new(
            self.settings.clone(),
            self.callbacks,
            self.verifier,
        )?);
        let method = method::start(&self.settings, &core)?;
        let introspection = match &self.settings.introspection_socket {
            Some(path) => Some(Introspection::start(
                path,
                Arc::clone(&core),
                method.kind().name(),
            )?),
            None => None,
        };
        if let (Some(pool), true) = (core.pool.as_ref(), self.settings.buffer_pool_prefault) {
            pool.prefault_on_first_use();
        }
        Ok(Aio {
            inner: Arc::new(AioInner {
                _introspection: introspection,
                core,
                method,
            }),
        })
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
    /// Starts the subsystem with `settings`.
    pub fn start(settings: Settings) -> Result<Aio, AioError> {
        Aio::builder(settings).start()
    }

    /// A builder, to register callback kinds before starting.
    pub fn builder(settings: Settings) -> AioBuilder {
        let mut callbacks = CallbackRegistry::default();
        // Built-in kinds come first (see bufpool::BUFFER_READV).
        callbacks.kinds.push(Arc::new(crate::bufpool::BufferReadv));
        AioBuilder {
            settings,
            callbacks,
            verifier: Arc::new(PgPageVerifier { checksums: true }),
        }
    }

    /// The method actually running (after any io_uring fallback).
    pub fn io_method(&self) -> IoMethodKind {
        self.inner.method.kind()
    }

    /// The settings it was started with.
    pub fn settings(&self) -> &Settings {
        &self.inner.core.settings
    }

    /// Handles each issuer owns (`io_max_concurrency`, resolved).
    pub fn handles_per_issuer(&self) -> u32 {
        self.inner.core.per_issuer
    }

    /// Registers the calling thread as an issuer named `name`.
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
    pub fn wait(&self, wref: WaitRef) -> Result<(), AioError> {
        let core = &self.inner.core;
        if wref.index >= core.n_handles {
            return Err(AioError::ApiViolation("wait reference names no handle"));
        }
        let s = core.slot(wref.index);
        let st = s.state();
        if matches!(st, HandleState::Defined | HandleState::Staged)
            && s.generation.load(Ordering::Acquire) == wref.generation
        {
            let owner = s.owner.load(Ordering::Relaxed) as usize;
            // SAFETY: gettid has no preconditions.
            let me = unsafe { libc::gettid() };
            if core.issuers[owner].tid.load(Ordering::Relaxed) == me {
                return Err(AioError::ApiViolation(
                    "an issuer waited on its own I/O before submitting it (use Issuer::wait_ref, which submits first)",
                ));
            }
        }
        core.wait_done(&*self.inner.method, wref.index, wref.generation)
    }

    /// True if the I/O `wref` names is complete (or long recycled). Never blocks.
    pub fn is_done(&self, wref: WaitRef) -> bool {
        let core = &self.inner.core;
        let s = core.slot(wref.index);
        if s.generation.load(Ordering::Acquire) != wref.generation || s.state().is_complete() {
            return true;
        }
        self.inner
            .method
            .poll(core, s.owner.load(Ordering::Relaxed));
        s.generation.load(Ordering::Acquire) != wref.generation || s.state().is_complete()
    }

    /// The aios view: every I/O handle not idle, with PostgreSQL's `pg_aios` columns plus the
    /// issuer, its thread, the executor and the age. Taken without stopping I/O; never a torn
    /// row.
    pub fn aios(&self) -> Vec<AioRow> {
        self.inner.core.aios()
    }

    /// What each registered issuer is waiting for now.
    pub fn waits(&self) -> Vec<WaitRow> {
        self.inner.core.waits()
    }

    /// Per-issuer statistics: count, bytes, errors, time and latency percentiles per op, and
    /// I/Os per executor.
    pub fn stats(&self) -> Vec<IssuerStatsRow> {
        self.inner.core.stats()
    }

    /// Zeroes every issuer's statistics.
    pub fn reset_stats(&self) {
        self.inner.core.reset_stats()
    }

    /// Checks the buffer pool's mapping: every mapped buffer carries the tag it is mapped by,
    /// and no buffer is mapped twice. Returns how many are mapped. (For tests and debugging.)
    pub fn check_buffer_mapping(&self) -> Result<usize, String> {
        self.inner
            .core
            .pool
            .as_ref()
            .map_or(Ok(0), |p| p.check_mapping())
    }

    /// Arms a fault-injection rule (tests).
    pub fn inject_fault(&self, rule: FaultRule) {
        self.inner.core.faults.add(rule);
    }

    /// Lets every completion parked by a [`FaultAction::Hold`](crate::FaultAction) rule go on.
    pub fn release_held(&self) {
        self.inner.core.faults.release_held();
    }

    /// Disarms every fault-injection rule.
    pub fn clear_faults(&self) {
        self.inner.core.faults.clear();
    }

    /// Refuses new I/O and new files, and waits until every submitted I/O of every issuer is
    /// complete. Issuers may still wait on and reclaim what they started.
    pub fn shutdown(&self) {
        let core = &self.inner.core;
        core.shutting_down.store(true, Ordering::SeqCst);
        for i in 0..core.n_handles {
            let s = core.slot(i);
            let g = s.generation.load(Ordering::Acquire);
            if matches!(s.state(), HandleState::Submitted | HandleState::CompletedIo) {
                let _ = core.wait_done(&*self.inner.method, i, g);
            }
        }
    }

    /// True once [`Aio::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.inner.core.shutting_down.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Aio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aio")
            .field("io_method", &self.io_method())
            .finish()
    }
}
