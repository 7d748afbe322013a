//! The `io_uring` method: one ring per issuer slot, created when the issuer registers. The
//! issuer pushes a whole batch and submits it with one `io_uring_enter`. Anyone waiting on one
//! of the issuer's I/Os may reap its ring under the ring's completion lock and run the shared
//! callbacks (foreign completion), so an issuer that blocks elsewhere stalls no one. Buffered
//! reads of 128 KiB or more are punted to io-wq (`IOSQE_ASYNC`) once more than four I/Os are
//! in flight (PostgreSQL punts all buffered I/O so); smaller ones run inline, where a
//! page-cache hit costs a third as much ([`INLINE_BUFFERED_MAX`]). See `docs/design.md`, "Methods".
//!
//! The protocol between the submitter (the issuer) and reapers (anyone waiting), which keeps
//! them from deadlocking each other:
//!
//! - A handle becomes SUBMITTED only here, as it is pushed, and it is counted as unsubmitted
//!   (`Ring::unsubmitted`) from just before its claim until the kernel has taken it.
//! - A reaper sleeps in the kernel holding the completion lock only while nothing is
//!   unsubmitted: whatever it waits for is then in the kernel and will complete. While
//!   entries are unsubmitted it waits for the submitter's next submission instead.
//! - The submitter never blocks on the completion lock while it holds unsubmitted entries:
//!   it takes the lock only if free (to submit and wait in one system call), and otherwise
//!   submits first.
//! - Nothing blocking runs under the completion lock: an I/O whose attempt ended in EAGAIN or
//!   EINTR is executed again after the lock is released.
//! - A submission the kernel refuses (other than EAGAIN/EBUSY/EINTR) retires the ring: the
//!   I/Os it held fail with the error, and the issuer's later I/Os run synchronously. Their
//!   entries stay in the ring's memory, never to be submitted.
//! - A reaper's sleep in the kernel is bounded (a backstop, not the mechanism): an I/O
//!   completed without a completion entry (failed at submission, or executed again) is
//!   noticed.

use super::IoMethod;
use super::watcher::Watcher;
use crate::handle::error::AioError;
use crate::handle::files::NO_FILE;
use crate::handle::op::{HandleFlags, Op};
use crate::handle::result::{ERROR_DATA_SUBMIT_FAILED, IoResult, Status};
use crate::handle::settings::{IoMethodKind, Settings};
use crate::handle::shared::{Completed, Shared};
use crate::handle::slot::{Executor, HandleState};
use dbaio_uring::{Completion, Fd, Ring, Submission, Support};
use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Buffered I/Os beyond this many in flight may be punted to io-wq (`IOSQE_ASYNC`), as
/// PostgreSQL does so that io-wq's threads copy from the page cache in parallel — but only
/// reads of at least [`PUNT_MIN_BYTES`], on a machine with a second CPU. Cached random reads
/// at depth 32 on this 2-CPU machine, punted against inline: 4 KiB 262–273k against 572–612k
/// IOPS (5.4–5.8 against 1.6–1.7 µs of CPU per read), 16 KiB 169k against 305k, 64 KiB 98k
/// against 147k; at 128 KiB punting wins, 101–110k against 95–103k IOPS, with 60% more CPU
/// (docs/benchmarks.md). The kernel reads what is not cached without io-wq anyway (async
/// buffered reads), so the punt buys only parallel copying, which pays once a copy outweighs
/// the hand-off (~3–4 µs).
const INLINE_BUFFERED_MAX: u32 = 4;
/// The smallest buffered read punted (see [`INLINE_BUFFERED_MAX`]).
const PUNT_MIN_BYTES: u64 = 128 << 10;
/// Fewer CPUs than this: buffered reads are never punted (nothing to copy in parallel with).
const PUNT_MIN_CPUS: usize = 2;
/// The longest a reaper sleeps in the kernel before it looks at its I/O again.
const BACKSTOP: Duration = Duration::from_millis(100);
/// Submissions refused with EAGAIN/EBUSY are tried this many times (about a second) before
/// the refusal is taken as final.
const SUBMIT_TRIES: u32 = 1000;

struct RingSlot {
    ring: OnceLock<Ring>,
    in_flight: AtomicU32,
    /// I/Os being executed again after EAGAIN/EINTR, outside the completion lock.
    retrying: AtomicU32,
    /// The errno of a submission the kernel refused: the ring is retired (0: it is not).
    retired: AtomicI32,
}

