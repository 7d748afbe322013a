//! `Issuer`'s inline path (a part of `Issuer` kept apart: two transitions, counted instructions).
//!
//! The inline path is one read or write that its issuer runs at once, in its own thread, and
//! that no one else can name — the slice I/O of `slice.rs` (`read_into`, `write_all_from`) —
//! or one of the issuer's wait-for-it helpers on a file (`Issuer::fsync`, `fdatasync`,
//! `ftruncate`, `fallocate`), whose callers wait at once too.
//! It is apart from `slice.rs` because it is the one place a handle takes two transitions
//! instead of the full lifecycle, and every instruction here is counted.
//!
//! Such an I/O needs little of the handle protocol. No `WaitRef` to it ever exists, so no
//! other thread can wait on it, claim it or complete it; it has no callbacks, no ticket and no
//! batch; the caller's borrow of the `File` keeps the file open. What it still needs is to be
//! seen: the aios view shows it as SUBMITTED with its op, file, offset and age, and the
//! issuer's wait event says what it waits for; its statistics and its error message are the
//! same as on the full path. So it takes an idle handle, fills the fields the view shows, and
//! makes two transitions, IDLE → SUBMITTED and SUBMITTED → IDLE (a new generation), instead
//! of the eight of a handle's full lifecycle, with one clock read on each side of the
//! system call (a plain `pread`/`pwrite`).
//!
//! Every instruction here is paid on each page-cache hit of an engine that reads through
//! slices (redb's backend does about one per point read), so the path is kept short: the
//! result is a byte count, and only a failure builds an error (from the slot, on a cold
//! path, before the handle goes back to idle); fields only a failure's description reads
//! (raw result, executor, attempts) are written only then.
//!
//! It steps aside for the full path (returns `Inline::Declined`) whenever anything unusual is
//! going on: fault rules armed (so injected faults behave exactly as everywhere else), files
//! on a simulated disk (their data is not behind a descriptor), a
//! handle handed out, no idle handle, shutdown, a `File` of another subsystem, or an
//! O_DIRECT request that is not aligned (the slice layer bounces it). See `docs/design.md`,
//! "Slice I/O".

use super::file::File;
use super::issuer::Issuer;
use super::slice::DIRECT_ALIGN;
use crate::handle::error::IoError;
use crate::handle::op::{HandleFlags, Op};
use crate::handle::result::IoResult;
use crate::handle::slot::{Executor, HandleSlot, HandleState};
use crate::handle::wait_event::WaitEvent;
use dbaio_sys::{Request, perform, retry_transient};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One `pread` or `pwrite` of `iov`: the byte count, or `-errno`.
///
/// # Safety
///
/// `iov` names memory valid for the transfer (writable for a read) for the whole call.
#[inline]
unsafe fn transfer(fd: i32, iov: &libc::iovec, offset: u64, write: bool) -> i32 {
    let off = offset as libc::off_t;
    let n = if write {
        // SAFETY: the memory is valid to read (function contract).
        unsafe { libc::pwrite(fd, iov.iov_base, iov.iov_len, off) }
    } else {
        // SAFETY: the memory is valid to write (function contract).
        unsafe { libc::pread(fd, iov.iov_base, iov.iov_len, off) }
    };
    if n < 0 {
        -std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        // At most `iov_len`, which fits: slice I/O splits nothing, and the kernel moves at
        // most 0x7ffff000 bytes per call.
        n as i32
    }
}

/// Why the inline path did not transfer any bytes.
pub(super) enum Inline {
    /// It stepped aside: take the full path.
    Declined,
    /// The I/O ran and failed (boxed: the success path returns in two registers).
    Failed(Box<IoError>),
}

