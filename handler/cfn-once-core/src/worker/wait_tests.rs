//! Providers that answer in progress: the wait stored under the fence, the lease released,
//! polls in either region, takeovers mid-poll, stale pollers fenced out, and the deadline.

use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::lease::PollRecord;
use crate::provider::{Provider, ProviderError, Step};

/// Delivers `body` to `worker` as receive `receive_count` of a request sent at `sent_ms`.
pub(super) fn deliver(h: &Harness, worker: &Worker, body: &str, sent_ms: u64, receive_count: u32) -> Disposition {
    let invocation = h.invocation(900_000);
    let delivery = QueueRecord { body: Some(body), receive_count, sent_ms: Some(sent_ms) };
    drive(&h.clock, worker.handle(delivery, &invocation))
}

/// Follows one message through its waits: each `Retry` moves the clock by its delay and
/// delivers again, to `worker_for(receive)`, until the message is done. Returns the receives.
fn follow(h: &Harness, worker_for: impl Fn(u32) -> Worker, body: &str, sent_ms: u64) -> (Disposition, u32) {
    follow_from(h, worker_for, body, sent_ms, 1)
}

/// [`follow`], from receive `first` on.
pub(super) fn follow_from(
    h: &Harness,
    worker_for: impl Fn(u32) -> Worker,
    body: &str,
    sent_ms: u64,
    first: u32,
) -> (Disposition, u32) {
    for receive in first..=1_000 {
        match deliver(h, &worker_for(receive), body, sent_ms, receive) {
            Disposition::Retry { delay_s, .. } => h.clock.advance_ms(u64::from(delay_s) * 1000),
            done => return (done, receive),
        }
    }
    panic!("still not done after 1000 receives")
}

fn waiting_record(h: &Harness) -> PollRecord {
    let record = h.record();
    assert_eq!(record.state, LeaseState::Waiting, "{record:?}");
    record.poll.expect("a waiting record carries its poll")
}

#[test]
fn a_long_running_create_is_polled_until_done_and_answered_once() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let body = echo_create(json!({"InProgressForS": "20", "PollIntervalS": "5", "Size": "3"}));
    let sent_ms = h.clock.now_ms();

    let first = deliver(&h, &worker, &body, sent_ms, 1);
    assert!(matches!(&first, Disposition::Retry { delay_s: 5, .. }), "{first:?}");
    let poll = waiting_record(&h);
    assert_eq!((poll.polls, poll.poll_at_ms, poll.waiting_since_ms), (0, sent_ms + 5_000, sent_ms));
    assert!(h.record().lease_until_ms <= h.clock.now_ms(), "nobody holds the lease while waiting");
    assert!(h.sink.all().is_empty(), "nothing is answered while in progress");

    h.clock.advance_ms(5_000);
    let (done, receives) = follow(&h, |_| h.worker("us-east-1"), &body, sent_ms);
    let (fence, status) = answered(&done);
    assert_eq!(status, Status::Success);
    let answer = h.bodies(URL);
    assert_eq!(answer.len(), 1, "one answer");
    assert_eq!(answer[0].data["Size"], json!("3"));
    assert_eq!(answer[0].data["Polls"], json!("4"), "polls at 5, 10, 15 and 20 s");
    assert_eq!(receives, 4);
    assert_eq!(fence, 5, "one fence for the create and one for each poll");
    assert!(h.clock.now_ms() - sent_ms >= 20_000);
    // Per poll: one acquire and one wait; the last poll commits instead and marks delivered.
    let calls =
        [Op::Acquire, Op::Wait, Op::Commit, Op::MarkDelivered, Op::Heartbeat, Op::Read].map(|op| h.store.calls(op));
    assert_eq!(calls, [5, 4, 1, 1, 0, 0], "acquire, wait, commit, mark delivered, heartbeat, read");
    assert!(h.record().poll.is_none(), "the commit clears the work in progress");
    // A duplicate afterwards is dropped.
    assert_eq!(deliver(&h, &worker, &body, sent_ms, 9), Disposition::Done(Done::Duplicate));
}

