//! Readahead advice for a read stream: `posix_fadvise(WILLNEED)` on blocks the stream will
//! read, ahead of its own reads, for buffered files. With `io_method = sync` it is the only
//! read-ahead a stream of random blocks gets (each read runs on the caller); with the other
//! methods it starts the device on blocks beyond the reads in flight.
//!
//! The advice distance (blocks pulled from the caller's iterator ahead of the stream's
//! look-ahead) is separate from the I/O look-ahead distance. Three rules keep advice from
//! costing more than it gives (PostgreSQL 18 has only the first; a flood of advice from many
//! clients is what its review found slower than none):
//!
//! 1. **No advice for sequential runs**: a run of consecutive blocks is held back, unadvised,
//!    until it is known to be short (it ends within [`SEQUENTIAL_RUN`] blocks: advised then)
//!    or long (the kernel's own readahead has it: none of it is advised, counted as
//!    suppressed). So a sequential stream sends no advice at all, not even at its start.
//!    One block more than the distance is pulled, so the newest block's run is judged
//!    before that block is read.
//! 2. **One budget per device** for all issuers (`handle/advice_budget.rs`): a block is
//!    advised only if the device's budget has room, and gives its share back when the stream
//!    reads it or drops it unread. Without room (or without a free handle) the block is read
//!    without advice; the stream never waits.
//! 3. **Adaptive distance**: one advised block in [`PROBE_EVERY`] is probed when its turn to
//!    be read comes (`preadv2(RWF_NOWAIT)` of one byte: is it in the page cache?). The
//!    distance starts at `effective_io_concurrency` blocks; after each window of probes it
//!    halves when the budget refused blocks in the window, or when most probes missed even
//!    at the longest distance (advice evicted before it is read), and doubles back towards
//!    the maximum otherwise.
//!
//! Advice goes through the `fadvise` op (in the view and the statistics like any I/O), flagged
//! SYNCHRONOUS: its issuer runs it at once on every method. Handed to a worker it waited
//! behind the very reads it should get ahead of (with 3 workers, 9 in 10 probed blocks were
//! not yet cached), and held a handle until then (most blocks found none free). The op is
//! dropped at once (fire and forget). Nothing here allocates after the stream is built. See
//! `docs/design.md`, "Readahead advice".

use crate::aio::issuer::Issuer;
use crate::bufmgr::pool::Tag;
use crate::bufmgr::relation::Relation;
use crate::handle::advice_budget::AdviceEvent;
use crate::handle::op::HandleFlags;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// Whether and how a read stream advises the kernel of the blocks it will read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Advice {
    /// Advice for buffered files under the device budget, adaptive, none for sequential runs.
    #[default]
    Throttled,
    /// Every upcoming block advised at the full distance: no budget, no sequential rule, no
    /// adaptation (the behaviour the throttle exists to beat; for benchmarks).
    Unthrottled,
    /// No advice.
    Off,
}

/// One advised block in this many is probed for whether the advice paid.
pub(crate) const PROBE_EVERY: u32 = 16;
/// Probes per adaptation decision.
const WINDOW: u32 = 8;
/// A run of consecutive blocks longer than this is sequential: the kernel's readahead has
/// it, and none of its blocks is advised. A shorter run is advised once it ends (two or
/// three adjacent blocks among random ones are too short for the kernel to notice).
const SEQUENTIAL_RUN: u32 = 4;
const NOT_ADVISED: u32 = u32::MAX;

struct Ahead {
    block: u32,
    /// The budget entry (device) its advice was charged to, or `NOT_ADVISED`.
    charged: u32,
}

/// A read stream's advice state.
pub(crate) struct StreamAdvice {
    unthrottled: bool,
    distance: u32,
    max_distance: u32,
    ahead: VecDeque<Ahead>,
    /// The caller's iterator is exhausted.
    source_done: bool,
    /// The last block pulled from the caller, and the length of the run of consecutive
    /// blocks it ends (for the sequential rule).
    prev: Option<u32>,
    run: u32,
    /// The newest entries of `ahead` that belong to the current run while it is not yet
    /// known to be short or long (throttled only): not advised, not charged.
    held: u32,
    /// Budget entry of each segment file (`NOT_ADVISED`: its device has none).
    devices: Vec<u32>,
    /// A run of advised blocks not yet sent: (segment, first block in it, count).
    pending: Option<(usize, u32, u32)>,
    combine_limit: u32,
    advised_count: u32,
    /// Counted into the issuer's statistics at the end of each `advise`.
    issued_now: u64,
    refused_now: u64,
    probed: u32,
    cached: u32,
    refused: u32,
}

