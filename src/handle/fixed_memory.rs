//! Memory the kernel may keep pinned: what a layer above (the buffer pool) offers a method to
//! register once (io_uring's fixed buffers, `io_uring_registered_buffers`), and what came of
//! it, for `Aio::registered_buffers`, the view and the `dbaio` command. Here, below both the
//! methods and the view, so that each names it without naming the other. See
//! `docs/design.md`, "Registered buffers".

use std::sync::Arc;

/// An attachment's memory for registration with the kernel (see
/// [`Attachment::fixed_memory`](super::shared::Attachment::fixed_memory)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FixedMemory {
    /// None to register.
    None,
    /// Not yet: its pages are still being faulted in on a background thread (registering
    /// now would fault the rest in on the registering thread, all at once). Ask again.
    Later,
    /// `len` bytes at the address.
    Ready(*const u8, usize),
}

/// What `io_uring_registered_buffers` achieved: the buffer pool's memory registered with the
/// rings made so far (each issuer's ring registers it when it is made, or at its first
/// submission once the pool's pages are in), the `IoBuf` memory registered, or the kernel's
/// refusal, in the words the log gave it once (the pool's first).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RegisteredBuffers {
    /// Rings that registered the pool's memory.
    pub rings: u32,
    /// Bytes registered with each of them (the pool's pages).
    pub bytes: usize,
    /// Bytes of `IoBuf` memory (the registered-buffer slab, which `IoBuf`s made after an
    /// io_uring subsystem with the setting on started come from) registered with the ring
    /// that has registered the most.
    #[serde(default)]
    pub io_buf_bytes: usize,
    /// Reads and writes submitted as fixed ones (into or out of the registered memory).
    pub fixed_ios: u64,
    /// Why the kernel refused, if it did (rings made after a refusal do not try).
    pub refused: Option<String>,
}

/// Reads the [`RegisteredBuffers`] of a running method (shared with the socket's thread).
pub(crate) type RegisteredBuffersReader = Arc<dyn Fn() -> RegisteredBuffers + Send + Sync>;
