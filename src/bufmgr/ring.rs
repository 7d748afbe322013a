//! Buffer access strategy rings (PostgreSQL's `BAS_BULKREAD`): a big scan recycles a small
//! ring of buffers instead of taking victims from the whole pool, so it leaves the pool's
//! other pages cached. See `docs/design.md`, "The buffer manager".

/// An empty ring slot.
const NO_BUFFER: u32 = u32::MAX;

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
