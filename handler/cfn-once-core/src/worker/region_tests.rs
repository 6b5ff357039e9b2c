//! Two regions and the active-region control: a standby primary reads first and leaves new
//! work (or gives back a lease it took before the control answered), a secondary's copy after
//! the primary answered, a control slower than its timeout, and requests with no failover.

use super::*;

#[test]
fn a_standby_primary_reads_first_and_leaves_new_work() {
    let h = Harness::new();
    let standby = h.drained_primary("us-east-1");
    let body = request("Create", "Custom::Counting", json!({}), URL);
    let left = h.handle(&standby, &body);
    assert!(
        matches!(&left, Disposition::Retry { delay_s: 30..=34, why } if why == "this region is on standby; the active region answers"),
        "{left:?}"
    );
    assert_eq!((h.store.calls(Op::Read), h.store.calls(Op::Acquire)), (1, 0), "read, never acquire");
    assert!(h.memory.snapshot().is_empty() && h.sink.all().is_empty(), "no new work started");

    // The secondary's delayed copy finds no record: the primary missed it, so it runs it.
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert_eq!(answered(&h.handle(&secondary, &body)), (1, Status::Success));
    assert!(h.record().owner.starts_with("us-west-2/"));
    // The primary's copy comes back and finds it answered.
    assert_eq!(h.handle(&standby, &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(h.store.calls(Op::Acquire), 1, "only the secondary ever acquired");
}

#[test]
fn a_standby_primary_without_an_answer_acquires_while_asking_and_gives_the_lease_back() {
    let h = Harness::new();
    // A new process's first record: the control has not answered yet (test settings cache
    // nothing), so the record asks and acquires at once, and the answer is standby.
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    let body = request("Create", "Custom::Counting", json!({}), URL);
    let left = h.handle(&standby, &body);
    assert!(
        matches!(&left, Disposition::Retry { delay_s: 30..=34, why } if why == "this region is on standby; the active region answers"),
        "{left:?}"
    );
    let calls = [Op::Acquire, Op::Leave, Op::Read, Op::Heartbeat].map(|op| h.store.calls(op));
    assert_eq!(calls, [1, 1, 0, 0], "one acquire, given back by one write; nothing read");
    assert_eq!((h.record().state, h.record().fence), (LeaseState::Left, 1), "{:?}", h.record());
    assert!(h.sink.all().is_empty() && h.counting.calls() == 0, "no new work started");

    // The secondary's delayed copy finds, as without the acquire, no record: it runs it under
    // the next fence, as a first execution (nobody ran before it).
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert_eq!(answered(&h.handle(&secondary, &body)), (2, Status::Success));
    assert!(h.metrics.events().contains(&MetricEvent::LeaseAcquired { fence: 2, poll: false }));
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(h.handle(&standby, &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.counting.calls(), 1);
}

#[test]
fn a_standby_primary_whose_acquire_reply_was_lost_ends_the_lease_instead() {
    let h = Harness::new();
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    let body = request("Create", "Custom::Counting", json!({}), URL);
    // The acquire is applied and its reply lost: the record read back is ours, but what it held
    // before is not known, so it cannot be written back; the lease is ended instead.
    h.store.inject(Op::Acquire, Fault::LostReply);
    let left = h.handle(&standby, &body);
    assert!(matches!(&left, Disposition::Retry { why, .. } if why.contains("standby")), "{left:?}");
    assert_eq!((h.store.calls(Op::Leave), h.store.calls(Op::Heartbeat)), (0, 1));
    let record = h.record();
    assert_eq!((record.state, record.fence, record.lease_until_ms), (LeaseState::Running, 1, 0), "{record:?}");
    assert_eq!(h.counting.calls(), 0);
    // The next region takes it over at once (told an execution may have run: the safe side).
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert_eq!(answered(&h.handle(&secondary, &body)), (2, Status::Success));
    assert_eq!(h.counting.calls(), 1);
}

#[test]
fn an_active_primary_without_an_answer_makes_no_call_for_the_control_on_the_way() {
    let h = Harness::new();
    let active = h.worker_as("us-east-1", Role::Primary, Activity::Active);
    assert_eq!(answered(&h.handle(&active, &echo_create(json!({})))), (1, Status::Success));
    let calls = [Op::Acquire, Op::Leave, Op::Read, Op::Heartbeat].map(|op| h.store.calls(op));
    assert_eq!(calls, [1, 0, 0, 0], "the acquire went out with the control read, and stood");
}

#[test]
fn a_secondary_copy_after_the_primary_answered_costs_one_refused_acquire() {
    let h = Harness::new();
    let body = echo_create(json!({}));
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Success));
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert_eq!(h.handle(&secondary, &body), Disposition::Done(Done::Duplicate));
    assert_eq!((h.store.calls(Op::Acquire), h.store.calls(Op::Read)), (2, 0));
}

#[test]
fn a_standby_primary_takes_over_an_expired_lease() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "60000"}));
    let invocation = h.invocation(900_000);
    let crashed = drive_until(
        &h.clock,
        h.worker_as("us-west-2", Role::Secondary, Activity::Active)
            .handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
        || h.memory.snapshot().first().is_some_and(|r| r.state == LeaseState::Running),
    );
    assert!(crashed.is_none());
    h.clock.advance_ms(11_001);
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    assert_eq!(answered(&h.handle(&standby, &body)), (2, Status::Success), "RUNNING and expired: take over");
}

