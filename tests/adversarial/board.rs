//! A board of recent wait references (and tickets) that threads publish and pick from: how
//! scenario threads find each other's I/Os to wait on.
//! Guards against: scenarios that only ever wait on I/Os long finished, and so never meet the race
//! between a foreign waiter and the thread completing the I/O: the board hands out the newest
//! references, most likely still in flight, now and then one several threads wait on at once, or an
//! older one whose handle may have been reused since; and it carries tickets to threads other than
//! the one that made them.

use crate::harness::Rng;
use dbaio::{File, InFlight, IoBuf, Issuer, Ticket, WaitRef};
use std::collections::VecDeque;
use std::sync::Mutex;

/// The last few hundred wait references published, and tickets handed over.
#[derive(Default)]
pub struct Board {
    refs: Mutex<VecDeque<WaitRef>>,
    tickets: Mutex<VecDeque<Ticket>>,
}

const KEEP: usize = 256;

impl Board {
    pub fn publish(&self, w: WaitRef) {
        let mut q = self.refs.lock().unwrap();
        if q.len() == KEEP {
            q.pop_front();
        }
        q.push_back(w);
    }

    /// The newest reference, or the one `pick` positions back (wrapping).
    pub fn pick(&self, pick: u64) -> Option<WaitRef> {
        let q = self.refs.lock().unwrap();
        if q.is_empty() {
            return None;
        }
        let k = q.len() - 1 - (pick as usize % q.len().min(8));
        Some(q[k])
    }

    /// A reference to wait on: usually the newest, taken off the board (so the next one
    /// waited for is fresh: most likely still in flight), now and then one left on it (so
    /// several threads wait on the same I/O).
    pub fn next(&self, roll: u64) -> Option<WaitRef> {
        if roll % 4 == 0 {
            return self.pick(roll >> 2);
        }
        self.refs.lock().unwrap().pop_back()
    }

    pub fn hand_over(&self, t: Ticket) {
        self.tickets.lock().unwrap().push_back(t);
    }

    pub fn take_ticket(&self) -> Option<Ticket> {
        self.tickets.lock().unwrap().pop_front()
    }
}

impl Board {
    /// Starts `1..=max` 4 KiB reads at random pages of `f`'s first `len` bytes, publishing
    /// each one's wait reference here at once (so others may wait on it before its issuer
    /// does); returns them with their offsets.
    pub fn start_reads<'a>(
        &self,
        rng: &mut Rng,
        me: &'a Issuer,
        f: &File,
        len: u64,
        max: u64,
    ) -> Vec<(u64, InFlight<'a>)> {
        (0..1 + rng.below(max))
            .map(|_| {
                let off = rng.below(len / 4096) * 4096;
                let io = me.acquire().unwrap().read(f, off, IoBuf::new(4096));
                self.publish(io.wait_ref());
                (off, io)
            })
            .collect()
    }
}
