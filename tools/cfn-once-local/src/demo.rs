//! `cfn-once demo`: the product, end to end, on this machine.
//!
//! Starts moto (or uses a running one), provisions the two-region environment (the ServiceToken
//! topic in the customer region, a queue and DLQ per handler region with the secondary's
//! delayed, the lease table, a response bucket, an item table), runs both regional handlers
//! behind local event source mappings, and then:
//!
//! 1. sends a resource with a wait condition (`create-long-work.json`, see `long_work`) whose
//!    work outlives its ServiceTimeout and runs beside everything that follows;
//! 2. sends the sample requests in `events/` the way CloudFormation does (published to the
//!    topic, each with a fresh RequestId and a presigned ResponseURL) and shows which region
//!    answered each, how fast, and what; a long-running one (`create-echo-long.json`) shows
//!    each of its polls as the lease record records them;
//! 3. runs a failover drill (control to the secondary, probe, control back, probe);
//! 4. stops the primary's worker, sends a probe, and times the secondary's takeover;
//! 5. waits for the long work's signal and shows when its answer and its signal came, from
//!    which region, under which fence, and how often each was PUT;
//! 6. waits for every queue to drain and counts every PUT: it exits 0 only if each request was
//!    answered exactly once, the long work was answered within its ServiceTimeout and
//!    signalled once after it, and the DLQs are empty.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cfn_once_core::lease::{LeaseState, LeaseStore};
use cfn_once_core::request::{RequestKey, StackArn};
use cfn_once_core::response::ResponseBody;
use serde_json::Value;

use crate::environment::{EnvironmentOptions, LocalEnvironment, s3_client};
use crate::functions::{EXAMPLES_FILE, LocalFunctions};
use crate::functions_file::FunctionsFile;
use crate::long_work::{self, LongWork};
use crate::moto::MotoServer;
use crate::pair::RegionPair;
use crate::provision;
use crate::report::status_name;
use crate::settings::{LOCAL_SETTINGS, LOCAL_SETTLE_MS};
use crate::tls_front::TlsFront;
use cfn_once::adapters::dynamodb_lease::DynamoLeaseStore;
use cfn_once::system_clock::random_seed;
use cfn_once_ops::drill::{self, DrillOptions, DrillTarget};

/// The sample requests, in the order a stack's life would send them.
pub const SAMPLE_EVENTS: [&str; 11] = [
    "create-echo.json",
    "update-echo.json",
    "delete-echo.json",
    "create-echo-long.json",
    "create-dynamodb-item.json",
    "delete-dynamodb-item.json",
    "create-bad-property.json",
    // Answered by an existing Python function (examples/functions/cdk-provider) in each region.
    "create-reservation.json",
    "delete-reservation.json",
    // Answered by a function that PUTs its own answer (examples/functions/cfn-response).
    "create-greeting.json",
    "delete-greeting.json",
];

const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// What to run against.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// A running moto; `None` starts one with `python`.
    pub endpoint_url: Option<String>,
    pub python: PathBuf,
    pub events_dir: PathBuf,
    /// The secondary queue's DelaySeconds.
    pub secondary_delay_s: u32,
}

/// One request's fate.
#[derive(Debug, Clone)]
struct Row {
    label: String,
    request_type: String,
    resource_type: String,
    status: Option<String>,
    region: String,
    latency_ms: Option<u128>,
    key: String,
    puts: usize,
    /// Polls of a provider that answered in progress, as the lease record showed them.
    polls: Option<u32>,
    detail: String,
}

