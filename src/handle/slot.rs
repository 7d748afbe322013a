//! The handle slot: one I/O's shared state, its eight-state machine, and wait references.
//!
//! Every field is an atomic so that any thread (or process) may read a slot at any time —
//! the aios view copies slots without stopping I/O — without a data race. Ordering comes from
//! the state word alone: the writer fills fields with relaxed stores and publishes them with a
//! release store of the new state ([`HandleSlot::set_state`], the one mutator); a reader
//! acquires the state and then reads the fields. See `docs/design.md`, "Handles".

use super::atomics::STD_FENCE;
use super::state_word;
use crate::handle::op::{HandleFlags, Op};
use crate::handle::result::IoResult;
use std::sync::atomic::{
    AtomicI32, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

/// The most callbacks one handle can carry.
pub const MAX_CALLBACKS: usize = 4;

/// The lifecycle of a handle. Each state names what may follow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum HandleState {
    /// Unused; on its issuer's idle list. Next: `HandedOut`.
    Idle = 0,
    /// Returned by acquire; the issuer is defining it. Next: `Defined`, or `Idle` (released).
    HandedOut = 1,
    /// Op, target and memory are set. Next: `Staged`.
    Defined = 2,
    /// Stage callbacks ran; waiting in the batch to be submitted. Next: `Submitted`.
    Staged = 3,
    /// Handed to the method (a worker queue, a ring, or running inline). Next: `CompletedIo`.
    Submitted = 4,
    /// The raw result is known; shared callbacks are running. Next: `CompletedShared`.
    CompletedIo = 5,
    /// Shared callbacks done; waiters woken. Next: `CompletedLocal` (issuer only).
    CompletedShared = 6,
    /// Local callbacks done while the issuer reclaims. Next: `Idle`.
    CompletedLocal = 7,
}

impl HandleState {
    pub(crate) fn from_word(w: u32) -> HandleState {
        match w & STATE_MASK {
            0 => HandleState::Idle,
            1 => HandleState::HandedOut,
            2 => HandleState::Defined,
            3 => HandleState::Staged,
            4 => HandleState::Submitted,
            5 => HandleState::CompletedIo,
            6 => HandleState::CompletedShared,
            _ => HandleState::CompletedLocal,
        }
    }

    /// The name the aios view shows (`HANDED_OUT`, `SUBMITTED`, …).
    pub fn name(self) -> &'static str {
        match self {
            HandleState::Idle => "IDLE",
            HandleState::HandedOut => "HANDED_OUT",
            HandleState::Defined => "DEFINED",
            HandleState::Staged => "STAGED",
            HandleState::Submitted => "SUBMITTED",
            HandleState::CompletedIo => "COMPLETED_IO",
            HandleState::CompletedShared => "COMPLETED_SHARED",
            HandleState::CompletedLocal => "COMPLETED_LOCAL",
        }
    }

    /// True once the shared callbacks have run: waiting on such a handle returns at once.
    pub fn is_complete(self) -> bool {
        self >= HandleState::CompletedShared
    }

    pub(crate) fn may_follow(self, from: HandleState) -> bool {
        use HandleState::*;
        matches!(
            (from, self),
            (Idle, HandedOut)
                | (HandedOut, Defined)
                | (HandedOut, Idle)
                | (Defined, Staged)
                | (Staged, Submitted)
                | (Submitted, CompletedIo)
                | (CompletedIo, CompletedShared)
                | (CompletedShared, CompletedLocal)
                | (CompletedLocal, Idle)
                // The inline path (`aio/inline.rs`): an I/O its issuer runs at once and no
                // one else can name.
                | (Idle, Submitted)
                | (Submitted, Idle)
                // The direct path (`run_here` in `aio/lifecycle.rs`): an I/O without callbacks
                // its issuer runs at once, before anyone can name it; and the reclaim of an
                // I/O without callbacks, which has nothing local to run.
                | (HandedOut, Submitted)
                | (Submitted, CompletedShared)
                | (CompletedShared, Idle)
                // An I/O failed before it is staged (a foreign file, a panicked stage
                // callback), so that no waiter can claim and run it.
                | (Defined, Submitted)
        )
    }
}

