//! Log setup for the Lambda function: JSON lines on stdout, one per event, with the current
//! span's fields (StackId, RequestId, LogicalResourceId, fence) on every line.
//!
//! This is lambda_runtime's default subscriber (its re-exported tracing-subscriber, its level
//! rules: `AWS_LAMBDA_LOG_LEVEL`, then `RUST_LOG`, then INFO) with the format fixed to JSON
//! rather than left to `AWS_LAMBDA_LOG_FORMAT`, so the logs are machine-readable however the
//! function is configured.

use lambda_runtime::tracing::subscriber::EnvFilter;
use lambda_runtime::tracing::subscriber::filter::LevelFilter;

/// Installs the JSON subscriber. `level` comes from `config::log_level`.
pub fn init_json(level: LevelFilter) {
    lambda_runtime::tracing::subscriber::fmt()
        .json()
        .with_target(false)
        .without_time()
        .with_current_span(true)
        .with_span_list(true)
        .with_env_filter(EnvFilter::builder().with_default_directive(level.into()).parse_lossy(""))
        .init();
}