/// Runs the demo; `Ok(true)` if every request was answered exactly once.
pub async fn run(options: DemoOptions) -> anyhow::Result<bool> {
    // Held until the demo ends: dropping it stops moto.
    let moto = match &options.endpoint_url {
        Some(_) => None,
        None => {
            step("starting local AWS (moto)");
            Some(MotoServer::start(&options.python)?)
        }
    };
    let endpoint = match (&options.endpoint_url, &moto) {
        (Some(endpoint), _) => endpoint.clone(),
        (None, Some(moto)) => moto.endpoint().to_owned(),
        (None, None) => unreachable!("moto is started when no endpoint is given"),
    };
    let suffix = format!("{:06x}", random_seed() & 0xff_ffff);
    step(&format!("provisioning two regions on {endpoint} (secondary queue delay {} s)", options.secondary_delay_s));
    // S3 over HTTPS, as in AWS, with a CA of the demo's own (held until the demo ends).
    let state = std::env::temp_dir().join(format!("cfn-once-demo-{suffix}"));
    std::fs::create_dir_all(&state).with_context(|| format!("cannot create {}", state.display()))?;
    let front = TlsFront::start(&endpoint, &state)?;
    let env = LocalEnvironment::provision(
        &endpoint,
        &front,
        &EnvironmentOptions::local(format!("cfn-once-demo-{suffix}"), options.secondary_delay_s),
    )
    .await?;
    let file = &env.file;
    println!(
        "  topic in {} -> primary queue in {} (no delay) and secondary queue in {} ({} s delay)",
        file.customer_region, file.primary_region, file.secondary_region, options.secondary_delay_s
    );
    // Each region's copies of the example functions, behind a local Lambda Invoke API.
    let examples = FunctionsFile::read(&options.events_dir.join("..").join(EXAMPLES_FILE))?;
    let logs = state.join("functions");
    let builds = logs.join("build");
    // The functions' processes start in their own folders: a relative path (the Makefile's
    // `.venv/bin/python`) would name nothing there, as `cfn-once local` already knows.
    let python = std::path::absolute(&options.python)?;
    let functions =
        LocalFunctions::start(&env, &python, &examples, &logs, &builds, &format!("cfn-once-demo-{suffix}"), &|line| {
            println!("  .. {line}")
        })
        .await?;
    step(&format!(
        "Custom::Reservation (onEvent, isComplete) and Custom::Greeting (answers by itself, as cfn-response does) answered by Python functions in each region, under awslambdaric behind a local Invoke API (CFN_ONCE_FUNCTIONS={}); their logs: {}",
        examples.cfn_once_functions(),
        logs.display()
    ));
    let mut pair = RegionPair::start_serving(&env, &LOCAL_SETTINGS, |_| None, Some(&functions)).await?;
    step("handlers running in both regions behind local event source mappings");

    let stack_id = format!("arn:aws:cloudformation:{}:123456789012:stack/cfn-once-demo/{suffix}", file.customer_region);
    let long_work = send_long_work(&env, &options.events_dir, &stack_id).await?;
    step(&format!(
        "sent a resource with a wait condition ({}); its work runs beside what follows",
        long_work.describe()
    ));
    let waiting = {
        let (work, s3) = (long_work.clone(), s3_client(&env.sdk(&file.primary_region).await));
        let (bucket, timeout) = (file.response_bucket.clone(), Duration::from_secs(long_work.wait_timeout_s));
        tokio::spawn(async move { work.wait(&s3, &bucket, timeout).await })
    };

    let rows = send_samples(&env, &options.events_dir, &stack_id).await?;
    print_table("sample requests", &rows);

    let target = DrillTarget::from_env_file(file);
    step("failover drill");
    let drill = drill::run(&target, DrillOptions { settle_ms: LOCAL_SETTLE_MS, answer_timeout_ms: 60_000 }, |line| {
        println!("  .. {line}")
    })
    .await?;
    println!("{}", indent(&drill.render()));

    step(&format!("stopping the primary's worker ({}) and sending a probe", file.primary_region));
    pair.primary.take_down().await;
    let failover =
        drill::probe_once(&target, 60_000, "probe with the primary's worker down", &file.secondary_region, |line| {
            println!("  .. {line}")
        })
        .await?;
    println!(
        "  {} answered by {} in {} ms (secondary queue delay {} s)",
        if failover.passed { "ok  " } else { "FAIL" },
        failover.answered_by.as_deref().unwrap_or("nobody"),
        failover.latency_ms.map_or_else(|| "-".to_owned(), |ms| ms.to_string()),
        options.secondary_delay_s
    );
    pair.primary.start();
    step("primary's worker restarted");

    step(&format!("waiting for the signal of the work of {}", long_work.logical_resource_id));
    let arrivals = waiting.await.context("the long work's watch")??;
    let store =
        DynamoLeaseStore::new(aws_sdk_dynamodb::Client::new(&env.sdk(&file.primary_region).await), &file.table_name);
    let s3 = s3_client(&env.sdk(&file.primary_region).await);
    let long_report = long_work.report(arrivals, &s3, &file.response_bucket, &store).await?;
    println!("\n{}\n", long_report.render());

    step("waiting for every queue to drain, then counting every PUT");
    let sqs_primary = aws_sdk_sqs::Client::new(&env.sdk(&file.primary_region).await);
    let sqs_secondary = aws_sdk_sqs::Client::new(&env.sdk(&file.secondary_region).await);
    let drained =
        wait_for_drain(&[(&sqs_primary, &file.queues.primary), (&sqs_secondary, &file.queues.secondary)]).await?;
    let dlq_messages = provision::queue_depth(&sqs_primary, &file.queues.primary_dlq).await?
        + provision::queue_depth(&sqs_secondary, &file.queues.secondary_dlq).await?;
    pair.stop().await;

    let mut keys: Vec<String> = rows.iter().map(|row| row.key.clone()).collect();
    keys.extend(drill.probes.iter().map(|probe| probe.response_key.clone()));
    keys.push(failover.response_key.clone());
    keys.extend([long_work.answer_key.clone(), long_work.handle_key.clone()]);
    let mut once = 0;
    for key in &keys {
        let puts = provision::response_puts(&s3, &file.response_bucket, key).await?;
        if puts == 1 {
            once += 1;
        } else {
            println!("  ! {key} received {puts} PUTs");
        }
    }
    let long_passed = long_report.passed();
    if !long_passed {
        println!("  ! the long work was not answered within its ServiceTimeout and signalled SUCCESS once after it");
    }
    let passed = once == keys.len() && drained && dlq_messages == 0 && drill.passed && failover.passed && long_passed;
    println!(
        "\n{once}/{} answers and signals PUT exactly once (samples, drill probes, failover probe, the long work's answer and signal); queues {}; DLQs hold {dlq_messages} message(s).",
        keys.len(),
        if drained { "drained" } else { "NOT drained" }
    );
    println!("{}", if passed { "demo passed" } else { "demo FAILED" });
    Ok(passed)
}