const STATE_MASK: u32 = 0xff;

/// A reference to one use of a handle: `Copy + Send`, usable from any thread. If the handle was
/// recycled since, the I/O it named is long done and waiting returns at once. It also names
/// its subsystem, so a reference handed to another [`Aio`](crate::Aio) is refused, not
/// mistaken for one of that subsystem's handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitRef {
    pub(crate) subsystem: u32,
    pub(crate) index: u32,
    pub(crate) generation: u64,
}

impl WaitRef {
    /// The handle's index in the table (`io_id` in the aios view).
    pub fn io_id(&self) -> u32 {
        self.index
    }
    /// The generation this reference names.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// No block range recorded for the target.
pub(crate) const NO_BLOCK: u32 = u32::MAX;

/// One handle's shared state. Lives in the shared region; all-zero is a valid idle slot.
/// Fields are ordered so that it packs into two cache lines (a test checks).
#[repr(C, align(64))]
pub(crate) struct HandleSlot {
    /// State in the low byte, `WAITERS` in bit 31. Also the futex word waiters sleep on.
    pub state: AtomicU32,
    /// Issuer slot that owns this handle (fixed at start).
    pub owner: AtomicU32,
    /// Bumped each time the handle is recycled; starts at 1.
    pub generation: AtomicU64,
    pub op: AtomicU8,
    pub flags: AtomicU8,
    pub num_callbacks: AtomicU8,
    pub callbacks: [AtomicU8; MAX_CALLBACKS],
    pub callback_data: [AtomicU8; MAX_CALLBACKS],
    /// Times the I/O was executed again after a transient error (EAGAIN, EINTR).
    pub attempts: AtomicU8,
    pub handle_data_len: AtomicU16,
    pub iov_count: AtomicU16,
    /// File table slot of the target (u32::MAX: none, e.g. unlink by path).
    pub file: AtomicU32,
    pub fd: AtomicI32,
    pub offset: AtomicU64,
    /// Bytes to transfer (readv/writev), or the length/size for fadvise/fallocate/ftruncate.
    pub length: AtomicU64,
    /// First block and block count, for describing the target (NO_BLOCK: not block I/O).
    pub first_block: AtomicU32,
    pub nblocks: AtomicU32,
    pub raw_result: AtomicI32,
    /// The generation (its low 32 bits) whose I/O the fields describe, written as the issuer
    /// defines it. The view copies a slot only if it matches the generation: a handle being
    /// recycled has the next generation before it leaves COMPLETED_SHARED, and its fields
    /// are still the finished I/O's then.
    pub fields_generation: AtomicU32,
    /// Who executed it (see `Executor`), for the view.
    pub executor: AtomicU32,
    pub distilled: AtomicU64,
    /// When the handle was staged (ns since the subsystem started), for age and latency.
    pub staged_ns: AtomicU64,
    /// When the completer saw the raw result (ns since the subsystem started).
    pub completed_ns: AtomicU64,
    /// Path of an unlink (a pointer into memory the issuer parks until completion).
    pub path: AtomicUsize,
    /// The worker method's queue mark: `generation << 1 | 1` while the I/O sits in the
    /// worker queue, not yet taken; a worker that pops it, or a thread that waits for it first,
    /// clears the low bit by compare-and-swap, and only the winner executes it (see
    /// [`HandleSlot::take_queued`]). Naming the generation keeps a stale queue entry from
    /// taking the slot's next I/O.
    pub queue_mark: AtomicU64,
    /// Where the completion goes besides the slot: a pointer to the I/O's
    /// [`Notice`](crate::handle::notice::Notice), or 0 (see `handle/notice.rs`).
    pub notice: AtomicUsize,
}

/// `set_state`'s failure, out of line so that the state change itself inlines.
#[cold]
#[inline(never)]
fn wrong_state(from: HandleState, to: HandleState, found: HandleState) -> ! {
    panic!(
        "handle state transition to {} expected {} but found {}",
        to.name(),
        from.name(),
        found.name()
    );
}

impl HandleSlot {
    pub(crate) fn state(&self) -> HandleState {
        HandleState::from_word(self.state.load(Ordering::Acquire))
    }

