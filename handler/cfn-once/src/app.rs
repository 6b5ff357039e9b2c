//! Wiring: the handler's dependencies, built once per process from the configuration.

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_config::retry::RetryConfig;
use cfn_once_core::clock::Clock;
use cfn_once_core::control::{ActivitySource, CachedActivity};
use cfn_once_core::decision::Activity;
use cfn_once_core::provider::Router;
use cfn_once_core::random::SplitMix64;
use cfn_once_core::request::InputPolicy;
use cfn_once_core::response_url::UrlPolicy;
use cfn_once_core::vocabulary::Handled;
use cfn_once_core::worker::{Ports, Worker};

use crate::adapters::control_table::TableControl;
use crate::adapters::dynamodb_lease::DynamoLeaseStore;
use crate::adapters::http_sink::HttpResponseSink;
use crate::adapters::sqs_queue::SqsQueue;
use crate::aws::Refresh;
use crate::system_clock::{SystemClock, random_seed};
use crate::config::{Config, ControlSource};
use crate::emf::{EmfMetrics, MetricsFlush};
// Where the repository's tools and tests name the SDK clients' bounds.
pub use crate::aws::{call_timeouts, dynamodb_client, dynamodb_config};
use aws_lambda_events::event::sqs::SqsMessage;
use cfn_once_core::batch::MessageQueue;

/// Called with every record's result: the local tools print it.
pub type Observer = Arc<dyn Fn(&Handled) + Send + Sync>;

/// Everything a batch needs: the protocol worker, the queue it settles messages on, and an
/// optional observer.
pub struct App {
    /// The protocol for one delivery.
    pub worker: Worker,
    /// Where records are rescheduled or dead-lettered after the batch.
    pub queue: Arc<dyn MessageQueue<Message = SqsMessage>>,
    /// Told about every record's result (the local tools print it).
    pub observer: Option<Observer>,
    /// Where the metrics of each batch are flushed from, when a collector is installed.
    pub metrics: Option<MetricsFlush>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").field("worker", &self.worker).field("observed", &self.observer.is_some()).finish()
    }
}

impl App {
    /// Production wiring: DynamoDB lease store, HTTPS sink, SQS backoff, system clock, the
    /// configured active-region control, and `router`'s providers.
    pub fn from_config(config: &Config, sdk: &SdkConfig, router: Router) -> anyhow::Result<Self> {
        Self::from_config_with(config, sdk, router, |ports| ports)
    }

    /// The production wiring with some ports replaced by `customize` (tests inject faults).
    pub fn from_config_with(
        config: &Config,
        sdk: &SdkConfig,
        router: Router,
        customize: impl FnOnce(Ports) -> Ports,
    ) -> anyhow::Result<Self> {
        let dynamodb = dynamodb_client(sdk, config.store_timeout_ms, &config.table_region);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let ports = Ports {
            store: Arc::new(
                DynamoLeaseStore::new(dynamodb.clone(), &config.table_name)
                    .with_refresh(Refresh::of(sdk.credentials_provider())),
            ),
            sink: Arc::new(HttpResponseSink::new(config.put_timeout_ms)?),
            router: Arc::new(router),
            clock: Arc::clone(&clock),
            random: Arc::new(SplitMix64::new(random_seed())),
            control: control(config, sdk, dynamodb, clock)?,
            metrics: Arc::new(EmfMetrics),
        };
        Ok(Self::new(Worker::new(customize(ports), input_policy(config), config.settings()), sdk))
    }

    /// An app around `worker`, settling messages with SQS in `sdk`'s region.
    pub fn new(worker: Worker, sdk: &SdkConfig) -> Self {
        let sqs = sqs_client(sdk, worker.settings().queue_call_timeout_ms);
        Self::with_queue(worker, Arc::new(SqsQueue::new(sqs)))
    }

    /// An app around `worker`, settling messages on `queue`.
    pub fn with_queue(worker: Worker, queue: Arc<dyn MessageQueue<Message = SqsMessage>>) -> Self {
        Self { worker, queue, observer: None, metrics: None }
    }

    /// Flushes the collected metrics as EMF lines on stdout after every batch.
    pub fn with_metrics(mut self, metrics: MetricsFlush) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Reports every record's result to `observer`.
    pub fn observed(mut self, observer: Observer) -> Self {
        self.observer = Some(observer);
        self
    }
}

