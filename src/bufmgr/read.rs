//! `Issuer`'s and `Aio`'s block reads (here: the issuer's layer is below the buffer manager).
//!
//! Reading blocks through the buffer pool: [`Issuer::read_block`] for one block and
//! `start_read_buffers` for a run of consecutive blocks as one vectored read (PostgreSQL's
//! `StartReadBuffers` / `WaitReadBuffers`), which read streams use; and [`BufferReadv`], the
//! built-in callback every buffer read carries with the issuer's [`PageVerification`] mode, so
//! pages are verified and buffers become valid in whichever thread completes the I/O.
//!
//! These are methods of [`Issuer`], as an engine expects (`me.read_block(&file, 7)`), but
//! they live here, with the pool: the issuer's own file (`aio/issuer.rs`) is below the buffer
//! manager and must not know it. See `docs/design.md`, "The buffer manager".

use super::pool::{BufferPool, NoPin, PIN_LIMIT, SHARED_PIN, Tag};
use super::ring::BufferRing;
use super::verification::{PageVerdict, PageVerification, ReadVerdicts};
use crate::aio::file::File;
use crate::aio::io::InFlight;
use crate::aio::issuer::Issuer;
use crate::handle::callback::{CallbackId, HandleCallbacks, IoContext, ReportTarget};
use crate::handle::error::AioError;
use crate::handle::result::{ERROR_DATA_EOF, IoResult, Status};
use crate::handle::settings::MAX_IO_COMBINE_LIMIT;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A buffer-pool page holding a valid block, pinned: it cannot be evicted or read into while
/// this value lives. Dropping it unpins.
pub struct PinnedBuffer<'a> {
    pub(crate) pool: &'a BufferPool,
    /// The issuer holding the pin (a hit pin is in that issuer's slots).
    pub(crate) issuer_slot: u32,
    pub(crate) buffer: u32,
    /// The issuer's hit-pin slot holding the pin, or `SHARED_PIN` for the shared count.
    pub(crate) hit_pin: u8,
    /// Bound to its issuer's thread and lifetime, as the pin is the issuer's.
    pub(crate) _issuer: PhantomData<&'a Issuer>,
}

impl<'a> PinnedBuffer<'a> {
    /// A pin `issuer` holds on buffer `buffer` (in hit-pin slot `hit_pin`, or shared).
    #[inline]
    pub(crate) fn new(issuer: &'a Issuer, pool: &'a BufferPool, buffer: u32, hit_pin: u8) -> Self {
        PinnedBuffer {
            pool,
            issuer_slot: issuer.slot(),
            buffer,
            hit_pin,
            _issuer: PhantomData,
        }
    }
}

impl PinnedBuffer<'_> {
    /// The buffer's number in the pool.
    #[inline]
    pub fn buffer_id(&self) -> u32 {
        self.buffer
    }

    /// True if the page failed its checksum when it was read and was kept because the reader
    /// ignores checksum failures ([`PageVerification::IGNORE_CHECKSUM_FAILURE`]).
    #[inline]
    pub fn checksum_failed(&self) -> bool {
        self.pool.checksum_ignored(self.buffer)
    }

    /// The page.
    #[inline]
    pub fn page(&self) -> &[u8] {
        let pool = self.pool;
        // SAFETY: the buffer is pinned (no eviction, so the page is not reassigned) and VALID
        // (no read is in progress into it, and one starts only on a buffer that is not valid);
        // the pool lives as long as the subsystem this issuer holds.
        unsafe { std::slice::from_raw_parts(pool.page_ptr(self.buffer), pool.page_size()) }
    }
}

impl Drop for PinnedBuffer<'_> {
    #[inline]
    fn drop(&mut self) {
        self.pool
            .release_pin(self.issuer_slot, self.buffer, self.hit_pin);
    }
}

/// What [`Issuer::read_block_nowait`] found.
pub enum NoWait<'a> {
    /// The block, pinned and valid.
    Ready(PinnedBuffer<'a>),
    /// Someone else is reading it: wait on this reference (for example with
    /// [`Aio::wait`](crate::Aio::wait)), then ask again.
    BeingRead(crate::WaitRef),
}

