//! The `io_uring` method: one ring per issuer slot, created when the issuer registers. The
//! issuer pushes a whole batch and submits it with one `io_uring_enter` — the same one in
//! which it waits, when it waits. Anyone waiting on one of the issuer's I/Os may reap its
//! ring under the ring's completion lock and run the shared callbacks (foreign completion),
//! so an issuer that blocks elsewhere stalls no one. Buffered reads of 128 KiB or more are
//! punted to io-wq (`IOSQE_ASYNC`) once more than four I/Os are in flight (PostgreSQL punts
//! all buffered I/O so); smaller ones run inline, where a page-cache hit costs a third as
//! much ([`INLINE_BUFFERED_MAX`]). See `docs/design.md`, "Methods" and "Waiting".
//!
//! How waiters share a ring (the protocol; `reap_or_follow` is its one implementation):
//!
//! - A handle is *in the ring* ([`Uring::in_ring`]) from the moment its issuer pushes it
//!   (marked before the claim that makes it SUBMITTED, so a waiter that sees it submitted
//!   sees it in the ring; if a waiter wins the claim instead, the mark is cleared and a no-op
//!   wakes a holder that went to sleep in the kernel for it) until the thread that reaps its
//!   completion clears the mark, under the completion lock.
//!   A thread holding that lock and seeing the mark knows the I/O completes only through a
//!   completion it will reap itself. An I/O not in the ring — run by its issuer (a buffered
//!   write ext4 cannot do without blocking, an op the kernel lacks, a retired ring), claimed
//!   staged and run by a waiter, or executed again after EAGAIN — is waited for on its
//!   handle's state word (one I/O) or the issuer's bell (several).
//! - One thread at a time reaps a ring: whoever takes the completion lock. Nobody ever
//!   blocks on that lock, and every let-go of it rings the followers, even one that reaped
//!   nothing ([`Held`], the only way the lock is held here). A reap without waiting (the
//!   watcher's, an issuer's whose I/Os run partly elsewhere) that finds the lock taken leaves
//!   it to the holder (`reap_wanted`): every let-go reaps while a reap was left to it. The holder drains, and if nothing was ready and the kernel holds
//!   entries ([`Ring::in_kernel`] > 0, so a completion will come), sleeps in the kernel for
//!   one completion, bounded by the safety net; then it drains again, lets go and rings the
//!   bell. It never sleeps for more than one: a follower whose completion came first would
//!   wait, behind the lock, for the holder's others. A poll before the sleep
//!   (`io_uring_spin`) likewise ends as soon as anything is ready once a thread follows.
//! - A waiter that finds the lock taken *follows*: it sleeps on the issuer's bell, which
//!   every completion of the issuer's I/Os rings and which the holder rings when it lets the
//!   ring go (with followers counted, after a fence: Dekker's pattern, model-checked in
//!   `handle/bell.rs`). A waiter that finds its I/O pushed but not yet in the kernel follows
//!   until the issuer hands it over (a submission rings the bell for followers).
//! - The issuer waiting for several I/Os sleeps in the kernel only while every one it waits
//!   for is in the ring; while one runs on another thread it follows the bell instead, and
//!   arms the watcher thread to reap the ring if no one else does.
//! - Nothing blocking runs under the completion lock: an I/O whose attempt ended in EAGAIN
//!   or EINTR is executed again after the lock is released, out of the ring.
//! - A submission the kernel refuses (other than EAGAIN/EBUSY/EINTR) retires the ring: the
//!   I/Os it held fail with the error, and the issuer's later I/Os run synchronously. Their
//!   entries stay in the ring's memory, never to be submitted.

