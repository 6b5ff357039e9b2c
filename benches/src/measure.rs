//! One run of one function: start it under a fresh fake Runtime API, with every AWS call over
//! HTTPS to a TLS front (a CA of the run's own) before a counting proxy, hand it a one-record
//! invocation and then warm batches of ten, and read the figures off the runtime's timed calls,
//! `/proc`, the proxy's log and S3.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_local::environment::s3_client;
use cfn_once_local::fault_proxy::{Exchange, Match, waited_for};
use cfn_once_local::provision;
use cfn_once_tests::{Call, FakeRuntime, FaultProxy, Posted, TlsFront};
use serde_json::{Value, json};

use crate::setup::{Bench, REGION, TOPIC_ARN};

/// How long one invocation may take before the run fails.
const INVOCATION_TIMEOUT: Duration = Duration::from_secs(60);
/// The records of a warm batch.
pub const BATCH: usize = 10;

/// How the functions reach AWS in a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// HTTPS to the TLS front, no latency added: what the function costs itself.
    Tls,
    /// HTTPS, and every call delayed at the proxy by its class's latency: the deployed table's
    /// and S3's round trips, for the time to answer.
    Latency(Latencies),
    /// The AWS calls in plain HTTP straight to the counting proxy (the response PUT stays
    /// HTTPS, as a presigned S3 URL always is, and crhelper only speaks HTTPS): the function's
    /// cost without TLS on its AWS calls, where the peer's is lowest.
    Plain,
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Tls => "tls",
            Self::Latency(_) => "latency",
            Self::Plain => "plain",
        }
    }
}

/// The round trip added to each call class, in ms (benches/README.md cites the defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latencies {
    /// A DynamoDB call on the multi-Region strongly consistent table: every write and
    /// consistent read waits for another Region.
    pub dynamodb_ms: u64,
    /// A PUT to S3 (the ResponseURL).
    pub s3_ms: u64,
    /// An SQS call.
    pub sqs_ms: u64,
}

impl Default for Latencies {
    fn default() -> Self {
        Self { dynamodb_ms: 20, s3_ms: 30, sqs_ms: 10 }
    }
}

impl Latencies {
    /// `dynamodb=20,s3=30,sqs=10`, any subset; the rest default.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut latencies = Self::default();
        for part in text.split(',').map(str::trim).filter(|part| !part.is_empty()) {
            let (class, ms) = part.split_once('=').ok_or_else(|| format!("{part:?} is not class=ms"))?;
            let ms: u64 = ms.trim().parse().map_err(|_| format!("{part:?}: {ms:?} is not a number of ms"))?;
            match class.trim() {
                "dynamodb" => latencies.dynamodb_ms = ms,
                "s3" => latencies.s3_ms = ms,
                "sqs" => latencies.sqs_ms = ms,
                other => return Err(format!("{other:?} is not a call class (dynamodb, s3, sqs)")),
            }
        }
        Ok(latencies)
    }

    /// The floor of a function whose answer waits for `dynamodb` calls and then the PUT.
    pub fn floor_ms(&self, dynamodb_calls: u64) -> u64 {
        dynamodb_calls * self.dynamodb_ms + self.s3_ms
    }

    fn apply(&self, proxy: &FaultProxy) {
        let ms = Duration::from_millis;
        for operation in ["GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan"] {
            proxy.add_latency(Match::Operation(operation.to_owned()), ms(self.dynamodb_ms));
        }
        for operation in
            ["ChangeMessageVisibility", "SendMessage", "DeleteMessage", "GetQueueUrl", "GetQueueAttributes"]
        {
            proxy.add_latency(Match::Operation(operation.to_owned()), ms(self.sqs_ms));
        }
        proxy.add_latency(Match::Put, ms(self.s3_ms));
    }
}

/// Which function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    Rust,
    Python,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Python => "python",
        }
    }
}