/// What starting a read of a run of blocks did with its first block(s).
pub(crate) enum StartedRead<'a> {
    /// The first block is valid in the pool: no I/O (one buffer pinned, in hit-pin slot
    /// `hit_pin` of the issuer, or `SHARED_PIN`).
    Hit {
        /// Where the pin is.
        hit_pin: u8,
    },
    /// Another reader's I/O on the first block is in progress, or its last read failed (one
    /// buffer pinned): finish it with `finish_buffer_read`.
    Elsewhere,
    /// This issuer's read of the pinned buffers, in block order.
    Io(InFlight<'a>),
}

impl Issuer {
    /// The buffer pool this issuer's subsystem was started with.
    #[inline]
    pub(crate) fn pool(&self) -> Option<&BufferPool> {
        self.aio.shared.attachment::<BufferPool>()
    }

    /// The pool, for a read of `file`, which must be a file of this issuer's subsystem (its
    /// slot number means nothing in another's pool).
    #[inline]
    fn pool_for(&self, file: &File) -> Result<&BufferPool, AioError> {
        if !std::sync::Arc::ptr_eq(&file.aio, &self.aio) {
            return Err(AioError::ApiViolation(
                "the file belongs to another AIO subsystem than this issuer",
            ));
        }
        // Not `ok_or`: its error, built and dropped on every call, cost a stream hit 5%.
        match self.pool() {
            Some(pool) => Ok(pool),
            None => Err(AioError::NoUnpinnedBuffers),
        }
    }

    /// How this issuer's buffer reads verify their pages from now on (default: not at all).
    /// The mode is captured into each read when it is defined.
    pub fn set_page_verification(&self, v: PageVerification) {
        if let Some(pool) = self.pool() {
            pool.set_verification(self.slot(), v);
        }
    }

    /// Pages whose data checksum did not match, among every page this issuer's buffer reads
    /// verified since it registered — through `read_block`, read streams or anything else —
    /// whether the page was then kept, zeroed or refused (PostgreSQL's `checksum_failures`).
    pub fn checksum_failures(&self) -> u64 {
        self.pool().map_or(0, |p| p.checksum_failures(self.slot()))
    }

    /// The current page verification mode.
    pub fn page_verification(&self) -> PageVerification {
        self.pool()
            .map_or(PageVerification::OFF, |p| p.verification(self.slot()))
    }

