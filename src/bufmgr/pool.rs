//! The buffer pool: fixed-size pages in a shared mapping, descriptors of atomics, a
//! partitioned tag → buffer table, clock-sweep replacement, and PostgreSQL's buffer I/O rules
//! (one I/O per buffer; a second reader waits on that I/O's wait reference; a failed I/O is
//! taken over by the next reader). Reads complete through a built-in callback kind, so the
//! buffer becomes valid in whichever thread completes the I/O. See `docs/design.md`,
//! "Buffer pool".

use super::hit_pin::{self, NO_BUFFER};
use super::ring::BufferRing;
use super::verification::{PageVerification, PageVerifier};
use crate::handle::atomics::STD_FENCE;
use crate::handle::fixed_memory::FixedMemory;
use crate::handle::settings::Settings;
use crate::handle::shared::Attachment;
use crate::handle::shmem::{Prefault, SharedRegion};
use crate::handle::slot::WaitRef;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

pub(super) const REFCOUNT_MASK: u64 = (1 << 18) - 1;
/// Pins one buffer's shared count holds (an issuer's hit pins come on top).
pub(crate) const PIN_LIMIT: u32 = REFCOUNT_MASK as u32;
const USAGE_SHIFT: u32 = 18;
const USAGE_MASK: u64 = 0xf << USAGE_SHIFT;
const USAGE_MAX: u64 = 5;
/// How long the clock sweep keeps looking at a pool it found all pinned before it says no
/// buffer is free ([`BufferPool::victim`]): pins of a moment end within it even when their
/// holders wait for a CPU.
const ALL_PINNED_PATIENCE: std::time::Duration = std::time::Duration::from_millis(200);
/// Blocks of one file whose hints lie together: 2^4 = 16 four-byte slots = 64 bytes.
const HINT_GROUP_BITS: u32 = 4;
const HINT_GROUP_MASK: usize = (1 << HINT_GROUP_BITS) - 1;
/// The page holds the block's current contents.
pub(super) const VALID: u64 = 1 << 22;
/// An I/O on the buffer is in flight; its wait reference is in the descriptor.
pub(super) const IO_IN_PROGRESS: u64 = 1 << 23;
/// The last I/O failed; the next reader retries it.
const IO_ERROR: u64 = 1 << 24;
/// The tag names a block.
pub(super) const TAG_VALID: u64 = 1 << 25;
/// An evictor is checking the issuers' hit pins before retagging the buffer: a hit must not
/// pin it (see `try_hit`).
pub(super) const RETAGGING: u64 = 1 << 26;
/// The page failed its checksum when read and was kept (ignore-checksum-failure mode).
const CHECKSUM_IGNORED: u64 = 1 << 27;

/// Hit pins (see `try_hit`) one issuer holds at once; more pins use the shared count.
const HIT_PINS: usize = 8;
/// Where a pin is, for a pin in the buffer's shared count (else: the issuer's hit-pin slot).
pub(crate) const SHARED_PIN: u8 = u8::MAX;

const PARTITIONS: usize = 128;

/// Applies `f` to a state word atomically (a CAS loop); `f` returning `None` leaves it as it
/// is. True if it was changed.
fn update(state: &AtomicU64, f: impl FnMut(u64) -> Option<u64>) -> bool {
    state
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, f)
        .is_ok()
}

/// A block of a file known to the subsystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tag {
    pub file: u32,
    pub block: u32,
}

impl Tag {
    fn pack(self) -> u64 {
        (u64::from(self.file) << 32) | u64::from(self.block)
    }
    fn partition(self) -> usize {
        (self.pack().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 57) as usize % PARTITIONS
    }
}

/// The buffer table: packed tag → buffer, one per partition.
type TagMap = HashMap<u64, u32, BuildHasherDefault<TagHasher>>;

/// Hashes the buffer table's keys (a tag packed in a `u64`) with splitmix64's finalizer: a
/// few multiplies and shifts, where std's default (SipHash, keyed to resist chosen keys)
/// costs several times that on every miss, enough to show in a CPU-bound prewarm's profile
/// (docs/design.md, "Buffer pool", *Lookup*). Like PostgreSQL's buffer table (`hash_bytes`,
/// unkeyed), it does not defend against an embedder choosing block numbers to collide.
#[derive(Default)]
struct TagHasher(u64);

impl Hasher for TagHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed; anything else folds its bytes in the same way.
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(self.0 ^ u64::from_le_bytes(w));
        }
    }

    fn write_u64(&mut self, k: u64) {
        let mut z = k.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.0 = z ^ (z >> 31);
    }
}

struct Desc {
    state: AtomicU64,
    tag: AtomicU64,
    io_index: AtomicU32,
    io_generation: AtomicU64,
}