#[test]
fn l1_near_the_deadline_a_standby_primary_answers_failed_without_running() {
    let h = Harness::new();
    let standby = h.drained_primary("us-east-1");
    let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": "120"}), URL);
    // Sent 90 s ago with a 120 s ServiceTimeout: 30 s left, more than the 20 s margin.
    assert!(
        matches!(handle_sent(&h, &standby, &body, 90_000), Disposition::Retry { delay_s: 10, .. }),
        "wakes at deadline - margin"
    );
    // Sent 112 s ago: 8 s left, inside the margin (and its second half, where no last-chance
    // run is started), and nobody has answered.
    assert_eq!(answered(&handle_sent(&h, &standby, &body, 112_000)), (1, Status::Failed));
    assert_eq!(h.counting.calls(), 0, "the provider was not started so close to the deadline");
    let reason = h.bodies(URL)[0].reason.clone().expect("reason");
    assert_eq!(
        reason,
        "no region could run Custom::Counting Create before the request's deadline, set by the resource's ServiceTimeout; \
         answering FAILED rather than letting CloudFormation wait"
    );
}

#[test]
fn l1_near_the_deadline_a_standby_primary_without_an_answer_keeps_the_lease_it_took() {
    let h = Harness::new();
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": "120"}), URL);
    // 8 s left, inside the margin: the table has any region answer, so the acquire stands.
    assert_eq!(answered(&handle_sent(&h, &standby, &body, 112_000)), (1, Status::Failed));
    assert_eq!((h.store.calls(Op::Leave), h.counting.calls()), (0, 0));
}

/// Answers `first` at once, then takes `slow_ms` on the clock for every later read.
#[derive(Debug)]
struct SlowAfterFirst {
    clock: ManualClock,
    first: Activity,
    later: Activity,
    slow_ms: u64,
    reads: std::sync::atomic::AtomicU32,
}

#[async_trait::async_trait]
impl ActivitySource for SlowAfterFirst {
    async fn activity(&self) -> Result<Activity, ControlError> {
        if self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Ok(self.first);
        }
        self.clock.sleep_ms(self.slow_ms).await;
        Ok(self.later)
    }
}

