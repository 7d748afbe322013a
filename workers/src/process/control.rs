//! The control segment that the embedder and its worker processes share: a header, one cell
//! per worker, the file table, two two-level bitmaps (queued and done I/Os) and one request
//! cell per handle. Everything in it is an atomic, so every process may touch it through a
//! shared reference, and a zero-filled memfd is a valid empty segment.
//!
//! **Offsets, not addresses.** Each process maps the segment wherever its kernel puts it;
//! [`Control`] computes every part's place from the segment's base and the two sizes in the
//! header, and nothing stored inside is a pointer. Buffers are named by their offset in the
//! shared arena (`arena.rs`).
//!
//! **Why bitmaps and not a ring.** A worker can be SIGKILLed at any instruction. A ring whose
//! consumer dies between taking a slot and releasing it wedges every producer behind it;
//! a set bit is either there or not. The truth is each request cell's `state` word (changed
//! only by compare-and-swap); the bits only say where to look, and the supervisor repairs
//! them after a death (`Control::repair_after`).

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Most iovecs one request carries (PostgreSQL's `PG_IOV_MAX`); more run in the embedder.
pub const MAX_IOV: usize = 128;
/// Segment format tag ("dbaioPW1").
pub(crate) const MAGIC: u64 = 0x3257_506f_6961_6264;

/// Request cell states (low 8 bits of `ReqCell::state`; bits 8.. hold the worker number).
pub(crate) const FREE: u32 = 0;
pub(crate) const QUEUED: u32 = 1;
pub(crate) const RUNNING: u32 = 2;
pub(crate) const DONE: u32 = 3;
/// The result a request gets when it was lost with its worker too many times.
pub(crate) const LOST: i32 = i32::MIN;

/// Worker cell states.
pub(crate) const W_ABSENT: u32 = 0;
pub(crate) const W_STARTING: u32 = 1;
pub(crate) const W_IDLE: u32 = 2;
pub(crate) const W_BUSY: u32 = 3;
pub(crate) const W_RETIRED: u32 = 4;

pub(crate) fn state_word(kind: u32, worker: u32) -> u32 {
    kind | (worker << 8)
}

/// The segment's header.
#[repr(C)]
pub(crate) struct Header {
    pub magic: AtomicU64,
    pub handles: AtomicU32,
    pub files: AtomicU32,
    /// Pool sizing, written by the embedder before any worker starts.
    pub min: AtomicU32,
    pub max: AtomicU32,
    pub idle_timeout_ms: AtomicU64,
    /// Non-zero: workers run under `SCHED_BATCH`.
    pub batch_scheduling: AtomicU32,
    /// Set when the pool stops: workers leave once the queue is empty.
    pub stop: AtomicU32,
    /// Tests only: a worker that has decided to retire stops itself (SIGSTOP) at this step of
    /// retiring (a `RetireStep`; 0: never), so a test can kill it at that exact point.
    pub hold_at_retire: AtomicU32,
    /// Bit `w` set: worker `w` counts as running. Set when it is started; cleared exactly once
    /// when it leaves — by itself, as it decides to retire (only while the pool stays at or
    /// above its minimum), or by the supervisor when it finds it dead with the bit still set.
    /// A worker killed after counting itself out is therefore never counted out twice, and
    /// the supervisor tells a retirement from a death by whether the bit was still set.
    pub live: AtomicU64,
    /// The arena's descriptor number in the embedder and its size.
    pub arena_fd: AtomicI32,
    pub arena_len: AtomicU64,
    /// Regions besides the arena that workers map (pools on huge pages): per region number
    /// 1 ..= `MAX_REGIONS`, the embedder's memfd number and the length (0: none).
    pub regions: [[AtomicU64; 2]; dbaio_sys::arena::MAX_REGIONS],
    /// Bumped when the embedder closes a file: workers drop their stale descriptors, and
    /// each then says so in its cell (`WorkerCell::swept`).
    pub close_seq: AtomicU32,
    /// Embedder threads closing a file, waiting on `swept_seq` for every worker to drop its
    /// descriptor of it; a worker that has done so bumps `swept_seq` and wakes them.
    pub close_waiters: AtomicU32,
    pub swept_seq: AtomicU32,
    /// Bit `w` set: worker `w` is idle and may be taken and woken by a submitter.
    pub idle: CachePadded<AtomicU64>,
    /// Bit `w` set: worker `w` is on its way to the queue — a submitter woke it, or it has
    /// just posted a result — and takes a request there without another wake. Kept by
    /// self-sizing pools only, and only their sizing reads it (a wake that found too few idle
    /// workers but enough coming ones is met); wakeups do not depend on it, so a bit left set
    /// by a death only holds growth back until the repair clears it.
    pub coming: CachePadded<AtomicU64>,
    /// Bit `w` set: worker `w` has just finished a request and is on its way back to the
    /// queue, where it takes one without a wake (it clears the bit at its next look). A
    /// submission wakes only as many idle workers as the queue holds beyond these. Woken
    /// workers are not counted here: one stopped after its idle bit was taken would hold
    /// every later wake back.
    pub returning: CachePadded<AtomicU64>,
    /// The completer thread sleeps on `done_seq` after setting this.
    pub completer_sleeping: CachePadded<AtomicU32>,
    pub done_seq: CachePadded<AtomicU32>,
    /// Set by a worker that posted a result someone watches (`ReqCell::watched`) before it
    /// looks at `completer_sleeping`; a completer about to nap takes it after setting that,
    /// and drains instead (Dekker: one of the two sees the other).
    pub watched_posted: CachePadded<AtomicU32>,
    /// Embedder threads waiting for one of their I/Os, sleeping on `waiter_seq`: a worker
    /// that posts a result wakes them (they complete what is done themselves) rather than
    /// the completer, saving a hand-off. The protocol on these four words is `wake.rs`'s.
    pub waiters: CachePadded<AtomicU32>,
    pub waiter_seq: CachePadded<AtomicU32>,
    /// Results posted so far (each worker counts its own).
    pub posts: CachePadded<AtomicU64>,
    /// The count of `posts` at which the waiters want waking: each waiter lowers it to its
    /// own target (the posts so far plus the results it still needs), and the worker whose
    /// post reaches it raises it to `u64::MAX` and wakes them all, so a waiter that needs
    /// four results is woken once, not four times (as a thread-pool waiter's `wake_at`).
    pub wake_at: CachePadded<AtomicU64>,
    /// When an embedder thread last completed results in `drive` (CLOCK_MONOTONIC ns; the
    /// completer thread does not count). While that is recent the completer naps instead
    /// of sleeping (`completer_sleeping` = `COMPLETER_NAPPING`), and workers do not wake it.
    pub drained_ns: CachePadded<AtomicU64>,
    /// How long after an embedder thread's latest drain the results are left to it
    /// (`DRAINER_ACTIVE_NS`; tests lengthen it): the completer naps meanwhile, and a worker
    /// wakes a napping completer only once that long has passed without a drain.
    pub drainer_window_ns: AtomicU64,
    /// One past the highest request cell ever queued: the cells a repair after a death
    /// looks at. The table has a cell per handle (`max_issuers × io_max_concurrency`, up to
    /// millions), most never used; looking at all of them faulted in and zeroed the whole
    /// table, per worker leaving — seconds at each teardown (found by a caller-side attack,
    /// 2026-12-08: 7.7–18.8 s to drop a subsystem of 4096 × 1024 handles).
    pub reqs_used: AtomicU32,
}

/// `completer_sleeping`: the completer sleeps until a worker wakes it.
pub(crate) const COMPLETER_SLEEPING: u32 = 1;
/// `completer_sleeping`: the completer naps, and wakes by itself. It naps while an embedder
/// thread has drained within the last `DRAINER_ACTIVE_NS` (an issuer between two waits):
/// that thread completes what is posted on its next wait, so the completer neither drains
/// nor is woken per post. A worker whose post no one waits for wakes a napping completer
/// only if no embedder thread has drained for that long (it has stopped draining while I/O
/// still flows). Each nap that ends with the embedder still draining makes the next one
/// twice as long, up to `NAP_MAX_NS`, so a steady issuer costs the completer about a
/// hundred wakes a second, not one per window.
pub(crate) const COMPLETER_NAPPING: u32 = 2;
/// How long after an embedder thread's latest drain the completer leaves results to it. A
/// result no one waits for (nor polls, nor watches) that is posted after the issuers'
/// last drain completes within this plus `NAP_MAX_NS`; one posted while I/O still flows,
/// at the next post after this.
pub(crate) const DRAINER_ACTIVE_NS: u64 = 1_000_000;
/// The longest nap of the completer while an embedder thread keeps draining.
pub(crate) const NAP_MAX_NS: u64 = 8_000_000;

impl Header {
    /// An embedder thread has just completed results (in `drive` or `poll`): the completer
    /// leaves the next ones to it for `DRAINER_ACTIVE_NS`.
    pub(crate) fn mark_drained(&self) {
        self.drained_ns.store(monotonic_ns(), Ordering::Relaxed);
    }

    /// Nanoseconds since an embedder thread last completed results.
    pub(crate) fn since_drained(&self) -> u64 {
        monotonic_ns().saturating_sub(self.drained_ns.load(Ordering::Relaxed))
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for the embedder and its worker processes.
pub(crate) fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// One worker's cell.
#[repr(C)]
pub(crate) struct WorkerCell {
    /// Bumped by whoever takes this worker's idle bit, then woken.
    pub word: AtomicU32,
    pub state: AtomicU32,
    pub pid: AtomicI32,
    /// Requests executed by the process now in this cell.
    pub done: AtomicU64,
    /// The `close_seq` up to which this worker holds no descriptor of a closed file.
    pub swept: AtomicU32,
}

/// One file slot as the workers see it.
#[repr(C)]
pub(crate) struct FileCell {
    /// 0: closed. Otherwise a number unique to this opening of the slot.
    pub epoch: AtomicU64,
    /// The embedder's descriptor (workers reopen `/proc/<embedder>/fd/<fd>`).
    pub fd: AtomicI32,
    /// Its `F_GETFL` flags (access mode, `O_DIRECT`).
    pub flags: AtomicI32,
}

/// One handle's request, written by the embedder while the cell is FREE and published by
/// the store of QUEUED.
#[repr(C)]
pub(crate) struct ReqCell {
    pub state: AtomicU32,
    pub result: AtomicI32,
    pub op: AtomicU32,
    pub file: AtomicU32,
    pub epoch: AtomicU64,
    pub offset: AtomicU64,
    pub len: AtomicU64,
    pub iovcnt: AtomicU32,
    /// Times its worker died while executing it.
    pub attempts: AtomicU32,
    /// The handle's generation (low half), so that a waiter takes back only its own I/O.
    pub generation: AtomicU32,
    /// 1 while someone watches the request's completion without waiting for it (a future):
    /// its post then wakes the completer even while it naps. Cleared when the cell is freed.
    pub watched: AtomicU32,
    /// (arena offset, length) pairs.
    pub iov: [[AtomicU64; 2]; MAX_IOV],
}

/// Where this process maps the shared spaces: index 0 the arena, index k region k (see
/// `arena::shared_offset`); a null base for a space not mapped here.
pub(crate) type Spaces = [(*mut u8, u64); dbaio_sys::arena::MAX_REGIONS + 1];

impl ReqCell {
    /// Executes the request this cell holds (read after this worker set its state RUNNING)
    /// on descriptor `fd`, with its iovecs resolved against the shared spaces as this process maps them;
    /// returns the raw result (`-errno` for an op that never comes here, such as an unlink,
    /// or an iovec outside every space).
    ///
    /// # Safety
    ///
    /// Every non-null entry of `spaces` must be a live mapping of that many bytes of the
    /// space, whose buffers named by this request nobody else touches until its completion
    /// is posted.
    pub unsafe fn execute(&self, fd: std::os::fd::RawFd, spaces: &Spaces) -> i32 {
        use dbaio_sys::{Op, Request, perform};
        let r = Ordering::Relaxed;
        let op = match Op::from_stored(self.op.load(r) as u8) {
            Op::Unlink | Op::Rename | Op::Invalid => return -libc::EINVAL,
            op => op,
        };
        let n = (self.iovcnt.load(r) as usize).min(MAX_IOV);
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_IOV];
        for (k, v) in iov.iter_mut().enumerate().take(n) {
            let (shared, len) = (self.iov[k][0].load(r), self.iov[k][1].load(r));
            let space = (shared >> dbaio_sys::arena::REGION_SHIFT) as usize;
            let off = shared & ((1 << dbaio_sys::arena::REGION_SHIFT) - 1);
            let Some(&(base, size)) = spaces.get(space) else {
                return -libc::EFAULT;
            };
            if base.is_null() || off.checked_add(len).is_none_or(|end| end > size) {
                return -libc::EFAULT;
            }
            // SAFETY: off + len lies inside that space's mapping (checked just above).
            v.iov_base = unsafe { base.add(off as usize) }.cast();
            v.iov_len = len as usize;
        }
        let req = Request {
            op,
            fd,
            file: self.file.load(r),
            offset: self.offset.load(r),
            len: self.len.load(r),
            iov: iov.as_ptr(),
            iovcnt: n as u32,
            path: std::ptr::null(),
            user_data: 0,
        };
        // SAFETY: every iovec names arena memory that stays mapped and untouched until the
        // completion posts (function contract).
        unsafe { perform(&req) }
    }
}

const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Where each part of a segment for `handles` handles and `files` files lies.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub handles: u32,
    pub files: u32,
    workers: usize,
    file_cells: usize,
    queued_l0: usize,
    queued_l1: usize,
    done_l0: usize,
    done_l1: usize,
    reqs: usize,
    pub len: usize,
}

impl Layout {
    pub fn new(handles: u32, files: u32) -> Layout {
        let words0 = (handles as usize).div_ceil(64);
        let words1 = words0.div_ceil(64);
        let mut at = round_up(size_of::<Header>(), 4096);
        let mut take = |bytes: usize| {
            let here = at;
            at = round_up(at + bytes, 128);
            here
        };
        let workers = take(crate::MAX_WORKERS as usize * size_of::<CachePadded<WorkerCell>>());
        let file_cells = take(files as usize * size_of::<FileCell>());
        let queued_l0 = take(words0 * 8);
        let queued_l1 = take(words1 * 8);
        let done_l0 = take(words0 * 8);
        let done_l1 = take(words1 * 8);
        let reqs = take(handles as usize * size_of::<ReqCell>());
        Layout {
            handles,
            files,
            workers,
            file_cells,
            queued_l0,
            queued_l1,
            done_l0,
            done_l1,
            reqs,
            len: round_up(at, 4096),
        }
    }
}

/// A mapped control segment.
pub(crate) struct Control {
    base: *mut u8,
    pub layout: Layout,
}

// SAFETY: everything in the segment is atomics; `Control` only hands out shared references
// to them, which any thread may use.
unsafe impl Send for Control {}
// SAFETY: as above.
unsafe impl Sync for Control {}

impl Control {
    /// # Safety
    ///
    /// `base` must be a mapping of at least `layout.len` bytes, zero-filled or laid out by
    /// this `layout`, that outlives the `Control`.
    pub unsafe fn new(base: *mut u8, layout: Layout) -> Control {
        Control { base, layout }
    }

    /// `n` values of `T` at byte offset `at`.
    fn slice<T>(&self, at: usize, n: usize) -> &[T] {
        // SAFETY: `at` and `n` come from the layout, so the range lies inside the mapping
        // (constructor contract); every part is 128-byte aligned; T is an atomic type (or a
        // struct of them) for which all-zero bytes are a valid value.
        unsafe { std::slice::from_raw_parts(self.base.add(at).cast::<T>(), n) }
    }

    pub fn header(&self) -> &Header {
        &self.slice::<Header>(0, 1)[0]
    }
    pub fn workers(&self) -> &[CachePadded<WorkerCell>] {
        self.slice(self.layout.workers, crate::MAX_WORKERS as usize)
    }
    pub fn files(&self) -> &[FileCell] {
        self.slice(self.layout.file_cells, self.layout.files as usize)
    }
    pub fn reqs(&self) -> &[ReqCell] {
        self.slice(self.layout.reqs, self.layout.handles as usize)
    }
    /// The request cells ever queued (`Header::reqs_used`): what a scan of the table reads,
    /// without faulting in the cells no handle has used.
    pub fn used_reqs(&self) -> &[ReqCell] {
        let reqs = self.reqs();
        let used = self.header().reqs_used.load(Ordering::SeqCst) as usize;
        &reqs[..used.min(reqs.len())]
    }
    fn words0(&self) -> usize {
        (self.layout.handles as usize).div_ceil(64)
    }
    pub fn queued(&self) -> Bits<'_> {
        let n = self.words0();
        Bits {
            l0: self.slice(self.layout.queued_l0, n),
            l1: self.slice(self.layout.queued_l1, n.div_ceil(64)),
        }
    }
    pub fn done(&self) -> Bits<'_> {
        let n = self.words0();
        Bits {
            l0: self.slice(self.layout.done_l0, n),
            l1: self.slice(self.layout.done_l1, n.div_ceil(64)),
        }
    }

    /// After worker `w` died: its running requests go back to the queue (or, lost too often,
    /// are marked done with [`LOST`]), and every bit a death between two steps may have left
    /// unset is set again. Returns how many requests were queued again.
    pub fn repair_after(&self, w: u32, max_attempts: u32) -> u32 {
        let (queued, done) = (self.queued(), self.done());
        let mut requeued = 0;
        for (i, c) in self.used_reqs().iter().enumerate() {
            let st = c.state.load(Ordering::Acquire);
            match st & 0xff {
                RUNNING if st >> 8 == w => {
                    if c.attempts.fetch_add(1, Ordering::Relaxed) + 1 >= max_attempts {
                        c.result.store(LOST, Ordering::Relaxed);
                        c.state.store(state_word(DONE, w), Ordering::Release);
                        done.set(i as u32);
                    } else {
                        c.state.store(QUEUED, Ordering::Release);
                        queued.set(i as u32);
                        requeued += 1;
                    }
                }
                QUEUED => queued.set(i as u32),
                DONE => done.set(i as u32),
                _ => {}
            }
        }
        self.header().idle.fetch_and(!(1u64 << w), Ordering::SeqCst);
        self.header()
            .coming
            .fetch_and(!(1u64 << w), Ordering::SeqCst);
        self.header()
            .returning
            .fetch_and(!(1u64 << w), Ordering::SeqCst);
        requeued
    }
}