#[test]
fn a_wait_started_in_the_primary_is_finished_by_the_secondary() {
    let h = Harness::new();
    let body = echo_create(json!({"InProgressForS": "30", "PollIntervalS": "10"}));
    let sent_ms = h.clock.now_ms();
    assert!(matches!(deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 1), Disposition::Retry { .. }));
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);

    // The poll is due, but the secondary leaves it to the primary for its lag.
    h.clock.advance_ms(10_000);
    let early = deliver(&h, &secondary, &body, sent_ms, 1);
    let lag_s = secondary.settings().poll_lag_ms().div_ceil(1000) as u32;
    assert!(matches!(&early, Disposition::Retry { delay_s, .. } if *delay_s >= lag_s), "{early:?}");
    assert_eq!(h.record().fence, 1, "no lease taken");

    // The primary is gone: the secondary takes each poll after its lag and finishes the wait.
    let (done, _) = follow(&h, |_| h.worker_as("us-west-2", Role::Secondary, Activity::Standby), &body, sent_ms);
    assert_eq!(answered(&done).1, Status::Success);
    assert!(h.record().owner.starts_with("us-west-2/"), "{:?}", h.record());
    // Polls at 10 s and 30 s after the create, each taken after the secondary's lag; the
    // second finds the 30 s passed.
    assert_eq!(h.bodies(URL)[0].data["Polls"], json!("2"));
}

#[test]
fn a_drained_primary_leaves_a_wait_to_the_secondary() {
    let h = Harness::new();
    let body = echo_create(json!({"InProgressForS": "10"}));
    let sent_ms = h.clock.now_ms();
    assert!(matches!(deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 1), Disposition::Retry { .. }));
    h.clock.advance_ms(60_000);
    let drained = h.drained_primary("us-east-1");
    let left = deliver(&h, &drained, &body, sent_ms, 2);
    assert!(matches!(&left, Disposition::Retry { why, .. } if why.contains("standby")), "{left:?}");
    assert_eq!((h.record().fence, h.record().state), (1, LeaseState::Waiting));
}

#[test]
fn a_drained_primary_without_an_answer_gives_a_due_poll_back_as_it_was() {
    let h = Harness::new();
    let body = echo_create(json!({"InProgressForS": "10"}));
    let sent_ms = h.clock.now_ms();
    assert!(matches!(deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 1), Disposition::Retry { .. }));
    let waiting = h.record();
    h.clock.advance_ms(60_000);
    // The poll is due; a new process of the drained primary takes it while asking the control,
    // and gives it back: the wait as stored, under the next fence.
    let drained = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    let left = deliver(&h, &drained, &body, sent_ms, 2);
    assert!(matches!(&left, Disposition::Retry { why, .. } if why.contains("standby")), "{left:?}");
    assert_eq!(h.record(), LeaseRecord { fence: 2, ..waiting.clone() }, "the wait is restored exactly");
    // The secondary polls with the stored state and finishes it.
    let (done, _) = follow(&h, |_| h.worker_as("us-west-2", Role::Secondary, Activity::Standby), &body, sent_ms);
    assert_eq!(answered(&done).1, Status::Success);
    assert!(h.record().owner.starts_with("us-west-2/"), "{:?}", h.record());
    assert_eq!(h.bodies(URL)[0].data["Polls"], json!("1"));
}

#[test]
fn a_crash_mid_poll_is_taken_over_and_polled_again_with_the_stored_state() {
    let h = Harness::new();
    let body = request("Create", "Custom::Counting", json!({"InProgressForS": "60", "PollIntervalS": "10"}), URL);
    let sent_ms = h.clock.now_ms();
    assert!(matches!(deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 1), Disposition::Retry { .. }));
    let stored = waiting_record(&h);
    h.clock.advance_ms(10_000);
    // The primary takes the poll, runs it, and crashes before storing the next wait.
    h.store.inject(Op::Wait, Fault::Stall);
    let calls = h.counting.calls();
    let invocation = h.invocation(900_000);
    let crashed = drive_until(
        &h.clock,
        h.worker("us-east-1")
            .handle(QueueRecord { body: Some(&body), receive_count: 2, sent_ms: Some(sent_ms) }, &invocation),
        || h.store.calls(Op::Wait) == 2,
    );
    assert!(crashed.is_none());
    assert_eq!(h.counting.calls(), calls + 1, "the poll ran");
    let record = h.record();
    assert_eq!((record.state, record.fence), (LeaseState::Running, 2));
    assert_eq!(record.poll.as_ref(), Some(&stored), "the last stored wait survives the crash");

    // After the lease expires, the secondary takes over and polls with the stored state.
    h.clock.advance_ms(10_000 + 1_000 + 8_001);
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert!(matches!(deliver(&h, &secondary, &body, sent_ms, 1), Disposition::Retry { .. }));
    let poll = waiting_record(&h);
    assert_eq!((h.record().fence, poll.polls, poll.waiting_since_ms), (3, 1, sent_ms));
}

