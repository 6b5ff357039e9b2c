//! A failover drill: prove, through the real path, that the secondary region takes over when
//! told to and that the primary takes back.
//!
//! 1. Flip the active-region control to the secondary (the `control#active` item, or ARC
//!    routing controls), and wait for handlers' control caches to expire.
//! 2. Send a probe (`Custom::Echo` Create, a fresh RequestId, a presigned ResponseURL into the
//!    drill's bucket) through the ServiceToken topic; wait for the answer; read the lease record
//!    to see which region answered, and time it.
//! 3. Flip back to the primary, wait, probe again, expect the primary.
//!
//! The control is always flipped back, even when a probe fails. The same code runs against the
//! local environment (`.local/env.json`) and against deployed stacks.

use std::time::{Duration, Instant};

use anyhow::Context;
use aws_config::SdkConfig;
use cfn_once_core::clock::Clock;
use cfn_once_core::fingerprint::hex_prefix;
use cfn_once_core::lease::LeaseStore;
use cfn_once_core::request::{RequestKey, StackArn};
use cfn_once_core::response::{ResponseBody, Status};
use serde::Serialize;
use serde_json::json;

use crate::aws as provision;
use crate::aws::s3_client;
use crate::env_file::EnvFile;
use cfn_once::adapters::arc::ArcCluster;
use cfn_once::adapters::control_table::TableControl;
use cfn_once::adapters::dynamodb_lease::DynamoLeaseStore;
use cfn_once::config::ArcEndpoint;
use cfn_once::system_clock::{SystemClock, random_seed};

/// How long the drill waits after a flip on the local environment, whose handlers cache the
/// control for 1 s (`CFN_ONCE_CONTROL_CACHE_MS`, `cfn_once_local::settings`).
pub const LOCAL_SETTLE_MS: u64 = 1_500;

/// What to drill.
#[derive(Debug, Clone)]
pub struct DrillTarget {
    pub topic_arn: String,
    pub customer_region: String,
    pub primary_region: String,
    pub secondary_region: String,
    pub table_name: String,
    /// The region whose replica of the lease table to read and write.
    pub table_region: String,
    /// A bucket the drill may write probe responses to, and its region.
    pub response_bucket: String,
    pub bucket_region: String,
    /// A local endpoint (moto); `None` for AWS.
    pub endpoint_url: Option<String>,
    pub control: DrillControl,
}

/// How the drill flips the active region.
#[derive(Debug, Clone)]
pub enum DrillControl {
    Table,
    Arc { endpoints: Vec<ArcEndpoint>, primary_routing_control_arn: String, secondary_routing_control_arn: String },
}

impl DrillTarget {
    /// The local environment described by `.local/env.json`.
    pub fn from_env_file(file: &EnvFile) -> Self {
        Self {
            topic_arn: file.topic_arn.clone(),
            customer_region: file.customer_region.clone(),
            primary_region: file.primary_region.clone(),
            secondary_region: file.secondary_region.clone(),
            table_name: file.table_name.clone(),
            table_region: file.primary_region.clone(),
            response_bucket: file.response_bucket.clone(),
            bucket_region: file.primary_region.clone(),
            endpoint_url: Some(file.endpoint_url.clone()),
            control: DrillControl::Table,
        }
    }
}

/// Timing of the drill.
#[derive(Debug, Clone, Copy)]
pub struct DrillOptions {
    /// Wait after each flip: at least the handlers' CFN_ONCE_CONTROL_CACHE_MS.
    pub settle_ms: u64,
    /// How long a probe may take to be answered.
    pub answer_timeout_ms: u64,
}

/// One probe's result.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeResult {
    pub step: String,
    pub expected_region: String,
    pub answered_by: Option<String>,
    pub status: Option<String>,
    pub latency_ms: Option<u64>,
    /// Bodies PUT to the probe's ResponseURL when the drill checked.
    pub puts: usize,
    pub passed: bool,
    /// The S3 key of the probe's response.
    pub response_key: String,
}

