//! [`Op`]: what an I/O does — the one list every layer and engine uses (the handle table, the
//! worker processes' request cells, the io_uring entries, the view's names).

/// What an I/O does. The numbering is stable: it is stored as a byte in the handle table and
/// in worker processes' request cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// No operation defined yet.
    Invalid = 0,
    /// Vectored read: `preadv(fd, iov, iovcnt, offset)`.
    Readv = 1,
    /// Vectored write: `pwritev(fd, iov, iovcnt, offset)`.
    Writev = 2,
    /// `fsync(fd)`.
    Fsync = 3,
    /// `fdatasync(fd)`.
    Fdatasync = 4,
    /// `unlink(path)`.
    Unlink = 5,
    /// `posix_fadvise(fd, offset, len, POSIX_FADV_WILLNEED)`.
    FadviseWillneed = 6,
    /// `fallocate(fd, 0, offset, len)`.
    Fallocate = 7,
    /// `ftruncate(fd, len)`.
    Ftruncate = 8,
    /// `renameat(AT_FDCWD, from, AT_FDCWD, to)`: the request's path holds both, back to back
    /// ([`second_path`](crate::second_path)).
    Rename = 9,
}

impl Op {
    /// The op stored as `op as u8`; [`Op::Invalid`] for anything else.
    pub fn from_stored(v: u8) -> Op {
        match v {
            1 => Op::Readv,
            2 => Op::Writev,
            3 => Op::Fsync,
            4 => Op::Fdatasync,
            5 => Op::Unlink,
            6 => Op::FadviseWillneed,
            7 => Op::Fallocate,
            8 => Op::Ftruncate,
            9 => Op::Rename,
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
            Op::Rename => "rename",
        }
    }

    /// True for ops that move bytes between memory and the file.
    pub fn transfers_data(self) -> bool {
        matches!(self, Op::Readv | Op::Writev)
    }

    /// True for ops that may change the file (their effect is unknown when the executor
    /// dies after the system call).
    pub fn changes_file(self) -> bool {
        matches!(
            self,
            Op::Writev | Op::Unlink | Op::Fallocate | Op::Ftruncate | Op::Rename
        )
    }

    /// True for ops on a path rather than on an open file (unlink, rename).
    pub fn on_path(self) -> bool {
        matches!(self, Op::Unlink | Op::Rename)
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
