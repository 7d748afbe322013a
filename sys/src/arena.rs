//! The shared buffer arena: one memfd-backed mapping, installed for the whole process the
//! first time worker processes start, from which every `IoBuf`-style allocation and the
//! buffer pool's pages are then carved, so that a worker process can reach the memory an I/O
//! names.
//!
//! **Why one arena per process, not per subsystem.** Buffers are made before they meet a
//! subsystem (`IoBuf::new` takes no `Aio`), and may be used with several. Worker processes map
//! the arena whole (they open it through `/proc/<embedder>/fd/<n>`, see `process.rs`), so an
//! address inside it becomes an offset that means the same thing in every process.
//!
//! **Why it is large and sparse.** The memfd is sized once (`ARENA_BYTES` of address space)
//! and never grows; the kernel backs only the pages that are touched, and memfd mappings are
//! not charged to overcommit until then. Blocks are kept on free lists per power-of-two size
//! class (4 KiB up); a free block of 2 MiB or more has its pages returned to the kernel
//! (`FALLOC_FL_PUNCH_HOLE`), smaller ones keep theirs for the next allocation.
//!
//! Allocation takes one mutex; an I/O buffer is made once and reused, so this is not on the
//! per-I/O path.

use nix::sys::memfd::{MemFdCreateFlag, memfd_create};
use parking_lot::Mutex;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::OnceLock;

/// Address space reserved for the arena (64 GiB; only touched pages use memory).
pub const ARENA_BYTES: usize = 64 << 30;
/// The smallest block and every block's alignment.
pub const BLOCK_ALIGN: usize = 4096;
/// Blocks this large or larger give their pages back to the kernel when freed.
const PUNCH_FROM: usize = 2 << 20;

/// The process-wide shared arena (see the module documentation).
pub struct SharedArena {
    fd: OwnedFd,
    base: NonNull<u8>,
    len: usize,
    state: Mutex<ArenaState>,
}

struct ArenaState {
    /// Next never-used byte.
    bump: usize,
    /// Free blocks (offsets) per size class: class `c` holds blocks of `BLOCK_ALIGN << c`.
    free: Vec<Vec<usize>>,
    /// Bytes handed out now.
    in_use: usize,
}

// SAFETY: the arena is a mapping that lives for the rest of the process; its bookkeeping is
// behind a mutex, and each block handed out is owned by exactly one holder until freed.
unsafe impl Send for SharedArena {}
// SAFETY: as above.
unsafe impl Sync for SharedArena {}

static ARENA: OnceLock<Result<SharedArena, String>> = OnceLock::new();

/// Most shared regions besides the arena (buffer pools on huge pages, one per subsystem).
pub const MAX_REGIONS: usize = 8;

/// A shared region besides the arena: a memfd of its own (a buffer pool on reserved huge
/// pages, `MFD_HUGETLB`, which the arena's 4 KiB-page memfd cannot hold), registered so that
/// worker processes can map it and addresses in it can be named to them.
#[derive(Clone, Copy, Debug)]
struct Region {
    fd: RawFd,
    base: usize,
    len: usize,
}

static REGIONS: parking_lot::RwLock<[Option<Region>; MAX_REGIONS]> =
    parking_lot::RwLock::new([None; MAX_REGIONS]);

/// Registers `len` bytes mapped at `base` from memfd `fd` (which the caller keeps open until
/// [`unregister`]); returns its number (1 ..= `MAX_REGIONS`), or None when all are taken.
pub fn register(fd: RawFd, base: *mut u8, len: usize) -> Option<u32> {
    let mut r = REGIONS.write();
    let k = r.iter().position(Option::is_none)?;
    r[k] = Some(Region {
        fd,
        base: base as usize,
        len,
    });
    Some(k as u32 + 1)
}

/// Forgets region `id` (its memory is about to be unmapped).
pub fn unregister(id: u32) {
    if let Some(slot) = REGIONS.write().get_mut(id as usize - 1) {
        *slot = None;
    }
}

/// Every registered region: (number, memfd, length).
pub fn regions() -> Vec<(u32, RawFd, usize)> {
    REGIONS
        .read()
        .iter()
        .enumerate()
        .filter_map(|(k, r)| r.map(|r| (k as u32 + 1, r.fd, r.len)))
        .collect()
}

/// Where region `id` is mapped in this process, and its length.
pub fn region_base(id: u32) -> Option<(*mut u8, usize)> {
    let r = (*REGIONS.read().get(id as usize - 1)?)?;
    Some((r.base as *mut u8, r.len))
}

