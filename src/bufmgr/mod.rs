//! The buffer manager: a pool of fixed-size pages over the handle API, as PostgreSQL's
//! bufmgr sits over its aio.
//!
//! - `pool.rs` — pages, descriptors, the tag → buffer mapping, clock sweep, lock-free hits,
//!   buffer I/O state, and the `buffer-readv` completion callback.
//! - `hit_pin.rs` — the handshake between a lock-free hit and an evictor (model-checked).
//! - `ring.rs` — buffer access strategy rings (PostgreSQL's `BAS_BULKREAD`).
//! - `read.rs` — reading blocks: one block ([`Issuer::read_block`](crate::Issuer)), or a
//!   run of consecutive blocks as one vectored read.
//! - `stream.rs` — read streams: look-ahead distance, combining, buffers in order.
//! - `advice.rs` — a stream's readahead advice: sequential rule, device budget, adaptive
//!   distance.
//! - `relation.rs` — a relation's segment files, by relation-wide block number.
//! - `verification.rs` — page verification at completion: the trait, the modes, PostgreSQL's
//!   messages.
//!
//! May use: the API (issuers, handles, files), the handle layer, and `dbaio-pg` (page
//! format). It plugs into the handle layer through that layer's own interfaces: a callback
//! kind (`buffer-readv`) and an attachment (told of issuers and closed files). Nothing below
//! names it. See `docs/design.md`, "The buffer manager".

pub(crate) mod advice;
pub(crate) mod hit_pin;
pub(crate) mod pool;
pub(crate) mod read;
pub(crate) mod relation;
pub(crate) mod ring;
pub(crate) mod stream;
pub(crate) mod verification;
