//! The demo's work past its ServiceTimeout: a resource with a wait condition
//! (`events/create-long-work.json`), answered at once, whose provider's work goes on after the
//! ServiceTimeout has passed and is signalled, once, to the wait condition's handle.
//!
//! Locally the handle is what CloudFormation's is, a presigned S3 URL, made like the demo's
//! ResponseURLs: into the response bucket on the HTTPS endpoint, which the handlers' URL
//! allow-list admits. What happened is read back as an operator would read it: the versions of
//! the answer's and the signal's S3 objects (one PUT each, or the demo fails) and the two lease
//! records, the request's and its work's (GetItem), for who committed each and under which
//! fence. The handle is never printed.

use std::time::{Duration, Instant};

use anyhow::Context;
use cfn_once::adapters::dynamodb_lease::DynamoLeaseStore;
use cfn_once_core::lease::{LeaseRecord, LeaseStore};
use cfn_once_core::request::{InputPolicy, RequestKey, decode};
use cfn_once_core::response::ResponseBody;
use cfn_once_core::vocabulary::Role;
use cfn_once_core::wait_condition::{HANDLE_PROPERTY, Signal, SignalStatus, TIMEOUT_PROPERTY};
use serde_json::Value;

use crate::environment::{LocalEnvironment, s3_client};
use crate::provision;
use crate::report::{status_name, terminal_safe};

/// The sample request with a wait condition, in `events/`.
pub const EVENT: &str = "create-long-work.json";

/// The longest response or signal text shown in a row.
const DETAIL_CHARS_MAX: usize = 100;

/// A request with a wait condition, sent: where its answer and its signal land, and the keys of
/// its two lease records.
#[derive(Debug, Clone)]
pub struct LongWork {
    pub logical_resource_id: String,
    pub resource_type: String,
    /// The response bucket's key of the ResponseURL.
    pub answer_key: String,
    /// The response bucket's key of the wait condition handle.
    pub handle_key: String,
    /// The request's lease record.
    pub request_key: RequestKey,
    /// Its work's lease record, keyed as the handlers key it (`cfn_once_core::work::work_key`).
    pub work_key: RequestKey,
    pub service_timeout_s: u64,
    pub wait_timeout_s: u64,
    /// How long the provider's work takes (Custom::Echo's `InProgressForS`).
    pub work_s: u64,
    pub poll_interval_s: u64,
    pub sent_at: Instant,
}

/// When the answer and the signal were first seen in S3, after the request was sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arrivals {
    pub answered_after: Option<Duration>,
    pub signalled_after: Option<Duration>,
}

/// What became of a long work: its answer, its signal, and the polls between.
#[derive(Debug, Clone)]
pub struct LongWorkReport {
    pub work: LongWork,
    pub answer: Leg,
    pub signal: Leg,
    /// Polls of the provider before it finished, as its result (Echo's `Polls`) says.
    pub polls: Option<u64>,
}

/// The answer or the signal: what it said, when it came, who committed it, and how often it was
/// PUT.
#[derive(Debug, Clone)]
pub struct Leg {
    /// `SUCCESS`, `FAILED` or `FAILURE`; `None` if nothing came.
    pub status: Option<String>,
    pub after: Option<Duration>,
    /// The region of the execution that committed it (the record's last fence holder).
    pub region: String,
    pub fence: Option<u64>,
    pub puts: usize,
    pub detail: String,
}

impl LongWork {
    /// Publishes `request` (made live like a sample: StackId, RequestId, ServiceToken and a
    /// ResponseURL presigned for `answer_key`) to the environment's topic, with a fresh handle
    /// presigned into the response bucket as its `CfnOnceWaitHandle`.
    pub async fn send(env: &LocalEnvironment, mut request: Value, answer_key: &str) -> anyhow::Result<Self> {
        let file = &env.file;
        let text = |value: &Value, field: &str| value[field].as_str().unwrap_or_default().to_owned();
        let seconds = |request: &Value, field: &str| {
            let value = &request["ResourceProperties"][field];
            value.as_str().and_then(|s| s.parse::<u64>().ok()).or_else(|| value.as_u64()).unwrap_or(0)
        };
        let logical_resource_id = text(&request, "LogicalResourceId");
        let handle_key = format!("{logical_resource_id}Handle/{}", text(&request, "RequestId"));
        let presigner = s3_client(&env.https_sdk(&file.primary_region).await?);
        let expires_s = seconds(&request, TIMEOUT_PROPERTY).max(1) + 3_600;
        let handle = provision::presigned_put_url(&presigner, &file.response_bucket, &handle_key, expires_s).await?;
        request["ResourceProperties"][HANDLE_PROPERTY] = Value::String(handle);
        let (request_key, work_key) = keys_of(env, &request)?;
        let sns = aws_sdk_sns::Client::new(&env.sdk(&file.customer_region).await);
        let sent_at = Instant::now();
        sns.publish().topic_arn(&file.topic_arn).message(request.to_string()).send().await.context("publish")?;
        Ok(Self {
            resource_type: text(&request, "ResourceType"),
            logical_resource_id,
            answer_key: answer_key.to_owned(),
            handle_key,
            request_key,
            work_key,
            service_timeout_s: seconds(&request, "ServiceTimeout"),
            wait_timeout_s: seconds(&request, TIMEOUT_PROPERTY),
            work_s: seconds(&request, "InProgressForS"),
            poll_interval_s: seconds(&request, "PollIntervalS"),
            sent_at,
        })
    }

