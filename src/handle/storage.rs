//! Where a subsystem's files live when they are not in the kernel's file systems: the
//! [`Storage`] a method above may put under the handle layer (`io_method = sim` keeps its
//! files on a simulated disk in memory). With one set, files are opened, sized and executed
//! against it instead of the kernel — through the same paths as ever: `File::open`,
//! `File::len`, and the one way a thread executes an I/O (`Shared::run_here`). See
//! `docs/design.md`, "The simulated disk".

use dbaio_sys::Request;
use std::os::fd::{OwnedFd, RawFd};
use std::path::Path;

/// How a file is opened (the `open(2)` flags that matter to a store).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenMode {
    /// Writable.
    pub write: bool,
    /// Created if missing.
    pub create: bool,
    /// Truncated to zero length.
    pub truncate: bool,
    /// O_DIRECT: transfers must be aligned.
    pub direct: bool,
}

/// A store of files other than the kernel's.
pub(crate) trait Storage: Send + Sync {
    /// Opens `path`: a descriptor that stands for the opened file — used as its key in
    /// requests and for byte-range locks, never for its data — or the error `open(2)` would
    /// give (ENOENT, EISDIR, …).
    fn open(&self, path: &Path, mode: OpenMode) -> std::io::Result<OwnedFd>;
    /// Executes `req` on the file its descriptor stands for: the raw result, bytes or
    /// `-errno`, as `dbaio_sys::perform` gives it for a real file.
    ///
    /// # Safety
    ///
    /// As `dbaio_sys::perform`: the iovecs and path of `req` are valid for the call.
    unsafe fn perform(&self, req: &Request) -> i32;
    /// The size of the file descriptor `fd` stands for.
    fn len(&self, fd: RawFd) -> std::io::Result<u64>;
    /// Descriptor `fd` is about to be closed.
    fn closing(&self, fd: RawFd);
    /// The store's own clock, in nanoseconds since the subsystem started, if it keeps time
    /// (the simulated disk does: its I/Os take simulated time, and the subsystem's I/O
    /// clock — staging, completion, waits, the view's ages — reads it instead of the host's).
    fn clock_ns(&self) -> Option<u64> {
        None
    }
}
