//! Which region is active: the port, and the cache with fallback every source sits behind.
//!
//! Sources (adapters in the `cfn-once` crate): an item in the lease table, flipped by the drill
//! (the default: strongly consistent, free), or an ARC routing control per region (opt-in).
//! Only a primary asks (a secondary's decisions do not depend on it, see `decision`). Answers
//! are cached for a few seconds; when the source fails, the last known answer stands, and
//! without one the configured fallback does. The cache is single-flight: the records of a batch
//! all ask at once, and one of them reads the source while the others wait for its answer, so a
//! warm Lambda reads the source at most once per time-to-live.
//!
//! Off the requests' critical path: a new process's first record reads the control beside its
//! acquire (the worker's `process`), and [`CachedActivity::keep_fresh`] renews the answer from
//! then on in the background, three quarters into its time-to-live, so a record that arrives
//! while the process runs finds a fresh answer and waits for no read. The init reads nothing:
//! its time is the cold start's, which the first record's read does not lengthen. Renewing early
//! never lets an answer older than the time-to-live count: a process Lambda froze for longer
//! than that thaws with a stale answer and reads before deciding, as without renewal, so a
//! drill's settle time (the time-to-live) is unchanged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use crate::clock::{Clock, within};

/// The format of the active-region control item this version writes and reads: 1 for an item
/// without one (`active_region`, `updated_ms`, `updated_by`, as the revisions before 0.1.0 wrote it), 2 for the
/// same fields with `format`. An item of a newer format is not read (the last known answer
/// stands, as for any failed read) and not overwritten (the drill refuses to flip it).
pub const CONTROL_FORMAT: u32 = 2;

/// Whether this region is the one told to do the work right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// This region starts new work.
    Active,
    /// Another region is active; only a primary's decisions change because of it.
    Standby,
}

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
    /// When the read in flight began, epoch ms (0: none): a caller counts a read's time from
    /// its start, so a read already slower than the caller's timeout is one that failed, and
    /// the caller does not wait a whole timeout more behind it.
    reading_since_ms: AtomicU64,
}

/// Clears [`CachedActivity::reading_since_ms`] when the read ends, or is dropped by a caller
/// that gave up on it.
struct ReadInFlight<'a>(&'a AtomicU64);

impl Drop for ReadInFlight<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::SeqCst);
    }
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
            reading_since_ms: AtomicU64::new(0),
        }
    }

    fn last(&self) -> Option<(Activity, u64)> {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached answer, if still fresh at `now_ms`.
    fn fresh(&self, now_ms: u64) -> Option<Activity> {
        self.last().filter(|(_, at_ms)| now_ms.saturating_sub(*at_ms) < self.ttl_ms).map(|(activity, _)| activity)
    }

    /// The cached answer, if still fresh now: what a record may act on without asking.
    pub fn fresh_now(&self) -> Option<Activity> {
        self.fresh(self.clock.now_ms())
    }

    /// The answer when the source cannot give one: the last known, else the fallback.
    fn stale_or_fallback(&self) -> Activity {
        self.last().map_or(self.fallback, |(activity, _)| activity)
    }

    /// Reads the source now, within `timeout_ms` (a renewal; the records after it find a fresh
    /// answer). A failed read leaves the cache as it was.
    pub async fn warm_up(&self, timeout_ms: u64) -> Activity {
        let reads_before = self.reads.load(Ordering::SeqCst);
        match within(self.clock.as_ref(), timeout_ms, self.read_source(reads_before)).await {
            Some(activity) => activity,
            None => {
                tracing::warn!(timeout_ms, "no answer from the active-region control in time; the next record asks it");
                self.stale_or_fallback()
            }
        }
    }

    /// Renews the answer before it goes stale, for as long as it runs (spawn it): three
    /// quarters into the time-to-live of the last answer, each read within `timeout_ms`, a
    /// failed one tried again a quarter of the time-to-live later. Until the source has
    /// answered once (the first record asks it), it only looks every quarter of the
    /// time-to-live whether it has. Never returns.
    pub async fn keep_fresh(&self, timeout_ms: u64) {
        let quarter_ms = (self.ttl_ms / 4).max(1);
        let mut tried_ms = 0;
        loop {
            let Some((_, at_ms)) = self.last() else {
                let now_ms = self.clock.now_ms();
                crate::clock::sleep_until_ms(self.clock.as_ref(), now_ms + quarter_ms).await;
                continue;
            };
            let renew_at_ms = (at_ms + 3 * quarter_ms).max(tried_ms + quarter_ms);
            crate::clock::sleep_until_ms(self.clock.as_ref(), renew_at_ms).await;
            tried_ms = self.clock.now_ms();
            self.warm_up(timeout_ms).await;
        }
    }

    /// The answer within `timeout_ms`. A source that answers later than that has failed, and is
    /// treated as one that failed: the last known answer stands, else the fallback. (A drained
    /// primary whose slow control made it act as active would start work it must leave.)
    /// A read already in flight counts from its start: once it has taken `timeout_ms`, the
    /// answer is given at once, without waiting behind it.
    pub async fn activity_within(&self, timeout_ms: u64) -> Activity {
        let since_ms = self.reading_since_ms.load(Ordering::SeqCst);
        let in_flight_ms = if since_ms == 0 { 0 } else { self.clock.now_ms().saturating_sub(since_ms) };
        let timeout_ms = match self.fresh_now() {
            Some(_) => timeout_ms,
            None => timeout_ms.saturating_sub(in_flight_ms),
        };
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
        Ok(self.read_source(reads_before).await)
    }
}

