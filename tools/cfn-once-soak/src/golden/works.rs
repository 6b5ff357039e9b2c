//! The works: the version's binary as a small fleet of the generator's own, sent resources with
//! wait conditions, one after another, each waited for (by scanning) up to a limit.

use std::path::Path;
use std::time::Duration;

use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;
use cfn_once_core::wait_condition::{HANDLE_PROPERTY, TIMEOUT_PROPERTY, WORK_ID_PREFIX};
use serde_json::{Value, json};

use crate::fleet::Fleet;
use crate::golden::GoldenOptions;
use crate::golden::records::{Item, class_of};
use crate::golden::scan::{Scanner, Shared, scan};
use cfn_once_local::environment::PRIMARY_REGION;
use cfn_once_local::fault_proxy::{Fault, Match};
use cfn_once_local::provision;

/// How long each step is waited for.
const STEP_LIMIT: Duration = Duration::from_secs(150);
/// The wait conditions' Timeout.
const WAIT_TIMEOUT_S: &str = "600";
/// The seed naming the works' environment (`soak-<seed>`) on the shared moto.
const SEED: u64 = 45_045;

/// The soak's options for a fleet of `binary` and nothing else.
fn fleet_options(options: &GoldenOptions, endpoint: &str) -> anyhow::Result<crate::SoakOptions> {
    #[derive(clap::Parser)]
    struct Parsed {
        #[command(flatten)]
        soak: crate::SoakOptions,
    }
    let text = |path: &Path| path.display().to_string();
    let args = [
        "works".to_owned(),
        format!("--seed={SEED}"),
        format!("--binary={}", text(&options.binary)),
        format!("--python={}", text(&options.python)),
        format!("--endpoint-url={endpoint}"),
        format!("--out={}", text(&options.work_dir.join("works"))),
        "--concurrency=2".to_owned(),
    ];
    Ok(<Parsed as clap::Parser>::try_parse_from(args)?.soak)
}

/// One resource of the works' stack.
struct Resource {
    logical_id: &'static str,
    properties: Value,
    request_id: String,
}

struct Works<'a> {
    fleet: &'a Fleet,
    client: aws_sdk_dynamodb::Client,
    table: String,
    stack_id: String,
    notes: Vec<String>,
}

impl Works<'_> {
    async fn url(&self, key: &str) -> anyhow::Result<String> {
        let bucket = &self.fleet.environment.file.response_bucket;
        provision::presigned_put_url(&self.fleet.presign, bucket, key, 7200).await
    }

    /// A resource whose properties name a wait condition handle of its own.
    async fn resource(&self, logical_id: &'static str, mut properties: Value) -> anyhow::Result<Resource> {
        let handle = self.url(&format!("golden/handles/{logical_id}")).await?;
        properties[HANDLE_PROPERTY] = json!(handle);
        properties[TIMEOUT_PROPERTY] = json!(WAIT_TIMEOUT_S);
        Ok(Resource { logical_id, properties, request_id: uuid() })
    }

    /// Publishes `kind` of `resource` to the customer region's topic, as CloudFormation does.
    async fn send(&self, kind: &str, resource: &Resource, physical_id: Option<&str>) -> anyhow::Result<String> {
        let file = &self.fleet.environment.file;
        let topic = file.topic_arn.clone();
        let request_id = if kind == "Create" { resource.request_id.clone() } else { uuid() };
        let mut properties = resource.properties.clone();
        properties["ServiceToken"] = json!(topic);
        let mut request = json!({
            "RequestType": kind,
            "ServiceToken": topic,
            "ResponseURL": self.url(&format!("golden/answers/{request_id}")).await?,
            "StackId": self.stack_id,
            "RequestId": request_id,
            "LogicalResourceId": resource.logical_id,
            "ResourceType": "Custom::Echo",
            "ResourceProperties": properties,
        });
        if let Some(id) = physical_id {
            request["PhysicalResourceId"] = json!(id);
        }
        let sns = &self.fleet.sns[&file.customer_region];
        sns.publish()
            .topic_arn(&topic)
            .message(request.to_string())
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("Publish: {}", aws_sdk_sns::error::DisplayErrorContext(e)))?;
        Ok(request_id)
    }

    /// Waits until an item of the works' table satisfies `done`; whether it did in time.
    async fn until(&mut self, what: &str, done: impl Fn(&Item) -> bool) -> bool {
        let started = std::time::Instant::now();
        while started.elapsed() < STEP_LIMIT {
            if let Ok(items) = scan(&self.client, &self.table).await
                && items.iter().any(&done)
            {
                self.notes.push(format!("{what}: after {} s", started.elapsed().as_secs()));
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.notes.push(format!("{what}: not within {} s", STEP_LIMIT.as_secs()));
        false
    }
}

fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|value| value.as_s().ok()).map(String::as_str)
}

