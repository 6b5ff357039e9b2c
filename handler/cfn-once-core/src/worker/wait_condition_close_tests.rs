//! Closing a work: a Delete, or an Update naming a new handle, takes the work's lease (from a
//! poll in flight too), signals FAILURE if nothing was signalled yet, and only then is answered;
//! a close that dies leaves a signal the work's own copy sends; a close that cannot finish
//! answers its request FAILED in the deadline margin, before the deadline, saying why.

use super::*;

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
    // Seed 1211045: 30 s of the Delete's time left (of 110: its whole 20 s margin), and a 30 s
    // poll took the work's lease.
    let h = Harness::new();
    start_five_hour_work(&h);
    h.clock.advance_ms(600_000);
    poll_in_flight(&h, "us-west-2/batch-mate/1");
    let delete = delete_of(json!({
        "DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200", "ServiceTimeout": "110",
    }));
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let done = deliver(&h, &secondary, &delete, h.clock.now_ms() - 80_000, 1);
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

/// The Delete of the five-hour work with a `service_timeout_s` ServiceTimeout.
fn short_delete(service_timeout_s: u64) -> String {
    delete_of(json!({
        "DeleteInProgressForS": "0", HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200",
        "ServiceTimeout": service_timeout_s.to_string(),
    }))
}

#[test]
fn a_close_that_cannot_deliver_its_signal_answers_the_delete_failed_in_its_margin_saying_why() {
    // A retained-then-deleted stack, or S3 failing for the handle's bucket: the close commits
    // the work's FAILURE and cannot PUT it. The Delete used to be retried until CloudFormation
    // gave up after its whole ServiceTimeout; it is answered FAILED before its deadline.
    let h = Harness::new();
    let (create, sent_ms) = start_five_hour_work(&h);
    h.clock.advance_ms(30 * 60 * 1000);
    h.sink.fail_url(HANDLE, PutFault::Fail);
    let delete = short_delete(300);
    let delete_sent_ms = h.clock.now_ms();
    let deadline_ms = delete_sent_ms + 300_000;
    let margin_ms = settings("us-east-1").deadline_margin_ms;
    let first = deliver(&h, &h.worker("us-east-1"), &delete, delete_sent_ms, 1);
    assert!(
        matches!(&first, Disposition::Retry { why, .. } if why.contains("could not send the work's FAILURE signal")),
        "retried while the Delete can still be served: {first:?}"
    );
    assert!(h.sink.bodies(OTHER_URL).is_empty());
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &delete, delete_sent_ms, 2);
    assert_eq!(answered(&done).1, Status::Failed);
    let now_ms = h.clock.now_ms();
    assert!(now_ms < deadline_ms, "answered before the deadline: {} s late", (now_ms - deadline_ms) / 1000);
    assert!(now_ms >= deadline_ms - margin_ms, "answered FAILED only in the deadline margin");
    let answers = h.bodies(OTHER_URL);
    assert_eq!(answers.len(), 1);
    let reason = answers[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("could not close the work of its wait condition"), "{reason}");
    assert!(reason.contains("injected 503 Slow Down"), "it says why: {reason}");
    assert!(!reason.contains("X-Amz-Signature"), "the handle is a secret: {reason}");
    // The close committed the work's FAILURE under its fence: no poll commits after it, and
    // the work's own copy delivers it once the handle's bucket answers again.
    let work = work_record(&h);
    assert_eq!((work.state, work.delivered), (LeaseState::Committed, false));
    h.sink.heal(HANDLE);
    let sent = deliver(&h, &h.worker("us-west-2"), &create, sent_ms, 2);
    assert_eq!(sent, Disposition::Done(Done::Replayed { fence: work.fence }));
    let signals = signals(&h, HANDLE);
    assert_eq!((signals.len(), signals[0].status), (1, SignalStatus::Failure));
    // The stack's delete, tried again, closes nothing more and is answered SUCCESS.
    let mut again: Value = serde_json::from_str(&short_delete(300)).expect("json");
    again["RequestId"] = json!("req-delete-again");
    again["ResponseURL"] = json!(THIRD_URL);
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &again.to_string(), h.clock.now_ms(), 1);
    assert_eq!(answered(&done).1, Status::Success);
    assert_eq!(h.sink.bodies(HANDLE).len(), 1, "one signal");
    assert_eq!(h.bodies(OTHER_URL).len(), 1, "the first Delete was answered once");
}