/// The rings and their protocol; shared with the watcher thread (see [`UringMethod`]).
struct Uring {
    rings: Box<[RingSlot]>,
    support: Support,
    entries: u32,
    fixed_files: u32,
    /// Serialises ring creation against file registration so no ring misses a file.
    files_lock: Mutex<()>,
    shared: Arc<Shared>,
    /// Large buffered reads may be punted to io-wq (enough CPUs; see [`INLINE_BUFFERED_MAX`]).
    punt_large_reads: bool,
}

/// I/Os to execute again once the completion lock is released.
struct Retries {
    few: [u32; 32],
    n: usize,
    more: Vec<u32>,
}

impl Retries {
    fn new() -> Retries {
        Retries {
            few: [0; 32],
            n: 0,
            more: Vec::new(),
        }
    }

    fn push(&mut self, i: u32) {
        if self.n < self.few.len() {
            self.few[self.n] = i;
            self.n += 1;
        } else {
            self.more.push(i);
        }
    }

    fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// The handles one push queued, in order (a submission is at most a batch of 32).
struct Pushed {
    ids: [u32; 32],
    n: usize,
}

impl Pushed {
    fn new() -> Pushed {
        Pushed { ids: [0; 32], n: 0 }
    }

    fn as_slice(&self) -> &[u32] {
        &self.ids[..self.n]
    }
}

/// Handles are pushed and submitted in groups of at most this many.
const PUSH_GROUP: usize = 32;

impl Uring {
    /// Probes io_uring; `Err` is the refusal in words.
    fn start(settings: &Settings, shared: &Arc<Shared>) -> Result<Uring, String> {
        let support = dbaio_uring::probe().map_err(|r| r.to_string())?;
        Ok(Uring {
            rings: (0..settings.max_issuers)
                .map(|_| RingSlot {
                    ring: OnceLock::new(),
                    in_flight: AtomicU32::new(0),
                    retrying: AtomicU32::new(0),
                    retired: AtomicI32::new(0),
                })
                .collect(),
            support,
            entries: shared.per_issuer,
            fixed_files: if settings.io_uring_registered_files {
                settings.max_files
            } else {
                0
            },
            files_lock: Mutex::new(()),
            shared: Arc::clone(shared),
            punt_large_reads: std::thread::available_parallelism()
                .is_ok_and(|n| n.get() >= PUNT_MIN_CPUS),
        })
    }

    fn ring(&self, issuer: u32) -> Option<&Ring> {
        self.rings.get(issuer as usize).and_then(|r| r.ring.get())
    }

    fn retired(&self, issuer: u32) -> bool {
        self.rings[issuer as usize].retired.load(Ordering::Acquire) != 0
    }

    /// Reaps every completion ready on the locked completion side; I/Os to execute again go
    /// to `retries` (run them with [`Uring::run_retries`] once the lock is released).
    fn drain(
        &self,
        shared: &Shared,
        issuer: u32,
        cq: &mut Completion<'_>,
        retries: &mut Retries,
    ) -> usize {
        let slot = &self.rings[issuer as usize];
        cq.drain(|user_data, res| {
            let i = user_data as u32;
            slot.in_flight.fetch_sub(1, Ordering::Relaxed);
            if shared.complete_catching(i, res, Executor::Ring) == Completed::Retry {
                retries.push(i);
            }
        })
    }

    /// Marks `retries` as being executed again (call before the completion lock goes).
    fn retrying(&self, issuer: u32, retries: &Retries) {
        let n = retries.n + retries.more.len();
        if n > 0 {
            self.rings[issuer as usize]
                .retrying
                .fetch_add(n as u32, Ordering::AcqRel);
        }
    }

