//! The adversarial concurrency suite: threads wait on, reap and run each other's I/Os at
//! every moment, on every column (sync, worker threads fixed and self-sizing, worker
//! processes fixed and self-sizing, io_uring). Each scenario runs its threads for a second
//! by default (`DBAIO_ATTACK_SECS` for longer: the long pass is
//! `DBAIO_ATTACK_SECS=120 cargo test --release --test adversarial`), under a watchdog that
//! prints every thread's state and the aios view and fails instead of hanging, and asserts
//! that no wait was ended by a safety-net timeout. One scenario per file.
//! Guards against: races between the waiters, reapers and executors of the same I/O (lost
//! wake-ups, double completion, hangs) that orderly tests never interleave.

mod board;
mod harness;
#[path = "../common/skips.rs"]
mod skips;

mod buffer_readers;
mod foreign_wait_on_batches;
mod futures_and_detached;
mod issuer_runs_its_own;
mod killed_workers;
mod mesh;
mod retries;
mod signals;
