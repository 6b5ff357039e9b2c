//! What a delivery answers: the provider's outcome in the body, FAILED with a readable Reason
//! for what cannot run, the Deletes that must succeed (rollbacks among them), an outcome nobody
//! saw run again under a higher fence, and a record of a newer format left alone.

use super::*;

#[test]
fn happy_path_answers_once_with_echoed_data() {
    let h = Harness::new();
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({"Colour": "blue", "Size": "5"})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    let bodies = h.bodies(URL);
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0].data, BTreeMap::from([("Colour".into(), json!("blue")), ("Size".into(), json!("5"))]));
    let record = h.record();
    assert_eq!((record.state, record.delivered, record.fence), (LeaseState::Committed, true, 1));
    assert_eq!(h.store.calls(Op::Read), 0, "the happy path reads nothing");
    assert_eq!(h.store.calls(Op::Acquire) + h.store.calls(Op::Commit) + h.store.calls(Op::MarkDelivered), 3);
    assert_eq!(h.store.calls(Op::Heartbeat), 0, "a quick provider needs no heartbeat");
}

#[test]
fn echo_answers_the_physical_id_it_is_given_on_create_and_update() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    h.handle(&worker, &echo_create(json!({"PhysicalId": "network-1"})));
    let update = request("Update", ECHO_TYPE, json!({"PhysicalId": "network-2"}), OTHER_URL);
    h.handle(&worker, &update.replace("req-1", "req-2"));
    assert_eq!(h.bodies(URL)[0].physical_resource_id, "network-1");
    assert_eq!(h.bodies(OTHER_URL)[0].physical_resource_id, "network-2", "a new id: CloudFormation replaces");
    let plain = request("Update", ECHO_TYPE, json!({}), THIRD_URL);
    h.handle(&worker, &plain.replace("req-1", "req-3"));
    assert_eq!(h.bodies(THIRD_URL)[0].physical_resource_id, "Thing-existing", "without it, the id is kept");
}

#[test]
fn a_bad_property_is_answered_failed_with_a_readable_reason() {
    let h = Harness::new();
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({"DelayMs": "soon"})));
    assert_eq!(answered(&disposition), (1, Status::Failed));
    let body = &h.bodies(URL)[0];
    assert_eq!(
        body.reason.as_deref(),
        Some("Custom::Echo Create failed: invalid property DelayMs: invalid value: string \"soon\", expected u64")
    );
    // Echo reads its options itself, so its code ran: the rollback Delete must reach it.
    assert_eq!(body.physical_resource_id, crate::response::default_physical_id(&decoded(&echo_create(json!({})))));
}

#[test]
fn transient_provider_errors_are_retried() {
    let h = Harness::new();
    h.counting.fail_transiently(2);
    let body = request("Create", "Custom::Counting", json!({}), URL);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Success));
    assert_eq!(h.counting.calls(), 3);

    // A throttling burst longer than a few attempts (what `make soak` found: three attempts
    // inside a 7 s burst answered a stack FAILED): retried for the retry budget, not a count.
    let h = Harness::new();
    h.counting.fail_transiently(8);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Success));
    assert_eq!(h.counting.calls(), 9);

    let h = Harness::new();
    h.counting.fail_transiently(u32::MAX);
    let started_ms = h.clock.now_ms();
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Failed));
    let reason = h.bodies(URL)[0].reason.clone().expect("reason");
    assert!(reason.starts_with("Custom::Counting Create failed after "), "{reason}");
    assert!(reason.ends_with("s of transient errors: downstream throttled"), "{reason}");
    // Given up within the budget (10 s here), not after a count of attempts.
    assert!(h.clock.now_ms() - started_ms <= 10_000 + 1_000, "retried for {} ms", h.clock.now_ms() - started_ms);
    assert!(h.counting.calls() > 3, "{} calls", h.counting.calls());
}

