//! The registered-buffer slab: where [`IoBuf`]-style buffers come from once an io_uring
//! subsystem with `io_uring_registered_buffers` on has started in this process (and worker
//! processes have not: their shared arena comes first), so that io_uring rings can register
//! the memory once and submit every read or write into such a buffer as `READ_FIXED` /
//! `WRITE_FIXED`, without the kernel looking up and pinning its pages on each I/O.
//!
//! **Why a slab of its own and not the heap.** A registered buffer keeps its pages pinned
//! for as long as the ring lives, and the kernel goes on using those pages even if the
//! address range is unmapped or remapped. Heap memory is returned and reused at the
//! allocator's will; this memory never is. One reserved address range (`MAX_CHUNKS` chunks of
//! `CHUNK` bytes) is committed a chunk at a time as buffers are made, and a chunk once
//! committed stays for the life of the process: a ring registers each chunk once (one table
//! entry per chunk, the index found from the address by a shift) and may keep it.
//!
//! **What it holds.** Blocks of a power-of-two size from 4 KiB to `MAX_BLOCK`, each aligned
//! to its size, on free lists per size; a freed block is kept for the next buffer of its
//! size. Larger buffers, and buffers once every chunk is committed, come from the heap.
//!
//! [`IoBuf`]: ../../dbaio/struct.IoBuf.html

use parking_lot::Mutex;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// One chunk: the unit committed, and registered with a ring as one fixed buffer.
pub const CHUNK: usize = 2 << 20;
/// Chunks in the reserved range (128 MiB of I/O buffers at most).
pub const MAX_CHUNKS: u32 = 64;
/// The largest block; larger buffers come from the heap.
pub const MAX_BLOCK: usize = 1 << 20;
/// The smallest block, and every block's least alignment.
pub const MIN_BLOCK: usize = 4096;

/// The process's slab (see the module documentation).
pub struct Slab {
    /// The reserved range, `CHUNK`-aligned, `MAX_CHUNKS * CHUNK` bytes.
    base: NonNull<u8>,
    /// Chunks committed so far (a prefix of the range; never lowered).
    committed: AtomicU32,
    state: Mutex<SlabState>,
}

struct SlabState {
    /// Next never-used byte (offset from `base`).
    bump: usize,
    /// Free blocks (offsets) per size class: class `c` holds blocks of `MIN_BLOCK << c`.
    free: Vec<Vec<usize>>,
}

// SAFETY: the slab is a reservation that lives for the rest of the process; its bookkeeping
// is behind a mutex or atomic, and each block handed out is owned by one holder until freed.
unsafe impl Send for Slab {}
// SAFETY: as above.
unsafe impl Sync for Slab {}

static SLAB: OnceLock<Option<Slab>> = OnceLock::new();
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns the slab on for the rest of the process (an io_uring subsystem that registers
/// buffers has started): buffers made from now on come from it. False if the address range
/// could not be reserved (buffers then stay on the heap).
pub fn enable() -> bool {
    let ok = SLAB.get_or_init(Slab::reserve).is_some();
    if ok {
        ENABLED.store(true, Ordering::Release);
    }
    ok
}

/// The slab, once [`enable`]d.
#[inline]
pub fn enabled() -> Option<&'static Slab> {
    if !ENABLED.load(Ordering::Acquire) {
        return None;
    }
    SLAB.get()?.as_ref()
}

/// The size class and block size for `bytes` at `align`, if the slab holds such blocks (an
/// alignment that is not a power of two is left to the heap, which refuses it).
fn class_of(bytes: usize, align: usize) -> Option<(usize, usize)> {
    if !align.is_power_of_two() {
        return None;
    }
    let size = bytes
        .max(align)
        .max(MIN_BLOCK)
        .checked_next_power_of_two()?;
    (size <= MAX_BLOCK).then(|| ((size / MIN_BLOCK).trailing_zeros() as usize, size))
}

impl Slab {
    fn reserve() -> Option<Slab> {
        let len = MAX_CHUNKS as usize * CHUNK;
        // One chunk more than needed, so that a CHUNK-aligned range fits inside.
        // SAFETY: a fresh inaccessible reservation; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + CHUNK,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let aligned = (p as usize).next_multiple_of(CHUNK);
        Some(Slab {
            base: NonNull::new(aligned as *mut u8)?,
            committed: AtomicU32::new(0),
            state: Mutex::new(SlabState {
                bump: 0,
                free: vec![Vec::new(); (MAX_BLOCK / MIN_BLOCK).trailing_zeros() as usize + 1],
            }),
        })
    }

    /// Chunks committed so far: chunks `0 .. committed()` may hold buffers.
    #[inline]
    pub fn committed(&self) -> u32 {
        self.committed.load(Ordering::Acquire)
    }

    /// Chunk `k`'s address and length.
    pub fn chunk(&self, k: u32) -> (*const u8, usize) {
        (
            self.base
                .as_ptr()
                .wrapping_add(k as usize * CHUNK)
                .cast_const(),
            CHUNK,
        )
    }

    /// The chunk holding all of `len` bytes at `addr`, if the slab does.
    #[inline]
    pub fn chunk_of(&self, addr: usize, len: usize) -> Option<u32> {
        let off = addr.checked_sub(self.base.as_ptr() as usize)?;
        let k = off / CHUNK;
        (k < MAX_CHUNKS as usize && off + len <= (k + 1) * CHUNK).then_some(k as u32)
    }