impl StreamAdvice {
    /// Advice for a stream over `rel`, or `None` if it would give none: advice off, a budget
    /// of 0 (throttled), no look-ahead (`max_distance` 0), or an O_DIRECT file.
    pub(crate) fn new(
        issuer: &Issuer,
        rel: &Relation,
        mode: Advice,
        max_distance: u32,
        combine_limit: u32,
    ) -> Option<StreamAdvice> {
        let shared = &issuer.aio.shared;
        let first = rel.locate(0).map(|(f, _)| f)?;
        if mode == Advice::Off
            || max_distance == 0
            || first.is_direct()
            || (mode == Advice::Throttled && shared.advice.limit() == 0)
        {
            return None;
        }
        let devices = rel
            .segments()
            .iter()
            .map(|f| {
                let dev = shared.files.slots[f.slot as usize]
                    .device
                    .load(Ordering::Relaxed);
                shared.advice.device(dev).unwrap_or(NOT_ADVISED)
            })
            .collect();
        let unthrottled = mode == Advice::Unthrottled;
        Some(StreamAdvice {
            unthrottled,
            // Full distance from the start: the budget, not a slow ramp, keeps many streams
            // from flooding the device; and each file is a new stream, so a ramp would start
            // over at every file and make a scan of many files slower than unthrottled advice
            // (docs/design.md, "Readahead advice"; docs/benchmarks.md, "Readahead advice").
            distance: max_distance,
            max_distance,
            ahead: VecDeque::with_capacity(max_distance as usize + 1),
            source_done: false,
            prev: None,
            run: 0,
            held: 0,
            devices,
            pending: None,
            combine_limit: combine_limit.max(1),
            advised_count: 0,
            issued_now: 0,
            refused_now: 0,
            probed: 0,
            cached: 0,
            refused: 0,
        })
    }

    /// The current advice distance, in blocks.
    pub(crate) fn distance(&self) -> u32 {
        self.distance
    }

    /// The next block for the stream: the oldest pulled ahead, else the caller's next.
    /// Gives back the block's share of the budget, probing it first when its turn came.
    pub(crate) fn next_block(
        &mut self,
        issuer: &Issuer,
        rel: &Relation,
        source: &mut impl Iterator<Item = u32>,
    ) -> Option<u32> {
        let Some(a) = self.ahead.pop_front() else {
            if self.source_done {
                return None;
            }
            let b = source.next();
            self.source_done = b.is_none();
            if let Some(b) = b {
                self.extend_run(b);
            }
            return b;
        };
        // A held block read before its run was judged is read without advice.
        self.held = self.held.min(self.ahead.len() as u32);
        // (No run of advice is ever unsent here: `advise` sends its run before it returns.)
        if a.charged != NOT_ADVISED {
            if !self.unthrottled {
                issuer.aio.shared.advice.give_back(a.charged, 1);
            }
            self.advised_count = self.advised_count.wrapping_add(1);
            if self.advised_count % PROBE_EVERY == 0 {
                self.probe(issuer, rel, a.block);
            }
        }
        Some(a.block)
    }