use super::watcher::Watcher;
use super::{IoMethod, TestHold};
use crate::handle::atomics::STD_FENCE;
use crate::handle::bell::{SAFETY_NET, Slept, safety_net_ended};
use crate::handle::error::AioError;
use crate::handle::files::NO_FILE;
use crate::handle::fixed_memory::{FixedMemory, RegisteredBuffers, RegisteredBuffersReader};
use crate::handle::op::{HandleFlags, Op};
use crate::handle::result::{ERROR_DATA_SUBMIT_FAILED, IoResult, Status};
use crate::handle::settings::{IoMethodKind, Settings};
use crate::handle::shared::{Completed, Drive, Shared};
use crate::handle::slot::{Executor, HandleState};
use dbaio_sys::Request;
use dbaio_uring::{Completion, Fd, Ring, Submission, Support};
use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The user data of a no-op pushed only to wake a thread asleep in the kernel (see
/// [`Uring::push`]); its completion is no handle's.
const WAKE_NOP: u64 = u64::MAX;

/// Buffered I/Os beyond this many in flight may be punted to io-wq (`IOSQE_ASYNC`), as
/// PostgreSQL does so that io-wq's threads copy from the page cache in parallel — but only
/// reads of at least [`PUNT_MIN_BYTES`], on a machine with a second CPU. Measured in
/// docs/benchmarks.md ("io_uring and buffered reads"): punting small cached reads costs
/// several times the CPU of running them inline; from 128 KiB up the parallel copy pays. The
/// kernel reads what is not cached without io-wq anyway (async buffered reads), so the punt
/// buys only parallel copying, which pays once a copy outweighs the hand-off.
const INLINE_BUFFERED_MAX: u32 = 4;
/// The smallest buffered read punted (see [`INLINE_BUFFERED_MAX`]).
const PUNT_MIN_BYTES: u64 = 128 << 10;
/// Fewer CPUs than this: buffered reads are never punted (nothing to copy in parallel with).
const PUNT_MIN_CPUS: usize = 2;
/// Submissions refused with EAGAIN/EBUSY are tried this many times before the refusal is
/// taken as final.
const SUBMIT_TRIES: u32 = 1000;
/// Handles are pushed and submitted in groups of at most this many.
const PUSH_GROUP: usize = 32;
/// Fewer entries than this in the kernel: a wait sleeps without polling.
const SPIN_MIN_IN_KERNEL: i64 = 4;
/// More entries than this in the kernel: a wait sleeps without polling. The device has
/// plenty queued and does not wait for the issuer to wake, so a poll buys only the issuer's
/// reaction time and takes CPU the device's own kernel threads may need (on the CPU-bound
/// device, 2 CPUs: depth 64 and 128 read 10% and 8% more without polling, at 0.7–1 µs less
/// CPU per read; depth 32 5% less, depth 16 14% less).
const SPIN_MAX_IN_KERNEL: i64 = 32;
/// A poll before sleeping that ended empty-handed makes this many waits sleep at once.
const SPIN_MISS_COST: i32 = 8;
/// The most polls that paid a ring remembers: this many more polls may end empty-handed
/// before its waits stop polling.
const SPIN_CREDIT_MAX: i32 = 8;

struct RingSlot {
    ring: OnceLock<Ring>,
    /// Pushed entries whose completions are not reaped yet.
    in_flight: AtomicU32,
    /// The errno of a submission the kernel refused: the ring is retired (0: it is not).
    retired: AtomicI32,
    /// A thread that wanted to reap without waiting (the watcher, an issuer whose awaited
    /// I/Os run partly elsewhere) found the completion side taken, and left the reap to the
    /// holder: whoever lets the side go reaps while this is set ([`Uring::let_go`]).
    reap_wanted: AtomicBool,
    /// The issuer's waits for I/Os some of which run on other threads (so it follows the
    /// bell, not the ring): while any lasts, the watcher reaps the ring at every arrival.
    mixed_waits: AtomicU32,
    /// Whether waits poll before sleeping (see [`Uring::spin_first`]): polls while >= 0.
    spin_credit: AtomicI32,
    /// The attachment's memory is to be registered with this ring once it is ready
    /// (`io_uring_registered_buffers`; its issuer tries again when it next submits).
    buffers_pending: AtomicBool,
}

/// The rings and their protocol; shared with the watcher thread (see [`UringMethod`]).
struct Uring {
    rings: Box<[RingSlot]>,
    /// Per handle: pushed into its ring, completion not reaped yet (see the module doc).
    in_ring: Box<[AtomicBool]>,
    support: Support,
    entries: u32,
    fixed_files: u32,
    /// Serialises ring creation against file registration so no ring misses a file.
    files_lock: Mutex<()>,
    shared: Arc<Shared>,
    /// Large buffered reads may be punted to io-wq (enough CPUs; see [`INLINE_BUFFERED_MAX`]).
    punt_large_reads: bool,
    /// `io_uring_spin`, in nanoseconds.
    spin_ns: u64,
    /// `io_uring_registered_buffers`, and what came of it.
    buffers: FixedBuffers,
    /// Tests: stops a [`Uring::reap_now`] that found nothing, holding the completion side.
    empty_reap_hold: TestHold,
    /// Tests: stops a [`Uring::reap_now`] that found the completion side held and left the
    /// reap to its holder.
    left_to_holder_hold: TestHold,
}

/// `io_uring_registered_buffers`: the attachment's memory (the buffer pool) registered with
/// each ring as it is made, and the registered-buffer slab's chunks (where `IoBuf`s come
/// from) as its issuer submits, or the kernel's refusal, said once.
struct FixedBuffers {
    /// `io_uring_registered_buffers`: the pool's memory.
    wanted: bool,
    /// `io_uring_registered_io_bufs`: the slab's chunks.
    io_bufs: bool,
    /// Rings that registered the pool's memory, and how many bytes each.
    rings: AtomicU32,
    bytes: AtomicUsize,
    /// The first refusal of the pool's memory, in words (later rings do not try again).
    refused: OnceLock<String>,
    /// The first refusal of a slab chunk, in words (that ring registers no more chunks).
    slab_refused: OnceLock<String>,
    /// Per slab chunk: the issuer (+1; 0: none yet) whose ring registered it, from whose
    /// table later rings share its entry instead of pinning it again.
    slab_holders: Box<[AtomicU32]>,
    /// Slab chunks the memory-lock limit leaves room for beside every issuer's ring
    /// (`io_buf_room`).
    slab_room: u32,
    /// That limit, in bytes, for the words of a refusal (None: no limit applies).
    memlock_limit: Option<u64>,
}

/// Memory-lock room each issuer's ring keeps for itself out of `RLIMIT_MEMLOCK` (its queues
/// are charged to it; a few pages at the depths used here).
const RING_MEMLOCK_ROOM: u64 = 64 << 10;

/// The process's memory-lock limit, if the kernel holds it to one: not with CAP_IPC_LOCK
/// (root outside a container), nor when unlimited.
fn memlock_limit() -> Option<u64> {
    // (Capabilities are a thread's: this one starts the subsystem.)
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())?;
    const CAP_IPC_LOCK: u32 = 14; // linux/capability.h
    if cap_eff & (1 << CAP_IPC_LOCK) != 0 {
        return None;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(lim.rlim_cur)
}

/// Slab chunks registered I/O buffers may take under `limit`, leaving each of `issuers`
/// rings its room: registering them up to the limit left later issuers' rings none, and
/// `register_issuer` failed (found by a caller-side attack: under 2 MiB + 64 KiB, 7 of 32).
fn io_buf_room(limit: Option<u64>, issuers: u32) -> u32 {
    match limit {
        None => u32::MAX,
        Some(limit) => {
            let room = limit.saturating_sub(u64::from(issuers) * RING_MEMLOCK_ROOM);
            u32::try_from(room / dbaio_sys::slab::CHUNK as u64).unwrap_or(u32::MAX)
        }
    }
}

/// I/Os to execute again once the completion lock is released.
struct Retries {
    few: [u32; 32],
    n: usize,
    more: Vec<u32>,
}

impl Retries {
    fn new() -> Retries {
        Retries {
            few: [0; 32],
            n: 0,
            more: Vec::new(),
        }
    }

    fn push(&mut self, i: u32) {
        if self.n < self.few.len() {
            self.few[self.n] = i;
            self.n += 1;
        } else {
            self.more.push(i);
        }
    }

    fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.few[..self.n].iter().chain(&self.more).copied()
    }
}

/// The handles one push queued, in order (a submission is at most a batch of 32).
struct Pushed {
    /// One per entry queued, in order: a handle, or [`NOP_MARK`] for a wake-up no-op (so
    /// that a count of entries the kernel took maps onto this list).
    ids: [u32; PUSH_GROUP],
    n: usize,
}

/// In a [`Pushed`] list: a no-op queued to wake a sleeper, not a handle.
const NOP_MARK: u32 = u32::MAX;

impl Pushed {
    fn new() -> Pushed {
        Pushed {
            ids: [0; PUSH_GROUP],
            n: 0,
        }
    }

    fn as_slice(&self) -> &[u32] {
        &self.ids[..self.n]
    }
}

/// What a waiter on a ring still needs (see [`Uring::reap_or_follow`]).
struct Want<'a> {
    /// True while the waiter still needs a completion from this ring.
    waiting: &'a dyn Fn() -> bool,
    /// The issuer's own entries, published and not yet handed to the kernel: the reaping
    /// enter submits them (only the issuer pushes, so only it may).
    submit: &'a [u32],
    /// How many completions a poll before sleeping waits to see ready, read holding the
    /// completion side after a drain: at most the waiter's I/Os still in the ring (each
    /// posts one there, which only the holder reaps). The kernel sleep itself is always for
    /// one.
    at_least: &'a dyn Fn() -> u32,
}

