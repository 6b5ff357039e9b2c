//! Which region is active: the port, and the cache with fallback every source sits behind.
//!
//! Sources (adapters in the `cfn-once` crate): an item in the lease table, flipped by the drill
//! (the default: strongly consistent, free), or an ARC routing control per region (opt-in).
//! Only a primary asks (a secondary's decisions do not depend on it, see `decision`). Answers
//! are cached for a few seconds; when the source fails, the last known answer stands, and
//! without one the configured fallback does.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use crate::clock::Clock;
use crate::decision::Activity;

/// The control source could not say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("active-region control unavailable: {0}")]
pub struct ControlError(pub String);

/// The port: is this region active?
#[async_trait]
pub trait ActivitySource: Send + Sync + std::fmt::Debug {
    async fn activity(&self) -> Result<Activity, ControlError>;
}

/// Always the same answer: single-region deployments and tests.
#[derive(Debug, Clone, Copy)]
pub struct FixedActivity(pub Activity);

#[async_trait]
impl ActivitySource for FixedActivity {
    async fn activity(&self) -> Result<Activity, ControlError> {
        Ok(self.0)
    }
}

/// A source behind a time-to-live cache, with fallback. Never fails.
#[derive(Debug)]
pub struct CachedActivity {
    source: Arc<dyn ActivitySource>,
    clock: Arc<dyn Clock>,
    ttl_ms: u64,
    fallback: Activity,
    last: Mutex<Option<(Activity, u64)>>,
}

impl CachedActivity {
    /// Caches `source` for `ttl_ms`; answers `fallback` if it has never answered.
    pub fn new(source: Arc<dyn ActivitySource>, clock: Arc<dyn Clock>, ttl_ms: u64, fallback: Activity) -> Self {
        Self { source, clock, ttl_ms, fallback, last: Mutex::new(None) }
    }
}

#[async_trait]
impl ActivitySource for CachedActivity {
    async fn activity(&self) -> Result<Activity, ControlError> {
        let now_ms = self.clock.now_ms();
        let last = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((activity, at_ms)) = last
            && now_ms.saturating_sub(at_ms) < self.ttl_ms
        {
            return Ok(activity);
        }
        match self.source.activity().await {
            Ok(activity) => {
                *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((activity, now_ms));
                Ok(activity)
            }
            Err(error) => {
                let fallback = last.map_or(self.fallback, |(activity, _)| activity);
                tracing::warn!(%error, ?fallback, "active-region control failed; using the last known or configured answer");
                Ok(fallback)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[derive(Debug, Default)]
    struct Scripted {
        answers: Mutex<VecDeque<Result<Activity, ControlError>>>,
        calls: AtomicU32,
    }

    #[async_trait]
    impl ActivitySource for Scripted {
        async fn activity(&self) -> Result<Activity, ControlError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.answers.lock().expect("lock").pop_front().unwrap_or(Err(ControlError("script ended".into())))
        }
    }

    #[tokio::test]
    async fn caches_then_refreshes_then_falls_back() {
        let clock = ManualClock::new(0);
        let source = Arc::new(Scripted::default());
        source.answers.lock().expect("lock").extend([
            Ok(Activity::Standby),
            Err(ControlError("throttled".into())),
            Ok(Activity::Active),
        ]);
        let cached = CachedActivity::new(source.clone(), Arc::new(clock.clone()), 5_000, Activity::Active);
        assert_eq!(cached.activity().await, Ok(Activity::Standby));
        clock.advance_ms(4_999);
        assert_eq!(cached.activity().await, Ok(Activity::Standby), "cached");
        assert_eq!(source.calls.load(Ordering::SeqCst), 1);
        clock.advance_ms(1);
        assert_eq!(cached.activity().await, Ok(Activity::Standby), "the source failed: the last known answer stands");
        assert_eq!(cached.activity().await, Ok(Activity::Active), "a failure is not cached");
        assert_eq!(source.calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn without_any_answer_the_fallback_stands() {
        let cached =
            CachedActivity::new(Arc::new(Scripted::default()), Arc::new(ManualClock::new(0)), 1_000, Activity::Active);
        assert_eq!(cached.activity().await, Ok(Activity::Active));
    }
}
