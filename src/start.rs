//! `Aio::start` and `AioBuilder` (kept apart from `subsystem.rs`: starting needs every layer).
//!
//! Starting the subsystem is the one place where the layers are put together, as
//! PostgreSQL's shared-memory start-up sets up aio and bufmgr side by side. It makes the buffer
//! pool, registers the pool's read callback and the embedder's callback kinds, builds the shared
//! table with the pool attached, picks the method (`method::start`, the one place `io_method` is
//! read), and opens the introspection socket. Nothing below imports this file. See
//! `docs/design.md`, "Start".

use crate::aio::subsystem::{Aio, AioInner};
use crate::bufmgr::pool::BufferPool;
use crate::bufmgr::read::BufferReadv;
use crate::bufmgr::verification::{PageVerifier, PgPageVerifier};
use crate::handle::callback::{CallbackId, CallbackRegistry, HandleCallbacks, MAX_CALLBACK_KINDS};
use crate::handle::error::AioError;
use crate::handle::settings::{HugePages, IoMethodKind, Settings};
use crate::handle::shared::Shared;
use crate::introspect::Source;
use crate::introspect::socket::Introspection;
use crate::introspect::stats::StatsTable;
use crate::method;
use crate::method::sim::SimDisk;
use std::sync::Arc;

/// Builds an [`Aio`] with embedder callback kinds, a page verifier and (for `io_method =
/// sim`) a simulated disk.
pub struct AioBuilder {
    settings: Settings,
    callbacks: Vec<Arc<dyn HandleCallbacks>>,
    verifier: Arc<dyn PageVerifier>,
    sim_disk: Option<SimDisk>,
}

/// Built-in callback kinds, registered before the embedder's (the buffer pool's read is 1).
const BUILT_IN_KINDS: usize = 1;

impl AioBuilder {
    /// Registers a callback kind; handles refer to it by the returned id.
    pub fn callback(&mut self, cb: impl HandleCallbacks) -> Result<CallbackId, AioError> {
        if BUILT_IN_KINDS + self.callbacks.len() >= MAX_CALLBACK_KINDS {
            return Err(AioError::ApiViolation(
                "at most 62 callback kinds can be registered (ids 2 ..= 63; 1 is the buffer pool's read)",
            ));
        }
        self.callbacks.push(Arc::new(cb));
        Ok(CallbackId((BUILT_IN_KINDS + self.callbacks.len()) as u8))
    }

    /// Sets the buffer pool's page verifier (default: PostgreSQL's `PageIsVerified` with data
    /// checksums), run on every page an issuer reads with verification on (see
    /// [`Issuer::set_page_verification`](crate::Issuer::set_page_verification)).
    pub fn page_verifier(&mut self, v: impl PageVerifier) -> &mut Self {
        self.verifier = Arc::new(v);
        self
    }

    /// Runs the subsystem on `disk` (`io_method = sim`; without it, `Aio::start` makes an
    /// empty disk seeded by `sim_seed`): a disk another subsystem left, or one
    /// [`SimDisk::crash`] returned.
    pub fn sim_disk(&mut self, disk: SimDisk) -> &mut Self {
        self.sim_disk = Some(disk);
        self
    }

    /// Starts the subsystem.
    pub fn start(self) -> Result<Aio, AioError> {
        let settings = self.settings;
        settings.validate()?;
        if self.sim_disk.is_some() && settings.io_method != IoMethodKind::Sim {
            return Err(AioError::ApiViolation(
                "a simulated disk was given but io_method is not sim",
            ));
        }
        let sim = (settings.io_method == IoMethodKind::Sim)
            .then(|| method::sim::store(&settings, self.sim_disk));
        if sim.is_some() {
            // Said at every start, so a failing run's log holds how to replay it.
            tracing::info!(
                "io_method = sim, sim_seed = {} (the same seed and the same calls replay this run)",
                settings.sim_seed
            );
        }
        let storage = sim
            .clone()
            .map(|s| s as Arc<dyn crate::handle::storage::Storage>);
        if settings.worker_processes() {
            // Before the buffer pool: its pages, and every IoBuf made from now on, come
            // from the shared arena that worker processes map.
            dbaio_sys::arena::install().map_err(AioError::Start)?;
        }
        let pool = Arc::new(BufferPool::new(&settings, self.verifier).map_err(|source| {
            AioError::BufferPool {
                bytes: settings.pool_blocks() * u64::from(settings.block_size),
                huge: settings.huge_pages == HugePages::On,
                source,
            }
        })?);
        let mut callbacks = CallbackRegistry::default();
        callbacks.kinds.push(Arc::new(BufferReadv));
        callbacks.kinds.extend(self.callbacks);
        let shared = Arc::new(Shared::new(
            settings.clone(),
            callbacks,
            Some(Arc::clone(&pool)),
            storage,
        )?);
        pool.set_subsystem(shared.id);
        let method = method::start(&settings, &shared, sim.clone())?;
        let stats = Arc::new(StatsTable::new(
            settings.max_issuers,
            settings.track_io_timing,
        ));
        let introspection = match &settings.introspection_socket {
            Some(path) => Some(Introspection::start(
                path,
                Source {
                    shared: Arc::clone(&shared),
                    stats: Arc::clone(&stats),
                    method: method.kind().name(),
                    pool: method.pool(),
                    registered_buffers: method.registered_buffers(),
                },
            )?),
            None => None,
        };
        if settings.prefaults_buffer_pool() {
            pool.prefault_on_first_use();
        }
        Ok(Aio {
            inner: Arc::new(AioInner {
                _introspection: introspection,
                shared,
                pool: method.pool(),
                sim_disk: sim.map(|s| s.disk.clone()),
                method,
                stats,
                owner: dbaio_sys::Owner::here(),
                retired: Arc::default(),
            }),
        })
    }
}

impl Aio {
    /// Starts the subsystem with `settings`.
    pub fn start(settings: Settings) -> Result<Aio, AioError> {
        Aio::builder(settings).start()
    }

    /// A builder, to register callback kinds or a page verifier before starting.
    pub fn builder(settings: Settings) -> AioBuilder {
        AioBuilder {
            settings,
            callbacks: Vec::new(),
            verifier: Arc::new(PgPageVerifier { checksums: true }),
            sim_disk: None,
        }
    }
}