impl Issuer {
    /// Runs one read (or write) of the memory `iov` names, in this thread, on the inline
    /// path: `Ok(bytes)` (0 for a read at or past the end of the file; a write of 0 bytes
    /// is a failure), [`Inline::Failed`] if it failed, [`Inline::Declined`] if this I/O
    /// must take the full path (see the module documentation).
    ///
    /// # Safety
    ///
    /// The memory must stay valid, and untouched by anyone else, for the whole call.
    #[inline]
    pub(super) unsafe fn run_inline(
        &self,
        file: &File,
        offset: u64,
        iov: libc::iovec,
        write: bool,
    ) -> Result<usize, Inline> {
        let op = if write { Op::Writev } else { Op::Readv };
        let spans = offset | iov.iov_base as u64 | iov.iov_len as u64;
        self.run_inline_op(file, op, offset, iov.iov_len as u64, spans, |fd| {
            // SAFETY: the iovec names the caller's memory, valid and untouched by anyone
            // else until we return (this function's contract); the fd is open while `file`
            // is borrowed.
            unsafe { transfer(fd, &iov, offset, write) }
        })
    }

    /// Runs one `fsync`, `fdatasync`, `ftruncate` or `fallocate` of `file` in this thread on
    /// the inline path (`offset` and `len` as [`Request`] takes them): `Ok(())`,
    /// [`Inline::Failed`] if it failed, [`Inline::Declined`] if it must take the full path.
    pub(super) fn run_inline_on_file(
        &self,
        file: &File,
        op: Op,
        offset: u64,
        len: u64,
    ) -> Result<(), Inline> {
        debug_assert!(matches!(
            op,
            Op::Fsync | Op::Fdatasync | Op::Ftruncate | Op::Fallocate
        ));
        self.run_inline_op(file, op, offset, len, 0, |fd| {
            let req = Request {
                op,
                fd,
                file: file.slot,
                offset,
                len,
                iov: std::ptr::null(),
                iovcnt: 0,
                path: std::ptr::null(),
                user_data: 0,
            };
            // SAFETY: the op names no memory, only the descriptor, open while `file` is
            // borrowed.
            unsafe { perform(&req) }
        })
        .map(|_| ())
    }

    /// The inline path's one body: declines or takes an idle handle, shows the I/O as
    /// SUBMITTED, runs `execute` (given the descriptor) until it returns something other
    /// than a transient failure, records it and puts the handle back. `length` is the bytes
    /// a transfer asks for (the `len` of the other ops); `spans`: a transfer's offset, address
    /// and length or'ed together (O_DIRECT refuses it unless that is aligned), 0 for the
    /// other ops.
    #[inline(always)]
    fn run_inline_op(
        &self,
        file: &File,
        op: Op,
        offset: u64,
        length: u64,
        spans: u64,
        execute: impl FnMut(i32) -> i32,
    ) -> Result<usize, Inline> {
        let shared = &self.aio.shared;
        let (li, direct) = self.take_inline_handle(file, spans)?;
        let idx = self.base + li;
        let s = shared.slot(idx);
        let fd = shared.files.slots[file.slot as usize]
            .fd
            .load(Ordering::Acquire);
        let staged = self.publish_inline(s, file, fd, direct, op, offset, length);
        let (raw, attempts) = self.execute_retrying(idx, op, fd, staged, execute);
        let completed = shared.io_clock_ns();
        // A read of 0 bytes is the end of the file (an error in the statistics, as on the
        // full path, but not a failure for the caller); a write of 0 bytes is a failure; the
        // other ops return 0.
        let ok = raw > 0 || (raw == 0 && (length == 0 || !op.transfers_data()));
        let outcome = if ok || (raw == 0 && op == Op::Readv) {
            Ok(raw as usize)
        } else {
            Err(Inline::Failed(Box::new(self.describe_inline(
                s, idx, op, raw, length, attempts, completed,
            ))))
        };
        self.aio.stats.record(
            self.slot,
            op,
            raw.max(0) as u64,
            completed.saturating_sub(staged),
            ok,
            Executor::Issuer,
        );
        s.next_generation();
        s.set_state(HandleState::Submitted, HandleState::Idle);
        s.reset();
        self.local_mut().idle.push(li);
        outcome
    }