/// Polls sleep `SleepMs` from their state: long enough, with heartbeats failing, to lose the lease.
#[derive(Debug, Clone, Copy)]
struct SlowPoller;

#[async_trait]
impl Provider for SlowPoller {
    type Properties = crate::properties::PropertyMap;

    async fn create(&self, _ctx: &ProviderContext, _properties: Self::Properties) -> Result<Step, ProviderError> {
        Step::in_progress(json!({"Generation": 0}), Duration::from_secs(10))
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        _id: &str,
        properties: Self::Properties,
        _old: Option<Self::Properties>,
    ) -> Result<Step, ProviderError> {
        self.create(ctx, properties).await
    }

    async fn delete(&self, _ctx: &ProviderContext, _id: &str, _p: Self::Properties) -> Result<Step<()>, ProviderError> {
        Ok(Step::Done(()))
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        let generation = state["Generation"].as_u64().unwrap_or_default();
        if ctx.fence.value == 2 {
            ctx.sleep_ms(60_000).await;
        }
        Step::in_progress(json!({"Generation": generation + 1, "Fence": ctx.fence.value}), Duration::from_secs(10))
    }
}

#[test]
fn s2_a_stale_poller_cannot_overwrite_newer_state() {
    let h = Harness::new();
    let router = Arc::new(Router::new().register("Custom::Slow", SlowPoller));
    let worker = |region: &str, role| {
        let ports = Ports {
            store: h.store.clone(),
            sink: h.sink.clone(),
            router: Arc::clone(&router),
            clock: Arc::new(h.clock.clone()),
            random: Arc::new(SplitMix64::new(9)),
            control: Arc::new(FixedActivity(Activity::Active)),
            metrics: Arc::new(h.metrics.clone()),
        };
        let input = InputPolicy {
            topic_arns: vec![],
            raw_delivery: true,
            urls: UrlPolicy::new(vec![]),
            privileged_topic_arns: vec![],
        };
        Worker::new(ports, input, Settings { role, ..settings(region) })
    };
    let body = request("Create", "Custom::Slow", json!({}), URL);
    let sent_ms = h.clock.now_ms();
    assert!(matches!(deliver(&h, &worker("us-east-1", Role::Primary), &body, sent_ms, 1), Disposition::Retry { .. }));
    h.clock.advance_ms(10_000);
    // East polls under fence 2 for a minute and its heartbeats fail, so its lease lapses; west
    // takes over under fence 3, polls, and stores generation 1. Then east's poll returns.
    for _ in 0..30 {
        h.store.inject(Op::Heartbeat, Fault::Transient);
    }
    let east = worker("us-east-1", Role::Primary);
    let west = worker("us-west-2", Role::Secondary);
    let invocation = h.invocation(900_000);
    let clock = h.clock.clone();
    let east_run =
        east.handle(QueueRecord { body: Some(&body), receive_count: 2, sent_ms: Some(sent_ms) }, &invocation);
    let west_run = async {
        clock.sleep_ms(10_000 + 1_000 + 8_001 + 5_000).await;
        west.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: Some(sent_ms) }, &invocation).await
    };
    let (east_done, west_done) = drive(&h.clock, futures_util::future::join(east_run, west_run));
    assert!(matches!(&west_done, Disposition::Retry { .. }), "{west_done:?}");
    assert!(
        matches!(&east_done, Disposition::Retry { why, .. } if why.contains("taken over")),
        "east's wait under the old fence is refused: {east_done:?}"
    );
    let record = h.record();
    let poll = waiting_record(&h);
    assert_eq!(record.fence, 3);
    assert_eq!(serde_json::from_str::<Value>(&poll.state).expect("json"), json!({"Generation": 1, "Fence": 3}));
    assert!(h.metrics.events().contains(&MetricEvent::FenceConflict));
}

