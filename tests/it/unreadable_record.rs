//! The Lambda binary under a Runtime API, handed a batch with a record its event types refuse
//! (a body that is a number, or bytes that are not UTF-8) beside a good request: the good request is answered in that one invocation, and the bad
//! record fails alone. It goes to the DLQ at once when its queue can be named (as an
//! undecodable body does, and as `cfn-once local` does), or is reported in `batchItemFailures`
//! by its messageId, so its receives count toward its own DLQ.

use std::time::Duration;

use cfn_once_tests::{FakeRuntime, LambdaProcess, LocalRegion, Options, Posted};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);

/// One good request and one record whose body is not a string, which `SqsMessage` refuses;
/// `spoil` spoils the bad record further, and `not_utf8` makes its body the bytes 0xFF 0xFE,
/// which no JSON reader takes (AWS would not deliver them). Returns what the function posted, the bad record's
/// messageId, the region, and how many answers the good request has.
async fn batch_with_a_refused_record(
    not_utf8: bool,
    spoil: impl FnOnce(&mut Value),
) -> (Value, String, LocalRegion, usize) {
    let region = LocalRegion::new(Options::default()).await;
    let runtime = FakeRuntime::start();
    let env = region.lambda_env();
    let mut lambda = LambdaProcess::spawn(&runtime, &env);
    let esm = region.esm(10).await;

    region.sqs.send_message().queue_url(&region.queue.url).message_body("spoiled").send().await.expect("send");
    let (bad, bad_id) = region.batch_of_one(&esm).await;
    let good = region.request("create-echo.json").await;
    region.publish(&good).await;
    let (good_event, _) = region.batch_of_one(&esm).await;
    let record = |event: &[u8]| serde_json::from_slice::<Value>(event).expect("event")["Records"][0].clone();
    let mut bad = record(&bad);
    bad["body"] = json!(42);
    spoil(&mut bad);
    let event = json!({"Records": [bad, record(&good_event)]}).to_string().into_bytes();
    // A body of bytes that are not UTF-8 where the bad record's body was, if asked.
    let event = match not_utf8 {
        false => event,
        true => {
            let at = event.windows(9).position(|window| window == b"\"body\":42").expect("the bad body");
            [&event[..at], &b"\"body\":\"\xff\xfe\""[..], &event[at + 9..]].concat()
        }
    };
    runtime.invoke("mixed", event, 60_000);
    let posted = match runtime.posted("mixed", TIMEOUT) {
        Some(Posted::Response(body)) => serde_json::from_slice(&body).expect("a JSON batch response"),
        Some(Posted::Error(body)) => {
            panic!("the invocation failed as a whole: {}; {:?}", String::from_utf8_lossy(&body), lambda.output())
        }
        None => panic!("nothing posted in {TIMEOUT:?}: {:?}", lambda.output()),
    };
    let answers = region.responses(&good).await.len();
    assert!(lambda.is_running(), "{:?}", lambda.output());
    (posted, bad_id, region, answers)
}

/// Every body in the region's DLQ.
async fn dead_letters(region: &LocalRegion) -> Vec<String> {
    let received = region
        .sqs
        .receive_message()
        .queue_url(&region.queue.dlq_url)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("receive from the DLQ");
    received.messages.unwrap_or_default().into_iter().filter_map(|message| message.body).collect()
}

#[tokio::test]
async fn a_refused_record_goes_to_the_dlq_alone_and_its_batch_mate_is_answered() {
    let (posted, bad_id, region, answers) = batch_with_a_refused_record(false, |_| {}).await;
    assert_eq!(answers, 1, "the good request was answered once, in the batch's one invocation");
    assert_eq!(posted["batchItemFailures"], json!([]), "moved to the DLQ, the bad record is done: {posted}");
    let dead = dead_letters(&region).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].contains(&bad_id) && dead[0].contains("\"body\":42"), "the whole record is kept: {}", dead[0]);
}

#[tokio::test]
async fn a_refused_record_whose_queue_cannot_be_named_is_reported_by_its_message_id() {
    // Without a readable eventSourceARN the DLQ cannot be found: the record is reported failed,
    // so its receives count toward the queue's maxReceiveCount.
    let (posted, bad_id, region, answers) =
        batch_with_a_refused_record(false, |bad| bad["eventSourceARN"] = json!(7)).await;
    assert_eq!(answers, 1, "the good request was answered once, in the batch's one invocation");
    assert_eq!(posted["batchItemFailures"], json!([{"itemIdentifier": bad_id}]), "{posted}");
    assert!(dead_letters(&region).await.is_empty());
}

#[tokio::test]
async fn a_record_that_is_not_utf8_goes_to_the_dlq_alone_and_its_batch_mate_is_answered() {
    let (posted, bad_id, region, answers) = batch_with_a_refused_record(true, |_| {}).await;
    assert_eq!(answers, 1, "the good request was answered once, in the batch's one invocation");
    assert_eq!(posted["batchItemFailures"], json!([]), "moved to the DLQ, the bad record is done: {posted}");
    let dead = dead_letters(&region).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].contains(&bad_id) && dead[0].contains("\u{fffd}"), "the record, as text: {}", dead[0]);
}