    /// An idle handle of this issuer for an inline I/O on `file` (its index among the
    /// issuer's, and whether the file is O_DIRECT), after submitting what an open batch
    /// staged; declined where the full path must run it.
    #[inline(always)]
    fn take_inline_handle(&self, file: &File, spans: u64) -> Result<(u32, bool), Inline> {
        let shared = &self.aio.shared;
        if shared.faults.armed()
            || shared.storage.is_some()
            || shared.shutting_down.load(Ordering::Relaxed)
            || !Arc::ptr_eq(&file.aio, &self.aio)
            || self.aio.owner.forked_since()
        {
            // (A child made by fork shares the parent's handle table: the full path refuses.)
            return Err(Inline::Declined);
        }
        let direct = shared.files.slots[file.slot as usize]
            .direct
            .load(Ordering::Relaxed);
        if direct && spans % DIRECT_ALIGN != 0 {
            // An unaligned O_DIRECT request: the caller bounces it.
            return Err(Inline::Declined);
        }
        let mut l = self.local_mut();
        if l.handed_out.is_some() {
            return Err(Inline::Declined);
        }
        // The caller waits for this one: what its batch staged goes first, as before any
        // wait.
        if !l.staged.is_empty() {
            self.submit_staged_locked(&mut l);
        }
        let li = l.idle.pop().ok_or(Inline::Declined)?;
        Ok((li, direct))
    }

    /// Fills idle handle slot `s` with the inline I/O and shows it SUBMITTED; returns the
    /// time it was staged.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // the I/O's facts, all at hand in the caller
    fn publish_inline(
        &self,
        s: &HandleSlot,
        file: &File,
        fd: i32,
        direct: bool,
        op: Op,
        offset: u64,
        length: u64,
    ) -> u64 {
        let r = Ordering::Relaxed;
        let mut flags = HandleFlags::SYNCHRONOUS.0;
        if !direct && op.transfers_data() {
            flags |= HandleFlags::BUFFERED.0;
        }
        // The handle is IDLE and ours: no one reads these fields until SUBMITTED publishes
        // them (the view skips idle handles, and re-checks the generation after copying).
        // A transfer's iovec itself stays with the caller: only this thread executes the
        // I/O (the count is for the view).
        s.fields_generation.store(s.generation.load(r) as u32, r);
        s.op.store(op as u8, r);
        s.offset.store(offset, r);
        s.length.store(length, r);
        s.file.store(file.slot, r);
        s.fd.store(fd, r);
        s.flags.store(flags, r);
        s.iov_count.store(u16::from(op.transfers_data()), r);
        s.executor.store(Executor::Issuer.encode(), r);
        let staged = self.aio.shared.io_clock_ns();
        s.staged_ns.store(staged, r);
        s.set_state(HandleState::Idle, HandleState::Submitted);
        staged
    }

    /// Runs `execute` on `fd` until it returns something other than a transient failure,
    /// the issuer shown waiting on handle `idx` meanwhile; returns the result and the
    /// retries it took.
    #[inline(always)]
    fn execute_retrying(
        &self,
        idx: u32,
        op: Op,
        fd: i32,
        staged: u64,
        mut execute: impl FnMut(i32) -> i32,
    ) -> (i32, u8) {
        let info = self.info();
        info.begin_wait(WaitEvent::for_sync_op(op), u64::from(idx), staged);
        let mut attempts = 0;
        let raw = loop {
            let raw = execute(fd);
            if retry_transient(raw, attempts) {
                attempts += 1;
                let now = self.aio.shared.io_clock_ns();
                info.begin_wait(WaitEvent::for_sync_op(op), u64::from(idx), now);
                continue;
            }
            break raw;
        };
        info.end_wait();
        (raw, attempts)
    }

    /// The error for a failed inline I/O, built from its slot as on the full path (the
    /// result fields are written first: the description reads them).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)] // the I/O's facts, all at hand in the caller
    fn describe_inline(
        &self,
        s: &HandleSlot,
        idx: u32,
        op: Op,
        raw: i32,
        len: u64,
        attempts: u8,
        completed: u64,
    ) -> IoError {
        let r = Ordering::Relaxed;
        let result = IoResult::from_raw(op, raw, len);
        s.raw_result.store(raw, r);
        s.completed_ns.store(completed, r);
        s.distilled.store(result.pack(), r);
        s.attempts.store(attempts, r);
        self.aio.shared.describe(idx, result, None)
    }
}
