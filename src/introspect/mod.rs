//! Introspection: what is in flight and who issued it, read while I/O goes on.
//!
//! - `view.rs` — the aios view (PostgreSQL's `pg_aios` columns plus issuer, thread, executor
//!   and age) and what each issuer waits for, copied from the handle table without stopping
//!   it.
//! - `stats.rs` — per-issuer, per-op counters and latency histograms, recorded at reclaim.
//! - `socket.rs` — the owner-only unix socket serving all three as JSON, and its client.
//!
//! May use: the handle layer (it reads the shared table) and the worker engine's snapshot
//! type. Never the API, the methods or the buffer manager. See `docs/aios.md` and
//! `docs/design.md`, "Introspection".

pub(crate) mod socket;
pub(crate) mod stats;
pub(crate) mod view;

pub use socket::{
    CLIENT_TIMEOUT, COMMANDS, MAX_CLIENTS, MAX_REQUEST, REQUEST_TIMEOUT, WRITE_TIMEOUT, request,
};

use crate::handle::shared::Shared;
use stats::{IssuerStatsRow, StatsTable};
use std::sync::Arc;
use view::{AioRow, WaitRow};

/// What the view is read from: the shared table, the stats, the method's name and, under
/// the worker method, its pool.
#[derive(Clone)]
pub(crate) struct Source {
    pub shared: Arc<Shared>,
    pub stats: Arc<StatsTable>,
    pub method: &'static str,
    pub pool: Option<dbaio_workers::PoolObserver>,
    /// io_uring with `io_uring_registered_buffers` on: what the registration achieved.
    pub registered_buffers: Option<crate::handle::fixed_memory::RegisteredBuffersReader>,
}

impl Source {
    /// The aios view.
    pub(crate) fn aios(&self) -> Vec<AioRow> {
        view::aios(&self.shared, self.pool.as_ref())
    }

    /// What each issuer waits for.
    pub(crate) fn waits(&self) -> Vec<WaitRow> {
        view::waits(&self.shared)
    }

    /// Every device's advice budget.
    pub(crate) fn advice_budget(&self) -> Vec<view::AdviceBudgetRow> {
        view::advice_budget(&self.shared)
    }

    /// The worker pool, under the worker method.
    pub(crate) fn worker_pool(&self) -> Option<view::WorkerPoolRow> {
        view::worker_pool(self.pool.as_ref())
    }

    /// Per-issuer statistics.
    pub(crate) fn stat_rows(&self) -> Vec<IssuerStatsRow> {
        self.stats.rows(&self.shared)
    }
}