    /// Pulls blocks from the caller's iterator until `distance` are ahead, advising those
    /// the rules allow.
    pub(crate) fn advise(
        &mut self,
        issuer: &Issuer,
        rel: &Relation,
        source: &mut impl Iterator<Item = u32>,
    ) {
        let mut sequential = 0u64;
        // Throttled, one block more than the distance is pulled: the newest block's run is
        // judged only when the block after it is seen, and at distance 1 it would otherwise
        // always be read first, unadvised, with no probe ever to let the distance grow.
        let limit = self.distance + u32::from(!self.unthrottled);
        while !self.source_done && (self.ahead.len() as u32) < limit {
            let Some(block) = source.next() else {
                self.source_done = true;
                break;
            };
            let follows = self.extend_run(block);
            if self.unthrottled {
                let charged = match self.candidate(issuer, rel, block) {
                    Some(seg) => {
                        self.queue_advice(issuer, rel, seg, block);
                        0
                    }
                    None => NOT_ADVISED,
                };
                self.ahead.push_back(Ahead { block, charged });
                continue;
            }
            if !follows {
                // The run before this block ended short: advise it now.
                self.advise_held(issuer, rel);
            }
            self.ahead.push_back(Ahead {
                block,
                charged: NOT_ADVISED,
            });
            if self.run <= SEQUENTIAL_RUN {
                self.held += 1;
                continue;
            }
            // Sequential: the kernel's readahead has this run; drop what was held of it. (Its
            // blocks are counted without looking for them in the pool: a scan pays nothing
            // per block for advice it does not give.)
            let within = |b: u32| b < rel.nblocks();
            let judged = self.ahead.len() - self.held as usize - 1;
            sequential += self
                .ahead
                .range(judged..)
                .filter(|a| within(a.block))
                .count() as u64;
            self.held = 0;
        }
        if self.source_done {
            // The stream's last run ended with it, short.
            self.advise_held(issuer, rel);
        }
        self.flush(issuer, rel);
        let (issued, refused) = (
            std::mem::take(&mut self.issued_now),
            std::mem::take(&mut self.refused_now),
        );
        if issued > 0 {
            issuer.count_advice(AdviceEvent::Issued, issued);
        }
        if sequential > 0 {
            issuer.count_advice(AdviceEvent::SuppressedSequential, sequential);
        }
        if refused > 0 {
            issuer.count_advice(AdviceEvent::RefusedByBudget, refused);
        }
    }

    /// Notes `block` as the caller's next; whether it extends the current run.
    fn extend_run(&mut self, block: u32) -> bool {
        let follows = self.prev.is_some_and(|p| p.checked_add(1) == Some(block));
        self.prev = Some(block);
        self.run = if follows {
            self.run.saturating_add(1)
        } else {
            1
        };
        follows
    }

    /// The segment of `block` if advice could help it: within the relation (as long as it
    /// was when opened: the stream reports blocks past its end, advice would only spend
    /// budget on them) and not in the buffer pool already.
    fn candidate(&self, issuer: &Issuer, rel: &Relation, block: u32) -> Option<usize> {
        if block >= rel.nblocks() {
            return None;
        }
        let seg = (block / rel.segment_blocks()) as usize;
        let f = rel.segments().get(seg)?;
        let resident = issuer.pool().is_some_and(|p| {
            p.looks_resident(Tag {
                file: f.slot,
                block: block % rel.segment_blocks(),
            })
        });
        (seg < self.devices.len() && !resident).then_some(seg)
    }

    /// Advises the held blocks (a run now known to be short, the newest entries of `ahead`)
    /// that the device's budget has room for, and sends them at once.
    fn advise_held(&mut self, issuer: &Issuer, rel: &Relation) {
        let first = self.ahead.len() - self.held as usize;
        self.held = 0;
        for i in first..self.ahead.len() {
            let block = self.ahead[i].block;
            // The same block again right after itself: its advice is out already.
            let repeat = i > 0 && self.ahead[i - 1].block == block;
            let Some(seg) = self.candidate(issuer, rel, block).filter(|_| !repeat) else {
                continue;
            };
            let dev = self.devices[seg];
            if dev != NOT_ADVISED && issuer.aio.shared.advice.try_take(dev, 1) {
                self.queue_advice(issuer, rel, seg, block);
                self.ahead[i].charged = dev;
            } else {
                self.refused_now += 1;
                self.refused += 1;
            }
        }
        self.flush(issuer, rel);
    }

    /// Adds `block` (in segment `seg`; charged) to the run of advice to send, sending the run
    /// before it if `block` does not extend it.
    fn queue_advice(&mut self, issuer: &Issuer, rel: &Relation, seg: usize, block: u32) {
        let b = block % rel.segment_blocks();
        if let Some((s, start, n)) = self.pending.as_mut() {
            if *s == seg && *start + *n == b && *n < self.combine_limit {
                *n += 1;
                return;
            }
            self.flush(issuer, rel);
        }
        self.pending = Some((seg, b, 1));
    }

