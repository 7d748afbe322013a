//! [`File`] and [`OpenOptions`], and `FaultRule::on_file` (here: the handle layer knows no `File`).
//!
//! A [`File`] is a file known to the subsystem, the target of I/Os.
//! Opening takes a slot in the file table (`handle/files.rs`); the descriptor closes when the
//! last `File` clone and the last I/O on it are gone, and then the layers above hear of it
//! (the buffer manager forgets the file's pages). See `docs/design.md`, "The API".

use super::subsystem::AioInner;
use crate::handle::error::AioError;
use crate::handle::storage::OpenMode;
use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// How to open a file (like `std::fs::OpenOptions`, plus O_DIRECT).
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Open for writing too.
    pub write: bool,
    /// Create it if missing (implies `write`).
    pub create: bool,
    /// Truncate it to zero length (needs `write` or `create`: a read-only open that would
    /// truncate is refused, as `std::fs::OpenOptions` refuses it).
    pub truncate: bool,
    /// O_DIRECT; `None` takes the `direct_io` setting.
    pub direct: Option<bool>,
    /// For a segment of a relation split into files (`16403`, `16403.1`, …): the
    /// relation-wide number of the file's first block. Page checksums mix in that number, and
    /// messages name the relation (the path without its `.N` suffix).
    pub segment_base: u32,
}

impl OpenOptions {
    /// Read-only.
    pub fn read() -> OpenOptions {
        OpenOptions::default()
    }
    /// Read-write, created if missing.
    pub fn read_write() -> OpenOptions {
        OpenOptions {
            write: true,
            create: true,
            ..OpenOptions::default()
        }
    }
    /// Sets O_DIRECT explicitly.
    pub fn direct(mut self, on: bool) -> OpenOptions {
        self.direct = Some(on);
        self
    }
    /// Truncates on open.
    pub fn truncate(mut self, on: bool) -> OpenOptions {
        self.truncate = on;
        self
    }
    /// Marks the file as the segment of a relation whose first block is `first_block`.
    pub fn segment_base(mut self, first_block: u32) -> OpenOptions {
        self.segment_base = first_block;
        self
    }
}

/// A file known to the subsystem: the target of I/Os. Cloning is cheap; the descriptor closes
/// when the last clone and the last I/O on it are gone.
pub struct File {
    pub(crate) aio: Arc<AioInner>,
    pub(crate) slot: u32,
}

