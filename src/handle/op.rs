//! Operations (the foundation's [`Op`]) and handle flags. See `docs/design.md`, "Ops".

/// What an I/O does: the one list, defined in the foundation crate (`dbaio-sys`).
pub use dbaio_sys::Op;

/// Per-handle flags, set while the handle is handed out (PostgreSQL's `PGAIO_HF_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandleFlags(pub u8);

impl HandleFlags {
    /// The caller will wait at once: execute synchronously in every method.
    pub const SYNCHRONOUS: HandleFlags = HandleFlags(1);
    /// The I/O memory is private to the issuer: a worker process could not reach it.
    pub const REFERENCES_LOCAL: HandleFlags = HandleFlags(2);
    /// Page-cache (not O_DIRECT) I/O; io_uring punts it to io-wq when many are in flight.
    pub const BUFFERED: HandleFlags = HandleFlags(4);

    /// True if every flag of `other` is set.
    pub fn contains(self, other: HandleFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for HandleFlags {
    type Output = HandleFlags;
    fn bitor(self, rhs: HandleFlags) -> HandleFlags {
        HandleFlags(self.0 | rhs.0)
    }
}