    /// Sends the pending run of advice. With no handle free (even after reclaiming finished
    /// ones) the run is not sent: its blocks, the newest charged entries of `ahead` in its
    /// range, count as refused and give their budget back now.
    fn flush(&mut self, issuer: &Issuer, rel: &Relation) {
        let Some((seg, start, n)) = self.pending.take() else {
            return;
        };
        let bs = u64::from(issuer.aio.shared.settings.block_size);
        let handle = match issuer.try_acquire() {
            Ok(Some(h)) => Some(h),
            // Earlier advice, done, holds the handles until reclaimed.
            Ok(None) => {
                issuer.reclaim_completed();
                issuer.try_acquire().ok().flatten()
            }
            Err(_) => None,
        };
        match handle {
            Some(mut h) => {
                let f = &rel.segments()[seg];
                // Run by this thread at once: handed to a worker it would wait behind the
                // reads it is meant to get ahead of, and hold its handle meanwhile.
                h.set_flags(HandleFlags::SYNCHRONOUS);
                // Fire and forget: a failed advice is logged, never waited for.
                drop(h.fadvise_willneed(f, u64::from(start) * bs, u64::from(n) * bs));
                self.issued_now += u64::from(n);
            }
            None => {
                let first = seg as u64 * u64::from(rel.segment_blocks()) + u64::from(start);
                let run = first..first + u64::from(n);
                let unsent = self
                    .ahead
                    .iter_mut()
                    .rev()
                    .filter(|a| a.charged != NOT_ADVISED && run.contains(&u64::from(a.block)))
                    .take(n as usize);
                for a in unsent {
                    if !self.unthrottled {
                        issuer.aio.shared.advice.give_back(a.charged, 1);
                    }
                    a.charged = NOT_ADVISED;
                }
                // Counted as refused, but not a reason to ask for less: the budget had room.
                self.refused_now += u64::from(n);
            }
        }
    }

    /// Is advised block `block` in the page cache now that it is about to be read?
    fn probe(&mut self, issuer: &Issuer, rel: &Relation, block: u32) {
        let Some((f, b)) = rel.locate(block) else {
            return;
        };
        let bs = i64::from(issuer.aio.shared.settings.block_size);
        let mut byte = [0u8; 1];
        let iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // SAFETY: one iovec naming a live one-byte stack buffer; the fd is open while the
        // relation (borrowed) holds the file.
        let n = unsafe { libc::preadv2(f.raw_fd(), &iov, 1, i64::from(b) * bs, libc::RWF_NOWAIT) };
        // A simulated disk's files are all in memory: whatever was advised is at hand.
        let cached = n > 0 || issuer.aio.shared.storage.is_some();
        let event = if cached {
            AdviceEvent::Useful
        } else {
            AdviceEvent::Wasted
        };
        issuer.count_advice(event, 1);
        if self.unthrottled {
            return;
        }
        self.probed += 1;
        self.cached += u32::from(cached);
        if self.probed < WINDOW {
            return;
        }
        if self.refused > 0 {
            // The device's budget is spent (everyone's advice): ask for less.
            self.distance = (self.distance / 2).max(1);
        } else if self.cached * 2 < self.probed && self.distance == self.max_distance {
            // Mostly not cached even at the longest distance: the advice is evicted before
            // it is read, or cannot keep up; send less of it.
            self.distance = (self.distance / 2).max(1);
        } else {
            // Advice pays, or arrives late: send it further ahead while the budget allows.
            self.distance = (self.distance * 2).min(self.max_distance);
        }
        self.probed = 0;
        self.cached = 0;
        self.refused = 0;
    }

    /// Gives back the budget of every block advised and not read (the stream is dropped).
    pub(crate) fn release(&mut self, issuer: &Issuer) {
        for a in self.ahead.drain(..) {
            if a.charged != NOT_ADVISED && !self.unthrottled {
                issuer.aio.shared.advice.give_back(a.charged, 1);
            }
        }
        self.pending = None;
        self.held = 0;
    }
}
