//! A stack's later life, end to end on local AWS in two regions: a resource whose work went to
//! a wait condition (`cfn_once_core::wait_condition`) lives on long after its handle's presigned
//! URL expired (CloudFormation signs them for 86,399 s) and after the sweeper took its records,
//! and is then deleted, updated keeping its handle, or rolled back to it.
//!
//! A day or a month is simulated, not waited for: each handle is presigned as if made a day
//! ago, so it expires seconds into the test, and the sweeper is run with a clock 31 days on. The
//! local S3 refuses an expired URL with 403 as S3 does (`moto_server.py`), so a handler that PUT
//! to one would be refused where CloudFormation's would be. Each test ends where CloudFormation
//! would look: the answers and the signals read from S3's versions, and the work's record read
//! with a plain GetItem.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use cfn_once::sweeper::sweep;
use cfn_once_core::put::{PutError, ResponseSink};
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::response_url::ResponseUrl;
use cfn_once_core::wait_condition::{HANDLE_PROPERTY, Signal, SignalStatus, WORK_DATA_NAME};
use cfn_once_core::worker::Ports;
use cfn_once_local::provision;
use cfn_once_tests::{
    CLOUDFORMATION_HANDLE_EXPIRES_S, LocalRegion, Options, PlainRecord, Sent, TwoRegions, WaitHandle,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::two_regions::{DELAY_S, SETTINGS};
use crate::wait_conditions::{create, settled};

/// What a handle has left when its Create is sent: enough for the Create to be handed over (a
/// handle expiring within the deadline margin, 6 s here, is not waited on) and its work, done
/// at once, signalled; then it expires within seconds.
const HANDLE_LEFT: Duration = Duration::from_secs(15);
/// The wait condition's `Timeout`: 12 hours, so the handle's expiry is the work's deadline.
const WAIT_TIMEOUT_S: u64 = 43_200;
const TIMEOUT: Duration = Duration::from_secs(60);
const DAY_MS: u64 = 86_400_000;

/// A PUT of `body` to `url` (a presigned URL on moto's plain endpoint) with nothing but the URL
/// to authorize it, as CloudFormation's and the handler's PUTs are: the status and the body.
async fn put(url: &str, body: &[u8]) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("a URL on moto's plain endpoint");
    let (authority, path) = rest.split_at(rest.find('/').expect("a path"));
    let mut stream = tokio::net::TcpStream::connect(authority).await.expect("connect to moto");
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("send the head");
    stream.write_all(body).await.expect("send the body");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read the response");
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split(' ').nth(1).and_then(|code| code.parse().ok()).expect("a status line");
    let body = text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn the_local_s3_refuses_an_expired_presigned_put_with_403_and_stores_nothing() {
    let region = LocalRegion::new(Options::default()).await;
    let (bucket, s3) = (&region.bucket, &region.s3);
    let a_minute_ago = SystemTime::now() - Duration::from_secs(60);
    let expired = provision::presigned_put_url_signed_at(s3, bucket, "expired", a_minute_ago, 30).await.expect("url");
    let fresh = provision::presigned_put_url_signed_at(s3, bucket, "fresh", SystemTime::now(), 30).await.expect("url");
    // SigV2's form, the expiry in epoch seconds (moto checks no signature).
    let epoch_s = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("after the epoch").as_secs();
    let v2 = |key: &str, expires_s: u64| {
        format!("{}/{bucket}/{key}?AWSAccessKeyId=test&Expires={expires_s}&Signature=c2lnbmF0dXJl", region.endpoint)
    };

    let (status, body) = put(&expired, b"late").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("<Error><Code>AccessDenied</Code><Message>Request has expired</Message>"), "{body}");
    assert!(body.contains("<X-Amz-Expires>30</X-Amz-Expires>"), "{body}");
    let (status, body) = put(&v2("expired-v2", epoch_s - 5), b"late").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("<Message>Request has expired</Message>"), "{body}");
    // Presigned just now: stored, as before.
    assert_eq!(put(&fresh, b"in time").await.0, 200);
    assert_eq!(put(&v2("fresh-v2", epoch_s + 60), b"in time").await.0, 200);

    // Read back with the SDK's own calls, which carry an Authorization header and pass as before.
    for (key, stored) in [("expired", 0), ("expired-v2", 0), ("fresh", 1), ("fresh-v2", 1)] {
        let versions = provision::response_versions(s3, bucket, key).await.expect("list versions");
        assert_eq!(versions.len(), stored, "{key}: {versions:?}");
    }
    assert_eq!(provision::response_versions(s3, bucket, "fresh").await.expect("versions"), vec![b"in time".to_vec()]);
}

