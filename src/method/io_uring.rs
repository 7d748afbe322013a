//! The `io_uring` method: one ring per issuer slot, created when the issuer registers. The
//! issuer pushes a whole batch and submits it with one `io_uring_enter`. Anyone waiting on one
//! of the issuer's I/Os may reap its ring under the ring's completion lock and run the shared
//! callbacks (foreign completion), so an issuer that blocks elsewhere stalls no one. Buffered
//! I/O is punted to io-wq (`IOSQE_ASYNC`) once more than four I/Os are in flight, as in
//! PostgreSQL. See `docs/design.md`, "Methods".

use super::IoMethod;
use crate::handle::error::AioError;
use crate::handle::files::NO_FILE;
use crate::handle::op::{HandleFlags, Op};
use crate::handle::settings::{IoMethodKind, Settings};
use crate::handle::shared::Shared;
use crate::handle::slot::{Executor, HandleState};
use dbaio_uring::{Fd, Ring, Submission, Support};
use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// Buffered I/Os beyond this many in flight are punted to io-wq.
const INLINE_BUFFERED_MAX: u32 = 4;

struct RingSlot {
    ring: OnceLock<Ring>,
    in_flight: AtomicU32,
}

pub(crate) struct UringMethod {
    rings: Box<[RingSlot]>,
    support: Support,
    entries: u32,
    fixed_files: u32,
    /// Serialises ring creation against file registration so no ring misses a file.
    files_lock: Mutex<()>,
    shared: Arc<Shared>,
}

impl UringMethod {
    /// Probes io_uring; `Err` is the refusal in words.
    pub(crate) fn start(settings: &Settings, shared: &Arc<Shared>) -> Result<UringMethod, String> {
        let support = dbaio_uring::probe().map_err(|r| r.to_string())?;
        Ok(UringMethod {
            rings: (0..settings.max_issuers)
                .map(|_| RingSlot {
                    ring: OnceLock::new(),
                    in_flight: AtomicU32::new(0),
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
        })
    }

    fn ring(&self, issuer: u32) -> Option<&Ring> {
        self.rings.get(issuer as usize).and_then(|r| r.ring.get())
    }

    /// Handles one completion reaped from `issuer`'s ring.
    fn complete(&self, shared: &Shared, issuer: u32, user_data: u64, res: i32) {
        let i = user_data as u32;
        self.rings[issuer as usize]
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
        if res == -libc::EAGAIN || res == -libc::EINTR {
            // The kernel gave up on this attempt; run it again here rather than fail it.
            shared.perform_synchronously(i, Executor::Ring);
        } else {
            shared.process_completion(i, res, Executor::Ring);
        }
    }

    /// Queues `handles` on the locked submission side of `issuer`'s ring.
    fn push(&self, shared: &Shared, issuer: u32, sq: &mut Submission<'_>, handles: &[u32]) {
        let counter = &self.rings[issuer as usize].in_flight;
        for &i in handles {
            let op = self.build(shared, i);
            shared
                .slot(i)
                .executor
                .store(Executor::Ring.encode(), Ordering::Relaxed);
            let in_flight = counter.fetch_add(1, Ordering::Relaxed);
            let punt = shared.slot(i).flags().contains(HandleFlags::BUFFERED)
                && in_flight >= INLINE_BUFFERED_MAX;
            // SAFETY: the handle is SUBMITTED: its iovecs, buffers and path are parked in the
            // handle until reclaim, which waits for this entry's completion; the file's fd is
            // held open by the handle's file reference until then too.
            let pushed = unsafe { sq.push(&op, u64::from(i), punt) };
            assert!(
                pushed.is_ok(),
                "ring has one entry per handle of its issuer; it cannot be full"
            );
        }
    }

    /// Hands everything queued to the kernel, reaping first if the completion queue is full.
    fn flush(&self, shared: &Shared, issuer: u32, ring: &Ring, mut sq: Submission<'_>) {
        loop {
            match sq.submit() {
                Ok(_) => return,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN)) => {
                    // The completion queue is backed up: reap, then try again.
                    let mut cq = ring.completion();
                    cq.drain(|ud, res| self.complete(shared, issuer, ud, res));
                }
                Err(e) => panic!("io_uring_enter failed to submit: {e}"),
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

impl IoMethod for UringMethod {
    fn kind(&self) -> IoMethodKind {
        IoMethodKind::IoUring
    }

    fn needs_synchronous_execution(&self, shared: &Shared, i: u32) -> bool {
        match shared.slot(i).op() {
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
        let ring = self
            .ring(issuer)
            .expect("an issuer's ring exists from registration on");
        let mut sq = ring.submission();
        self.push(shared, issuer, &mut sq, handles);
        self.flush(shared, issuer, ring, sq);
    }

    fn wait_one(&self, shared: &Shared, i: u32, generation: u64) -> bool {
        let s = shared.slot(i);
        let issuer = s.owner.load(Ordering::Relaxed);
        let Some(ring) = self.ring(issuer) else {
            return false;
        };
        let mut cq = ring.completion();
        loop {
            if s.generation.load(Ordering::Acquire) != generation
                || s.state() != HandleState::Submitted
            {
                return true;
            }
            if cq.drain(|ud, res| self.complete(shared, issuer, ud, res)) > 0 {
                continue;
            }
            if let Err(e) = cq.wait(1) {
                tracing::warn!("waiting on io_uring failed: {e}; sleeping on the handle instead");
                return false;
            }
        }
    }

    fn submit_and_wait(&self, shared: &Shared, issuer: u32, handles: &[u32], n: u32) -> bool {
        let Some(ring) = self.ring(issuer) else {
            return false;
        };
        let mut sq = ring.submission();
        self.push(shared, issuer, &mut sq, handles);
        let mut cq = ring.completion();
        if cq.drain(|ud, res| self.complete(shared, issuer, ud, res)) > 0 {
            drop(cq);
            self.flush(shared, issuer, ring, sq);
            return true;
        }
        if let Err(e) = sq.submit_and_wait(n) {
            if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN)) {
                cq.drain(|ud, res| self.complete(shared, issuer, ud, res));
                drop(cq);
                self.flush(shared, issuer, ring, sq);
                return true;
            }
            panic!("io_uring_enter failed to submit and wait: {e}");
        }
        drop(sq);
        cq.drain(|ud, res| self.complete(shared, issuer, ud, res));
        true
    }

    fn poll(&self, shared: &Shared, issuer: u32) {
        if let Some(mut cq) = self.ring(issuer).and_then(|r| r.try_completion()) {
            cq.drain(|ud, res| self.complete(shared, issuer, ud, res));
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

impl Drop for UringMethod {
    fn drop(&mut self) {
        // Every issuer drains before it goes, so nothing should be in flight; make sure.
        for (issuer, r) in self.rings.iter().enumerate() {
            if let Some(ring) = r.ring.get() {
                while r.in_flight.load(Ordering::Relaxed) > 0 {
                    let mut cq = ring.completion();
                    if cq.drain(|ud, res| self.complete(&self.shared, issuer as u32, ud, res)) == 0
                        && cq.wait(1).is_err()
                    {
                        break;
                    }
                }
            }
        }
    }
}
