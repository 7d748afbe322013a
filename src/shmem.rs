//! The shared region: one anonymous `MAP_SHARED` mapping holding the handle table, the
//! per-handle iovec arrays and handle data.
//!
//! Everything in it is plain data or atomics (no pointers to process-private heap, no Rust
//! allocations), so worker *processes* forked after start see the same table (rule 4 of the
//! architecture). See `docs/design.md`, "Shared region".

use std::io;
use std::ptr::NonNull;

/// An owned anonymous shared mapping, zero-filled at creation.
pub(crate) struct SharedRegion {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region is plain memory; all concurrent access to it goes through atomics or is
// serialised by the handle state protocol (see handle.rs).
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    pub(crate) fn new(len: usize) -> io::Result<SharedRegion> {
        let len = len.max(1);
        // SAFETY: an anonymous mapping with no address hint; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(SharedRegion { ptr, len })
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and nothing refers to the region any
        // more (its owner, the Core, is being dropped).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