/// The figures of one run, in ms and MiB.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// exec → first `GET /next`.
    pub cold_start_ms: f64,
    /// CPU spent before the first `GET /next`.
    pub init_cpu_ms: f64,
    /// The first event handed out → its `/response`.
    pub first_alone_ms: f64,
    /// Of that, time spent waiting for AWS (each call from its arrival at the proxy to its
    /// reply: the round trip added there and moto's own time): the first invocation's calls
    /// are sequential, so the rest is the function's own.
    pub first_aws_ms: f64,
    /// Of the first request's time to answer, moto's own time (before the PUT was stored):
    /// what the floor leaves out.
    pub first_answer_moto_ms: f64,
    /// CPU spent on the first invocation.
    pub first_cpu_ms: f64,
    /// exec → the first `/response`.
    pub first_end_to_end_ms: f64,
    /// Warm batches: wall time per record.
    pub warm_ms_per_request: f64,
    /// Warm batches: CPU per record.
    pub warm_cpu_ms_per_request: f64,
    /// VmHWM at the end.
    pub peak_rss_mib: f64,
    /// AWS calls per warm request, by operation (`S3 PUT` for the response).
    pub warm_calls: BTreeMap<String, f64>,
    /// AWS calls of the first invocation, by operation.
    pub first_calls: BTreeMap<String, usize>,
    /// TLS connections the function opened over the whole run (handshakes the front completed).
    pub tls_handshakes: u64,
    /// Of those, the handshakes that resumed an earlier session (no certificate verified).
    pub tls_resumed: u64,
    /// Each warm batch's CPU per record, in order: the first warm batch is the first to run ten
    /// records at once, so it opens most of the process's connections.
    pub warm_batch_cpu_ms_per_request: Vec<f64>,
    /// The first request: handed out → its response PUT stored (the proxy relayed S3's reply).
    pub first_answer_ms: f64,
    /// Warm requests: their batch handed out → each one's PUT stored, the median.
    pub warm_answer_ms: f64,
    /// Round trips to AWS the first request waited for, one after another, before its PUT went
    /// out (calls sent side by side count once; see `fault_proxy::waited_for`).
    pub first_round_trips_before_put: usize,
    /// The first invocation's calls, one line each, in ms from its hand-out: when the call
    /// reached the proxy, the round trip added there, moto's time, when it was answered; and
    /// when the invocation's response was posted (`cfn-once-bench --timeline`).
    pub first_timeline: Vec<String>,
}

impl Sample {
    pub fn one_line(&self) -> String {
        format!(
            "cold {:.1} ms, first {:.1} ms ({:.1} ms CPU, answered in {:.1} ms after {} round trips), warm {:.2} ms ({:.2} ms CPU)/request (answered in {:.1} ms; CPU per request by batch {}), RSS {:.1} MiB, {} TLS handshakes ({} resumed)",
            self.cold_start_ms,
            self.first_alone_ms,
            self.first_cpu_ms,
            self.first_answer_ms,
            self.first_round_trips_before_put,
            self.warm_ms_per_request,
            self.warm_cpu_ms_per_request,
            self.warm_answer_ms,
            self.warm_batch_cpu_ms_per_request.iter().map(|ms| format!("{ms:.2}")).collect::<Vec<_>>().join(" / "),
            self.peak_rss_mib,
            self.tls_handshakes,
            self.tls_resumed
        )
    }
}

