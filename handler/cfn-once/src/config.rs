//! Configuration: the handler's [`Config`] is parsed in the core (`cfn_once_core::config`), so
//! the simulator reads the same variables and defaults; this module adds what only the binary
//! needs, the log level.

pub use cfn_once_core::config::*;

/// Lambda's Runtime API endpoint (`AWS_LAMBDA_RUNTIME_API`), which Lambda sets for the function's
/// process; `None` outside Lambda (or a local stand-in of it).
pub fn lambda_runtime_api() -> Option<String> {
    std::env::var("AWS_LAMBDA_RUNTIME_API").ok().filter(|value| !value.trim().is_empty())
}

/// The log level: `AWS_LAMBDA_LOG_LEVEL` (Lambda's advanced logging controls), else
/// `RUST_LOG` if it is a plain level, else INFO. Read before the rest of the configuration, so
/// that configuration errors are logged.
pub fn log_level() -> tracing_subscriber::filter::LevelFilter {
    ["AWS_LAMBDA_LOG_LEVEL", "RUST_LOG"]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
        .unwrap_or(tracing_subscriber::filter::LevelFilter::INFO)
}