#[test]
fn l1_work_still_in_progress_at_the_deadline_is_answered_failed_with_its_last_state() {
    let h = Harness::new();
    let body = request(
        "Create",
        "Custom::Counting",
        json!({"InProgressForS": "3600", "PollIntervalS": "30", "ServiceTimeout": "300"}),
        URL,
    );
    let sent_ms = h.clock.now_ms();
    let (done, receives) = follow(&h, |_| h.worker("us-east-1"), &body, sent_ms);
    assert_eq!(answered(&done).1, Status::Failed);
    let answered_ms = h.clock.now_ms();
    assert!(answered_ms < sent_ms + 300_000, "answered before the deadline");
    let failed = h.bodies(URL).remove(0);
    let reason = failed.reason.clone().expect("a reason");
    assert!(
        reason.starts_with("Custom::Counting Create was still in progress when the request's deadline, set by the resource's ServiceTimeout, came near: waited "),
        "{reason}"
    );
    assert!(reason.contains(" polls; last state: {"), "{reason}");
    // Polls every 30 s to 270 s. The last poll may come 5 s before leases must end (the
    // deadline less the 20 s margin and the 1 s skew: 279 s), at 274 s less a millisecond,
    // which is sooner than the 4 s backoff floor after 270 s: no further poll fits, so the
    // poll at 270 s answers.
    assert!(reason.contains("waited 270 s over 9 polls"), "{reason}");
    assert_eq!(receives, 10);

    // CloudFormation sends the rollback Delete only after this answer: it reaches the provider,
    // which cleans up what the unfinished Create may have made.
    assert!(!is_failed_create_id(&failed.physical_resource_id), "the provider ran: {failed:?}");
    let before = h.counting.calls();
    let delete = rollback_delete(&failed);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &delete)).1, Status::Success);
    assert_eq!(h.counting.calls(), before + 1, "the rollback Delete reached the provider");
    // And the Create's wait is over: its message, if it comes back, is a duplicate.
    assert_eq!(deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 99), Disposition::Done(Done::Duplicate));
}

#[test]
fn a_state_over_16_kb_is_answered_failed() {
    let h = Harness::new();
    let body = echo_create(json!({"InProgressForS": "10", "Blob": "x".repeat(17 * 1024)}));
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)).1, Status::Failed);
    let reason = h.bodies(URL)[0].reason.clone().expect("a reason");
    assert!(reason.contains("answered in progress with a state of 17"), "{reason}");
    assert!(reason.ends_with("at most 16384 bytes are kept between polls"), "{reason}");
    assert_eq!(h.store.calls(Op::Wait), 0);
}

#[test]
fn a_delete_can_wait_too() {
    let h = Harness::new();
    let body = request("Delete", ECHO_TYPE, json!({"InProgressForS": "8", "PollIntervalS": "4"}), URL);
    let (done, receives) = follow(&h, |_| h.worker("us-east-1"), &body, h.clock.now_ms());
    assert_eq!(answered(&done).1, Status::Success);
    assert_eq!(receives, 3);
    let answer = h.bodies(URL).remove(0);
    assert!(answer.data.is_empty(), "a Delete answers no Data: {answer:?}");
    assert_eq!(answer.physical_resource_id, "Thing-existing");
}

/// Answers in progress but never implemented `poll`.
#[derive(Debug, Clone, Copy)]
struct NoPoll;

#[async_trait]
impl Provider for NoPoll {
    type Properties = crate::properties::PropertyMap;

    async fn create(&self, _ctx: &ProviderContext, _properties: Self::Properties) -> Result<Step, ProviderError> {
        Step::in_progress(json!({}), Duration::from_secs(1))
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        _id: &str,
        properties: Self::Properties,
        _old: Option<Self::Properties>,
    ) -> Result<Step, ProviderError> {
        self.create(ctx, properties).await
    }

    async fn delete(&self, _ctx: &ProviderContext, _id: &str, _p: Self::Properties) -> Result<Step<()>, ProviderError> {
        Ok(Step::Done(()))
    }
}