/// Runs `side` once: a cold start, one invocation of one record, `warm_batches` of ten.
pub async fn run_once(
    bench: &Bench,
    mode: &Mode,
    side: Side,
    pair: usize,
    warm_batches: usize,
) -> anyhow::Result<Sample> {
    let runtime = FakeRuntime::start();
    let proxy = FaultProxy::start(bench.moto_endpoint());
    if let Mode::Latency(latencies) = mode {
        latencies.apply(&proxy);
    }
    // The functions speak TLS to the front and the front plaintext to the proxy, which counts
    // and times what it forwards to moto as before; in plain mode their AWS calls go to the
    // proxy directly, and only the PUTs to the presigned URLs through the front.
    let front = TlsFront::start(&proxy.url(), bench.log_dir())?;
    let endpoint = if *mode == Mode::Plain { proxy.url() } else { front.url() };
    let presigner = s3_client(&provision::sdk_config(&front.url(), REGION).await);
    let tag = format!("{}-{}-{pair}-{}", mode.name(), side.name(), epoch_ms());

    // Every invocation is built before the process starts, so building them costs it nothing.
    let invocations = invocations(bench, &presigner, &tag, warm_batches).await?;

    let started = Instant::now();
    let mut child = spawn(bench, side, &runtime, &front, &endpoint, &tag)?;
    runtime.watch(child.id());
    let mut boundaries = Vec::new();
    for (request_id, event, _) in &invocations {
        let calls_before = proxy.log().len();
        runtime.invoke(request_id, event.clone(), 60_000);
        let posted = runtime.posted(request_id, INVOCATION_TIMEOUT);
        let Some(Posted::Response(body)) = posted else {
            let _ = child.kill();
            bail!("{} did not answer {request_id}: {posted:?} (see {})", side.name(), bench.log_dir().display());
        };
        let response: Value = serde_json::from_slice(&body).context("the batch response is not JSON")?;
        let failures = response["batchItemFailures"].as_array().map_or(0, Vec::len);
        if failures > 0 {
            let _ = child.kill();
            bail!("{} reported {failures} batch item failures for {request_id}", side.name());
        }
        boundaries.push((calls_before, proxy.log().len()));
    }
    let peak_rss_mib = peak_rss_kib(child.id()).unwrap_or(0) as f64 / 1024.0;
    let _ = child.kill();
    let _ = child.wait();

    // Every call went over TLS (the function knows no endpoint but the front's) and no
    // handshake failed, so the run measured the production path and no call was refused.
    let (tls_handshakes, refused) = (front.handshakes_completed(), front.handshakes_failed());
    let tls_resumed = front.handshakes_resumed();
    if tls_handshakes == 0 || refused > 0 {
        bail!("{}: {tls_handshakes} TLS handshakes completed and {refused} failed at the TLS front", side.name());
    }

    answered_once(bench, side, &invocations).await?;

    let calls = runtime.timed_calls();
    let find = |wanted: &dyn Fn(&Call) -> bool| {
        calls.iter().find(|(_, call, _)| wanted(call)).map(|(at, _, cpu)| (*at, cpu.unwrap_or(0)))
    };
    let (first_next, init_cpu) = find(&|call| matches!(call, Call::Next)).context("no GET /next")?;
    let ms = |from: Instant, to: Instant| to.duration_since(from).as_secs_f64() * 1000.0;
    let cpu_ms = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e6;
    let mut per_invocation = Vec::new();
    for (request_id, _, _) in &invocations {
        let handed = find(&|call| matches!(call, Call::Handed(id) if id == request_id)).context("not handed")?;
        let posted = find(&|call| matches!(call, Call::Posted(id) if id == request_id)).context("not posted")?;
        per_invocation.push((handed, posted));
    }
    let ((first_handed, first_handed_cpu), (first_posted, first_posted_cpu)) = per_invocation[0];
    let warm = &per_invocation[1..];
    let warm_requests = (warm.len() * BATCH).max(1) as f64;
    let warm_batch_cpu_ms_per_request: Vec<f64> =
        warm.iter().map(|((_, handed), (_, posted))| cpu_ms(*handed, *posted) / BATCH as f64).collect();
    let log = proxy.log();
    let operation = |index: usize| {
        let exchange = &log[index];
        exchange.operation.clone().unwrap_or_else(|| format!("S3 {}", exchange.method))
    };
    // The first invocation's calls are those made once it was handed out: what the function
    // did at init (cfn-once's control read) is the cold start's.
    let first_window: Vec<usize> =
        (boundaries[0].0..boundaries[0].1).filter(|index| log[*index].arrived >= first_handed).collect();
    let mut first_calls = BTreeMap::new();
    for index in &first_window {
        *first_calls.entry(operation(*index)).or_default() += 1;
    }
    // When each request's answer was stored: the proxy relayed S3's reply to its PUT.
    let stored = |key: &str| {
        log.iter()
            .find(|exchange| exchange.method == "PUT" && exchange.path.ends_with(key))
            .and_then(|exchange| exchange.replied.map(|at| (exchange.arrived, at)))
    };
    let (_, first_put_stored) =
        stored(&invocations[0].2[0]).context("the first request's PUT is not in the proxy's log")?;
    let first_put = first_window
        .iter()
        .copied()
        .find(|index| log[*index].method == "PUT")
        .context("the first request's PUT is not in its invocation's calls")?;
    // Only what it waited for once handed out: a read the function finished at init is not.
    let first_round_trips_before_put =
        waited_for(&log, first_put).into_iter().filter(|index| log[*index].arrived >= first_handed).count();
    let mut warm_answers = Vec::new();
    for ((handed, _), (_, _, keys)) in warm.iter().map(|(handed, _)| handed).zip(&invocations[1..]) {
        for key in keys {
            let (_, at) = stored(key).with_context(|| format!("the PUT of {key} is not in the proxy's log"))?;
            warm_answers.push(ms(*handed, at));
        }
    }
    warm_answers.sort_by(f64::total_cmp);
    let warm_answer_ms = warm_answers.get(warm_answers.len() / 2).copied().unwrap_or(0.0);
    let mut warm_calls: BTreeMap<String, f64> = BTreeMap::new();
    for (from, to) in &boundaries[1..] {
        for index in *from..*to {
            *warm_calls.entry(operation(index)).or_default() += 1.0 / warm_requests;
        }
    }
    let first_timeline = first_timeline(&log, &first_window, first_handed, first_posted);
    Ok(Sample {
        first_timeline,
        cold_start_ms: ms(started, first_next),
        init_cpu_ms: init_cpu as f64 / 1e6,
        first_alone_ms: ms(first_handed, first_posted),
        // The whole round trip: from the call's arrival at the proxy (its added latency, then
        // moto) to its reply; counting moto's time alone put the added round trips in "the
        // function's own".
        first_aws_ms: busy_ms(first_window.iter().filter_map(|index| {
            let exchange = &log[*index];
            exchange.replied.map(|replied| (exchange.arrived, replied))
        })),
        first_answer_moto_ms: busy_ms(first_window.iter().filter_map(|index| {
            let exchange = &log[*index];
            let forwarded = exchange.arrived + exchange.added_latency.unwrap_or_default();
            let took = exchange.upstream_took?;
            Some((forwarded, (forwarded + took).min(first_put_stored))).filter(|(from, _)| *from < first_put_stored)
        })),
        first_cpu_ms: cpu_ms(first_handed_cpu, first_posted_cpu),
        first_end_to_end_ms: ms(started, first_posted),
        warm_ms_per_request: warm.iter().map(|((h, _), (p, _))| ms(*h, *p)).sum::<f64>() / warm_requests,
        // Every warm batch has BATCH records, so the mean of the batches is the figure per record.
        warm_cpu_ms_per_request: warm_batch_cpu_ms_per_request.iter().sum::<f64>()
            / warm_batch_cpu_ms_per_request.len().max(1) as f64,
        peak_rss_mib,
        warm_calls,
        first_calls,
        tls_handshakes,
        tls_resumed,
        warm_batch_cpu_ms_per_request,
        first_answer_ms: ms(first_handed, first_put_stored),
        warm_answer_ms,
        first_round_trips_before_put,
    })
}