/// A buffer pool's memory on reserved huge pages: a fresh `MFD_HUGETLB` memfd mapped shared,
/// reserved in full at mmap (a shortage is an error at creation, never a SIGBUS in a worker
/// later), and registered so that worker processes map it. Unregistered and unmapped on drop.
pub struct HugeRegion {
    /// Held open while registered: workers open it through `/proc/<embedder>/fd/<n>`.
    _fd: OwnedFd,
    base: NonNull<u8>,
    len: usize,
    id: u32,
}

// SAFETY: plain memory owned by this value; see `SharedArena`.
unsafe impl Send for HugeRegion {}
// SAFETY: as above.
unsafe impl Sync for HugeRegion {}

impl HugeRegion {
    /// At least `len` bytes (rounded up to 2 MiB) on huge pages.
    pub fn create(len: usize) -> io::Result<HugeRegion> {
        const HUGE: usize = 2 << 20;
        let len = len.max(1).div_ceil(HUGE) * HUGE;
        let fd = memfd_create(
            c"dbaio-pool",
            MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_HUGETLB,
        )
        .map_err(io::Error::from)?;
        nix::unistd::ftruncate(&fd, len as libc::off_t).map_err(io::Error::from)?;
        // Without MAP_NORESERVE the huge pages are reserved now or the mmap fails.
        let base = map_fd(fd.as_raw_fd(), len, libc::MAP_SHARED)?;
        let Some(id) = register(fd.as_raw_fd(), base.as_ptr(), len) else {
            // SAFETY: the mapping made just above, used by no one.
            unsafe { libc::munmap(base.as_ptr().cast(), len) };
            return Err(io::Error::other("too many buffer pools on huge pages"));
        };
        Ok(HugeRegion {
            _fd: fd,
            base,
            len,
            id,
        })
    }

