//! Work past the hour (see `wait_condition`): the answer handed over at once, the work polled
//! under its own fences from either region, one signal to the handle, the timeout, and the
//! Delete or Update that ends the work.

use super::waits::{deliver, follow_from as follow};
use super::*;
use crate::wait_condition::{HANDLE_PROPERTY, Signal, SignalStatus, TIMEOUT_PROPERTY, WORK_DATA_NAME, is_work_id};

const HANDLE: &str = "https://cloudformation-waitcondition-us-east-1.s3.amazonaws.com/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/demo/guid/Handle?X-Amz-Signature=h1";
const NEW_HANDLE: &str = "https://cloudformation-waitcondition-us-east-1.s3.amazonaws.com/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/demo/guid/Handle2?X-Amz-Signature=h2";

/// A Create of an Echo that works `work_s` seconds, polled every 10 minutes, on `HANDLE`
/// with a wait condition of `timeout_s`.
fn long_create(work_s: u64, timeout_s: u64) -> String {
    request(
        "Create",
        ECHO_TYPE,
        json!({
            "InProgressForS": work_s.to_string(), "PollIntervalS": "600", "DeleteInProgressForS": "0",
            "Size": "3", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: timeout_s.to_string(),
        }),
        URL,
    )
}

/// Delivers a Create of a five-hour work on `HANDLE` once: answered, and its work waiting.
/// Returns the request and when it was sent.
fn start_five_hour_work(h: &Harness) -> (String, u64) {
    let body = long_create(5 * 3600, 43_200);
    let sent_ms = h.clock.now_ms();
    assert!(matches!(deliver(h, &h.worker("us-east-1"), &body, sent_ms, 1), Disposition::Retry { .. }));
    (body, sent_ms)
}

fn signals(h: &Harness, handle: &str) -> Vec<Signal> {
    h.sink.bodies(handle).iter().map(|bytes| Signal::parse(bytes).expect("a signal")).collect()
}

fn work_record(h: &Harness) -> LeaseRecord {
    let records: Vec<_> = h.memory.snapshot().into_iter().filter(|r| is_work_id(&r.key.request_id)).collect();
    assert_eq!(records.len(), 1, "{records:?}");
    records.into_iter().next().expect("one work record")
}

fn answer_record(h: &Harness, request_id: &str) -> LeaseRecord {
    h.memory.snapshot().into_iter().find(|r| r.key.request_id == request_id).expect("the request's record")
}

#[test]
fn a_two_hour_work_is_answered_at_once_and_signalled_once_after_it() {
    let h = Harness::new();
    let body = long_create(2 * 3600, 43_200);
    let sent_ms = h.clock.now_ms();
    let first = deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 1);
    assert!(matches!(&first, Disposition::Retry { .. }), "{first:?}");
    // Answered at once, before any provider ran to completion: SUCCESS, the work continues.
    let answers = h.bodies(URL);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].status, Status::Success);
    assert!(answers[0].data[WORK_DATA_NAME].as_str().is_some_and(|text| text.starts_with("continues")));
    assert!(!answers[0].data.contains_key("Size"), "the provider's Data goes to the signal");
    assert_eq!(work_record(&h).state, LeaseState::Waiting);
    assert!(signals(&h, HANDLE).is_empty());

    let (done, receives) = follow(&h, |_| h.worker("us-east-1"), &body, sent_ms, 2);
    let (_, status) = answered(&done);
    assert_eq!(status, Status::Success);
    let signals = signals(&h, HANDLE);
    assert_eq!(signals.len(), 1, "one signal");
    assert_eq!(signals[0].status, SignalStatus::Success);
    assert_eq!(signals[0].unique_id, "Thing");
    let data: Value = serde_json::from_str(&signals[0].data).expect("JSON data");
    assert_eq!(data["Size"], json!("3"));
    assert!(h.clock.now_ms() - sent_ms >= 2 * 3600 * 1000, "signalled after the work's two hours");
    // 12 polls of 10 minutes, and no more receives than the queue allows.
    assert!(receives < 100, "{receives}");
    assert_eq!(h.bodies(URL).len(), 1, "the answer was PUT once");
    let work = work_record(&h);
    assert_eq!((work.state, work.delivered), (LeaseState::Committed, true));
    // Late copies (the secondary's) change nothing.
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert_eq!(deliver(&h, &secondary, &body, sent_ms, 1), Disposition::Done(Done::Duplicate));
    assert_eq!((h.sink.bodies(HANDLE).len(), h.bodies(URL).len()), (1, 1));
}

