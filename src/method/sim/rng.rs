//! The simulated disk's seeded draws: SplitMix64, small and stable across platforms and
//! versions, so a seed replays the same run wherever it runs.

/// A seeded generator (SplitMix64).
#[derive(Clone, Debug)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A number in `0.0..1.0`.
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p` (0 never draws: a fault that is off costs nothing and
    /// changes no later draw).
    pub(super) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}