/// The configured active-region control behind its cache. A primary without an answer acts as
/// active; a secondary never asks. The table's control is read with the lease store's client (one
/// pool of connections to the table). The ARC control needs the crate's `arc` feature (default).
pub fn control(
    config: &Config,
    sdk: &SdkConfig,
    dynamodb: aws_sdk_dynamodb::Client,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Arc<dyn ActivitySource>> {
    let source: Arc<dyn ActivitySource> = match &config.control {
        ControlSource::Table => Arc::new(TableControl::new(dynamodb, &config.table_name, &config.region)),
        #[cfg(feature = "arc")]
        ControlSource::Arc { endpoints, routing_control_arn } => {
            use crate::adapters::arc::{ArcCluster, ArcControl};
            Arc::new(ArcControl::new(ArcCluster::new(sdk, endpoints), routing_control_arn))
        }
        #[cfg(not(feature = "arc"))]
        ControlSource::Arc { .. } => {
            let _ = sdk;
            anyhow::bail!(
                "CFN_ONCE_CONTROL is arc, but this function was built without cfn-once's `arc` feature (a default feature, left out by `default-features = false`): build it with `--features arc`, or set CFN_ONCE_CONTROL to table"
            )
        }
    };
    Ok(Arc::new(CachedActivity::new(source, clock, config.control_cache_ms, Activity::Active)))
}

/// An SQS client whose calls give up after `timeout_ms`, one attempt each: the calls it makes
/// after a batch are best effort, and the batch must answer before Lambda's deadline.
pub fn sqs_client(sdk: &SdkConfig, timeout_ms: u64) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::config::Builder::from(sdk)
        .timeout_config(call_timeouts(timeout_ms))
        .retry_config(RetryConfig::standard().with_max_attempts(1))
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// The longest one call of the sweeper (a Scan page, a DeleteItem) may take, retries included.
const SWEEP_CALL_TIMEOUT_MS: u64 = 5_000;

/// The sweeper's DynamoDB client, in `sdk`'s region: explicit timeouts on every call, with the
/// SDK's standard retries within them. The SDK's defaults set no timeout on a call at all; the
/// sweep cuts every call at its stop time whatever (`sweeper::sweep`), and the timeout keeps one
/// hung call from spending the rest of the run.
pub fn sweeper_client(sdk: &SdkConfig) -> aws_sdk_dynamodb::Client {
    let config =
        aws_sdk_dynamodb::config::Builder::from(sdk).timeout_config(call_timeouts(SWEEP_CALL_TIMEOUT_MS)).build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// Which inputs are accepted.
pub fn input_policy(config: &Config) -> InputPolicy {
    InputPolicy {
        topic_arns: config.topic_arns.clone(),
        raw_delivery: config.raw_delivery,
        urls: UrlPolicy::new(config.response_url_allow.clone()),
        privileged_topic_arns: config.privileged_topic_arns.clone(),
    }
}

#[cfg(test)]
mod tests {
    /// `sam build` (infra/regional.yaml's `rust-cargolambda` function) runs `cargo lambda build
    /// --release --bin cfn-once-lambda` at the workspace's root, without `-p` or `--features`:
    /// SAM CLI passes a Rust function's `BuildProperties` `Binary` on and nothing else
    /// (samcli/lib/build/app_builder.py, SAM CLI 1.170), and the documented properties are
    /// `Binary` alone (https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/building-rust.html).
    /// The function it builds must serve both `Control` values, so the ARC client must be in
    /// the dependencies cargo resolves for exactly that build: the default members (the
    /// function's crate alone) with their default features.
    #[test]
    fn the_function_sam_builds_has_the_arc_control() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let output = std::process::Command::new(cargo)
            .args(["tree", "--locked", "--offline", "--edges", "normal", "--prefix", "none", "--format", "{p}"])
            .current_dir(&root)
            .output()
            .expect("cargo tree runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let tree = String::from_utf8_lossy(&output.stdout);
        assert!(tree.starts_with("cfn-once v"), "a build without -p is the function's alone:\n{tree}");
        assert!(
            tree.lines().any(|line| line.starts_with("aws-sdk-route53recoverycluster v")),
            "the function `sam build` builds has no ARC client, so Control=arc would fail at init: cfn-once's default features must include `arc`"
        );
    }
}