    /// Reads block `block` of `file` through the buffer pool and returns it pinned. A block
    /// already valid in the pool is a hit (no I/O); one being read by someone else is waited
    /// for; one whose last read failed is read again by this caller.
    ///
    /// The pool is a read cache keyed by `file`: a block cached before a write or truncate
    /// made beside it (handle or slice I/O, another process) keeps its old bytes until the
    /// last reference to `file` (every clone, and relations holding it) is dropped; open
    /// the file again to read what it holds now.
    pub fn read_block(&self, file: &File, block: u32) -> Result<PinnedBuffer<'_>, AioError> {
        let pool = self.pool_for(file)?;
        let tag = Tag {
            file: file.slot,
            block,
        };
        // A hit takes no lock and, in a hit-pin slot, writes no shared cache line.
        if let Some((buffer, hit_pin)) = pool.pin_hit(tag, self.slot()) {
            return Ok(PinnedBuffer::new(self, pool, buffer, hit_pin));
        }
        let pinned = self.pin_slow(pool, file, block)?;
        self.finish_buffer_read(file, block, pinned.buffer)?;
        pool.remember(tag, pinned.buffer);
        Ok(pinned)
    }

    /// Pins the buffer of block `block` of `file` through the mapping table, assigning a
    /// victim if it is not in the pool.
    fn pin_slow<'a>(
        &'a self,
        pool: &'a BufferPool,
        file: &File,
        block: u32,
    ) -> Result<PinnedBuffer<'a>, AioError> {
        let tag = Tag {
            file: file.slot,
            block,
        };
        let b = pool
            .lookup_or_assign(tag, None, None, true)
            .map_err(|why| pin_refused(file, block, why))?
            .buffer();
        Ok(PinnedBuffer::new(self, pool, b, SHARED_PIN))
    }

    /// The nowait variant of [`Issuer::read_block`] (PostgreSQL's `StartBufferIO` with
    /// nowait): when another reader's I/O on the block is in flight it does not wait but says
    /// so, with a reference to wait on. Otherwise as `read_block` (a hit, or this caller's
    /// read).
    pub fn read_block_nowait(&self, file: &File, block: u32) -> Result<NoWait<'_>, AioError> {
        let pool = self.pool_for(file)?;
        let tag = Tag {
            file: file.slot,
            block,
        };
        let pinned = self.pin_slow(pool, file, block)?;
        let b = pinned.buffer;
        let (valid, in_progress) = pool.flags(b);
        if !valid && in_progress {
            if let Some(w) = pool.io_ref(b) {
                return Ok(NoWait::BeingRead(w));
            }
        }
        self.finish_buffer_read(file, block, b)?;
        pool.remember(tag, b);
        Ok(NoWait::Ready(pinned))
    }

    /// Makes pinned buffer `b` (block `block` of `file`) valid: waits for another reader's
    /// I/O on it, or reads it (again) itself. Returns the read's error if it fails.
    pub(crate) fn finish_buffer_read(
        &self,
        file: &File,
        block: u32,
        b: u32,
    ) -> Result<(), AioError> {
        let Some(pool) = self.pool() else {
            return Err(AioError::NoUnpinnedBuffers);
        };
        loop {
            let (valid, in_progress) = pool.flags(b);
            if valid {
                return Ok(());
            }
            if in_progress {
                // Someone's read is in flight: wait for it (our own staged I/O goes first).
                match pool.io_ref(b) {
                    Some(w) => self.wait_for_buffer_io(w)?,
                    None => std::thread::yield_now(),
                }
                continue;
            }
            if !pool.start_io(b) {
                continue;
            }
            let io = self.start_owned_read(pool, file, block, &[b])?;
            self.wait(io).check()?;
        }
    }

    /// Starts a read of up to `max` consecutive blocks from `first` of `file` (the caller keeps
    /// runs inside one file). Pins the buffers into `out` (cleared first). Consecutive misses
    /// become one vectored read, stopped at the first block that is valid or under I/O
    /// elsewhere, and when the pool has no unpinned buffer left. With a `ring`, misses recycle
    /// its buffers (see `Ring`). `needed_now`: the caller waits for `first` (it is not read
    /// ahead), so a pool found all pinned is given a while to free a buffer.
    pub(crate) fn start_read_buffers(
        &self,
        file: &File,
        first: u32,
        max: u32,
        out: &mut Vec<u32>,
        mut ring: Option<&mut BufferRing>,
        needed_now: bool,
    ) -> Result<StartedRead<'_>, AioError> {
        let pool = self.pool_for(file)?;
        out.clear();
        let tag = |block| Tag {
            file: file.slot,
            block,
        };
        // Hits first, without a lock.
        if let Some((b, hit_pin)) = pool.pin_hit(tag(first), self.slot()) {
            out.push(b);
            return Ok(StartedRead::Hit { hit_pin });
        }
        let b0 = pool
            .lookup_or_assign(tag(first), ring.as_deref_mut(), None, needed_now)
            .map_err(|why| pin_refused(file, first, why))?
            .buffer();
        out.push(b0);
        if !pool.start_io(b0) {
            // Valid (a hit after all), or someone else's read.
            return Ok(if pool.flags(b0).0 {
                StartedRead::Hit {
                    hit_pin: SHARED_PIN,
                }
            } else {
                StartedRead::Elsewhere
            });
        }
        let max = max.min(self.aio.shared.max_iov).min(MAX_IO_COMBINE_LIMIT);
        for block in first + 1..first.saturating_add(max) {
            let after = out.last().copied();
            let Ok(found) = pool.lookup_or_assign(tag(block), ring.as_deref_mut(), after, false)
            else {
                // Every buffer pinned, or this one as often as it can be: read what we have
                // (the next start of this block says why it cannot).
                break;
            };
            let b = found.buffer();
            if !pool.start_io(b) {
                pool.unpin(b); // valid, or someone else's read: the next start takes it
                break;
            }
            out.push(b);
        }
        match self.start_owned_read(pool, file, first, out) {
            Ok(io) => Ok(StartedRead::Io(io)),
            Err(e) => {
                for &b in out.iter() {
                    pool.unpin(b);
                }
                out.clear();
                Err(e)
            }
        }
    }

    /// Defines and starts the read of `bufs` (whose I/O this issuer owns: it started it with
    /// `start_io`) from block `first` on. On failure the buffers' I/O is given up, so the next
    /// reader retries.
    fn start_owned_read(
        &self,
        pool: &BufferPool,
        file: &File,
        first: u32,
        bufs: &[u32],
    ) -> Result<InFlight<'_>, AioError> {
        let give_up = |e| {
            for &b in bufs {
                pool.terminate_io(b, false, false);
            }
            e
        };
        let mut h = self.acquire().map_err(give_up)?;
        let n = bufs.len();
        let mut data = [0u64; MAX_IO_COMBINE_LIMIT as usize];
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_IO_COMBINE_LIMIT as usize];
        // Buffers next to each other in the pool make one piece of memory: fewer iovecs, and
        // a read into one piece can be a fixed one (`io_uring_registered_buffers`).
        let mut pieces = 0;
        for (k, &b) in bufs.iter().enumerate() {
            data[k] = u64::from(b);
            let p = pool.page_ptr(b);
            if pieces > 0 {
                let last = &mut iov[pieces - 1];
                if last.iov_base.cast::<u8>().wrapping_add(last.iov_len) == p {
                    last.iov_len += pool.page_size();
                    continue;
                }
            }
            iov[pieces] = libc::iovec {
                iov_base: p.cast(),
                iov_len: pool.page_size(),
            };
            pieces += 1;
        }
        let mode = pool.verification(self.slot()).to_byte();
        let defined = h
            .set_handle_data(&data[..n])
            .and_then(|h| h.add_callback(BUFFER_READV, mode))
            .map(|h| {
                h.set_blocks(first, n as u32);
            });
        if let Err(e) = defined {
            return Err(give_up(e));
        }
        // SAFETY: every buffer is pinned by the caller (not evicted, page not reassigned) and
        // its IO_IN_PROGRESS bit is ours, so no one else reads into or uses the pages until
        // the completion callback clears it; the pool's region outlives the I/O. The stage
        // callback publishes the I/O's wait reference on every buffer.
        Ok(unsafe {
            h.readv_raw_held(
                file,
                u64::from(first) * pool.page_size() as u64,
                &iov[..pieces],
            )
        })
    }
}

