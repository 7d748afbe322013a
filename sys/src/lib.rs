//! `dbaio-sys`: what every executor of an I/O stands on, whichever method runs it.
//!
//! - `op.rs` — [`Op`], the one list of what an I/O does (stored as a byte in the handle
//!   table and in worker processes' request cells).
//! - `request.rs` — [`Request`], an I/O as plain data (op, fd, offset, iovecs, path, user
//!   data); [`perform`], the blocking executor every thread that runs an I/O itself uses;
//!   [`try_read_cached`], the page-cache read that never waits for the device.
//! - `retry.rs` — the retry policy: which results are transient and how many times an I/O
//!   is executed in all ([`retry_transient`]).
//! - `futex.rs` — futex wait and wake on a 32-bit word: shared, for a mapping other processes
//!   see, or private, for a word only this process's threads use.
//! - `sched.rs` — [`sched::run_as_batch`]: a worker's `SCHED_BATCH` policy.
//! - `arena.rs` — the shared buffer arena: memfd-backed memory that worker processes reach.
//! - `slab.rs` — the registered-buffer slab: I/O buffers that io_uring rings register once.
//! - `owner.rs` — [`Owner`]: the process that started a background thread, so that drops in
//!   a child made by `fork` leave the parent's threads and files alone.
//!
//! It imports no other dbaio crate; the engines (`dbaio-workers`, `dbaio-uring`) and the
//! library sit on it. See `docs/design.md`, "Engines".

pub mod arena;
pub mod futex;
mod op;
mod owner;
mod request;
mod retry;
pub mod sched;
pub mod slab;

pub use op::Op;
pub use owner::Owner;
pub use request::{
    Cached, MAX_OFFSET, MAX_RW_COUNT, Request, perform, second_path, try_read_cached,
};
pub use retry::{MAX_EXECUTIONS, retry_transient};
