//! Errors: [`AioError`] for starting and using the subsystem, [`IoError`] for a failed I/O.
//!
//! An `IoError` names the op, the file, the offset, the length and the errno, and reads like
//! PostgreSQL's messages (`could not read blocks 4..7 in file "base/5/16403": …`). See
//! `docs/design.md`, "Results and errors".

use crate::handle::op::Op;
use crate::handle::settings::SettingsError;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Errors from starting or using the subsystem (not from an individual I/O). More may be
/// added: match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AioError {
    /// A bad setting.
    #[error("{0}")]
    Settings(#[from] SettingsError),
    /// `io_method = io_uring` was refused and `io_uring_fallback = error`.
    #[error(
        "could not start io_method \"io_uring\": {cause}\nHINT:  Allow io_uring, or set io_uring_fallback = worker (or sync) to start with another method, or choose io_method = worker."
    )]
    IoUringRefused {
        /// Why the kernel refused.
        cause: String,
    },
    /// The shared region, a ring or a worker thread could not be created.
    #[error("could not start the AIO subsystem: {0}")]
    Start(std::io::Error),
    /// The buffer pool's memory could not be mapped.
    #[error(
        "could not map the buffer pool ({} MB{}): {source}\nHINT:  {}",
        bytes >> 20,
        if *huge { " of huge pages" } else { "" },
        if *huge {
            "Reserve enough huge pages (sysctl vm.nr_hugepages), or set huge_pages = try."
        } else {
            "Lower buffer_pool_size."
        }
    )]
    BufferPool {
        /// Bytes asked for.
        bytes: u64,
        /// `huge_pages = on` was required.
        huge: bool,
        /// The OS error.
        source: std::io::Error,
    },
    /// A rule of the handle API was broken (a bug in the caller).
    #[error("API violation: {0}")]
    ApiViolation(&'static str),
    /// io_uring: a new issuer's ring could not be created (the subsystem runs; this issuer
    /// cannot be registered).
    #[error(
        "could not register an issuer: its io_uring ring could not be created: {cause}\nHINT:  Each issuer has a ring of its own (a file descriptor and locked memory): raise the limit named, or register fewer issuers (max_issuers)."
    )]
    IssuerRing {
        /// Why the kernel refused.
        cause: String,
    },
    /// All `max_issuers` issuer slots are taken.
    #[error("too many issuers: all {0} slots are in use\nHINT:  Raise max_issuers.")]
    TooManyIssuers(u32),
    /// All `max_files` file slots are taken.
    #[error(
        "too many open files in the AIO subsystem: all {0} slots are in use\nHINT:  Raise max_files."
    )]
    TooManyFiles(u32),
    /// Every buffer of the pool is pinned.
    #[error(
        "no unpinned buffers available\nHINT:  Raise buffer_pool_size, or hold fewer buffers pinned."
    )]
    NoUnpinnedBuffers,
    /// One buffer holds as many pins as its pin count can (a caller pinning the same block
    /// over and over without dropping the pins).
    #[error(
        "could not pin block {block} of file \"{path}\": buffer {buffer} is already pinned {limit} times, the most one buffer can be\nHINT:  Drop pins of the block (PinnedBuffer, StreamBuffer) before taking more."
    )]
    PinnedTooOften {
        /// The file's path.
        path: String,
        /// The block, numbered across the relation for a segment file.
        block: u32,
        /// The buffer holding it.
        buffer: u32,
        /// Pins one buffer's count holds.
        limit: u32,
    },
    /// The subsystem is shutting down.
    #[error("the AIO subsystem is shut down")]
    ShutDown,
    /// Too many buffers for one vectored I/O.
    #[error(
        "{given} buffers exceed the {max} iovecs a handle holds\nHINT:  Raise io_max_combine_limit."
    )]
    TooManyBuffers {
        /// Buffers passed.
        given: usize,
        /// `io_max_combine_limit`.
        max: usize,
    },
    /// Opening a file failed.
    #[error("could not open file \"{path}\": {source}")]
    Open {
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The introspection socket could not be created.
    #[error(
        "could not create introspection socket \"{path}\": {source}\nHINT:  Choose another introspection_socket path, or leave it empty."
    )]
    Introspection {
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An I/O failed (boxed: an `IoError` carries its messages, and this enum stays small).
    #[error(transparent)]
    Io(Box<IoError>),
}

