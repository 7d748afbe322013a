//! `dbaio-workers`: the worker engine beneath dbaio's `worker` method.
//!
//! It executes *plain* I/O requests ([`Request`]: op code, fd, offset, iovecs, user data) on a
//! pool of threads and posts each completion (user data, raw result) to a [`CompletionSink`].
//! It knows nothing of dbaio's handles, states or callbacks; `src/method/worker.rs` in the root
//! crate adapts handles to it. See `docs/design.md`, section "Engines".
//!
//! File map:
//! - `request.rs` — [`Request`], [`OpCode`] and [`perform`], the blocking executor that the
//!   `sync` method, the worker threads and io_uring's retry path all share; and
//!   [`try_read_cached`], the non-blocking page-cache read an issuer tries before it hands a
//!   buffered read to a worker.
//! - `pool.rs` — [`WorkerPool`]: a bounded queue, the lowest idle worker woken on submit, sized
//!   between a minimum and a maximum by demand ([`PoolSize`]), drain on stop.
//! - `tally.rs` — `WakeTally`, the count of met and short wakes per sizing window that decides
//!   whether a self-sizing pool (threads or processes) grows.
//! - `futex.rs` — the futex wait/wake used for wakeups (works in shared mappings too).
//! - `arena.rs` — the shared buffer arena: memfd-backed memory worker processes can reach.
//! - `process/` — worker processes: `mod.rs` the embedder's side ([`process::ProcessPool`],
//!   its supervisor and completer threads), `control.rs` the shared control segment (request
//!   cells, bitmaps, worker and file cells), `child.rs` the worker process itself, `wake.rs`
//!   how waiting embedder threads are woken (model-checked with loom).

pub mod arena;
pub mod futex;
mod pool;
pub mod process;
mod request;
mod tally;

pub use pool::{
    CompletionSink, MAX_WORKERS, PoolObserver, PoolSize, PoolSnapshot, WorkerPool, WorkerRow,
};
pub use request::{Cached, OpCode, Request, perform, try_read_cached};