/// The drill's report.
#[derive(Debug, Clone, Serialize)]
pub struct DrillReport {
    pub control: String,
    pub settle_ms: u64,
    pub probes: Vec<ProbeResult>,
    /// Set when the drill could not complete a step (the control was still flipped back).
    pub error: Option<String>,
    pub passed: bool,
}

impl DrillReport {
    /// A human-readable report.
    pub fn render(&self) -> String {
        let mut text = format!("failover drill (control: {}, settle {} ms)\n", self.control, self.settle_ms);
        for probe in &self.probes {
            text.push_str(&format!(
                "  {} {:<46} expected {:<10} answered by {:<10} {:>6} ms  {}\n",
                if probe.passed { "ok  " } else { "FAIL" },
                probe.step,
                probe.expected_region,
                probe.answered_by.as_deref().unwrap_or("nobody"),
                probe.latency_ms.map_or_else(|| "-".to_owned(), |ms| ms.to_string()),
                probe.status.as_deref().unwrap_or("no answer"),
            ));
        }
        if let Some(error) = &self.error {
            text.push_str(&format!("  error: {error}\n"));
        }
        text.push_str(if self.passed { "drill passed" } else { "drill FAILED" });
        text
    }
}

struct Clients {
    sns: aws_sdk_sns::Client,
    s3: aws_sdk_s3::Client,
    store: DynamoLeaseStore,
    table_control: TableControl,
    arc: Option<ArcCluster>,
}

/// Runs the drill; `progress` receives a line per step.
pub async fn run(
    target: &DrillTarget,
    options: DrillOptions,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<DrillReport> {
    let clients = clients(target).await;
    let control_name = match target.control {
        DrillControl::Table => "table item control#active",
        DrillControl::Arc { .. } => "ARC routing controls",
    };
    let mut report = DrillReport {
        control: control_name.into(),
        settle_ms: options.settle_ms,
        probes: Vec::new(),
        error: None,
        passed: false,
    };

    let steps = [(&target.secondary_region, "secondary"), (&target.primary_region, "primary")];
    for (region, role) in steps {
        progress(&format!("flipping the active region to the {role} ({region})"));
        if let Err(error) = flip(target, &clients, region).await {
            report.error = Some(format!("could not flip the control to {region}: {error:#}"));
            break;
        }
        progress(&format!("waiting {} ms for handlers' control caches", options.settle_ms));
        tokio::time::sleep(Duration::from_millis(options.settle_ms)).await;
        progress(&format!("probing: expecting {region} to answer"));
        match probe(target, &clients, options, &format!("probe with the {role} active"), region, &mut progress).await {
            Ok(result) => report.probes.push(result),
            Err(error) => {
                report.error = Some(format!("probe failed: {error:#}"));
                break;
            }
        }
    }
    if report.error.is_some() {
        progress(&format!("restoring the primary ({})", target.primary_region));
        if let Err(error) = flip(target, &clients, &target.primary_region).await {
            report.error = Some(format!(
                "{}; and restoring the primary failed too: {error:#}",
                report.error.take().unwrap_or_default()
            ));
        }
    }
    report.passed = report.error.is_none() && report.probes.len() == 2 && report.probes.iter().all(|p| p.passed);
    Ok(report)
}

async fn clients(target: &DrillTarget) -> Clients {
    let customer = sdk_for(target, &target.customer_region).await;
    let table = sdk_for(target, &target.table_region).await;
    let bucket = sdk_for(target, &target.bucket_region).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&table);
    let s3 = if target.endpoint_url.is_some() { s3_client(&bucket) } else { aws_sdk_s3::Client::new(&bucket) };
    let arc = match &target.control {
        DrillControl::Table => None,
        DrillControl::Arc { endpoints, .. } => Some(ArcCluster::new(&table, endpoints)),
    };
    Clients {
        sns: aws_sdk_sns::Client::new(&customer),
        s3,
        store: DynamoLeaseStore::new(dynamodb.clone(), &target.table_name),
        table_control: TableControl::new(dynamodb, &target.table_name, &target.primary_region),
        arc,
    }
}

