//! The shared region: one anonymous `MAP_SHARED` mapping holding the handle table, the
//! per-handle iovec arrays and handle data.
//!
//! Everything in it is plain data or atomics (no pointers to process-private heap, no Rust
//! allocations), so any thread may copy a slot. Worker processes do not map it (they are
//! started by exec, not forked): a request reaches them through the control segment's request
//! cells (`dbaio-workers`). See `docs/design.md`, "The shared table". The buffer pool's page
//! memory is made here too: `new_pages` (a private mapping, while every executor is a thread;
//! huge pages when reserved) or `for_worker_processes` (a huge-page memfd or a block of the
//! shared arena, which worker processes map), with `Prefault` faulting it in on a background
//! thread (see "Buffer pool").

use crate::handle::settings::HugePages;
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// An owned anonymous mapping, zero-filled at creation: shared (the handle table), or private
/// (the buffer pool's pages, see `new_pages`).
pub(crate) struct SharedRegion {
    ptr: NonNull<u8>,
    len: usize,
    /// A block of the shared arena (returned to it on drop), not a mapping of its own.
    arena: bool,
    /// A shared mapping of its own memfd on reserved huge pages, registered so that worker
    /// processes map it too (unmapped by its own drop).
    huge: Option<dbaio_sys::arena::HugeRegion>,
}