#[test]
fn a_work_polled_by_the_primary_is_finished_by_the_secondary_when_the_primary_dies() {
    let h = Harness::new();
    let body = long_create(3 * 3600, 43_200);
    let sent_ms = h.clock.now_ms();
    assert!(matches!(deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 1), Disposition::Retry { .. }));
    // The primary polls for an hour, then its region goes; the secondary's copy takes over.
    let (_, receives) = {
        let mut receive = 2;
        while h.clock.now_ms() < sent_ms + 3600 * 1000 {
            match deliver(&h, &h.worker("us-east-1"), &body, sent_ms, receive) {
                Disposition::Retry { delay_s, .. } => h.clock.advance_ms(u64::from(delay_s) * 1000),
                other => panic!("{other:?}"),
            }
            receive += 1;
        }
        ((), receive)
    };
    assert!(work_record(&h).owner.starts_with("us-east-1/"));
    let secondary = |_| h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let (done, _) = follow(&h, secondary, &body, sent_ms, receives);
    assert_eq!(answered(&done).1, Status::Success);
    assert_eq!(signals(&h, HANDLE).len(), 1);
    assert!(work_record(&h).owner.starts_with("us-west-2/"), "signalled from the secondary");
    assert_eq!(h.bodies(URL).len(), 1);
}

#[test]
fn a_work_still_running_near_its_timeout_is_signalled_failure_before_it() {
    let h = Harness::new();
    let body = long_create(5 * 3600, 4 * 3600);
    let sent_ms = h.clock.now_ms();
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &body, sent_ms, 1);
    assert_eq!(answered(&done).1, Status::Failed);
    let signals = signals(&h, HANDLE);
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0].status, SignalStatus::Failure);
    assert!(signals[0].reason.contains("the wait condition's timeout"), "{}", signals[0].reason);
    assert!(h.clock.now_ms() < sent_ms + 4 * 3600 * 1000, "signalled before the timeout");
    assert_eq!(h.bodies(URL)[0].status, Status::Success, "the answer itself was SUCCESS");
}

#[test]
fn a_provider_error_is_signalled_failure_with_its_reason() {
    let h = Harness::new();
    let body = request(
        "Create",
        ECHO_TYPE,
        json!({"FailWith": "quota exceeded", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "600"}),
        URL,
    );
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &body, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Failed);
    assert_eq!(h.bodies(URL)[0].status, Status::Success);
    let signals = signals(&h, HANDLE);
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0].status, SignalStatus::Failure);
    assert!(signals[0].reason.contains("quota exceeded"), "{}", signals[0].reason);
}

