//! Owned, aligned I/O memory.
//!
//! An [`IoBuf`] is moved into a handle when an I/O starts and handed back with its
//! [`Completion`](crate::Completion); while the I/O is in flight nothing else can reach it, and
//! if the caller drops the in-flight value the buffer stays parked in the issuer until the I/O
//! is done (the buffer-ownership rule). See `docs/design.md`, "Buffer ownership".

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// The default alignment: enough for O_DIRECT on every common device.
pub const IO_ALIGN: usize = 4096;

/// A heap buffer with a fixed alignment, suitable for O_DIRECT.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes allocated (the length it was made with); `len` may be set lower to reuse it.
    capacity: usize,
    align: usize,
    /// Where the memory came from, and so where it goes back.
    origin: Origin,
}

/// Where an [`IoBuf`]'s memory came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The global allocator.
    Heap,
    /// The shared arena (in a block of `arena::block_size(capacity)` bytes).
    Arena,
    /// The registered-buffer slab (in a block for `capacity` bytes at `align`).
    Slab,
}

// SAFETY: IoBuf uniquely owns its allocation (like Box<[u8]>); moving it between threads moves
// that ownership.
unsafe impl Send for IoBuf {}
// SAFETY: shared references only give `&[u8]`, which is Sync.
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// A zeroed buffer of `len` bytes aligned to [`IO_ALIGN`].
    pub fn new(len: usize) -> IoBuf {
        IoBuf::with_alignment(len, IO_ALIGN)
    }

    /// A zeroed buffer of `len` bytes aligned to `align` (a power of two).
    pub fn with_alignment(len: usize, align: usize) -> IoBuf {
        IoBuf::allocate(len, align, true)
    }

    /// A buffer holding a copy of `data` (allocated without zeroing: every byte is copied).
    pub fn from_slice(data: &[u8]) -> IoBuf {
        let b = IoBuf::allocate(data.len(), IO_ALIGN, false);
        // SAFETY: `b` is a fresh allocation of at least `data.len()` bytes, which cannot
        // overlap `data`; after the copy every byte of the buffer's length is initialized.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), b.ptr.as_ptr(), data.len()) };
        b
    }

    /// `len` bytes aligned to `align`, zeroed or not (the caller then writes every byte):
    /// from the shared arena once worker processes have started in this process (so that
    /// they can reach it); else from the registered-buffer slab once an io_uring subsystem
    /// that registers buffers has (so that its rings submit I/O into it as fixed transfers,
    /// see `docs/design.md`, "Registered buffers"); otherwise, or when neither has room or
    /// the buffer is over 1 MiB, from the heap.
    fn allocate(len: usize, align: usize, zeroed: bool) -> IoBuf {
        let made = |ptr, origin| IoBuf {
            ptr,
            len,
            capacity: len,
            align,
            origin,
        };
        if let Some(a) = dbaio_sys::arena::installed() {
            if align <= dbaio_sys::arena::BLOCK_ALIGN {
                if let Some((ptr, _)) = a.alloc(len, zeroed) {
                    return made(ptr, Origin::Arena);
                }
            }
        } else if let Some(s) = dbaio_sys::slab::enabled() {
            if let Some(ptr) = s.alloc(len, align, zeroed) {
                return made(ptr, Origin::Slab);
            }
        }
        let layout = Layout::from_size_align(len.max(1), align)
            .expect("IoBuf: alignment must be a power of two");
        // SAFETY: the layout has a non-zero size (len.max(1)).
        let p = unsafe {
            if zeroed {
                alloc_zeroed(layout)
            } else {
                alloc(layout)
            }
        };
        let ptr = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        made(ptr, Origin::Heap)
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated: the most [`IoBuf::set_len`] allows.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Reuses the buffer at another length, up to its capacity, so a loop of I/Os of varying
    /// sizes needs no new allocation. Bytes beyond the old length hold what was last there
    /// (zeros, or an earlier I/O's data). Panics above the capacity.
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity,
            "IoBuf::set_len({len}) exceeds the capacity {}",
            self.capacity
        );
        self.len = len;
    }

    /// The alignment it was allocated with.
    #[inline]
    pub fn alignment(&self) -> usize {
        self.align
    }

    /// True if the buffer lives in the shared arena, where worker processes
    /// (`io_worker_kind = process`) can reach it: every buffer made after worker processes
    /// started in this process, unless the arena was full. I/O on a buffer that is not
    /// shared runs in the issuer instead of a worker process.
    #[inline]
    pub fn is_shared(&self) -> bool {
        self.origin == Origin::Arena
    }

    pub(crate) fn raw(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for IoBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for capacity >= len initialised (zeroed at allocation) bytes
        // owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for IoBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        match self.origin {
            Origin::Arena => {
                if let Some(a) = dbaio_sys::arena::installed() {
                    // SAFETY: the block came from this arena's `alloc` with this size, and
                    // this IoBuf, its only owner, is going away.
                    unsafe { a.free(self.ptr, dbaio_sys::arena::block_size(self.capacity)) };
                }
                return;
            }
            Origin::Slab => {
                if let Some(s) = dbaio_sys::slab::enabled() {
                    // SAFETY: the block came from the slab's `alloc` for this capacity and
                    // alignment, and this IoBuf, its only owner, is going away.
                    unsafe { s.free(self.ptr, self.capacity, self.align) };
                }
                return;
            }
            Origin::Heap => {}
        }
        let layout = Layout::from_size_align(self.capacity.max(1), self.align)
            .expect("layout was valid at allocation");
        // SAFETY: ptr was allocated in `with_alignment` with exactly this layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IoBuf({} bytes of {}, align {})",
            self.len, self.capacity, self.align
        )
    }
}