/// Sends the resource with a wait condition (`long_work::EVENT`) in the demo's stack.
async fn send_long_work(env: &LocalEnvironment, events_dir: &Path, stack_id: &str) -> anyhow::Result<LongWork> {
    let file = &env.file;
    let presigner = s3_client(&env.https_sdk(&file.primary_region).await?);
    let mut request = load_event(&events_dir.join(long_work::EVENT))?;
    let request_id = format!("{:016x}-demo-long-work", random_seed());
    let logical = request["LogicalResourceId"].as_str().unwrap_or("Resource").to_owned();
    let key = format!("{logical}/{request_id}");
    request["RequestId"] = Value::String(request_id);
    request["StackId"] = Value::String(stack_id.to_owned());
    request["ServiceToken"] = Value::String(file.topic_arn.clone());
    request["ResourceProperties"]["ServiceToken"] = Value::String(file.topic_arn.clone());
    request["ResponseURL"] =
        Value::String(provision::presigned_put_url(&presigner, &file.response_bucket, &key, 7_200).await?);
    LongWork::send(env, request, &key).await
}

/// Sends the sample events one by one, each after the previous was answered.
async fn send_samples(env: &LocalEnvironment, events_dir: &Path, stack_id: &str) -> anyhow::Result<Vec<Row>> {
    let file = &env.file;
    let sns = aws_sdk_sns::Client::new(&env.sdk(&file.customer_region).await);
    let s3 = s3_client(&env.sdk(&file.primary_region).await);
    // ResponseURLs are presigned on the HTTPS endpoint, as CloudFormation's are on S3's.
    let presigner = s3_client(&env.https_sdk(&file.primary_region).await?);
    let store =
        DynamoLeaseStore::new(aws_sdk_dynamodb::Client::new(&env.sdk(&file.primary_region).await), &file.table_name);
    let mut physical_ids: HashMap<String, String> = HashMap::new();
    let mut rows = Vec::new();
    step(&format!("sending {} sample requests from {}", SAMPLE_EVENTS.len(), events_dir.display()));
    for (index, event) in SAMPLE_EVENTS.iter().enumerate() {
        let mut request = load_event(&events_dir.join(event))?;
        let request_id = format!("{:016x}-demo-{index}", random_seed());
        let logical = request["LogicalResourceId"].as_str().unwrap_or("Resource").to_owned();
        let key = format!("{logical}/{request_id}");
        request["RequestId"] = Value::String(request_id.clone());
        request["StackId"] = Value::String(stack_id.to_owned());
        request["ServiceToken"] = Value::String(file.topic_arn.clone());
        request["ResourceProperties"]["ServiceToken"] = Value::String(file.topic_arn.clone());
        if request["ResourceProperties"].get("TableName").is_some() {
            request["ResourceProperties"]["TableName"] = Value::String(env.item_table.clone());
        }
        request["ResponseURL"] =
            Value::String(provision::presigned_put_url(&presigner, &file.response_bucket, &key, 7_200).await?);
        if request.get("PhysicalResourceId").is_some()
            && let Some(id) = physical_ids.get(&logical)
        {
            request["PhysicalResourceId"] = Value::String(id.clone());
        }
        let request_type = request["RequestType"].as_str().unwrap_or("?").to_owned();
        let resource_type = request["ResourceType"].as_str().unwrap_or("?").to_owned();
        print!("  [{}/{}] {request_type} {resource_type} {logical} ... ", index + 1, SAMPLE_EVENTS.len());
        std::io::stdout().flush().ok();

        let sent_at = Instant::now();
        sns.publish().topic_arn(&file.topic_arn).message(request.to_string()).send().await.context("publish")?;
        let record_key = RequestKey {
            stack_id: StackArn::parse(stack_id).context("the sample StackId is not a stack ARN")?,
            request_id,
        };
        let answer = provision::wait_for_response(&s3, &file.response_bucket, &key, ANSWER_TIMEOUT, |_| {});
        let mut watch = WaitWatch::default();
        let body = tokio::select! {
            body = answer => body?,
            never = watch.follow(&store, &record_key, sent_at) => match never {},
        };
        let latency_ms = body.as_ref().map(|_| sent_at.elapsed().as_millis());
        let parsed = body.as_deref().map(ResponseBody::parse).transpose().context("response is not JSON")?;
        if watch.waits > 0 {
            print!("    ");
        }
        println!("{}", latency_ms.map_or_else(|| "no answer".to_owned(), |ms| format!("answered in {ms} ms")));
        let record = store.read(&record_key).await?;
        if let Some(parsed) = &parsed {
            physical_ids.insert(logical.clone(), parsed.physical_resource_id.clone());
        }
        rows.push(Row {
            label: (*event).to_owned(),
            request_type,
            resource_type,
            status: parsed.as_ref().map(|p| status_name(p.status).to_owned()),
            region: record.map(|r| r.owner.split('/').next().unwrap_or("?").to_owned()).unwrap_or_else(|| "-".into()),
            latency_ms,
            key,
            puts: 0,
            // Each wait stored is followed by one poll: the last one answered.
            polls: (watch.waits > 0).then_some(watch.waits),
            detail: parsed.as_ref().map(detail).unwrap_or_else(|| "no response before the timeout".into()),
        });
    }
    for row in &mut rows {
        row.puts = provision::response_puts(&s3, &file.response_bucket, &row.key).await?;
    }
    Ok(rows)
}