/// An Update of the resource from properties naming `HANDLE` to `properties`.
fn update_of(properties: Value) -> String {
    let mut update: Value = serde_json::from_str(&request("Update", ECHO_TYPE, properties, OTHER_URL)).expect("json");
    update["RequestId"] = json!("req-update");
    update["OldResourceProperties"] = json!({HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"});
    update.to_string()
}

fn delete_of(properties: Value) -> String {
    let mut delete: Value = serde_json::from_str(&request("Delete", ECHO_TYPE, properties, OTHER_URL)).expect("json");
    delete["RequestId"] = json!("req-delete");
    delete.to_string()
}

#[test]
fn a_delete_during_the_work_stops_it_signals_failure_and_only_then_is_answered() {
    let h = Harness::new();
    let (body, sent_ms) = start_five_hour_work(&h);
    h.clock.advance_ms(30 * 60 * 1000);
    // A poll has just run when the Delete comes.
    let poll = deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 2);
    assert!(matches!(poll, Disposition::Retry { .. }));
    let delete = delete_of(json!({"DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}));
    let delete_sent_ms = h.clock.now_ms();
    let (done, _) =
        follow(&h, |_| h.worker_as("us-west-2", Role::Secondary, Activity::Standby), &delete, delete_sent_ms, 1);
    assert_eq!(answered(&done).1, Status::Success);
    let signals = signals(&h, HANDLE);
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0].status, SignalStatus::Failure);
    assert!(signals[0].reason.contains("deleted while its work ran"), "{}", signals[0].reason);
    let work = work_record(&h);
    assert_eq!((work.state, work.delivered), (LeaseState::Committed, true));
    let deleted = answer_record(&h, "req-delete");
    assert!(deleted.updated_ms >= work.updated_ms, "the Delete was answered after the signal");
    // The Create's copies come back: nothing more is polled or signalled.
    h.clock.advance_ms(3600 * 1000);
    let late = deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 3);
    assert!(matches!(late, Disposition::Done(Done::Superseded)), "{late:?}");
    assert_eq!(h.sink.bodies(HANDLE).len(), 1, "never signalled again");
}

/// A poll of the five-hour work taken by `owner` now, as a poller in flight holds it: the
/// work's record RUNNING under a live lease. Returns its fence.
fn poll_in_flight(h: &Harness, owner: &str) -> u64 {
    let work = work_record(h);
    let now_ms = h.clock.now_ms();
    let lease_ms = settings("us-east-1").lease_ms;
    let request = crate::lease::AcquireRequest {
        key: work.key.clone(),
        fingerprint: work.fingerprint.clone(),
        sent_ms: work.sent_ms,
        owner: owner.into(),
        now_ms,
        lease_until_ms: now_ms + lease_ms,
        skew_ms: 1_000,
        expires_ms: now_ms + 86_400_000,
        poll_lag_ms: 0,
        label: Default::default(),
        preempt: false,
    };
    match drive(&h.clock, h.memory.acquire(&request)).expect("acquire") {
        crate::lease::Acquire::Acquired { fence, poll, .. } => {
            assert!(poll.is_some(), "the poll of the waiting work");
            fence
        }
        other => panic!("the poll was not due: {other:?}"),
    }
}

#[test]
fn a_delete_takes_the_lease_from_a_poll_in_flight_and_goes_on_once_that_lease_has_ended() {
    // Seed 1015227 of the fresh million: a work polled every few seconds held its lease again
    // before each of the Delete's backoffs came back, and the Delete waited past its deadline.
    let h = Harness::new();
    start_five_hour_work(&h);
    h.clock.advance_ms(600_000);
    let poller_fence = poll_in_flight(&h, "us-east-1/poller/1");
    let poller_lease_until_ms = work_record(&h).lease_until_ms;
    let delete = delete_of(json!({"DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}));
    let delete_sent_ms = h.clock.now_ms();
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let first = deliver(&h, &secondary, &delete, delete_sent_ms, 1);
    // The work is closed at once, under the next fence: FAILURE committed and PUT.
    let work = work_record(&h);
    assert_eq!((work.fence, work.state, work.delivered), (poller_fence + 1, LeaseState::Committed, true));
    let signals = signals(&h, HANDLE);
    assert_eq!((signals.len(), signals[0].status), (1, SignalStatus::Failure));
    // The poll it was taken from can extend, park or commit nothing any more.
    let refused =
        drive(&h.clock, h.memory.heartbeat(&work.key, poller_fence, h.clock.now_ms() + 10_000, h.clock.now_ms()));
    assert!(matches!(refused, Ok(crate::lease::Conditional::Refused(_))), "{refused:?}");
    // The Delete's own provider runs once that poll's lease has ended, not beside it.
    let delay_s = match &first {
        Disposition::Retry { delay_s, why } if why.contains("poll in flight was stopped") => *delay_s,
        other => panic!("{other:?}"),
    };
    assert!(h.sink.bodies(OTHER_URL).is_empty(), "not answered yet");
    h.clock.advance_ms(u64::from(delay_s) * 1000);
    assert!(h.clock.now_ms() > poller_lease_until_ms + 1_000, "after the stopped lease and the skew margin");
    let done = deliver(&h, &secondary, &delete, delete_sent_ms, 2);
    assert_eq!(answered(&done).1, Status::Success);
    assert!(h.clock.now_ms() - delete_sent_ms < 20_000, "a lease and a floor, however often the work polls");
    assert_eq!(h.sink.bodies(HANDLE).len(), 1, "one signal");
}

#[test]
fn a_delete_near_its_deadline_goes_on_at_once_after_taking_the_lease_from_a_long_poll() {
    // Seed 1211045: 26 s of the Delete's time left, and a 30 s poll took the work's lease.
    let h = Harness::new();
    start_five_hour_work(&h);
    h.clock.advance_ms(600_000);
    poll_in_flight(&h, "us-west-2/batch-mate/1");
    let delete = delete_of(json!({
        "DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200", "ServiceTimeout": "30",
    }));
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let done = deliver(&h, &secondary, &delete, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success, "answered in the same delivery: its deadline comes first");
    assert_eq!(signals(&h, HANDLE).len(), 1);
    assert!(answer_record(&h, "req-delete").updated_ms >= work_record(&h).updated_ms, "the signal came first");
}

#[test]
fn a_handed_over_copy_that_fails_past_its_answers_deadline_is_kept_for_its_work() {
    // Seeds 1062956, 1112761, 1518125 and 1764495: the copy met a lost reply after the answer's
    // deadline and was dead-lettered by it, hours before the work's.
    let h = Harness::new();
    let body = request(
        "Create",
        ECHO_TYPE,
        json!({
            "InProgressForS": "7200", "PollIntervalS": "600", HANDLE_PROPERTY: HANDLE,
            TIMEOUT_PROPERTY: "43200", "ServiceTimeout": "60",
        }),
        URL,
    );
    let sent_ms = h.clock.now_ms();
    assert!(matches!(deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 1), Disposition::Retry { .. }));
    assert_eq!(h.bodies(URL)[0].status, Status::Success);
    // Past the answer's deadline, the secondary's copy cannot reach the store.
    h.clock.advance_ms(120_000);
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    for _ in 0..settings("us-west-2").store_attempts_max {
        h.store.inject(Op::Acquire, Fault::LostRequest);
        h.store.inject(Op::Read, Fault::LostRequest);
    }
    let kept = deliver(&h, &secondary, &body, sent_ms, 1);
    let delay_s = match &kept {
        Disposition::Retry { delay_s, .. } => *delay_s,
        other => panic!("the work's copy was not kept: {other:?}"),
    };
    // Spread as the work's receives are, not at the answer's floor.
    let floor_s = settings("us-west-2").backoff_floor_s().expect("a floor");
    assert!(delay_s >= floor_s, "{delay_s}");
    h.clock.advance_ms(u64::from(delay_s) * 1000);
    let on = deliver(&h, &secondary, &body, sent_ms, 2);
    assert!(matches!(on, Disposition::Retry { .. }), "it goes on to the work: {on:?}");
    assert_eq!(h.bodies(URL).len(), 1, "the answer was PUT once");
}

#[test]
fn a_closes_signal_left_undelivered_is_delivered_by_the_works_own_copy() {
    // Seed 493643685497949: the Delete committed the work's FAILURE and died before its PUT,
    // its message hidden for the visibility timeout; the Create's copy found its attempt
    // superseded and dropped, and the signal waited past the wait condition's timeout.
    let h = Harness::new();
    let (create, sent_ms) = start_five_hour_work(&h);
    h.clock.advance_ms(60_000);
    let delete = delete_of(json!({"DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}));
    let put_attempts = settings("us-east-1").put.attempts_max;
    for _ in 0..put_attempts {
        h.sink.inject(PutFault::Fail);
    }
    let failed = deliver(&h, &h.worker("us-east-1"), &delete, h.clock.now_ms(), 1);
    assert!(matches!(failed, Disposition::Retry { .. }), "{failed:?}");
    let work = work_record(&h);
    assert_eq!((work.state, work.delivered), (LeaseState::Committed, false), "committed, never PUT");
    assert!(h.sink.bodies(HANDLE).is_empty());
    // The Create's copy comes back before the Delete's does.
    h.clock.advance_ms(60_000);
    let delivered = deliver(&h, &h.worker("us-west-2"), &create, sent_ms, 2);
    assert_eq!(delivered, Disposition::Done(Done::Replayed { fence: work.fence }));
    let signals = signals(&h, HANDLE);
    assert_eq!((signals.len(), signals[0].status), (1, SignalStatus::Failure));
    assert!(work_record(&h).delivered);
    // The next copy drops, and the Delete goes on without PUTting the signal again.
    assert_eq!(deliver(&h, &h.worker("us-west-2"), &create, sent_ms, 3), Disposition::Done(Done::Superseded));
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &delete, h.clock.now_ms(), 2);
    assert_eq!(answered(&done).1, Status::Success);
    assert_eq!(h.sink.bodies(HANDLE).len(), 1);
}

#[test]
fn a_close_that_dies_right_after_taking_the_work_leaves_a_signal_the_works_copy_sends() {
    // Seed 313834217021918 of a fresh range: a Delete took the work's lease and died before it
    // committed (its acquire's reply hung), the work's copies found their attempt superseded
    // and dropped, and the signal waited for the Delete's copy, hidden past the work's timeout.
    // A close now takes the record and commits its FAILURE in one write.
    let h = Harness::new();
    let (create, sent_ms) = start_five_hour_work(&h);
    h.clock.advance_ms(60_000);
    let delete = delete_of(json!({"DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}));
    h.store.inject(Op::Close, Fault::Hang);
    let invocation = h.invocation(900_000);
    let delivery = QueueRecord { body: Some(&delete), receive_count: 1, sent_ms: Some(h.clock.now_ms()) };
    let died = drive_until(&h.clock, h.worker("us-east-1").handle(delivery, &invocation), || {
        work_record(&h).state == LeaseState::Committed
    });
    assert!(died.is_none(), "the Delete's Lambda died right after its close was written");
    assert!(h.sink.bodies(HANDLE).is_empty());
    // The Create's copy finds its attempt superseded and sends the close's signal first.
    h.clock.advance_ms(60_000);
    let sent = deliver(&h, &h.worker("us-west-2"), &create, sent_ms, 2);
    assert!(matches!(sent, Disposition::Done(Done::Replayed { .. })), "{sent:?}");
    let signals = signals(&h, HANDLE);
    assert_eq!((signals.len(), signals[0].status), (1, SignalStatus::Failure));
    assert!(signals[0].reason.contains("deleted while its work ran"), "{}", signals[0].reason);
}

#[test]
fn a_delete_before_the_work_began_still_signals_failure_and_no_work_starts_after() {
    let h = Harness::new();
    let body = long_create(3600, 43_200);
    let delete = delete_of(json!({HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}));
    let sent_ms = h.clock.now_ms();
    // The Create's answer was PUT, and the work's first acquire never reached the store.
    h.store.inject(Op::Acquire, Fault::Pass);
    for _ in 0..settings("us-east-1").store_attempts_max {
        h.store.inject(Op::Acquire, Fault::Transient);
    }
    let first = deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 1);
    assert!(matches!(&first, Disposition::Retry { why, .. } if why.contains("lease store")), "{first:?}");
    assert_eq!(h.bodies(URL).len(), 1);
    assert!(h.memory.snapshot().iter().all(|r| !is_work_id(&r.key.request_id)), "no work yet");
    h.clock.advance_ms(60_000);
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &delete, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    assert_eq!(signals(&h, HANDLE).len(), 1);
    let late = deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 2);
    assert!(matches!(late, Disposition::Done(Done::Superseded)), "{late:?}");
    assert_eq!(h.sink.bodies(HANDLE).len(), 1);
}

#[test]
fn an_update_with_a_new_handle_stops_the_old_work_and_starts_the_new() {
    let h = Harness::new();
    let (create, sent_ms) = start_five_hour_work(&h);
    h.clock.advance_ms(60_000);
    let update = update_of(
        json!({"InProgressForS": "1200", "PollIntervalS": "600", HANDLE_PROPERTY: NEW_HANDLE, TIMEOUT_PROPERTY: "43200"}),
    );
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &update, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    let old = signals(&h, HANDLE);
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].status, SignalStatus::Failure);
    assert!(old[0].reason.contains("new wait condition handle"), "{}", old[0].reason);
    let new = signals(&h, NEW_HANDLE);
    assert_eq!((new.len(), new[0].status), (1, SignalStatus::Success));
    // The Create's copies never signal the old handle again.
    let late = deliver(&h, &h.worker("us-east-1"), &create, sent_ms, 2);
    assert!(matches!(late, Disposition::Done(Done::Superseded)), "{late:?}");
    assert_eq!(h.sink.bodies(HANDLE).len(), 1);
}

#[test]
fn a_handle_that_is_not_an_s3_url_is_refused_without_running_the_provider() {
    let h = Harness::new();
    let body = request(
        "Create",
        "Custom::Counting",
        json!({HANDLE_PROPERTY: "https://attacker.example.com/collect?token=secret", TIMEOUT_PROPERTY: "600"}),
        URL,
    );
    let disposition = h.handle(&h.worker("us-east-1"), &body);
    assert_eq!(answered(&disposition).1, Status::Failed);
    let answer = h.bodies(URL).remove(0);
    assert!(answer.reason.as_deref().unwrap_or_default().contains("not an Amazon S3 endpoint"), "{answer:?}");
    assert!(!answer.reason.as_deref().unwrap_or_default().contains("secret"));
    assert!(is_failed_create_id(&answer.physical_resource_id), "no provider ran");
    assert_eq!(h.counting.calls(), 0);
    assert_eq!(h.sink.all().len(), 1, "nothing PUT anywhere else");
}

#[test]
fn a_work_message_never_reaches_the_queues_receive_limit_over_twelve_hours() {
    let h = Harness::new();
    // Polls asked for every 5 s over 12 hours: the work's floor spreads them out.
    let body = request(
        "Create",
        ECHO_TYPE,
        json!({"InProgressForS": "43000", "PollIntervalS": "5", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}),
        URL,
    );
    let sent_ms = h.clock.now_ms();
    let (done, receives) = follow(&h, |_| h.worker("us-east-1"), &body, sent_ms, 1);
    assert_eq!(answered(&done).1, Status::Success);
    let max = h.worker("us-east-1").settings().max_receive_count;
    assert!(receives < max, "{receives} receives of at most {max}");
    assert_eq!(signals(&h, HANDLE).len(), 1);
}

#[test]
fn a_drained_primary_leaves_a_delete_and_its_work_to_the_active_region() {
    let h = Harness::new();
    start_five_hour_work(&h);
    let waiting = work_record(&h);
    h.clock.advance_ms(60_000);
    let delete = delete_of(json!({"DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}));
    for drained in [h.drained_primary("us-east-1"), h.worker_as("us-east-1", Role::Primary, Activity::Standby)] {
        let left = deliver(&h, &drained, &delete, h.clock.now_ms(), 1);
        assert!(matches!(&left, Disposition::Retry { why, .. } if why.contains("standby")), "{left:?}");
        assert_eq!(work_record(&h), waiting, "the work is untouched");
        assert!(h.sink.bodies(HANDLE).is_empty());
    }
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let (done, _) = follow(&h, |_| secondary.clone(), &delete, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    assert_eq!(signals(&h, HANDLE).len(), 1);
}

#[test]
fn an_update_whose_new_handle_is_refused_fails_and_leaves_the_old_work_running() {
    let h = Harness::new();
    start_five_hour_work(&h);
    let waiting = work_record(&h);
    let update = update_of(json!({HANDLE_PROPERTY: "https://attacker.example.com/h?sig=x", TIMEOUT_PROPERTY: "43200"}));
    let disposition = h.handle(&h.worker("us-east-1"), &update);
    assert_eq!(answered(&disposition).1, Status::Failed);
    assert_eq!(work_record(&h), waiting, "the old work goes on");
    assert!(h.sink.bodies(HANDLE).is_empty());
}

// A stack's later life: handles expire about a day after they are made (CloudFormation's carry
// `X-Amz-Expires=86399`), records are swept after the retention, and a wait condition never
// waits twice on one handle.

const DAY_MS: u64 = 86_400_000;

/// A handle presigned when the harness's clock starts, valid 86,399 s as CloudFormation's are.
const EXPIRING_HANDLE: &str = "https://cloudformation-waitcondition-us-east-1.s3.amazonaws.com/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/demo/guid/Handle3?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20270115T080000Z&X-Amz-Expires=86399&X-Amz-SignedHeaders=host&X-Amz-Signature=h3";

/// A Create of an Echo with `properties` on `handle`, with a wait condition of 12 hours.
fn create_on(handle: &str, mut properties: Value) -> String {
    properties[HANDLE_PROPERTY] = json!(handle);
    properties[TIMEOUT_PROPERTY] = json!("43200");
    request("Create", ECHO_TYPE, properties, URL)
}

/// An Update of the resource from properties naming `old_handle` to `properties`.
fn update_from(old_handle: &str, properties: Value, request_id: &str) -> String {
    let mut update: Value = serde_json::from_str(&request("Update", ECHO_TYPE, properties, OTHER_URL)).expect("json");
    update["RequestId"] = json!(request_id);
    update["OldResourceProperties"] = json!({HANDLE_PROPERTY: old_handle, TIMEOUT_PROPERTY: "43200", "Size": "3"});
    update.to_string()
}

/// The work record of `handle` (one per handle).
fn work_of(h: &Harness, handle: &str) -> Option<LeaseRecord> {
    let body = create_on(handle, json!({}));
    let decoded = crate::request::decode(
        Some(&body),
        &InputPolicy { topic_arns: vec![], raw_delivery: true, urls: UrlPolicy::new(vec![]) },
    )
    .expect("a request");
    let spec = decoded.wait.spec().expect("a wait condition").clone();
    h.memory.get(&crate::work::work_key(&decoded, &spec))
}

#[test]
fn a_delete_a_day_later_records_a_signal_its_expired_handle_never_got_and_is_answered() {
    let h = Harness::new();
    // The work ends at once, but its signal's PUTs fail until the handle has expired.
    let create = create_on(EXPIRING_HANDLE, json!({"Size": "3"}));
    h.sink.inject(PutFault::Pass);
    for _ in 0..settings("us-east-1").put.attempts_max {
        h.sink.inject(PutFault::Fail);
    }
    let first = deliver(&h, &h.worker("us-east-1"), &create, h.clock.now_ms(), 1);
    assert!(matches!(first, Disposition::Retry { .. }), "{first:?}");
    let work = work_of(&h, EXPIRING_HANDLE).expect("the work's record");
    assert_eq!((work.state, work.delivered), (LeaseState::Committed, false));
    h.clock.advance_ms(DAY_MS + 60_000);
    let delete =
        delete_of(json!({"DeleteInProgressForS": "0", HANDLE_PROPERTY: EXPIRING_HANDLE, TIMEOUT_PROPERTY: "43200"}));
    let sent_ms = h.clock.now_ms();
    let done = deliver(&h, &h.worker("us-east-1"), &delete, sent_ms, 1);
    assert_eq!(answered(&done).1, Status::Success, "answered in one delivery");
    assert!(h.sink.bodies(EXPIRING_HANDLE).is_empty(), "nothing PUT to an expired handle");
    let work = work_of(&h, EXPIRING_HANDLE).expect("the work's record");
    assert!(work.delivered, "nothing left to send");
    assert!(
        work.unsent.as_deref().is_some_and(|why| why.contains("expired at 2027-01-16T07:59:59")),
        "{:?}",
        work.unsent
    );
    assert!(h.metrics.events().contains(&MetricEvent::SignalUnsent));
}

#[test]
fn a_delete_a_month_later_after_the_sweeper_took_the_work_is_answered_without_a_signal() {
    let h = Harness::new();
    let create = create_on(EXPIRING_HANDLE, json!({"Size": "3"}));
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &create, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    assert_eq!(signals(&h, EXPIRING_HANDLE).len(), 1);
    h.clock.advance_ms(31 * DAY_MS);
    let swept = h.memory.sweep(h.clock.now_ms());
    assert_eq!(swept, 2, "the answer's record and the work's, a day's retention past");
    let delete =
        delete_of(json!({"DeleteInProgressForS": "0", HANDLE_PROPERTY: EXPIRING_HANDLE, TIMEOUT_PROPERTY: "43200"}));
    let done = deliver(&h, &h.worker("us-west-2"), &delete, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    assert_eq!(h.sink.bodies(EXPIRING_HANDLE).len(), 1, "the one signal, a month ago; nothing since");
    let work = work_of(&h, EXPIRING_HANDLE).expect("the close's record");
    assert!(work.delivered && work.unsent.is_some(), "{work:?}");
}

#[test]
fn a_handle_that_refuses_a_signal_is_never_asked_again() {
    let h = Harness::new();
    let create = create_on(HANDLE, json!({"Size": "3"}));
    h.sink.inject(PutFault::Pass);
    h.sink.inject(PutFault::Refused);
    let done = deliver(&h, &h.worker("us-east-1"), &create, h.clock.now_ms(), 1);
    // The answer went through; the signal was refused once and the work is done without it.
    assert_eq!(answered(&done).1, Status::Success);
    let work = work_of(&h, HANDLE).expect("the work's record");
    assert!(work.delivered && work.unsent.as_deref().is_some_and(|why| why.contains("403")), "{work:?}");
    // A Delete goes straight on, and no copy tries the handle again.
    let delete = delete_of(json!({"DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}));
    assert_eq!(answered(&deliver(&h, &h.worker("us-east-1"), &delete, h.clock.now_ms(), 1)).1, Status::Success);
    assert_eq!(deliver(&h, &h.worker("us-west-2"), &create, h.clock.now_ms(), 1), Disposition::Done(Done::Duplicate));
    assert!(h.sink.bodies(HANDLE).is_empty());
}

#[test]
fn an_update_that_keeps_its_handle_a_day_later_runs_the_provider_and_answers_what_it_came_to() {
    let h = Harness::new();
    let create = create_on(EXPIRING_HANDLE, json!({"Size": "3"}));
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &create, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    h.clock.advance_ms(DAY_MS);
    let keeps = |properties: Value, id| {
        let mut properties = properties;
        properties[HANDLE_PROPERTY] = json!(EXPIRING_HANDLE);
        properties[TIMEOUT_PROPERTY] = json!("43200");
        update_from(EXPIRING_HANDLE, properties, id)
    };
    // The provider's Update runs, and the answer is its outcome, not a hand-over.
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &keeps(json!({"Size": "5"}), "req-u1"), h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    let answer = h.bodies(OTHER_URL).pop().expect("the Update's answer");
    assert_eq!(answer.data.get("Size"), Some(&json!("5")), "{:?}", answer.data);
    assert!(!answer.data.contains_key(WORK_DATA_NAME));
    // Its failure is the Update's, where the stack sees it.
    let failing = keeps(json!({"Size": "6", "FailWith": "quota exceeded"}), "req-u2");
    let (done, _) = follow(&h, |_| h.worker("us-west-2"), &failing, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Failed);
    assert!(h.bodies(OTHER_URL).pop().is_some_and(|body| body.reason.unwrap_or_default().contains("quota exceeded")));
    assert_eq!(h.sink.bodies(EXPIRING_HANDLE).len(), 1, "the Create's one signal; none since");
}

#[test]
fn an_update_rollback_naming_the_old_handle_runs_the_provider_and_closes_the_forward_work() {
    let h = Harness::new();
    let create = create_on(HANDLE, json!({"Size": "3"}));
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &create, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    // The forward Update hands a 20-minute work to a new handle; another resource then fails.
    let forward = update_from(
        HANDLE,
        json!({"InProgressForS": "1200", "PollIntervalS": "600", HANDLE_PROPERTY: NEW_HANDLE, TIMEOUT_PROPERTY: "43200"}),
        "req-forward",
    );
    let handed = deliver(&h, &h.worker("us-east-1"), &forward, h.clock.now_ms(), 1);
    assert!(matches!(handed, Disposition::Retry { .. }), "{handed:?}");
    assert!(h.bodies(OTHER_URL).pop().is_some_and(|body| body.data.contains_key(WORK_DATA_NAME)));
    h.clock.advance_ms(60_000);
    let mut rollback: Value = serde_json::from_str(&update_from(
        NEW_HANDLE,
        json!({"Size": "3", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}),
        "req-rollback",
    ))
    .expect("json");
    rollback["ResponseURL"] = json!(URL.replace("one", "three"));
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &rollback.to_string(), h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success, "never FAILED for want of a wait");
    let answer = h.bodies(&URL.replace("one", "three")).pop().expect("the rollback's answer");
    assert_eq!(answer.data.get("Size"), Some(&json!("3")), "the provider's Update ran: {:?}", answer.data);
    // The forward work was stopped and signalled FAILURE; the old handle got nothing new.
    let forward_signals = signals(&h, NEW_HANDLE);
    assert_eq!((forward_signals.len(), forward_signals[0].status), (1, SignalStatus::Failure));
    assert_eq!(h.sink.bodies(HANDLE).len(), 1);
}

/// The same rollback a month on: the old handle's work record was swept long ago and its URL
/// does not say when it expires, so only the forward work, which replaced it, tells the
/// rollback from an Update naming a new wait (seed 1036365776697746 of the fifth fresh range).
#[test]
fn an_update_rollback_to_a_handle_whose_work_was_swept_runs_the_provider() {
    let h = Harness::new();
    let create = create_on(HANDLE, json!({"Size": "3"}));
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &create, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    let old_work = h
        .memory
        .snapshot()
        .into_iter()
        .find(|record| record.key.request_id.starts_with(crate::wait_condition::WORK_ID_PREFIX))
        .expect("the Create's work record");
    let forward = update_from(
        HANDLE,
        json!({"InProgressForS": "1200", "PollIntervalS": "600", HANDLE_PROPERTY: NEW_HANDLE, TIMEOUT_PROPERTY: "43200"}),
        "req-forward",
    );
    let handed = deliver(&h, &h.worker("us-east-1"), &forward, h.clock.now_ms(), 1);
    assert!(matches!(handed, Disposition::Retry { .. }), "{handed:?}");
    assert!(h.memory.remove(&old_work.key).is_some(), "swept");
    h.clock.advance_ms(60_000);
    let mut rollback: Value = serde_json::from_str(&update_from(
        NEW_HANDLE,
        json!({"Size": "3", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}),
        "req-rollback",
    ))
    .expect("json");
    rollback["ResponseURL"] = json!(URL.replace("one", "three"));
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &rollback.to_string(), h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    let answer = h.bodies(&URL.replace("one", "three")).pop().expect("the rollback's answer");
    assert_eq!(answer.data.get("Size"), Some(&json!("3")), "the provider's Update ran: {:?}", answer.data);
    assert!(!answer.data.contains_key(WORK_DATA_NAME), "a rollback waits on nothing");
    assert_eq!(h.sink.bodies(HANDLE).len(), 1, "the old handle got nothing new");
}

/// A Delete whose work a newer version of cfn-once finished (its record of a newer format, and
/// delivered: the one field every format keeps) goes on to the provider's Delete, as for a work
/// of its own format already signalled, instead of backing off until its deadline.
#[test]
fn a_delete_of_a_work_a_newer_version_finished_goes_on() {
    let h = Harness::new();
    let create = create_on(HANDLE, json!({"Size": "3"}));
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &create, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    let work = h
        .memory
        .snapshot()
        .into_iter()
        .find(|record| record.key.request_id.starts_with(crate::wait_condition::WORK_ID_PREFIX))
        .expect("the Create's work record");
    assert!(work.delivered, "the Create's work signalled");
    let newer = LeaseRecord { format: crate::lease::RECORD_FORMAT + 1, ..work };
    h.memory.put_as_written(newer.clone());
    let delete = delete_of(json!({"DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200"}));
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &delete, h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success, "{done:?}");
    assert_eq!(h.memory.get(&newer.key), Some(newer), "the newer version's record untouched");
    assert_eq!(h.sink.bodies(HANDLE).len(), 1, "the Create's one signal; none since");
}
