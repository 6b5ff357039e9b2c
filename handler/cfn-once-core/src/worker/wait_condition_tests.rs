//! Work past the hour (see `wait_condition`): the answer handed over at once, the work polled
//! under its own fences from either region, one signal to the handle, and the timeout. The
//! Delete or Update that ends the work is in `closes`, a stack's later life (expired handles,
//! swept records, rollbacks) in `later`; both use the helpers here.

use super::waits::{deliver, follow_from as follow};
use super::*;
use crate::wait_condition::{HANDLE_PROPERTY, Signal, SignalStatus, TIMEOUT_PROPERTY, WORK_DATA_NAME, is_work_id};

#[path = "wait_condition_close_tests.rs"]
mod closes;

#[path = "wait_condition_later_tests.rs"]
mod later;

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