/// The completion side of an issuer's ring, held ([`Uring::try_hold`]); the only way this
/// module holds it, but for [`Uring::let_go`]'s own reaps. Letting it go — dropping this —
/// runs [`Uring::let_go`] once the lock is free: it tells the issuer's followers (a waiter
/// that found the side taken follows the bell until the holder lets go: registered, then
/// checking [`Ring::is_reaping`], Dekker's pattern), so no let-go is silent, even one that
/// reaped nothing (one was: a follower slept until the safety net); and it reaps for whoever
/// left a reap to the holder.
struct Held<'r> {
    cq: std::mem::ManuallyDrop<Completion<'r>>,
    uring: &'r Uring,
    issuer: u32,
}

impl<'r> std::ops::Deref for Held<'r> {
    type Target = Completion<'r>;
    fn deref(&self) -> &Completion<'r> {
        &self.cq
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.cq
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // SAFETY: `cq` is dropped here, once, and not touched again: `self` is going away.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.cq) };
        self.uring.let_go(self.issuer);
    }
}

impl Uring {
    /// Probes io_uring; `Err` is the refusal in words.
    fn start(settings: &Settings, shared: &Arc<Shared>) -> Result<Uring, String> {
        let support = dbaio_uring::probe().map_err(|r| r.to_string())?;
        let memlock = memlock_limit();
        if settings.io_uring_registered_io_bufs {
            // IoBufs made from now on come from memory the rings register.
            dbaio_sys::slab::enable();
        }
        Ok(Uring {
            rings: (0..settings.max_issuers)
                .map(|_| RingSlot {
                    ring: OnceLock::new(),
                    in_flight: AtomicU32::new(0),
                    retired: AtomicI32::new(0),
                    reap_wanted: AtomicBool::new(false),
                    mixed_waits: AtomicU32::new(0),
                    spin_credit: AtomicI32::new(0),
                    buffers_pending: AtomicBool::new(false),
                })
                .collect(),
            in_ring: (0..shared.handle_count())
                .map(|_| AtomicBool::new(false))
                .collect(),
            support,
            entries: shared.per_issuer,
            fixed_files: if settings.io_uring_registered_files {
                settings.max_files.min(descriptor_limit())
            } else {
                0
            },
            files_lock: Mutex::new(()),
            shared: Arc::clone(shared),
            punt_large_reads: std::thread::available_parallelism()
                .is_ok_and(|n| n.get() >= PUNT_MIN_CPUS),
            spin_ns: u64::from(settings.io_uring_spin) * 1000,
            buffers: FixedBuffers {
                wanted: settings.io_uring_registered_buffers,
                io_bufs: settings.io_uring_registered_io_bufs,
                rings: AtomicU32::new(0),
                bytes: AtomicUsize::new(0),
                refused: OnceLock::new(),
                slab_refused: OnceLock::new(),
                slab_holders: (0..dbaio_sys::slab::MAX_CHUNKS)
                    .map(|_| AtomicU32::new(0))
                    .collect(),
                slab_room: io_buf_room(memlock, settings.max_issuers),
                memlock_limit: memlock,
            },
            empty_reap_hold: TestHold::default(),
            left_to_holder_hold: TestHold::default(),
        })
    }

    fn ring(&self, issuer: u32) -> Option<&Ring> {
        self.rings.get(issuer as usize).and_then(|r| r.ring.get())
    }

    /// Takes `issuer`'s completion side if nobody holds it; letting it go tells the
    /// followers ([`Held`]).
    fn try_hold<'r>(&'r self, issuer: u32, ring: &'r Ring) -> Option<Held<'r>> {
        ring.try_completion().map(|cq| Held {
            cq: std::mem::ManuallyDrop::new(cq),
            uring: self,
            issuer,
        })
    }

    fn retired(&self, issuer: u32) -> bool {
        self.rings[issuer as usize].retired.load(Ordering::Acquire) != 0
    }

    /// Handle `i`'s I/O is in its ring (see the module documentation).
    fn in_ring(&self, i: u32) -> bool {
        self.in_ring[i as usize].load(Ordering::Acquire)
    }

    /// Registers the attachment's memory (the buffer pool's pages) with `issuer`'s ring if
    /// that is still to be done and the memory is ready (its pages faulted in); called when
    /// the ring is made and, while it is pending, at each of the issuer's submissions. Not
    /// done with `io_uring_registered_buffers` off or after a refusal, which is logged once:
    /// the ring goes on without (its I/Os into the pool are then ordinary ones).
    fn register_buffers(&self, shared: &Shared, issuer: u32) {
        let slot = &self.rings[issuer as usize];
        let Some(ring) = slot.ring.get() else {
            return;
        };
        let b = &self.buffers;
        // Not wanted (the setting off: the pool was registered regardless before this
        // check, whenever its memory was ready when a ring was made), or refused before.
        if !b.wanted || b.refused.get().is_some() {
            slot.buffers_pending.store(false, Ordering::Relaxed);
            return;
        }
        let memory = shared
            .attachment_hooks()
            .map_or(FixedMemory::None, |a| a.fixed_memory());
        let (base, len) = match memory {
            FixedMemory::Later => return,
            FixedMemory::None => {
                slot.buffers_pending.store(false, Ordering::Relaxed);
                return;
            }
            FixedMemory::Ready(base, len) => (base, len),
        };
        slot.buffers_pending.store(false, Ordering::Relaxed);
        // SAFETY: `fixed_memory` promises the region keeps its pages for the subsystem's whole
        // life, and the ring lives in this method, which the subsystem owns.
        match unsafe { ring.register_buffers(&[(base, len)]) } {
            Ok(()) => {
                b.rings.fetch_add(1, Ordering::Relaxed);
                b.bytes.store(len, Ordering::Relaxed);
            }
            Err(e) => {
                let size = if len >= 1 << 20 {
                    format!("{} MiB", len >> 20)
                } else {
                    format!("{} KiB", len >> 10)
                };
                let words = format!(
                    "the kernel refused to register the buffer pool's {size} with an io_uring ring ({e}){}; its reads and writes go on unregistered; io_uring_registered_buffers = off stops trying",
                    if e.raw_os_error() == Some(libc::ENOMEM) {
                        ": RLIMIT_MEMLOCK (ulimit -l) is below the pool's size, or memory is short"
                    } else {
                        ""
                    }
                );
                if b.refused.set(words.clone()).is_ok() {
                    tracing::warn!("{words}");
                }
            }
        }
    }

    /// On the issuer's way to submitting (either path): registers the pool's memory if its
    /// ring is still waiting to, and the slab's new chunks (a few loads when neither is due).
    #[inline]
    fn register_buffers_if_pending(&self, shared: &Shared, issuer: u32) {
        let slot = &self.rings[issuer as usize];
        if slot.buffers_pending.load(Ordering::Relaxed) {
            self.register_buffers(shared, issuer);
        }
        if !self.buffers.io_bufs {
            return;
        }
        if let Some(ring) = slot.ring.get().filter(|r| r.slab_pending()) {
            self.register_slab(issuer, ring);
        }
    }

