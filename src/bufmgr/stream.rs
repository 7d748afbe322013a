//! [`ReadStream`]: the caller names the blocks it will want, the stream keeps the right
//! number of combined reads in flight and hands back pinned, valid buffers in the caller's
//! order (PostgreSQL's `read_stream.c`).
//!
//! The *readahead distance* (blocks pinned ahead of the consumer) starts at 1 (or at the pin
//! limit with [`ReadStreamOptions::full`]), doubles whenever the consumer reaches a block that
//! needed a read, and decays by one per hit only when no read is in flight and only after
//! `io_combine_limit` hits since the last block that needed a read. PostgreSQL 18 decrements on every hit, which traps a
//! hit/miss/hit/miss pattern between 1 and 2; the hold-off and the idle rule (from
//! PostgreSQL master) let the distance grow there. Reads combine consecutive blocks up to
//! `io_combine_limit` within the distance; a read that could still grow is held while the
//! consumer has other buffers to use. At most `max_ios` reads are in flight
//! (`effective_io_concurrency`, or `maintenance_io_concurrency`). See `docs/design.md`,
//! "Read streams".

use super::advice::{Advice, StreamAdvice};
use super::pool::{BufferPool, SHARED_PIN, Tag};
use super::ring::{self, BufferRing};
use crate::aio::io::InFlight;
use crate::aio::issuer::Issuer;
use crate::bufmgr::read::{PinnedBuffer, StartedRead};
use crate::bufmgr::relation::Relation;
use crate::bufmgr::verification::ReadVerdicts;
use crate::handle::error::{AioError, IoError};
use crate::handle::result::Status;
use std::collections::VecDeque;

/// The most reads in flight a stream is asked for: `effective_io_concurrency`'s maximum.
const MAX_STREAM_IOS: u32 = 1000;
/// Handles a stream with advice leaves free for it (fewer when the issuer has few).
const ADVICE_HANDLES: u32 = 4;

/// How a stream is set up.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadStreamOptions {
    /// Use `maintenance_io_concurrency` instead of `effective_io_concurrency`.
    pub maintenance: bool,
    /// The blocks are known to be read mostly from storage, in order (a prewarm, a verify):
    /// start at the full distance instead of ramping up from 1.
    pub full: bool,
    /// The blocks come mostly in ascending order (a scan): start at a distance of one full
    /// read (`io_combine_limit`) instead of 1, so the first reads are already combined.
    /// (Advice needs no hint: consecutive blocks are never advised.)
    pub sequential: bool,
    /// Override the number of reads in flight (0: from the settings). Taken up to 1000, the
    /// most `effective_io_concurrency` allows; the issuer's handles cap it further.
    pub max_ios: u32,
    /// Readahead advice for buffered files (default: throttled; see [`Advice`]).
    pub advice: Advice,
    /// Recycle a small ring of buffers instead of taking victims from the whole pool
    /// (PostgreSQL's `BAS_BULKREAD` strategy, which its sequential scans of big tables use):
    /// a scan bigger than the pool then leaves the pool's other pages cached. The ring holds
    /// the stream's look-ahead plus 32 blocks (PostgreSQL's 256 kB), at most an eighth of the
    /// pool (as PostgreSQL caps it) but at least 3 buffers; the stream then pins at most the
    /// ring less 2, so its look-ahead stays within the ring.
    pub ring: bool,
}

/// What a stream did so far.
#[derive(Clone, Debug, Default)]
pub struct ReadStreamStats {
    /// Buffers handed to the consumer (or failed).
    pub blocks: u64,
    /// Blocks found valid in the pool when the stream looked ahead.
    pub hits: u64,
    /// Reads started.
    pub ios: u64,
    /// Blocks those reads covered.
    pub blocks_read: u64,
    /// `read_sizes[n]`: reads of `n` blocks.
    pub read_sizes: Vec<u64>,
    /// Times the consumer had to wait for a read.
    pub waits: u64,
    /// The largest readahead distance reached.
    pub max_distance: u32,
    /// The most reads in flight at once.
    pub max_ios_in_flight: u32,
    /// Pages a verifier found invalid (failed or zeroed).
    pub invalid_pages: u64,
    /// Of those, pages zeroed.
    pub zeroed_pages: u64,
    /// Pages whose checksum did not match (including ignored ones).
    pub checksum_failures: u64,
}

