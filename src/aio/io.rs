//! The I/O values a caller holds: [`Handle`] (acquired, not yet started), [`InFlight`]
//! (started; redeem it with [`Issuer::wait`]) and [`Completion`] (the result, with the
//! memory handed back). See `docs/design.md`, "Handles" and "Buffer ownership".

use super::issuer::Issuer;
use super::lifecycle::{Definition, Reclaimed};
use crate::aio::file::File;
use crate::aio::iobuf::IoBuf;
use crate::handle::callback::CallbackId;
use crate::handle::error::{AioError, IoError};
use crate::handle::op::{HandleFlags, Op};
use crate::handle::result::{IoResult, Status};
use crate::handle::slot::{HandleState, MAX_CALLBACKS, WaitRef};
use std::ffi::{CStr, CString};
use std::sync::atomic::Ordering;

/// The memory an I/O uses, parked in the issuer until the I/O is complete.
#[derive(Default)]
pub(crate) enum IoMemory {
    #[default]
    None,
    One(IoBuf),
    Many(Vec<IoBuf>),
    /// An unlink's path, or a rename's two, each NUL-terminated, back to back.
    Paths(Box<[u8]>),
}

impl IoMemory {
    /// Writes iovecs for this memory, skipping the first `skip` bytes; returns (count, bytes).
    ///
    /// # Safety
    ///
    /// `iov` must point at `max` writable iovecs that no one else accesses.
    pub(crate) unsafe fn fill_iovecs(
        &self,
        iov: *mut libc::iovec,
        max: usize,
        skip: u32,
    ) -> (usize, u64) {
        let bufs: &[IoBuf] = match self {
            IoMemory::One(b) => std::slice::from_ref(b),
            IoMemory::Many(v) => v,
            IoMemory::None | IoMemory::Paths(_) => &[],
        };
        let mut skip = skip as usize;
        let (mut n, mut total) = (0usize, 0u64);
        for b in bufs {
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            assert!(
                n < max,
                "iovec count was checked against io_max_combine_limit"
            );
            let len = b.len() - skip;
            // SAFETY: n < max (asserted) and the caller owns the array; the buffer pointer is
            // valid for len bytes past `skip` (it is an IoBuf of b.len() bytes).
            unsafe {
                iov.add(n).write(libc::iovec {
                    iov_base: b.raw().add(skip).cast(),
                    iov_len: len,
                })
            };
            skip = 0;
            n += 1;
            total += len as u64;
        }
        (n, total)
    }
}

/// An acquired handle: set flags, callbacks and block info, then start exactly one I/O with it.
/// Dropping it unused gives it back.
pub struct Handle<'a> {
    issuer: &'a Issuer,
    local: u32,
}