/// The work record of `logical_id` (every version labels its records).
fn work_of(item: &Item, logical_id: &str) -> bool {
    text(item, "sk").is_some_and(|sk| sk.starts_with(WORK_ID_PREFIX)) && text(item, "logical_id") == Some(logical_id)
}

fn state_is(item: &Item, state: &str) -> bool {
    text(item, "state") == Some(state)
}

fn delivered(item: &Item) -> bool {
    item.get("delivered").and_then(|value| value.as_bool().ok()).copied().unwrap_or(false)
}

/// A fresh UUID-shaped id, as CloudFormation's RequestIds are.
fn uuid() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    crate::Rng::fork(SystemClock.now_ms(), n).uuid()
}

/// Runs the works; what happened, a line per step.
pub(super) async fn run(options: &GoldenOptions, endpoint: &str, collected: &Shared) -> anyhow::Result<Vec<String>> {
    println!("golden-records: the works, on a fleet of {} of the generator's own", options.binary.display());
    let fleet = Fleet::start(endpoint, &fleet_options(options, endpoint)?, SEED).await?;
    let table = fleet.environment.file.table_name.clone();
    let client = aws_sdk_dynamodb::Client::new(&provision::sdk_config(endpoint, PRIMARY_REGION).await);
    let scanner = Scanner::start(&client, &table, options.format, options.interval_ms, collected);
    let stack_id = format!(
        "arn:aws:cloudformation:{}:123456789012:stack/golden-works/{}",
        fleet.environment.file.customer_region,
        uuid()
    );
    let mut works = Works { fleet: &fleet, client, table, stack_id, notes: Vec::new() };
    let outcome = play(&mut works).await;
    scanner.finish().await;
    fleet.stop().await;
    let mut notes = works.notes;
    if let Err(error) = outcome {
        notes.push(format!("stopped: {error:#}"));
    }
    Ok(notes)
}

/// A write of a provider's work in progress (`LeaseStore::wait`: its update names `:poll_fp`),
/// held unanswered once on the primary's wire: the poller's lease is held, with the poll
/// fields, until its client gives up and writes it again (a RUNNING record with its poll,
/// otherwise there for milliseconds).
fn hold_the_next_wait(works: &Works<'_>) {
    let wait = Match::OperationWith("UpdateItem".to_owned(), ":poll_fp".to_owned());
    works.fleet.primary().proxy.inject(wait, Fault::Hang, 1);
}

/// S3's answers to a handle, on the PUT proxy: 503 three times (the signal is committed and
/// retried, undelivered), then a 403 (as S3 refuses a handle once it has expired).
fn refuse_the_next_signal(works: &Works<'_>) {
    let put_proxy = &works.fleet.put_proxy;
    put_proxy.inject(Match::Put, Fault::status(503), 3);
    let denied = concat!(
        r#"<?xml version="1.0" encoding="UTF-8"?>"#,
        "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"
    );
    let refusal = Fault::Respond { status: 403, content_type: "application/xml".to_owned(), body: denied.to_owned() };
    put_proxy.inject(Match::Put, refusal, 1);
}