/// A buffer from a stream: block `block` of the relation, pinned and valid.
pub struct StreamBuffer<'a> {
    block: u32,
    buf: PinnedBuffer<'a>,
}

impl<'a> StreamBuffer<'a> {
    /// The relation-wide block number.
    #[inline]
    pub fn block(&self) -> u32 {
        self.block
    }
    /// The page.
    #[inline]
    pub fn page(&self) -> &[u8] {
        self.buf.page()
    }
    /// See [`PinnedBuffer::checksum_failed`].
    #[inline]
    pub fn checksum_failed(&self) -> bool {
        self.buf.checksum_failed()
    }
    /// The pinned buffer.
    #[inline]
    pub fn into_pinned(self) -> PinnedBuffer<'a> {
        self.buf
    }
}

/// A block the stream could not deliver, and why.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct StreamError {
    /// The relation-wide block number (the next block the stream owed its consumer).
    pub block: u32,
    /// Why.
    #[source]
    pub error: AioError,
}

struct Entry {
    block: u32,
    buffer: u32,
    /// Read by this stream (the head of `ios`), rather than found in the pool or being read
    /// by someone else.
    own_read: bool,
    /// The issuer's hit-pin slot holding a hit's pin, or `SHARED_PIN`.
    hit_pin: u8,
}

struct StreamIo<'a> {
    io: Option<InFlight<'a>>,
    /// Entries of this read not yet handed out.
    left: u32,
    /// The read's error, once waited for.
    error: Option<IoError>,
}

/// A read stream over a [`Relation`]; see the module documentation.
///
/// Each read in flight holds one of its issuer's handles until the consumer reaches its
/// blocks (or a wait for a free handle keeps its result). Several streams on one issuer
/// share its handles, and a read looked ahead leaves the last free one to the read a
/// consumer waits for; `InFlight`s the caller holds on the same issuer are not looked ahead
/// of, so with few handles (`io_max_concurrency`) a stream's read may wait for the oldest
/// read in flight (the caller's or another stream's) to free a handle.
///
/// ```
/// use dbaio::{Aio, OpenOptions, ReadStream, ReadStreamOptions, Relation, Settings};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("16403");
/// std::fs::write(&path, vec![0u8; 64 * 8192]).unwrap(); // 64 new (all-zero) pages
///
/// let aio = Aio::start(Settings::default()).unwrap();
/// let me = aio.register_issuer("scan").unwrap();
/// let rel = Relation::open(&aio, &path, &OpenOptions::read()).unwrap();
/// let mut next = 0;
/// for buf in ReadStream::new(&me, &rel, 0..rel.nblocks(), ReadStreamOptions::default()) {
///     let buf = buf.unwrap();
///     assert_eq!(buf.block(), next); // in the order asked for
///     next += 1;
/// }
/// assert_eq!(next, 64);
/// ```
pub struct ReadStream<'a, I: Iterator<Item = u32>> {
    issuer: &'a Issuer,
    pool: &'a BufferPool,
    rel: &'a Relation,
    blocks: I,
    unget: Option<u32>,
    ended: bool,
    queue: VecDeque<Entry>,
    ios: VecDeque<StreamIo<'a>>,
    pending_start: u32,
    pending_n: u32,
    readahead: u32,
    holdoff: u32,
    max_ios: u32,
    max_pinned: u32,
    combine_limit: u32,
    ios_in_flight: u32,
    /// True while `next_buffer` starts the read its consumer will wait for at once (nothing
    /// was queued): that read may take the issuer's last free handle.
    consumer_waits: bool,
    /// The last read found the pool all pinned even after waiting for a buffer: later
    /// blocks do not wait again until a read gets its buffers (each would wait as long, and
    /// a stream over a full pool took 200 ms per block to fail them all).
    pool_full: bool,
    /// Set when looking ahead failed with nothing queued; handed to the consumer.
    error: Option<StreamError>,
    scratch: Vec<u32>,
    ring: Option<BufferRing>,
    advice: Option<StreamAdvice>,
    stats: ReadStreamStats,
}