    /// A block for `bytes` bytes aligned to `align` (a power of two), zeroed if `zeroed`;
    /// None when the slab holds no such block (too large, or every chunk committed and no
    /// free block of the size). Returns the pointer; free it with the same `bytes`/`align`.
    pub fn alloc(&self, bytes: usize, align: usize, zeroed: bool) -> Option<NonNull<u8>> {
        let (class, size) = class_of(bytes, align)?;
        let (off, reused) = {
            let mut st = self.state.lock();
            match st.free[class].pop() {
                Some(off) => (off, true),
                None => {
                    // Aligned to its size, a block never straddles two chunks.
                    let off = st.bump.next_multiple_of(size);
                    let end = off + size;
                    let mut committed = self.committed.load(Ordering::Relaxed) as usize;
                    while end > committed * CHUNK {
                        if committed == MAX_CHUNKS as usize || !self.commit(committed) {
                            return None;
                        }
                        committed += 1;
                        self.committed.store(committed as u32, Ordering::Release);
                    }
                    st.bump = end;
                    (off, false)
                }
            }
        };
        // SAFETY: off + size lies inside a committed chunk of the reservation.
        let p = unsafe { self.base.as_ptr().add(off) };
        if zeroed && reused {
            // SAFETY: the block is ours alone (just taken off the free list), `size` bytes.
            unsafe { std::ptr::write_bytes(p, 0, size) };
        }
        NonNull::new(p)
    }

    /// Makes chunk `k` readable and writable (its pages appear as they are first touched,
    /// zero-filled). Transparent huge pages are asked for: one page table entry for the
    /// chunk instead of 512.
    fn commit(&self, k: usize) -> bool {
        let p = self.base.as_ptr().wrapping_add(k * CHUNK);
        // SAFETY: chunk k lies inside our reservation, which nothing else maps; changing its
        // protection affects no memory anyone holds.
        let ok =
            unsafe { libc::mprotect(p.cast(), CHUNK, libc::PROT_READ | libc::PROT_WRITE) == 0 };
        if ok {
            // SAFETY: advice on the chunk just committed; it changes how pages are backed,
            // not their contents. Refused advice (THP off) leaves 4 KiB pages.
            unsafe { libc::madvise(p.cast(), CHUNK, libc::MADV_HUGEPAGE) };
        }
        ok
    }

    /// Returns a block from [`Slab::alloc`].
    ///
    /// # Safety
    ///
    /// `p`, `bytes` and `align` must be those of one `alloc` call on this slab, the block
    /// must not be freed twice, and nothing may use it afterwards.
    pub unsafe fn free(&self, p: NonNull<u8>, bytes: usize, align: usize) {
        let Some((class, _)) = class_of(bytes, align) else {
            return;
        };
        let off = p.as_ptr() as usize - self.base.as_ptr() as usize;
        self.state.lock().free[class].push(off);
    }

    /// Whether `p` lies in the slab's range.
    pub fn holds(&self, p: *const u8) -> bool {
        self.chunk_of(p as usize, 0).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_reused_zeroed_and_found_by_chunk() {
        let s = Slab::reserve().unwrap();
        assert_eq!(s.committed(), 0);
        let p = s.alloc(5000, 4096, true).unwrap();
        assert_eq!(p.as_ptr() as usize % 8192, 0);
        assert_eq!(s.committed(), 1);
        // SAFETY: a block of 8192 bytes we own.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 7, 8192) };
        assert_eq!(s.chunk_of(p.as_ptr() as usize, 8192), Some(0));
        // SAFETY: returned once, not used again.
        unsafe { s.free(p, 5000, 4096) };
        let q = s.alloc(8000, 4096, true).unwrap();
        assert_eq!(p, q, "the freed block of the same size comes back");
        // SAFETY: the block is ours and 8192 bytes long.
        let back = unsafe { std::slice::from_raw_parts(q.as_ptr(), 8192) };
        assert!(back.iter().all(|&b| b == 0));
        let big = s.alloc(100, 65536, false).unwrap();
        assert_eq!(big.as_ptr() as usize % 65536, 0);
        assert!(s.alloc(MAX_BLOCK + 1, 4096, false).is_none(), "too large");
        assert!(s.alloc(100, 3000, false).is_none(), "not a power of two");
        assert!(s.alloc(100, 12288, false).is_none(), "not a power of two");
        assert!(
            s.chunk_of(q.as_ptr() as usize + 4096, CHUNK).is_none(),
            "spans two chunks"
        );
        assert!(s.chunk_of(0x1000, 4096).is_none());
    }

    #[test]
    fn chunks_are_committed_as_needed_and_run_out() {
        let s = Slab::reserve().unwrap();
        let mut n = 0;
        while s.alloc(MAX_BLOCK, 4096, false).is_some() {
            n += 1;
        }
        assert_eq!(n, MAX_CHUNKS as usize * CHUNK / MAX_BLOCK);
        assert_eq!(s.committed(), MAX_CHUNKS);
        assert!(s.alloc(4096, 4096, false).is_none(), "every chunk is full");
    }
}