impl CachedActivity {
    /// One read of the source, single-flight: a caller that finds that a read finished after
    /// `reads_before` takes its outcome instead of reading again.
    async fn read_source(&self, reads_before: u64) -> Activity {
        let _reading = self.refresh.lock().await;
        if self.reads.load(Ordering::SeqCst) != reads_before {
            // Another caller read the source while this one waited: its answer is fresh, or it
            // failed and the stale answer or the fallback stands for this caller too.
            return self.fresh(self.clock.now_ms()).unwrap_or_else(|| self.stale_or_fallback());
        }
        let now_ms = self.clock.now_ms();
        self.reading_since_ms.store(now_ms.max(1), Ordering::SeqCst);
        let _in_flight = ReadInFlight(&self.reading_since_ms);
        let answer = self.source.activity().await;
        self.reads.fetch_add(1, Ordering::SeqCst);
        match answer {
            Ok(activity) => {
                *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((activity, now_ms));
                activity
            }
            Err(error) => {
                let fallback = self.stale_or_fallback();
                tracing::warn!(%error, ?fallback, "active-region control failed; using the last known or configured answer");
                fallback
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

    /// A read whose caller stopped (a frozen execution, in the simulator) still holds the
    /// single flight: the next caller counts its time from the read's start, and once that is
    /// past its timeout answers at once with the last known answer, rather than wait a whole
    /// timeout more behind it.
    #[test]
    fn a_read_slower_than_the_timeout_is_not_waited_for_again() {
        let clock = ManualClock::new(0);
        let source = Arc::new(Scripted { latency: Some((clock.clone(), 60_000)), ..Scripted::default() });
        source.answers.lock().expect("lock").extend([Ok(Activity::Standby)]);
        let cached = CachedActivity::new(source.clone(), Arc::new(clock.clone()), 5_000, Activity::Active);
        let mut stalled = Box::pin(cached.activity_within(3_000));
        let waker = futures_util::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(stalled.as_mut().poll(&mut cx).is_pending(), "the read is in flight, its caller stalled");
        clock.advance_ms(4_000);
        let started_ms = clock.now_ms();
        assert_eq!(drive(&clock, cached.activity_within(3_000)), Activity::Active, "the fallback");
        assert_eq!(clock.now_ms(), started_ms, "answered at once: the read in flight took 4 s already");
        // A read in flight for less than the timeout is waited for what is left of it only.
        drop(stalled);
        let mut stalled = Box::pin(cached.activity_within(3_000));
        assert!(stalled.as_mut().poll(&mut cx).is_pending());
        clock.advance_ms(2_000);
        let started_ms = clock.now_ms();
        assert_eq!(drive(&clock, cached.activity_within(3_000)), Activity::Active);
        assert_eq!(clock.now_ms() - started_ms, 1_000, "the second left of the read's 3 s");
        assert_eq!(source.calls.load(Ordering::SeqCst), 2);
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

    #[test]
    fn the_first_record_asks_and_renewal_keeps_every_later_one_from_waiting() {
        let clock = ManualClock::new(0);
        let source = Arc::new(Scripted { latency: Some((clock.clone(), 30)), ..Scripted::default() });
        source.answers.lock().expect("lock").extend([
            Ok(Activity::Active),
            Ok(Activity::Active),
            Ok(Activity::Standby),
        ]);
        let cached = Arc::new(CachedActivity::new(source.clone(), Arc::new(clock.clone()), 4_000, Activity::Active));
        // The renewer runs beside the records from the start, as the function spawns it; the
        // init reads nothing.
        let renewer = Arc::clone(&cached);
        let records = async {
            let mut seen = Vec::new();
            for _ in 0..8 {
                let asked = clock.now_ms();
                seen.push((cached.activity().await.expect("never fails"), clock.now_ms() - asked));
                clock.sleep_ms(1_000).await;
            }
            seen
        };
        let seen = drive(&clock, async {
            futures_util::pin_mut!(records);
            let renewing = renewer.keep_fresh(1_000);
            futures_util::pin_mut!(renewing);
            match futures_util::future::select(records, renewing).await {
                futures_util::future::Either::Left((seen, _)) => seen,
                futures_util::future::Either::Right(_) => unreachable!("keep_fresh never returns"),
            }
        });
        // The first record asked (the worker sends its acquire beside that read); no later one
        // waited: renewed at 3 s and at 6 s from the first answer, so the last records see the flip.
        let waits: Vec<u64> = seen.iter().map(|(_, waited_ms)| *waited_ms).collect();
        assert_eq!(waits, [30, 0, 0, 0, 0, 0, 0, 0], "{seen:?}");
        assert_eq!(source.calls.load(Ordering::SeqCst), 3);
        assert_eq!(seen[0].0, Activity::Active);
        assert_eq!(seen[7].0, Activity::Standby, "{seen:?}");
    }

    #[test]
    fn an_answer_older_than_its_time_to_live_is_never_used_after_a_freeze() {
        let clock = ManualClock::new(0);
        let source = Arc::new(Scripted::default());
        source.answers.lock().expect("lock").extend([Ok(Activity::Active), Ok(Activity::Standby)]);
        let cached = CachedActivity::new(source.clone(), Arc::new(clock.clone()), 4_000, Activity::Active);
        assert_eq!(drive(&clock, cached.warm_up(1_000)), Activity::Active);
        // Frozen for a minute (nothing ran, not even the renewer): the record reads first.
        clock.advance_ms(60_000);
        assert_eq!(drive(&clock, cached.activity()), Ok(Activity::Standby));
        assert_eq!(source.calls.load(Ordering::SeqCst), 2);
    }
}
