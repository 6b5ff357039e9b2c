//! The attack surface as a catalogue: hostile inputs through the real handler on local AWS, one
//! case a row, grouped by what an attacker controls (docs/security.md names who that can be).
//!
//! Each case states its outcome (answered FAILED with which Reason, answered SUCCESS, or moved
//! to the DLQ with which reason, nothing sent); after each, a valid request is answered exactly
//! once, so no case leaves the handler stuck; and every log line of every case, captured at
//! TRACE through the production subscriber (third-party crates and the `log` bridge included),
//! is searched for the signed ResponseURLs and wait condition handles the cases carried.

use std::sync::Once;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::MessageSystemAttributeName;
use cfn_once::adapters::sqs_queue::dead_letter_attribute::REASON;
use cfn_once::app::App;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_local::esm::LocalEventSourceMapping;
use cfn_once_local::provision::queue_depth;
use cfn_once_tests::{CapturedLogs, LocalRegion, Options, Sent};
use serde_json::{Value, json};
use tracing::instrument::WithSubscriber;
use tracing_subscriber::filter::LevelFilter;

const TIMEOUT: Duration = Duration::from_secs(30);

/// What a case sends.
enum Input {
    /// The (mutated) request, published to the ServiceToken topic: SNS wraps it.
    Publish,
    /// This SQS body, sent straight to the queue (as a principal with `sqs:SendMessage` could).
    Body(String),
    /// The request published this many times at once.
    Duplicates(usize),
}

