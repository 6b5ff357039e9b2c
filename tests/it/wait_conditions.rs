//! Work past CloudFormation's hour (`cfn_once_core::wait_condition`), end to end on local AWS in
//! two regions: SNS → both regions' queues → the handler → the lease table → a presigned PUT of
//! the answer to the ResponseURL and one of the work's signal to the wait condition handle,
//! both read back from S3, and the work's lease record read with a plain GetItem as an
//! application would.
//!
//! Each test ends where CloudFormation would look: one answer (SUCCESS at once, Data
//! `CfnOnceWork`), one signal to the handle, and the work's record COMMITTED and delivered with
//! exactly the bytes of that signal (S1), whichever region's copies came back how often.

use std::time::{Duration, Instant};

use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::vocabulary::{Disposition, Done};
use cfn_once_core::wait_condition::{Signal, SignalStatus, WORK_DATA_NAME};
use cfn_once_tests::{PlainRecord, Sent, TwoRegions, WaitHandle};
use serde_json::{Value, json};

// The two-region tests' settings: short leases and calls, and a 6 s deadline margin, so a
// work's timeout comes near within seconds of a short wait condition timeout.
use crate::two_regions::{DELAY_S, SETTINGS};

/// The resource's ServiceTimeout in `create-echo-wait.json`.
const SERVICE_TIMEOUT: Duration = Duration::from_secs(60);
/// The answer comes at once, whatever the work: within this of the request.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(60);

/// `create-echo-wait.json` made live, its handle replaced by `handle` with a wait condition
/// `Timeout` of `timeout_s`, and its properties changed by `properties` (`null` removes one).
pub(crate) async fn create(regions: &TwoRegions, handle: &WaitHandle, timeout_s: u64, properties: Value) -> Sent {
    let mut sent = regions.request("create-echo-wait.json").await;
    let declared = &mut sent.request["ResourceProperties"];
    handle.declare(declared, timeout_s);
    for (name, value) in properties.as_object().expect("an object of properties") {
        match value {
            Value::Null => drop(declared.as_object_mut().expect("properties").remove(name)),
            value => declared[name] = value.clone(),
        }
    }
    sent
}

/// What a resource with a wait condition leaves once its message is gone from both queues: one
/// answer, SUCCESS and saying the work continues, committed and delivered; one signal to the
/// handle, for the resource; and the work's record, as a plain GetItem reads it, COMMITTED and
/// delivered with the signal's bytes. Returns the answer, the signal and the work's record.
pub(crate) async fn settled(
    regions: &TwoRegions,
    sent: &Sent,
    handle: &WaitHandle,
) -> (ResponseBody, Signal, PlainRecord) {
    let answers = regions.responses(sent).await;
    assert_eq!(answers.len(), 1, "exactly one PUT of the answer");
    let answer = ResponseBody::parse(&answers[0]).expect("a response body");
    assert_eq!(answer.status, Status::Success, "{answer:?}");
    let continues = answer.data.get(WORK_DATA_NAME).and_then(Value::as_str).unwrap_or_default();
    assert!(continues.starts_with("continues"), "the answer says the work continues: {answer:?}");
    let record = regions.plain_record(&sent.request_key).await.expect("the answer's record");
    assert_eq!((record.state.as_str(), record.delivered), ("COMMITTED", true), "{record:?}");
    assert_eq!(record.response.as_deref(), Some(&answers[0][..]), "S1: the answer PUT is the committed bytes");

    let mut signals = handle.signals().await;
    assert_eq!(signals.len(), 1, "exactly one PUT to the handle: {signals:?}");
    let (bytes, signal) = signals.remove(0);
    assert_eq!(Some(signal.unique_id.as_str()), sent.request["LogicalResourceId"].as_str());
    let work = regions.plain_record(&handle.work_key(sent)).await.expect("the work's record");
    assert_eq!((work.state.as_str(), work.delivered), ("COMMITTED", true), "{work:?}");
    assert_eq!(work.response.as_deref(), Some(&bytes[..]), "S1: the signal PUT is the committed bytes");
    assert_eq!(regions.dead_letters().await, 0, "nothing reached a DLQ");
    (answer, signal, work)
}