    /// Where it is mapped here.
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Its length (a multiple of 2 MiB).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty (kept for the `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for HugeRegion {
    fn drop(&mut self) {
        unregister(self.id);
        // SAFETY: the mapping made in `create`; its owner (a buffer pool) is going away.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Bits of a shared offset that name its region (0: the arena).
pub const REGION_SHIFT: u32 = 56;

/// The shared offset of `len` bytes at `p` — an arena offset, or a registered region's number
/// in the top byte and the offset within it below — if they lie wholly inside one of them.
pub fn shared_offset(arena: &SharedArena, p: *const u8, len: usize) -> Option<u64> {
    if let Some(off) = arena.offset_of(p, len) {
        return Some(off);
    }
    let r = REGIONS.read();
    r.iter().enumerate().find_map(|(k, reg)| {
        let reg = (*reg)?;
        let off = (p as usize).checked_sub(reg.base)?;
        (off.checked_add(len)? <= reg.len).then_some(((k as u64 + 1) << REGION_SHIFT) | off as u64)
    })
}

/// The arena, creating it on first call (worker processes are being started).
pub fn install() -> io::Result<&'static SharedArena> {
    ARENA
        .get_or_init(|| SharedArena::create(ARENA_BYTES).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| io::Error::other(format!("shared buffer arena: {e}")))
}

/// The arena if worker processes have started in this process (allocations then come from
/// it), else None (allocations come from the heap).
pub fn installed() -> Option<&'static SharedArena> {
    ARENA.get().and_then(|r| r.as_ref().ok())
}

/// The size of the block [`SharedArena::alloc`] gives for `bytes` bytes.
pub fn block_size(bytes: usize) -> usize {
    class_of(bytes).1
}

fn class_of(bytes: usize) -> (usize, usize) {
    let size = bytes.max(1).next_power_of_two().max(BLOCK_ALIGN);
    ((size / BLOCK_ALIGN).trailing_zeros() as usize, size)
}

impl SharedArena {
    fn create(len: usize) -> io::Result<SharedArena> {
        let fd =
            memfd_create(c"dbaio-arena", MemFdCreateFlag::MFD_CLOEXEC).map_err(io::Error::from)?;
        nix::unistd::ftruncate(&fd, len as libc::off_t).map_err(io::Error::from)?;
        let base = map_shared(fd.as_raw_fd(), len)?;
        Ok(SharedArena {
            fd,
            base,
            len,
            state: Mutex::new(ArenaState {
                bump: 0,
                free: vec![Vec::new(); 48],
                in_use: 0,
            }),
        })
    }

    /// The memfd (worker processes open it through `/proc`).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Where the arena is mapped in this process.
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty (kept for the `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The arena offset of `len` bytes at `p`, if they lie wholly inside the arena.
    pub fn offset_of(&self, p: *const u8, len: usize) -> Option<u64> {
        let off = (p as usize).checked_sub(self.base.as_ptr() as usize)?;
        (off.checked_add(len)? <= self.len).then_some(off as u64)
    }

    /// Allocates the arena's pages for `len` bytes at `p` without mapping them here
    /// (`fallocate` on the memfd): a process that touches them later, a worker reading into
    /// them, only maps a page that exists instead of allocating and zeroing it. False when
    /// the range is not in the arena or the kernel refused.
    pub fn populate(&self, p: *const u8, len: usize) -> bool {
        let Some(off) = self.offset_of(p, len) else {
            return false;
        };
        // SAFETY: fallocate takes integers; mode 0 only allocates (data already there stays).
        unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                0,
                off as libc::off_t,
                len as libc::off_t,
            ) == 0
        }
    }

    /// Bytes handed out now.
    pub fn in_use(&self) -> usize {
        self.state.lock().in_use
    }

    /// A block of at least `bytes` bytes aligned to [`BLOCK_ALIGN`], zeroed if `zeroed`; None
    /// when the arena is exhausted. Returns the pointer and the block's true size (pass it to
    /// [`SharedArena::free`]).
    pub fn alloc(&self, bytes: usize, zeroed: bool) -> Option<(NonNull<u8>, usize)> {
        let (class, size) = class_of(bytes);
        let (off, reused) = {
            let mut st = self.state.lock();
            let off = match st.free.get_mut(class).and_then(Vec::pop) {
                Some(off) => (off, true),
                None => {
                    let off = st.bump;
                    if off.checked_add(size)? > self.len {
                        return None;
                    }
                    st.bump = off + size;
                    (off, false)
                }
            };
            st.in_use += size;
            off
        };
        // SAFETY: off + size <= len (checked when the block was first carved out), so the
        // pointer stays inside the mapping.
        let p = unsafe { self.base.as_ptr().add(off) };
        // Never-used blocks and punched ones read as zero already.
        if zeroed && reused && size < PUNCH_FROM {
            // SAFETY: the block is ours alone (just taken off the free list) and `size` bytes
            // long inside the mapping.
            unsafe { std::ptr::write_bytes(p, 0, size) };
        }
        NonNull::new(p).map(|p| (p, size))
    }

    /// Returns a block from [`SharedArena::alloc`].
    ///
    /// # Safety
    ///
    /// `p` and `size` must come from one `alloc` call on this arena, the block must not be
    /// freed twice, and nothing may use it afterwards.
    pub unsafe fn free(&self, p: NonNull<u8>, size: usize) {
        let off = p.as_ptr() as usize - self.base.as_ptr() as usize;
        if size >= PUNCH_FROM {
            // Give the pages back; the block reads as zeroes when reused.
            // SAFETY: fallocate only takes integers; the range is the caller's block.
            unsafe {
                libc::fallocate(
                    self.fd.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off as libc::off_t,
                    size as libc::off_t,
                )
            };
        }
        let (class, _) = class_of(size);
        let mut st = self.state.lock();
        st.in_use -= size;
        st.free[class].push(off);
    }
}

/// Maps `len` bytes of `fd` shared, readable and writable, without reserving swap.
pub fn map_shared(fd: RawFd, len: usize) -> io::Result<NonNull<u8>> {
    map_fd(fd, len, libc::MAP_SHARED | libc::MAP_NORESERVE)
}

/// Maps `len` bytes of `fd`, readable and writable, with mmap `flags`.
fn map_fd(fd: RawFd, len: usize, flags: libc::c_int) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping of a file we hold open; the kernel picks the address, so no
    // existing mapping is replaced.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_reused_zeroed_and_accounted() {
        let a = SharedArena::create(64 << 20).unwrap();
        let (p, size) = a.alloc(5000, true).unwrap();
        assert_eq!(size, 8192);
        assert_eq!(p.as_ptr() as usize % BLOCK_ALIGN, 0);
        // SAFETY: a block of `size` bytes we own.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 7, size) };
        assert_eq!(a.in_use(), 8192);
        // SAFETY: returned once, not used again.
        unsafe { a.free(p, size) };
        let (q, _) = a.alloc(8000, true).unwrap();
        assert_eq!(p, q, "the freed block of the same class comes back");
        // SAFETY: the block is ours and 8192 bytes long.
        let back = unsafe { std::slice::from_raw_parts(q.as_ptr(), 8192) };
        assert!(back.iter().all(|&b| b == 0));
        assert!(a.offset_of(q.as_ptr(), 8192).is_some());
        assert!(a.offset_of(q.as_ptr(), 1 << 30).is_none());
        assert!(a.alloc(128 << 20, false).is_none(), "larger than the arena");
    }
}
