//! Wiring: the handler's dependencies, built once per process from the configuration.

use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use aws_config::timeout::TimeoutConfig;
use cfn_once_core::clock::Clock;
use cfn_once_core::control::{ActivitySource, CachedActivity};
use cfn_once_core::decision::Activity;
use cfn_once_core::delivery::PutPolicy;
use cfn_once_core::random::SplitMix64;
use cfn_once_core::request::InputPolicy;
use cfn_once_core::response_url::UrlPolicy;
use cfn_once_core::worker::{Handled, Ports, Settings, Worker};

use crate::adapters::arc::{ArcCluster, ArcControl};
use crate::adapters::control_table::TableControl;
use crate::adapters::dynamodb_lease::DynamoLeaseStore;
use crate::adapters::http_sink::HttpResponseSink;
use crate::adapters::sqs_queue::SqsQueue;
use crate::clock::{SystemClock, random_seed};
use crate::config::{Config, ControlSource};
use crate::metrics::{EmfMetrics, MetricsFlush};
use crate::providers::standard_router;

/// Called with every record's result: the local tools print it.
pub type Observer = Arc<dyn Fn(&Handled) + Send + Sync>;

/// Everything a batch needs: the protocol worker, the queue it reschedules messages on, and an
/// optional observer.
pub struct App {
    pub worker: Worker,
    pub queue: SqsQueue,
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
    /// configured active-region control.
    pub fn from_config(config: &Config, sdk: &SdkConfig) -> anyhow::Result<Self> {
        Self::from_config_with(config, sdk, |ports| ports)
    }

    /// The production wiring with some ports replaced by `customize` (tests inject faults).
    pub fn from_config_with(
        config: &Config,
        sdk: &SdkConfig,
        customize: impl FnOnce(Ports) -> Ports,
    ) -> anyhow::Result<Self> {
        let dynamodb = dynamodb_client(sdk, config.store_timeout_ms, &config.table_region);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let ports = Ports {
            store: Arc::new(DynamoLeaseStore::new(dynamodb.clone(), &config.table_name)),
            sink: Arc::new(HttpResponseSink::new(config.put_timeout_ms)?),
            router: Arc::new(standard_router(config, sdk)),
            clock: Arc::clone(&clock),
            random: Arc::new(SplitMix64::new(random_seed())),
            control: control(config, sdk, dynamodb, clock),
            metrics: Arc::new(EmfMetrics),
        };
        Ok(Self::new(Worker::new(customize(ports), input_policy(config), settings(config)), sdk))
    }

    /// An app around `worker`, rescheduling messages with SQS in `sdk`'s region.
    pub fn new(worker: Worker, sdk: &SdkConfig) -> Self {
        Self { worker, queue: SqsQueue::new(aws_sdk_sqs::Client::new(sdk)), observer: None, metrics: None }
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
/// active; a secondary never asks.
pub fn control(
    config: &Config,
    sdk: &SdkConfig,
    dynamodb: aws_sdk_dynamodb::Client,
    clock: Arc<dyn Clock>,
) -> Arc<dyn ActivitySource> {
    let source: Arc<dyn ActivitySource> = match &config.control {
        ControlSource::Table => Arc::new(TableControl::new(dynamodb, &config.table_name, &config.region)),
        ControlSource::Arc { endpoints, routing_control_arn } => {
            Arc::new(ArcControl::new(ArcCluster::new(sdk, endpoints), routing_control_arn))
        }
    };
    Arc::new(CachedActivity::new(source, clock, config.control_cache_ms, Activity::Active))
}

/// A DynamoDB client in `region` whose every attempt gives up after `attempt_timeout_ms`, so a
/// hung call becomes an unknown outcome the protocol resolves, instead of eating the invocation.
pub fn dynamodb_client(sdk: &SdkConfig, attempt_timeout_ms: u64, region: &str) -> aws_sdk_dynamodb::Client {
    let timeouts = TimeoutConfig::builder()
        .operation_attempt_timeout(Duration::from_millis(attempt_timeout_ms))
        .connect_timeout(Duration::from_millis(attempt_timeout_ms.min(3_000)))
        .build();
    let config = aws_sdk_dynamodb::config::Builder::from(sdk)
        .region(aws_sdk_dynamodb::config::Region::new(region.to_owned()))
        .timeout_config(timeouts)
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// Which inputs are accepted.
pub fn input_policy(config: &Config) -> InputPolicy {
    InputPolicy { topic_arns: config.topic_arns.clone(), urls: UrlPolicy::new(config.response_url_allow.clone()) }
}

/// The protocol settings the configuration implies.
pub fn settings(config: &Config) -> Settings {
    Settings {
        region: config.region.clone(),
        role: config.role,
        lease_ms: config.lease_ms,
        skew_ms: config.skew_ms,
        heartbeat_ms: config.heartbeat_ms,
        reserve_ms: config.reserve_ms,
        store_attempts_max: 4,
        // The SDK's own attempt timeout fires first; this bounds the whole call with retries.
        store_call_timeout_ms: config.store_timeout_ms * 3,
        store_backoff_base_ms: 50,
        store_backoff_max_ms: 1_000,
        provider_attempts_max: 3,
        provider_backoff_base_ms: 200,
        provider_backoff_max_ms: 5_000,
        put: PutPolicy {
            attempts_max: config.put_attempts_max,
            attempt_timeout_ms: config.put_timeout_ms,
            backoff_base_ms: 200,
            backoff_max_ms: 2_000,
        },
        retention_ms: config.retention_days * 86_400_000,
        retry_delay_s_max: config.retry_delay_s_max,
        standby_retry_s: config.standby_retry_s,
        deadline_ceiling_s: config.deadline_ceiling_s,
        deadline_margin_ms: config.deadline_margin_ms,
    }
}