#[tokio::test]
async fn a_work_outliving_its_service_timeout_is_signalled_success_from_the_secondary_after_the_primary_dies() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let (primary, secondary) = (regions.env.file.primary_region.clone(), regions.env.file.secondary_region.clone());
    // The fixture: ServiceTimeout 60, Echo in progress for 75 s, polled every 5 s.
    let handle = regions.wait_handle("SlowGreetingHandle").await;
    let sent = create(&regions, &handle, 180, json!({})).await;
    let work_key = handle.work_key(&sent);
    let published = Instant::now();
    regions.publish(&sent).await;
    // No later than SNS stamped the request: the ServiceTimeout counts from then.
    let sent_at = Instant::now();
    let (_, answered_after) = regions.wait_for_answer(&sent, published, TIMEOUT).await;
    assert!(answered_after < ANSWER_WITHIN, "answered at once, not after the work: {answered_after:?}");

    // The primary polls the work past the ServiceTimeout, where an ordinary request's
    // message would be settled; then its region dies mid-work.
    tokio::time::sleep((SERVICE_TIMEOUT + Duration::from_secs(2)).saturating_sub(sent_at.elapsed())).await;
    let polling = regions.plain_record(&work_key).await.expect("the work's record");
    assert_eq!(polling.region(), primary, "the primary was polling: {polling:?}");
    assert!(["WAITING", "RUNNING"].contains(&polling.state.as_str()), "{polling:?}");
    assert!(polling.polls.is_some_and(|polls| polls >= 5), "about one poll per 5 s: {polling:?}");
    assert!(handle.puts().await.is_empty(), "nothing signalled while the work runs");
    regions.kill_primary().await;

    let ((_, signal), signalled_after) = handle.wait_for_signal(sent_at, SERVICE_TIMEOUT + TIMEOUT).await;
    println!(
        "answered after {answered_after:?}; primary killed after {:?} ({} polls); signalled {:?} after {signalled_after:?}",
        SERVICE_TIMEOUT + Duration::from_secs(2),
        polling.polls.unwrap_or(0),
        signal.status,
    );
    assert!(signalled_after > SERVICE_TIMEOUT, "signalled after the ServiceTimeout: {signalled_after:?}");

    // The primary comes back: its copy finds the answer and the signal delivered.
    regions.primary.start();
    regions.drain(TIMEOUT).await;
    let (_, signal, work) = settled(&regions, &sent, &handle).await;
    assert_eq!(signal.status, SignalStatus::Success, "{signal:?}");
    let data: Value = serde_json::from_str(&signal.data).expect("the signal's Data is JSON text");
    assert_eq!(data["Message"], json!("hello, after the ServiceTimeout"), "the provider's Data goes to the signal");
    assert!(data.get("CfnOnceWaitHandle").is_none(), "the handle is never the provider's to see: {data}");
    assert_eq!(work.region(), secondary, "the secondary signalled: {work:?}");
    assert!(work.fence > polling.fence, "under a fence above the primary's: {work:?} after {polling:?}");
    regions.stop().await;
}

#[tokio::test]
async fn a_provider_error_is_signalled_failure() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let handle = regions.wait_handle("SlowGreetingHandle").await;
    let sent = create(&regions, &handle, 180, json!({"InProgressForS": null, "FailWith": "quota exceeded"})).await;
    let published = Instant::now();
    regions.publish(&sent).await;
    let (_, signalled_after) = handle.wait_for_signal(published, TIMEOUT).await;
    // Both regions' copies, the secondary's after its queue's delay, find everything delivered.
    regions.drain(TIMEOUT).await;
    let (answer, signal, _) = settled(&regions, &sent, &handle).await;
    println!("signalled {:?} after {signalled_after:?}: {}", signal.status, signal.reason);
    assert_eq!(answer.status, Status::Success, "the answer is SUCCESS whatever the work comes to");
    assert_eq!(signal.status, SignalStatus::Failure);
    assert!(signal.reason.contains("quota exceeded"), "{}", signal.reason);
    regions.stop().await;
}

