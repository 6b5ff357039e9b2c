//! `cfn-once demo`: the product, end to end, on this machine.
//!
//! Starts moto (or uses a running one), provisions what the templates would (the ServiceToken
//! topic in the customer region, the primary region's queue and DLQ, the lease table, a response
//! bucket, an item table), runs the handler behind the local event source mapping, and sends
//! the sample requests in `events/` the way CloudFormation does: published to the topic, each
//! with a fresh RequestId and a presigned ResponseURL. It shows who answered each request, how
//! fast, and what; then checks that every request was answered exactly once.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use aws_sdk_dynamodb::types::KeyType;
use cfn_once_core::lease::LeaseStore;
use cfn_once_core::request::RequestKey;
use cfn_once_core::response::{ResponseBody, Status};
use serde_json::Value;

use crate::adapters::dynamodb_lease::DynamoLeaseStore;
use crate::app::App;
use crate::clock::random_seed;
use crate::config::Config;
use crate::local::esm::{EsmSettings, LocalEventSourceMapping};
use crate::local::moto::MotoServer;
use crate::local::provision::{self, QueueSettings};

/// The sample requests, in the order a stack's life would send them.
pub const SAMPLE_EVENTS: [&str; 6] = [
    "create-echo.json",
    "update-echo.json",
    "delete-echo.json",
    "create-dynamodb-item.json",
    "delete-dynamodb-item.json",
    "create-bad-property.json",
];

const CUSTOMER_REGION: &str = "us-east-2";
const PRIMARY_REGION: &str = "us-east-1";
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// What to run against.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// A running moto; `None` starts one with `python`.
    pub endpoint_url: Option<String>,
    pub python: PathBuf,
    pub events_dir: PathBuf,
}

/// One request's fate.
#[derive(Debug, Clone)]
struct Row {
    event: String,
    request_type: String,
    resource_type: String,
    status: Option<Status>,
    region: String,
    latency_ms: u128,
    puts: usize,
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
    println!(
        "cfn-once demo: local AWS at {endpoint}; customer region {CUSTOMER_REGION}, primary region {PRIMARY_REGION}"
    );

