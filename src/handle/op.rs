//! Operations and handle flags. See `docs/design.md`, "Ops".

use dbaio_workers::OpCode;

/// What an I/O does. The numbering is stable because it is stored in the handle table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// No operation defined yet.
    Invalid = 0,
    /// Vectored read.
    Readv = 1,
    /// Vectored write.
    Writev = 2,
    /// `fsync`.
    Fsync = 3,
    /// `fdatasync`.
    Fdatasync = 4,
    /// `unlink`.
    Unlink = 5,
    /// `posix_fadvise(POSIX_FADV_WILLNEED)`.
    FadviseWillneed = 6,
    /// `fallocate` (mode 0).
    Fallocate = 7,
    /// `ftruncate`.
    Ftruncate = 8,
}

impl Op {
    pub(crate) fn from_u8(v: u8) -> Op {
        match v {
            1 => Op::Readv,
            2 => Op::Writev,
            3 => Op::Fsync,
            4 => Op::Fdatasync,
            5 => Op::Unlink,
            6 => Op::FadviseWillneed,
            7 => Op::Fallocate,
            8 => Op::Ftruncate,
            _ => Op::Invalid,
        }
    }

    /// The name the aios view shows (`readv`, `writev`, …; `invalid` before definition).
    pub fn name(self) -> &'static str {
        match self {
            Op::Invalid => "invalid",
            Op::Readv => "readv",
            Op::Writev => "writev",
            Op::Fsync => "fsync",
            Op::Fdatasync => "fdatasync",
            Op::Unlink => "unlink",
            Op::FadviseWillneed => "fadvise",
            Op::Fallocate => "fallocate",
            Op::Ftruncate => "ftruncate",
        }
    }

    /// True for ops that move bytes between memory and the file.
    pub fn transfers_data(self) -> bool {
        matches!(self, Op::Readv | Op::Writev)
    }

    pub(crate) fn engine_code(self) -> OpCode {
        match self {
            Op::Readv => OpCode::Readv,
            Op::Writev => OpCode::Writev,
            Op::Fsync => OpCode::Fsync,
            Op::Fdatasync => OpCode::Fdatasync,
            Op::Unlink => OpCode::Unlink,
            Op::FadviseWillneed => OpCode::FadviseWillneed,
            Op::Fallocate => OpCode::Fallocate,
            Op::Ftruncate => OpCode::Ftruncate,
            Op::Invalid => unreachable!("an undefined handle is never executed"),
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