pub(crate) struct BufferPool {
    /// Declared before `pages`: fields drop in order, so it is joined before the unmap.
    prefault: OnceLock<Prefault>,
    /// Set at start when `buffer_pool_prefault` is on; the first victim starts the thread.
    prefault_pending: AtomicBool,
    /// `buffer_pool_prefault` is on (set at start, never cleared).
    prefault_wanted: AtomicBool,
    pages: SharedRegion,
    page_size: usize,
    descs: Box<[Desc]>,
    map: Box<[Mutex<TagMap>]>,
    /// A direct-mapped cache tag → buffer that hits read without locking. A hint only: every
    /// use is validated against the descriptor, so a stale or torn entry costs a slow lookup.
    hints: Box<[AtomicU32]>,
    /// Per issuer slot: the buffers it pinned by a hit (`NO_BUFFER` when free). Written only by
    /// that issuer; an evictor scans them before retagging a buffer.
    hit_pins: Box<[CachePadded<[AtomicU32; HIT_PINS]>]>,
    /// Issuer slots that ever took a hit pin: evictors scan only these.
    hit_pin_slots: AtomicU32,
    hand: AtomicU32,
    /// Per file slot: one past the highest block assigned a buffer since the slot's last
    /// `drop_file_buffers`, so a small file's buffers are dropped by lookup, not by a scan.
    block_ends: Box<[AtomicU32]>,
    /// The number of the subsystem the pool belongs to (for the wait references it hands out).
    subsystem: AtomicU32,
    /// Per issuer slot: its [`PageVerification`] mode as a byte, captured into each read.
    verification: Box<[AtomicU8]>,
    /// Per issuer slot: checksum failures its reads found (added by whichever thread
    /// completes the read).
    checksum_failures: Box<[AtomicU64]>,
    pub(super) verifier: Arc<dyn PageVerifier>,
}

/// What looking a block up gave.
pub(crate) enum Lookup {
    /// Pinned; already in the pool (maybe still being read).
    Found(u32),
    /// Pinned; newly assigned to the tag; nobody has started reading it.
    Assigned(u32),
}

impl Lookup {
    pub(crate) fn buffer(self) -> u32 {
        match self {
            Lookup::Found(b) | Lookup::Assigned(b) => b,
        }
    }
}

/// Why looking a block up gave no pinned buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoPin {
    /// Every buffer is pinned: there is no victim.
    AllPinned,
    /// The block's buffer (this one) already holds `PIN_LIMIT` pins: one more would run the
    /// count into the usage bits.
    PinnedTooOften(u32),
}