// SAFETY: the region is plain memory; all concurrent access to it goes through atomics or is
// serialised by the handle state protocol (see handle.rs).
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    pub(crate) fn new(len: usize) -> io::Result<SharedRegion> {
        SharedRegion::map(len.max(1), libc::MAP_SHARED | libc::MAP_ANONYMOUS)
    }

    /// An anonymous mapping of `len` bytes with mmap `flags`.
    fn map(len: usize, flags: libc::c_int) -> io::Result<SharedRegion> {
        // SAFETY: an anonymous mapping with no address hint; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(SharedRegion {
            ptr,
            len,
            arena: false,
            huge: None,
        })
    }

    /// Page memory for the buffer pool where worker processes reach it (`io_worker_kind =
    /// process`; the arena must be installed): with `huge_pages` `try` or `on`, a memfd of its
    /// own on reserved huge pages (`MFD_HUGETLB`, registered so that workers map it), as
    /// PostgreSQL puts `shared_buffers` there; otherwise, or when too few are reserved under
    /// `try`, a block of the arena on 4 KiB pages. Huge pages spare the workers one fault,
    /// allocation and zeroing per 4 KiB page of a fresh pool (docs/benchmarks.md, "Worker
    /// processes").
    pub(crate) fn for_worker_processes(len: usize, huge: HugePages) -> io::Result<SharedRegion> {
        if huge != HugePages::Off {
            match SharedRegion::huge_memfd(len) {
                Ok(r) => return Ok(r),
                Err(e) if huge == HugePages::On => return Err(e),
                // Said, because a pool that silently lost its huge pages (another program
                // took them) reads markedly slower in worker processes.
                Err(e) => tracing::info!(
                    "huge_pages = try: the buffer pool ({len} bytes) is on 4 kB pages: {e}"
                ),
            }
        }
        SharedRegion::in_arena(len)
    }

    fn huge_memfd(len: usize) -> io::Result<SharedRegion> {
        let region = dbaio_sys::arena::HugeRegion::create(len)?;
        let ptr = NonNull::new(region.base())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(SharedRegion {
            ptr,
            len: region.len(),
            arena: false,
            huge: Some(region),
        })
    }

    fn in_arena(len: usize) -> io::Result<SharedRegion> {
        let arena = dbaio_sys::arena::installed()
            .ok_or_else(|| io::Error::other("the shared arena is not installed"))?;
        let (ptr, _) = arena
            .alloc(len.max(1), true)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(SharedRegion {
            ptr,
            len: len.max(1),
            arena: true,
            huge: None,
        })
    }

    /// Page memory for the buffer pool, 2 MiB aligned. `private`: a process-private anonymous
    /// mapping (enough while every executor is a thread; worker processes use
    /// [`SharedRegion::for_worker_processes`] instead); otherwise shared. `huge`: reserved
    /// huge pages (hugetlb) first, as PostgreSQL's `huge_pages` (`On`: only them). `thp`: when
    /// not on reserved huge pages, advise transparent ones (`MADV_HUGEPAGE`); refused advice
    /// (THP disabled, an old kernel) leaves 4 KiB pages.
    ///
    /// Why private by default: O_DIRECT reads pin their pages with get_user_pages, which takes
    /// a slow path for shmem pages (prewarm was markedly slower on a shared pool). Why hugetlb
    /// when reserved: reserved huge pages stay backed and need no zeroing per 4 KiB page.
    /// Transparent huge pages only when asked (`thp`): they help when the memory is still
    /// backed by the host and cost several times more system time to fault in when it is not;
    /// a small pool that many reads go through gains without that risk. The figures are in
    /// docs/benchmarks.md, "Prewarm" and "Prewarm, second look".
    pub(crate) fn new_pages(
        len: usize,
        private: bool,
        huge: HugePages,
        thp: bool,
    ) -> io::Result<SharedRegion> {
        const HUGE: usize = 2 << 20;
        let len = len.max(1).div_ceil(HUGE) * HUGE;
        let base = if private {
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
        } else {
            libc::MAP_SHARED | libc::MAP_ANONYMOUS
        };
        let attempts: &[libc::c_int] = match huge {
            HugePages::Try => &[base | libc::MAP_HUGETLB, base],
            HugePages::On => &[base | libc::MAP_HUGETLB],
            HugePages::Off => &[base],
        };
        let mut last = io::Error::from_raw_os_error(libc::ENOMEM);
        for &flags in attempts {
            match SharedRegion::map(len, flags) {
                Ok(r) => {
                    if thp && flags & libc::MAP_HUGETLB == 0 {
                        // SAFETY: advice on a mapping we own, made just above; it changes
                        // how pages are backed, not their contents.
                        unsafe { libc::madvise(r.base().cast(), r.len(), libc::MADV_HUGEPAGE) };
                    }
                    return Ok(r);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// A block of the shared arena, whose pages the arena may punch out when it is freed.
    pub(crate) fn is_arena_block(&self) -> bool {
        self.arena
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        if self.huge.is_some() {
            return; // the huge region unmaps itself when the field drops
        }
        if self.arena {
            if let Some(a) = dbaio_sys::arena::installed() {
                // SAFETY: the block came from this arena's `alloc` for `len` bytes, and its
                // owner is being dropped.
                unsafe { a.free(self.ptr, dbaio_sys::arena::block_size(self.len)) };
            }
            return;
        }
        // SAFETY: ptr/len came from a successful mmap and nothing refers to the region any
        // more (its owner, the Core, is being dropped).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Faults a fresh region's pages in on a background thread, front to back, so the first
/// reads into a new buffer pool (which the clock sweep hands out in the same order) find
/// their pages present instead of faulting them in, one by one, inside the submitting
/// thread's `io_uring_enter` or `preadv`. Stops early, and is joined, when dropped.
pub(crate) struct Prefault {
    stop: Arc<AtomicBool>,
    /// Set when the thread has finished (every page faulted in, or it gave up early).
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The process that started the thread.
    owner: dbaio_sys::Owner,
}

impl Prefault {
    /// Starts prefaulting `region`, which must outlive the returned value.
    pub(crate) fn start(region: &SharedRegion) -> Prefault {
        const CHUNK: usize = 16 << 20;
        let stop = Arc::new(AtomicBool::new(false));
        let (base, len) = (region.base() as usize, region.len());
        // Pages in the shared arena are allocated in the memfd, not faulted into this
        // process: the worker processes that read into them map them, and would fault each
        // page again in their own page tables anyway.
        let arena = region.arena.then(dbaio_sys::arena::installed).flatten();
        let flag = Arc::clone(&stop);
        let done = Arc::new(AtomicBool::new(false));
        let finished = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name("dbaio-prefault".into())
            .spawn(move || {
                let mut off = 0;
                while off < len && !flag.load(Ordering::Relaxed) {
                    let n = CHUNK.min(len - off);
                    if let Some(a) = arena {
                        if !a.populate((base + off) as *const u8, n) {
                            break;
                        }
                        off += n;
                        continue;
                    }
                    // SAFETY: the range lies in a mapping the owner keeps until this thread is
                    // joined; MADV_POPULATE_WRITE only faults pages in (present pages, and any
                    // data in them, are left as they are).
                    let r = unsafe {
                        libc::madvise(
                            (base + off) as *mut libc::c_void,
                            n,
                            libc::MADV_POPULATE_WRITE,
                        )
                    };
                    if r != 0 {
                        break; // an old kernel (before 5.14): the reads fault pages in
                    }
                    off += n;
                }
                finished.store(true, Ordering::Release);
            })
            .ok();
        if thread.is_none() {
            done.store(true, Ordering::Release);
        }
        Prefault {
            stop,
            done,
            thread,
            owner: dbaio_sys::Owner::here(),
        }
    }

    /// The thread has finished: the region's pages are present, unless it gave up early.
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

impl Drop for Prefault {
    fn drop(&mut self) {
        // In a child made by fork the thread is not there: joining would wait for ever.
        if self.owner.in_forked_child() {
            std::mem::forget(self.thread.take());
            return;
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