#[test]
fn a_provider_without_poll_is_answered_failed_at_its_first_poll() {
    let h = Harness::new();
    let router = Router::new().register("Custom::NoPoll", NoPoll);
    let ports = Ports {
        store: h.store.clone(),
        sink: h.sink.clone(),
        router: Arc::new(router),
        clock: Arc::new(h.clock.clone()),
        random: Arc::new(SplitMix64::new(3)),
        control: Arc::new(FixedActivity(Activity::Active)),
        metrics: Arc::new(h.metrics.clone()),
    };
    let input = InputPolicy {
        topic_arns: vec![],
        raw_delivery: true,
        urls: UrlPolicy::new(vec![]),
        privileged_topic_arns: vec![],
    };
    let worker = Worker::new(ports, input, settings("us-east-1"));
    let body = request("Create", "Custom::NoPoll", json!({}), URL);
    let (done, _) = follow(&h, |_| worker.clone(), &body, h.clock.now_ms());
    assert_eq!(answered(&done).1, Status::Failed);
    let reason = h.bodies(URL)[0].reason.clone().expect("a reason");
    assert!(reason.ends_with("does not implement Provider::poll"), "{reason}");
}

#[test]
fn a_lost_wait_reply_is_resolved_from_the_record() {
    let h = Harness::new();
    h.store.inject(Op::Wait, Fault::LostReply);
    let body = echo_create(json!({"InProgressForS": "10"}));
    let first = deliver(&h, &h.worker("us-east-1"), &body, h.clock.now_ms(), 1);
    assert!(matches!(&first, Disposition::Retry { delay_s: 5, why } if why.contains("in progress")), "{first:?}");
    assert_eq!((h.store.calls(Op::Wait), h.store.calls(Op::Read)), (1, 1), "one wait, read back once");
    assert_eq!(waiting_record(&h).polls, 0);
    assert!(!h.metrics.events().contains(&MetricEvent::FenceConflict));
}

/// docs/configuration.md's rule for when waiting stops: work still in progress is answered FAILED at the
/// first poll after which no further poll fits, which comes between `kept + 5 s + 4 s` and
/// `kept + 5 s` before the deadline, where `kept` is the margin (or a quarter of the
/// ServiceTimeout if that is less) and the skew margin (the last poll is scheduled 5 s before
/// the lease cap, and never sooner than the 4 s backoff floor after the one before).
#[test]
fn work_polled_every_5_s_with_a_45_s_service_timeout_is_answered_failed_in_the_window_the_readme_states() {
    let h = Harness::new();
    let body = request(
        "Create",
        "Custom::Counting",
        json!({"InProgressForS": "3600", "PollIntervalS": "5", "ServiceTimeout": "45"}),
        URL,
    );
    let sent_ms = h.clock.now_ms();
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &body, sent_ms);
    assert_eq!(answered(&done).1, Status::Failed);
    let after_ms = h.clock.now_ms() - sent_ms;
    // The harness's margin is 20 s, more than a quarter of 45 s, and its skew margin 1 s:
    // 12.25 s are kept, and the window is 23.75 s to 27.75 s after the send (with the
    // defaults' 2 s skew margin, 22.75 s to 26.75 s).
    let (margin_ms, skew_ms) = (20_000_u64, 1_000);
    let kept_ms = margin_ms.min(45_000 / 4) + skew_ms;
    assert_eq!(kept_ms, 12_250);
    let latest_ms = 45_000 - (kept_ms + 5_000);
    assert!((latest_ms - 4_000..=latest_ms).contains(&after_ms), "answered {after_ms} ms after the send");
}

/// A lease store whose record changes between a delivery's read and its acquire: the first
/// acquire finds `then` stored instead of what the read returned.
#[derive(Debug)]
struct ChangesBeforeAcquire {
    inner: Arc<MemoryLeaseStore>,
    then: std::sync::Mutex<Option<LeaseRecord>>,
}

