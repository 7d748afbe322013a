//! Reading blocks through the buffer pool: [`Issuer::read_block`] for one block and
//! `start_read_buffers` for a run of consecutive blocks as one vectored read (PostgreSQL's
//! `StartReadBuffers` / `WaitReadBuffers`), which read streams use. Every buffer read carries
//! the built-in `buffer-readv` callback with the issuer's [`PageVerification`] mode, so pages
//! are verified and buffers become valid in whichever thread completes the I/O.
//!
//! These are methods of [`Issuer`], as an engine expects (`me.read_block(&file, 7)`), but
//! they live here, with the pool: the issuer's own file (`aio/issuer.rs`) is below the buffer
//! manager and must not know it. See `docs/design.md`, "The buffer manager".

use super::pool::{BUFFER_READV, BufferPool, SHARED_PIN, Tag};
use super::ring::BufferRing;
use crate::aio::file::File;
use crate::aio::io::InFlight;
use crate::aio::issuer::Issuer;
use crate::bufmgr::verification::PageVerification;
use crate::handle::error::AioError;
use crate::handle::settings::MAX_IO_COMBINE_LIMIT;

/// A buffer-pool page holding a valid block, pinned: it cannot be evicted or read into while
/// this value lives. Dropping it unpins.
pub struct PinnedBuffer<'a> {
    pub(crate) issuer: &'a Issuer,
    pub(crate) buffer: u32,
    /// The issuer's hit-pin slot holding the pin, or `SHARED_PIN` for the shared count.
    pub(crate) hit_pin: u8,
}

impl PinnedBuffer<'_> {
    /// The buffer's number in the pool.
    pub fn buffer_id(&self) -> u32 {
        self.buffer
    }

    /// True if the page failed its checksum when it was read and was kept because the reader
    /// ignores checksum failures ([`PageVerification::IGNORE_CHECKSUM_FAILURE`]).
    pub fn checksum_failed(&self) -> bool {
        self.issuer
            .pool()
            .is_some_and(|p| p.checksum_ignored(self.buffer))
    }

    /// The page.
    pub fn page(&self) -> &[u8] {
        let pool = self
            .issuer
            .pool()
            .expect("a pinned buffer comes from the pool");
        // SAFETY: the buffer is pinned (no eviction, so the page is not reassigned) and VALID
        // (no read is in progress into it, and one starts only on a buffer that is not valid);
        // the region lives as long as the core this issuer holds.
        unsafe { std::slice::from_raw_parts(pool.page_ptr(self.buffer), pool.page_size()) }
    }
}

impl Drop for PinnedBuffer<'_> {
    fn drop(&mut self) {
        if let Some(pool) = self.issuer.pool() {
            pool.release_pin(self.issuer.slot(), self.buffer, self.hit_pin);
        }
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
    pub(crate) fn pool(&self) -> Option<&BufferPool> {
        self.aio.shared.attachment::<BufferPool>()
    }

    /// How this issuer's buffer reads verify their pages from now on (default: not at all).
    /// The mode is captured into each read when it is defined.
    pub fn set_page_verification(&self, v: PageVerification) {
        if let Some(pool) = self.pool() {
            pool.set_verification(self.slot(), v);
        }
    }

    /// The current page verification mode.
    pub fn page_verification(&self) -> PageVerification {
        self.pool()
            .map_or(PageVerification::OFF, |p| p.verification(self.slot()))
    }

    /// Reads block `block` of `file` through the buffer pool and returns it pinned. A block
    /// already valid in the pool is a hit (no I/O); one being read by someone else is waited
    /// for; one whose last read failed is read again by this caller.
    pub fn read_block(&self, file: &File, block: u32) -> Result<PinnedBuffer<'_>, AioError> {
        let pool = self.pool().ok_or(AioError::NoUnpinnedBuffers)?;
        let tag = Tag {
            file: file.slot,
            block,
        };
        // A hit takes no lock and, in a hit-pin slot, writes no shared cache line.
        if let Some((buffer, hit_pin)) = pool.pin_hit(tag, self.slot()) {
            return Ok(PinnedBuffer {
                issuer: self,
                buffer,
                hit_pin,
            });
        }
        let pinned = self.pin_slow(pool, tag)?;
        self.finish_buffer_read(file, block, pinned.buffer)?;
        pool.remember(tag, pinned.buffer);
        Ok(pinned)
    }

    /// Pins `tag`'s buffer through the mapping table, assigning a victim if it is not in the
    /// pool.
    fn pin_slow(&self, pool: &BufferPool, tag: Tag) -> Result<PinnedBuffer<'_>, AioError> {
        let b = pool
            .lookup_or_assign(tag, None)
            .ok_or(AioError::NoUnpinnedBuffers)?
            .buffer();
        Ok(PinnedBuffer {
            issuer: self,
            buffer: b,
            hit_pin: SHARED_PIN,
        })
    }

    /// The nowait variant of [`Issuer::read_block`] (PostgreSQL's `StartBufferIO` with
    /// nowait): when another reader's I/O on the block is in flight it does not wait but says
    /// so, with a reference to wait on. Otherwise as `read_block` (a hit, or this caller's
    /// read).
    pub fn read_block_nowait(&self, file: &File, block: u32) -> Result<NoWait<'_>, AioError> {
        let pool = self.pool().ok_or(AioError::NoUnpinnedBuffers)?;
        let tag = Tag {
            file: file.slot,
            block,
        };
        let pinned = self.pin_slow(pool, tag)?;
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
        let pool = self.pool().ok_or(AioError::NoUnpinnedBuffers)?;
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
            let io = self.start_claimed_read(pool, file, block, &[b])?;
            self.wait(io).check()?;
        }
    }

    /// Starts a read of up to `max` consecutive blocks from `first` of `file` (the caller keeps
    /// runs inside one file). Pins the buffers into `out` (cleared first). Consecutive misses
    /// become one vectored read, stopped at the first block that is valid or under I/O
    /// elsewhere, and when the pool has no unpinned buffer left. With a `ring`, misses recycle
    /// its buffers (see `Ring`).
    pub(crate) fn start_read_buffers(
        &self,
        file: &File,
        first: u32,
        max: u32,
        out: &mut Vec<u32>,
        mut ring: Option<&mut BufferRing>,
    ) -> Result<StartedRead<'_>, AioError> {
        let pool = self.pool().ok_or(AioError::NoUnpinnedBuffers)?;
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
            .lookup_or_assign(tag(first), ring.as_deref_mut())
            .ok_or(AioError::NoUnpinnedBuffers)?
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
            let Some(found) = pool.lookup_or_assign(tag(block), ring.as_deref_mut()) else {
                break; // every buffer pinned: read what we have
            };
            let b = found.buffer();
            if !pool.start_io(b) {
                pool.unpin(b); // valid, or someone else's read: the next start takes it
                break;
            }
            out.push(b);
        }
        match self.start_claimed_read(pool, file, first, out) {
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

    /// Defines and starts the read of `bufs` (whose I/O this issuer has claimed with
    /// `start_io`) from block `first` on. On failure the claims are given up, so the next
    /// reader retries.
    fn start_claimed_read(
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
        for (k, &b) in bufs.iter().enumerate() {
            data[k] = u64::from(b);
            iov[k] = libc::iovec {
                iov_base: pool.page_ptr(b).cast(),
                iov_len: pool.page_size(),
            };
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
            h.readv_raw_claimed(file, u64::from(first) * pool.page_size() as u64, &iov[..n])
        })
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
