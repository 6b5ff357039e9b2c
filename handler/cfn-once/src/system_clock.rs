//! The real clock and the real seed, for production wiring.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cfn_once_core::clock::Clock;
use futures_util::future::BoxFuture;

/// Wall-clock time and tokio timers.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock before 1970 is a broken host; treating it as the epoch only delays leases.
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    fn sleep_ms(&self, duration_ms: u64) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(Duration::from_millis(duration_ms)))
    }
}

/// A seed that differs per process: std's per-process random hash keys mixed with the time.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(SystemClock.now_ms());
    hasher.write_u32(std::process::id());
    hasher.finish()
}