/// The error for a pin of block `block` of `file` that the pool refused.
fn pin_refused(file: &File, block: u32, why: NoPin) -> AioError {
    match why {
        NoPin::AllPinned => AioError::NoUnpinnedBuffers,
        NoPin::PinnedTooOften(buffer) => AioError::PinnedTooOften {
            path: file.path().display().to_string(),
            block: file.segment_base().saturating_add(block),
            buffer,
            limit: PIN_LIMIT,
        },
    }
}

/// The id of the built-in buffer-read callback (registered first, in `start.rs`).
pub(crate) const BUFFER_READV: CallbackId = CallbackId(1);

/// The built-in completion of a buffer read: every buffer named in the handle data becomes
/// VALID (a full page read) or IO_ERROR, and stops being in progress, in the completing thread.
pub(crate) struct BufferReadv;

impl HandleCallbacks for BufferReadv {
    fn name(&self) -> &'static str {
        "buffer-readv"
    }
    /// Publishes the I/O's wait reference on every buffer it reads, once the I/O is defined
    /// and before it can execute (even synchronously), so other readers wait, not spin.
    fn stage(&self, io: &IoContext<'_>, _data: u8) {
        let Some(pool) = io.shared.attachment::<BufferPool>() else {
            return;
        };
        let wref = io.wait_ref();
        let mut k = 0;
        while let Some(b) = io.handle_data_at(k) {
            pool.set_io(b as u32, wref);
            k += 1;
        }
    }

    /// Verifies each page read (with the mode the issuer captured in `data`), then marks
    /// each buffer VALID or IO_ERROR. Buffers past a short read become IO_ERROR too, so the
    /// next reader reads them again. Invalid pages make the result ERROR, or WARNING if they
    /// were zeroed or only their checksum failed and that is ignored; the verdicts go into the
    /// error data (see `verifier.rs`).
    fn complete_shared(&self, io: &IoContext<'_>, prior: IoResult, data: u8) -> IoResult {
        let Some(pool) = io.shared.attachment::<BufferPool>() else {
            return prior;
        };
        let mode = PageVerification::from_byte(data);
        let done_pages = if prior.status == Status::Error {
            0
        } else {
            prior.result.max(0) as usize / pool.page_size()
        };
        let first = match io.blocks() {
            Some((first, _)) => io.segment_base() + first,
            None => 0,
        };
        let mut v = ReadVerdicts::default();
        let mut k = 0;
        while let Some(b) = io.handle_data_at(k) {
            let b = b as u32;
            let (ok, ignored) = if k < done_pages && mode.verify {
                verify_page(pool, mode, b, first + k as u32, k as u32, &mut v)
            } else {
                (k < done_pages, false)
            };
            pool.terminate_io(b, ok, ignored);
            k += 1;
        }
        if v.checksum_failures > 0 {
            pool.count_checksum_failures(io.issuer_slot(), v.checksum_failures);
        }
        if prior.status == Status::Partial && done_pages == 0 {
            // Not one whole block arrived (a torn last block, a short-read fault): an error,
            // PostgreSQL's `could not read blocks …: read only N of 8192 bytes`. Left PARTIAL,
            // every reader would read the same bytes again, for ever.
            return IoResult {
                status: Status::Error,
                callback_id: 0,
                error_data: ERROR_DATA_EOF,
                result: prior.result,
            };
        }
        if v == ReadVerdicts::default() {
            return prior;
        }
        let failed = v.invalid > 0 && !v.zeroed_any;
        IoResult {
            status: if failed {
                Status::Error
            } else {
                Status::Warning
            },
            callback_id: BUFFER_READV.0,
            error_data: v.encode(),
            result: prior.result,
        }
    }

    fn message(&self, result: &IoResult, target: &ReportTarget<'_>) -> Option<String> {
        let v = ReadVerdicts::decode(result.error_data);
        Some(v.message(target.relation, target.first_block, target.nblocks))
    }

    fn invalid_pages(&self, result: &IoResult) -> u32 {
        ReadVerdicts::decode(result.error_data).invalid
    }

    fn report(&self, result: &IoResult) -> String {
        ReadVerdicts::decode(result.error_data).in_words()
    }
}

