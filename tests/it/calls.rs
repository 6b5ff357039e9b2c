//! What one request costs in DynamoDB calls, counted on the wire (SDK retries included). The cost
//! the design holds a request to: the happy path is two conditional writes plus at most one more,
//! and no reads; a duplicate arriving after the answer costs one refused conditional write.

use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use cfn_once_core::echo::{ECHO_TYPE, Echo};
use cfn_once_core::provider::Router;
use cfn_once_tests::{FaultProxy, LocalRegion, Match, Options, handler, now_ms};
use lambda_runtime::{Context, LambdaEvent};

#[tokio::test]
async fn the_happy_path_costs_three_writes_and_no_reads() {
    let region = LocalRegion::new(Options::default()).await;
    let app = region.app(&region.config(&[]));
    let esm = region.esm(10).await;
    let sent = region.request("create-echo.json").await;
    region.publish(&sent).await;
    region.counter.reset();
    region.serve_until_answered(&esm, &app, &sent, Duration::from_secs(30)).await;
    let happy = region.counter.snapshot();
    println!("DynamoDB calls for one request on the happy path: {happy:?}");
    assert_eq!(happy.get("UpdateItem"), Some(&3), "acquire, commit, mark delivered: {happy:?}");
    assert_eq!(happy.values().sum::<u32>(), 3, "nothing else, in particular no GetItem: {happy:?}");

    region.counter.reset();
    region.publish(&sent).await;
    region.drain(&esm, &app, Duration::from_secs(30)).await;
    let duplicate = region.counter.snapshot();
    println!("DynamoDB calls for a duplicate delivered after the answer: {duplicate:?}");
    assert_eq!(duplicate.get("UpdateItem"), Some(&1), "one refused acquire, its ALL_OLD item decides: {duplicate:?}");
    assert_eq!(duplicate.values().sum::<u32>(), 1, "{duplicate:?}");
    assert_eq!(region.responses(&sent).await.len(), 1);
}

/// A primary asks the active-region control whether it is active; the README promises at most
/// one read per `CFN_ONCE_CONTROL_CACHE_MS` per warm Lambda, however many records a batch holds.
/// Counted on the wire: the production control (the `control#active` item) through a proxy.
#[tokio::test]
async fn a_batch_of_ten_on_a_cold_cache_reads_the_control_once() {
    let region = LocalRegion::new(Options::default()).await;
    let proxy = FaultProxy::start(&region.endpoint);
    let config = region.config(&[("CFN_ONCE_CONTROL_CACHE_MS", "60000")]);
    let app = region.app_behind(&proxy, &config, Router::new().register(ECHO_TYPE, Echo)).await;
    let mut sent = Vec::new();
    for _ in 0..10 {
        let request = region.request("create-echo.json").await;
        region.publish(&request).await;
        sent.push(request);
    }
    // Ten records in one batch, as Lambda would hand them over.
    let esm = region.esm(10).await;
    let mut records = Vec::new();
    while records.len() < 10 {
        let received = region
            .sqs
            .receive_message()
            .queue_url(&region.queue.url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        records.extend(received.messages.unwrap_or_default().iter().map(|message| esm.record(message)));
    }
    let mut context = Context::default();
    context.request_id = "batch-of-ten".into();
    context.deadline = now_ms() + 30_000;
    let mut batch = SqsEvent::default();
    batch.records = records;
    let response = handler(&app)(LambdaEvent::new(batch, context)).await.expect("the batch");
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    for request in &sent {
        assert_eq!(region.responses(request).await.len(), 1);
    }
    let control_reads = proxy.count(&Match::OperationWith("GetItem".into(), "control#active".into()));
    println!("control reads for a 10-record batch on a cold cache: {control_reads}");
    assert_eq!(control_reads, 1, "one read, shared by the batch's ten records");
}

/// A provider that answers in progress costs, per poll, two conditional writes (the acquire of
/// the due poll and the wait that stores the next state and releases the lease), one
/// ChangeMessageVisibility that brings the message back at the next poll, and one receive; no
/// reads and no heartbeats. The last poll commits and marks delivered as a short request does.
/// Counted on the wire, through a proxy in front of every AWS call the handler makes; receives
/// are the event source mapping's, counted by its batches.
#[tokio::test]
async fn a_long_running_request_costs_two_writes_and_one_visibility_change_per_poll() {
    let region = LocalRegion::new(Options::default()).await;
    let proxy = FaultProxy::start(&region.endpoint);
    let app = region.app_behind(&proxy, &region.config(&[]), Router::new().register(ECHO_TYPE, Echo)).await;
    let esm = region.esm(10).await;
    let mut sent = region.request("create-echo-long.json").await;
    // Polled at the backoff floor (4 s) for 8 s: two polls.
    sent.request["ResourceProperties"]["InProgressForS"] = "8".into();
    sent.request["ResourceProperties"]["PollIntervalS"] = "1".into();
    region.publish(&sent).await;
    let started = std::time::Instant::now();
    let mut receives = 0;
    let answer = loop {
        receives += esm.poll_once(&handler(&app)).await.expect("poll").received;
        if let Some(first) = region.responses(&sent).await.into_iter().next() {
            break first;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no answer within a minute");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let body = cfn_once_core::response::ResponseBody::parse(&answer).expect("a response");
    let polls: usize = body.data["Polls"].as_str().and_then(|p| p.parse().ok()).expect("Polls in Data");
    let count = |operation: &str, text: &str| proxy.count(&Match::OperationWith(operation.into(), text.into()));
    let acquires = count("UpdateItem", "ADD #fence");
    let waits = count("UpdateItem", "#poll_state = :poll_state");
    let commits = count("UpdateItem", "#response = :response");
    let delivered = count("UpdateItem", "#delivered = :true");
    let visibility = proxy.count(&Match::Operation("ChangeMessageVisibility".into()));
    let control_reads = count("GetItem", "control#active");
    let record_reads = proxy.count(&Match::Operation("GetItem".into())) - control_reads;
    let everything = proxy.count(&Match::Any);
    println!(
        "a request in progress for 8 s, {polls} polls: {acquires} acquires, {waits} waits, {commits} commit, \
         {delivered} mark delivered, {visibility} ChangeMessageVisibility, {receives} receives, \
         {control_reads} control reads (cached {} s), {everything} calls in all (PUT included)",
        cfn_once_core::config::CONTROL_CACHE_MS_DEFAULT / 1000
    );
    println!(
        "per poll: 2 conditional writes (acquire + wait), 1 ChangeMessageVisibility, 1 receive; \
         the last poll: acquire + commit + mark delivered"
    );
    assert_eq!(polls, 2, "polls at 4 s and 8 s");
    assert_eq!((acquires, waits, commits, delivered), (1 + polls, polls, 1, 1));
    assert_eq!(visibility, polls, "each wait brings its message back once");
    assert_eq!(receives, 1 + polls);
    assert_eq!(record_reads, 0, "no reads of the lease record");
    assert!(control_reads <= receives, "the primary's control reads are cached: {control_reads}");
    assert_eq!(count("UpdateItem", "ADD #heartbeat"), 0, "nobody heartbeats a wait");
    // Every call the handler made: the writes, the visibility changes, the control reads and
    // the one PUT.
    assert_eq!(everything, acquires + waits + commits + delivered + visibility + control_reads + 1);
}