impl<'a> Handle<'a> {
    pub(crate) fn new(issuer: &'a Issuer, local: u32) -> Handle<'a> {
        Handle { issuer, local }
    }

    fn slot(&self) -> &crate::handle::slot::HandleSlot {
        self.issuer
            .aio
            .shared
            .slot(self.issuer.handle_index(self.local))
    }

    /// The wait reference of the I/O this handle will carry.
    pub fn wait_ref(&self) -> WaitRef {
        let generation = self.slot().generation.load(Ordering::Relaxed);
        self.issuer
            .aio
            .shared
            .wait_ref(self.issuer.handle_index(self.local), generation)
    }

    /// Sets flags (see [`HandleFlags`]).
    pub fn set_flags(&mut self, flags: HandleFlags) -> &mut Self {
        // Only the issuer writes a handle's flags (while it holds it): no locked RMW.
        let f = &self.slot().flags;
        f.store(f.load(Ordering::Relaxed) | flags.0, Ordering::Relaxed);
        self
    }

    /// Registers a callback with one byte of data. The last registered runs first.
    pub fn add_callback(&mut self, id: CallbackId, data: u8) -> Result<&mut Self, AioError> {
        if self.issuer.aio.shared.callbacks.get(id.0).is_none() {
            return Err(AioError::ApiViolation("callback id is not registered"));
        }
        let s = self.slot();
        let n = s.num_callbacks.load(Ordering::Relaxed) as usize;
        if n >= MAX_CALLBACKS {
            return Err(AioError::ApiViolation("at most 4 callbacks per handle"));
        }
        s.callbacks[n].store(id.0, Ordering::Relaxed);
        s.callback_data[n].store(data, Ordering::Relaxed);
        s.num_callbacks.store(n as u8 + 1, Ordering::Relaxed);
        Ok(self)
    }

    /// Stores up to `io_max_combine_limit` words for the callbacks (e.g. buffer ids).
    pub fn set_handle_data(&mut self, data: &[u64]) -> Result<&mut Self, AioError> {
        let shared = &self.issuer.aio.shared;
        if data.len() > shared.max_iov as usize {
            return Err(AioError::TooManyBuffers {
                given: data.len(),
                max: shared.max_iov as usize,
            });
        }
        let words = shared.handle_data(self.issuer.handle_index(self.local));
        for (w, d) in words.iter().zip(data) {
            w.store(*d, Ordering::Relaxed);
        }
        self.slot()
            .handle_data_len
            .store(data.len() as u16, Ordering::Relaxed);
        Ok(self)
    }

    /// Records the block range the I/O covers, for messages and the view.
    pub fn set_blocks(&mut self, first: u32, count: u32) -> &mut Self {
        self.slot().first_block.store(first, Ordering::Relaxed);
        self.slot().nblocks.store(count, Ordering::Relaxed);
        self
    }

    /// Hands the handle to its issuer to start `def`; `held` says whether an `InFlight`
    /// will redeem the result. Returns the I/O's generation.
    fn launch(self, def: Definition<'_>, held: bool) -> u64 {
        let (issuer, local) = (self.issuer, self.local);
        std::mem::forget(self);
        issuer.start(local, def, held)
    }

    fn start(self, def: Definition<'_>) -> InFlight<'a> {
        let (issuer, local) = (self.issuer, self.local);
        let generation = self.launch(def, true);
        InFlight {
            issuer,
            local,
            generation,
        }
    }

    /// An I/O on memory the caller manages (iovecs instead of owned buffers).
    fn raw_definition<'f>(
        op: Op,
        file: &'f File,
        offset: u64,
        iov: &'f [libc::iovec],
    ) -> Definition<'f> {
        Definition {
            op,
            file: Some(file),
            offset,
            length: 0,
            memory: IoMemory::None,
            skip: 0,
            raw_iov: Some(iov),
        }
    }