#[test]
fn a_close_that_recovers_before_the_margin_still_answers_the_delete_success() {
    let h = Harness::new();
    start_five_hour_work(&h);
    h.clock.advance_ms(30 * 60 * 1000);
    h.sink.fail_url(HANDLE, PutFault::Fail);
    let delete = short_delete(300);
    let delete_sent_ms = h.clock.now_ms();
    let first = deliver(&h, &h.worker("us-east-1"), &delete, delete_sent_ms, 1);
    let Disposition::Retry { delay_s, .. } = first else { panic!("{first:?}") };
    h.clock.advance_ms(u64::from(delay_s) * 1000);
    h.sink.heal(HANDLE);
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &delete, delete_sent_ms, 2);
    assert_eq!(answered(&done).1, Status::Success, "bookkeeping never fails a Delete that can be served");
    let signals = signals(&h, HANDLE);
    assert_eq!((signals.len(), signals[0].status), (1, SignalStatus::Failure));
    assert!(answer_record(&h, "req-delete").updated_ms >= work_record(&h).updated_ms, "the signal came first");
}

#[test]
fn a_close_that_hangs_in_the_margin_is_cut_in_time_for_the_deletes_failed_answer() {
    // The Delete's copy that reaches the handler 15 s before its deadline (its primary died):
    // the PUTs of the close's signal hang, and the Delete is still answered before the
    // deadline (the PUT's own attempts would have run past it).
    let h = Harness::new();
    let (create, sent_ms) = start_five_hour_work(&h);
    h.clock.advance_ms(30 * 60 * 1000);
    let delete = short_delete(60);
    let delete_sent_ms = h.clock.now_ms() - 45_000;
    h.sink.fail_url(HANDLE, PutFault::Hang);
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let done = deliver(&h, &secondary, &delete, delete_sent_ms, 1);
    assert_eq!(answered(&done).1, Status::Failed);
    assert!(h.clock.now_ms() < delete_sent_ms + 60_000, "before the deadline");
    let reason = h.bodies(OTHER_URL)[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("could not close the work") && reason.contains("did not finish within"), "{reason}");
    // The close's FAILURE was committed: the work's copy sends it once the bucket answers.
    h.sink.heal(HANDLE);
    h.clock.advance_ms(60_000);
    let sent = deliver(&h, &h.worker("us-east-1"), &create, sent_ms, 2);
    assert!(matches!(sent, Disposition::Done(Done::Replayed { .. })), "{sent:?}");
    assert_eq!(signals(&h, HANDLE).len(), 1);
}

#[test]
fn an_update_whose_close_cannot_finish_is_answered_failed_in_its_margin_and_starts_no_work() {
    let h = Harness::new();
    start_five_hour_work(&h);
    h.clock.advance_ms(60_000);
    h.sink.fail_url(HANDLE, PutFault::Fail);
    let update = update_of(json!({
        "InProgressForS": "1200", "PollIntervalS": "600", HANDLE_PROPERTY: NEW_HANDLE, TIMEOUT_PROPERTY: "43200",
        "ServiceTimeout": "300",
    }));
    let sent_ms = h.clock.now_ms();
    let (done, _) = follow(&h, |_| h.worker("us-east-1"), &update, sent_ms, 1);
    assert_eq!(answered(&done).1, Status::Failed);
    assert!(h.clock.now_ms() < sent_ms + 300_000, "before the deadline");
    let reason = h.bodies(OTHER_URL)[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("Custom::Echo Update failed: could not close the work"), "{reason}");
    assert!(h.sink.bodies(NEW_HANDLE).is_empty(), "no work on the new handle");
    assert!(h.memory.snapshot().iter().filter(|r| is_work_id(&r.key.request_id)).count() == 1, "the old work only");
}
