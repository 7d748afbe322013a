//! The API an engine calls: [`Aio`](subsystem::Aio) (the started subsystem), issuers, the
//! handle values a caller holds (`Handle`, `InFlight`, `Completion`), owned I/O memory
//! (`IoBuf`) and files.
//!
//! Owns: each issuer's private bookkeeping (idle handles, batch, in-flight list, parked
//! memory), the rules of buffer ownership, and the file references callers hold.
//! May use: the handle layer, the methods (through the `IoMethod` trait), and the introspect
//! layer (stats recording, the socket's lifetime). Never the buffer manager, which sits
//! above it. See `docs/design.md`, "The API".

pub(crate) mod any_thread;
pub(crate) mod file;
mod inline;
pub(crate) mod io;
pub(crate) mod iobuf;
pub(crate) mod issuer;
mod lifecycle;
pub(crate) mod slice;
pub(crate) mod subsystem;
pub(crate) mod ticket;
