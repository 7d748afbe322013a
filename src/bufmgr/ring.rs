//! Buffer access strategy rings (PostgreSQL's `BAS_BULKREAD`): a big scan recycles a small
//! ring of buffers instead of taking victims from the whole pool, so it leaves the pool's
//! other pages cached. The ring is at most an eighth of the pool, and the stream using it
//! pins fewer buffers than the ring holds. See `docs/design.md`, "The buffer manager".

/// An empty ring slot.
const NO_BUFFER: u32 = u32::MAX;

/// Slots beyond the stream's pins, for buffers to age before they come round again
/// (PostgreSQL's 256 kB of 8 kB blocks).
const AGING_SLOTS: u32 = 32;

/// Ring slots a stream's own pins must leave: the buffer being handed out (still pinned while
/// the stream looks ahead) and the oldest one, the next to reuse. With fewer, the slot to
/// reuse is one the stream pins, and the clock sweep supplies every buffer instead.
const SLACK: u32 = 2;

/// The ring for a stream that would pin `pins` buffers, in a pool of `pool`: the pins plus
/// `AGING_SLOTS`, capped at an eighth of the pool (PostgreSQL's cap in
/// `GetAccessStrategyWithSize`), so that the scan leaves the rest of a small pool alone too,
/// but never less than one pin and the slack, which a stream needs to go on from its ring.
pub(crate) fn ring_len(pool: u32, pins: u32) -> u32 {
    pins.saturating_add(AGING_SLOTS)
        .min(pool / 8)
        .max(1 + SLACK)
}

/// The most buffers a stream recycling a ring of `ring_len` may pin (PostgreSQL's
/// `GetAccessStrategyPinLimit`): the ring less the slack, so the slot to reuse is never one of
/// the stream's own.
pub(crate) fn pin_limit(ring_len: u32) -> u32 {
    ring_len.saturating_sub(SLACK).max(1)
}

/// A buffer access strategy ring (PostgreSQL's `BAS_BULKREAD`): the buffers a big scan
/// recycles, in order, instead of taking victims from the whole pool, so the scan leaves the
/// rest of the pool's pages where they are. A slot's buffer is reused when nobody pins it and
/// it was used at most once since (usage count ≤ 1); otherwise the clock sweep supplies one
/// and it takes the slot.
pub(crate) struct BufferRing {
    bufs: Box<[u32]>,
    next: usize,
}

impl BufferRing {
    /// A ring of `len` slots (see `ring_len`).
    pub(crate) fn new(len: u32) -> BufferRing {
        BufferRing {
            bufs: vec![NO_BUFFER; len.max(1) as usize].into_boxed_slice(),
            next: 0,
        }
    }

    /// The buffer in the current slot, if it has one.
    pub(super) fn candidate(&self) -> Option<u32> {
        let b = self.bufs[self.next];
        (b != NO_BUFFER).then_some(b)
    }

    /// Puts `b` in the current slot and moves on.
    pub(super) fn record(&mut self, b: u32) {
        self.bufs[self.next] = b;
        self.next = (self.next + 1) % self.bufs.len();
    }
}
