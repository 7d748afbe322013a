//! Targets: the file table and [`File`].
//!
//! A file known to the subsystem has a slot in a fixed table: its descriptor, whether it was
//! opened O_DIRECT, and its path (enough to reopen it in another process and to describe it in
//! the view). Every user [`File`] value and every I/O defined on it holds a reference; the fd
//! is closed only when the last goes, so an fd is never closed — or its number reused — under
//! an I/O. See `docs/design.md`, "Targets".

use crate::aio::AioInner;
use crate::error::AioError;
use parking_lot::{Mutex, RwLock};
use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

pub(crate) const NO_FILE: u32 = u32::MAX;

pub(crate) struct FileSlot {
    pub fd: AtomicI32,
    pub refs: AtomicU32,
    pub direct: AtomicBool,
    /// The relation-wide number of the file's block 0 (a segment's first block; 0 otherwise).
    pub segment_base: AtomicU32,
    pub path: RwLock<Option<Arc<Path>>>,
}

pub(crate) struct FileTable {
    pub slots: Box<[FileSlot]>,
    free: Mutex<Vec<u32>>,
}

impl FileTable {
    pub(crate) fn new(n: u32) -> FileTable {
        let slots = (0..n)
            .map(|_| FileSlot {
                fd: AtomicI32::new(-1),
                refs: AtomicU32::new(0),
                direct: AtomicBool::new(false),
                segment_base: AtomicU32::new(0),
                path: RwLock::new(None),
            })
            .collect();
        FileTable {
            slots,
            free: Mutex::new((0..n).rev().collect()),
        }
    }

    /// The name messages give a block of file `slot`: the relation's path (a segment's path
    /// without its `.N` suffix) and the relation-wide block number of the file's block 0.
    pub(crate) fn relation(&self, slot: u32) -> (String, u32) {
        let base = self
            .slots
            .get(slot as usize)
            .map_or(0, |s| s.segment_base.load(Ordering::Relaxed));
        let path = self.path(slot).display().to_string();
        if base == 0 {
            return (path, 0);
        }
        let name = match path.rsplit_once('.') {
            Some((rel, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                rel.to_string()
            }
            _ => path,
        };
        (name, base)
    }

    pub(crate) fn path(&self, slot: u32) -> Arc<Path> {
        self.slots
            .get(slot as usize)
            .and_then(|s| s.path.read().clone())
            .unwrap_or_else(|| Arc::from(Path::new("?")))
    }

    pub(crate) fn add_ref(&self, slot: u32) {
        self.slots[slot as usize]
            .refs
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Drops one reference; returns the fd to close when it was the last.
    pub(crate) fn release(&self, slot: u32) -> Option<RawFd> {
        let s = &self.slots[slot as usize];
        if s.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return None;
        }
        let fd = s.fd.swap(-1, Ordering::AcqRel);
        *s.path.write() = None;
        Some(fd)
    }

    pub(crate) fn free_slot(&self, slot: u32) {
        self.free.lock().push(slot);
    }

    pub(crate) fn open_files(&self) -> Vec<(u32, RawFd)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let fd = s.fd.load(Ordering::Acquire);
                (fd >= 0).then_some((i as u32, fd))
            })
            .collect()
    }
}

/// How to open a file (like `std::fs::OpenOptions`, plus O_DIRECT).
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Open for writing too.
    pub write: bool,
    /// Create it if missing (implies `write`).
    pub create: bool,
    /// Truncate it to zero length.
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
        if aio.core.shutting_down.load(Ordering::SeqCst) {
            // A slot freed after shutdown keeps its buffers (see `release_file`).
            return Err(AioError::ShutDown);
        }
        let direct = opts.direct.unwrap_or(aio.core.settings.direct_io);
        let cpath = CString::new(path.as_os_str().as_bytes()).map_err(|_| AioError::Open {
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        })?;
        let mut flags = libc::O_CLOEXEC;
        flags |= if opts.write || opts.create {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        if opts.create {
            flags |= libc::O_CREAT;
        }
        if opts.truncate {
            flags |= libc::O_TRUNC;
        }
        if direct {
            flags |= libc::O_DIRECT;
        }
        let table = &aio.core.files;
        let slot = table
            .free
            .lock()
            .pop()
            .ok_or(AioError::TooManyFiles(table.slots.len() as u32))?;
        // SAFETY: cpath is a valid NUL-terminated string for the duration of the call.
        let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o644 as libc::c_uint) };
        if fd < 0 {
            let source = std::io::Error::last_os_error();
            table.free_slot(slot);
            return Err(AioError::Open {
                path: path.display().to_string(),
                source,
            });
        }
        let s = &table.slots[slot as usize];
        *s.path.write() = Some(Arc::from(PathBuf::from(path)));
        s.direct.store(direct, Ordering::Relaxed);
        s.segment_base.store(opts.segment_base, Ordering::Relaxed);
        s.refs.store(1, Ordering::Relaxed);
        s.fd.store(fd, Ordering::Release);
        aio.method.file_opened(slot, fd);
        Ok(File {
            aio: Arc::clone(aio),
            slot,
        })
    }

    /// The path it was opened with.
    pub fn path(&self) -> Arc<Path> {
        self.aio.core.files.path(self.slot)
    }

    /// The relation-wide number of the file's block 0 ([`OpenOptions::segment_base`]).
    pub fn segment_base(&self) -> u32 {
        self.aio.core.files.slots[self.slot as usize]
            .segment_base
            .load(Ordering::Relaxed)
    }

    /// True if opened with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.aio.core.files.slots[self.slot as usize]
            .direct
            .load(Ordering::Relaxed)
    }

    /// The raw descriptor (valid while this `File` lives).
    pub fn raw_fd(&self) -> RawFd {
        self.aio.core.files.slots[self.slot as usize]
            .fd
            .load(Ordering::Acquire)
    }

    /// The file's current size in bytes.
    pub fn len(&self) -> std::io::Result<u64> {
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

impl Clone for File {
    fn clone(&self) -> File {
        self.aio.core.files.add_ref(self.slot);
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
