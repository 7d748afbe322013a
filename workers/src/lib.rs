//! `dbaio-workers`: the worker engine beneath dbaio's `worker` method.
//!
//! It executes *plain* I/O requests ([`Request`]: op code, fd, offset, iovecs, user data) on a
//! pool of threads and posts each completion (user data, raw result) to a [`CompletionSink`].
//! It knows nothing of dbaio's handles, states or callbacks; `src/method/worker.rs` in the root
//! crate adapts handles to it. See `docs/design.md`, section "Engines".
//!
//! File map:
//! - `request.rs` — [`Request`], [`OpCode`] and [`perform`], the blocking executor that the
//!   `sync` method, the worker threads and io_uring's retry path all share.
//! - `pool.rs` — [`WorkerPool`]: a bounded queue, the lowest idle worker woken on submit, sized
//!   between a minimum and a maximum by demand ([`PoolSize`]), drain on stop.
//! - `futex.rs` — the futex wait/wake used for wakeups (works in shared mappings too).

pub mod futex;
mod pool;
mod request;

pub use pool::{
    CompletionSink, MAX_WORKERS, PoolObserver, PoolSize, PoolSnapshot, WorkerPool, WorkerRow,
};
pub use request::{OpCode, Request, perform};