    fn data(op: Op, file: &File, offset: u64, memory: IoMemory) -> Definition<'_> {
        Definition {
            op,
            file: Some(file),
            offset,
            length: 0,
            memory,
            skip: 0,
            raw_iov: None,
        }
    }

    /// Reads `buf.len()` bytes at `offset` into `buf`.
    pub fn read(self, file: &File, offset: u64, buf: IoBuf) -> InFlight<'a> {
        self.start(Self::data(Op::Readv, file, offset, IoMemory::One(buf)))
    }

    /// Reads into several buffers in order (one readv).
    pub fn readv(
        self,
        file: &File,
        offset: u64,
        bufs: Vec<IoBuf>,
    ) -> Result<InFlight<'a>, AioError> {
        self.check_count(bufs.len())?;
        Ok(self.start(Self::data(Op::Readv, file, offset, IoMemory::Many(bufs))))
    }

    /// Writes `buf` at `offset`.
    pub fn write(self, file: &File, offset: u64, buf: IoBuf) -> InFlight<'a> {
        self.start(Self::data(Op::Writev, file, offset, IoMemory::One(buf)))
    }

    /// Writes several buffers in order (one writev).
    pub fn writev(
        self,
        file: &File,
        offset: u64,
        bufs: Vec<IoBuf>,
    ) -> Result<InFlight<'a>, AioError> {
        self.check_count(bufs.len())?;
        Ok(self.start(Self::data(Op::Writev, file, offset, IoMemory::Many(bufs))))
    }

    fn check_count(&self, n: usize) -> Result<(), AioError> {
        let max = self.issuer.aio.shared.max_iov as usize;
        if n > max {
            return Err(AioError::TooManyBuffers { given: n, max });
        }
        Ok(())
    }

    fn plain(self, op: Op, file: &File, offset: u64, length: u64) -> InFlight<'a> {
        self.start(Definition {
            op,
            file: Some(file),
            offset,
            length,
            memory: IoMemory::None,
            skip: 0,
            raw_iov: None,
        })
    }

    /// `fsync(2)`. Like the system call, it covers the writes complete before it starts:
    /// it is not ordered after I/Os in flight beside it (a batch's writes included), which
    /// may run after it. Wait for the writes first, or use [`Issuer::fsync`](crate::Issuer::fsync),
    /// which waits for the issuer's own.
    pub fn fsync(self, file: &File) -> InFlight<'a> {
        self.plain(Op::Fsync, file, 0, 0)
    }

    /// `fdatasync(2)`; ordered as [`Handle::fsync`] is (not after I/Os in flight beside it).
    pub fn fdatasync(self, file: &File) -> InFlight<'a> {
        self.plain(Op::Fdatasync, file, 0, 0)
    }

    /// `posix_fadvise(POSIX_FADV_WILLNEED)` on `len` bytes at `offset`.
    pub fn fadvise_willneed(self, file: &File, offset: u64, len: u64) -> InFlight<'a> {
        self.plain(Op::FadviseWillneed, file, offset, len)
    }

    /// `fallocate(2)` of `len` bytes at `offset`.
    pub fn fallocate(self, file: &File, offset: u64, len: u64) -> InFlight<'a> {
        self.plain(Op::Fallocate, file, offset, len)
    }

    /// `ftruncate(2)` to `len` bytes.
    pub fn ftruncate(self, file: &File, len: u64) -> InFlight<'a> {
        self.plain(Op::Ftruncate, file, 0, len)
    }

    /// `unlink(2)` of `path` (moved in: the subsystem allocates nothing).
    pub fn unlink(self, path: CString) -> InFlight<'a> {
        self.on_paths(Op::Unlink, path.into_bytes_with_nul().into_boxed_slice())
    }

    /// `rename(2)` of `from` to `to`, replacing `to` if it exists (the two are copied into
    /// one allocation, here, before the I/O starts). As with `rename(2)`, the change reaches
    /// the media with a sync of the directories involved, not of the file.
    pub fn rename(self, from: &CStr, to: &CStr) -> InFlight<'a> {
        let mut both = Vec::with_capacity(from.count_bytes() + to.count_bytes() + 2);
        both.extend_from_slice(from.to_bytes_with_nul());
        both.extend_from_slice(to.to_bytes_with_nul());
        self.on_paths(Op::Rename, both.into_boxed_slice())
    }

    fn on_paths(self, op: Op, paths: Box<[u8]>) -> InFlight<'a> {
        self.start(Definition {
            op,
            file: None,
            offset: 0,
            length: 0,
            memory: IoMemory::Paths(paths),
            skip: 0,
            raw_iov: None,
        })
    }

    /// Starts a read into memory the caller manages (a buffer pool), detached: completion is
    /// observed through callbacks and the returned [`WaitRef`].
    ///
    /// # Safety
    ///
    /// The memory `iov` names must stay valid, and must not be read or written by anyone else,
    /// until the I/O is complete (a waiter on the returned reference has returned).
    pub unsafe fn readv_raw(
        self,
        file: &File,
        offset: u64,
        iov: &[libc::iovec],
    ) -> Result<WaitRef, AioError> {
        self.raw(Op::Readv, file, offset, iov)
    }

    /// Starts a write from memory the caller manages, detached.
    ///
    /// # Safety
    ///
    /// As for [`Handle::readv_raw`]; the memory must not be written until completion.
    pub unsafe fn writev_raw(
        self,
        file: &File,
        offset: u64,
        iov: &[libc::iovec],
    ) -> Result<WaitRef, AioError> {
        self.raw(Op::Writev, file, offset, iov)
    }

    /// A raw read whose result comes back as an [`InFlight`] (for the buffer pool).
    ///
    /// # Safety
    ///
    /// As for [`Handle::readv_raw`].
    pub(crate) unsafe fn readv_raw_held(
        self,
        file: &File,
        offset: u64,
        iov: &[libc::iovec],
    ) -> InFlight<'a> {
        self.start(Self::raw_definition(Op::Readv, file, offset, iov))
    }

    /// A raw write whose result comes back as an [`InFlight`] (slice I/O).
    ///
    /// # Safety
    ///
    /// As for [`Handle::writev_raw`].
    pub(crate) unsafe fn writev_raw_held(
        self,
        file: &File,
        offset: u64,
        iov: &[libc::iovec],
    ) -> InFlight<'a> {
        self.start(Self::raw_definition(Op::Writev, file, offset, iov))
    }

    fn raw(
        self,
        op: Op,
        file: &File,
        offset: u64,
        iov: &[libc::iovec],
    ) -> Result<WaitRef, AioError> {
        self.check_count(iov.len())?;
        let wref = self.wait_ref();
        self.launch(Self::raw_definition(op, file, offset, iov), false);
        Ok(wref)
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        self.issuer.release(self.local);
    }
}