async fn sdk_for(target: &DrillTarget, region: &str) -> SdkConfig {
    provision::sdk_for(target.endpoint_url.as_deref(), None, region).await
}

/// Makes `region` the active one.
async fn flip(target: &DrillTarget, clients: &Clients, region: &str) -> anyhow::Result<()> {
    match (&target.control, &clients.arc) {
        (DrillControl::Arc { primary_routing_control_arn, secondary_routing_control_arn, .. }, Some(arc)) => {
            let primary_on = region == target.primary_region;
            // One call sets both, so a safety rule requiring one On never sees both Off.
            arc.set(&[
                (primary_routing_control_arn.clone(), primary_on),
                (secondary_routing_control_arn.clone(), !primary_on),
            ])
            .await?;
        }
        _ => clients.table_control.set_active_region(region, SystemClock.now_ms(), "cfn-once drill").await?,
    }
    Ok(())
}

/// Sends one probe through the topic, outside a drill (e.g. with the primary's worker down),
/// and reports who answered and how fast.
pub async fn probe_once(
    target: &DrillTarget,
    answer_timeout_ms: u64,
    step: &str,
    expected_region: &str,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<ProbeResult> {
    let options = DrillOptions { settle_ms: 0, answer_timeout_ms };
    probe(target, &clients(target).await, options, step, expected_region, &mut progress).await
}

/// Sends one probe and waits for its answer.
async fn probe(
    target: &DrillTarget,
    clients: &Clients,
    options: DrillOptions,
    step: &str,
    expected_region: &str,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<ProbeResult> {
    let id = hex_prefix(&random_seed().to_be_bytes(), 8);
    let account = target.topic_arn.split(':').nth(4).unwrap_or("000000000000");
    let stack_id = format!("arn:aws:cloudformation:{}:{account}:stack/cfn-once-drill/{id}", target.customer_region);
    let request_id = format!("cfn-once-drill-{id}");
    let key = format!("cfn-once-drill/{request_id}");
    let url = provision::presigned_put_url(&clients.s3, &target.response_bucket, &key, 7_200).await?;
    let request = json!({
        "RequestType": "Create",
        "ServiceToken": target.topic_arn,
        "ResponseURL": url,
        "StackId": stack_id,
        "RequestId": request_id,
        "LogicalResourceId": "DrillProbe",
        "ResourceType": "Custom::Echo",
        "ResourceProperties": {"ServiceToken": target.topic_arn, "Message": "cfn-once failover drill probe", "Step": step},
    });
    let started = Instant::now();
    clients
        .sns
        .publish()
        .topic_arn(&target.topic_arn)
        .message(request.to_string())
        .send()
        .await
        .context("publishing the probe")?;

    let timeout = Duration::from_millis(options.answer_timeout_ms);
    let body = provision::wait_for_response(&clients.s3, &target.response_bucket, &key, timeout, |waited_s| {
        progress(&format!("waiting for the answer: {waited_s} s"))
    })
    .await?;
    let latency_ms = body.as_ref().map(|_| started.elapsed().as_millis() as u64);
    let stack_id = StackArn::parse(&stack_id).context("the probe's StackId is not a stack ARN")?;
    let record = clients.store.read(&RequestKey { stack_id, request_id }).await?;
    let answered_by =
        record.filter(|r| r.response.is_some()).map(|r| r.owner.split('/').next().unwrap_or_default().to_owned());
    let status = body.as_deref().map(ResponseBody::parse).transpose()?.map(|b| b.status);
    let puts = provision::response_puts(&clients.s3, &target.response_bucket, &key).await?;
    let passed = status == Some(Status::Success) && answered_by.as_deref() == Some(expected_region) && puts == 1;
    Ok(ProbeResult {
        step: step.to_owned(),
        expected_region: expected_region.to_owned(),
        answered_by,
        status: status.map(|s| if s == Status::Success { "SUCCESS".into() } else { "FAILED".into() }),
        latency_ms,
        puts,
        passed,
        response_key: key,
    })
}
