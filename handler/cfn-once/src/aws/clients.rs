//! The bounds of cfn-once's SDK clients: one attempt per call, given up after explicit connect,
//! attempt and operation timeouts, so that every retry is the caller's own, deadline-aware one.
//! The lease store, the fenced writes, the item provider and the answer bucket all make their
//! clients here.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;

/// The longest TCP and TLS connect an SDK call waits for; an AWS endpoint answers in milliseconds.
const CONNECT_TIMEOUT_MS_MAX: u64 = 2_000;

/// A DynamoDB client in `region` that makes one attempt per call and gives it up after
/// `timeout_ms`: the worker retries with its own bounded, deadline-aware loop, and resolves a
/// call that timed out after the table applied it from the record (an unknown outcome).
pub fn dynamodb_client(sdk: &SdkConfig, timeout_ms: u64, region: &str) -> aws_sdk_dynamodb::Client {
    let config = dynamodb_config(sdk, timeout_ms).region(aws_sdk_dynamodb::config::Region::new(region.to_owned()));
    aws_sdk_dynamodb::Client::from_conf(config.build())
}

/// The configuration of every DynamoDB client cfn-once makes (the lease store's, and each
/// `FencedTable`'s), in `sdk`'s region: one attempt per call, given up after `timeout_ms`.
pub fn dynamodb_config(sdk: &SdkConfig, timeout_ms: u64) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::from(sdk)
        .timeout_config(call_timeouts(timeout_ms))
        .retry_config(RetryConfig::standard().with_max_attempts(1))
}

/// Explicit timeouts for one call: connecting, the attempt, and the whole operation.
pub fn call_timeouts(timeout_ms: u64) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_millis(timeout_ms.min(CONNECT_TIMEOUT_MS_MAX)))
        .operation_attempt_timeout(Duration::from_millis(timeout_ms))
        .operation_timeout(Duration::from_millis(timeout_ms))
        .build()
}
