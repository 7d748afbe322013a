//! `dbaio-uring`: the io_uring engine beneath dbaio's `io_uring` method.
//!
//! One [`Ring`] per issuer. The owner pushes plain requests ([`Request`]) and submits a whole batch
//! with one `io_uring_enter`; anyone may reap completions (user data, raw result) under the
//! ring's completion lock, which is how a waiter that is not the issuer drives an I/O to
//! completion. [`probe`] tells at start whether the kernel lets this process use io_uring and,
//! if not, why. This is the only crate with ring `unsafe`. See `docs/design.md`, "Engines".
//!
//! The ring also counts the entries the kernel has taken and whose completions have not been
//! reaped yet ([`Ring::in_kernel`]): a thread that holds the completion lock and sees that
//! count above zero knows a completion will arrive, so sleeping in the kernel for one cannot
//! hang. Every kernel wait here is for as many completions as the caller knows will come
//! (one, unless it counts its own entries in the kernel) and bounded by a timeout; the caller
//! re-checks what it waits for after each (see `src/method/io_uring.rs` for the protocol).

use dbaio_sys::{Op, Request};
use io_uring::{IoUring, Probe, opcode, squeue, types};
use parking_lot::{Mutex, MutexGuard};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// `IORING_ENTER_GETEVENTS`: wait for completions.
const ENTER_GETEVENTS: u32 = 1;
/// `IORING_ENTER_EXT_ARG`: the argument is an `io_uring_getevents_arg` (a timeout).
const ENTER_EXT_ARG: u32 = 8;

/// A file descriptor as the ring should see it.
#[derive(Clone, Copy, Debug)]
pub enum Fd {
    /// A plain descriptor.
    Raw(RawFd),
    /// An index into the ring's registered-file table.
    Fixed(u32),
}

/// Which operations the running kernel's io_uring supports (older kernels lack some).
#[derive(Clone, Copy, Debug, Default)]
pub struct Support {
    /// `IORING_OP_UNLINKAT` (5.11).
    pub unlink: bool,
    /// `IORING_OP_RENAMEAT` (5.11).
    pub rename: bool,
    /// `IORING_OP_FADVISE` (5.6).
    pub fadvise: bool,
    /// `IORING_OP_FALLOCATE` (5.6).
    pub fallocate: bool,
    /// `IORING_OP_FTRUNCATE` (6.9).
    pub ftruncate: bool,
}

/// Why io_uring cannot be used here.
#[derive(Clone, Debug)]
pub struct Refused {
    /// The errno of the failed `io_uring_setup`.
    pub errno: i32,
    /// What that errno means here, in words for an operator.
    pub cause: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let os = io::Error::from_raw_os_error(self.errno).to_string();
        let os = os.split(" (os error").next().unwrap_or(&os).to_string();
        write!(f, "{}: {os} (errno {})", self.cause, self.errno)
    }
}

fn refusal_cause(errno: i32) -> String {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    match errno {
        libc::EPERM => match sysctl {
            Some(2) => "io_uring is disabled by sysctl kernel.io_uring_disabled = 2".into(),
            Some(1) => "io_uring is restricted by sysctl kernel.io_uring_disabled = 1 to \
                        members of kernel.io_uring_group"
                .into(),
            _ => "io_uring is denied to this process (a seccomp filter or container policy)".into(),
        },
        libc::ENOSYS => "this kernel has no io_uring (Linux 5.6 or later is needed)".into(),
        libc::EMFILE | libc::ENFILE => {
            "no file descriptor left for a ring (raise \"ulimit -n\")".into()
        }
        libc::ENOMEM => {
            "the ring's memory could not be allocated or locked (RLIMIT_MEMLOCK)".into()
        }
        _ => "io_uring_setup failed".into(),
    }
}

/// Checks that io_uring can be used by this process, and which optional ops it has.
pub fn probe() -> Result<Support, Refused> {
    let ring = IoUring::new(2).map_err(|e| {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        Refused {
            errno,
            cause: refusal_cause(errno),
        }
    })?;
    let mut p = Probe::new();
    if ring.submitter().register_probe(&mut p).is_err() {
        return Ok(Support::default());
    }
    Ok(Support {
        unlink: p.is_supported(opcode::UnlinkAt::CODE),
        rename: p.is_supported(opcode::RenameAt::CODE),
        fadvise: p.is_supported(opcode::Fadvise::CODE),
        fallocate: p.is_supported(opcode::Fallocate::CODE),
        ftruncate: p.is_supported(opcode::Ftruncate::CODE),
    })
}

