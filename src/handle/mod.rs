//! The handle layer: the table of I/O handles every thread shares, and its protocol.
//!
//! It owns the shared region (handle slots, iovecs, handle data), the eight-state machine
//! of a handle and its one mutator, the issuer slots other threads read (name, thread, wait
//! event, completion counter), the file table, the callback registry, the fault injector,
//! and the two paths every method shares: processing a completion and waiting for one. The
//! settings, ops, results and errors that every layer speaks are defined here too.
//!
//! May use: the foundation (`dbaio-sys`: `Op`, plain requests and `perform`, the retry policy,
//! the futex, the shared arena) and std; no engine (`dbaio-workers`, `dbaio-uring`). Never the
//! methods, the API, the buffer manager or the view: those sit above and plug in through
//! [`callback::HandleCallbacks`] and [`shared::Attachment`]; waiting asks its caller how to
//! drive a completion (a closure) rather than naming a method. See `docs/design.md`, "The
//! handle layer".

pub(crate) mod advice_budget;
pub(crate) mod atomics;
pub(crate) mod bell;
pub(crate) mod callback;
pub(crate) mod describe;
pub(crate) mod error;
pub(crate) mod fault;
pub(crate) mod files;
pub(crate) mod fixed_memory;
pub(crate) mod notice;
pub(crate) mod op;
pub(crate) mod result;
pub mod settings;
pub(crate) mod shared;
pub(crate) mod shmem;
pub(crate) mod slot;
pub(crate) mod state_word;
pub(crate) mod storage;
pub(crate) mod test_hold;
pub(crate) mod wait_event;