/// One invocation's Runtime API request id, its event and the S3 keys its answers go to.
type Invocation = (String, String, Vec<String>);

/// The invocations of a run: a first one of a single record, then `warm_batches` of BATCH, each
/// record with a presigned URL of its own.
async fn invocations(
    bench: &Bench,
    presigner: &aws_sdk_s3::Client,
    tag: &str,
    warm_batches: usize,
) -> anyhow::Result<Vec<Invocation>> {
    let mut invocations = Vec::new();
    for (index, records) in std::iter::once(1).chain(std::iter::repeat_n(BATCH, warm_batches)).enumerate() {
        let mut keys = Vec::new();
        let mut event_records = Vec::new();
        for record in 0..records {
            let key = format!("bench/{tag}/{index}-{record}");
            let url = provision::presigned_put_url(presigner, &bench.bucket, &key, 7_200).await?;
            event_records.push(sqs_record(tag, index, record, &url));
            keys.push(key);
        }
        invocations.push((format!("{tag}-invocation-{index}"), json!({ "Records": event_records }).to_string(), keys));
    }
    Ok(invocations)
}

/// Every answer is in S3, exactly once, and says SUCCESS.
async fn answered_once(bench: &Bench, side: Side, invocations: &[Invocation]) -> anyhow::Result<()> {
    for (_, _, keys) in invocations {
        for key in keys {
            let versions = provision::response_versions(&bench.s3, &bench.bucket, key).await?;
            if versions.len() != 1 {
                bail!("{}: {key} received {} PUTs", side.name(), versions.len());
            }
            let body = ResponseBody::parse(&versions[0]).context("a response that is not JSON")?;
            if body.status != Status::Success {
                bail!("{}: {key} was answered {:?}: {:?}", side.name(), body.status, body.reason);
            }
        }
    }
    Ok(())
}