/// A handle of a stack made a day ago: presigned as CloudFormation presigns one, so long ago
/// that it expires [`HANDLE_LEFT`] from now.
async fn day_old_handle(regions: &TwoRegions, logical_id: &str) -> WaitHandle {
    let signed_ago = Duration::from_secs(CLOUDFORMATION_HANDLE_EXPIRES_S) - HANDLE_LEFT;
    regions.wait_handle_signed_ago(logical_id, signed_ago).await
}

/// Publishes `sent` and waits for its answer; returns it and how long it took.
async fn answer(regions: &TwoRegions, sent: &Sent) -> (ResponseBody, Duration) {
    let published = Instant::now();
    regions.publish(sent).await;
    let (bytes, took) = regions.wait_for_answer(sent, published, TIMEOUT).await;
    (ResponseBody::parse(&bytes).expect("a response body"), took)
}

/// A resource whose Create on `handle` was handed over and whose work, done at once, was
/// signalled SUCCESS before the handle expired, its messages gone from both queues. Returns the
/// Create, its PhysicalResourceId and the work's record.
async fn signalled_create(regions: &TwoRegions, handle: &WaitHandle) -> (Sent, String, PlainRecord) {
    let sent = create(regions, handle, WAIT_TIMEOUT_S, json!({"InProgressForS": null})).await;
    let published = Instant::now();
    regions.publish(&sent).await;
    let (_, answered_after) = regions.wait_for_answer(&sent, published, TIMEOUT).await;
    let (_, signalled_after) = handle.wait_for_signal(published, TIMEOUT).await;
    regions.drain(TIMEOUT).await;
    // Handed over (SUCCESS, Data `CfnOnceWork`), one signal, both records delivered.
    let (answer, signal, work) = settled(regions, &sent, handle).await;
    assert_eq!(signal.status, SignalStatus::Success, "{signal:?}");
    let signal_put = handle.puts().await.remove(0).last_modified.expect("when S3 stored the signal");
    assert!(
        SystemTime::try_from(signal_put).expect("a time") < handle.expires_at,
        "the signal was stored before the handle expired"
    );
    println!(
        "Create answered after {answered_after:?}, signalled after {signalled_after:?}; the handle expires in {:?}",
        handle.expires_in()
    );
    (sent, answer.physical_resource_id, work)
}

/// A later request of `request_type` for the resource the fixture's Create made (same stack
/// and logical id, a new RequestId and ResponseURL) with `properties`, and for an Update
/// `old_properties`.
async fn later(
    regions: &TwoRegions,
    request_type: &str,
    physical_id: &str,
    properties: &Value,
    old_properties: Option<&Value>,
) -> Sent {
    let mut sent = regions.request("create-echo-wait.json").await;
    sent.request["RequestType"] = json!(request_type);
    sent.request["PhysicalResourceId"] = json!(physical_id);
    sent.request["ResourceProperties"] = properties.clone();
    if let Some(old) = old_properties {
        sent.request["OldResourceProperties"] = old.clone();
    }
    sent
}

/// `properties` with `changes` applied (`null` removes one).
fn changed(properties: &Value, changes: Value) -> Value {
    let mut changed = properties.clone();
    for (name, value) in changes.as_object().expect("an object of changes") {
        match value {
            Value::Null => drop(changed.as_object_mut().expect("properties").remove(name)),
            value => changed[name] = value.clone(),
        }
    }
    changed
}

/// Once both queues are empty: each of `requests` answered exactly once, nothing dead-lettered.
async fn answered_once(regions: &TwoRegions, requests: &[&Sent]) {
    regions.drain(TIMEOUT).await;
    for sent in requests {
        let answers = regions.responses(sent).await;
        assert_eq!(answers.len(), 1, "{} answered once", sent.request["RequestType"]);
    }
    assert_eq!(regions.dead_letters().await, 0, "nothing reached a DLQ");
}

/// The signal a record committed.
fn committed_signal(record: &PlainRecord) -> Signal {
    Signal::parse(record.response.as_deref().expect("a committed signal")).expect("a signal")
}