impl File {
    pub(crate) fn open(
        aio: &Arc<AioInner>,
        path: &Path,
        opts: &OpenOptions,
    ) -> Result<File, AioError> {
        if aio.shared.shutting_down.load(Ordering::SeqCst) {
            // A slot freed after shutdown keeps its buffers (see `release_file`).
            return Err(AioError::ShutDown);
        }
        let refused = |source: std::io::Error| AioError::Open {
            path: path.display().to_string(),
            source,
        };
        if opts.truncate && !(opts.write || opts.create) {
            // Linux truncates a file opened read-only with O_TRUNC; std refuses the options,
            // and so does this (found by a caller-side attack, 2026-12-08: a read-only open
            // emptied the file).
            return Err(refused(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "truncating a file requires write access (OpenOptions::read_write, or \
                 write: true)",
            )));
        }
        let direct = opts.direct.unwrap_or(aio.shared.settings.direct_io);
        let table = &aio.shared.files;
        let slot = table
            .free
            .lock()
            .pop()
            .ok_or(AioError::TooManyFiles(table.slots.len() as u32))?;
        match Self::open_descriptor(aio, path, opts, direct) {
            Ok(fd) => {
                Self::fill_slot(aio, slot, fd, path, opts, direct);
                Ok(File {
                    aio: Arc::clone(aio),
                    slot,
                })
            }
            Err(source) => {
                table.free_slot(slot);
                Err(refused(source))
            }
        }
    }

    /// Opens `path` as `opts` say: in the kernel, or on the subsystem's storage (`sim`).
    fn open_descriptor(
        aio: &AioInner,
        path: &Path,
        opts: &OpenOptions,
        direct: bool,
    ) -> std::io::Result<RawFd> {
        let write = opts.write || opts.create;
        // A path with a NUL byte in it names no file, in the kernel or on `sim`.
        let cpath = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        if let Some(store) = &aio.shared.storage {
            let mode = OpenMode {
                write,
                create: opts.create,
                truncate: opts.truncate,
                direct,
            };
            return store
                .open(path, mode)
                .map(std::os::fd::IntoRawFd::into_raw_fd);
        }
        let mut flags = libc::O_CLOEXEC;
        flags |= if write { libc::O_RDWR } else { libc::O_RDONLY };
        if opts.create {
            flags |= libc::O_CREAT;
        }
        if opts.truncate {
            flags |= libc::O_TRUNC;
        }
        if direct {
            flags |= libc::O_DIRECT;
        }
        // SAFETY: cpath is a valid NUL-terminated string for the duration of the call.
        let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o644 as libc::c_uint) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fd)
    }

    /// Records open descriptor `fd` of `path` in file slot `slot` and tells the method.
    fn fill_slot(
        aio: &AioInner,
        slot: u32,
        fd: RawFd,
        path: &Path,
        opts: &OpenOptions,
        direct: bool,
    ) {
        let s = &aio.shared.files.slots[slot as usize];
        *s.path.write() = Some(Arc::from(PathBuf::from(path)));
        s.direct.store(direct, Ordering::Relaxed);
        s.blocking_buffered_writes.store(
            !direct && !crate::handle::files::nowait_buffered_writes(fd),
            Ordering::Relaxed,
        );
        s.segment_base.store(opts.segment_base, Ordering::Relaxed);
        let identity = crate::handle::files::identity_of(fd);
        s.device.store(identity.0, Ordering::Relaxed);
        s.rmw_stripe.store(
            crate::handle::files::rmw_stripe(identity),
            Ordering::Relaxed,
        );
        s.refs.store(1, Ordering::Relaxed);
        s.fd.store(fd, Ordering::Release);
        aio.method.file_opened(slot, fd);
    }

    /// Takes a byte-range lock on `start .. start + len` (`len` 0: to the end of the file and
    /// beyond), exclusive or shared, without waiting: `Ok(false)` if another holder's lock
    /// conflicts. Locks are open-file-description locks (`F_OFD_SETLK`): they belong to this
    /// opened file — every clone of this `File` — and conflict with locks taken through any
    /// other open of the same file, in this process or another. They go when the file's
    /// descriptor closes.
    ///
    /// A lock is not an I/O: it never reaches the device, and a lock that waits would hold a
    /// worker (or an io_uring slot) hostage, so locks are plain calls on the caller's thread.
    pub fn try_lock_range(&self, start: u64, len: u64, exclusive: bool) -> std::io::Result<bool> {
        let lock = if exclusive {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        };
        match self.fcntl_lock(libc::F_OFD_SETLK, lock as i16, start, len) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Takes a byte-range lock like [`File::try_lock_range`], waiting for conflicting locks to
    /// go.
    pub fn lock_range(&self, start: u64, len: u64, exclusive: bool) -> std::io::Result<()> {
        let lock = if exclusive {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        };
        loop {
            match self.fcntl_lock(libc::F_OFD_SETLKW, lock as i16, start, len) {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                other => return other.map(|_| ()),
            }
        }
    }

    /// Releases this file's locks on `start .. start + len`.
    pub fn unlock_range(&self, start: u64, len: u64) -> std::io::Result<()> {
        self.fcntl_lock(libc::F_OFD_SETLK, libc::F_UNLCK as i16, start, len)
            .map(|_| ())
    }

    /// True if an exclusive lock on the range would conflict with a lock held through another
    /// open of the file.
    pub fn is_range_locked_elsewhere(&self, start: u64, len: u64) -> std::io::Result<bool> {
        let fl = self.fcntl_lock(libc::F_OFD_GETLK, libc::F_WRLCK as i16, start, len)?;
        Ok(fl.l_type != libc::F_UNLCK as i16)
    }

    fn fcntl_lock(
        &self,
        cmd: libc::c_int,
        kind: i16,
        start: u64,
        len: u64,
    ) -> std::io::Result<libc::flock> {
        let too_big = || std::io::Error::from_raw_os_error(libc::EOVERFLOW);
        let mut fl = libc::flock {
            l_type: kind,
            l_whence: libc::SEEK_SET as i16,
            l_start: i64::try_from(start).map_err(|_| too_big())?,
            l_len: i64::try_from(len).map_err(|_| too_big())?,
            l_pid: 0,
        };
        // SAFETY: `fl` is a valid flock for the duration of the call; the descriptor is ours
        // (this `File` holds a reference, so it is open).
        let r = unsafe { libc::fcntl(self.raw_fd(), cmd, &mut fl) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fl)
    }

    /// Held while a read-modify-write slice write runs on this file (shared by every open
    /// of it in this subsystem: the lock goes by inode).
    pub(crate) fn rmw_lock(&self) -> parking_lot::MutexGuard<'_, ()> {
        let files = &self.aio.shared.files;
        let stripe = files.slots[self.slot as usize]
            .rmw_stripe
            .load(Ordering::Relaxed);
        files.rmw[stripe as usize].lock()
    }

    /// The path it was opened with.
    pub fn path(&self) -> Arc<Path> {
        self.aio.shared.files.path(self.slot)
    }

    /// The relation-wide number of the file's block 0 ([`OpenOptions::segment_base`]).
    pub fn segment_base(&self) -> u32 {
        self.aio.shared.files.segment_base(self.slot)
    }

    /// True if opened with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.aio.shared.files.slots[self.slot as usize]
            .direct
            .load(Ordering::Relaxed)
    }

    /// The raw descriptor (valid while this `File` lives).
    pub fn raw_fd(&self) -> RawFd {
        self.aio.shared.files.slots[self.slot as usize]
            .fd
            .load(Ordering::Acquire)
    }

    /// The file's current size in bytes.
    pub fn len(&self) -> std::io::Result<u64> {
        if let Some(store) = &self.aio.shared.storage {
            return store.len(self.raw_fd());
        }
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes a full `stat` into the buffer on success.
        let r = unsafe { libc::fstat(self.raw_fd(), st.as_mut_ptr()) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fstat succeeded, so the struct is initialised.
        Ok(unsafe { st.assume_init() }.st_size as u64)
    }

    /// True if the file is empty.
    pub fn is_empty(&self) -> std::io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

impl crate::handle::fault::FaultRule {
    /// Restricts the rule to I/Os on `file`. (Defined with `File`, which the handle layer,
    /// where fault rules live, does not know.)
    pub fn on_file(mut self, file: &File) -> Self {
        self.file = Some(file.slot);
        self
    }
}

impl Clone for File {
    fn clone(&self) -> File {
        self.aio.shared.files.add_ref(self.slot);
        File {
            aio: Arc::clone(&self.aio),
            slot: self.slot,
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        self.aio.release_file(self.slot);
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "File({:?})", self.path())
    }
}