impl crate::Aio {
    /// Checks the buffer pool's mapping: every mapped buffer carries the tag it is mapped by,
    /// and no buffer is mapped twice. Returns how many are mapped. (For tests and debugging;
    /// defined here, with the pool, for the reason given at the top of this file.)
    pub fn check_buffer_mapping(&self) -> Result<usize, String> {
        self.inner
            .shared
            .attachment::<BufferPool>()
            .map_or(Ok(0), |p| p.check_mapping())
    }
}

/// Verifies page `k` of a buffer read (block `block`, in buffer `b`), which arrived whole, as
/// `mode` says, and notes in `v` what it found; returns whether the buffer holds a valid page
/// (a zeroed invalid one counts as valid) and whether a checksum failure was ignored.
fn verify_page(
    pool: &BufferPool,
    mode: PageVerification,
    b: u32,
    block: u32,
    k: u32,
    v: &mut ReadVerdicts,
) -> (bool, bool) {
    // SAFETY: the buffer is pinned by the reader and its IO_IN_PROGRESS bit is still set
    // (cleared by the caller after this), so nobody else reads into or looks at the page;
    // the read that filled it has completed.
    let page = unsafe { std::slice::from_raw_parts_mut(pool.page_ptr(b), pool.page_size()) };
    // A verifier that panics finds the page invalid: the panic unwound past `terminate_io`,
    // the buffer stayed IO_IN_PROGRESS under an I/O long done, and its next reader spun for
    // ever (found by a caller-side attack, 2026-12-07).
    let verdict = catch_unwind(AssertUnwindSafe(|| pool.verifier.verify(page, block)))
        .unwrap_or_else(|_| {
            tracing::error!(block, "the page verifier panicked; the page is invalid");
            PageVerdict::Invalid
        });
    if verdict.checksum_failed() {
        v.checksum_failures += 1;
    }
    let keep = verdict == PageVerdict::Valid
        || (verdict == PageVerdict::ChecksumFailure && mode.ignore_checksum_failure);
    if !keep {
        if v.invalid == 0 {
            v.first_offset = k;
        }
        v.invalid += 1;
        tracing::debug!(block, ?verdict, "page verification failed");
        if mode.zero_on_error {
            page.fill(0);
            v.zeroed_any = true;
            return (true, false);
        }
        return (false, false);
    }
    if verdict == PageVerdict::ChecksumFailure {
        if !v.ignored_any && v.invalid == 0 {
            v.first_offset = k;
        }
        v.ignored_any = true;
        return (true, true);
    }
    (true, false)
}
