//! `dbaio-workers`: the worker engine beneath dbaio's `worker` method.
//!
//! It executes *plain* I/O requests ([`dbaio_sys::Request`]: op, fd, offset, iovecs, user
//! data) on a pool of workers — threads, or processes — and posts each completion (user
//! data, raw result) to a sink. It knows nothing of dbaio's handles, states or callbacks;
//! `src/method/worker.rs` in the root crate adapts handles to it. What it stands on (the
//! request, `perform`, the futex, the shared arena) is `dbaio-sys`. See `docs/design.md`,
//! "Engines".
//!
//! File map:
//! - `pool.rs` — [`WorkerPool`]: a bounded queue, the lowest idle worker woken on submit, sized
//!   between a minimum and a maximum by demand ([`PoolSize`]), drain on stop.
//! - `tally.rs` — `WakeTally`, the count of met and short wakes per sizing window that decides
//!   whether a self-sizing pool (threads or processes) grows.
//! - `process/` — worker processes: `mod.rs` the embedder's side ([`process::ProcessPool`],
//!   its supervisor and completer threads), `control.rs` the shared control segment (request
//!   cells, bitmaps, worker and file cells), `child.rs` the worker process itself, `wake.rs`
//!   how waiting embedder threads are woken (model-checked with loom).

mod pool;
pub mod process;
mod tally;

/// How many more idle workers a worker that took a request wakes, at most, while it still
/// sees more queued than are coming to the queue; a submission wakes one. PostgreSQL's
/// `IO_WORKER_WAKEUP_FANOUT`. Both kinds of pool use it.
const WAKE_FANOUT: u32 = 2;

pub use pool::{
    CompletionSink, MAX_WORKERS, PoolObserver, PoolSize, PoolSnapshot, WorkerPool, WorkerRow,
};