    let suffix = format!("{:06x}", random_seed() & 0xff_ffff);
    let names = Names {
        topic: format!("cfn-once-demo-token-{suffix}"),
        queue: format!("cfn-once-demo-primary-{suffix}"),
        table: format!("cfn-once-demo-leases-{suffix}"),
        bucket: format!("cfn-once-demo-responses-{suffix}"),
        item_table: "cfn-once-example-settings".to_owned(),
    };
    step("provisioning topic, queue + DLQ, lease table, item table, response bucket");
    let primary_sdk = provision::sdk_config(&endpoint, PRIMARY_REGION).await;
    let customer_sdk = provision::sdk_config(&endpoint, CUSTOMER_REGION).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&primary_sdk);
    let sqs = aws_sdk_sqs::Client::new(&primary_sdk);
    let sns = aws_sdk_sns::Client::new(&customer_sdk);
    let s3 =
        aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&primary_sdk).force_path_style(true).build());
    provision::create_lease_table(&dynamodb, &names.table).await?;
    if let Err(error) = provision::create_table(&dynamodb, &names.item_table, &[("pk", KeyType::Hash)]).await {
        // A reused moto may already have it from an earlier run.
        if !format!("{error:#}").contains("ResourceInUse") {
            return Err(error);
        }
    }
    provision::create_response_bucket(&s3, &names.bucket).await?;
    let queues = provision::create_queue_pair(
        &sqs,
        &names.queue,
        QueueSettings { delay_s: 0, visibility_timeout_s: 180, max_receive_count: 5 },
    )
    .await?;
    let topic_arn = provision::create_topic(&sns, &names.topic).await?;
    provision::subscribe_queue(&sns, &topic_arn, &queues.arn, false).await?;

    let vars: HashMap<&str, String> = HashMap::from([
        ("AWS_REGION", PRIMARY_REGION.to_owned()),
        ("CFN_ONCE_TABLE", names.table.clone()),
        ("CFN_ONCE_TOPIC_ARNS", topic_arn.clone()),
        ("CFN_ONCE_RESPONSE_URL_ALLOW", format!("{endpoint}/{}/", names.bucket)),
        ("CFN_ONCE_ITEM_TABLES", names.item_table.clone()),
    ]);
    let config = Config::from_lookup(|name| vars.get(name).cloned())?;
    let app = Arc::new(App::from_config(&config, &primary_sdk)?);
    let esm = LocalEventSourceMapping::new(
        sqs.clone(),
        &queues.url,
        EsmSettings { batch_size: 10, wait_time_s: 1, function_timeout_ms: 60_000 },
    )
    .await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker_app = Arc::clone(&app);
    let worker = tokio::spawn(async move {
        let handler = |event| crate::lambda::handle(&worker_app, event);
        esm.run(handler, async { drop(stop_rx.await) }, |report| {
            if let Err(error) = report {
                eprintln!("  ! event source mapping: {error:#}");
            }
        })
        .await;
    });
    step(&format!("worker running in {PRIMARY_REGION}: local event source mapping -> cfn-once handler"));

    let store = DynamoLeaseStore::new(dynamodb.clone(), &names.table);
    let stack_id = format!("arn:aws:cloudformation:{CUSTOMER_REGION}:123456789012:stack/cfn-once-demo/{suffix}");
    let mut physical_ids: HashMap<String, String> = HashMap::new();
    let mut rows = Vec::new();
    let mut keys = Vec::new();
    println!("sending {} requests from {}:", SAMPLE_EVENTS.len(), options.events_dir.display());
    for (index, event) in SAMPLE_EVENTS.iter().enumerate() {
        let mut request = load_event(&options.events_dir.join(event))?;
        let request_id = format!("{:016x}-demo-{index}", random_seed());
        let logical = request["LogicalResourceId"].as_str().unwrap_or("Resource").to_owned();
        let key = format!("{logical}/{request_id}");
        request["RequestId"] = Value::String(request_id.clone());
        request["StackId"] = Value::String(stack_id.clone());
        request["ServiceToken"] = Value::String(topic_arn.clone());
        request["ResourceProperties"]["ServiceToken"] = Value::String(topic_arn.clone());
        request["ResponseURL"] = Value::String(provision::presigned_put_url(&s3, &names.bucket, &key, 7_200).await?);
        if request.get("PhysicalResourceId").is_some()
            && let Some(id) = physical_ids.get(&logical)
        {
            request["PhysicalResourceId"] = Value::String(id.clone());
        }
        let request_type = request["RequestType"].as_str().unwrap_or("?").to_owned();
        let resource_type = request["ResourceType"].as_str().unwrap_or("?").to_owned();
        print!("  [{}/{}] {request_type} {resource_type} {logical} ", index + 1, SAMPLE_EVENTS.len());
        std::io::stdout().flush().ok();

        let sent_at = Instant::now();
        sns.publish().topic_arn(&topic_arn).message(request.to_string()).send().await.context("publish")?;
        let body = wait_for_answer(&s3, &names.bucket, &key, sent_at).await?;
        let latency_ms = sent_at.elapsed().as_millis();
        let parsed = body.as_deref().map(ResponseBody::parse).transpose().context("response is not JSON")?;
        println!("{}", if parsed.is_some() { format!("answered in {latency_ms} ms") } else { "no answer".to_owned() });
        let record = store.read(&RequestKey { stack_id: stack_id.clone(), request_id }).await?;
        if let Some(parsed) = &parsed {
            physical_ids.insert(logical.clone(), parsed.physical_resource_id.clone());
        }
        keys.push((rows.len(), key));
        rows.push(Row {
            event: (*event).to_owned(),
            request_type,
            resource_type,
            status: parsed.as_ref().map(|p| p.status),
            region: record.map(|r| r.owner.split('/').next().unwrap_or("?").to_owned()).unwrap_or_else(|| "-".into()),
            latency_ms,
            puts: 0,
            detail: parsed.as_ref().map(detail).unwrap_or_else(|| "no response before the timeout".into()),
        });
    }

    step("waiting for the queue to drain, then counting every PUT");
    let drained = wait_for_drain(&sqs, &queues.url).await?;
    for (row, key) in keys {
        rows[row].puts = provision::response_versions(&s3, &names.bucket, &key).await?.len();
    }
    let dlq_depth = provision::queue_depth(&sqs, &queues.dlq_url).await?;
    let _ = stop_tx.send(());
    let _ = worker.await;

    print_table(&rows);
    let once = rows.iter().filter(|row| row.puts == 1).count();
    let ok = once == rows.len() && drained && dlq_depth == 0;
    println!(
        "\n{once}/{} requests answered exactly once; queue {}; DLQ holds {dlq_depth} message(s).",
        rows.len(),
        if drained { "drained" } else { "NOT drained" }
    );
    println!("{}", if ok { "demo passed" } else { "demo FAILED" });
    Ok(ok)
}

struct Names {
    topic: String,
    queue: String,
    table: String,
    bucket: String,
    item_table: String,
}

fn step(what: &str) {
    println!("- {what}");
}

fn load_event(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read sample event {}", path.display()))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    if !value.is_object() {
        bail!("{} is not a CloudFormation request object", path.display());
    }
    Ok(value)
}

async fn wait_for_answer(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    sent_at: Instant,
) -> anyhow::Result<Option<Vec<u8>>> {
    while sent_at.elapsed() < ANSWER_TIMEOUT {
        if let Some(first) = provision::response_versions(s3, bucket, key).await?.into_iter().next() {
            return Ok(Some(first));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(None)
}

async fn wait_for_drain(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> anyhow::Result<bool> {
    let started = Instant::now();
    while started.elapsed() < ANSWER_TIMEOUT {
        if provision::queue_depth(sqs, queue_url).await? == 0 {
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
    shorten(&text, 70)
}

fn shorten(text: &str, chars_max: usize) -> String {
    if text.chars().count() <= chars_max {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(chars_max - 1).collect();
    short.push('…');
    short
}

fn print_table(rows: &[Row]) {
    let header = ["#", "request", "type", "resource", "status", "answered by", "ms", "PUTs", "response"];
    let cells: Vec<[String; 9]> = rows
        .iter()
        .enumerate()
        .map(|(index, row)| {
            [
                (index + 1).to_string(),
                row.event.clone(),
                row.request_type.clone(),
                row.resource_type.clone(),
                match row.status {
                    Some(Status::Success) => "SUCCESS".into(),
                    Some(Status::Failed) => "FAILED".into(),
                    None => "-".into(),
                },
                row.region.clone(),
                row.latency_ms.to_string(),
                row.puts.to_string(),
                row.detail.clone(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|column| {
            cells.iter().map(|row| row[column].chars().count()).chain([header[column].len()]).max().unwrap_or(0)
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
}