#[test]
fn a_reused_request_id_is_a_new_attempt_and_the_old_one_is_superseded() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let first = echo_create(json!({"V": "1"}));
    let retried = request("Create", ECHO_TYPE, json!({"V": "2"}), OTHER_URL);
    assert_eq!(answered(&h.handle(&worker, &first)), (1, Status::Success));
    assert_eq!(answered(&h.handle(&worker, &retried)), (2, Status::Success));
    assert_eq!(h.bodies(OTHER_URL)[0].data["V"], json!("2"), "the old outcome was not replayed");
    assert_eq!(h.handle(&worker, &first), Disposition::Done(Done::Superseded));
    assert_eq!(h.handle(&worker, &retried), Disposition::Done(Done::Duplicate));
    assert_eq!((h.sink.bodies(URL).len(), h.sink.bodies(OTHER_URL).len()), (1, 1));
}

#[test]
fn deletes_that_must_succeed() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let mut failed_create =
        serde_json::from_str::<Value>(&request("Delete", "Custom::Counting", json!({}), URL)).expect("json");
    failed_create["PhysicalResourceId"] = json!("cfn-once-failed-create-0123456789abcdef");
    assert_eq!(answered(&h.handle(&worker, &failed_create.to_string())), (1, Status::Success));
    assert_eq!(h.counting.calls(), 0, "no provider call for a Create that failed");
    assert_eq!(h.bodies(URL)[0].physical_resource_id, "cfn-once-failed-create-0123456789abcdef");

    let h = Harness::new();
    let unknown_type = request("Delete", "Custom::Nobody", json!({}), URL);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &unknown_type)), (1, Status::Success));

    let h = Harness::new();
    let unknown_create = request("Create", "Custom::Nobody", json!({}), URL);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &unknown_create)), (1, Status::Failed));
    assert!(
        h.bodies(URL)[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("no provider serves ResourceType Custom::Nobody"))
    );
}

#[test]
fn undeliverable_records_are_left_for_the_dlq() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let evil = echo_create(json!({}))
        .replace("cloudformation-custom-resource-response-useast1.s3.amazonaws.com", "evil.example.com");
    assert!(matches!(h.handle(&worker, &evil), Disposition::DeadLetter { .. }));
    assert!(matches!(h.handle(&worker, "garbage"), Disposition::DeadLetter { .. }));
    assert!(h.sink.all().is_empty());
    assert!(h.memory.snapshot().is_empty(), "no lease is taken for input nobody can be answered for");
}

#[test]
fn malformed_but_addressable_input_is_answered_failed_once() {
    let h = Harness::new();
    let mut malformed = serde_json::from_str::<Value>(&echo_create(json!({}))).expect("json");
    malformed["RequestType"] = json!("Upsert");
    let body = malformed.to_string();
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Failed));
    assert_eq!(h.handle(&h.worker("us-east-1"), &body), Disposition::Done(Done::Duplicate));
    assert!(
        h.bodies(URL)[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("\"Upsert\" is not one of Create, Update, Delete"))
    );
}

#[test]
fn the_record_is_keyed_by_stack_and_request() {
    let h = Harness::new();
    h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    let record = h.record();
    assert_eq!(
        record.key,
        RequestKey {
            stack_id: crate::request::StackArn::parse("arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid")
                .expect("a stack ARN"),
            request_id: "req-1".into()
        }
    );
    assert!(record.owner.starts_with("us-east-1/inv/"));
    assert_eq!(record.expires_ms, START_MS + 86_400_000);
}

#[test]
fn metrics_count_what_happened() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "4000"}));
    let invocation = h.invocation(900_000);
    let sent_ms = Some(h.clock.now_ms() - 1_500);
    let (east, west) = (h.worker("us-east-1"), h.worker("us-west-2"));
    let both = futures_util::future::join(
        east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation),
        west.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation),
    );
    drive(&h.clock, both);
    h.handle(&east, "not json");
    assert_eq!(
        h.metrics.events(),
        vec![
            MetricEvent::LeaseAcquired { fence: 1, poll: false },
            MetricEvent::LeaseContended,
            // Sent 1.5 s before, answered after the 4 s provider.
            MetricEvent::ResponseSent { status: Status::Success, latency_ms: Some(5_500) },
            MetricEvent::DlqBound,
        ]
    );
}

