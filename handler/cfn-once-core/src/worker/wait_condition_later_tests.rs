//! A stack's later life: handles expire about a day after they are made (CloudFormation's carry
//! `X-Amz-Expires=86399`), records are swept after the retention, and a wait condition never
//! waits twice on one handle.

use super::*;

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
        &InputPolicy {
            topic_arns: vec![],
            raw_delivery: true,
            urls: UrlPolicy::new(vec![]),
            privileged_topic_arns: vec![],
        },
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
