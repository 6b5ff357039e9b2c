//! Configuration: the handler's [`Config`] is parsed in the core (`cfn_once_core::config`), so
//! the simulator reads the same variables and defaults; this module adds what only the binary
//! needs, the log level.

pub use cfn_once_core::config::*;

/// The log level: `AWS_LAMBDA_LOG_LEVEL` (Lambda's advanced logging controls), else
/// `RUST_LOG` if it is a plain level, else INFO. Read before the rest of the configuration, so
/// that configuration errors are logged.
pub fn log_level() -> tracing_subscriber::filter::LevelFilter {
    ["AWS_LAMBDA_LOG_LEVEL", "RUST_LOG"]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
        .unwrap_or(tracing_subscriber::filter::LevelFilter::INFO)
}