#[test]
fn a_control_slower_than_its_timeout_keeps_the_last_known_answer() {
    let h = Harness::new();
    // Drained: the control says standby, then every read takes 10 s (ARC with two endpoints
    // unreachable, 2 s each and more), well past the 2 s store-call timeout.
    let control = Arc::new(SlowAfterFirst {
        clock: h.clock.clone(),
        first: Activity::Standby,
        later: Activity::Active,
        slow_ms: 10_000,
        reads: Default::default(),
    });
    let primary = h.worker_with(Settings { control_cache_ms: 5_000, ..settings("us-east-1") }, control);
    assert_eq!(drive(&h.clock, primary.read_control()), Some(Activity::Standby));
    let left = handle_sent(&h, &primary, &echo_create(json!({})), 0);
    assert!(matches!(&left, Disposition::Retry { why, .. } if why.contains("standby")), "{left:?}");
    assert!(h.memory.snapshot().is_empty(), "a fresh standby answer: read first, no lease taken");
    // Past the time-to-live: the next record asks and acquires at once; the ask times out.
    h.clock.advance_ms(6_000);
    let (other, other_url) = batches_request(2);
    let again = handle_sent(&h, &primary, &other, 0);
    assert!(matches!(&again, Disposition::Retry { why, .. } if why.contains("standby")), "{again:?}");
    assert!(h.sink.bodies(&other_url).is_empty(), "a drained primary started new work on a timed-out control read");
    assert_eq!(h.counting.calls(), 0);
    let records = h.memory.snapshot();
    assert!(
        records.len() == 1 && records.iter().all(|record| (record.state, record.fence) == (LeaseState::Left, 1)),
        "the lease taken while asking was given back: {records:?}"
    );
}

/// A Create with its own RequestId and ResponseURL.
fn batches_request(n: u32) -> (String, String) {
    let url =
        format!("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k{n}?X-Amz-Signature=s{n}");
    let mut body: Value = serde_json::from_str(&request("Create", ECHO_TYPE, json!({}), &url)).expect("json");
    body["RequestId"] = json!(format!("req-{n}"));
    (body.to_string(), url)
}

#[test]
fn a_request_can_never_be_keyed_like_the_control_item() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let mut hostile: Value = serde_json::from_str(&echo_create(json!({}))).expect("json");
    hostile["StackId"] = json!("control#active");
    hostile["RequestId"] = json!("control");
    let disposition = h.handle(&worker, &hostile.to_string());
    assert!(
        matches!(&disposition, Disposition::DeadLetter { cause: DeadLetterCause::Undeliverable, why } if why.contains("not a CloudFormation stack ARN")),
        "{disposition:?}"
    );
    assert!(h.memory.snapshot().is_empty(), "nothing was written to the lease table");
    assert!(h.sink.all().is_empty(), "nothing was sent");
}

#[test]
fn a_primary_counts_requests_whose_deadline_leaves_the_secondary_no_time() {
    let h = Harness::new();
    // The secondary's copy comes 60 s late; with the 20 s margin, a 70 s ServiceTimeout leaves
    // it nothing to answer in. 90 s does.
    let primary = h.worker("us-east-1");
    let short = echo_create(json!({"ServiceTimeout": "70"}));
    h.handle(&primary, &short);
    let count = || h.metrics.events().iter().filter(|event| **event == MetricEvent::ShortServiceTimeout).count();
    assert_eq!(count(), 1);
    let (enough, _) = batches_request(2);
    let mut enough: Value = serde_json::from_str(&enough).expect("json");
    enough["ResourceProperties"]["ServiceTimeout"] = json!("90");
    h.handle(&primary, &enough.to_string());
    assert_eq!(count(), 1, "90 s leaves the secondary time to answer");
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let (third, _) = batches_request(3);
    let mut third: Value = serde_json::from_str(&third).expect("json");
    third["ResourceProperties"]["ServiceTimeout"] = json!("30");
    h.handle(&secondary, &third.to_string());
    assert_eq!(count(), 1, "only primaries count");
}