/// The first invocation's calls, one line each: when each arrived at the proxy, the latency
/// added, moto's time and when it was answered, from the moment the invocation was handed out;
/// then when the response was posted.
fn first_timeline(
    log: &[Exchange],
    first_window: &[usize],
    first_handed: Instant,
    first_posted: Instant,
) -> Vec<String> {
    let ms = |from: Instant, to: Instant| to.duration_since(from).as_secs_f64() * 1000.0;
    let operation = |index: usize| {
        let exchange = &log[index];
        exchange.operation.clone().unwrap_or_else(|| format!("S3 {}", exchange.method))
    };
    let mut first_timeline: Vec<String> = first_window
        .iter()
        .map(|index| {
            let exchange = &log[*index];
            let at = |instant: Instant| ms(first_handed, instant);
            let moto = exchange.upstream_took.map_or("-".to_owned(), |took| format!("{:.1}", took.as_secs_f64() * 1e3));
            format!(
                "{:>22} at {:>6.1}, added {:>4} ms, moto {:>5} ms, answered at {}",
                operation(*index),
                at(exchange.arrived),
                exchange.added_latency.map_or(0, |added| added.as_millis()),
                moto,
                exchange.replied.map_or("-".to_owned(), |replied| format!("{:.1}", at(replied))),
            )
        })
        .collect();
    first_timeline.push(format!("{:>22} at {:>6.1}", "response posted", ms(first_handed, first_posted)));
    first_timeline
}

/// One SQS record carrying one SNS-wrapped CloudFormation Create of `Custom::Echo`.
fn sqs_record(tag: &str, invocation: usize, record: usize, url: &str) -> Value {
    let request_id = format!("{tag}-{invocation}-{record}");
    let request = json!({
        "RequestType": "Create",
        "ServiceToken": TOPIC_ARN,
        "ResponseURL": url,
        "StackId": format!("arn:aws:cloudformation:{REGION}:123456789012:stack/bench/{tag}"),
        "RequestId": request_id,
        "LogicalResourceId": format!("Echo{record}"),
        "ResourceType": "Custom::Echo",
        "ResourceProperties": {
            "ServiceToken": TOPIC_ARN,
            "Message": "hello from the benchmark",
            "Replicas": "3",
            "Enabled": "true",
        },
    });
    let envelope = json!({
        "Type": "Notification",
        "MessageId": format!("sns-{request_id}"),
        "TopicArn": TOPIC_ARN,
        "Subject": "AWS CloudFormation custom resource request",
        "Message": request.to_string(),
        // Published now, as SNS stamps it: the handler counts the deadline from it.
        "Timestamp": cfn_once_core::timestamp::format_ms(epoch_ms()),
        "SignatureVersion": "1",
        "Signature": "EXAMPLE",
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-example.pem",
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
    });
    let now = epoch_ms().to_string();
    json!({
        "messageId": format!("msg-{request_id}"),
        "receiptHandle": format!("receipt-{request_id}"),
        "body": envelope.to_string(),
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": now,
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": now,
        },
        "messageAttributes": {},
        "md5OfBody": "0",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:cfn-once-bench",
        "awsRegion": REGION,
    })
}

