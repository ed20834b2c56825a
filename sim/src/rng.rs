//! The simulator's one source of randomness: ChaCha8 seeded by the run's `u64` seed. Everything a
//! run decides (scenario, latencies, faults, workload, replicas' own jitter) draws from it in event
//! order, so the same seed and binary replay the same run byte for byte.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub struct SimRng(ChaCha8Rng);

/// Probabilities are in parts per million: integers, so nothing depends on float rounding.
pub const PPM: u32 = 1_000_000;

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng(ChaCha8Rng::seed_from_u64(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        // Lemire's multiply-shift: unbiased enough for simulation, and branch-free.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high);
        low + self.below(high - low + 1)
    }

    /// True with probability `ppm` / 1e6.
    pub fn chance(&mut self, ppm: u32) -> bool {
        ppm > 0 && self.below(PPM as u64) < ppm as u64
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}
