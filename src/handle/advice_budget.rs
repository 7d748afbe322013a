//! The readahead-advice budget: one counter per device (`st_dev` of the files: two disks do
//! not share a queue) of blocks that read streams have advised (`posix_fadvise(WILLNEED)`)
//! and not yet read, shared by every issuer and capped by `io_advice_budget`.
//!
//! A stream takes a block's worth before it advises the block and gives it back when it
//! reads the block (or drops it unread); when the budget is spent the stream reads without
//! advice — it never waits for budget. Taking and giving back are compare-and-swap and
//! fetch-sub on a fixed table: no lock, no allocation. The table has [`MAX_DEVICES`]
//! entries, each taken by the first file seen on its device; a device beyond them gets no
//! budget (its streams read without advice). See `docs/design.md`, "Readahead advice".

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What happened to the readahead advice of an issuer's read streams (`bufmgr/advice.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AdviceEvent {
    /// Blocks advised (`posix_fadvise(WILLNEED)` sent).
    Issued = 0,
    /// Blocks not advised because they continue a sequential run (kernel readahead's job).
    SuppressedSequential = 1,
    /// Blocks not advised because the device's budget was spent.
    RefusedByBudget = 2,
    /// Advised blocks found in the page cache when read.
    Useful = 3,
    /// Advised blocks not in the page cache when read (too late, or evicted).
    Wasted = 4,
}

/// How many kinds of [`AdviceEvent`] there are.
pub(crate) const ADVICE_EVENTS: usize = 5;

/// Devices the table tracks.
pub(crate) const MAX_DEVICES: usize = 32;

struct DeviceBudget {
    /// The device id plus one; 0: the entry is free.
    dev: AtomicU64,
    in_use: AtomicU32,
    /// The most in use at once since start.
    peak: AtomicU32,
}

/// What the view shows of one device's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceBudgetRow {
    pub dev: u64,
    pub in_use: u32,
    pub peak: u32,
    pub limit: u32,
}

pub(crate) struct AdviceBudget {
    limit: u32,
    devices: [DeviceBudget; MAX_DEVICES],
}

impl AdviceBudget {
    pub(crate) fn new(limit: u32) -> AdviceBudget {
        AdviceBudget {
            limit,
            devices: std::array::from_fn(|_| DeviceBudget {
                dev: AtomicU64::new(0),
                in_use: AtomicU32::new(0),
                peak: AtomicU32::new(0),
            }),
        }
    }

    /// The cap per device, in blocks (0: advice is off).
    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    /// The table entry of device `dev`, taking a free one the first time; `None` if the
    /// table is full.
    pub(crate) fn device(&self, dev: u64) -> Option<u32> {
        let key = dev.wrapping_add(1).max(1);
        for (i, d) in self.devices.iter().enumerate() {
            let cur = d.dev.load(Ordering::Acquire);
            if cur == key {
                return Some(i as u32);
            }
            if cur == 0 {
                match d
                    .dev
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Some(i as u32),
                    Err(now) if now == key => return Some(i as u32),
                    Err(_) => continue,
                }
            }
        }
        None
    }

    /// Takes `n` blocks of device entry `d`'s budget, all or none.
    pub(crate) fn try_take(&self, d: u32, n: u32) -> bool {
        let e = &self.devices[d as usize];
        let mut cur = e.in_use.load(Ordering::Relaxed);
        loop {
            let want = match cur.checked_add(n) {
                Some(w) if w <= self.limit => w,
                _ => return false,
            };
            match e
                .in_use
                .compare_exchange_weak(cur, want, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    e.peak.fetch_max(want, Ordering::Relaxed);
                    return true;
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Gives back `n` blocks taken from device entry `d`.
    pub(crate) fn give_back(&self, d: u32, n: u32) {
        let before = self.devices[d as usize]
            .in_use
            .fetch_sub(n, Ordering::AcqRel);
        debug_assert!(before >= n, "advice budget given back more than taken");
    }

    /// Every device seen so far, with its budget in use.
    pub(crate) fn rows(&self) -> Vec<DeviceBudgetRow> {
        self.devices
            .iter()
            .filter_map(|d| {
                let key = d.dev.load(Ordering::Acquire);
                (key != 0).then(|| DeviceBudgetRow {
                    dev: key - 1,
                    in_use: d.in_use.load(Ordering::Relaxed),
                    peak: d.peak.load(Ordering::Relaxed),
                    limit: self.limit,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_all_or_nothing_and_never_past_the_limit() {
        let b = AdviceBudget::new(10);
        let d = b.device(7).unwrap();
        assert_eq!(b.device(7), Some(d), "one entry per device");
        assert!(b.try_take(d, 6));
        assert!(!b.try_take(d, 5), "6 + 5 > 10: refused whole");
        assert!(b.try_take(d, 4));
        assert!(!b.try_take(d, 1));
        b.give_back(d, 10);
        assert_eq!(b.rows()[0].in_use, 0);
        assert_eq!(b.rows()[0].peak, 10);
        let other = b.device(8).unwrap();
        assert_ne!(other, d, "two devices, two budgets");
        assert!(b.try_take(other, 10));
    }

    #[test]
    fn a_full_table_gives_no_budget() {
        let b = AdviceBudget::new(10);
        for dev in 0..MAX_DEVICES as u64 {
            assert!(b.device(dev).is_some());
        }
        assert_eq!(b.device(MAX_DEVICES as u64), None);
    }
}
