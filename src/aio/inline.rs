//! The inline path: one read or write that its issuer runs at once, in its own thread, and
//! that no one else can name — the slice I/O of `slice.rs` (`read_into`, `write_all_from`).
//!
//! Such an I/O needs little of the handle protocol. No `WaitRef` to it ever exists, so no
//! other thread can wait on it, claim it or complete it; it has no callbacks, no ticket and no
//! batch; the caller's borrow of the `File` keeps the file open. What it still needs is to be
//! seen: the aios view shows it as SUBMITTED with its op, file, offset and age, and the
//! issuer's wait event says what it waits for; its statistics and its error message are the
//! same as on the full path. So it takes an idle handle, fills it, and makes two transitions,
//! IDLE → SUBMITTED and SUBMITTED → IDLE (a new generation), instead of the eight of a handle's
//! full lifecycle, with one clock read on each side of the system call.
//!
//! It steps aside for the full path (returns `None`) whenever anything unusual is going on:
//! fault rules armed (so injected faults behave exactly as everywhere else), a handle handed
//! out, no idle handle, shutdown, or a `File` of another subsystem. See `docs/design.md`,
//! "Slice I/O".

use super::file::File;
use super::io::Completion;
use super::issuer::Issuer;
use crate::handle::op::{HandleFlags, Op};
use crate::handle::result::{ERROR_DATA_PANICKED, IoResult, Status};
use crate::handle::shared::MAX_ATTEMPTS;
use crate::handle::slot::{Executor, HandleState};
use crate::handle::wait_event::WaitEvent;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Issuer {
    /// Runs one read (or write) of the memory `iov` names, in this thread, on the inline
    /// path; `None` if this I/O must take the full one (see the module documentation).
    ///
    /// # Safety
    ///
    /// The memory must stay valid, and untouched by anyone else, for the whole call.
    pub(super) unsafe fn run_inline(
        &self,
        file: &File,
        offset: u64,
        iov: libc::iovec,
        write: bool,
    ) -> Option<Completion> {
        let shared = &self.aio.shared;
        if shared.faults.armed()
            || shared.shutting_down.load(Ordering::Relaxed)
            || !Arc::ptr_eq(&file.aio, &self.aio)
        {
            return None;
        }
        let li = {
            let mut l = self.local.borrow_mut();
            if l.handed_out.is_some() {
                return None;
            }
            l.idle.pop()?
        };
        let idx = self.base + li;
        let s = shared.slot(idx);
        let r = Ordering::Relaxed;
        let op = if write { Op::Writev } else { Op::Readv };
        let fd = shared.files.slots[file.slot as usize]
            .fd
            .load(Ordering::Acquire);
        let mut flags = HandleFlags::SYNCHRONOUS.0;
        if !file.is_direct() {
            flags |= HandleFlags::BUFFERED.0;
        }
        // The handle is IDLE and ours: no one reads these fields until SUBMITTED publishes
        // them (the view skips idle handles, and re-checks the generation after copying).
        s.op.store(op as u8, r);
        s.offset.store(offset, r);
        s.length.store(iov.iov_len as u64, r);
        s.file.store(file.slot, r);
        s.fd.store(fd, r);
        s.flags.store(flags, r);
        // The iovec itself stays here: only this thread executes the I/O (the count is for
        // the view).
        s.iov_count.store(1, r);
        let staged = shared.now_ns();
        let mut since = staged;
        s.staged_ns.store(staged, r);
        s.set_state(HandleState::Idle, HandleState::Submitted);

        let info = self.info();
        // Built from what we hold, not read back from the slot.
        let req = dbaio_workers::Request {
            op: op.engine_code(),
            fd,
            file: u32::MAX,
            offset,
            len: iov.iov_len as u64,
            iov: &iov,
            iovcnt: 1,
            path: std::ptr::null(),
            user_data: u64::from(idx),
        };
        let mut retries = 0;
        let (raw, panicked) = loop {
            info.begin_wait(WaitEvent::for_sync_op(op), u64::from(idx), since);
            // SAFETY: the iovec names the caller's memory, valid and untouched by anyone else
            // until we return (this function's contract); the fd is open while `file` is
            // borrowed.
            let raw = catch_unwind(AssertUnwindSafe(|| unsafe { dbaio_workers::perform(&req) }));
            info.end_wait();
            match raw {
                Ok(raw)
                    if (raw == -libc::EAGAIN || raw == -libc::EINTR) && retries < MAX_ATTEMPTS =>
                {
                    retries += 1;
                    since = shared.now_ns();
                }
                Ok(raw) => break (raw, false),
                Err(_) => break (-libc::EIO, true),
            }
        };
        let completed = shared.now_ns();
        let result = if panicked {
            tracing::error!(
                io_id = idx,
                "the thread executing an I/O panicked; failing the I/O"
            );
            IoResult {
                status: Status::Error,
                callback_id: 0,
                error_data: ERROR_DATA_PANICKED,
                result: 0,
            }
        } else {
            IoResult::from_raw(op, raw, iov.iov_len as u64)
        };
        s.raw_result.store(raw, r);
        s.executor.store(Executor::Issuer.encode(), r);
        s.completed_ns.store(completed, r);
        s.distilled.store(result.pack(), r);
        s.attempts.store(retries, r);
        let error = matches!(result.status, Status::Error | Status::Partial)
            .then(|| shared.describe(idx, result, None));
        self.aio.stats.record(
            self.slot,
            op,
            result.result.max(0) as u64,
            completed.saturating_sub(staged),
            result.status != Status::Error,
            Executor::Issuer,
        );
        s.generation.fetch_add(1, Ordering::AcqRel);
        s.set_state(HandleState::Submitted, HandleState::Idle);
        s.reset();
        self.local.borrow_mut().idle.push(li);
        Some(Completion::inline(
            result,
            op,
            offset,
            iov.iov_len as u64,
            error,
        ))
    }
}