#[tokio::test]
async fn a_work_still_running_at_its_timeout_is_signalled_failure_before_it() {
    const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let handle = regions.wait_handle("SlowGreetingHandle").await;
    let sent = create(&regions, &handle, WAIT_TIMEOUT.as_secs(), json!({"InProgressForS": "600"})).await;
    let published = Instant::now();
    regions.publish(&sent).await;
    let ((_, signal), signalled_after) = handle.wait_for_signal(published, TIMEOUT).await;
    println!("signalled {:?} after {signalled_after:?}: {}", signal.status, signal.reason);
    assert!(signalled_after < WAIT_TIMEOUT, "signalled before the wait condition timed out: {signalled_after:?}");
    regions.drain(TIMEOUT).await;
    let (_, signal, _) = settled(&regions, &sent, &handle).await;
    assert_eq!(signal.status, SignalStatus::Failure);
    assert!(signal.reason.contains("still in progress"), "{}", signal.reason);
    assert!(signal.reason.contains("the wait condition's timeout (CfnOnceWaitTimeout)"), "{}", signal.reason);
    regions.stop().await;
}

#[tokio::test]
async fn a_delete_during_the_work_stops_it_signals_failure_then_answers_the_delete() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let handle = regions.wait_handle("SlowGreetingHandle").await;
    let create = create(&regions, &handle, 900, json!({"InProgressForS": "600"})).await;
    let work_key = handle.work_key(&create);
    let published = Instant::now();
    regions.publish(&create).await;
    let (answer, _) = regions.wait_for_answer(&create, published, TIMEOUT).await;
    let physical_id = ResponseBody::parse(&answer).expect("a response body").physical_resource_id;
    loop {
        let record = regions.plain_record(&work_key).await;
        if record.is_some_and(|work| work.polls.is_some_and(|polls| polls >= 1)) {
            break;
        }
        assert!(published.elapsed() < TIMEOUT, "the work was never polled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The stack is deleted while the work runs: CloudFormation sends the resource's current
    // properties, which name the handle.
    let mut delete = regions.request("create-echo-wait.json").await;
    delete.request["RequestType"] = json!("Delete");
    delete.request["PhysicalResourceId"] = json!(physical_id);
    delete.request["ResourceProperties"] = create.request["ResourceProperties"].clone();
    let delete_sent = Instant::now();
    regions.publish(&delete).await;
    let (deleted, delete_answered_after) = regions.wait_for_answer(&delete, delete_sent, TIMEOUT).await;
    let deleted = ResponseBody::parse(&deleted).expect("a response body");
    assert_eq!((deleted.status, deleted.physical_resource_id.as_str()), (Status::Success, physical_id.as_str()));

    // The signal came first: the work's record was marked delivered before the Delete's own
    // lease was first taken, and S3 has the signal no later than the Delete's answer.
    let mut signals = handle.signals().await;
    assert_eq!(signals.len(), 1, "the Delete was answered after the work's one signal");
    let (_, signal) = signals.remove(0);
    println!(
        "Delete answered {delete_answered_after:?} after it was sent; the work signalled {:?}: {}",
        signal.status, signal.reason
    );
    let closed = regions.plain_record(&work_key).await.expect("the work's record");
    let delete_record = regions.plain_record(&delete.request_key).await.expect("the Delete's record");
    assert!(closed.delivered, "{closed:?}");
    assert!(
        closed.updated_ms <= delete_record.created_ms,
        "the signal was delivered (at {} ms) before the Delete's lease was taken (at {} ms)",
        closed.updated_ms,
        delete_record.created_ms
    );
    let signal_put = handle.puts().await.remove(0).last_modified;
    let answer_put = regions.answer_puts(&delete).await.remove(0).last_modified;
    assert!(signal_put <= answer_put, "S3 stored the signal at {signal_put:?}, the answer at {answer_put:?}");

    // The Create's copies come back at their next poll in both regions, find the work closed,
    // and stop: nothing writes the work's record again, nothing is signalled again.
    regions.drain(TIMEOUT).await;
    assert_eq!(regions.plain_record(&work_key).await.as_ref(), Some(&closed), "the work's record never changed again");
    let (_, signal, _) = settled(&regions, &create, &handle).await;
    assert_eq!(signal.status, SignalStatus::Failure);
    assert!(
        signal.reason.starts_with("Custom::Echo Delete: the resource was deleted while its work ran"),
        "{}",
        signal.reason
    );
    for observed in [&regions.primary_observed, &regions.secondary_observed] {
        let copies = observed.dispositions(&create);
        assert_eq!(copies.last(), Some(&Disposition::Done(Done::Superseded)), "the Create's copy stopped: {copies:?}");
    }
    assert_eq!(regions.responses(&delete).await.len(), 1, "the Delete was answered once");
    regions.stop().await;
}