/// An io_uring instance with a submission lock (the owner, in practice) and a completion lock
/// (whoever reaps).
pub struct Ring {
    ring: IoUring,
    /// Made with `COOP_TASKRUN` and `TASKRUN_FLAG`.
    coop: bool,
    sq_lock: Mutex<()>,
    cq_lock: Mutex<()>,
    fixed_files: u32,
    /// Entries the kernel took whose completions have not been reaped yet. Signed: a
    /// completion can be reaped a moment before its submitter counts the entry as taken.
    in_kernel: AtomicI64,
    /// An errno the next submissions fail with instead of entering the kernel (tests).
    injected: AtomicI32,
    /// The injected refusal is for the next submission only.
    inject_once: AtomicBool,
    /// Set once `enter` refused a timeout (a kernel before 5.11).
    no_timeouts: AtomicU32,
    /// The registered buffers, in index order (see [`Ring::register_buffers`]).
    fixed_buffers: OnceLock<Box<[FixedBuffer]>>,
    /// Where `fixed_buffers` start in the ring's table: after the slab's entries, or at 0
    /// on a kernel without sparse tables (which then registers no slab chunks).
    pool_base: AtomicU32,
    /// The sparse buffer table (`SLAB_ENTRIES + POOL_ENTRIES` entries), made on first need,
    /// or the errno the kernel refused it with.
    table: OnceLock<Result<(), i32>>,
    /// Chunks of the registered-buffer slab registered with this ring: `0 .. slab_chunks`,
    /// at table entries of the same numbers (see [`Ring::register_slab`]).
    slab_chunks: AtomicU32,
    /// The kernel refused a slab chunk: the ring registers no more of them.
    slab_refused: AtomicBool,
    /// Serialises registrations (the owner's submissions and `register_buffers`).
    register_lock: Mutex<()>,
    /// Entries submitted as fixed transfers (written under the submission lock).
    fixed_entries: AtomicU64,
}

/// Table entries for the registered-buffer slab: one per chunk, entry `k` for chunk `k`.
const SLAB_ENTRIES: u32 = dbaio_sys::slab::MAX_CHUNKS;
/// Table entries for [`Ring::register_buffers`]' regions (pieces of at most 1 GiB).
const POOL_ENTRIES: u32 = 256;

/// One registered buffer: `len` bytes at address `base`.
#[derive(Clone, Copy, Debug)]
struct FixedBuffer {
    base: usize,
    len: usize,
}

/// The most bytes one registered buffer may span (the kernel's limit).
const MAX_FIXED_BUFFER: usize = 1 << 30;

/// The iovecs for (address, length) pairs, as the kernel's registration calls take them.
fn iovecs(pieces: impl Iterator<Item = (usize, usize)>) -> Vec<libc::iovec> {
    pieces
        .map(|(base, len)| libc::iovec {
            iov_base: base as *mut libc::c_void,
            iov_len: len,
        })
        .collect()
}

/// The submission side, locked. Pushed entries go to the kernel on [`Submission::submit`].
pub struct Submission<'a> {
    ring: &'a Ring,
    sq: squeue::SubmissionQueue<'a>,
    _guard: MutexGuard<'a, ()>,
}

/// The completion side, locked.
pub struct Completion<'a> {
    ring: &'a Ring,
    _guard: MutexGuard<'a, ()>,
}

impl std::os::fd::AsRawFd for Ring {
    /// The ring's descriptor: readable (`poll`, `epoll`) while completions wait to be reaped.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }
}

/// What [`Completion::submit_and_wait_one`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waited {
    /// Entries the kernel took in the call.
    pub taken: usize,
    /// The time limit ended the wait (no completion came).
    pub timed_out: bool,
}

/// The submission queue is full; submit first.
#[derive(Debug, Clone, Copy)]
pub struct QueueFull;

impl Ring {
    /// Creates a ring with room for `entries` submissions (twice that many completions) and,
    /// when `fixed_files > 0`, a sparse registered-file table of that size.
    pub fn new(entries: u32, fixed_files: u32) -> Result<Ring, Refused> {
        let to_refused = |e: io::Error| {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            Refused {
                errno,
                cause: refusal_cause(errno),
            }
        };
        let entries = entries.max(2).next_power_of_two();
        // Cooperative task work (Linux 5.19): a completion's task work waits for the owner's
        // next entry into the kernel (a system call, an interrupt's return, or a wakeup if it
        // sleeps) instead of an inter-processor interrupt per completion; the flag says
        // when some is pending, so a non-blocking reap knows to enter (`Completion::flush`).
        // Older kernels refuse the flags: the ring is then made without them.
        let mut coop = IoUring::builder();
        coop.setup_cqsize(entries * 2)
            .setup_coop_taskrun()
            .setup_taskrun_flag();
        let (ring, coop) = match coop.build(entries) {
            Ok(r) => (r, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                IoUring::builder()
                    .setup_cqsize(entries * 2)
                    .build(entries)
                    .map_err(to_refused)?,
                false,
            ),
            Err(e) => return Err(to_refused(e)),
        };
        if fixed_files > 0 {
            ring.submitter()
                .register_files_sparse(fixed_files)
                .map_err(to_refused)?;
        }
        Ok(Ring {
            ring,
            coop,
            sq_lock: Mutex::new(()),
            cq_lock: Mutex::new(()),
            fixed_files,
            in_kernel: AtomicI64::new(0),
            injected: AtomicI32::new(0),
            inject_once: AtomicBool::new(false),
            no_timeouts: AtomicU32::new(0),
            fixed_buffers: OnceLock::new(),
            pool_base: AtomicU32::new(SLAB_ENTRIES),
            table: OnceLock::new(),
            slab_chunks: AtomicU32::new(0),
            slab_refused: AtomicBool::new(false),
            register_lock: Mutex::new(()),
            fixed_entries: AtomicU64::new(0),
        })
    }