#[async_trait]
impl crate::lease::LeaseStore for ChangesBeforeAcquire {
    async fn acquire(
        &self,
        request: &crate::lease::AcquireRequest,
    ) -> Result<crate::lease::Acquire, crate::lease::StoreError> {
        if let Some(then) = self.then.lock().expect("lock").take() {
            self.inner.replicate(then);
        }
        self.inner.acquire(request).await
    }
    async fn close(
        &self,
        request: &crate::lease::AcquireRequest,
        signal: &[u8],
    ) -> Result<crate::lease::Acquire, crate::lease::StoreError> {
        self.inner.close(request, signal).await
    }
    async fn heartbeat(
        &self,
        key: &RequestKey,
        fence: u64,
        until_ms: u64,
        now_ms: u64,
    ) -> Result<crate::lease::Conditional, crate::lease::StoreError> {
        self.inner.heartbeat(key, fence, until_ms, now_ms).await
    }
    async fn commit(
        &self,
        key: &RequestKey,
        fence: u64,
        response: &[u8],
        now_ms: u64,
    ) -> Result<crate::lease::Conditional, crate::lease::StoreError> {
        self.inner.commit(key, fence, response, now_ms).await
    }
    async fn wait(
        &self,
        key: &RequestKey,
        fence: u64,
        poll: &PollRecord,
        now_ms: u64,
    ) -> Result<crate::lease::Conditional, crate::lease::StoreError> {
        self.inner.wait(key, fence, poll, now_ms).await
    }
    async fn mark_delivered(
        &self,
        key: &RequestKey,
        fence: u64,
        unsent: Option<&str>,
        now_ms: u64,
    ) -> Result<crate::lease::Conditional, crate::lease::StoreError> {
        self.inner.mark_delivered(key, fence, unsent, now_ms).await
    }
    async fn read(&self, key: &RequestKey) -> Result<Option<LeaseRecord>, crate::lease::StoreError> {
        self.inner.read(key).await
    }
    async fn leave(&self, left: &LeaseRecord) -> Result<crate::lease::Conditional, crate::lease::StoreError> {
        self.inner.leave(left).await
    }
}

#[test]
fn a_drained_primary_gives_back_a_poll_its_takeover_found_instead_of_the_expired_lease_it_saw() {
    // Seed 413998293349042 of the third fresh range: a drained primary read an expired lease
    // (the secondary frozen mid-run), was frozen itself before its acquire, and by then the
    // secondary had stored a wait whose poll was due: the acquire took the poll, and the
    // drained primary polled it.
    let h = Harness::new();
    let body = echo_create(json!({"InProgressForS": "600"}));
    let sent_ms = h.clock.now_ms();
    assert!(matches!(deliver(&h, &h.worker("us-west-2"), &body, sent_ms, 1), Disposition::Retry { .. }));
    let waiting = h.record();
    h.clock.advance_ms(60_000);
    // What the drained primary reads: the secondary mid-poll, its lease expired.
    let now_ms = h.clock.now_ms();
    let frozen = LeaseRecord {
        state: LeaseState::Running,
        owner: "us-west-2/frozen/1".into(),
        lease_until_ms: now_ms - 20_000,
        updated_ms: now_ms - 30_000,
        ..waiting.clone()
    };
    h.memory.replicate(frozen);
    // What its acquire finds: the wait stored again, its poll due.
    let then = LeaseRecord { updated_ms: now_ms, ..waiting.clone() };
    let store =
        Arc::new(ChangesBeforeAcquire { inner: h.memory.clone(), then: std::sync::Mutex::new(Some(then.clone())) });
    let settings = Settings { role: Role::Primary, control_cache_ms: 300_000, ..settings("us-east-1") };
    let router = Router::new().register(ECHO_TYPE, crate::echo::Echo);
    let ports = Ports {
        store,
        sink: h.sink.clone(),
        router: Arc::new(router),
        clock: Arc::new(h.clock.clone()),
        random: Arc::new(SplitMix64::new(7)),
        control: Arc::new(FixedActivity(Activity::Standby)),
        metrics: Arc::new(h.metrics.clone()),
    };
    let input = InputPolicy {
        topic_arns: vec![TOPIC.into()],
        raw_delivery: true,
        urls: UrlPolicy::new(vec![]),
        privileged_topic_arns: vec![],
    };
    let drained = Worker::new(ports, input, settings);
    assert_eq!(drive(&h.clock, drained.read_control()), Some(Activity::Standby));
    let left = deliver(&h, &drained, &body, sent_ms, 2);
    assert!(matches!(&left, Disposition::Retry { why, .. } if why.contains("standby")), "{left:?}");
    assert_eq!(h.record(), LeaseRecord { fence: then.fence + 1, ..then }, "the wait is given back as it was");
}