impl IoError {
    /// The [`std::io::ErrorKind`] this failure is: the errno's kind; with no errno, a short
    /// read is `UnexpectedEof` (the end of the file came first), a short write `WriteZero`,
    /// and a callback's verdict (an invalid page) `InvalidData`.
    pub fn kind(&self) -> std::io::ErrorKind {
        use std::io::ErrorKind;
        if self.errno > 0 {
            return std::io::Error::from_raw_os_error(self.errno).kind();
        }
        if self.detail.is_some() || self.message.is_some() || self.invalid_pages > 0 {
            return ErrorKind::InvalidData;
        }
        match self.op {
            Op::Writev => ErrorKind::WriteZero,
            _ => ErrorKind::UnexpectedEof,
        }
    }
}

/// An I/O failure as a `std::io::Error`: its [`IoError::kind`], with the `IoError` inside (its
/// message names op, file, offset and errno; `get_ref` or `downcast` give it back, errno
/// included).
impl From<IoError> for std::io::Error {
    fn from(e: IoError) -> std::io::Error {
        std::io::Error::new(e.kind(), e)
    }
}

/// A subsystem error as a `std::io::Error`, for code that speaks `std::io` (a storage
/// backend trait): I/O failures as [`IoError`]'s conversion; a failed open keeps its OS
/// error's kind; bad settings and API misuse are `InvalidInput`; exhausted issuers, files,
/// handles or buffers are `ResourceBusy`; a shut-down subsystem is `NotConnected`. The
/// `AioError` is inside (`get_ref`, `into_inner`).
impl From<AioError> for std::io::Error {
    fn from(e: AioError) -> std::io::Error {
        use std::io::ErrorKind;
        let kind = match &e {
            AioError::Io(io) => return std::io::Error::from((**io).clone()),
            AioError::Open { source, .. }
            | AioError::Introspection { source, .. }
            | AioError::Start(source)
            | AioError::BufferPool { source, .. } => source.kind(),
            AioError::Settings(_)
            | AioError::ApiViolation(_)
            | AioError::TooManyBuffers { .. }
            | AioError::IoUringRefused { .. } => ErrorKind::InvalidInput,
            AioError::TooManyIssuers(_)
            | AioError::IssuerRing { .. }
            | AioError::TooManyFiles(_)
            | AioError::NoUnpinnedBuffers
            | AioError::PinnedTooOften { .. } => ErrorKind::ResourceBusy,
            AioError::ShutDown => ErrorKind::NotConnected,
        };
        std::io::Error::new(kind, e)
    }
}

impl AioError {
    /// An I/O failure from one part of a request, told of the whole request (see
    /// `IoError::for_request`); other errors as they are.
    pub(crate) fn for_request(self, op: Op, offset: u64, length: u64) -> AioError {
        match self {
            AioError::Io(e) => AioError::Io(Box::new(e.for_request(op, offset, length))),
            e => e,
        }
    }
}

impl From<IoError> for AioError {
    fn from(e: IoError) -> AioError {
        AioError::Io(Box::new(e))
    }
}

/// A failed I/O: what, where, how much, and the OS error.
#[derive(Clone, Debug)]
pub struct IoError {
    /// The operation.
    pub op: Op,
    /// The file (for unlink: the path removed; for rename: the path renamed).
    pub path: Arc<Path>,
    /// For rename: the new path (boxed: a rare field, one word).
    pub new_path: Option<Box<std::path::PathBuf>>,
    /// File offset in bytes.
    pub offset: u64,
    /// Bytes asked for (or the length/size argument).
    pub length: u64,
    /// Bytes actually transferred, for a short transfer.
    pub transferred: u64,
    /// The OS error number (0: end of file, or a failure a callback reported).
    pub errno: i32,
    /// First block and count when the I/O was block I/O (on a relation's segment, numbered
    /// across the relation, as md.c's messages do: `OpenOptions::segment_base`).
    pub blocks: Option<(u32, u32)>,
    /// A callback's own message, when a callback (not the OS) failed the I/O.
    pub detail: Option<Box<str>>,
    /// A callback's whole message, replacing the `could not read …` line (a page
    /// verification failure reads `invalid page in block 3 of relation "…"`).
    pub message: Option<Box<str>>,
    /// How to fix it, when known (e.g. O_DIRECT alignment).
    pub hint: Option<&'static str>,
    /// Pages a verifier found invalid (0 for an OS error).
    pub invalid_pages: u32,
}