impl<'a, I: Iterator<Item = u32>> ReadStream<'a, I> {
    /// A stream reading `blocks` (relation-wide numbers) of `rel` for `issuer`.
    pub fn new(
        issuer: &'a Issuer,
        rel: &'a Relation,
        blocks: impl IntoIterator<IntoIter = I>,
        opts: ReadStreamOptions,
    ) -> ReadStream<'a, I> {
        let shared = &issuer.aio.shared;
        let s = &shared.settings;
        let combine_limit = s.effective_io_combine_limit().max(1);
        // Also the advice distance, whose queue is allocated to it: u32::MAX asked for 32 GiB
        // and aborted the process (found by a caller-side attack, 2026-12-07).
        let configured = if opts.max_ios > 0 {
            opts.max_ios.min(MAX_STREAM_IOS)
        } else if opts.maintenance {
            s.maintenance_io_concurrency
        } else {
            s.effective_io_concurrency
        };
        issuer.open_stream();
        let advice = StreamAdvice::new(issuer, rel, opts.advice, configured, combine_limit);
        // 0 means synchronous reads, one at a time (still combined). Each read in flight
        // holds one of the issuer's handles; keep one free for other work, and a few for
        // advice (a fire-and-forget op holds its handle until it is done).
        let spare = 1 + if advice.is_some() {
            ADVICE_HANDLES.min(shared.per_issuer.saturating_sub(1) / 2)
        } else {
            0
        };
        let max_ios = configured
            .max(1)
            .min(shared.per_issuer.saturating_sub(spare).max(1));
        // PostgreSQL's GetPinLimit: each issuer slot's fair share of the pool, so that every
        // issuer can stream at once without running the pool out of unpinned buffers; less
        // the one its consumer holds (handed out, it no longer counts as the stream's). With
        // the whole share, an issuer holding one buffer while its stream pinned the next
        // took two in a pool of one per issuer, and another issuer's stream, with nothing to
        // hand out, failed (`buffer_pool_size = 0`, two issuers streaming: 2 to 4 runs in 5).
        let pool = issuer
            .pool()
            .expect("every started subsystem has a buffer pool");
        let share = pool.buffers() / s.max_issuers.max(1);
        let pin_budget = share.saturating_sub(1).max(1);
        let mut max_pinned = ((max_ios + 1) * combine_limit).min(pin_budget).max(1);
        // A ring holds at most an eighth of the pool; the stream pins less than the ring, or
        // the ring's next buffer would be one it pins and the clock sweep would supply all.
        let ring = opts.ring.then(|| {
            let len = ring::ring_len(pool.buffers(), max_pinned);
            max_pinned = max_pinned.min(ring::pin_limit(len));
            BufferRing::new(len)
        });
        let readahead = if opts.full {
            max_pinned
        } else if opts.sequential {
            combine_limit.min(max_pinned)
        } else {
            1
        };
        ReadStream {
            issuer,
            pool,
            rel,
            blocks: blocks.into_iter(),
            unget: None,
            ended: false,
            queue: VecDeque::with_capacity(max_pinned as usize + 1),
            ios: VecDeque::with_capacity(max_ios as usize + 1),
            pending_start: 0,
            pending_n: 0,
            readahead,
            holdoff: 0,
            max_ios,
            max_pinned,
            combine_limit,
            ios_in_flight: 0,
            consumer_waits: false,
            pool_full: false,
            error: None,
            scratch: Vec::with_capacity(combine_limit as usize),
            ring,
            advice,
            stats: ReadStreamStats {
                read_sizes: vec![0; combine_limit as usize + 1],
                max_distance: readahead,
                ..ReadStreamStats::default()
            },
        }
    }

    /// The current readahead distance, in blocks.
    pub fn distance(&self) -> u32 {
        self.readahead
    }

    /// The current readahead-advice distance in blocks (0: this stream gives no advice).
    pub fn advice_distance(&self) -> u32 {
        self.advice.as_ref().map_or(0, StreamAdvice::distance)
    }

    /// Reads in flight now.
    pub fn ios_in_flight(&self) -> u32 {
        self.ios_in_flight
    }

    /// The most reads this stream keeps in flight (with other streams open on its issuer,
    /// at most its share of the issuer's handles).
    pub fn max_ios(&self) -> u32 {
        self.io_cap()
    }

    /// Starts the reads the distance allows now, without handing out a buffer: a caller
    /// finishing one stream can get the next one's first reads going.
    pub fn prefetch(&mut self) {
        self.look_ahead();
    }

    /// True once every block named has been started (or found in the pool).
    pub fn all_started(&self) -> bool {
        self.ended && self.pending_n == 0 && self.unget.is_none()
    }

    /// What the stream did so far.
    pub fn stats(&self) -> &ReadStreamStats {
        &self.stats
    }

    /// The next block, pinned and valid, in the order the blocks were named; `None` at the
    /// end. A block that cannot be read (an I/O error, an invalid page) is an `Err` naming it;
    /// the stream goes on with the next block after it.
    pub fn next_buffer(&mut self) -> Option<Result<StreamBuffer<'a>, StreamError>> {
        if self.queue.is_empty() {
            if let Some(e) = self.error.take() {
                return Some(Err(e));
            }
            self.consumer_waits = true;
            self.look_ahead();
            self.consumer_waits = false;
        }
        let Some(e) = self.queue.pop_front() else {
            return self.error.take().map(Err);
        };
        // The slot it held is free: start more reads before waiting for this one.
        self.look_ahead();
        self.stats.blocks += 1;
        let pool = self.pool;
        let buf = PinnedBuffer::new(self.issuer, pool, e.buffer, e.hit_pin);
        let fail = |error: AioError| {
            Some(Err(StreamError {
                block: e.block,
                error,
            }))
        };
        let read_error = if e.own_read {
            self.take_from_head_io()
        } else {
            None
        };
        let (file, b) = self
            .rel
            .locate(e.block)
            .expect("queued blocks were located");
        if !pool.flags(e.buffer).0 {
            if let Some(err) = read_error {
                return fail(err.into());
            }
            // Someone else's read, or past the end of a short read: finish it here.
            if let Err(err) = self.issuer.finish_buffer_read(file, b, e.buffer) {
                return fail(err);
            }
        }
        // Later single-block reads of this block take the lock-free hit path.
        let tag = Tag {
            file: file.slot,
            block: b,
        };
        pool.remember(tag, e.buffer);
        if let Some(next) = self.queue.front() {
            prefetch_page_head(pool.page_ptr(next.buffer));
        }
        Some(Ok(StreamBuffer {
            block: e.block,
            buf,
        }))
    }

    /// Drops every buffer looked ahead and starts again at distance 1; the block iterator goes
    /// on where it was. Blocks already taken from it and not yet handed out are dropped too:
    /// those looked ahead for reads, and with advice those pulled ahead for it (up to the
    /// advice distance). Reads in flight finish on their own.
    pub fn reset(&mut self) {
        self.release();
        self.readahead = 1;
        self.holdoff = 0;
        self.ended = false;
        self.error = None;
    }

    /// The head entry came from the oldest read: wait for it if needed, and return its error.
    fn take_from_head_io(&mut self) -> Option<IoError> {
        let head = self.ios.front_mut().expect("an I/O entry has its read");
        if let Some(io) = head.io.take() {
            if !io.is_done() {
                self.stats.waits += 1;
            }
            // A block needed I/O: look further ahead (also when the read happened to be done
            // already; with io_method = sync it always is, and the distance is what lets
            // reads combine).
            self.readahead = (self.readahead * 2).min(self.max_pinned);
            self.holdoff = self.combine_limit;
            self.stats.max_distance = self.stats.max_distance.max(self.readahead);
            let c = self.issuer.wait(io);
            self.ios_in_flight -= 1;
            let r = c.result();
            if r.callback_id == super::read::BUFFER_READV.0
                && matches!(r.status, Status::Error | Status::Warning)
            {
                let v = ReadVerdicts::decode(r.error_data);
                self.stats.invalid_pages += u64::from(v.invalid);
                self.stats.checksum_failures += u64::from(v.checksum_failures);
                if v.zeroed_any {
                    self.stats.zeroed_pages += u64::from(v.invalid);
                }
            }
            // A short read is not an error for the blocks that came (their buffers are
            // valid); the rest are read again one by one as the consumer reaches them, and
            // only a block that is really short fails (PostgreSQL retries the remainder).
            head.error = match r.status {
                Status::Partial => None,
                _ => c.check().err(),
            };
        }
        head.left -= 1;
        let error = head.error.clone();
        if head.left == 0 {
            self.ios.pop_front();
        }
        error
    }

    /// Starts reads until `max_ios` are in flight or the readahead distance is pinned.
    fn look_ahead(&mut self) {
        if (self.ended && self.pending_n == 0) || self.error.is_some() {
            return;
        }
        let batch = !self.issuer.in_batch() && self.issuer.begin_batch().is_ok();
        let cap = self.io_cap();
        while self.ios_in_flight < cap && self.pinned() + self.pending_n < self.readahead {
            if self.pending_n == self.combine_limit {
                if !self.start_pending() {
                    break;
                }
                continue;
            }
            let Some(block) = self.next_block() else {
                self.ended = true;
                break;
            };
            let seg = self.rel.segment_blocks();
            if self.pending_n > 0
                && self.pending_start.checked_add(self.pending_n) == Some(block)
                && block / seg == self.pending_start / seg
            {
                self.pending_n += 1;
                continue;
            }
            if self.pending_n > 0 && !self.start_pending() {
                self.unget = Some(block);
                break;
            }
            self.pending_start = block;
            self.pending_n = 1;
        }
        // Hold a read that could still grow, unless it is full, the stream ended, or the
        // consumer has nothing else to use.
        if self.pending_n > 0
            && (self.pending_n >= self.combine_limit || self.ended || self.pinned() == 0)
        {
            self.start_pending();
        }
        if let Some(a) = self.advice.as_mut() {
            a.advise(self.issuer, self.rel, &mut self.blocks);
        }
        if batch {
            self.issuer.end_batch();
        }
    }

    /// The next block the caller named: one put back, else one pulled ahead for advice,
    /// else the caller's iterator.
    fn next_block(&mut self) -> Option<u32> {
        if let Some(b) = self.unget.take() {
            return Some(b);
        }
        match self.advice.as_mut() {
            Some(a) => a.next_block(self.issuer, self.rel, &mut self.blocks),
            None => self.blocks.next(),
        }
    }

    /// Reads this stream may have holding handles now: its own limit, or less when other
    /// streams are open on its issuer — its share of the issuer's handles, less one for
    /// other work. A read's handle stays held until the consumer reaches its blocks, so
    /// streams consumed in turn could otherwise hold every handle between them, and one
    /// with nothing queued would wait for another stream's read to free one (before
    /// results could be kept it failed: 8 streams of random blocks on one issuer failed 445
    /// of 24,000 blocks).
    fn io_cap(&self) -> u32 {
        let streams = self.issuer.open_streams();
        if streams <= 1 {
            return self.max_ios;
        }
        let handles = self.issuer.aio.shared.per_issuer.saturating_sub(1);
        self.max_ios.min((handles / streams).max(1))
    }

    fn pinned(&self) -> u32 {
        self.queue.len() as u32
    }

    /// Starts the pending run, in as many reads as it takes (hits and blocks read elsewhere
    /// split it). False if it could not all be started (`max_ios`, pins, handles).
    fn start_pending(&mut self) -> bool {
        while self.pending_n > 0 {
            // An error the consumer has not taken yet holds the rest of the run back: a
            // second one would replace it, and its block would never be handed out.
            if self.ios_in_flight >= self.io_cap() || self.error.is_some() {
                return false;
            }
            // A read the consumer is not about to wait for (looking ahead, a prefetch, a
            // stream just made) leaves the issuer's last free handle alone: another stream
            // on this issuer may have a consumer waiting with nothing queued, and reads
            // looked ahead hold their handles until their own consumers come for them.
            // Streams read in turn could otherwise hold every handle between them, and the
            // one whose consumer waits would fail a block it could read.
            let consumer_waits_for_it = self.consumer_waits && self.queue.is_empty();
            if !consumer_waits_for_it && !self.issuer.has_free_handles(2) {
                return false;
            }
            let block = self.pending_start;
            let Some((file, b)) = self.rel.locate(block) else {
                self.fail_pending(self.rel.past_last_segment(block));
                return false;
            };
            let mut scratch = std::mem::take(&mut self.scratch);
            // The consumer gets this block's error if it fails with nothing queued: give a
            // pool all pinned a while to free a buffer then (once in a row).
            let patient = self.queue.is_empty() && !self.pool_full;
            let started = self.issuer.start_read_buffers(
                file,
                b,
                self.pending_n,
                &mut scratch,
                self.ring.as_mut(),
                patient,
            );
            match started {
                Err(AioError::NoUnpinnedBuffers) => self.pool_full |= patient,
                Err(_) => {}
                Ok(_) => self.pool_full = false,
            }
            let mut hit_pin = SHARED_PIN;
            let own_read = match started {
                Ok(StartedRead::Hit { hit_pin: k }) => {
                    hit_pin = k;
                    self.stats.hits += 1;
                    if self.ios_in_flight == 0 {
                        if self.holdoff > 0 {
                            self.holdoff -= 1;
                        } else if self.readahead > 1 {
                            self.readahead -= 1;
                        }
                    }
                    false
                }
                Ok(StartedRead::Elsewhere) => false,
                Ok(StartedRead::Io(io)) => {
                    let n = scratch.len() as u32;
                    self.ios.push_back(StreamIo {
                        io: Some(io),
                        left: n,
                        error: None,
                    });
                    self.ios_in_flight += 1;
                    self.stats.ios += 1;
                    self.stats.blocks_read += u64::from(n);
                    self.stats.read_sizes[n as usize] += 1;
                    self.stats.max_ios_in_flight =
                        self.stats.max_ios_in_flight.max(self.ios_in_flight);
                    true
                }
                Err(e) => {
                    self.scratch = scratch;
                    if self.queue.is_empty() {
                        // Nothing to hand out meanwhile: the consumer gets the error.
                        self.fail_pending(e);
                    }
                    return false;
                }
            };
            for (k, &buffer) in scratch.iter().enumerate() {
                self.queue.push_back(Entry {
                    block: block + k as u32,
                    buffer,
                    own_read,
                    hit_pin,
                });
            }
            let n = scratch.len() as u32;
            self.pending_start += n;
            self.pending_n -= n;
            self.scratch = scratch;
        }
        true
    }

    /// Gives the consumer `error` for the pending run's first block and drops that block from
    /// the run (the rest is started once the consumer has taken the error).
    fn fail_pending(&mut self, error: AioError) {
        debug_assert!(self.error.is_none(), "one error at a time");
        self.error = Some(StreamError {
            block: self.pending_start,
            error,
        });
        self.pending_start = self.pending_start.wrapping_add(1);
        self.pending_n -= 1;
    }

    fn release(&mut self) {
        for e in self.queue.drain(..) {
            self.pool
                .release_pin(self.issuer.slot(), e.buffer, e.hit_pin);
        }
        // Dropping an InFlight detaches it: the read completes on its own and its buffers
        // become valid (or error) in the completing thread.
        self.ios.clear();
        self.ios_in_flight = 0;
        if let Some(a) = self.advice.as_mut() {
            a.release(self.issuer);
        }
        self.pending_n = 0;
        self.unget = None;
    }
}

impl<I: Iterator<Item = u32>> Drop for ReadStream<'_, I> {
    fn drop(&mut self) {
        self.release();
        self.issuer.close_stream();
    }
}

impl<'a, I: Iterator<Item = u32>> Iterator for ReadStream<'a, I> {
    type Item = Result<StreamBuffer<'a>, StreamError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_buffer()
    }
}

/// Asks the CPU to bring the first two cache lines of a page (its header and first line
/// pointers, what a consumer reads first) in, while the consumer works on the previous one.
#[inline]
fn prefetch_page_head(page: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is only a hint; it never faults, even on an unmapped address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(page.cast());
            _mm_prefetch::<_MM_HINT_T0>(page.wrapping_add(64).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = page;
}