#[tokio::test]
async fn a_delete_a_day_later_after_the_handle_expired_is_answered_and_puts_nothing_to_it() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let handle = day_old_handle(&regions, "SlowGreetingHandle").await;
    let (create, physical_id, work) = signalled_create(&regions, &handle).await;
    handle.expire().await;

    let properties = &create.request["ResourceProperties"];
    let delete = later(&regions, "Delete", &physical_id, properties, None).await;
    let (deleted, took) = answer(&regions, &delete).await;
    println!("Delete a day later answered {:?} after {took:?}", deleted.status);
    assert_eq!((deleted.status, deleted.physical_resource_id.as_str()), (Status::Success, physical_id.as_str()));
    answered_once(&regions, &[&create, &delete]).await;
    assert_eq!(handle.puts().await.len(), 1, "the Create's one signal; nothing since");
    let after = regions.plain_record(&handle.work_key(&create)).await;
    assert_eq!(after.as_ref(), Some(&work), "the signalled work's record was never written again");
    regions.stop().await;
}

/// Both regions' way to the wait condition handles, out until a time the test sets: every PUT
/// to a handle fails as a connection that cannot be made would, until then; every other PUT,
/// and every PUT after, goes through. Records when each PUT to a handle was made.
#[derive(Debug, Clone, Default)]
struct HandleOutage {
    until: Arc<Mutex<Option<SystemTime>>>,
    attempts: Arc<Mutex<Vec<SystemTime>>>,
}

impl HandleOutage {
    /// A region's ports with their sink behind this outage.
    fn wrap(&self, mut ports: Ports) -> Ports {
        ports.sink = Arc::new(BehindOutage { outage: self.clone(), inner: ports.sink });
        ports
    }

    fn until(&self, until: SystemTime) {
        *self.until.lock().expect("outage") = Some(until);
    }

    /// When each PUT to a handle was made, by either region.
    fn attempts(&self) -> Vec<SystemTime> {
        self.attempts.lock().expect("outage").clone()
    }
}

#[derive(Debug)]
struct BehindOutage {
    outage: HandleOutage,
    inner: Arc<dyn ResponseSink>,
}

#[async_trait::async_trait]
impl ResponseSink for BehindOutage {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError> {
        if url.expose_secret().contains("/wait-handles/") {
            let now = SystemTime::now();
            self.outage.attempts.lock().expect("outage").push(now);
            if self.outage.until.lock().expect("outage").is_some_and(|until| now < until) {
                return Err(PutError::Retryable("the wait condition handle could not be reached (outage)".into()));
            }
        }
        self.inner.put(url, body).await
    }
}

