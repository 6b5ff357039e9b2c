//! Which region is active: the port, and the cache with fallback every source sits behind.
//!
//! Sources (adapters in the `cfn-once` crate): an item in the lease table, flipped by the drill
//! (the default: strongly consistent, free), or an ARC routing control per region (opt-in).
//! Only a primary asks (a secondary's decisions do not depend on it, see `decision`). Answers
//! are cached for a few seconds; when the source fails, the last known answer stands, and
//! without one the configured fallback does. The cache is single-flight: the records of a batch
//! all ask at once, and one of them reads the source while the others wait for its answer, so a
//! warm Lambda reads the source at most once per time-to-live.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use crate::clock::{Clock, within};
use crate::decision::Activity;

/// The control source could not say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("active-region control unavailable: {0}")]
pub struct ControlError(pub String);

/// The port: is this region active?
#[async_trait]
pub trait ActivitySource: Send + Sync + std::fmt::Debug {
    /// Whether this region is active right now; an error when the source could not say.
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
    /// Held by the one caller reading the source; the others wait on it.
    refresh: futures_util::lock::Mutex<()>,
    /// Source reads finished so far: a waiter that sees it move knows a read finished after it
    /// asked, and takes that read's outcome instead of reading again.
    reads: AtomicU64,
}

impl CachedActivity {
    /// Caches `source` for `ttl_ms`; answers `fallback` if it has never answered.
    pub fn new(source: Arc<dyn ActivitySource>, clock: Arc<dyn Clock>, ttl_ms: u64, fallback: Activity) -> Self {
        Self {
            source,
            clock,
            ttl_ms,
            fallback,
            last: Mutex::new(None),
            refresh: futures_util::lock::Mutex::new(()),
            reads: AtomicU64::new(0),
        }
    }

    fn last(&self) -> Option<(Activity, u64)> {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached answer, if still fresh at `now_ms`.
    fn fresh(&self, now_ms: u64) -> Option<Activity> {
        self.last().filter(|(_, at_ms)| now_ms.saturating_sub(*at_ms) < self.ttl_ms).map(|(activity, _)| activity)
    }

    /// The answer when the source cannot give one: the last known, else the fallback.
    fn stale_or_fallback(&self) -> Activity {
        self.last().map_or(self.fallback, |(activity, _)| activity)
    }

    /// The answer within `timeout_ms`. A source that answers later than that has failed, and is
    /// treated as one that failed: the last known answer stands, else the fallback. (A drained
    /// primary whose slow control made it act as active would start work it must leave.)
    pub async fn activity_within(&self, timeout_ms: u64) -> Activity {
        match within(self.clock.as_ref(), timeout_ms, self.activity()).await {
            Some(Ok(activity)) => activity,
            Some(Err(_)) | None => {
                let fallback = self.stale_or_fallback();
                tracing::warn!(
                    timeout_ms,
                    ?fallback,
                    "no answer from the active-region control in time; using the last known or configured answer"
                );
                fallback
            }
        }
    }
}

#[async_trait]
impl ActivitySource for CachedActivity {
    async fn activity(&self) -> Result<Activity, ControlError> {
        if let Some(activity) = self.fresh(self.clock.now_ms()) {
            return Ok(activity);
        }
        let reads_before = self.reads.load(Ordering::SeqCst);
        let _reading = self.refresh.lock().await;
        if self.reads.load(Ordering::SeqCst) != reads_before {
            // Another caller read the source while this one waited: its answer is fresh, or it
            // failed and the stale answer or the fallback stands for this caller too.
            return Ok(self.fresh(self.clock.now_ms()).unwrap_or_else(|| self.stale_or_fallback()));
        }
        let now_ms = self.clock.now_ms();
        let answer = self.source.activity().await;
        self.reads.fetch_add(1, Ordering::SeqCst);
        match answer {
            Ok(activity) => {
                *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((activity, now_ms));
                Ok(activity)
            }
            Err(error) => {
                let fallback = self.stale_or_fallback();
                tracing::warn!(%error, ?fallback, "active-region control failed; using the last known or configured answer");
                Ok(fallback)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::doubles::drive;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[derive(Debug, Default)]
    struct Scripted {
        answers: Mutex<VecDeque<Result<Activity, ControlError>>>,
        calls: AtomicU32,
        /// Each read takes this long on the clock, so that concurrent callers pile up.
        latency: Option<(ManualClock, u64)>,
    }

    #[async_trait]
    impl ActivitySource for Scripted {
        async fn activity(&self) -> Result<Activity, ControlError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if let Some((clock, latency_ms)) = &self.latency {
                clock.sleep_ms(*latency_ms).await;
            }
            self.answers.lock().expect("lock").pop_front().unwrap_or(Err(ControlError("script ended".into())))
        }
    }

    /// A batch of ten records asks a cold cache at once.
    fn ten_at_once(answers: Vec<Result<Activity, ControlError>>) -> (Vec<Activity>, u32) {
        let clock = ManualClock::new(0);
        let source = Arc::new(Scripted { latency: Some((clock.clone(), 30)), ..Scripted::default() });
        source.answers.lock().expect("lock").extend(answers);
        let cached = CachedActivity::new(source.clone(), Arc::new(clock.clone()), 5_000, Activity::Active);
        let batch = futures_util::future::join_all((0..10).map(|_| cached.activity()));
        let answers = drive(&clock, batch).into_iter().map(|answer| answer.expect("never fails")).collect();
        (answers, source.calls.load(Ordering::SeqCst))
    }

    #[test]
    fn a_batch_on_a_cold_cache_reads_the_source_once() {
        let (answers, calls) = ten_at_once(vec![Ok(Activity::Standby), Ok(Activity::Active)]);
        assert_eq!(answers, vec![Activity::Standby; 10]);
        assert_eq!(calls, 1, "one read per time-to-live, however many records ask at once");
    }

    #[test]
    fn a_failed_read_is_shared_too() {
        let (answers, calls) = ten_at_once(vec![Err(ControlError("throttled".into())), Ok(Activity::Standby)]);
        assert_eq!(answers, vec![Activity::Active; 10], "the fallback, for every waiter");
        assert_eq!(calls, 1, "waiters do not each retry a failed read");
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