/// A two-level bitmap: bit `i` of the first level, and bit `i / 64` of the second, which says
/// which first-level words may be non-zero.
pub(crate) struct Bits<'a> {
    l0: &'a [AtomicU64],
    l1: &'a [AtomicU64],
}

impl Bits<'_> {
    /// Sets bit `i`. The second level's bit is written only if it is clear: a taker clears
    /// it before it looks at the first level (`take_all`, `tidy`), so a setter that sees it
    /// still set has its bit found (one locked operation fewer per post on a word that every
    /// worker writes).
    pub fn set(&self, i: u32) {
        let w = i as usize / 64;
        self.l0[w].fetch_or(1 << (i % 64), Ordering::SeqCst);
        let (l1, bit) = (&self.l1[w / 64], 1u64 << (w % 64));
        if l1.load(Ordering::SeqCst) & bit == 0 {
            l1.fetch_or(bit, Ordering::SeqCst);
        }
    }

    /// Clears bit `i` if it is set (the second level is left to the next taker's `tidy`
    /// unless the word is now empty). For a request taken back before a worker took its bit:
    /// the bit would otherwise stay counted until a worker took it and found nothing to run.
    pub fn clear(&self, i: u32) {
        let (w, bit) = (i as usize / 64, 1u64 << (i % 64));
        if self.l0[w].fetch_and(!bit, Ordering::SeqCst) == bit {
            self.tidy(w);
        }
    }

    pub fn any(&self) -> bool {
        self.l1.iter().any(|w| w.load(Ordering::SeqCst) != 0)
    }

    /// Set bits (approximate while others change them). Reads only the first-level words
    /// the second level marks, so a submitter can afford it on every wake.
    pub fn count(&self) -> usize {
        let mut n = 0;
        for (k, l1) in self.l1.iter().enumerate() {
            let mut marked = l1.load(Ordering::Relaxed);
            while marked != 0 {
                let w = k * 64 + marked.trailing_zeros() as usize;
                marked &= marked - 1;
                n += self.l0[w].load(Ordering::Relaxed).count_ones() as usize;
            }
        }
        n
    }

    /// Clears the second-level bit of empty word `w`, then sets it again if a bit arrived
    /// meanwhile (a setter sets the first level before the second, so none is lost).
    fn tidy(&self, w: usize) {
        let bit = 1u64 << (w % 64);
        self.l1[w / 64].fetch_and(!bit, Ordering::SeqCst);
        if self.l0[w].load(Ordering::SeqCst) != 0 {
            self.l1[w / 64].fetch_or(bit, Ordering::SeqCst);
        }
    }

    /// Takes one set bit (clearing it), searching round-robin from bit `from` on; None if
    /// none is set. Callers pass the bit after the one they took last, so a bit that stays
    /// set is reached within one round whatever else keeps arriving.
    pub fn take_one(&self, from: usize) -> Option<u32> {
        let n = self.l0.len();
        let from = from % (n * 64);
        let (first, rot0) = (from / 64, (from % 64) as u32);
        for k in 0..self.l1.len() {
            let k1 = (first / 64 + k) % self.l1.len();
            let rot1 = if k == 0 { (first % 64) as u32 } else { 0 };
            let mut summary = self.l1[k1].load(Ordering::SeqCst).rotate_right(rot1);
            while summary != 0 {
                let j = (summary.trailing_zeros() + rot1) % 64;
                summary &= summary - 1;
                let w = k1 * 64 + j as usize;
                if w >= n {
                    continue;
                }
                let rot = if w == first { rot0 } else { 0 };
                loop {
                    let word = self.l0[w].load(Ordering::SeqCst);
                    if word == 0 {
                        self.tidy(w);
                        break;
                    }
                    let b = (word.rotate_right(rot).trailing_zeros() + rot) % 64;
                    let bit = 1u64 << b;
                    if self.l0[w].fetch_and(!bit, Ordering::SeqCst) & bit != 0 {
                        if word == bit {
                            self.tidy(w);
                        }
                        return Some((w * 64) as u32 + b);
                    }
                }
            }
        }
        None
    }

    /// Takes every set bit, calling `f` for each.
    pub fn take_all(&self, mut f: impl FnMut(u32)) {
        for (k1, s) in self.l1.iter().enumerate() {
            let mut summary = s.swap(0, Ordering::SeqCst);
            while summary != 0 {
                let j = summary.trailing_zeros() as usize;
                summary &= summary - 1;
                let w = k1 * 64 + j;
                if w >= self.l0.len() {
                    continue;
                }
                let mut word = self.l0[w].swap(0, Ordering::SeqCst);
                while word != 0 {
                    let b = word.trailing_zeros();
                    word &= word - 1;
                    f((w * 64) as u32 + b);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(n: usize) -> (Vec<AtomicU64>, Vec<AtomicU64>) {
        let w0 = n.div_ceil(64);
        (
            (0..w0).map(|_| AtomicU64::new(0)).collect(),
            (0..w0.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        )
    }

    #[test]
    fn bitmap_takes_each_set_bit_once() {
        let (l0, l1) = bits(10_000);
        let b = Bits { l0: &l0, l1: &l1 };
        let set = [0u32, 1, 63, 64, 4095, 4096, 9_999, 5_000];
        for &i in &set {
            b.set(i);
        }
        assert_eq!(b.count(), set.len());
        let mut got = Vec::new();
        let mut from = 77;
        while let Some(i) = b.take_one(from) {
            got.push(i);
            from = i as usize / 64 + 1;
        }
        got.sort();
        let mut want = set.to_vec();
        want.sort();
        assert_eq!(got, want);
        assert!(!b.any(), "second level tidied");
        for &i in &set {
            b.set(i);
        }
        let mut all = Vec::new();
        b.take_all(|i| all.push(i));
        all.sort();
        assert_eq!(all, want);
        assert_eq!(b.take_one(0), None);
    }

    #[test]
    fn bitmap_under_concurrent_setters_and_takers_loses_nothing() {
        let (l0, l1) = bits(4096);
        let b = Bits { l0: &l0, l1: &l1 };
        let taken: Vec<AtomicU32> = (0..4096).map(|_| AtomicU32::new(0)).collect();
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let b = &b;
                s.spawn(move || {
                    for i in (t..4096).step_by(2) {
                        b.set(i);
                    }
                });
            }
            for t in 0..2usize {
                let (b, taken) = (&b, &taken);
                s.spawn(move || {
                    let mut idle = 0;
                    while idle < 100_000 {
                        match b.take_one(t * 31) {
                            Some(i) => {
                                taken[i as usize].fetch_add(1, Ordering::Relaxed);
                                idle = 0;
                            }
                            None => idle += 1,
                        }
                    }
                });
            }
        });
        b.take_all(|i| {
            taken[i as usize].fetch_add(1, Ordering::Relaxed);
        });
        assert!(taken.iter().all(|t| t.load(Ordering::Relaxed) == 1));
    }
}