    /// Starts the handle's next generation, before the transition that recycles it. Only
    /// the owning issuer writes the generation, so this is a load and a store, not a locked
    /// read-modify-write; the recycling transition after it (acquire and release) keeps it
    /// ahead of the fields that the recycling then clears, for a reader that copies them and
    /// checks the generation again.
    #[inline]
    pub(crate) fn next_generation(&self) {
        let g = self.generation.load(Ordering::Relaxed);
        self.generation.store(g.wrapping_add(1), Ordering::Release);
    }

    /// The one state mutator: asserts `from → to` is legal and that the handle is in `from`
    /// (changing nothing if it is not), publishes everything written before it (release), and
    /// wakes sleepers.
    #[inline]
    pub(crate) fn set_state(&self, from: HandleState, to: HandleState) {
        if let Err(found) = self.transition(from, to) {
            wrong_state(from, to, found);
        }
    }

    /// Moves the handle from `from` to `to` if it is in `from` (a compare-and-swap: of two
    /// threads racing to claim a STAGED handle, exactly one wins); false, changing nothing,
    /// if it is not.
    pub(crate) fn try_set_state(&self, from: HandleState, to: HandleState) -> bool {
        self.transition(from, to).is_ok()
    }

    #[inline]
    fn transition(&self, from: HandleState, to: HandleState) -> Result<(), HandleState> {
        state_word::transition(&self.state, from, to, STD_FENCE)
    }

    /// Sleeps until the state differs from `seen` (or spuriously), for at most the safety
    /// net. The caller re-checks. True if the safety net ended the sleep.
    /// Sleeps while the handle is in `seen` and its I/O is still `generation`'s (see
    /// [`state_word::sleep_while`]).
    pub(crate) fn sleep_while(&self, seen: HandleState, generation: u64) -> bool {
        state_word::sleep_while(&self.state, seen, || {
            self.generation.load(Ordering::Acquire) == generation
        })
    }

    pub(crate) fn op(&self) -> Op {
        Op::from_stored(self.op.load(Ordering::Relaxed))
    }

    pub(crate) fn flags(&self) -> HandleFlags {
        HandleFlags(self.flags.load(Ordering::Relaxed))
    }

    pub(crate) fn distilled(&self) -> IoResult {
        IoResult::unpack(self.distilled.load(Ordering::Relaxed))
    }

    /// Clears the per-I/O fields (called by the issuer after recycling).
    #[inline]
    pub(crate) fn reset(&self) {
        let r = Ordering::Relaxed;
        self.op.store(0, r);
        self.flags.store(0, r);
        self.num_callbacks.store(0, r);
        self.handle_data_len.store(0, r);
        self.iov_count.store(0, r);
        self.file.store(u32::MAX, r);
        self.fd.store(-1, r);
        self.offset.store(0, r);
        self.length.store(0, r);
        self.first_block.store(NO_BLOCK, r);
        self.nblocks.store(0, r);
        self.raw_result.store(0, r);
        self.distilled.store(IoResult::UNKNOWN.pack(), r);
        self.executor.store(0, r);
        self.staged_ns.store(0, r);
        self.completed_ns.store(0, r);
        self.path.store(0, r);
        self.attempts.store(0, r);
        self.queue_mark.store(0, r);
        self.notice.store(0, r);
    }

    /// Marks the I/O of `generation` as queued for a worker, not yet taken.
    pub(crate) fn mark_queued(&self, generation: u64) {
        self.queue_mark
            .store(generation << 1 | 1, Ordering::Release);
    }