/// A started I/O. Redeem it with [`Issuer::wait`] to get the result and the memory back; drop
/// it to let the I/O finish unobserved (the memory is freed once the I/O is done; an error is
/// logged).
#[must_use = "an InFlight is redeemed with Issuer::wait; dropping it detaches the I/O"]
pub struct InFlight<'a> {
    issuer: &'a Issuer,
    local: u32,
    generation: u64,
}

impl<'a> InFlight<'a> {
    /// A reference other threads can wait on.
    pub fn wait_ref(&self) -> WaitRef {
        self.issuer
            .aio
            .shared
            .wait_ref(self.issuer.handle_index(self.local), self.generation)
    }

    /// True once complete (does not drive completion; with worker processes, a request
    /// left queued beside idle workers for a millisecond gets one woken, so that a loop on
    /// this alone sees its I/O complete even while a worker is stopped).
    pub fn is_done(&self) -> bool {
        if self.state_done() {
            return true;
        }
        // Completes nothing: no need to look again.
        self.issuer.aio.method.nudge();
        false
    }

    /// Complete, or kept: its handle moved on to another I/O once its result was kept
    /// for this `InFlight` (a new generation).
    fn state_done(&self) -> bool {
        let s = self
            .issuer
            .aio
            .shared
            .slot(self.issuer.handle_index(self.local));
        s.state() >= HandleState::CompletedShared
            || s.generation.load(Ordering::Acquire) != self.generation
    }

    /// True once complete, after reaping whatever completions are ready now (io_uring's
    /// ring, if no one else is reaping it). Never blocks.
    pub fn check_done(&self) -> bool {
        if self.state_done() {
            return true;
        }
        self.issuer
            .aio
            .method
            .poll(&self.issuer.aio.shared, self.issuer.slot);
        self.state_done()
    }

    /// The issuer that owns its handle.
    pub(crate) fn owner(&self) -> &'a Issuer {
        self.issuer
    }

    pub(crate) fn into_parts(self) -> (u32, u64) {
        let parts = (self.local, self.generation);
        std::mem::forget(self);
        parts
    }
}

impl std::fmt::Debug for InFlight<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("io_id", &self.issuer.handle_index(self.local))
            .field("generation", &self.generation)
            .field("done", &self.state_done())
            .finish()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.issuer.detach(self.local, self.generation);
    }
}

/// A finished I/O: its result and its memory.
#[derive(Debug)]
pub struct Completion {
    result: IoResult,
    op: Op,
    offset: u64,
    length: u64,
    skip: u32,
    memory: IoMemory,
    /// The failure, or the description of a short transfer.
    error: Option<Box<IoError>>,
}

impl std::fmt::Debug for IoMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IoMemory::None => f.write_str("none"),
            IoMemory::One(b) => write!(f, "{b:?}"),
            IoMemory::Many(v) => write!(f, "{} buffers", v.len()),
            IoMemory::Paths(p) => {
                let names: Vec<_> = p
                    .split(|&b| b == 0)
                    .filter(|n| !n.is_empty())
                    .map(String::from_utf8_lossy)
                    .collect();
                write!(f, "{:?}", names.join(" -> "))
            }
        }
    }
}