#[tokio::test]
async fn a_delete_after_the_handle_expired_on_a_signal_never_delivered_records_it_unsent_and_is_answered() {
    let outage = HandleOutage::default();
    // One PUT attempt per delivery, made at once after the delivery found the handle not yet
    // expired: no delivery's retries reach past the expiry. (One that did would be refused
    // with 403 by S3, which the handler takes as final too: not what this test is about.)
    let settings = [&SETTINGS[..], &[("CFN_ONCE_PUT_ATTEMPTS_MAX", "1")]].concat();
    let mut regions =
        TwoRegions::with_ports(DELAY_S, &settings, |ports| outage.wrap(ports), |ports| outage.wrap(ports)).await;
    let handle = day_old_handle(&regions, "SlowGreetingHandle").await;
    // Neither region can reach the handle until it has expired: the work's signal, committed
    // at once, is never delivered. (A second more, so that an attempt made the moment after
    // its delivery found the handle valid fails here, not at S3.)
    let outage_end = handle.expires_at + Duration::from_secs(1);
    outage.until(outage_end);
    let create = create(&regions, &handle, WAIT_TIMEOUT_S, json!({"InProgressForS": null})).await;
    let work_key = handle.work_key(&create);
    let (answer_body, answered_after) = answer(&regions, &create).await;
    assert!(answer_body.data.contains_key(WORK_DATA_NAME), "handed over: {answer_body:?}");
    let started = Instant::now();
    while !outage.attempts().iter().any(|at| *at < handle.expires_at) {
        assert!(started.elapsed() < TIMEOUT, "the signal was never tried");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let committed = regions.plain_record(&work_key).await.expect("the work's record");
    assert_eq!((committed.state.as_str(), committed.delivered), ("COMMITTED", false), "{committed:?}");
    handle.expire().await;

    let properties = &create.request["ResourceProperties"];
    let delete = later(&regions, "Delete", &answer_body.physical_resource_id, properties, None).await;
    let delete_sent_ms = cfn_once_tests::now_ms();
    let (deleted, took) = answer(&regions, &delete).await;
    assert_eq!(deleted.status, Status::Success, "{deleted:?}");
    answered_once(&regions, &[&create, &delete]).await;

    assert!(handle.puts().await.is_empty(), "nothing reached the handle");
    let attempts = outage.attempts();
    assert!(attempts.iter().all(|at| *at < outage_end), "a PUT was made to the expired handle");
    let work = regions.plain_record(&work_key).await.expect("the work's record");
    let unsent = work.unsent.clone().unwrap_or_default();
    let by = if work.updated_ms < delete_sent_ms { "a copy of the Create" } else { "the Delete's close" };
    println!(
        "Create answered after {answered_after:?}; {} PUTs of its signal failed before the handle expired; \
         Delete answered {:?} after {took:?}; the work's record, marked by {by}: {unsent}",
        attempts.len(),
        deleted.status
    );
    assert_eq!((work.state.as_str(), work.delivered), ("COMMITTED", true), "{work:?}");
    assert_eq!(work.response, committed.response, "the signal committed before the handle expired");
    // Never tried once expired: a PUT refused with 403 would have said "refused it".
    assert!(unsent.starts_with("not sent: the wait condition handle's presigned URL expired at"), "{work:?}");
    assert_eq!(committed_signal(&work).status, SignalStatus::Success, "{work:?}");
    regions.stop().await;
}

#[tokio::test]
async fn a_delete_31_days_later_after_the_sweeper_took_the_records_is_answered_without_a_signal() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let handle = day_old_handle(&regions, "SlowGreetingHandle").await;
    let (create, physical_id, _) = signalled_create(&regions, &handle).await;
    handle.expire().await;
    let work_key = handle.work_key(&create);

    // The sweeper, run 31 days on, takes the answer's record and the work's.
    let table = &regions.env.file.table_name;
    let month_later_ms = cfn_once_tests::now_ms() + 31 * DAY_MS;
    let report =
        sweep(&regions.dynamodb, table, month_later_ms, Instant::now() + Duration::from_secs(30)).await.expect("sweep");
    assert!(report.complete && report.deleted >= 2, "{report:?}");
    assert_eq!(regions.plain_record(&work_key).await, None, "the work's record was swept");
    assert_eq!(regions.plain_record(&create.request_key).await, None, "the Create's record was swept");

    let properties = &create.request["ResourceProperties"];
    let delete = later(&regions, "Delete", &physical_id, properties, None).await;
    let (deleted, took) = answer(&regions, &delete).await;
    println!("Delete 31 days later (records swept) answered {:?} after {took:?}", deleted.status);
    assert_eq!((deleted.status, deleted.physical_resource_id.as_str()), (Status::Success, physical_id.as_str()));
    answered_once(&regions, &[&delete]).await;
    assert_eq!(handle.puts().await.len(), 1, "the Create's one signal, a month ago; nothing since");
    // The close made the work's record afresh, and says why its signal was never sent.
    let work = regions.plain_record(&work_key).await.expect("the close's record of the work");
    assert_eq!((work.state.as_str(), work.delivered), ("COMMITTED", true), "{work:?}");
    let unsent = work.unsent.as_deref().unwrap_or_default();
    assert!(unsent.starts_with("not sent: the wait condition handle's presigned URL expired at"), "{work:?}");
    let signal = committed_signal(&work);
    assert_eq!(signal.status, SignalStatus::Failure, "the close's signal, which nothing reads: {signal:?}");
    regions.stop().await;
}

