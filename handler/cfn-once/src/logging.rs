//! Log setup for the Lambda function: JSON lines on stdout, one per event, with the current
//! span's fields (StackId, RequestId, LogicalResourceId, fence) on every line.
//!
//! The level comes from `AWS_LAMBDA_LOG_LEVEL`, then `RUST_LOG`, then INFO (`config::log_level`),
//! and applies to cfn-once's own crates. Every other target (lambda_runtime, the AWS SDK, hyper,
//! hyper-rustls, rustls, and whatever logs through the `log` crate) is capped at INFO whatever the
//! level: at DEBUG and TRACE those crates print raw events, request bodies and URLs, and a raw
//! event carries the ResponseURL, a credential. Operators turn on TRACE when something is stuck;
//! that must not leak it. (lambda_runtime's TRACE line also stops the runtime on an event that is
//! not UTF-8; capped, it is never evaluated.) The format is fixed to JSON rather than left to
//! `AWS_LAMBDA_LOG_FORMAT`, so the logs are machine-readable however the function is configured.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

/// The targets that log at the configured level; everything else is capped at INFO.
pub const OWN_TARGETS: [&str; 2] = ["cfn_once", "cfn_once_core"];

/// The most verbose level any other crate may log at.
pub const FOREIGN_LEVEL_MAX: LevelFilter = LevelFilter::INFO;

/// The filter for `level`: cfn-once's crates at `level`, every other target at most at INFO.
pub fn filter(level: LevelFilter) -> EnvFilter {
    let mut directives = level.min(FOREIGN_LEVEL_MAX).to_string();
    for target in OWN_TARGETS {
        directives.push_str(&format!(",{target}={level}"));
    }
    EnvFilter::builder().parse_lossy(directives)
}

/// The JSON subscriber the Lambda logs through, writing to `writer` (tests capture it).
pub fn json_subscriber<W>(level: LevelFilter, writer: W) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .json()
        .with_target(false)
        .without_time()
        .with_current_span(true)
        .with_span_list(true)
        .with_env_filter(filter(level))
        .with_writer(writer)
        .finish()
}

/// Installs the JSON subscriber on stdout for the process, and routes the `log` crate's records
/// (rustls, among others) through it, under the same filter. `level` comes from
/// `config::log_level`.
pub fn init_json(level: LevelFilter) {
    // A second call (a second handler in one process) keeps the first subscriber.
    if json_subscriber(level, std::io::stdout).try_init().is_ok() {
        log_panics_as_json();
    }
}

/// Reports panics as JSON log lines instead of the default hook's plain text on stderr: a
/// provider's panic is caught and answered FAILED (`cfn_once_core::worker`), and its message and
/// place belong in the same log stream as the request's other lines. The message is bounded and
/// stripped like any foreign text.
fn log_panics_as_json() {
    std::panic::set_hook(Box::new(|info| {
        let message = cfn_once_core::worker::panic_message(info.payload());
        let location = info.location().map(|location| format!("{}:{}", location.file(), location.line()));
        tracing::error!(
            target: "cfn_once::panic",
            message = %cfn_once_core::response::foreign_text(&message, 512),
            location = location.as_deref().unwrap_or("unknown"),
            "panicked"
        );
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tracing::Level;

    /// How many lines the filter for `configured` lets `emit` write.
    fn lines(configured: LevelFilter, emit: impl FnOnce()) -> usize {
        let written = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&written);
        let writer = move || {
            counter.fetch_add(1, Ordering::SeqCst);
            std::io::sink()
        };
        tracing::subscriber::with_default(json_subscriber(configured, writer), emit);
        written.load(Ordering::SeqCst)
    }

    #[test]
    fn foreign_targets_are_capped_at_info_whatever_the_level() {
        let trace = LevelFilter::TRACE;
        assert_eq!(
            lines(trace, || tracing::event!(target: "lambda_runtime::layers::api_response", Level::TRACE, "raw")),
            0
        );
        assert_eq!(lines(trace, || tracing::event!(target: "aws_smithy_runtime::client", Level::DEBUG, "request")), 0);
        assert_eq!(lines(trace, || tracing::event!(target: "hyper_util::client", Level::INFO, "info passes")), 1);
        assert_eq!(lines(trace, || tracing::event!(target: "cfn_once_core::worker", Level::TRACE, "ours")), 1);
        assert_eq!(lines(trace, || tracing::event!(target: "cfn_once::lambda", Level::TRACE, "ours")), 1);
        let warn = LevelFilter::WARN;
        assert_eq!(lines(warn, || tracing::event!(target: "cfn_once_core::worker", Level::INFO, "quieter")), 0);
        assert_eq!(lines(warn, || tracing::event!(target: "lambda_runtime", Level::WARN, "warnings")), 1);
    }
}