    /// Executes the I/Os of `retries` again, in this thread, without any lock held.
    fn run_retries(&self, shared: &Shared, issuer: u32, retries: &Retries) {
        let slot = &self.rings[issuer as usize];
        for &i in retries.few[..retries.n].iter().chain(&retries.more) {
            shared.perform_synchronously(i, Executor::Ring);
            slot.retrying.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Reaps under an already-held completion side, then releases it and runs the retries.
    fn drain_and_release(&self, shared: &Shared, issuer: u32, mut cq: Completion<'_>) -> usize {
        let mut retries = Retries::new();
        let n = self.drain(shared, issuer, &mut cq, &mut retries);
        self.retrying(issuer, &retries);
        drop(cq);
        self.run_retries(shared, issuer, &retries);
        n
    }

    /// Claims each of `handles` (at most [`PUSH_GROUP`]; STAGED → SUBMITTED) and queues it
    /// on the locked submission side; returns the handles pushed, in order. A handle someone
    /// else claimed (a waiter that ran it) is skipped.
    fn push(
        &self,
        shared: &Shared,
        issuer: u32,
        sq: &mut Submission<'_>,
        handles: &[u32],
    ) -> Pushed {
        debug_assert!(handles.len() <= PUSH_GROUP);
        let mut pushed = Pushed::new();
        let counter = &self.rings[issuer as usize].in_flight;
        for &i in handles {
            sq.reserve();
            if !shared.claim_submit(i) {
                sq.unreserve();
                continue;
            }
            let op = self.build(shared, i);
            let s = shared.slot(i);
            s.executor.store(Executor::Ring.encode(), Ordering::Relaxed);
            let in_flight = counter.fetch_add(1, Ordering::Relaxed);
            let punt = self.punt_large_reads
                && s.flags().contains(HandleFlags::BUFFERED)
                && s.op() == Op::Readv
                && s.length.load(Ordering::Relaxed) >= PUNT_MIN_BYTES
                && in_flight >= INLINE_BUFFERED_MAX;
            // SAFETY: the handle is SUBMITTED: its iovecs, buffers and path are parked in the
            // handle until reclaim, which waits for this entry's completion; the file's fd is
            // held open by the handle's file reference until then too.
            while unsafe { sq.push(&op, u64::from(i), punt) }.is_err() {
                // The ring has an entry per handle of its issuer, so it is never full while
                // every flush empties it; should it be, hand the queue over first.
                let _ = sq.submit();
                std::thread::yield_now();
            }
            pushed.ids[pushed.n] = i;
            pushed.n += 1;
        }
        pushed
    }

    /// Hands every queued entry (the handles `pushed`, in order) to the kernel. Refusals that
    /// pass (EAGAIN, EBUSY: the completion queue is full) are retried, reaping first when the
    /// completion side is free — never blocking on it, since these entries are unsubmitted.
    /// A refusal that does not pass retires the ring and fails the entries not taken.
    fn flush(
        &self,
        shared: &Shared,
        issuer: u32,
        ring: &Ring,
        sq: &mut Submission<'_>,
        pushed: &[u32],
    ) {
        let mut taken = 0;
        let mut tries = 0;
        while taken < pushed.len() {
            let errno = match sq.submit() {
                Ok(n) if n > 0 => {
                    taken += n;
                    continue;
                }
                Ok(_) => libc::EAGAIN,
                Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
            };
            tries += 1;
            if matches!(errno, libc::EAGAIN | libc::EBUSY) && tries < SUBMIT_TRIES {
                match ring.try_completion() {
                    Some(cq) => {
                        self.drain_and_release(shared, issuer, cq);
                    }
                    None => std::thread::sleep(Duration::from_millis(1)),
                }
                continue;
            }
            self.retire(shared, issuer, sq, &pushed[taken..], errno);
            return;
        }
    }

    /// The kernel refused a submission for good: retire the ring and fail `lost`, the I/Os
    /// it did not take, with `errno`.
    fn retire(
        &self,
        shared: &Shared,
        issuer: u32,
        sq: &mut Submission<'_>,
        lost: &[u32],
        errno: i32,
    ) {
        let slot = &self.rings[issuer as usize];
        slot.retired.store(errno, Ordering::Release);
        tracing::error!(
            issuer,
            "io_uring_enter refused to submit {} I/O(s): {}; they fail, and this issuer's \
             later I/Os run synchronously",
            lost.len(),
            std::io::Error::from_raw_os_error(errno)
        );
        for &i in lost {
            slot.in_flight.fetch_sub(1, Ordering::Relaxed);
            let base = IoResult {
                status: Status::Error,
                callback_id: 0,
                error_data: ERROR_DATA_SUBMIT_FAILED | (errno as u32 & 0xfff),
                result: 0,
            };
            shared.fail(i, -errno, Executor::Ring, base);
        }
        sq.abandon();
    }

    /// Reaps what is ready; with nothing ready and nothing unsubmitted, sleeps in the kernel
    /// for one completion first (bounded). For a thread with no unsubmitted entries of its
    /// own, so blocking on the completion side is safe.
    fn reap_or_wait(&self, shared: &Shared, issuer: u32, ring: &Ring) {
        let mut cq = ring.completion();
        let mut retries = Retries::new();
        if self.drain(shared, issuer, &mut cq, &mut retries) == 0
            && retries.is_empty()
            && ring.unsubmitted() == 0
            && self.rings[issuer as usize].retrying.load(Ordering::Acquire) == 0
        {
            let _ = cq.wait(1, Some(BACKSTOP));
            self.drain(shared, issuer, &mut cq, &mut retries);
        }
        self.retrying(issuer, &retries);
        drop(cq);
        self.run_retries(shared, issuer, &retries);
    }

    /// Runs `handles` synchronously, claiming each (a retired ring submits nothing).
    fn run_inline(&self, shared: &Shared, handles: &[u32]) {
        for &i in handles {
            if shared.claim_submit(i) {
                shared.perform_synchronously(i, Executor::Issuer);
            }
        }
    }

    fn build(&self, shared: &Shared, i: u32) -> dbaio_uring::Op {
        let s = shared.slot(i);
        let r = Ordering::Relaxed;
        let file = s.file.load(r);
        let fd = if file != NO_FILE && file < self.fixed_files {
            Fd::Fixed(file)
        } else {
            Fd::Raw(s.fd.load(r))
        };
        let offset = s.offset.load(r);
        let len = s.length.load(r);
        let iov = shared.iovecs(i);
        let iovcnt = u32::from(s.iov_count.load(r));
        match s.op() {
            Op::Readv => dbaio_uring::Op::Readv {
                fd,
                iov,
                iovcnt,
                offset,
            },
            Op::Writev => dbaio_uring::Op::Writev {
                fd,
                iov,
                iovcnt,
                offset,
            },
            Op::Fsync => dbaio_uring::Op::Fsync {
                fd,
                datasync: false,
            },
            Op::Fdatasync => dbaio_uring::Op::Fsync { fd, datasync: true },
            Op::Unlink => dbaio_uring::Op::Unlink {
                path: s.path.load(r) as *const libc::c_char,
            },
            Op::FadviseWillneed => dbaio_uring::Op::FadviseWillneed { fd, offset, len },
            Op::Fallocate => dbaio_uring::Op::Fallocate { fd, offset, len },
            Op::Ftruncate => dbaio_uring::Op::Ftruncate { fd, len },
            Op::Invalid => unreachable!("an undefined handle is never submitted"),
        }
    }
}

impl IoMethod for Uring {
    fn kind(&self) -> IoMethodKind {
        IoMethodKind::IoUring
    }

    fn needs_synchronous_execution(&self, shared: &Shared, i: u32) -> bool {
        let s = shared.slot(i);
        if self.retired(s.owner.load(Ordering::Relaxed)) {
            return true;
        }
        match s.op() {
            // A buffered write the file system cannot do without blocking would be handed to
            // an io-wq kernel thread: ~15 us at depth 1 here against ~3 us for the pwrite it
            // is. The issuer does it (docs/design.md, "io_uring and buffered writes").
            Op::Writev => shared
                .files
                .slots
                .get(s.file.load(Ordering::Relaxed) as usize)
                .is_some_and(|f| f.blocking_buffered_writes.load(Ordering::Relaxed)),
            Op::Unlink => !self.support.unlink,
            Op::FadviseWillneed => !self.support.fadvise,
            Op::Fallocate => !self.support.fallocate,
            Op::Ftruncate => !self.support.ftruncate,
            _ => false,
        }
    }

    fn init_issuer(&self, shared: &Shared, issuer: u32) -> Result<(), AioError> {
        let slot = &self.rings[issuer as usize];
        if slot.ring.get().is_some() {
            return Ok(());
        }
        let _g = self.files_lock.lock();
        let ring =
            Ring::new(self.entries, self.fixed_files).map_err(|r| AioError::IoUringRefused {
                cause: r.to_string(),
            })?;
        for (file, fd) in shared.files.open_files() {
            if file < self.fixed_files {
                ring.update_fixed_file(file, fd).map_err(AioError::Start)?;
            }
        }
        let _ = slot.ring.set(ring);
        Ok(())
    }

    fn submit(&self, shared: &Shared, issuer: u32, handles: &[u32]) {
        let Some(ring) = self.ring(issuer).filter(|_| !self.retired(issuer)) else {
            return self.run_inline(shared, handles);
        };
        let mut sq = ring.submission();
        for group in handles.chunks(PUSH_GROUP) {
            let pushed = self.push(shared, issuer, &mut sq, group);
            self.flush(shared, issuer, ring, &mut sq, pushed.as_slice());
        }
    }

    fn wait_one(&self, shared: &Shared, i: u32, generation: u64) -> bool {
        let s = shared.slot(i);
        let issuer = s.owner.load(Ordering::Relaxed);
        let Some(ring) = self.ring(issuer) else {
            return false;
        };
        let slot = &self.rings[issuer as usize];
        let mine = || {
            s.generation.load(Ordering::Acquire) == generation
                && s.state() == HandleState::Submitted
        };
        loop {
            if !mine() {
                return true;
            }
            // Entries pushed but not in the kernel yet: the submitter is handing them over
            // (it never waits for us); wait for that rather than sleep in the kernel.
            let epoch = ring.submit_epoch();
            if ring.unsubmitted() > 0 && !self.retired(issuer) {
                ring.wait_for_submission(epoch);
                continue;
            }
            let mut cq = ring.completion();
            let mut retries = Retries::new();
            let reaped = self.drain(shared, issuer, &mut cq, &mut retries);
            if reaped == 0
                && retries.is_empty()
                && mine()
                && ring.unsubmitted() == 0
                && slot.retrying.load(Ordering::Acquire) == 0
            {
                if let Err(e) = cq.wait(1, Some(BACKSTOP)) {
                    tracing::warn!(
                        "waiting on io_uring failed: {e}; sleeping on the handle instead"
                    );
                    return false;
                }
            } else if reaped == 0 && retries.is_empty() && mine() {
                // Another thread is executing an I/O again outside the lock, or entries
                // arrived meanwhile: look again shortly.
                drop(cq);
                std::thread::yield_now();
                continue;
            }
            self.retrying(issuer, &retries);
            drop(cq);
            self.run_retries(shared, issuer, &retries);
        }
    }

    fn submit_and_wait(
        &self,
        shared: &Shared,
        issuer: u32,
        handles: &[u32],
        n: u32,
        _seen: u32,
        _own: &[(u32, u64)],
    ) -> bool {
        let Some(ring) = self.ring(issuer) else {
            return false;
        };
        if handles.len() > PUSH_GROUP || self.retired(issuer) {
            // Not one batch (or nothing to submit to): submit first, then wait apart.
            self.submit(shared, issuer, handles);
            self.reap_or_wait(shared, issuer, ring);
            return true;
        }
        let mut sq = ring.submission();
        let pushed = self.push(shared, issuer, &mut sq, handles);
        let pushed = pushed.as_slice();
        let Some(mut cq) = ring.try_completion() else {
            // A reaper has the completion side: hand our entries over first, so that blocking
            // on it is safe (the reaper may be asleep in the kernel waiting for them).
            self.flush(shared, issuer, ring, &mut sq, pushed);
            drop(sq);
            self.reap_or_wait(shared, issuer, ring);
            return true;
        };
        let mut retries = Retries::new();
        if self.drain(shared, issuer, &mut cq, &mut retries) > 0 || !retries.is_empty() {
            // Something finished already: submit without waiting.
            self.retrying(issuer, &retries);
            drop(cq);
            self.flush(shared, issuer, ring, &mut sq, pushed);
            drop(sq);
            self.run_retries(shared, issuer, &retries);
            return true;
        }
        // One system call: submit the batch and wait for `n` completions.
        let taken = match sq.submit_and_wait(n) {
            Ok(k) => k.min(pushed.len()),
            Err(_) => 0,
        };
        if taken < pushed.len() {
            // Refused, interrupted or cut short: hand over the rest the careful way.
            drop(cq);
            self.flush(shared, issuer, ring, &mut sq, &pushed[taken..]);
            return true;
        }
        drop(sq);
        self.drain_and_release(shared, issuer, cq);
        true
    }

    fn inject_submit_error(&self, errno: i32) {
        for r in self.rings.iter().filter_map(|r| r.ring.get()) {
            r.inject_submit_error(errno);
        }
    }

    fn poll(&self, shared: &Shared, issuer: u32) {
        if let Some(mut cq) = self.ring(issuer).and_then(|r| r.try_completion()) {
            // Not blocking, so nothing else brings in completions whose task work the ring
            // holds back for the owner's next entry into the kernel: enter for them.
            cq.flush();
            self.drain_and_release(shared, issuer, cq);
        }
    }

    fn file_opened(&self, slot: u32, fd: RawFd) {
        if slot >= self.fixed_files {
            return;
        }
        let _g = self.files_lock.lock();
        for r in self.rings.iter().filter_map(|r| r.ring.get()) {
            if let Err(e) = r.update_fixed_file(slot, fd) {
                tracing::warn!("could not register file slot {slot} with a ring: {e}");
            }
        }
    }

    fn file_closed(&self, slot: u32) {
        self.file_opened(slot, -1);
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        // Every issuer drains before it goes, so nothing should be in flight; make sure.
        for (issuer, r) in self.rings.iter().enumerate() {
            if let Some(ring) = r.ring.get() {
                while r.in_flight.load(Ordering::Relaxed) > 0 {
                    let mut cq = ring.completion();
                    if cq.is_empty() && cq.wait(1, Some(BACKSTOP)).is_err() {
                        break;
                    }
                    self.drain_and_release(&self.shared, issuer as u32, cq);
                }
            }
        }
    }
}

/// The `io_uring` method: the rings ([`Uring`]), and a watcher thread, started on first use,
/// that reaps the rings of issuers whose I/Os must complete with nobody waiting (tickets
/// awaited as futures, detached I/Os with error callbacks): it sleeps in `epoll` on those
/// rings' descriptors and drains a ring when completions arrive.
pub(crate) struct UringMethod {
    /// Declared first: it stops (and drops its reference to the rings) before they go.
    watcher: OnceLock<Option<Watcher>>,
    uring: Arc<Uring>,
}

impl UringMethod {
    pub(crate) fn start(settings: &Settings, shared: &Arc<Shared>) -> Result<UringMethod, String> {
        Ok(UringMethod {
            watcher: OnceLock::new(),
            uring: Arc::new(Uring::start(settings, shared)?),
        })
    }

    fn watcher(&self) -> Option<&Watcher> {
        self.watcher
            .get_or_init(|| {
                let uring = Arc::clone(&self.uring);
                let reap = move |issuer: u32| {
                    if let Some(ring) = uring.ring(issuer) {
                        // Blocking is fine: the watcher submits nothing, so whoever holds the
                        // completion side never waits for it (see the protocol above).
                        let cq = ring.completion();
                        uring.drain_and_release(&uring.shared, issuer, cq);
                    }
                };
                match Watcher::start("dbaio-uring-watch", Box::new(reap)) {
                    Ok(w) => Some(w),
                    Err(e) => {
                        tracing::warn!(
                            "could not start the io_uring watcher thread ({e}): I/Os nobody waits for complete when their issuer next waits"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }
}

impl IoMethod for UringMethod {
    fn kind(&self) -> IoMethodKind {
        self.uring.kind()
    }
    fn needs_synchronous_execution(&self, shared: &Shared, i: u32) -> bool {
        self.uring.needs_synchronous_execution(shared, i)
    }
    fn init_issuer(&self, shared: &Shared, issuer: u32) -> Result<(), AioError> {
        self.uring.init_issuer(shared, issuer)
    }
    fn submit(&self, shared: &Shared, issuer: u32, handles: &[u32]) {
        self.uring.submit(shared, issuer, handles)
    }
    fn wait_one(&self, shared: &Shared, i: u32, generation: u64) -> bool {
        self.uring.wait_one(shared, i, generation)
    }
    fn submit_and_wait(
        &self,
        shared: &Shared,
        issuer: u32,
        handles: &[u32],
        n: u32,
        seen: u32,
        own: &[(u32, u64)],
    ) -> bool {
        self.uring
            .submit_and_wait(shared, issuer, handles, n, seen, own)
    }
    fn inject_submit_error(&self, errno: i32) {
        self.uring.inject_submit_error(errno)
    }
    fn poll(&self, shared: &Shared, issuer: u32) {
        self.uring.poll(shared, issuer)
    }
    fn watch(&self, issuer: u32) {
        let Some(ring) = self.uring.ring(issuer) else {
            return;
        };
        if let Some(w) = self.watcher() {
            w.watch(issuer, std::os::fd::AsRawFd::as_raw_fd(ring));
        }
    }
    fn file_opened(&self, slot: u32, fd: RawFd) {
        self.uring.file_opened(slot, fd)
    }
    fn file_closed(&self, slot: u32) {
        self.uring.file_closed(slot)
    }
}