    /// Registers the memory regions `regions` (address, length) with the ring as fixed
    /// buffers (split into pieces of at most 1 GiB), once per ring: from then on a read or
    /// write of one contiguous piece of memory inside one of them is submitted as
    /// `READ_FIXED`/`WRITE_FIXED`, and the kernel does not look up and pin its pages for
    /// each I/O. Fails as the kernel refuses it (`ENOMEM` past `RLIMIT_MEMLOCK`, `EFAULT`,
    /// …); the ring then goes on without registered buffers.
    ///
    /// # Safety
    ///
    /// Each region must be mapped, and its addresses must keep the pages they have now,
    /// for as long as the ring lives: the kernel holds on to the pages it registers, so a
    /// region unmapped or remapped (`munmap`, `MADV_DONTNEED`, a hole punched in its file)
    /// would have fixed I/Os land in pages that are no longer the region's.
    pub unsafe fn register_buffers(&self, regions: &[(*const u8, usize)]) -> io::Result<()> {
        let mut pieces = Vec::new();
        for &(base, len) in regions {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(MAX_FIXED_BUFFER);
                pieces.push(FixedBuffer {
                    base: base as usize + done,
                    len: n,
                });
                done += n;
            }
        }
        if pieces.is_empty() || pieces.len() > POOL_ENTRIES as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let pinned = iovecs(pieces.iter().map(|p| (p.base, p.len)));
        let _held = self.register_lock.lock();
        if self.fixed_buffers.get().is_some() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        match self.table() {
            Ok(()) => {
                // SAFETY: the regions stay mapped to the same pages while the ring lives
                // (this function's contract).
                unsafe { self.update_entries(SLAB_ENTRIES, &pinned) }.map_err(|(done, e)| {
                    // Empty the entries filled before the refusal: none is used.
                    let blank = iovecs(std::iter::repeat_n((0, 0), done));
                    // SAFETY: empty entries pin nothing.
                    let _ = unsafe { self.update_entries(SLAB_ENTRIES, &blank) };
                    e
                })?
            }
            // A kernel before 5.13 has no sparse tables: the regions alone, from entry 0.
            Err(_) => {
                // SAFETY: as above.
                unsafe { self.ring.submitter().register_buffers(&pinned) }?;
                self.pool_base.store(0, Ordering::Relaxed);
            }
        }
        let _ = self.fixed_buffers.set(pieces.into_boxed_slice());
        Ok(())
    }

    /// The ring's sparse buffer table, made on first need.
    fn table(&self) -> io::Result<()> {
        let made = self.table.get_or_init(|| {
            self.ring
                .submitter()
                .register_buffers_sparse(SLAB_ENTRIES + POOL_ENTRIES)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
        });
        made.map_err(io::Error::from_raw_os_error)
    }

    /// Whether the registered-buffer slab has chunks this ring has not registered yet (and
    /// may still): then [`Ring::register_slab`] is due. A few loads.
    #[inline]
    pub fn slab_pending(&self) -> bool {
        dbaio_sys::slab::enabled().is_some_and(|s| {
            s.committed() > self.slab_chunks.load(Ordering::Relaxed)
                && !self.slab_refused.load(Ordering::Relaxed)
        })
    }

    /// Registers the slab's chunks committed since the last call (each at the table entry of
    /// its number), so that reads and writes into buffers made from them go in as fixed
    /// ones. A chunk is committed once and never returned (`dbaio_sys::slab`), so its pages
    /// stay the registered ones for as long as the ring lives.
    ///
    /// `holder(k)` names a ring of this process that has chunk `k` already: its entry is
    /// shared (`IORING_REGISTER_CLONE_BUFFERS`, Linux 6.12), which pins and counts against
    /// `RLIMIT_MEMLOCK` nothing more. Otherwise, or where sharing fails (an older kernel),
    /// the chunk is registered anew, and `registered(k)` is told. After a refusal (`ENOMEM`
    /// past `RLIMIT_MEMLOCK`, a kernel without sparse tables) the ring registers no more;
    /// the error is returned once, and buffers in unregistered chunks go in as ordinary I/O.
    ///
    /// At most `room` chunks are registered (the memory the caller may lock); past it the
    /// ring registers no more, as after a refusal, and the error says so
    /// ([`io::ErrorKind::QuotaExceeded`]).
    pub fn register_slab<'r>(
        &self,
        holder: &dyn Fn(u32) -> Option<&'r Ring>,
        registered: &dyn Fn(u32),
        room: u32,
    ) -> io::Result<()> {
        let Some(slab) = dbaio_sys::slab::enabled() else {
            return Ok(());
        };
        let _held = self.register_lock.lock();
        let have = self.slab_chunks.load(Ordering::Relaxed);
        let committed = slab.committed();
        let now = committed.min(room.max(have));
        if committed <= have || self.slab_refused.load(Ordering::Relaxed) {
            return Ok(());
        }
        let refuse = |k: u32, e: io::Error| {
            // The chunks registered before the refusal are usable; none after.
            self.slab_chunks.store(k, Ordering::Release);
            self.slab_refused.store(true, Ordering::Relaxed);
            Err(e)
        };
        // (No table for a ring that may register nothing: the kernel charges it to the
        // memory-lock limit too.)
        if now > have
            && let Err(e) = self.table()
        {
            return refuse(have, e);
        }
        for k in have..now {
            if holder(k).is_some_and(|src| self.share_entry(src, k)) {
                continue;
            }
            let (p, n) = slab.chunk(k);
            let iov = iovecs(std::iter::once((p as usize, n)));
            // SAFETY: committed chunks stay mapped to the same pages for the life of the
            // process (`dbaio_sys::slab`).
            if let Err((_, e)) = unsafe { self.update_entries(k, &iov) } {
                return refuse(k, e);
            }
            registered(k);
        }
        if committed > now {
            return refuse(now, io::ErrorKind::QuotaExceeded.into());
        }
        self.slab_chunks.store(now, Ordering::Release);
        Ok(())
    }

    /// Shares `src`'s table entry `k` as this ring's entry `k` (the same pinned pages, not
    /// pinned or counted again); false if the kernel cannot (before Linux 6.12).
    fn share_entry(&self, src: &Ring, k: u32) -> bool {
        self.ring
            .submitter()
            .register_buffers_clone_offset(
                src.ring.as_raw_fd(),
                k,
                k,
                1,
                types::CloneBuffersFlags::DST_REPLACE,
            )
            .is_ok()
    }

    /// Fills table entries from `first` with `iovecs`, one entry per call: the kernel may
    /// fill some entries of a call and then refuse the next (`RLIMIT_MEMLOCK`), and says so
    /// only by a count the `io-uring` crate drops, so a call of several could not tell
    /// which entries hold memory. `Err` carries how many were filled before the refusal.
    ///
    /// # Safety
    ///
    /// Each iovec's memory must keep its pages for as long as the ring lives (or be empty).
    unsafe fn update_entries(
        &self,
        first: u32,
        iovecs: &[libc::iovec],
    ) -> Result<(), (usize, io::Error)> {
        for (k, v) in iovecs.iter().enumerate() {
            // SAFETY: the caller's contract; the kernel reads the one iovec during the call.
            unsafe {
                self.ring.submitter().register_buffers_update(
                    first + k as u32,
                    std::slice::from_ref(v),
                    None,
                )
            }
            .map_err(|e| (k, e))?;
        }
        Ok(())
    }

    /// Bytes of the buffer pool registered as fixed buffers (0: none).
    pub fn fixed_buffer_bytes(&self) -> usize {
        self.fixed_buffers
            .get()
            .map_or(0, |b| b.iter().map(|p| p.len).sum())
    }

    /// Bytes of the registered-buffer slab registered with this ring.
    pub fn slab_bytes(&self) -> usize {
        self.slab_chunks.load(Ordering::Relaxed) as usize * dbaio_sys::slab::CHUNK
    }

    /// Entries submitted as fixed transfers so far.
    pub fn fixed_entries(&self) -> u64 {
        self.fixed_entries.load(Ordering::Relaxed)
    }

    /// The registered buffer that holds all of `len` bytes at `addr`, if any; counts it as
    /// one more fixed entry (called holding the submission lock, so a load and a store). A
    /// slab chunk is found from the address; the pool's pieces by a search (one, mostly).
    fn fixed_buffer_of(&self, addr: usize, len: usize) -> Option<u16> {
        let index = match dbaio_sys::slab::enabled().and_then(|s| s.chunk_of(addr, len)) {
            Some(k) => (k < self.slab_chunks.load(Ordering::Acquire)).then_some(k)?,
            None => {
                let pieces = self.fixed_buffers.get()?;
                let k = pieces
                    .iter()
                    .position(|p| addr >= p.base && addr + len <= p.base + p.len)?;
                self.pool_base.load(Ordering::Relaxed) + k as u32
            }
        };
        let n = self.fixed_entries.load(Ordering::Relaxed);
        self.fixed_entries.store(n + 1, Ordering::Relaxed);
        Some(index as u16)
    }

    /// Entries the kernel has taken whose completions are not reaped yet. Read under the
    /// completion lock, after draining, a value above zero means a completion will come: a
    /// wait for one cannot hang.
    pub fn in_kernel(&self) -> i64 {
        self.in_kernel.load(Ordering::SeqCst)
    }

    fn timeouts_work(&self) -> bool {
        self.no_timeouts.load(Ordering::Relaxed) == 0
    }

    /// Makes the next submissions fail with `errno` without entering the kernel, until
    /// called with 0. For tests of the submission error path.
    #[doc(hidden)]
    pub fn inject_submit_error(&self, errno: i32) {
        self.inject_once.store(false, Ordering::SeqCst);
        self.injected.store(errno, Ordering::SeqCst);
    }

    /// Makes the next submission only fail with `errno` (a refusal that passes, such as
    /// EAGAIN when no request could be had). For tests of the submission error path.
    #[doc(hidden)]
    pub fn inject_submit_error_once(&self, errno: i32) {
        self.inject_once.store(true, Ordering::SeqCst);
        self.injected.store(errno, Ordering::SeqCst);
    }

    /// The injected refusal for this submission, if any (0: none); a one-shot one is spent.
    fn injected_refusal(&self) -> i32 {
        let e = self.injected.load(Ordering::Relaxed);
        if e != 0 && self.inject_once.load(Ordering::Relaxed) {
            self.injected.swap(0, Ordering::SeqCst)
        } else {
            e
        }
    }

    /// Size of the registered-file table (0 when files are not registered).
    pub fn fixed_files(&self) -> u32 {
        self.fixed_files
    }

    /// Puts `fd` (or -1 to clear) into registered-file slot `slot`.
    pub fn update_fixed_file(&self, slot: u32, fd: RawFd) -> io::Result<()> {
        self.ring
            .submitter()
            .register_files_update(slot, &[fd])
            .map(|_| ())
    }

    /// Locks the submission side.
    pub fn submission(&self) -> Submission<'_> {
        let guard = self.sq_lock.lock();
        // SAFETY: `sq_lock` is held for the lifetime of the returned SubmissionQueue, so no
        // other SubmissionQueue of this ring exists at the same time.
        let sq = unsafe { self.ring.submission_shared() };
        Submission {
            ring: self,
            sq,
            _guard: guard,
        }
    }

    /// Locks the completion side, waiting for another reaper to finish.
    pub fn completion(&self) -> Completion<'_> {
        Completion {
            ring: self,
            _guard: self.cq_lock.lock(),
        }
    }

    /// Whether the ring was made with cooperative task work (`COOP_TASKRUN`).
    pub fn is_cooperative(&self) -> bool {
        self.coop
    }

    /// True while some thread holds the completion side (it reaps, and may sleep in the
    /// kernel for a completion).
    pub fn is_reaping(&self) -> bool {
        self.cq_lock.is_locked()
    }

    /// Locks the completion side if no one else holds it.
    pub fn try_completion(&self) -> Option<Completion<'_>> {
        self.cq_lock.try_lock().map(|g| Completion {
            ring: self,
            _guard: g,
        })
    }
}