/// What must come of it.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Answered once with this status, the Reason (if any) containing this text.
    Answered(Status, Option<&'static str>),
    /// Moved to the DLQ, the reason attribute containing this text; nothing sent, no lease.
    DeadLetter(&'static str),
}

/// One row: a name, how to make the input from a fresh request, and the expected outcome.
type Row = (&'static str, fn(&mut Sent) -> Input, Expect);

struct Catalogue {
    region: LocalRegion,
    app: App,
    esm: LocalEventSourceMapping,
    captured: CapturedLogs,
    dispatch: tracing::Dispatch,
    /// Every signature a case's ResponseURL or wait condition handle carried: none may appear in
    /// a log line.
    secrets: Vec<String>,
}

impl Catalogue {
    async fn new() -> Self {
        // Records of the `log` crate (rustls, among others) reach tracing, as in the Lambda.
        static BRIDGE: Once = Once::new();
        BRIDGE.call_once(|| {
            let _ = tracing_log::LogTracer::init();
        });
        let region = LocalRegion::new(Options::default()).await;
        // The most permissive provider configuration a deployment could choose.
        let app = region.app(&region.config(&[("CFN_ONCE_ITEM_TABLES", "*")]));
        let esm = region.esm(10).await;
        let captured = CapturedLogs::default();
        let subscriber = cfn_once::logging::json_subscriber(LevelFilter::TRACE, captured.clone());
        let dispatch = tracing::Dispatch::new(subscriber);
        Self { region, app, esm, captured, dispatch, secrets: Vec::new() }
    }

    /// Serves the queue under the capturing subscriber until it is empty.
    async fn serve(&self) {
        let started = Instant::now();
        let capturing = |event| cfn_once::lambda::handle(&self.app, event).with_subscriber(self.dispatch.clone());
        loop {
            self.esm.poll_once(&capturing).await.expect("poll");
            if queue_depth(&self.region.sqs, &self.region.queue.url).await.expect("depth") == 0 {
                return;
            }
            assert!(started.elapsed() < TIMEOUT, "the queue did not drain within {TIMEOUT:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Takes everything out of the DLQ: each message's body and reason attribute.
    async fn dead_letters(&self) -> Vec<(String, String)> {
        let mut found = Vec::new();
        loop {
            let received = self
                .region
                .sqs
                .receive_message()
                .queue_url(&self.region.queue.dlq_url)
                .max_number_of_messages(10)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .expect("receive from the DLQ");
            let messages = received.messages.unwrap_or_default();
            if messages.is_empty() {
                return found;
            }
            for message in messages {
                let reason = message
                    .message_attributes
                    .as_ref()
                    .and_then(|attributes| attributes.get(REASON))
                    .and_then(|value| value.string_value.clone())
                    .unwrap_or_default();
                found.push((message.body.clone().unwrap_or_default(), reason));
                let handle = message.receipt_handle.unwrap_or_default();
                let queue = &self.region.queue.dlq_url;
                self.region.sqs.delete_message().queue_url(queue).receipt_handle(handle).send().await.expect("delete");
            }
        }
    }

    /// Runs one row; `Err` says what went wrong.
    async fn run(&mut self, (name, make, expect): Row) -> Result<(), String> {
        let mut sent = self.region.request("create-echo.json").await;
        let input = make(&mut sent);
        let urls = [&sent.request["ResponseURL"], &sent.request["ResourceProperties"]["CfnOnceWaitHandle"]];
        for signature in urls.into_iter().filter_map(|url| url.as_str()?.split("Signature=").nth(1)) {
            self.secrets.push(signature.chars().take(40).collect());
        }
        match &input {
            Input::Publish => self.region.publish(&sent).await,
            Input::Body(body) => {
                let queue = &self.region.queue.url;
                self.region.sqs.send_message().queue_url(queue).message_body(body).send().await.expect("send");
            }
            Input::Duplicates(copies) => {
                for _ in 0..*copies {
                    self.region.publish(&sent).await;
                }
            }
        }
        self.serve().await;
        let dead = self.dead_letters().await;
        let puts = self.region.responses(&sent).await;
        match expect {
            Expect::Answered(status, reason) => {
                if !dead.is_empty() {
                    return Err(format!("{name}: expected an answer, found in the DLQ: {dead:?}"));
                }
                let [body] = puts.as_slice() else {
                    return Err(format!("{name}: expected one answer, found {} PUTs", puts.len()));
                };
                let body = ResponseBody::parse(body).map_err(|e| format!("{name}: the answer is not a body: {e}"))?;
                if body.status != status {
                    return Err(format!("{name}: expected {status:?}, got {body:?}"));
                }
                if let Some(expected) = reason
                    && !body.reason.as_deref().is_some_and(|reason| reason.contains(expected))
                {
                    return Err(format!("{name}: expected a Reason containing {expected:?}, got {:?}", body.reason));
                }
            }
            Expect::DeadLetter(expected) => {
                if !puts.is_empty() {
                    return Err(format!("{name}: nothing may be sent, but {} PUT(s) were", puts.len()));
                }
                let [(_, reason)] = dead.as_slice() else {
                    return Err(format!("{name}: expected one message in the DLQ, found {}", dead.len()));
                };
                if !reason.contains(expected) {
                    return Err(format!("{name}: expected a DLQ reason containing {expected:?}, got {reason:?}"));
                }
                if self.region.record(&sent).await.is_some() {
                    return Err(format!("{name}: a lease was taken for a request nobody can be answered for"));
                }
            }
        }
        // The handler is not stuck: a valid request right after is answered exactly once.
        let follow_up = self.region.request("create-echo.json").await;
        self.region.publish(&follow_up).await;
        self.serve().await;
        let answers = self.region.responses(&follow_up).await;
        if answers.len() != 1 {
            return Err(format!("{name}: the request after it got {} answers", answers.len()));
        }
        Ok(())
    }

    /// Runs every row, then searches the logs.
    async fn run_all(mut self, group: &str, rows: Vec<Row>) {
        let started = Instant::now();
        let count = rows.len();
        let mut failures = Vec::new();
        for row in rows {
            if let Err(failure) = self.run(row).await {
                failures.push(failure);
            }
        }
        let logs = self.captured.text();
        assert!(logs.lines().count() > count, "the capture saw the handler's logs");
        for secret in &self.secrets {
            if logs.contains(secret.as_str()) {
                failures.push(format!("a log line at TRACE carries the signature {secret}"));
            }
        }
        if logs.contains("X-Amz-Signature") || logs.contains("X-Amz-Credential") {
            failures.push("a log line at TRACE carries a presigned query".into());
        }
        println!("hostile catalogue, {group}: {count} cases in {:.1?}", started.elapsed());
        assert!(failures.is_empty(), "{} of {count} cases failed:\n{}", failures.len(), failures.join("\n"));
    }
}

fn set(sent: &mut Sent, field: &str, value: Value) {
    sent.request[field] = value;
}

fn property(sent: &mut Sent, name: &str, value: Value) {
    sent.request["ResourceProperties"][name] = value;
}

/// A hostile ResponseURL with a recognisable signature, which must never be logged.
fn url(sent: &mut Sent, url: &str) -> Input {
    set(sent, "ResponseURL", json!(url));
    Input::Publish
}

/// A hostile wait condition handle with a recognisable signature, which must never be logged.
fn handle(sent: &mut Sent, url: &str) -> Input {
    property(sent, "CfnOnceWaitHandle", json!(url));
    property(sent, "CfnOnceWaitTimeout", json!("600"));
    Input::Publish
}

fn envelope(topic: &str, message: &str) -> String {
    json!({"Type": "Notification", "MessageId": "m-1", "TopicArn": topic, "Message": message}).to_string()
}

#[tokio::test]
async fn bodies_and_envelopes() {
    let rows: Vec<Row> = vec![
        ("a body that is not JSON", |_| Input::Body("{ not json".into()), Expect::DeadLetter("not JSON")),
        ("an empty JSON object", |_| Input::Body("{}".into()), Expect::DeadLetter("neither an SNS notification")),
        ("a JSON array", |_| Input::Body("[1, 2, 3]".into()), Expect::DeadLetter("neither an SNS notification")),
        ("a JSON number", |_| Input::Body("42".into()), Expect::DeadLetter("neither an SNS notification")),
        (
            "a 200 KB object of junk",
            |_| Input::Body(json!({"junk": "x".repeat(200_000)}).to_string()),
            Expect::DeadLetter("neither"),
        ),
        (
            "a bare request while only envelopes are accepted",
            |sent| Input::Body(sent.request.to_string()),
            Expect::DeadLetter("raw message delivery is not configured"),
        ),
        (
            "an envelope forged for a topic not allowed",
            |sent| Input::Body(envelope("arn:aws:sns:us-east-2:999999999999:evil", &sent.request.to_string())),
            Expect::DeadLetter("not in CFN_ONCE_TOPIC_ARNS"),
        ),
        (
            "an envelope naming an allowed topic in other letter case",
            |sent| {
                let topic = sent.request["ServiceToken"].as_str().unwrap_or_default().to_uppercase();
                Input::Body(envelope(&topic, &sent.request.to_string()))
            },
            Expect::DeadLetter("not in CFN_ONCE_TOPIC_ARNS"),
        ),
        (
            "a subscription confirmation instead of a notification",
            |sent| {
                let topic = sent.request["ServiceToken"].as_str().unwrap_or_default().to_owned();
                let mut body: Value = serde_json::from_str(&envelope(&topic, "{}")).unwrap_or_default();
                body["Type"] = json!("SubscriptionConfirmation");
                Input::Body(body.to_string())
            },
            Expect::DeadLetter("neither an SNS notification"),
        ),
        (
            "an envelope whose Message is not JSON",
            |sent| Input::Body(envelope(sent.request["ServiceToken"].as_str().unwrap_or_default(), "<xml/>")),
            Expect::DeadLetter("Message is not a JSON object"),
        ),
        (
            "an envelope whose Message is a JSON array",
            |sent| Input::Body(envelope(sent.request["ServiceToken"].as_str().unwrap_or_default(), "[]")),
            Expect::DeadLetter("Message is not a JSON object"),
        ),
    ];
    Catalogue::new().await.run_all("bodies and envelopes", rows).await;
}

#[tokio::test]
async fn identifiers_and_response_urls() {
    let rows: Vec<Row> = vec![
        (
            "no StackId",
            |sent| {
                sent.request.as_object_mut().map(|request| request.remove("StackId"));
                Input::Publish
            },
            Expect::DeadLetter("no usable StackId"),
        ),
        (
            "an empty RequestId",
            |sent| {
                set(sent, "RequestId", json!(""));
                Input::Publish
            },
            Expect::DeadLetter("no usable RequestId"),
        ),
        (
            "a RequestId of 300 bytes",
            |sent| {
                set(sent, "RequestId", json!("r".repeat(300)));
                Input::Publish
            },
            Expect::DeadLetter("longer than CloudFormation ever sends"),
        ),
        (
            "a LogicalResourceId of 400 quotes (800 bytes escaped)",
            |sent| {
                set(sent, "LogicalResourceId", json!("\"".repeat(400)));
                Input::Publish
            },
            Expect::DeadLetter("longer than CloudFormation ever sends"),
        ),
        (
            "a LogicalResourceId with a newline and a clear-screen escape",
            |sent| {
                set(sent, "LogicalResourceId", json!("Thing\nus-east-1 forged line\u{1b}[2J"));
                Input::Publish
            },
            Expect::Answered(Status::Success, None),
        ),
        (
            "a Delete whose PhysicalResourceId is 1,000 control characters",
            |sent| {
                set(sent, "RequestType", json!("Delete"));
                set(sent, "PhysicalResourceId", json!("\u{1}".repeat(1_000)));
                Input::Publish
            },
            Expect::DeadLetter("PhysicalResourceId"),
        ),
        (
            "a Delete of a Create refused before any provider ran",
            |sent| {
                set(sent, "RequestType", json!("Delete"));
                set(sent, "ResourceType", json!("Custom::Nobody"));
                set(sent, "PhysicalResourceId", json!("cfn-once-failed-create-0123456789abcdef"));
                Input::Publish
            },
            Expect::Answered(Status::Success, None),
        ),
        (
            "a StackId that is not an ARN",
            |sent| {
                set(sent, "StackId", json!("not-an-arn"));
                Input::Publish
            },
            Expect::DeadLetter("not a CloudFormation stack ARN"),
        ),
        (
            // Its lease record would be the active-region control item, which the sweeper
            // would then delete, un-draining the primary.
            "a request keyed like the control item",
            |sent| {
                set(sent, "StackId", json!("control#active"));
                set(sent, "RequestId", json!("control"));
                Input::Publish
            },
            Expect::DeadLetter("not a CloudFormation stack ARN"),
        ),
        (
            "a plain-http ResponseURL to S3",
            |sent| url(sent, "http://b.s3.amazonaws.com/k?X-Amz-Signature=hostilesecret01"),
            Expect::DeadLetter("https"),
        ),
        (
            "a ResponseURL with a user name and password",
            |sent| url(sent, "https://user:pw@b.s3.amazonaws.com/k?X-Amz-Signature=hostilesecret02"),
            Expect::DeadLetter("user"),
        ),
        (
            "a ResponseURL on port 8443",
            |sent| url(sent, "https://b.s3.amazonaws.com:8443/k?X-Amz-Signature=hostilesecret03"),
            Expect::DeadLetter("port"),
        ),
        (
            "a ResponseURL to an attacker's host",
            |sent| url(sent, "https://attacker.example.com/collect?X-Amz-Signature=hostilesecret04"),
            Expect::DeadLetter("not an Amazon S3 endpoint"),
        ),
        (
            "a ResponseURL to an S3 look-alike host",
            |sent| url(sent, "https://s3.amazonaws.com.evil.example/k?X-Amz-Signature=hostilesecret05"),
            Expect::DeadLetter("not an Amazon S3 endpoint"),
        ),
        (
            "a ResponseURL to the instance metadata address",
            |sent| url(sent, "https://169.254.169.254/latest/meta-data?X-Amz-Signature=hostilesecret06"),
            Expect::DeadLetter("not an Amazon S3 endpoint"),
        ),
        (
            "a ResponseURL hiding its host behind an encoded @",
            |sent| url(sent, "https://b.s3.amazonaws.com%2F@evil.example/k?X-Amz-Signature=hostilesecret07"),
            Expect::DeadLetter("ResponseURL"),
        ),
        (
            "a ResponseURL that is a number",
            |sent| {
                set(sent, "ResponseURL", json!(7));
                Input::Publish
            },
            Expect::DeadLetter("no usable ResponseURL"),
        ),
        (
            "an allow-listed ResponseURL climbing out of its bucket",
            |sent| {
                let url = sent.request["ResponseURL"].as_str().unwrap_or_default().to_owned();
                let (base, rest) = url.split_once("-responses/").unwrap_or((&url, ""));
                let climbing = format!("{base}-responses/../other-bucket/{rest}");
                set(sent, "ResponseURL", json!(climbing));
                Input::Publish
            },
            Expect::DeadLetter("ResponseURL"),
        ),
        // A wait condition handle is checked as a ResponseURL is; a refused one is the
        // resource's failure (its answer says why), not an undeliverable record.
        (
            "a wait condition handle to an attacker's host",
            |sent| handle(sent, "https://attacker.example.com/collect?X-Amz-Signature=hostilesecret08"),
            Expect::Answered(Status::Failed, Some("not an Amazon S3 endpoint")),
        ),
        (
            "a wait condition handle with a user name and password",
            |sent| handle(sent, "https://user:pw@b.s3.amazonaws.com/k?X-Amz-Signature=hostilesecret09"),
            Expect::Answered(Status::Failed, Some("user name or password")),
        ),
        (
            "an allow-listed wait condition handle climbing out of its bucket",
            |sent| {
                let url = sent.request["ResponseURL"].as_str().unwrap_or_default().to_owned();
                let (base, rest) = url.split_once("-responses/").unwrap_or((&url, ""));
                handle(sent, &format!("{base}-responses/../other-bucket/{rest}"))
            },
            Expect::Answered(Status::Failed, Some("CfnOnceWaitHandle is refused")),
        ),
    ];
    Catalogue::new().await.run_all("identifiers and ResponseURLs", rows).await;
}

#[tokio::test]
async fn properties_and_providers() {
    let rows: Vec<Row> = vec![
        (
            "ResourceProperties that are a string",
            |sent| {
                set(sent, "ResourceProperties", json!("all of them"));
                Input::Publish
            },
            Expect::Answered(Status::Failed, Some("ResourceProperties must be a JSON object")),
        ),
        (
            "a property that does not coerce",
            |sent| {
                property(sent, "DelayMs", json!("soon"));
                Input::Publish
            },
            Expect::Answered(Status::Failed, Some("invalid property DelayMs")),
        ),
        (
            "a ServiceTimeout of 1 s and a provider that needs 5 s: answered FAILED before the deadline",
            |sent| {
                // A warm handler runs a quick provider within a 1 s ServiceTimeout (the margins
                // shrink with it); one that needs longer is stopped in time to say so.
                property(sent, "ServiceTimeout", json!("1"));
                property(sent, "DelayMs", json!("5000"));
                Input::Publish
            },
            Expect::Answered(Status::Failed, Some("before the request's deadline")),
        ),
        (
            "a ServiceTimeout that is not a number",
            |sent| {
                property(sent, "ServiceTimeout", json!("forever"));
                Input::Publish
            },
            Expect::Answered(Status::Success, None),
        ),
        (
            "properties nested 200 levels deep",
            |sent| {
                let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
                let text = sent.request.to_string().replacen(
                    "\"ResourceProperties\":{",
                    &format!("\"ResourceProperties\":{{\"Deep\":{deep},"),
                    1,
                );
                Input::Body(envelope(sent.request["ServiceToken"].as_str().unwrap_or_default(), &text))
            },
            Expect::Answered(Status::Failed, Some("nests deeper than 128 levels")),
        ),
        (
            "Data too large for a response",
            |sent| {
                for index in 0..200 {
                    property(sent, &format!("Key{index}"), json!("v".repeat(40)));
                }
                Input::Publish
            },
            Expect::Answered(Status::Failed, Some("bytes of Data, which does not fit")),
        ),
        (
            "a failure Reason of 5 KB of HTML",
            |sent| {
                property(
                    sent,
                    "FailWith",
                    json!(format!("<html><body><h1>502 Bad Gateway</h1>{}</body></html>", "<p>x</p>".repeat(600))),
                );
                Input::Publish
            },
            Expect::Answered(Status::Failed, Some("Custom::Echo Create failed: 502 Bad Gateway x x")),
        ),
        (
            "NoEcho data",
            |sent| {
                property(sent, "NoEcho", json!("true"));
                Input::Publish
            },
            Expect::Answered(Status::Success, None),
        ),
        (
            "a ResourceType nobody serves",
            |sent| {
                set(sent, "ResourceType", json!("Custom::Nobody"));
                Input::Publish
            },
            Expect::Answered(Status::Failed, Some("no provider serves ResourceType Custom::Nobody")),
        ),
        (
            "a Delete for a ResourceType nobody serves",
            |sent| {
                set(sent, "RequestType", json!("Delete"));
                set(sent, "ResourceType", json!("Custom::Nobody"));
                set(sent, "PhysicalResourceId", json!("whatever"));
                Input::Publish
            },
            Expect::Answered(Status::Success, None),
        ),
        (
            "a RequestType that does not exist",
            |sent| {
                set(sent, "RequestType", json!("Upsert"));
                Input::Publish
            },
            Expect::Answered(Status::Failed, Some("RequestType \"Upsert\" is not one of")),
        ),
        (
            "DynamoDBItem writing the lease table by name",
            |sent| dynamodb_item(sent, json!("LEASE"), json!({"pk": "control#active", "sk": "control"})),
            Expect::Answered(Status::Failed, Some("cfn-once's own lease table")),
        ),
        (
            "DynamoDBItem writing the lease table by ARN",
            |sent| {
                dynamodb_item(
                    sent,
                    json!("arn:aws:dynamodb:us-east-1:123456789012:table/LEASE"),
                    json!({"pk": "control#active", "sk": "control"}),
                )
            },
            Expect::Answered(Status::Failed, Some("cfn-once's own lease table")),
        ),
        (
            "DynamoDBItem writing the lease table's replica in another region by ARN",
            |sent| {
                dynamodb_item(
                    sent,
                    json!("arn:aws:dynamodb:us-west-2:123456789012:table/LEASE"),
                    json!({"pk": "x", "sk": "y"}),
                )
            },
            Expect::Answered(Status::Failed, Some("cfn-once's own lease table")),
        ),
        (
            "DynamoDBItem with a Region that is a host name",
            |sent| {
                let input = dynamodb_item(sent, json!("ITEMS"), json!({"pk": "tenant#1"}));
                property(sent, "Region", json!("us-east-1.evil.example"));
                input
            },
            Expect::Answered(Status::Failed, Some("invalid property Region")),
        ),
        (
            "DynamoDBItem with a TableName that is neither a name nor an ARN",
            |sent| dynamodb_item(sent, json!("../../etc/passwd"), json!({"pk": "tenant#1"})),
            Expect::Answered(Status::Failed, Some("invalid property TableName")),
        ),
        (
            "DynamoDBItem writing the reserved fence attribute",
            |sent| {
                let input = dynamodb_item(sent, json!("ITEMS"), json!({"pk": "tenant#1"}));
                property(sent, "Attributes", json!({"cfn_once_fence": {"N": "999999"}}));
                input
            },
            Expect::Answered(Status::Failed, Some("reserved")),
        ),
    ];
    Catalogue::new().await.run_all("properties and providers", rows).await;
}

/// Turns the request into a `Custom::DynamoDBItem` Create; `LEASE` and `ITEMS` in the table name
/// stand for this test's lease and item tables, which are named after the stack's bucket.
fn dynamodb_item(sent: &mut Sent, table: Value, key: Value) -> Input {
    set(sent, "ResourceType", json!("Custom::DynamoDBItem"));
    let stack = sent.request["StackId"].as_str().unwrap_or_default().to_owned();
    // The test's tables are named after its bucket, which the stack is named after too.
    let name = stack.split("stack/").nth(1).and_then(|rest| rest.split('/').next()).unwrap_or_default();
    let prefix = name.trim_end_matches("-responses");
    let table = table
        .as_str()
        .unwrap_or_default()
        .replace("LEASE", &format!("{prefix}-leases"))
        .replace("ITEMS", &format!("{prefix}-items"));
    let service_token = sent.request["ServiceToken"].clone();
    sent.request["ResourceProperties"] = json!({"ServiceToken": service_token, "TableName": table, "Key": key});
    Input::Publish
}

#[tokio::test]
async fn encodings_sizes_duplicates_and_concurrency() {
    let rows: Vec<Row> = vec![
        (
            "right-to-left overrides, emoji and NUL in properties",
            |sent| {
                property(sent, "Name", json!("evil\u{202e}gnp.exe 😀 \u{0}"));
                Input::Publish
            },
            Expect::Answered(Status::Success, None),
        ),
        (
            "a property of 100 KB",
            |sent| {
                property(sent, "Blob", json!("b".repeat(100_000)));
                Input::Publish
            },
            Expect::Answered(Status::Failed, Some("bytes of Data")),
        ),
        ("the same request five times at once", |_| Input::Duplicates(5), Expect::Answered(Status::Success, None)),
        (
            "a Message with a NUL after the request",
            |sent| {
                Input::Body(envelope(
                    sent.request["ServiceToken"].as_str().unwrap_or_default(),
                    &format!("{}\u{0}", sent.request),
                ))
            },
            Expect::DeadLetter("Message is not a JSON object"),
        ),
        (
            "an envelope with extra deep fields around a valid request",
            |sent| {
                let mut body: Value = serde_json::from_str(&envelope(
                    sent.request["ServiceToken"].as_str().unwrap_or_default(),
                    &sent.request.to_string(),
                ))
                .unwrap_or_default();
                body["MessageAttributes"] = json!({"x": {"Type": "String", "Value": "y"}});
                Input::Body(body.to_string())
            },
            Expect::Answered(Status::Success, None),
        ),
        (
            "a Message with whitespace and newlines around the request",
            |sent| {
                Input::Body(envelope(
                    sent.request["ServiceToken"].as_str().unwrap_or_default(),
                    &format!("  \n{}\n  ", sent.request),
                ))
            },
            Expect::Answered(Status::Success, None),
        ),
    ];
    Catalogue::new().await.run_all("encodings, sizes, duplicates and concurrency", rows).await;
}

/// A RequestId reused for a different request (a retried deployment): both answered, each once,
/// and the old answer is never replayed to the new ResponseURL.
#[tokio::test]
async fn a_reused_request_id_with_another_response_url_is_a_new_attempt() {
    let mut catalogue = Catalogue::new().await;
    let first = catalogue.region.request("create-echo.json").await;
    catalogue.region.publish(&first).await;
    catalogue.serve().await;
    let mut second = catalogue.region.request("create-echo.json").await;
    second.request["RequestId"] = first.request["RequestId"].clone();
    second.request_key = first.request_key.clone();
    second.request["ResourceProperties"]["Colour"] = json!("red");
    catalogue.region.publish(&second).await;
    catalogue.serve().await;
    for sent in [&first, &second] {
        assert_eq!(catalogue.region.responses(sent).await.len(), 1, "each attempt answered once");
    }
    let second_body = ResponseBody::parse(&catalogue.region.responses(&second).await[0]).expect("body");
    assert_eq!(second_body.data.get("Colour"), Some(&json!("red")), "the new attempt's own answer");
    catalogue.secrets.clear();
    catalogue.run_all("a reused RequestId", vec![]).await;
}