#[test]
fn a_create_abandoned_at_its_deadline_is_cleaned_up_by_its_rollback_delete() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let body = request("Create", "Custom::Counting", json!({"DelayMs": "600000"}), URL);
    // The provider ran (and may have written) but did not finish within the invocation.
    let invocation = h.invocation(60_000);
    let disposition =
        drive(&h.clock, worker.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation));
    assert_eq!(answered(&disposition), (1, Status::Failed));
    let failed = h.bodies(URL).remove(0);
    assert!(!is_failed_create_id(&failed.physical_resource_id), "{failed:?}");
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(answered(&h.handle(&worker, &rollback_delete(&failed))).1, Status::Success);
    assert_eq!(h.counting.calls(), 2, "the rollback Delete reached the provider, which may clean up");
}

#[test]
fn a_create_failed_after_a_takeover_is_cleaned_up_by_its_rollback_delete() {
    let h = Harness::new();
    let body = request("Create", "Custom::Counting", json!({"DelayMs": "60000", "ServiceTimeout": "60"}), URL);
    let invocation = h.invocation(900_000);
    // East runs the provider, then crashes; by the time anyone looks again less than half the
    // 15 s margin of this 60 s request is left (no last chance to run it).
    let sent_ms = run_then_crash(&h, &body);
    h.clock.advance_ms(53_000);
    let west = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let late = drive(&h.clock, west.handle(QueueRecord { body: Some(&body), receive_count: 2, sent_ms }, &invocation));
    assert_eq!(answered(&late), (2, Status::Failed), "taken over near the deadline: FAILED without running");
    assert_eq!(h.counting.calls(), 1);
    let failed = h.bodies(URL).remove(0);
    assert!(!is_failed_create_id(&failed.physical_resource_id), "east's provider ran: {failed:?}");
    assert_eq!(answered(&h.handle(&west, &rollback_delete(&failed))).1, Status::Success);
    assert_eq!(h.counting.calls(), 2, "the rollback Delete reached the provider");
}

#[test]
fn a_create_no_provider_ran_for_skips_the_provider_on_its_rollback_delete() {
    let h = Harness::new();
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": "120"}), URL);
    // 8 s left: less than half the 20 s margin, so not even a last chance to run it.
    assert_eq!(answered(&handle_sent(&h, &standby, &body, 112_000)), (1, Status::Failed));
    let failed = h.bodies(URL).remove(0);
    assert!(is_failed_create_id(&failed.physical_resource_id), "nobody ever ran it: {failed:?}");
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &rollback_delete(&failed))).1, Status::Success);
    assert_eq!(h.counting.calls(), 0, "nothing can exist, so the provider is not asked");
}

#[test]
fn a_provider_whose_outcome_is_unknown_runs_again_only_under_a_higher_fence() {
    let h = Harness::new();
    h.counting.lose_answers(1);
    let body = request("Create", "Custom::Counting", json!({"A": "1"}), URL);
    let first = h.handle(&h.worker("us-east-1"), &body);
    let delay_s = match &first {
        Disposition::Retry { delay_s, why } if why.contains("runs again under a higher fence") => *delay_s,
        other => panic!("{other:?}"),
    };
    assert!(h.sink.all().is_empty(), "nothing answered on an unknown outcome");
    assert_eq!(h.record().lease_until_ms, 0, "the lease was ended, for the next run to take over at once");
    h.clock.advance_ms(u64::from(delay_s) * 1000);
    // Either region's copy runs it again, under the next fence, told whose run it follows.
    assert_eq!(answered(&h.handle(&h.worker("us-west-2"), &body)), (2, Status::Success));
    assert_eq!(h.counting.runs(), vec![(1, None), (2, Some(1))], "never twice under one fence");
    assert_eq!(h.bodies(URL).len(), 1);
}