/// Builds an entry with the opcode builder `$b`, passing the file as a plain or fixed fd.
macro_rules! on_fd {
    ($fd:expr, |$t:ident| $body:expr) => {
        match $fd {
            Fd::Raw(raw) => {
                let $t = types::Fd(raw);
                $body
            }
            Fd::Fixed(i) => {
                let $t = types::Fixed(i);
                $body
            }
        }
    };
}

/// A single buffer's length as a read or write entry carries it: at most what one system call
/// moves (`MAX_RW_COUNT`; the rest comes back short, as from `pread`), never cut to 32 bits.
fn one_call(len: usize) -> u32 {
    len.min(dbaio_sys::MAX_RW_COUNT) as u32
}

/// The entry for `req` on `fd` (the request's descriptor as the ring should see it); a
/// transfer of one piece of memory inside a registered buffer of `ring` is a fixed one.
fn build(ring: &Ring, req: &Request, fd: Fd) -> squeue::Entry {
    // The kernel would read or write at the file's position for offset -1: the embedder runs
    // such a request itself (`perform` refuses it), it never comes here.
    debug_assert!(!req.offset_out_of_range());
    let (offset, len) = (req.offset, req.len);
    let (iov, iovcnt) = (req.iov, req.iovcnt);
    let fixed = |v: &libc::iovec| ring.fixed_buffer_of(v.iov_base as usize, v.iov_len);
    match req.op {
        Op::Readv if iovcnt == 1 => {
            // SAFETY: the iovec is valid per `Submission::push`'s contract.
            let v = unsafe { *iov };
            // (A 32-bit length: a longer buffer is offered as the most one read moves.)
            let (p, n) = (v.iov_base.cast::<u8>(), one_call(v.iov_len));
            match fixed(&v) {
                Some(k) => on_fd!(fd, |t| opcode::ReadFixed::new(t, p, n, k)
                    .offset(offset)
                    .build()),
                None => on_fd!(fd, |t| opcode::Read::new(t, p, n).offset(offset).build()),
            }
        }
        Op::Readv => on_fd!(fd, |t| opcode::Readv::new(t, iov, iovcnt)
            .offset(offset)
            .build()),
        Op::Writev if iovcnt == 1 => {
            // SAFETY: the iovec is valid per `Submission::push`'s contract.
            let v = unsafe { *iov };
            let (p, n) = (v.iov_base.cast_const().cast::<u8>(), one_call(v.iov_len));
            match fixed(&v) {
                Some(k) => on_fd!(fd, |t| opcode::WriteFixed::new(t, p, n, k)
                    .offset(offset)
                    .build()),
                None => on_fd!(fd, |t| opcode::Write::new(t, p, n).offset(offset).build()),
            }
        }
        Op::Writev => on_fd!(fd, |t| opcode::Writev::new(t, iov, iovcnt)
            .offset(offset)
            .build()),
        Op::Fsync => on_fd!(fd, |t| opcode::Fsync::new(t).build()),
        Op::Fdatasync => on_fd!(fd, |t| opcode::Fsync::new(t)
            .flags(types::FsyncFlags::DATASYNC)
            .build()),
        Op::Unlink => opcode::UnlinkAt::new(types::Fd(libc::AT_FDCWD), req.path).build(),
        Op::Rename => {
            let cwd = types::Fd(libc::AT_FDCWD);
            // SAFETY: a rename's request holds its two paths back to back (`Request::path`),
            // valid per `Submission::push`'s contract.
            let to = unsafe { dbaio_sys::second_path(req.path) };
            opcode::RenameAt::new(cwd, req.path, cwd, to).build()
        }
        Op::FadviseWillneed => on_fd!(fd, |t| opcode::Fadvise::new(
            t,
            len as libc::off_t,
            libc::POSIX_FADV_WILLNEED
        )
        .offset(offset)
        .build()),
        Op::Fallocate => on_fd!(fd, |t| opcode::Fallocate::new(t, len)
            .offset(offset)
            .build()),
        Op::Ftruncate => on_fd!(fd, |t| opcode::Ftruncate::new(t, len).build()),
        // Never submitted: a NOP that completes with an error the caller reports.
        Op::Invalid => opcode::Nop::new().build(),
    }
}