    /// Takes the queued I/O whose generation has low 32 bits `gen_low` (a worker's view: its
    /// request carries only those) for execution. Exactly one taker wins.
    pub(crate) fn take_queued(&self, gen_low: u32) -> bool {
        let w = self.queue_mark.load(Ordering::Acquire);
        w & 1 == 1
            && (w >> 1) as u32 == gen_low
            && self
                .queue_mark
                .compare_exchange(w, w & !1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// Whether the I/O of generation low bits `gen_low` still waits in the worker queue (not
    /// taken by a worker or a waiter): its queue entry is live.
    pub(crate) fn is_queued(&self, gen_low: u32) -> bool {
        let w = self.queue_mark.load(Ordering::Acquire);
        w & 1 == 1 && (w >> 1) as u32 == gen_low
    }

    /// Like [`HandleSlot::take_queued_exact`], but looks before it locks: for a caller that
    /// tries several handles, most of them already taken by workers.
    pub(crate) fn take_queued_if(&self, generation: u64) -> bool {
        self.queue_mark.load(Ordering::Relaxed) == generation << 1 | 1
            && self.take_queued_exact(generation)
    }

    /// Takes the queued I/O of `generation` (a waiter's or the submitter's view). Exactly one
    /// taker wins.
    pub(crate) fn take_queued_exact(&self, generation: u64) -> bool {
        let queued = generation << 1 | 1;
        self.queue_mark
            .compare_exchange(queued, queued & !1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}

/// Who executed an I/O, as stored in `HandleSlot::executor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Executor {
    /// Not executed yet.
    None,
    /// The issuer itself, synchronously.
    Issuer,
    /// Worker thread `n`.
    Worker(u32),
    /// The kernel, through the issuer's ring; completed by a reaper.
    Ring,
    /// A thread waiting for it, which found it staged and ran it itself.
    Waiter,
    /// The simulated disk (`io_method = sim`), on whichever thread advanced its clock.
    Sim,
}

impl Executor {
    pub(crate) fn encode(self) -> u32 {
        match self {
            Executor::None => 0,
            Executor::Issuer => 1,
            Executor::Ring => 2,
            Executor::Waiter => 3,
            Executor::Sim => 4,
            Executor::Worker(n) => 16 + n,
        }
    }
    pub(crate) fn decode(v: u32) -> Executor {
        match v {
            0 => Executor::None,
            1 => Executor::Issuer,
            2 => Executor::Ring,
            3 => Executor::Waiter,
            4 => Executor::Sim,
            n => Executor::Worker(n.saturating_sub(16)),
        }
    }
}

impl std::fmt::Display for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Executor::None => f.write_str("-"),
            Executor::Issuer => f.write_str("issuer"),
            Executor::Ring => f.write_str("io_uring"),
            Executor::Waiter => f.write_str("waiter"),
            Executor::Sim => f.write_str("sim"),
            Executor::Worker(n) => write!(f, "worker {n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle_slot() -> Box<HandleSlot> {
        // SAFETY: every field of a HandleSlot is an atomic, for which all-zero is a valid
        // value; all-zero is an idle slot (that is how the shared region starts).
        Box::new(unsafe { std::mem::zeroed() })
    }

    #[test]
    fn a_slot_is_two_cache_lines() {
        assert_eq!(std::mem::size_of::<HandleSlot>(), 128);
    }

    #[test]
    fn a_queued_io_is_taken_once_and_only_for_its_generation() {
        let s = idle_slot();
        s.mark_queued(7);
        assert!(!s.take_queued(6), "a stale entry names an older generation");
        assert!(!s.take_queued_exact(8));
        assert!(s.take_queued_exact(7));
        assert!(!s.take_queued(7), "taken already");
        s.mark_queued(8);
        assert!(s.take_queued(8));
        assert!(!s.take_queued_exact(8));
    }

    #[test]
    fn a_refused_transition_changes_nothing() {
        let s = idle_slot();
        let r = std::panic::catch_unwind(|| {
            s.set_state(HandleState::Staged, HandleState::Submitted);
        });
        assert!(
            r.is_err(),
            "the transition is refused: the handle is not STAGED"
        );
        assert_eq!(
            s.state(),
            HandleState::Idle,
            "and the state is left as it was"
        );
        assert!(!s.try_set_state(HandleState::Staged, HandleState::Submitted));
        s.set_state(HandleState::Idle, HandleState::HandedOut);
        s.set_state(HandleState::HandedOut, HandleState::Defined);
        s.set_state(HandleState::Defined, HandleState::Staged);
        assert!(s.try_set_state(HandleState::Staged, HandleState::Submitted));
        assert!(
            !s.try_set_state(HandleState::Staged, HandleState::Submitted),
            "of two claims, one wins"
        );
    }
}