/// Follows a request's lease record while it is answered, printing each wait its provider
/// stored: who stored it, when, and when the next poll is due.
#[derive(Debug, Default)]
struct WaitWatch {
    /// Waits seen (the in-progress answer, then each poll still in progress).
    waits: u32,
    last: Option<(u64, u32)>,
}

impl WaitWatch {
    /// Never returns: dropped when the answer arrives.
    async fn follow(
        &mut self,
        store: &DynamoLeaseStore,
        key: &RequestKey,
        sent_at: Instant,
    ) -> std::convert::Infallible {
        loop {
            if let Ok(Some(record)) = store.read(key).await
                && record.state == LeaseState::Waiting
                && let Some(poll) = &record.poll
                && self.last != Some((record.fence, poll.polls))
            {
                if self.waits == 0 {
                    println!();
                }
                self.last = Some((record.fence, poll.polls));
                self.waits += 1;
                let region = record.owner.split('/').next().unwrap_or("?");
                let what = if poll.polls == 0 {
                    "answered in progress".to_owned()
                } else {
                    format!("poll {}: still in progress", poll.polls)
                };
                let next_s = poll.poll_at_ms.saturating_sub(record.updated_ms).div_ceil(1000);
                println!(
                    "    +{:>5.1} s  {region:<9}  fence {}  {what}; lease released, next poll in {next_s} s",
                    sent_at.elapsed().as_secs_f64(),
                    record.fence
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn step(what: &str) {
    println!("- {what}");
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}")).collect::<Vec<_>>().join("\n")
}

fn load_event(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read sample event {}", path.display()))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    if !value.is_object() {
        bail!("{} is not a CloudFormation request object", path.display());
    }
    Ok(value)
}

/// Waits until every queue is empty (delayed and in-flight messages included).
async fn wait_for_drain(queues: &[(&aws_sdk_sqs::Client, &String)]) -> anyhow::Result<bool> {
    let started = Instant::now();
    while started.elapsed() < ANSWER_TIMEOUT {
        let mut depth = 0;
        for (sqs, url) in queues {
            depth += provision::queue_depth(sqs, url).await?;
        }
        if depth == 0 {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(false)
}

fn detail(body: &ResponseBody) -> String {
    let text = match (&body.reason, body.data.is_empty()) {
        (Some(reason), _) => reason.clone(),
        (None, false) => format!("Data {}", serde_json::to_string(&body.data).unwrap_or_default()),
        (None, true) => format!("PhysicalResourceId {}", body.physical_resource_id),
    };
    // Responses carry text from providers and requests: made safe for the terminal, and short.
    crate::report::terminal_safe(&text, 64)
}

fn print_table(title: &str, rows: &[Row]) {
    let header = ["#", title, "type", "resource", "status", "answered by", "ms", "polls", "PUTs", "response"];
    let cells: Vec<[String; 10]> = rows
        .iter()
        .enumerate()
        .map(|(index, row)| {
            [
                (index + 1).to_string(),
                row.label.clone(),
                row.request_type.clone(),
                row.resource_type.clone(),
                row.status.clone().unwrap_or_else(|| "-".into()),
                row.region.clone(),
                row.latency_ms.map_or_else(|| "-".into(), |ms| ms.to_string()),
                row.polls.map_or_else(|| "-".into(), |polls| polls.to_string()),
                row.puts.to_string(),
                row.detail.clone(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|column| {
            cells
                .iter()
                .map(|row| row[column].chars().count())
                .chain([header[column].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: &[String]| {
        let padded: Vec<String> = values.iter().zip(&widths).map(|(value, width)| format!("{value:<width$}")).collect();
        println!("  {}", padded.join("  ").trim_end());
    };
    println!();
    line(&header.map(str::to_owned));
    line(&widths.iter().map(|width| "-".repeat(*width)).collect::<Vec<_>>());
    for row in &cells {
        line(row);
    }
    println!();
}
