//! Wiring: the handler's dependencies, built once per process from the configuration.

use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use aws_config::timeout::TimeoutConfig;
use cfn_once_core::delivery::PutPolicy;
use cfn_once_core::random::SplitMix64;
use cfn_once_core::request::InputPolicy;
use cfn_once_core::response_url::UrlPolicy;
use cfn_once_core::worker::{Settings, Worker};

use crate::adapters::dynamodb_lease::DynamoLeaseStore;
use crate::adapters::http_sink::HttpResponseSink;
use crate::adapters::sqs_queue::SqsQueue;
use crate::clock::{SystemClock, random_seed};
use crate::config::Config;
use crate::providers::standard_router;

/// Everything a batch needs: the protocol worker and the queue it reschedules messages on.
#[derive(Debug)]
pub struct App {
    pub worker: Worker,
    pub queue: SqsQueue,
}

impl App {
    /// Production wiring: DynamoDB lease store, HTTPS sink, SQS backoff, system clock.
    pub fn from_config(config: &Config, sdk: &SdkConfig) -> anyhow::Result<Self> {
        let dynamodb = dynamodb_client(sdk, config.store_timeout_ms);
        let sink = HttpResponseSink::new(config.put_timeout_ms)?;
        let worker = Worker::new(
            Arc::new(DynamoLeaseStore::new(dynamodb.clone(), &config.table_name)),
            Arc::new(sink),
            Arc::new(standard_router(config, dynamodb)),
            Arc::new(SystemClock),
            Arc::new(SplitMix64::new(random_seed())),
            input_policy(config),
            settings(config),
        );
        Ok(Self { worker, queue: SqsQueue::new(aws_sdk_sqs::Client::new(sdk)) })
    }
}

/// A DynamoDB client whose every attempt gives up after `attempt_timeout_ms`, so a hung call
/// becomes an unknown outcome the protocol resolves, instead of eating the invocation.
pub fn dynamodb_client(sdk: &SdkConfig, attempt_timeout_ms: u64) -> aws_sdk_dynamodb::Client {
    let timeouts = TimeoutConfig::builder()
        .operation_attempt_timeout(Duration::from_millis(attempt_timeout_ms))
        .connect_timeout(Duration::from_millis(attempt_timeout_ms.min(3_000)))
        .build();
    let config = aws_sdk_dynamodb::config::Builder::from(sdk).timeout_config(timeouts).build();
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
    }
}