impl std::error::Error for IoError {}

/// Hint given for an I/O asked on a `File` of another subsystem.
pub(crate) const FOREIGN_FILE_HINT: &str =
    "The file was opened by another Aio than this issuer's; open it with the issuer's own Aio.";

/// Hint given for EINVAL on an O_DIRECT file.
pub(crate) const DIRECT_HINT: &str = "O_DIRECT needs the offset, the length and the buffer address aligned to the device's logical block size (usually 512 or 4096 bytes).";

impl IoError {
    /// The OS error, if there was one.
    pub fn os_error(&self) -> Option<std::io::Error> {
        (self.errno > 0).then(|| std::io::Error::from_raw_os_error(self.errno))
    }

    /// This error, from one part of a request continued after short transfers, told of the
    /// whole request: `length` bytes at `offset`, of which the bytes up to where this part
    /// stopped were transferred (every part before it was whole). Block I/O, and an error of
    /// another op (the read of a read-modify-write), are left as they are.
    pub(crate) fn for_request(mut self, op: Op, offset: u64, length: u64) -> IoError {
        if self.op == op && self.blocks.is_none() {
            let stopped = self.offset.saturating_add(self.transferred);
            self.transferred = stopped.saturating_sub(offset).min(length);
            (self.offset, self.length) = (offset, length);
        }
        self
    }

    /// Where it failed, in PostgreSQL's words: block I/O names its blocks (`blocks 4..4`
    /// even for one, as md.c does), other I/O its bytes.
    fn where_(&self) -> String {
        let p = self.path.display();
        match self.blocks {
            Some((first, n)) => {
                format!("blocks {first}..{} in file \"{p}\"", first + n.max(1) - 1)
            }
            None => format!(
                "{} bytes at offset {} of file \"{p}\"",
                self.length, self.offset
            ),
        }
    }

    /// Bytes transferred as a short transfer is reported: for block I/O whole blocks only
    /// (PostgreSQL counts blocks: a torn last block of 100 bytes reads `read only 0 of 8192
    /// bytes`), otherwise every byte.
    fn reported_transfer(&self) -> u64 {
        match self.blocks {
            Some((_, n)) if n > 0 && self.length >= u64::from(n) => {
                let block = self.length / u64::from(n);
                self.transferred / block * block
            }
            _ => self.transferred,
        }
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        if let Some(m) = &self.message {
            f.write_str(m)?;
            if let Some(h) = self.hint {
                write!(f, "\nHINT:  {h}")?;
            }
            return Ok(());
        }
        match self.op {
            Op::Readv => write!(f, "could not read {}", self.where_())?,
            Op::Writev => write!(f, "could not write {}", self.where_())?,
            Op::Fsync => write!(f, "could not fsync file \"{p}\"")?,
            Op::Fdatasync => write!(f, "could not fdatasync file \"{p}\"")?,
            Op::Unlink => write!(f, "could not remove file \"{p}\"")?,
            Op::Rename => write!(
                f,
                "could not rename file \"{p}\" to \"{}\"",
                self.new_path
                    .as_deref()
                    .map_or(Path::new("?"), |p| p)
                    .display()
            )?,
            Op::FadviseWillneed => write!(f, "could not prefetch {}", self.where_())?,
            Op::Fallocate => write!(f, "could not allocate {}", self.where_())?,
            Op::Ftruncate => write!(
                f,
                "could not truncate file \"{p}\" to {} bytes",
                self.length
            )?,
            Op::Invalid => write!(f, "could not perform I/O on file \"{p}\"")?,
        }
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        } else if self.errno > 0 {
            let e = std::io::Error::from_raw_os_error(self.errno);
            let text = e.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text);
            write!(f, ": {text} (errno {})", self.errno)?;
            if self.transferred > 0 {
                // A request continued after a short transfer, failing part-way (a full disk).
                let verb = if self.op == Op::Writev {
                    "written"
                } else {
                    "read"
                };
                write!(
                    f,
                    "; {} of the {} bytes were {verb}",
                    self.transferred, self.length
                )?;
            }
        } else {
            let verb = if self.op == Op::Writev {
                "wrote"
            } else {
                "read"
            };
            write!(
                f,
                ": {verb} only {} of {} bytes",
                self.reported_transfer(),
                self.length
            )?;
        }
        if let Some(h) = self.hint {
            write!(f, "\nHINT:  {h}")?;
        }
        Ok(())
    }
}
