//! A board of recent wait references (and tickets) that threads publish and pick from: how
//! scenario threads find each other's I/Os to wait on.

use dbaio::{Ticket, WaitRef};
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

    pub fn hand_over(&self, t: Ticket) {
        self.tickets.lock().unwrap().push_back(t);
    }

    pub fn take_ticket(&self) -> Option<Ticket> {
        self.tickets.lock().unwrap().pop_front()
    }
}