    /// Registers the slab's chunks made since `ring` last did (see `Ring::register_slab`),
    /// sharing each from the first ring that registered it; a refusal is logged once and
    /// kept for the view.
    #[cold]
    fn register_slab(&self, issuer: u32, ring: &Ring) {
        let b = &self.buffers;
        let holder = |k: u32| match b.slab_holders[k as usize].load(Ordering::Acquire) {
            0 => None,
            h => self.rings[h as usize - 1].ring.get(),
        };
        let registered = |k: u32| {
            let _ = b.slab_holders[k as usize].compare_exchange(
                0,
                issuer + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        };
        if let Err(e) = ring.register_slab(&holder, &registered, b.slab_room) {
            let words = if e.kind() == std::io::ErrorKind::QuotaExceeded {
                format!(
                    "RLIMIT_MEMLOCK (ulimit -l, {} KiB) leaves room for {} MiB of registered I/O buffer memory beside the rings of {} issuers (max_issuers); I/O into IoBufs beyond it goes on unregistered; raise the limit, or io_uring_registered_io_bufs = off stops trying",
                    b.memlock_limit.unwrap_or(0) >> 10,
                    (u64::from(b.slab_room) * dbaio_sys::slab::CHUNK as u64) >> 20,
                    self.rings.len()
                )
            } else {
                format!(
                    "the kernel refused to register a {} MiB chunk of I/O buffer memory with an io_uring ring ({e}){}; I/O into IoBufs from it goes on unregistered; io_uring_registered_io_bufs = off stops trying",
                    dbaio_sys::slab::CHUNK >> 20,
                    if e.raw_os_error() == Some(libc::ENOMEM) {
                        ": RLIMIT_MEMLOCK (ulimit -l) is too low, or memory is short"
                    } else {
                        ""
                    }
                )
            };
            if self.buffers.slab_refused.set(words.clone()).is_ok() {
                tracing::warn!("{words}");
            }
        }
    }

    /// What `io_uring_registered_buffers` achieved so far.
    fn registered_buffers(&self) -> RegisteredBuffers {
        let b = &self.buffers;
        let rings = || self.rings.iter().filter_map(|r| r.ring.get());
        RegisteredBuffers {
            rings: b.rings.load(Ordering::Relaxed),
            bytes: b.bytes.load(Ordering::Relaxed),
            io_buf_bytes: rings().map(Ring::slab_bytes).max().unwrap_or(0),
            fixed_ios: rings().map(Ring::fixed_entries).sum(),
            refused: b.refused.get().or(b.slab_refused.get()).cloned(),
        }
    }

    // ---- submitting ------------------------------------------------------------------

    /// Claims each of `handles` (at most [`PUSH_GROUP`]; STAGED → SUBMITTED), marks it in
    /// the ring and queues it on the locked submission side; returns the entries queued, in
    /// order. A handle someone else claimed (a waiter that runs it) is not queued; a wake-up
    /// no-op is, in its place ([`NOP_MARK`]).
    fn push(&self, issuer: u32, sq: &mut Submission<'_>, handles: &[u32]) -> Pushed {
        debug_assert!(handles.len() <= PUSH_GROUP);
        let shared = &*self.shared;
        let mut pushed = Pushed::new();
        let counter = &self.rings[issuer as usize].in_flight;
        for &i in handles {
            // In the ring before the claim makes it SUBMITTED: a waiter that sees it
            // SUBMITTED then sees it in the ring (the claim publishes the mark) and reaps or
            // follows, instead of sleeping on a handle whose completion no one may reap.
            self.in_ring[i as usize].store(true, Ordering::Relaxed);
            if !shared.claim_submit(i) {
                // A waiter claimed it to run it itself: not ours, never in the ring. Anyone
                // who followed it meanwhile looks again, and a holder that went to sleep in
                // the kernel for it is woken by a no-op (if the queue has room; else by the
                // next completion of the entries in the kernel, which it waits for).
                self.in_ring[i as usize].store(false, Ordering::Release);
                self.tell_followers(issuer);
                if sq.push_nop(WAKE_NOP).is_ok() {
                    // Listed, so the flush that hands this group over hands it over too.
                    pushed.ids[pushed.n] = NOP_MARK;
                    pushed.n += 1;
                }
                continue;
            }
            let req = shared.request(i);
            let fd = self.ring_fd(&req);
            let s = shared.slot(i);
            s.executor.store(Executor::Ring.encode(), Ordering::Relaxed);
            let in_flight = counter.fetch_add(1, Ordering::Relaxed);
            let punt = self.punt_large_reads
                && s.flags().contains(HandleFlags::BUFFERED)
                && s.op() == Op::Readv
                && s.length.load(Ordering::Relaxed) >= PUNT_MIN_BYTES
                && in_flight >= INLINE_BUFFERED_MAX;
            // SAFETY: the handle is SUBMITTED: its iovecs, buffers and path are parked in the
            // handle until reclaim, which waits for this entry's completion; the file's fd is
            // held open by the handle's file reference until then too.
            while unsafe { sq.push(&req, fd, u64::from(i), punt) }.is_err() {
                // The ring has an entry per handle of its issuer, so it is never full while
                // every flush empties it; should it be, hand the queue over first.
                let _ = sq.submit();
                std::thread::yield_now();
            }
            pushed.ids[pushed.n] = i;
            pushed.n += 1;
        }
        pushed
    }

    /// Hands the queued entries (`pushed`, in order: handles and [`NOP_MARK`]s) to the kernel. Refusals that
    /// pass (EAGAIN, EBUSY: the completion queue is full) are retried, reaping first when the
    /// completion side is free. A refusal that does not pass retires the ring and fails the
    /// entries not taken. Followers waiting for the entries to reach the kernel are told.
    fn flush(&self, issuer: u32, ring: &Ring, sq: &mut Submission<'_>, pushed: &[u32]) {
        let mut taken = 0;
        let mut tries = 0;
        while taken < pushed.len() {
            let errno = match sq.submit() {
                Ok(n) if n > 0 => {
                    taken += n;
                    continue;
                }
                Ok(_) => libc::EAGAIN,
                Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
            };
            tries += 1;
            if matches!(errno, libc::EAGAIN | libc::EBUSY) && tries < SUBMIT_TRIES {
                if let Some(cq) = self.try_hold(issuer, ring) {
                    self.release(self.drain_held(issuer, cq));
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            self.retire(issuer, sq, &pushed[taken..], errno);
            break;
        }
        self.tell_followers(issuer);
    }

    /// Pushes and submits `handles` (any number) on the issuer's ring.
    fn push_and_flush(&self, issuer: u32, ring: &Ring, handles: &[u32]) {
        let mut sq = ring.submission();
        for (k, group) in handles.chunks(PUSH_GROUP).enumerate() {
            if self.retired(issuer) {
                // A refusal retired the ring while it took an earlier group: nothing more may
                // be submitted on it (the abandoned entries are still in its memory, and the
                // next submit would hand them over too). The rest run here. (Unreached while
                // a batch is at most `SUBMIT_BATCH_SIZE`, which is `PUSH_GROUP`; kept so that
                // a larger one cannot resubmit what was failed.)
                drop(sq);
                self.run_inline(&handles[k * PUSH_GROUP..]);
                return;
            }
            let pushed = self.push(issuer, &mut sq, group);
            self.flush(issuer, ring, &mut sq, pushed.as_slice());
        }
    }

    /// The kernel refused a submission for good: retire the ring and fail `lost`, the I/Os
    /// it did not take, with `errno`.
    fn retire(&self, issuer: u32, sq: &mut Submission<'_>, lost: &[u32], errno: i32) {
        let slot = &self.rings[issuer as usize];
        slot.retired.store(errno, Ordering::Release);
        let lost = lost.iter().copied().filter(|&i| i != NOP_MARK);
        tracing::error!(
            issuer,
            "io_uring_enter refused to submit {} I/O(s): {}; they fail, and this issuer's \
             later I/Os run synchronously",
            lost.clone().count(),
            std::io::Error::from_raw_os_error(errno)
        );
        sq.abandon();
        for i in lost {
            slot.in_flight.fetch_sub(1, Ordering::Relaxed);
            self.in_ring[i as usize].store(false, Ordering::Release);
            let base = IoResult {
                status: Status::Error,
                callback_id: 0,
                error_data: ERROR_DATA_SUBMIT_FAILED | (errno as u32 & 0xfff),
                result: 0,
            };
            self.shared.fail(i, -errno, Executor::Ring, base);
        }
    }

    /// Runs `handles` on the issuer, claiming each (a retired ring submits nothing).
    fn run_inline(&self, handles: &[u32]) {
        for &i in handles {
            if self.shared.claim_submit(i) {
                self.shared.run_here(i, Executor::Issuer);
            }
        }
    }

    /// Tells the issuer's followers that something they may wait for happened (entries
    /// handed to the kernel, the ring let go).
    fn tell_followers(&self, issuer: u32) {
        self.shared.issuers[issuer as usize]
            .bell
            .ring_followers(STD_FENCE);
    }

    // ---- reaping -----------------------------------------------------------------------

    /// Reaps every completion ready on the held completion side; I/Os to execute again go
    /// to `retries`.
    fn drain(&self, issuer: u32, cq: &mut Completion<'_>, retries: &mut Retries) -> usize {
        let slot = &self.rings[issuer as usize];
        // The completions reaped together are timed by one clock reading.
        self.shared.one_clock(|| {
            cq.drain(|user_data, res| {
                if user_data == WAKE_NOP {
                    return;
                }
                let i = user_data as u32;
                slot.in_flight.fetch_sub(1, Ordering::Relaxed);
                self.in_ring[i as usize].store(false, Ordering::Release);
                if self.shared.complete_catching(i, res, Executor::Ring) == Completed::Retry {
                    retries.push(i);
                }
            })
        })
    }

    /// Drains the held completion side and hands it back with what to retry.
    fn drain_held<'r>(&self, issuer: u32, mut cq: Held<'r>) -> (Held<'r>, Retries) {
        let mut retries = Retries::new();
        self.drain(issuer, &mut cq, &mut retries);
        (cq, retries)
    }

    /// Lets the completion side go ([`Held`]: followers told, reaps left to the holder
    /// done) and executes `retries` again, outside the lock.
    fn release(&self, (cq, retries): (Held<'_>, Retries)) {
        drop(cq);
        for i in retries.iter() {
            self.shared.run_here(i, Executor::Ring);
        }
    }

    /// Reaps whatever is ready, without waiting: here if the completion side is free, else
    /// by its holder when it lets go (the want is left in `reap_wanted` first, so a holder
    /// letting go either sees it or has let go before the try: Dekker's pattern, with the
    /// fence in [`Uring::let_go`]).
    fn reap_now(&self, issuer: u32, ring: &Ring) {
        self.rings[issuer as usize]
            .reap_wanted
            .store(true, Ordering::SeqCst);
        STD_FENCE(Ordering::SeqCst);
        let Some(mut cq) = self.try_hold(issuer, ring) else {
            self.left_to_holder_hold.pass();
            return; // the holder's let-go reaps for us
        };
        // Ours to do now; a want left while we hold it is the let-go's.
        self.rings[issuer as usize]
            .reap_wanted
            .swap(false, Ordering::SeqCst);
        let mut retries = Retries::new();
        if self.drain(issuer, &mut cq, &mut retries) == 0 && retries.is_empty() {
            self.empty_reap_hold.pass();
        }
        self.release((cq, retries));
    }

    /// After the completion side is let go: tells the followers, then, while a reap was
    /// left to the holder (`reap_wanted`), takes the side again and reaps — unless someone
    /// else holds it now, whose let-go will. Its own holds let go here too, with the same
    /// steps, in the loop rather than through [`Held`].
    fn let_go(&self, issuer: u32) {
        let slot = &self.rings[issuer as usize];
        loop {
            // `ring_followers` begins with a SeqCst fence: the unlock before it, the look at
            // `reap_wanted` after it.
            self.tell_followers(issuer);
            if !slot.reap_wanted.load(Ordering::SeqCst) {
                return;
            }
            let Some(ring) = slot.ring.get() else {
                return;
            };
            let Some(mut cq) = ring.try_completion() else {
                return; // the new holder lets go after us and sees the want
            };
            slot.reap_wanted.swap(false, Ordering::SeqCst);
            let mut retries = Retries::new();
            self.drain(issuer, &mut cq, &mut retries);
            drop(cq);
            if !retries.is_empty() {
                // Followers first: an I/O executed again may take any time.
                self.tell_followers(issuer);
                for i in retries.iter() {
                    self.shared.run_here(i, Executor::Ring);
                }
            }
        }
    }

    /// One step of a wait on `issuer`'s ring, for a waiter that needs a completion from it
    /// (`want.waiting`): reaps if no one else does — sleeping in the kernel for one
    /// completion first when nothing is ready and the kernel holds entries — or else follows
    /// the bell until the reaper lets go or the waiter's need changes. The issuer's
    /// published entries (`want.submit`) are handed over either way before anything sleeps.
    fn reap_or_follow(&self, issuer: u32, ring: &Ring, want: Want<'_>) {
        let bell = &self.shared.issuers[issuer as usize].bell;
        let seen = bell.seen();
        let Some(mut cq) = self.try_hold(issuer, ring) else {
            self.submit_published(issuer, ring, want.submit);
            self.follow(issuer, seen, &|| !(want.waiting)() || !ring.is_reaping());
            return;
        };
        let mut retries = Retries::new();
        let drained = self.drain(issuer, &mut cq, &mut retries);
        if drained > 0 || !retries.is_empty() || !(want.waiting)() {
            self.release((cq, retries));
            self.submit_published(issuer, ring, want.submit);
            return;
        }
        if want.submit.is_empty() && ring.in_kernel() <= 0 {
            // What we wait for is pushed but not in the kernel yet (its issuer is handing it
            // over) or being failed: follow until that changes.
            self.release((cq, retries));
            self.follow(issuer, seen, &|| !(want.waiting)() || ring.in_kernel() > 0);
            return;
        }
        let handed = self.wait_in_kernel(issuer, ring, &mut cq, &want);
        self.drain(issuer, &mut cq, &mut retries);
        self.release((cq, retries));
        // What the kernel did not take yet goes now, where a full completion queue can be
        // reaped to make room.
        self.submit_published(issuer, ring, &want.submit[handed..]);
    }

    /// Holding the completion side with nothing ready: sleeps in the kernel for one
    /// completion (submitting the issuer's published entries in the same call), bounded by
    /// the safety net. Returns how many of the published entries are handed over: the rest
    /// (refused for now — no request could be had, completions backed up) the caller hands
    /// over once it has let the completion side go.
    fn wait_in_kernel(
        &self,
        issuer: u32,
        ring: &Ring,
        cq: &mut Completion<'_>,
        want: &Want<'_>,
    ) -> usize {
        let all = want.submit.len();
        let mut submit = all > 0;
        // Entries handed over before the poll (the rest go with the kernel wait).
        let mut handed = 0;
        if self.spin_first(issuer, ring) {
            if submit {
                handed = self.submit_once(issuer, ring, want.submit);
                submit = false;
                if handed < all {
                    // Nothing sleeps holding entries not handed over: the caller lets go
                    // and hands over the rest, reaping to make room.
                    return handed;
                }
            }
            if self.spin(issuer, cq, (want.at_least)()) {
                return handed;
            }
        }
        let since = std::time::Instant::now();
        match cq.submit_and_wait_one(submit, SAFETY_NET) {
            Ok(w) => {
                if w.taken > 0 {
                    self.tell_followers(issuer);
                }
                if w.timed_out {
                    // Only a completion we reap could end what we wait for; if it ended
                    // without one, a completion went where we did not look.
                    let slept = safety_net_ended(since, !(want.waiting)());
                    self.shared.note_sleep(issuer, slept);
                }
                if submit { w.taken.min(all) } else { handed }
            }
            Err(e) if submit => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                if matches!(errno, libc::EAGAIN | libc::EBUSY) {
                    // Nothing taken, for now: `flush` retries (reaping) after the let-go.
                    return 0;
                }
                let mut sq = ring.submission();
                self.retire(issuer, &mut sq, want.submit, errno);
                self.tell_followers(issuer);
                all
            }
            Err(e) => {
                tracing::warn!("waiting on io_uring failed: {e}; waiting again");
                handed
            }
        }
    }

    /// Holding the completion side: hands the published entries to the kernel in one try,
    /// without `flush`'s retries (a refusal that passes waits for completions to be reaped,
    /// which the holder is not doing; the caller hands the rest over once it lets go).
    /// Returns how many were taken; a refusal that does not pass retires the ring (then all
    /// count as handed: failed).
    fn submit_once(&self, issuer: u32, ring: &Ring, published: &[u32]) -> usize {
        let mut sq = ring.submission();
        match sq.submit() {
            Ok(n) => {
                if n > 0 {
                    self.tell_followers(issuer);
                }
                n.min(published.len())
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                if matches!(errno, libc::EAGAIN | libc::EBUSY) {
                    return 0;
                }
                self.retire(issuer, &mut sq, published, errno);
                self.tell_followers(issuer);
                published.len()
            }
        }
    }

    /// Whether a wait on `issuer`'s ring polls before it sleeps (`io_uring_spin`): only
    /// with at least [`SPIN_MIN_IN_KERNEL`] entries in the kernel (completions then come
    /// often, and a poll is short — at depth 1 it would last as long as the I/O) and at most
    /// [`SPIN_MAX_IN_KERNEL`] (beyond, the device is not kept waiting by a sleep), and while
    /// polls pay; after one ends empty-handed the ring sleeps at once for the next
    /// [`SPIN_MISS_COST`] waits, then polls again to see whether they pay now.
    fn spin_first(&self, issuer: u32, ring: &Ring) -> bool {
        let in_kernel = ring.in_kernel();
        if self.spin_ns == 0 || !(SPIN_MIN_IN_KERNEL..=SPIN_MAX_IN_KERNEL).contains(&in_kernel) {
            return false;
        }
        let credit = &self.rings[issuer as usize].spin_credit;
        if credit.load(Ordering::Relaxed) >= 0 {
            return true;
        }
        credit.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Polls the held completion side for up to `io_uring_spin` until `need` completions
    /// are ready — or any, once another thread follows the ring (its I/O may be among them,
    /// and it waits for the holder to let go) — running the ring's pending task work as it
    /// goes; true if any came, so the caller drains instead of sleeping. Scores the poll
    /// for [`Uring::spin_first`].
    fn spin(&self, issuer: u32, cq: &mut Completion<'_>, need: u32) -> bool {
        let need = need.max(1) as usize;
        let bell = &self.shared.issuers[issuer as usize].bell;
        let start = std::time::Instant::now();
        let budget = std::time::Duration::from_nanos(self.spin_ns);
        loop {
            cq.flush();
            let ready = cq.ready();
            if ready >= need || (ready > 0 && bell.followed()) || start.elapsed() >= budget {
                break;
            }
            std::hint::spin_loop();
        }
        let got = cq.ready() > 0;
        let credit = &self.rings[issuer as usize].spin_credit;
        let now = credit.load(Ordering::Relaxed);
        let next = if got {
            (now + 1).min(SPIN_CREDIT_MAX)
        } else {
            now.min(SPIN_CREDIT_MAX) - SPIN_MISS_COST
        };
        credit.store(next, Ordering::Relaxed);
        got
    }

    /// Hands the issuer's published entries to the kernel (before anything sleeps).
    fn submit_published(&self, issuer: u32, ring: &Ring, published: &[u32]) {
        if !published.is_empty() {
            let mut sq = ring.submission();
            self.flush(issuer, ring, &mut sq, published);
        }
    }

    /// Sleeps on the issuer's bell as a follower until it rings after `seen`, unless `done`
    /// holds once registered. A follow the safety net ends while a thread still holds the
    /// ring's completion side was waiting for that holder (a slow completion callback, an
    /// I/O it completed and has not yet announced by letting go): slow, not a missed wake.
    fn follow(&self, issuer: u32, seen: u32, done: &dyn Fn() -> bool) {
        let mut slept = self.shared.issuers[issuer as usize]
            .bell
            .follow(seen, STD_FENCE, done);
        if slept == Slept::Missed && self.ring(issuer).is_some_and(|r| r.is_reaping()) {
            slept = Slept::Quiet;
        }
        self.shared.note_sleep(issuer, slept);
    }

    /// The file descriptor of handle `i`'s request as its ring sees it: registered when the
    /// file's slot is in the ring's table.
    fn ring_fd(&self, req: &Request) -> Fd {
        if req.file != NO_FILE && req.file < self.fixed_files {
            Fd::Fixed(req.file)
        } else {
            Fd::Raw(req.fd)
        }
    }

    // ---- waiting -----------------------------------------------------------------------

    /// A thread waits on handle `i` (see [`IoMethod::drive_one`]).
    fn drive_one(&self, i: u32, generation: u64) -> Drive {
        let shared = &*self.shared;
        let s = shared.slot(i);
        let issuer = s.owner.load(Ordering::Relaxed);
        let Some(ring) = self.ring(issuer) else {
            return Drive::Sleep;
        };
        let mine = || {
            s.generation.load(Ordering::Acquire) == generation
                && s.state() == HandleState::Submitted
        };
        if !mine() {
            return Drive::Progressed;
        }
        if !self.in_ring(i) {
            // Running on some thread, or being executed again: its completer wakes the
            // handle's sleepers.
            return Drive::Sleep;
        }
        let waiting = || mine() && self.in_ring(i);
        self.reap_or_follow(
            issuer,
            ring,
            Want {
                waiting: &waiting,
                submit: &[],
                at_least: &|| 1,
            },
        );
        Drive::Progressed
    }

    /// The issuer waits for `need` of `awaited` (see [`IoMethod::drive_many`]).
    fn drive_many(
        &self,
        issuer: u32,
        staged: &[u32],
        awaited: &[(u32, u64)],
        need: u32,
        watch_once: &dyn Fn(),
    ) -> Drive {
        let Some(ring) = self.ring(issuer) else {
            self.run_inline(staged);
            return Drive::Sleep;
        };
        if self.retired(issuer) && !staged.is_empty() {
            // Nothing more goes to the kernel; what it still holds is reaped below.
            self.run_inline(staged);
            return self.drive_many(issuer, &[], awaited, need, watch_once);
        }
        if staged.len() > PUSH_GROUP {
            // Not one batch: submit it apart, then wait.
            self.push_and_flush(issuer, ring, staged);
            return self.drive_many(issuer, &[], awaited, need, watch_once);
        }
        let published = {
            let mut sq = ring.submission();
            let pushed = self.push(issuer, &mut sq, staged);
            sq.publish();
            pushed
        };
        let shared = &*self.shared;
        let complete = |&(i, g): &(u32, u64)| {
            let s = shared.slot(i);
            s.generation.load(Ordering::Acquire) != g || s.state().is_complete()
        };
        let satisfied = || awaited.iter().filter(|a| complete(a)).count() as u32 >= need;
        let all_in_ring = || awaited.iter().all(|a| complete(a) || self.in_ring(a.0));
        if all_in_ring() {
            let waiting = || !satisfied() && all_in_ring();
            // What is still missing, of what will complete in this ring.
            let at_least = || {
                let (mut done, mut in_ring) = (0, 0);
                for a in awaited {
                    if complete(a) {
                        done += 1;
                    } else if self.in_ring(a.0) {
                        in_ring += 1;
                    }
                }
                need.saturating_sub(done).min(in_ring)
            };
            self.reap_or_follow(
                issuer,
                ring,
                Want {
                    waiting: &waiting,
                    submit: published.as_slice(),
                    at_least: &at_least,
                },
            );
            return Drive::Progressed;
        }
        // Some of what we wait for runs on other threads, whose completions ring the bell;
        // the rest completes in the ring, which the watcher reaps if no one else does.
        let seen = shared.issuers[issuer as usize].bell.seen();
        self.submit_published(issuer, ring, published.as_slice());
        let mixed = &self.rings[issuer as usize].mixed_waits;
        mixed.fetch_add(1, Ordering::SeqCst);
        self.reap_now(issuer, ring);
        watch_once();
        self.follow(issuer, seen, &|| satisfied() || all_in_ring());
        mixed.fetch_sub(1, Ordering::SeqCst);
        Drive::Progressed
    }
}

impl IoMethod for Uring {
    fn kind(&self) -> IoMethodKind {
        IoMethodKind::IoUring
    }

    fn needs_synchronous_execution(&self, shared: &Shared, i: u32) -> bool {
        let s = shared.slot(i);
        if self.retired(s.owner.load(Ordering::Relaxed)) {
            return true;
        }
        if s.op().transfers_data() && s.offset.load(Ordering::Relaxed) > dbaio_sys::MAX_OFFSET {
            // The kernel would take offset -1 as "at the file's position": `perform` refuses it.
            return true;
        }
        if s.op() == Op::FadviseWillneed && s.length.load(Ordering::Relaxed) > u64::from(u32::MAX) {
            // The entry carries a 32-bit length: `posix_fadvise` takes the whole range (and
            // refuses one beyond `off_t`, as every method does).
            return true;
        }
        match s.op() {
            // A buffered write the file system cannot do without blocking would be handed to
            // an io-wq kernel thread: several times the cost of the pwrite it is. The issuer
            // does it (docs/design.md, "io_uring and buffered writes").
            Op::Writev => shared
                .files
                .slots
                .get(s.file.load(Ordering::Relaxed) as usize)
                .is_some_and(|f| f.blocking_buffered_writes.load(Ordering::Relaxed)),
            Op::Unlink => !self.support.unlink,
            Op::Rename => !self.support.rename,
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
        // The method started (its probe made a ring): a refusal now is this issuer's alone,
        // not io_uring's (a descriptor limit reached, locked memory used up).
        let ring = Ring::new(self.entries, self.fixed_files).map_err(|r| AioError::IssuerRing {
            cause: r.to_string(),
        })?;
        for (file, fd) in shared.files.open_files() {
            if file < self.fixed_files {
                ring.update_fixed_file(file, fd).map_err(AioError::Start)?;
            }
        }
        let _ = slot.ring.set(ring);
        slot.buffers_pending
            .store(self.buffers.wanted, Ordering::Relaxed);
        self.register_buffers(shared, issuer);
        Ok(())
    }

    fn submit(&self, shared: &Shared, issuer: u32, handles: &[u32]) {
        self.register_buffers_if_pending(shared, issuer);
        match self.ring(issuer).filter(|_| !self.retired(issuer)) {
            Some(ring) => self.push_and_flush(issuer, ring, handles),
            None => self.run_inline(handles),
        }
    }

    fn inject_submit_error(&self, errno: i32) {
        for r in self.rings.iter().filter_map(|r| r.ring.get()) {
            r.inject_submit_error(errno);
        }
    }

    fn inject_submit_error_once(&self, errno: i32) {
        for r in self.rings.iter().filter_map(|r| r.ring.get()) {
            r.inject_submit_error_once(errno);
        }
    }

    fn poll(&self, _shared: &Shared, issuer: u32) {
        let Some(ring) = self.ring(issuer) else {
            return;
        };
        if let Some(mut cq) = self.try_hold(issuer, ring) {
            // Not blocking, so nothing else brings in completions whose task work the ring
            // holds back for the owner's next entry into the kernel: enter for them.
            cq.flush();
            self.release(self.drain_held(issuer, cq));
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

/// The process's soft limit on descriptors (`ulimit -n`): the kernel refuses a registered-file
/// table larger than it (EMFILE), so each ring's table stops there, and files in slots past it
/// go unregistered. With the table at `max_files` (1024 by default) every new issuer's ring
/// was refused under a lower limit, blamed on descriptors running out (found by a
/// caller-side attack).
fn descriptor_limit() -> u32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return u32::MAX;
    }
    u32::try_from(lim.rlim_cur).unwrap_or(u32::MAX)
}

impl Drop for Uring {
    fn drop(&mut self) {
        // Every issuer drains before it goes, so nothing should be in flight; make sure.
        for (issuer, r) in self.rings.iter().enumerate() {
            let Some(ring) = r.ring.get() else {
                continue;
            };
            while r.in_flight.load(Ordering::Relaxed) > 0 && ring.in_kernel() > 0 {
                let Some(mut cq) = self.try_hold(issuer as u32, ring) else {
                    break;
                };
                if cq.is_empty() && cq.submit_and_wait_one(false, SAFETY_NET).is_err() {
                    break;
                }
                self.release(self.drain_held(issuer as u32, cq));
            }
        }
    }
}

/// The `io_uring` method: the rings ([`Uring`]), and a watcher thread, started on first use,
/// that reaps the rings nobody else will: of issuers whose I/Os must complete with nobody
/// waiting (tickets awaited as futures, detached I/Os with error callbacks), for as long as
/// the subsystem runs; and, once, of an issuer that waits while some of its I/Os run on
/// other threads. It sleeps in `epoll` on those rings' descriptors.
pub(crate) struct UringMethod {
    /// Declared first: it stops (and drops its reference to the rings) before they go.
    watcher: OnceLock<Option<Watcher>>,
    uring: Arc<Uring>,
}

impl UringMethod {
    pub(crate) fn start(settings: &Settings, shared: &Arc<Shared>) -> Result<UringMethod, String> {
        Ok(UringMethod {
            watcher: OnceLock::new(),
            uring: Arc::new(Uring::start(settings, shared)?),
        })
    }

    fn watcher(&self) -> Option<&Watcher> {
        self.watcher
            .get_or_init(|| {
                let uring = Arc::clone(&self.uring);
                let reap = move |issuer: u32| {
                    let Some(ring) = uring.ring(issuer) else {
                        return false;
                    };
                    // Never blocks: if a thread holds the completion side, its let-go reaps
                    // what woke us.
                    uring.reap_now(issuer, ring);
                    // Watched once for an issuer's wait that follows the bell: again, while
                    // such a wait lasts, so that no arrival goes unreaped until it ends.
                    uring.rings[issuer as usize]
                        .mixed_waits
                        .load(Ordering::SeqCst)
                        != 0
                };
                match Watcher::start("dbaio-uring-watch", Box::new(reap)) {
                    Ok(w) => Some(w),
                    Err(e) => {
                        tracing::warn!(
                            "could not start the io_uring watcher thread ({e}): I/Os nobody waits for complete when their issuer next waits"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Has the watcher reap `issuer`'s ring when completions arrive: once, and again at
    /// each arrival while the issuer's wait that follows the bell lasts.
    fn watch_once(&self, issuer: u32) {
        let Some(ring) = self.uring.ring(issuer) else {
            return;
        };
        if let Some(w) = self.watcher() {
            w.watch_once(issuer, std::os::fd::AsRawFd::as_raw_fd(ring));
        }
    }
}

impl IoMethod for UringMethod {
    fn kind(&self) -> IoMethodKind {
        self.uring.kind()
    }

    fn registered_buffers(&self) -> Option<RegisteredBuffersReader> {
        let uring = Arc::clone(&self.uring);
        let b = &self.uring.buffers;
        (b.wanted || b.io_bufs)
            .then(|| Arc::new(move || uring.registered_buffers()) as RegisteredBuffersReader)
    }

    fn needs_synchronous_execution(&self, shared: &Shared, i: u32) -> bool {
        self.uring.needs_synchronous_execution(shared, i)
    }
    fn init_issuer(&self, shared: &Shared, issuer: u32) -> Result<(), AioError> {
        self.uring.init_issuer(shared, issuer)
    }
    fn submit(&self, shared: &Shared, issuer: u32, handles: &[u32]) {
        self.uring.submit(shared, issuer, handles)
    }
    fn drive_one(&self, _shared: &Shared, i: u32, generation: u64) -> Drive {
        self.uring.drive_one(i, generation)
    }
    fn drive_many(
        &self,
        shared: &Shared,
        issuer: u32,
        staged: &[u32],
        awaited: &[(u32, u64)],
        need: u32,
    ) -> Drive {
        if !staged.is_empty() {
            self.uring.register_buffers_if_pending(shared, issuer);
        }
        self.uring
            .drive_many(issuer, staged, awaited, need, &|| self.watch_once(issuer))
    }
    fn inject_submit_error(&self, errno: i32) {
        self.uring.inject_submit_error(errno)
    }
    fn inject_submit_error_once(&self, errno: i32) {
        self.uring.inject_submit_error_once(errno)
    }
    fn test_hold(&self, point: super::TestPoint) -> Option<&TestHold> {
        match point {
            super::TestPoint::EmptyReap => Some(&self.uring.empty_reap_hold),
            super::TestPoint::ReapLeftToHolder => Some(&self.uring.left_to_holder_hold),
            _ => None,
        }
    }
    fn poll(&self, shared: &Shared, issuer: u32) {
        self.uring.poll(shared, issuer)
    }
    fn watch(&self, issuer: u32, _i: u32) {
        let Some(ring) = self.uring.ring(issuer) else {
            return;
        };
        if let Some(w) = self.watcher() {
            w.watch(issuer, std::os::fd::AsRawFd::as_raw_fd(ring));
        }
    }
    fn file_opened(&self, slot: u32, fd: RawFd) {
        self.uring.file_opened(slot, fd)
    }
    fn file_closed(&self, slot: u32) {
        self.uring.file_closed(slot)
    }
}