impl Submission<'_> {
    /// Queues `req` on `fd` (its descriptor, plain or registered) with `user_data`;
    /// `punt_async` sets `IOSQE_ASYNC` (run in io-wq rather than inline in the submitter,
    /// worthwhile for buffered I/O when many are in flight).
    ///
    /// # Safety
    ///
    /// Every pointer in `req` must stay valid, and its memory must not be accessed in a way
    /// that conflicts with the operation, until the completion with `user_data` has been
    /// reaped. The file descriptor must stay open that long.
    pub unsafe fn push(
        &mut self,
        req: &Request,
        fd: Fd,
        user_data: u64,
        punt_async: bool,
    ) -> Result<(), QueueFull> {
        let mut e = build(self.ring, req, fd).user_data(user_data);
        if punt_async {
            e = e.flags(squeue::Flags::ASYNC);
        }
        // SAFETY: the caller guarantees the entry's memory outlives its completion (above).
        unsafe { self.sq.push(&e) }.map_err(|_| QueueFull)
    }

    /// Queues a no-op with `user_data`: it completes at once, so a thread asleep in the
    /// kernel for one completion of this ring wakes (and looks again at what it waits for).
    pub fn push_nop(&mut self, user_data: u64) -> Result<(), QueueFull> {
        let e = opcode::Nop::new().build().user_data(user_data);
        // SAFETY: a no-op names no memory.
        unsafe { self.sq.push(&e) }.map_err(|_| QueueFull)
    }

    /// Number of entries queued and not yet submitted.
    pub fn pending(&self) -> usize {
        self.sq.len()
    }

    /// Hands every queued entry to the kernel with one `io_uring_enter`, retrying on `EINTR`.
    /// Returns how many the kernel took (fewer than queued when it stopped at a bad entry;
    /// call again). `EBUSY`/`EAGAIN` are returned to the caller, who should reap completions
    /// and try again.
    pub fn submit(&mut self) -> io::Result<usize> {
        self.sq.sync();
        loop {
            let r = match self.ring.injected_refusal() {
                0 => self.ring.ring.submitter().submit(),
                errno => Err(io::Error::from_raw_os_error(errno)),
            };
            match r {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Ok(n) => {
                    self.sq.sync();
                    self.taken(n);
                    return Ok(n);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Publishes the queued entries to the kernel's view of the queue (the tail), without
    /// entering the kernel: the ring's owner then submits them with
    /// [`Completion::submit_and_wait_one`] while holding only the completion side.
    pub fn publish(&mut self) {
        self.sq.sync();
    }

    /// Forgets the entries queued and not taken by the kernel. They stay in the ring's
    /// memory, so the caller must never submit on this ring again (it retires it).
    pub fn abandon(&mut self) {
        self.sq.sync();
    }

    /// The kernel took `n` entries.
    fn taken(&mut self, n: usize) {
        self.ring.count_taken(n);
    }
}

impl Ring {
    fn count_taken(&self, n: usize) {
        if n > 0 {
            self.in_kernel.fetch_add(n as i64, Ordering::SeqCst);
        }
    }
}

impl Completion<'_> {
    /// Calls `f(user_data, result)` for every completion ready now; returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(u64, i32)) -> usize {
        // SAFETY: `cq_lock` is held by this guard, so no other CompletionQueue of the ring
        // exists at the same time.
        let mut cq = unsafe { self.ring.ring.completion_shared() };
        let mut n = 0;
        for cqe in &mut cq {
            n += 1;
            f(cqe.user_data(), cqe.result());
        }
        if n > 0 {
            self.ring.in_kernel.fetch_sub(n as i64, Ordering::SeqCst);
        }
        n
    }

    /// Lets the kernel post completions whose task work is still pending (a cooperative
    /// ring's `IORING_SQ_TASKRUN`); call before a [`Completion::drain`] that will not block:
    /// without it the calling thread could poll an empty queue until its next system call
    /// or timer tick. Only the ring's owner runs its task work; for another thread the
    /// entry costs a system call and posts nothing.
    pub fn flush(&mut self) {
        if self.ring.coop && self.task_work_pending() {
            // SAFETY: to_submit = 0 and min_complete = 0 with GETEVENTS only runs pending
            // task work and returns; it touches no user memory.
            let _ = unsafe {
                self.ring
                    .ring
                    .submitter()
                    .enter::<libc::sigset_t>(0, 0, ENTER_GETEVENTS, None)
            };
        }
    }

    /// `IORING_SQ_TASKRUN`, read under the submission lock if it is free (if it is not, the
    /// holder is about to enter the kernel anyway).
    fn task_work_pending(&self) -> bool {
        let Some(_g) = self.ring.sq_lock.try_lock() else {
            return false;
        };
        // SAFETY: `sq_lock` is held, so this is the only SubmissionQueue of the ring; only
        // its flags word is read.
        unsafe { self.ring.ring.submission_shared() }.taskrun()
    }

    /// Completions ready to drain now.
    pub fn ready(&mut self) -> usize {
        // SAFETY: as in `drain`: the lock makes this the only CompletionQueue.
        unsafe { self.ring.ring.completion_shared() }.len()
    }

    /// True when no completion is ready.
    pub fn is_empty(&mut self) -> bool {
        // SAFETY: as in `drain`: the lock makes this the only CompletionQueue.
        unsafe { self.ring.ring.completion_shared() }.is_empty()
    }

    /// Sleeps in the kernel until a completion is ready or `limit` passes (kernels before
    /// 5.11 cannot bound it: then it waits for the completion). With `submit`, the entries
    /// published with [`Submission::publish`] are handed to the kernel in the same call — only
    /// the ring's owner, who pushes every entry, may ask for that; if the kernel takes fewer
    /// than were published it does not wait, and the caller submits the rest. May return
    /// early on a signal; the caller re-checks what it waits for either way. Never asks for
    /// more than one completion: another thread may reap or run what the caller waits for
    /// as soon as it lets the completion side go, so a count could be left unreachable.
    pub fn submit_and_wait_one(&mut self, submit: bool, limit: Duration) -> io::Result<Waited> {
        // A call that submits returns the count it submitted even when its wait timed out:
        // then the clock, and an empty queue, tell the end of the limit from a completion (a
        // thread preempted after a completion woke it finds the completion there).
        let started = submit.then(std::time::Instant::now);
        let submitter = self.ring.ring.submitter();
        if submit {
            if let e @ 1.. = self.ring.injected_refusal() {
                return Err(io::Error::from_raw_os_error(e));
            }
        }
        let r = if self.ring.timeouts_work() {
            let ts = types::Timespec::from(limit);
            let args = types::SubmitArgs::new().timespec(&ts);
            if submit {
                submitter.submit_with_args(1, &args)
            } else {
                // SAFETY: to_submit = 0 only waits for completions; with EXT_ARG the argument
                // is an `io_uring_getevents_arg` (SubmitArgs is a transparent wrapper of one)
                // that lives across the call, as does the timespec it points to.
                unsafe {
                    submitter.enter::<types::SubmitArgs<'_, '_>>(
                        0,
                        1,
                        ENTER_GETEVENTS | ENTER_EXT_ARG,
                        Some(&args),
                    )
                }
            }
        } else if submit {
            submitter.submit_and_wait(1)
        } else {
            // SAFETY: `enter` with to_submit = 0 and no argument only waits for completions;
            // it touches no user memory.
            unsafe { submitter.enter::<libc::sigset_t>(0, 1, ENTER_GETEVENTS, None) }
        };
        let waited = |taken, timed_out| Waited { taken, timed_out };
        match r {
            Ok(n) => {
                let n = if submit { n } else { 0 };
                self.ring.count_taken(n);
                let timed_out = started.is_some_and(|t| t.elapsed() >= limit) && self.ready() == 0;
                Ok(waited(n, timed_out))
            }
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(waited(0, true)),
            // A signal: the caller re-checks and waits again if it must.
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(waited(0, false)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && self.ring.timeouts_work() => {
                // A kernel without EXT_ARG: wait without a bound from now on.
                self.ring.no_timeouts.store(1, Ordering::Relaxed);
                Ok(waited(0, false))
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    /// On a cooperative ring a completion's task work waits for the owner's next entry into
    /// the kernel; `flush` is that entry for a reap that does not block. A read of an empty
    /// pipe waits in the kernel; another thread fills the pipe while this one spins without
    /// a system call, so the completion is held back as task work (unless a timer tick ran
    /// it first, which the test reports), and `flush` must post it.
    #[test]
    fn flush_posts_a_completion_held_back_as_task_work() {
        let ring = match Ring::new(8, 0) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("SKIPPED: io_uring refused: {}", e.cause);
                return;
            }
        };
        if !ring.is_cooperative() {
            eprintln!("SKIPPED: this kernel refuses COOP_TASKRUN (before 5.19)");
            return;
        }
        let (rd, wr) = nix::unistd::pipe().expect("pipe");
        let mut byte = [0u8; 1];
        let iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&rd);
        let read = Request {
            op: Op::Readv,
            fd,
            file: u32::MAX,
            offset: 0, // a pipe has no position: the kernel ignores it
            len: 1,
            iov: &iov,
            iovcnt: 1,
            path: std::ptr::null(),
            user_data: 7,
        };
        let mut sq = ring.submission();
        // SAFETY: `iov`, `byte` and the pipe outlive the completion, reaped below.
        unsafe { sq.push(&read, Fd::Raw(fd), 7, false) }.expect("room");
        assert_eq!(sq.submit().expect("submit"), 1);
        drop(sq);
        let written = Arc::new(AtomicBool::new(false));
        let writer = {
            let written = Arc::clone(&written);
            std::thread::spawn(move || {
                assert_eq!(nix::unistd::write(&wr, b"x").expect("write"), 1);
                written.store(true, Ordering::Release);
                wr
            })
        };
        while !written.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let mut cq = ring.completion();
        let held_back = cq.task_work_pending();
        if held_back {
            assert!(
                cq.is_empty(),
                "task work pending, yet the completion is posted"
            );
        } else {
            eprintln!("a timer tick ran the task work before the check; flush not exercised");
        }
        cq.flush();
        let mut got = Vec::new();
        assert_eq!(cq.drain(|ud, res| got.push((ud, res))), 1);
        assert_eq!(got, [(7, 1)]);
        assert_eq!(byte, *b"x");
        drop(cq);
        drop(writer.join().expect("writer"));
    }

    /// One buffer longer than 4 GiB: the entry's 32-bit length must not wrap (4 GiB and a
    /// page read as one page: a 64 KiB file came back as 4 KiB, and a 4 GiB buffer as a
    /// false end of file). It is offered as one system call's worth, as `pread` takes it.
    /// The buffer is reserved, not touched: only the pages read into are.
    #[test]
    fn a_buffer_over_4_gib_is_not_cut_to_32_bits() {
        let ring = match Ring::new(8, 0) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("SKIPPED: io_uring refused: {}", e.cause);
                return;
            }
        };
        let dir = std::env::temp_dir().join(format!("dbaio-uring-4g-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("f");
        std::fs::write(&path, vec![7u8; 65536]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        for len in [4usize << 30, (4 << 30) + 4096] {
            // SAFETY: a fresh private anonymous mapping; unmapped below, after the read.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED, "mmap");
            let iov = libc::iovec {
                iov_base: base,
                iov_len: len,
            };
            let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
            let read = Request {
                op: Op::Readv,
                fd,
                file: u32::MAX,
                offset: 0,
                len: 0,
                iov: &iov,
                iovcnt: 1,
                path: std::ptr::null(),
                user_data: 9,
            };
            let mut sq = ring.submission();
            // SAFETY: `iov`, the mapping and the file outlive the completion, reaped below.
            unsafe { sq.push(&read, Fd::Raw(fd), 9, false) }.expect("room");
            assert_eq!(sq.submit().expect("submit"), 1);
            drop(sq);
            let mut cq = ring.completion();
            let mut got = Vec::new();
            while got.is_empty() {
                cq.submit_and_wait_one(false, Duration::from_secs(10))
                    .expect("wait");
                cq.drain(|ud, res| got.push((ud, res)));
            }
            drop(cq);
            assert_eq!(
                got,
                [(9, 65536)],
                "a read of {len} bytes from a 64 KiB file"
            );
            // SAFETY: the read is complete; nothing refers to the mapping any more.
            unsafe { libc::munmap(base, len) };
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
