//! The file table: one slot per file known to the subsystem — its descriptor, whether it was
//! opened O_DIRECT, its path (enough to reopen it in another process and to name it in
//! messages and the view) and a reference count. Every user [`File`](crate::File) value and
//! every I/O defined on the file holds a reference; the descriptor is closed only when the
//! last goes, so an fd is never closed — or its number reused — under an I/O. See
//! `docs/design.md`, "The handle layer".

use parking_lot::{Mutex, RwLock};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

pub(crate) const NO_FILE: u32 = u32::MAX;

/// The device and inode (`st_dev`, `st_ino`) of open file `fd`; zeros if `fstat` fails.
pub(crate) fn identity_of(fd: RawFd) -> (u64, u64) {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable buffer the size of `struct stat`; fstat only writes it.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return (0, 0);
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    (st.st_dev, st.st_ino)
}

/// Locks that serialize read-modify-write slice writes, by file (device and inode), so two
/// opens of one file share one: striped (a file hashes to one of these; two files may
/// share one, which only serializes them).
const RMW_STRIPES: usize = 64;
const _: () = assert!(
    RMW_STRIPES == 1 << 6,
    "rmw_stripe takes the hash's top 6 bits"
);

pub(crate) struct FileSlot {
    pub fd: AtomicI32,
    pub refs: AtomicU32,
    pub direct: AtomicBool,
    /// The file system cannot do a buffered write without blocking (`RWF_NOWAIT` is refused
    /// for buffered writes; ext4 here): io_uring would hand every such write to a kernel
    /// worker thread, so the io_uring method runs them on the issuer instead (see
    /// `nowait_buffered_writes`).
    pub blocking_buffered_writes: AtomicBool,
    /// The relation-wide number of the file's block 0 (a segment's first block; 0 otherwise).
    pub segment_base: AtomicU32,
    /// The device the file is on (`st_dev`), for the readahead-advice budget.
    pub device: AtomicU64,
    pub path: RwLock<Option<Arc<Path>>>,
    /// Which of the table's read-modify-write locks serializes this file's (by its inode).
    pub rmw_stripe: AtomicU32,
}

/// The read-modify-write stripe of the file with identity `(dev, ino)`.
pub(crate) fn rmw_stripe((dev, ino): (u64, u64)) -> u32 {
    let h = (dev ^ ino.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 58) as u32 // the top 6 bits: 0 .. RMW_STRIPES
}

pub(crate) struct FileTable {
    pub slots: Box<[FileSlot]>,
    /// Serialize read-modify-write slice writes on O_DIRECT files (`aio/slice.rs`): one per
    /// stripe of files, so every open of one file takes the same.
    pub rmw: Box<[Mutex<()>]>,
    pub(crate) free: Mutex<Vec<u32>>,
}

impl FileTable {
    pub(crate) fn new(n: u32) -> FileTable {
        let slots = (0..n)
            .map(|_| FileSlot {
                fd: AtomicI32::new(-1),
                refs: AtomicU32::new(0),
                direct: AtomicBool::new(false),
                blocking_buffered_writes: AtomicBool::new(false),
                segment_base: AtomicU32::new(0),
                device: AtomicU64::new(0),
                path: RwLock::new(None),
                rmw_stripe: AtomicU32::new(0),
            })
            .collect();
        FileTable {
            slots,
            rmw: (0..RMW_STRIPES).map(|_| Mutex::new(())).collect(),
            free: Mutex::new((0..n).rev().collect()),
        }
    }

    /// The relation-wide number of file `slot`'s block 0 (0 for a file that is not a later
    /// segment of a relation).
    pub(crate) fn segment_base(&self, slot: u32) -> u32 {
        self.slots
            .get(slot as usize)
            .map_or(0, |s| s.segment_base.load(Ordering::Relaxed))
    }

    /// The name messages give a block of file `slot`: the relation's path (a segment's path
    /// without its `.N` suffix) and the relation-wide block number of the file's block 0.
    pub(crate) fn relation(&self, slot: u32) -> (String, u32) {
        let base = self.segment_base(slot);
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

/// True if the file system holding `fd` can do buffered writes without blocking
/// (`RWF_NOWAIT`), so that io_uring completes them inline instead of handing each to a kernel
/// worker thread. Known by file-system type: XFS (Linux 6.0) and btrfs (6.1) can; ext4 could
/// not on the kernels measured (a buffered `pwritev2(RWF_NOWAIT)` fails with EOPNOTSUPP), and
/// other file systems are taken to be like ext4 (the cautious side: their buffered writes run
/// on the issuer, as `pwrite` would).
pub(crate) fn nowait_buffered_writes(fd: RawFd) -> bool {
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683e;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `st` is a valid out-pointer for one statfs record; fd is the caller's open file.
    if unsafe { libc::fstatfs(fd, st.as_mut_ptr()) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)] // i64 on x86_64, other widths elsewhere
    // SAFETY: fstatfs succeeded and filled the record.
    let f_type = unsafe { st.assume_init() }.f_type as i64;
    matches!(f_type, XFS | BTRFS)
}