/// Waits for `logical_id`'s work to settle after [`refuse_the_next_signal`]: delivered, or
/// recorded never sent; a version that cannot record that leaves it undelivered, so that is
/// not waited for past a short while.
async fn settle_refused(works: &mut Works<'_>, logical_id: &str) {
    let committed = format!("{logical_id}'s signal committed");
    if !works.until(&committed, |item| work_of(item, logical_id) && state_is(item, "COMMITTED")).await {
        return;
    }
    let started = std::time::Instant::now();
    let mut recorded = None;
    while recorded.is_none() && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let items = scan(&works.client, &works.table).await.unwrap_or_default();
        recorded = items.iter().find(|item| work_of(item, logical_id) && delivered(item)).map(class_of);
    }
    works.notes.push(match recorded {
        Some(class) => format!("{logical_id}'s signal then recorded: {class}"),
        None => format!("{logical_id}'s signal: still undelivered after 30 s"),
    });
    works.fleet.put_proxy.clear();
}

async fn play(works: &mut Works<'_>) -> anyhow::Result<()> {
    // A slow first run (RUNNING), polled in progress (WAITING; RUNNING with its poll while
    // a wait's write is held) to SUCCESS; and a provider that fails (FAILURE).
    let slow =
        works.resource("SlowWork", json!({"DelayMs": "4000", "InProgressForS": "15", "PollIntervalS": "4"})).await?;
    let failing = works.resource("FailingWork", json!({"FailWith": "golden records: the work fails"})).await?;
    works.send("Create", &slow, None).await?;
    works.send("Create", &failing, None).await?;
    if works.until("SlowWork waiting", |item| work_of(item, "SlowWork") && state_is(item, "WAITING")).await {
        hold_the_next_wait(works);
    }
    works.until("SlowWork's signal delivered", |item| work_of(item, "SlowWork") && delivered(item)).await;
    works.until("FailingWork's signal delivered", |item| work_of(item, "FailingWork") && delivered(item)).await;
    works.fleet.primary().proxy.clear();

    // An answer in progress, polled, its wait's write held as the work's was.
    let polled = Resource {
        logical_id: "PolledAnswer",
        properties: json!({"InProgressForS": "12", "PollIntervalS": "3"}),
        request_id: uuid(),
    };
    let answer_id = works.send("Create", &polled, None).await?;
    let answer = |item: &Item| text(item, "sk") == Some(answer_id.as_str());
    if works.until("PolledAnswer waiting", |item| answer(item) && state_is(item, "WAITING")).await {
        hold_the_next_wait(works);
    }
    works.until("PolledAnswer delivered", |item| answer(item) && delivered(item)).await;
    works.fleet.primary().proxy.clear();

    // A work closed by its resource's Delete while it waits: FAILURE, committed by the close.
    let closed = works
        .resource("ClosedWork", json!({"InProgressForS": "300", "PollIntervalS": "5", "DeleteInProgressForS": "0"}))
        .await?;
    works.send("Create", &closed, None).await?;
    if works.until("ClosedWork waiting", |item| work_of(item, "ClosedWork") && state_is(item, "WAITING")).await {
        let physical_id = format!("{}-golden", closed.logical_id);
        let request_id = works.send("Delete", &closed, Some(&physical_id)).await?;
        works.until("ClosedWork's signal delivered", |item| work_of(item, "ClosedWork") && delivered(item)).await;
        works
            .until("ClosedWork's Delete answered", |item| {
                text(item, "sk") == Some(request_id.as_str()) && delivered(item)
            })
            .await;
    }

    // Signals, SUCCESS and FAILURE, whose handle answers 503 and then refuses them (each
    // refused once its resource's answer is delivered, so that the answer's PUT is not).
    for (logical_id, properties) in [
        ("RefusedWork", json!({"InProgressForS": "8", "PollIntervalS": "4"})),
        ("RefusedFailingWork", json!({"DelayMs": "5000", "FailWith": "golden records: the work fails"})),
    ] {
        let refused = works.resource(logical_id, properties).await?;
        let answer_id = works.send("Create", &refused, None).await?;
        let answered = format!("{logical_id}'s answer delivered");
        if works.until(&answered, |item| text(item, "sk") == Some(answer_id.as_str()) && delivered(item)).await {
            refuse_the_next_signal(works);
            settle_refused(works, logical_id).await;
        }
    }
    Ok(())
}