/// A PEM file of `production`'s certificates (none: an empty store) followed by the run's CA,
/// next to the CA file.
fn bundle(
    tag: &str,
    name: &str,
    production: Option<&std::path::Path>,
    front: &TlsFront,
) -> anyhow::Result<std::path::PathBuf> {
    let mut pem = match production {
        Some(path) => std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
        None => Vec::new(),
    };
    if !pem.is_empty() && !pem.ends_with(b"\n") {
        pem.push(b'\n');
    }
    pem.extend(std::fs::read(front.ca_file()).context("the TLS front's CA")?);
    let path = front.ca_file().with_file_name(format!("{tag}-{name}-bundle.pem"));
    std::fs::write(&path, pem).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Starts `side`'s function with Lambda's environment, logging to the bench's log directory.
/// Every endpoint it is given is the TLS front's, and the front's CA is the only one it trusts.
fn spawn(
    bench: &Bench,
    side: Side,
    runtime: &FakeRuntime,
    front: &TlsFront,
    endpoint: &str,
    tag: &str,
) -> anyhow::Result<Child> {
    let log = std::fs::File::create(bench.log_dir().join(format!("{tag}.log")))?;
    // With `--against`, the peer's place is a second Rust build's, with the Rust environment.
    let rust_binary = match side {
        Side::Rust => Some(&bench.rust_binary),
        Side::Python => bench.against.as_ref(),
    };
    let mut command = match rust_binary {
        Some(binary) => Command::new(binary),
        None => {
            let mut command = Command::new(&bench.peer_python);
            command.args(["-m", "awslambdaric", "handler.lambda_handler"]).current_dir(&bench.peer_dir);
            command
        }
    };
    command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for name in ["PERF_TARGET", "PERF_OUT"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    let common = [
        ("AWS_LAMBDA_RUNTIME_API", runtime.address().to_owned()),
        ("AWS_LAMBDA_FUNCTION_NAME", format!("bench-{}", side.name())),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".to_owned()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/bench".to_owned()),
        ("AWS_LAMBDA_LOG_STREAM_NAME", tag.to_owned()),
        ("AWS_REGION", REGION.to_owned()),
        ("AWS_DEFAULT_REGION", REGION.to_owned()),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
        ("AWS_ENDPOINT_URL", endpoint.to_owned()),
    ];
    for (name, value) in common {
        command.env(name, value);
    }
    // The logging Lambda sets up from the template's LoggingConfig applies to both functions.
    for name in ["AWS_LAMBDA_LOG_LEVEL", "AWS_LAMBDA_LOG_FORMAT"] {
        if let Some(value) = bench.template_env.get(name) {
            command.env(name, value);
        }
    }
    if rust_binary.is_some() {
        // The template's environment for the primary, then the names of this run's resources.
        command
            .envs(&bench.template_env)
            .env("CFN_ONCE_ROLE", "primary")
            .env("CFN_ONCE_TABLE", &bench.lease_table)
            .env("CFN_ONCE_TOPIC_ARNS", TOPIC_ARN)
            .env("CFN_ONCE_RESPONSE_URL_ALLOW", format!("{}/{}/", front.url(), bench.bucket))
            // Its production roots (compiled in, or the system store with --rust-roots
            // system) and the run's CA.
            .env("SSL_CERT_FILE", bundle(tag, "rust", bench.stores.rust.as_deref(), front)?);
    } else {
        command
            .env("BENCH_IDEMPOTENCY_TABLE", &bench.idempotency_table)
            .env("POWERTOOLS_SERVICE_NAME", "cfn-bench")
            .env("LAMBDA_TASK_ROOT", &bench.peer_dir)
            // botocore's bundle and OpenSSL's default store (crhelper's PUT context), each
            // with the run's CA added.
            .env("AWS_CA_BUNDLE", bundle(tag, "botocore", Some(&bench.stores.botocore), front)?)
            .env("SSL_CERT_FILE", bundle(tag, "openssl", Some(&bench.stores.openssl_default), front)?);
    }
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start the {} function", side.name()))
}

/// VmHWM of `pid`, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|line| line.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

/// How long, in ms, at least one of `intervals` was open: the time spent waiting for the
/// upstream by calls that may overlap (a call sent beside another counts once).
fn busy_ms(intervals: impl Iterator<Item = (Instant, Instant)>) -> f64 {
    let mut intervals: Vec<(Instant, Instant)> = intervals.collect();
    intervals.sort();
    let mut busy = std::time::Duration::ZERO;
    let mut open: Option<(Instant, Instant)> = None;
    for (start, end) in intervals {
        open = match open {
            Some((from, to)) if start <= to => Some((from, to.max(end))),
            Some((from, to)) => {
                busy += to - from;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    if let Some((from, to)) = open {
        busy += to - from;
    }
    busy.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_waits_count_once() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        // 0-20 and 5-25 overlap (25 ms), 30-40 on its own (10 ms).
        let intervals = [(at(30), at(40)), (at(0), at(20)), (at(5), at(25))];
        assert!((busy_ms(intervals.into_iter()) - 35.0).abs() < 1e-9);
        assert_eq!(busy_ms(std::iter::empty()), 0.0);
    }
}
