//! Randomness, injected and seedable.
//!
//! Jitter and owner nonces come from [`Random`], so a seeded run (tests, the simulator) is
//! reproducible. [`SplitMix64`] is a small, well-studied generator; it is not cryptographic and
//! is never used for anything secret.

use std::sync::atomic::{AtomicU64, Ordering};

/// A source of uniformly distributed 64-bit values.
pub trait Random: Send + Sync + std::fmt::Debug {
    /// The next value.
    fn next_u64(&self) -> u64;

    /// A value in `0..=max`, uniform enough for jitter.
    fn below_or_equal(&self, max: u64) -> u64 {
        if max == u64::MAX {
            return self.next_u64();
        }
        self.next_u64() % (max + 1)
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a counter passed through a mixing function. Lock-free;
/// from one thread the sequence is fully determined by the seed.
#[derive(Debug)]
pub struct SplitMix64 {
    state: AtomicU64,
}

impl SplitMix64 {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: AtomicU64::new(seed) }
    }
}

impl Random for SplitMix64 {
    fn next_u64(&self) -> u64 {
        let mut z = self.state.fetch_add(Self::GAMMA, Ordering::Relaxed).wrapping_add(Self::GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter"): a delay drawn uniformly
/// from `0..=min(cap, base * 2^attempt)`.
pub fn full_jitter_ms(random: &dyn Random, attempt: u32, base_ms: u64, cap_ms: u64) -> u64 {
    let ceiling = base_ms.saturating_mul(1u64.checked_shl(attempt.min(32)).unwrap_or(u64::MAX)).min(cap_ms);
    random.below_or_equal(ceiling)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let a = SplitMix64::new(42);
        let b = SplitMix64::new(42);
        let first: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let second: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        assert_eq!(first, second);
        assert_ne!(first[0], first[1]);
    }

    #[test]
    fn jitter_stays_within_the_cap() {
        let random = SplitMix64::new(7);
        for attempt in 0..40 {
            let delay = full_jitter_ms(&random, attempt, 100, 2_000);
            assert!(delay <= 2_000, "attempt {attempt} gave {delay}");
            assert!(delay <= 100u64.saturating_mul(1 << attempt.min(32)));
        }
    }
}