    /// A line saying what was sent (never the handle).
    pub fn describe(&self) -> String {
        format!(
            "{} {}: ServiceTimeout {} s, its work {} s polled every {} s, CfnOnceWaitTimeout {} s",
            terminal_safe(&self.resource_type, DETAIL_CHARS_MAX),
            terminal_safe(&self.logical_resource_id, DETAIL_CHARS_MAX),
            self.service_timeout_s,
            self.work_s,
            self.poll_interval_s,
            self.wait_timeout_s
        )
    }

    /// Waits, up to `timeout` after it was sent, for the answer and then the signal to appear
    /// in `bucket`, noting when each was first seen.
    pub async fn wait(&self, s3: &aws_sdk_s3::Client, bucket: &str, timeout: Duration) -> anyhow::Result<Arrivals> {
        let mut arrivals = Arrivals::default();
        while self.sent_at.elapsed() < timeout {
            if arrivals.answered_after.is_none() && provision::response_puts(s3, bucket, &self.answer_key).await? > 0 {
                arrivals.answered_after = Some(self.sent_at.elapsed());
            }
            if provision::response_puts(s3, bucket, &self.handle_key).await? > 0 {
                arrivals.signalled_after = Some(self.sent_at.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(arrivals)
    }

    /// Reads back what became of it: the S3 objects' versions and the two lease records.
    pub async fn report(
        &self,
        arrivals: Arrivals,
        s3: &aws_sdk_s3::Client,
        bucket: &str,
        store: &DynamoLeaseStore,
    ) -> anyhow::Result<LongWorkReport> {
        let answers = provision::response_versions(s3, bucket, &self.answer_key).await?;
        let signals = provision::response_versions(s3, bucket, &self.handle_key).await?;
        let request_record = store.read(&self.request_key).await?;
        let work_record = store.read(&self.work_key).await?;
        let answer = answers.first().and_then(|bytes| ResponseBody::parse(bytes).ok());
        let signal = signals.first().and_then(|bytes| Signal::parse(bytes));
        let result: Option<Value> = signal.as_ref().and_then(|signal| serde_json::from_str(&signal.data).ok());
        let polls = result.as_ref().and_then(|data| {
            let polls = &data["Polls"];
            polls.as_str().and_then(|s| s.parse().ok()).or_else(|| polls.as_u64())
        });
        Ok(LongWorkReport {
            work: self.clone(),
            answer: Leg {
                status: answer.as_ref().map(|body| status_name(body.status).to_owned()),
                after: arrivals.answered_after,
                region: region(request_record.as_ref()),
                fence: request_record.as_ref().map(|record| record.fence),
                puts: answers.len(),
                detail: answer.as_ref().map_or_else(
                    || "no answer".to_owned(),
                    |body| match &body.reason {
                        Some(reason) => terminal_safe(reason, DETAIL_CHARS_MAX),
                        None => terminal_safe(
                            &format!("Data {}", serde_json::to_string(&body.data).unwrap_or_default()),
                            DETAIL_CHARS_MAX,
                        ),
                    },
                ),
            },
            signal: Leg {
                status: signal.as_ref().map(|signal| signal_status(signal.status).to_owned()),
                after: arrivals.signalled_after,
                region: region(work_record.as_ref()),
                fence: work_record.as_ref().map(|record| record.fence),
                puts: signals.len(),
                detail: signal.as_ref().map_or_else(
                    || "no signal".to_owned(),
                    |signal| {
                        terminal_safe(
                            &format!("UniqueId {}, Reason {}, Data {}", signal.unique_id, signal.reason, signal.data),
                            DETAIL_CHARS_MAX,
                        )
                    },
                ),
            },
            polls,
        })
    }
}

impl LongWorkReport {
    /// Whether the work went as it should: answered SUCCESS within its ServiceTimeout, signalled
    /// SUCCESS after it, and each PUT exactly once.
    pub fn passed(&self) -> bool {
        let service_timeout = Duration::from_secs(self.work.service_timeout_s);
        self.answer.status.as_deref() == Some("SUCCESS")
            && self.answer.after.is_some_and(|after| after < service_timeout)
            && self.signal.status.as_deref() == Some("SUCCESS")
            && self.signal.after.is_some_and(|after| after > service_timeout)
            && (self.answer.puts, self.signal.puts) == (1, 1)
    }

    /// The rows: the answer, the signal, and a line on how the work outlived its ServiceTimeout.
    pub fn render(&self) -> String {
        let header = ["#", "long work", "what", "status", "at", "by", "fence", "PUTs", "detail"];
        let name = terminal_safe(&self.work.logical_resource_id, DETAIL_CHARS_MAX);
        let row = |index: usize, what: &str, leg: &Leg| -> Vec<String> {
            vec![
                index.to_string(),
                name.clone(),
                what.to_owned(),
                leg.status.clone().unwrap_or_else(|| "-".into()),
                leg.after.map_or_else(|| "-".into(), |after| format!("{:.1} s", after.as_secs_f64())),
                leg.region.clone(),
                leg.fence.map_or_else(|| "-".into(), |fence| fence.to_string()),
                leg.puts.to_string(),
                leg.detail.clone(),
            ]
        };
        let rows = [
            header.iter().map(|cell| (*cell).to_owned()).collect(),
            row(1, "answer", &self.answer),
            row(2, "signal", &self.signal),
        ];
        let mut lines = columns(&rows);
        lines.push(match self.signal.after {
            Some(after) => format!(
                "  signalled {:.1} s after its ServiceTimeout ({} s) passed, {} after {} polls; the answer was PUT {}, the signal {}",
                after.as_secs_f64() - self.work.service_timeout_s as f64,
                self.work.service_timeout_s,
                self.signal.status.as_deref().unwrap_or("-"),
                self.polls.map_or_else(|| "?".into(), |polls| polls.to_string()),
                times(self.answer.puts),
                times(self.signal.puts)
            ),
            None => format!("  no signal within the work's CfnOnceWaitTimeout ({} s)", self.work.wait_timeout_s),
        });
        lines.join("\n")
    }
}

/// The two lease keys of `request`: its own, and its work's, as the handlers compute them
/// (decoded with their input policy, so the handle is validated the same way).
fn keys_of(env: &LocalEnvironment, request: &Value) -> anyhow::Result<(RequestKey, RequestKey)> {
    let config = env.config(Role::Primary, &[])?;
    let policy = InputPolicy { raw_delivery: true, ..cfn_once::app::input_policy(&config) };
    let decoded = decode(Some(&request.to_string()), &policy).context("the long work's request does not decode")?;
    let spec = decoded
        .wait
        .spec()
        .with_context(|| format!("the long work's request declares no usable wait condition: {:?}", decoded.wait))?;
    let work_key = cfn_once_core::work::work_key(&decoded, spec);
    Ok((decoded.key, work_key))
}

/// The region of the execution that holds or held `record`'s fence (its owner is
/// `us-east-1/<invocation>/<nonce>`).
fn region(record: Option<&LeaseRecord>) -> String {
    record.and_then(|record| record.owner.split('/').next()).unwrap_or("-").to_owned()
}

/// `once`, `twice`, `3 times`.
fn times(count: usize) -> String {
    match count {
        1 => "once".into(),
        2 => "twice".into(),
        count => format!("{count} times"),
    }
}

fn signal_status(status: SignalStatus) -> &'static str {
    match status {
        SignalStatus::Success => "SUCCESS",
        SignalStatus::Failure => "FAILURE",
    }
}

/// `rows` as left-aligned columns, the first a header underlined with dashes.
fn columns(rows: &[Vec<String>]) -> Vec<String> {
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..count)
        .map(|c| rows.iter().filter_map(|row| row.get(c)).map(|cell| cell.chars().count()).max().unwrap_or(0))
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        format!("  {}", padded.join("  ").trim_end())
    };
    let mut lines = Vec::with_capacity(rows.len() + 1);
    for (index, row) in rows.iter().enumerate() {
        lines.push(line(row));
        if index == 0 {
            lines.push(line(&widths.iter().map(|width| "-".repeat(*width)).collect::<Vec<_>>()));
        }
    }
    lines
}