impl BufferPool {
    /// A pool of `s.pool_blocks()` pages of `s.block_size` bytes, for `s.max_issuers`
    /// issuers and `s.max_files` file slots, on memory as `s.huge_pages` and
    /// `s.transparent_huge_pages` say.
    pub(crate) fn new(
        s: &Settings,
        verifier: Arc<dyn PageVerifier>,
    ) -> std::io::Result<BufferPool> {
        let buffers = u32::try_from(s.pool_blocks()).unwrap_or(u32::MAX);
        let page_size = s.block_size as usize;
        let (issuers, huge, thp) = (s.max_issuers, s.huge_pages, s.transparent_huge_pages);
        let per_partition = (buffers as usize / PARTITIONS + 1) * 4;
        // Private while every executor is a thread; shared (a huge-page memfd or a block of the
        // arena) for worker processes, which must reach the pages.
        let bytes = buffers as usize * page_size;
        let pages = if s.worker_processes() {
            SharedRegion::for_worker_processes(bytes, huge)?
        } else {
            SharedRegion::new_pages(bytes, true, huge, thp)?
        };
        Ok(BufferPool {
            prefault: OnceLock::new(),
            prefault_pending: AtomicBool::new(false),
            prefault_wanted: AtomicBool::new(false),
            pages,
            page_size,
            descs: (0..buffers)
                .map(|_| Desc {
                    state: AtomicU64::new(0),
                    tag: AtomicU64::new(0),
                    io_index: AtomicU32::new(u32::MAX),
                    io_generation: AtomicU64::new(0),
                })
                .collect(),
            map: (0..PARTITIONS)
                .map(|_| {
                    Mutex::new(TagMap::with_capacity_and_hasher(
                        per_partition,
                        Default::default(),
                    ))
                })
                .collect(),
            hints: (0..(buffers as usize * 2).next_power_of_two())
                .map(|_| AtomicU32::new(NO_BUFFER))
                .collect(),
            hit_pins: (0..issuers)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU32::new(NO_BUFFER))))
                .collect(),
            hit_pin_slots: AtomicU32::new(0),
            hand: AtomicU32::new(0),
            block_ends: (0..s.max_files).map(|_| AtomicU32::new(0)).collect(),
            subsystem: AtomicU32::new(0),
            verification: (0..issuers).map(|_| AtomicU8::new(0)).collect(),
            checksum_failures: (0..issuers).map(|_| AtomicU64::new(0)).collect(),
            verifier,
        })
    }

    /// Faults the page memory in on a background thread (see `Prefault`) from the first time
    /// a buffer is handed out. Not earlier: while the thread faults, other threads' mappings
    /// wait behind it (registering an issuer maps a ring and allocates its statistics), and an
    /// engine registers its issuers and opens its files before it reads (docs/benchmarks.md,
    /// "Prewarm, second look").
    pub(crate) fn prefault_on_first_use(&self) {
        self.prefault_wanted.store(true, Ordering::Relaxed);
        self.prefault_pending.store(true, Ordering::Relaxed);
    }

    fn start_prefault(&self) {
        if self.prefault_pending.swap(false, Ordering::Relaxed) {
            self.prefault.get_or_init(|| Prefault::start(&self.pages));
        }
    }

    /// Adds `n` checksum failures to issuer slot `issuer`'s count.
    pub(crate) fn count_checksum_failures(&self, issuer: u32, n: u32) {
        self.checksum_failures[issuer as usize].fetch_add(u64::from(n), Ordering::Relaxed);
    }

    /// Issuer slot `issuer`'s checksum failures since it registered.
    pub(crate) fn checksum_failures(&self, issuer: u32) -> u64 {
        self.checksum_failures[issuer as usize].load(Ordering::Relaxed)
    }

    /// Records the number of the subsystem the pool was attached to (at start).
    pub(crate) fn set_subsystem(&self, id: u32) {
        self.subsystem.store(id, Ordering::Relaxed);
    }

    /// Issuer slot `issuer`'s page verification mode.
    pub(crate) fn verification(&self, issuer: u32) -> PageVerification {
        PageVerification::from_byte(self.verification[issuer as usize].load(Ordering::Relaxed))
    }

    /// Sets issuer slot `issuer`'s page verification mode.
    pub(crate) fn set_verification(&self, issuer: u32, v: PageVerification) {
        self.verification[issuer as usize].store(v.to_byte(), Ordering::Relaxed);
    }

    /// Buffers in the pool.
    #[inline]
    pub(crate) fn buffers(&self) -> u32 {
        self.descs.len() as u32
    }

    #[inline]
    pub(crate) fn page_size(&self) -> usize {
        self.page_size
    }

    /// The page memory of buffer `b`.
    #[inline]
    pub(crate) fn page_ptr(&self, b: u32) -> *mut u8 {
        assert!((b as usize) < self.descs.len(), "buffer {b} out of range");
        // SAFETY: b < buffers, and the region holds buffers × page_size bytes.
        unsafe { self.pages.base().add(b as usize * self.page_size) }
    }

    /// State word `s` with one more pin and the usage count raised (up to 5).
    fn pinned(s: u64) -> u64 {
        let usage = ((s & USAGE_MASK) >> USAGE_SHIFT).min(USAGE_MAX - 1) + 1;
        ((s & !USAGE_MASK) | (usage << USAGE_SHIFT)) + 1
    }

    /// Pins `b` (refcount + 1, usage count up to 5), found mapped. Refused when `b` already
    /// holds `PIN_LIMIT` pins: a caller can pin one block that often (its pins are its own to
    /// drop), and that must be its error, not a panic in the pool.
    fn pin_found(&self, b: u32) -> Result<Lookup, NoPin> {
        self.descs[b as usize]
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |s| {
                (s & REFCOUNT_MASK < REFCOUNT_MASK).then(|| Self::pinned(s))
            })
            .map(|_| Lookup::Found(b))
            .map_err(|_| NoPin::PinnedTooOften(b))
    }

    /// Drops one pin of `b`.
    #[inline]
    pub(crate) fn unpin(&self, b: u32) {
        let old = self.descs[b as usize].state.fetch_sub(1, Ordering::AcqRel);
        assert!(
            old & REFCOUNT_MASK > 0,
            "buffer {b} unpinned more often than pinned"
        );
    }

    /// Finds (and pins) the buffer for `tag`, assigning an unpinned victim if it is not in the
    /// pool: the current buffer of `ring` if it can be reused, else the buffer right after
    /// `after` (the previous block's, in a combined read) if nobody pins it and it was used at
    /// most once, else one from the clock sweep. A ring records whichever it got. Refused
    /// when every buffer is pinned, or when the block's buffer holds all the pins it can.
    ///
    /// The neighbour rule keeps a combined read in one contiguous piece of memory on a pool
    /// that has been recycled, where the sweep's victims are scattered: a device that maps
    /// every piece of a request separately serves scattered reads much more slowly
    /// (docs/design.md, "The buffer manager"). Like a ring, it takes a page used once a pass
    /// of the clock early; pages used twice or more are left to the sweep.
    ///
    /// `patient`: a pool found all pinned is looked at again for a while before the caller
    /// is told (see [`BufferPool::victim`]) — for a block the caller needs now; a block
    /// wanted ahead of need (readahead, a combined read's later blocks) is refused at once.
    pub(crate) fn lookup_or_assign(
        &self,
        tag: Tag,
        mut ring: Option<&mut BufferRing>,
        after: Option<u32>,
        patient: bool,
    ) -> Result<Lookup, NoPin> {
        let key = tag.pack();
        let p = tag.partition();
        let mut from_ring = ring.as_ref().and_then(|r| r.candidate());
        let mut neighbour = after
            .map(|b| b + 1)
            .filter(|&b| (b as usize) < self.descs.len());
        // A victim can be refused (pinned meanwhile, or hit-pinned, which the sweep does not
        // see); give up after as many refusals as there are buffers.
        for _ in 0..=self.descs.len() {
            {
                let map = self.map[p].lock();
                if let Some(&b) = map.get(&key) {
                    // Under the partition lock: it cannot be evicted meanwhile.
                    return self.pin_found(b);
                }
            }
            // The ring's buffer is tried once; a refused one goes back to the sweep.
            let v = match from_ring
                .take()
                .filter(|&b| self.pin_reusable(b))
                .or_else(|| neighbour.take().filter(|&b| self.pin_reusable(b)))
            {
                Some(b) => b,
                None => self.victim(patient).ok_or(NoPin::AllPinned)?,
            };
            let d = &self.descs[v as usize];
            let old = (d.state.load(Ordering::Acquire) & TAG_VALID != 0)
                .then(|| d.tag.load(Ordering::Relaxed));
            let op = old.map_or(p, |o| {
                Tag {
                    file: (o >> 32) as u32,
                    block: o as u32,
                }
                .partition()
            });
            // Both partitions, lower index first (one lock if they are the same).
            let (mut new_map, mut old_map) = if p == op {
                (self.map[p].lock(), None)
            } else if p < op {
                let a = self.map[p].lock();
                (a, Some(self.map[op].lock()))
            } else {
                let b = self.map[op].lock();
                (self.map[p].lock(), Some(b))
            };
            if let Some(&b) = new_map.get(&key) {
                // Someone else brought the block in meanwhile: use theirs.
                self.unpin(v);
                return self.pin_found(b);
            }
            if !self.reserve_victim(v) {
                continue;
            }
            if let Some(o) = old {
                match old_map.as_mut() {
                    Some(m) => m.remove(&o),
                    None => new_map.remove(&o),
                };
            }
            self.retag(v, tag);
            new_map.insert(key, v);
            if let Some(r) = ring.as_deref_mut() {
                r.record(v);
            }
            return Ok(Lookup::Assigned(v));
        }
        Err(NoPin::AllPinned)
    }

    /// With the partition locks held: is the victim still pinned only by us, idle, and pinned
    /// by no hit? Then it is marked RETAGGING (cleared by `retag`). If not, give it back (the
    /// caller retries).
    fn reserve_victim(&self, v: u32) -> bool {
        let d = &self.descs[v as usize];
        // Dekker with `try_hit` (see hit_pin.rs): one of the two sees the other.
        if hit_pin::reserve_for_retag(&d.state, || self.hit_pinned(v), STD_FENCE) {
            return true;
        }
        self.unpin(v);
        false
    }

    fn hit_pinned(&self, v: u32) -> bool {
        let n = (self.hit_pin_slots.load(Ordering::SeqCst) as usize).min(self.hit_pins.len());
        self.hit_pins[..n]
            .iter()
            .any(|pins| pins.iter().any(|p| p.load(Ordering::SeqCst) == v))
    }

    /// The hint slot of `tag`. Sixteen consecutive blocks of a file share 64 contiguous bytes
    /// of the table (their group is hashed, their place in it is not), so a stream that checks
    /// block after block misses the cache about once per sixteen blocks instead of per block;
    /// a miss per block was most of `next_buffer`'s time in a cold prewarm (docs/design.md,
    /// "Buffer pool", *Lookup*).
    fn hint_slot(&self, tag: Tag) -> &AtomicU32 {
        let group = Tag {
            file: tag.file,
            block: tag.block >> HINT_GROUP_BITS,
        };
        let h = group.pack().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        let i = ((h as usize) << HINT_GROUP_BITS) | (tag.block as usize & HINT_GROUP_MASK);
        &self.hints[i & (self.hints.len() - 1)]
    }

    /// Whether `tag` looks valid in the pool now: a glance at the hint table, no lock, no
    /// pin (it may miss a resident block; then the caller does what it would for a miss).
    pub(crate) fn looks_resident(&self, tag: Tag) -> bool {
        let b = self.hint_slot(tag).load(Ordering::Relaxed);
        if b == NO_BUFFER {
            return false;
        }
        let d = &self.descs[b as usize];
        d.tag.load(Ordering::Relaxed) == tag.pack() && d.state.load(Ordering::Acquire) & VALID != 0
    }

    /// Remembers that `tag` is in buffer `b`, for `try_hit`.
    #[inline]
    pub(crate) fn remember(&self, tag: Tag, b: u32) {
        let slot = self.hint_slot(tag);
        // Store only a change: hits call this too, and must not write a shared line.
        if slot.load(Ordering::Relaxed) != b {
            slot.store(b, Ordering::Relaxed);
        }
    }

    /// The hit path: finds a VALID buffer for `tag` without taking a lock or writing a shared
    /// cache line, and pins it in hit-pin slot `k` of `issuer` (which must be free). The pin is
    /// a published hazard: an evictor that sees it leaves the buffer alone. `None` sends the
    /// caller to `lookup_or_assign`.
    fn try_hit(&self, tag: Tag, issuer: u32, k: usize) -> Option<u32> {
        let b = self.hint_slot(tag).load(Ordering::Relaxed);
        if b == NO_BUFFER {
            return None;
        }
        let slots = self.hit_pins.get(issuer as usize)?;
        if self.hit_pin_slots.load(Ordering::Relaxed) <= issuer {
            self.hit_pin_slots.fetch_max(issuer + 1, Ordering::SeqCst);
        }
        let d = self.descs.get(b as usize)?;
        let s = hit_pin::publish_hit(&slots[k], b, &d.state, STD_FENCE)?;
        if d.tag.load(Ordering::Acquire) != tag.pack() {
            slots[k].store(NO_BUFFER, Ordering::Release);
            return None;
        }
        Self::count_use(&d.state, s);
        Some(b)
    }

    /// Counts a use of a buffer whose state word was `seen` for the clock sweep, once the hit
    /// is known to be the right block (a stale hint's buffer must not look used: a ring would
    /// then refuse to reuse it). One CAS, no retry: hot buffers are at the maximum and skip
    /// it, and a use lost to a concurrent change only ages the buffer a little early.
    #[inline]
    fn count_use(state: &AtomicU64, seen: u64) {
        if seen & USAGE_MASK < USAGE_MAX << USAGE_SHIFT {
            let _ = state.compare_exchange(
                seen,
                seen + (1 << USAGE_SHIFT),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// A hit without the partition lock, pinned in the buffer's shared count: the hint names
    /// a candidate, one CAS pins it only if it is VALID, tagged and not being retagged (so an
    /// evictor, which needs the count at its own single pin, cannot have reserved it), and the
    /// tag is checked once pinned (it cannot change while pinned); only then is the use
    /// counted. For callers that hold many pins (read streams); `None` sends them to
    /// `lookup_or_assign`.
    fn try_pin(&self, tag: Tag) -> Option<u32> {
        let b = self.hint_slot(tag).load(Ordering::Relaxed);
        let d = self.descs.get(b as usize)?;
        let s = d
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let pinnable = s & (VALID | TAG_VALID | RETAGGING) == VALID | TAG_VALID
                    && s & REFCOUNT_MASK < REFCOUNT_MASK;
                pinnable.then_some(s + 1)
            })
            .ok()?;
        if d.tag.load(Ordering::Acquire) != tag.pack() {
            self.unpin(b);
            return None;
        }
        Self::count_use(&d.state, s + 1);
        Some(b)
    }

    /// A free hit-pin slot of `issuer`, if any.
    fn free_hit_pin(&self, issuer: u32) -> Option<usize> {
        self.hit_pins
            .get(issuer as usize)?
            .iter()
            .position(|p| p.load(Ordering::Relaxed) == NO_BUFFER)
    }

    /// Drops a pin of `b` held by `issuer`: hit-pin slot `hit_pin`, or `SHARED_PIN` for the
    /// shared count.
    #[inline]
    pub(crate) fn release_pin(&self, issuer: u32, b: u32, hit_pin: u8) {
        if hit_pin == SHARED_PIN {
            self.unpin(b);
        } else {
            self.hit_pins[issuer as usize][usize::from(hit_pin)]
                .store(NO_BUFFER, Ordering::Release);
        }
    }

    /// Pins `tag`'s buffer if it is valid in the pool, without a lock: in a free hit-pin slot
    /// of `issuer` (no shared write at all), else in the shared count. Returns the buffer and
    /// where its pin is (a slot, or `SHARED_PIN`).
    pub(crate) fn pin_hit(&self, tag: Tag, issuer: u32) -> Option<(u32, u8)> {
        if let Some(k) = self.free_hit_pin(issuer) {
            if let Some(b) = self.try_hit(tag, issuer, k) {
                return Some((b, k as u8));
            }
        }
        self.try_pin(tag).map(|b| (b, SHARED_PIN))
    }

    fn retag(&self, v: u32, tag: Tag) {
        if let Some(end) = self.block_ends.get(tag.file as usize) {
            end.fetch_max(tag.block.saturating_add(1), Ordering::Relaxed);
        }
        let d = &self.descs[v as usize];
        d.tag.store(tag.pack(), Ordering::Relaxed);
        update(&d.state, |s| {
            Some(
                (s & !(VALID | IO_ERROR | USAGE_MASK | RETAGGING | CHECKSUM_IGNORED))
                    | TAG_VALID
                    | (1 << USAGE_SHIFT),
            )
        });
    }

    /// Pins `b` for reuse by a ring if nobody pins it, no I/O is on it and it was used at
    /// most once since it was last assigned (PostgreSQL's test in `GetBufferFromRing`).
    fn pin_reusable(&self, b: u32) -> bool {
        let d = &self.descs[b as usize];
        update(&d.state, |s| {
            (s & REFCOUNT_MASK == 0
                && s & IO_IN_PROGRESS == 0
                && (s & USAGE_MASK) >> USAGE_SHIFT <= 1)
                .then_some(s + 1)
        })
    }

    /// Clock sweep: an unpinned, idle buffer with usage count 0, returned pinned.
    fn victim(&self, patient: bool) -> Option<u32> {
        if self.prefault_pending.load(Ordering::Relaxed) {
            self.start_prefault();
        }
        let n = self.descs.len() as u32;
        // PostgreSQL's `StrategyGetBuffer`: give up only after a whole round of the pool in a
        // row found every buffer pinned (or being read); a usage count brought down starts
        // the round again. A fixed number of steps (six rounds) gave up while other threads
        // pinned, unpinned and hit buffers of a small pool under the hand, with some
        // buffer free all along (two issuers streaming in a pool of four: found by this
        // session's own test on worker processes, 2026-12-07).
        // A pin can be a moment's: another reader's probe of a hit, or its sweep taking a
        // buffer it then finds mapped by someone else. In a small pool a round of those looks
        // like a pool all pinned (two issuers streaming in a pool of four failed one run in
        // four on worker processes with one buffer free): a whole round pinned yields the
        // CPU and looks again; four rounds (and at least 64 looks) in a row that found
        // nothing make the pool look full.
        // Those four rounds take microseconds, and a pin of a moment lasts as long as its
        // holder is off its CPU — on a busy machine, scheduler ticks (a full-suite run on
        // sim failed so with a buffer let go a moment later). So a pool found all pinned is
        // looked at again, with naps, for `ALL_PINNED_PATIENCE` before it counts as full —
        // when the caller needs the block now (`patient`); a read ahead of need goes without
        // (a stream beside pins it cannot get would otherwise wait that long per block).
        let rounds = 4 * n.max(16);
        let mut pinned_in_a_row = 0;
        let mut all_pinned_since = None;
        loop {
            if pinned_in_a_row >= rounds {
                if !patient {
                    return None;
                }
                let since = *all_pinned_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= ALL_PINNED_PATIENCE {
                    return None;
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
                pinned_in_a_row -= n; // one more round
            }
            let b = self.hand.fetch_add(1, Ordering::Relaxed) % n;
            let d = &self.descs[b as usize];
            let s = d.state.load(Ordering::Relaxed);
            let used = s & USAGE_MASK != 0;
            // A hit pin is not in the count (hit_pin.rs): a buffer held that way looks free
            // here and is refused after the pin. Taken for a victim again and again while a
            // free buffer's usage count came down lap by lap, it used up the caller's
            // refusals (`lookup_or_assign`): two threads streaming in a pool of four failed
            // so about one full conformance run in eight. Counted as pinned instead.
            let held =
                s & REFCOUNT_MASK != 0 || s & IO_IN_PROGRESS != 0 || (!used && self.hit_pinned(b));
            if held {
                pinned_in_a_row += 1;
                if pinned_in_a_row % n == 0 {
                    std::thread::yield_now();
                }
                continue;
            }
            let new = if used { s - (1 << USAGE_SHIFT) } else { s + 1 };
            if d.state
                .compare_exchange(s, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                if !used {
                    return Some(b);
                }
                pinned_in_a_row = 0;
                all_pinned_since = None;
            }
        }
    }

    /// The state of `b` now: (valid, io in progress).
    #[inline]
    pub(crate) fn flags(&self, b: u32) -> (bool, bool) {
        let s = self.descs[b as usize].state.load(Ordering::Acquire);
        (s & VALID != 0, s & IO_IN_PROGRESS != 0)
    }

    /// StartBufferIO: takes the read of `b` if it is neither valid nor being read. Returns
    /// false if someone else's I/O is in progress or the buffer is valid.
    pub(crate) fn start_io(&self, b: u32) -> bool {
        let d = &self.descs[b as usize];
        let started = update(&d.state, |s| {
            (s & (VALID | IO_IN_PROGRESS) == 0)
                .then_some((s | IO_IN_PROGRESS) & !(IO_ERROR | CHECKSUM_IGNORED))
        });
        if started {
            // No reference until the I/O is started (published by `set_io`); a reader that
            // still sees an older one finds it finished and looks again.
            d.io_index.store(u32::MAX, Ordering::Release);
        }
        started
    }

    /// Publishes the wait reference of the I/O reading `b`; called at staging, when the handle
    /// is defined: a waiter must never wait on a handle still being handed out.
    pub(crate) fn set_io(&self, b: u32, wref: WaitRef) {
        let d = &self.descs[b as usize];
        d.io_generation.store(wref.generation, Ordering::Relaxed);
        d.io_index.store(wref.index, Ordering::Release);
    }

    /// The wait reference of the I/O in progress on `b`, if any.
    pub(crate) fn io_ref(&self, b: u32) -> Option<WaitRef> {
        let d = &self.descs[b as usize];
        if d.state.load(Ordering::Acquire) & IO_IN_PROGRESS == 0 {
            return None;
        }
        let index = d.io_index.load(Ordering::Acquire);
        (index != u32::MAX).then(|| WaitRef {
            subsystem: self.subsystem.load(Ordering::Relaxed),
            index,
            generation: d.io_generation.load(Ordering::Relaxed),
        })
    }

    /// True if `b`'s page failed its checksum when read and was kept anyway.
    #[inline]
    pub(crate) fn checksum_ignored(&self, b: u32) -> bool {
        self.descs[b as usize].state.load(Ordering::Acquire) & CHECKSUM_IGNORED != 0
    }

    /// TerminateBufferIO: the read of `b` finished, well (`ok`) or not; `ignored`: the page is
    /// kept despite a checksum failure.
    pub(crate) fn terminate_io(&self, b: u32, ok: bool, ignored: bool) {
        let flag = if ignored { CHECKSUM_IGNORED } else { 0 };
        let done = if ok { VALID } else { IO_ERROR };
        update(&self.descs[b as usize].state, |s| {
            Some((s & !IO_IN_PROGRESS) | flag | done)
        });
    }

    /// Forgets every buffer of file slot `file` (PostgreSQL's `DropRelationBuffers`): called
    /// when the slot's last reference goes, before the slot can name another file. No I/O on
    /// the file is in flight then, and no buffer is being assigned to it. A buffer still
    /// pinned keeps its page for the pinner, but no lookup finds it any more, and once
    /// unpinned it is free.
    ///
    /// As PostgreSQL (`BUF_DROP_FULL_SCAN_THRESHOLD`): a file whose blocks so far number under
    /// a 32nd of the pool is dropped by looking each block up; a bigger one by one scan of
    /// the descriptors. Closing a small file in a large pool then costs its own size, not the
    /// pool's.
    pub(crate) fn drop_file_buffers(&self, file: u32) {
        let end = self
            .block_ends
            .get(file as usize)
            .map_or(u32::MAX, |e| e.swap(0, Ordering::Relaxed));
        if (end as usize) < self.descs.len() / 32 {
            for block in 0..end {
                let tag = Tag { file, block };
                let mut map = self.map[tag.partition()].lock();
                if let Some(&b) = map.get(&tag.pack()) {
                    self.drop_buffer(&mut map, b, tag.pack());
                }
            }
            return;
        }
        for (b, d) in self.descs.iter().enumerate() {
            let key = d.tag.load(Ordering::Acquire);
            if d.state.load(Ordering::Acquire) & TAG_VALID != 0 && (key >> 32) as u32 == file {
                let tag = Tag {
                    file,
                    block: key as u32,
                };
                self.drop_buffer(&mut self.map[tag.partition()].lock(), b as u32, key);
            }
        }
    }

    /// Unmaps buffer `b` if it still holds the page tagged `key`, and makes it free. `map` is
    /// the key's partition, locked by the caller: under that lock the tag cannot change
    /// (retagging takes it too).
    fn drop_buffer(&self, map: &mut TagMap, b: u32, key: u64) {
        let d = &self.descs[b as usize];
        if map.get(&key) == Some(&b) {
            map.remove(&key);
        }
        update(&d.state, |s| {
            (s & TAG_VALID != 0 && d.tag.load(Ordering::Acquire) == key)
                .then_some(s & !(TAG_VALID | VALID | IO_ERROR | CHECKSUM_IGNORED | USAGE_MASK))
        });
    }

    /// How many buffers each tag maps to, and buffers mapped twice (for tests).
    pub(crate) fn check_mapping(&self) -> Result<usize, String> {
        let mut seen = vec![false; self.descs.len()];
        let mut n = 0;
        for (p, m) in self.map.iter().enumerate() {
            for (&key, &b) in m.lock().iter() {
                let d = &self.descs[b as usize];
                if std::mem::replace(&mut seen[b as usize], true) {
                    return Err(format!("buffer {b} is mapped twice"));
                }
                if d.tag.load(Ordering::Relaxed) != key {
                    return Err(format!("buffer {b} in partition {p} has another tag"));
                }
                n += 1;
            }
        }
        Ok(n)
    }
}

impl Attachment for BufferPool {
    fn issuer_registered(&self, slot: u32) {
        self.set_verification(slot, PageVerification::OFF);
        self.checksum_failures[slot as usize].store(0, Ordering::Relaxed);
    }

    /// Buffers are tagged by file slot: forget the file's before the slot is reused. After
    /// shutdown no file can be opened, so no slot is reused: the scan is skipped (it costs
    /// tens of milliseconds per file on a large, full pool).
    fn file_closed(&self, slot: u32, shutting_down: bool) {
        if !shutting_down {
            self.drop_file_buffers(slot);
        }
    }

    /// The pages, mapped for the pool's life and never given back page by page — unless
    /// they are a block of the shared arena (worker processes), whose frees punch holes.
    /// With `buffer_pool_prefault`, only once the prefault thread is done: pinning pages
    /// that are not there yet would fault them all in at once, in the registering thread.
    fn fixed_memory(&self) -> FixedMemory {
        let pages = &self.pages;
        if pages.len() == 0 || pages.is_arena_block() {
            return FixedMemory::None;
        }
        let faulting = self.prefault_wanted.load(Ordering::Relaxed)
            && !self.prefault.get().is_some_and(|p| p.is_done());
        if faulting {
            return FixedMemory::Later;
        }
        FixedMemory::Ready(pages.base().cast_const(), pages.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bufmgr::verification::PgPageVerifier;

    /// A pool of four pages, every one valid and tagged: buffer 0 held only by a hit pin (so
    /// not in its refcount), 1 and 2 pinned, 3 free with the highest usage count.
    fn pool_with_a_hit_pin_beside_a_used_buffer() -> BufferPool {
        let s = Settings {
            max_issuers: 2,
            buffer_pool_size: 4,
            ..Settings::default()
        };
        let pool = BufferPool::new(&s, Arc::new(PgPageVerifier { checksums: false })).unwrap();
        let tagged = VALID | TAG_VALID;
        let states = [
            tagged,
            tagged | 1,
            tagged | 1,
            tagged | USAGE_MAX << USAGE_SHIFT,
        ];
        for (b, state) in states.into_iter().enumerate() {
            let tag = Tag {
                file: 0,
                block: b as u32,
            };
            pool.descs[b].tag.store(tag.pack(), Ordering::Relaxed);
            pool.descs[b].state.store(state, Ordering::Relaxed);
            pool.map[tag.partition()]
                .lock()
                .insert(tag.pack(), b as u32);
        }
        pool.hit_pins[0][0].store(0, Ordering::SeqCst);
        pool.hit_pin_slots.store(1, Ordering::SeqCst);
        pool
    }

    /// The clock sweep does not see a hit pin in the refcount. Taken for a victim, a
    /// hit-pinned buffer is refused after the pin; taken on every lap while the free buffer's
    /// usage count came down one a lap, it used up `lookup_or_assign`'s refusals (one per
    /// buffer and one more) and the lookup failed as if the pool were all pinned — two
    /// threads streaming in a pool of four, about one full conformance run in eight.
    #[test]
    fn a_hit_pinned_buffer_is_no_victim_while_a_used_free_one_comes_down() {
        let pool = pool_with_a_hit_pin_beside_a_used_buffer();
        let wanted = Tag { file: 1, block: 0 };
        match pool.lookup_or_assign(wanted, None, None, false) {
            Ok(Lookup::Assigned(b)) => assert_eq!(b, 3, "the free buffer is the victim"),
            Ok(Lookup::Found(b)) => panic!("block found in buffer {b}, never read"),
            Err(e) => panic!("lookup failed with a buffer free: {e:?}"),
        }
        assert_eq!(
            pool.descs[0].state.load(Ordering::Relaxed) & REFCOUNT_MASK,
            0,
            "the hit-pinned buffer was left as it was"
        );
    }
}