impl Completion {
    pub(crate) fn from_outcome(
        o: crate::handle::notice::Outcome,
        memory: IoMemory,
        skip: u32,
    ) -> Completion {
        Completion {
            result: o.result,
            op: o.op,
            offset: o.offset,
            length: o.length,
            skip,
            memory,
            error: o.error.map(Box::new),
        }
    }

    /// The completion as a notice's outcome, with its memory and skip (a kept result
    /// turned into a ticket).
    pub(crate) fn into_outcome(self) -> (crate::handle::notice::Outcome, IoMemory, u32) {
        let outcome = crate::handle::notice::Outcome {
            result: self.result,
            op: self.op,
            offset: self.offset,
            length: self.length,
            error: self.error.map(|e| *e),
        };
        (outcome, self.memory, self.skip)
    }

    pub(crate) fn from_reclaimed(r: Reclaimed) -> Completion {
        Completion {
            result: r.result,
            op: r.op,
            offset: r.offset,
            length: r.length,
            skip: r.skip,
            memory: r.memory,
            error: r.error,
        }
    }

    /// The distilled result.
    pub fn result(&self) -> IoResult {
        self.result
    }

    /// The op.
    pub fn op(&self) -> Op {
        self.op
    }

    /// Bytes transferred (0 for ops that move none).
    pub fn bytes(&self) -> usize {
        self.result.result.max(0) as usize
    }

    /// True if fewer bytes than asked were transferred (continue with [`Completion::resume`]).
    pub fn is_partial(&self) -> bool {
        self.result.status == Status::Partial
    }

    /// True for a read that started at or past the end of the file (0 bytes, no error
    /// from the OS). See [`IoResult::is_end_of_file`].
    pub fn is_end_of_file(&self) -> bool {
        self.result.is_end_of_file()
    }

    /// File offset the I/O started at.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes the I/O asked for (for a resumed transfer, what was left of the first one).
    pub fn length(&self) -> u64 {
        self.length
    }

    /// `Ok` only if the I/O did all it was asked: a failure, and a short transfer, are an
    /// error naming op, file, offset and length (and errno, or `read only N of M bytes`). To
    /// go on after a short transfer instead, look at [`Completion::failure`] and
    /// [`Completion::is_partial`], and [`Completion::resume`].
    pub fn check(&self) -> Result<(), IoError> {
        match &self.error {
            Some(e) => Err(IoError::clone(e)),
            None => Ok(()),
        }
    }

    /// The failure, if the I/O failed (a short transfer is not one: see
    /// [`Completion::is_partial`]).
    pub fn failure(&self) -> Option<&IoError> {
        self.error
            .as_deref()
            .filter(|_| self.result.status == Status::Error)
    }

    /// The single buffer of a read or write. Panics if the I/O used several (see
    /// [`Completion::into_bufs`]) or none.
    pub fn into_buf(self) -> IoBuf {
        match self.memory {
            IoMemory::One(b) => b,
            IoMemory::Many(mut v) if v.len() == 1 => v.pop().expect("one buffer"),
            other => panic!("Completion::into_buf on an I/O with {other:?}"),
        }
    }

    /// The buffers, in order.
    pub fn into_bufs(self) -> Vec<IoBuf> {
        match self.memory {
            IoMemory::One(b) => vec![b],
            IoMemory::Many(v) => v,
            _ => Vec::new(),
        }
    }

    /// Starts the rest of a partial read or write on `handle`: same memory, past the bytes
    /// already transferred. Panics if the transfer is not partial
    /// ([`Completion::is_partial`]): a bug in the caller, like a wrong index.
    pub fn resume<'a>(self, handle: Handle<'a>, file: &File) -> InFlight<'a> {
        assert!(self.is_partial(), "resume is for partial transfers");
        let done = self.bytes() as u64;
        handle.start(Definition {
            op: self.op,
            file: Some(file),
            offset: self.offset + done,
            length: self.length - done,
            memory: self.memory,
            skip: self.skip + done as u32,
            raw_iov: None,
        })
    }
}