#[tokio::test]
async fn an_update_keeping_its_expired_handle_runs_the_provider_and_answers_what_it_came_to() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let handle = day_old_handle(&regions, "SlowGreetingHandle").await;
    let (create, physical_id, work) = signalled_create(&regions, &handle).await;
    handle.expire().await;

    let created = &create.request["ResourceProperties"];
    let properties = changed(created, json!({"Message": "hello, a day later"}));
    let update = later(&regions, "Update", &physical_id, &properties, Some(created)).await;
    let (updated, took) = answer(&regions, &update).await;
    println!("Update keeping its handle a day later answered {:?} after {took:?}", updated.status);
    assert_eq!((updated.status, updated.physical_resource_id.as_str()), (Status::Success, physical_id.as_str()));
    assert!(!updated.data.contains_key(WORK_DATA_NAME), "not a hand-over: {updated:?}");
    assert_eq!(updated.data.get("Message"), Some(&json!("hello, a day later")), "the provider's Update ran");
    assert!(!updated.data.contains_key(HANDLE_PROPERTY), "the handle is never the provider's to see");

    // The provider's failure is the Update's, where the stack sees it.
    let failing = changed(&properties, json!({"Message": "hello again", "FailWith": "quota exceeded"}));
    let refused = later(&regions, "Update", &physical_id, &failing, Some(&properties)).await;
    let (failed, took) = answer(&regions, &refused).await;
    println!("failing Update keeping its handle answered {:?} after {took:?}: {:?}", failed.status, failed.reason);
    assert_eq!(failed.status, Status::Failed, "{failed:?}");
    assert!(failed.reason.as_deref().is_some_and(|why| why.contains("quota exceeded")), "{failed:?}");

    answered_once(&regions, &[&create, &update, &refused]).await;
    assert_eq!(handle.puts().await.len(), 1, "the Create's one signal; none since");
    let after = regions.plain_record(&handle.work_key(&create)).await;
    assert_eq!(after.as_ref(), Some(&work), "no new work on the handle");
    regions.stop().await;
}

#[tokio::test]
async fn an_update_rollback_to_the_old_handle_closes_the_forward_work_and_answers_the_providers_update() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let old_handle = regions.wait_handle("SlowGreetingHandle").await;
    let (create, physical_id, old_work) = signalled_create(&regions, &old_handle).await;
    let created = &create.request["ResourceProperties"];

    // The forward Update hands a ten-minute work to a new handle; then another resource fails
    // and CloudFormation rolls back.
    let new_handle = regions.wait_handle("SlowGreetingHandle2").await;
    let mut forward_properties = changed(created, json!({"Message": "forward", "InProgressForS": "600"}));
    new_handle.declare(&mut forward_properties, WAIT_TIMEOUT_S);
    let forward = later(&regions, "Update", &physical_id, &forward_properties, Some(created)).await;
    let (handed, forward_took) = answer(&regions, &forward).await;
    assert_eq!(handed.status, Status::Success, "{handed:?}");
    assert!(handed.data.contains_key(WORK_DATA_NAME), "the forward Update was handed over: {handed:?}");
    let forward_key = new_handle.work_key(&forward);
    let started = Instant::now();
    while regions.plain_record(&forward_key).await.is_none_or(|work| work.state != "WAITING") {
        assert!(started.elapsed() < TIMEOUT, "the forward work never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let rollback = later(&regions, "Update", &physical_id, created, Some(&forward_properties)).await;
    let (rolled_back, took) = answer(&regions, &rollback).await;
    println!(
        "forward Update handed over after {forward_took:?}; rollback answered {:?} after {took:?}",
        rolled_back.status
    );
    assert_eq!(rolled_back.status, Status::Success, "never FAILED for want of a wait: {rolled_back:?}");
    assert!(!rolled_back.data.contains_key(WORK_DATA_NAME), "not a hand-over: {rolled_back:?}");
    assert_eq!(rolled_back.data.get("Message"), created.get("Message"), "the provider's Update ran: {rolled_back:?}");

    answered_once(&regions, &[&create, &forward, &rollback]).await;
    // The forward work was stopped and signalled FAILURE once, before the rollback was answered.
    let mut forward_signals = new_handle.signals().await;
    assert_eq!(forward_signals.len(), 1, "one signal to the forward work's handle: {forward_signals:?}");
    let (bytes, signal) = forward_signals.remove(0);
    assert_eq!(signal.status, SignalStatus::Failure, "{signal:?}");
    let forward_work = regions.plain_record(&forward_key).await.expect("the forward work's record");
    assert_eq!((forward_work.state.as_str(), forward_work.delivered), ("COMMITTED", true), "{forward_work:?}");
    assert_eq!(forward_work.response.as_deref(), Some(&bytes[..]), "S1: the signal PUT is the committed bytes");
    let signal_put = new_handle.puts().await.remove(0).last_modified;
    let answer_put = regions.answer_puts(&rollback).await.remove(0).last_modified;
    assert!(
        signal_put <= answer_put,
        "S3 stored the signal at {signal_put:?}, the rollback's answer at {answer_put:?}"
    );
    // The old handle got nothing new, and its work's record is as the Create left it.
    assert_eq!(old_handle.puts().await.len(), 1, "the Create's one signal; none since");
    assert_eq!(regions.plain_record(&old_handle.work_key(&create)).await.as_ref(), Some(&old_work));
    regions.stop().await;
}