#[test]
fn a_transient_failure_runs_again_under_the_same_fence() {
    // Certainly not applied: nothing ran, so the same fence is right, and cheaper.
    let h = Harness::new();
    h.counting.fail_transiently(1);
    let body = request("Create", "Custom::Counting", json!({"A": "1"}), URL);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Success));
    assert_eq!(h.counting.runs(), vec![(1, None), (1, None)]);
}

#[test]
fn an_unknown_outcome_with_no_time_to_run_again_is_answered_failed_saying_so() {
    let h = Harness::new();
    h.counting.lose_answers(1);
    // 24 s left of a ServiceTimeout of 104 s: its 20 s deadline margin begins before a second
    // run could take the lease (a backoff floor of 4 s and the skew margin away).
    let body = request("Create", "Custom::Counting", json!({"A": "1", "ServiceTimeout": "104"}), URL);
    let answered = answered(&handle_sent(&h, &h.worker("us-east-1"), &body, 80_000));
    assert_eq!(answered, (1, Status::Failed));
    let reason = h.bodies(URL)[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("the outcome of its last call is unknown"), "{reason}");
    assert!(reason.contains("timed out after it was sent"), "{reason}");
    assert_eq!(h.counting.runs(), vec![(1, None)], "not run again under the same fence");
}

/// A record a newer version of cfn-once wrote (its format above this handler's): the delivery
/// neither runs the provider, nor answers, nor writes the record; it comes back later, says why,
/// and counts it. A handler of the newer version, or this one upgraded, answers it.
#[test]
fn a_record_of_a_newer_format_is_left_to_a_handler_that_knows_it() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let body = request("Create", "Custom::Counting", json!({"DelayMs": "4000"}), URL);
    // The newer version took the lease and went away before answering.
    let invocation = h.invocation(900_000);
    let first = worker.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation);
    let mut first = Box::pin(first);
    let waker = futures_util::task::noop_waker();
    let _ = first.as_mut().poll(&mut std::task::Context::from_waker(&waker));
    drop(first);
    let newer = LeaseRecord { format: crate::lease::RECORD_FORMAT + 1, ..h.record() };
    h.memory.put_as_written(newer.clone());
    // Its lease has long expired: this version would take it over, were it of its format.
    h.clock.advance_ms(60_000);
    for receive_count in 1..=3 {
        let left = drive(
            &h.clock,
            worker.handle(QueueRecord { body: Some(&body), receive_count, sent_ms: None }, &h.invocation(900_000)),
        );
        assert!(
            matches!(&left, Disposition::Retry { why, .. } if why.contains("newer than this handler's")),
            "{left:?}"
        );
    }
    assert_eq!(h.record(), newer, "the record is as the newer version left it");
    assert!(h.sink.bodies(URL).is_empty(), "answered although a newer version holds the request");
    let counted = h.metrics.events().iter().filter(|event| matches!(event, MetricEvent::NewerFormat { .. })).count();
    assert_eq!(counted, 3, "each delivery that left it counted");
}

/// A request a newer version finished (its record delivered, in a newer format): a copy
/// arriving here is dropped, not backed off until the dead-letter queue, and writes nothing.
#[test]
fn a_request_a_newer_format_finished_is_dropped_here() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let body = request("Create", "Custom::Counting", json!({}), URL);
    assert_eq!(answered(&h.handle(&worker, &body)), (1, Status::Success));
    let finished = LeaseRecord { format: crate::lease::RECORD_FORMAT + 1, ..h.record() };
    assert!(finished.delivered);
    h.memory.put_as_written(finished.clone());
    assert_eq!(h.handle(&h.worker("us-west-2"), &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.record(), finished, "untouched");
    assert_eq!((h.counting.calls(), h.sink.bodies(URL).len()), (1, 1), "nothing run or PUT again");
}
