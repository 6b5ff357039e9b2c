//! Log setup for the Lambda function: JSON lines on stdout, one per event, with the current
//! span's fields (StackId, RequestId, LogicalResourceId, fence) on every line.
//!
//! The level comes from `AWS_LAMBDA_LOG_LEVEL`, then `RUST_LOG`, then INFO (`config::log_level`),
//! and applies to cfn-once's own crates. Every other target (lambda_runtime, the AWS SDK, hyper,
//! reqwest, rustls, and whatever logs through the `log` crate) is capped at INFO whatever the
//! level: at DEBUG and TRACE those crates print raw events, request bodies and URLs, and a raw
//! event carries the ResponseURL, a credential. Operators turn on TRACE when something is stuck;
//! that must not leak it. (lambda_runtime's TRACE line also stops the runtime on an event that is
//! not UTF-8; capped, it is never evaluated.) The format is fixed to JSON rather than left to
//! `AWS_LAMBDA_LOG_FORMAT`, so the logs are machine-readable however the function is configured.
//!
//! The lines are tracing-subscriber's own JSON format (`json()` with the current span and the
//! span list, no target, no time: Lambda stamps each line). A formatter of our own would be
//! faster per line, but a line costs microseconds (`cargo bench -p cfn-once-bench --bench
//! hot_path`, "one log line", in BENCHMARKS.md) where a request waits milliseconds on the
//! network, and Lambda bills wall time; the well-kept crate's format wins.

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The targets that log at the configured level; everything else is capped at INFO.
pub const OWN_TARGETS: [&str; 2] = ["cfn_once", "cfn_once_core"];

/// The most verbose level any other crate may log at.
pub const FOREIGN_LEVEL_MAX: LevelFilter = LevelFilter::INFO;

/// The filter for `level`: cfn-once's crates at `level`, every other target at most at INFO.
///
/// A static per-target filter (`Targets`), not an `EnvFilter`: the directives never come from
/// the environment, and an `EnvFilter` takes a lock and looks the span up on every enter and
/// exit of every span (for span-field directives this filter never has), which the futures of
/// each record do on every poll.
pub fn filter(level: LevelFilter) -> Targets {
    OWN_TARGETS.iter().fold(Targets::new().with_default(level.min(FOREIGN_LEVEL_MAX)), |targets, target| {
        targets.with_target(*target, level)
    })
}

/// The JSON subscriber the Lambda logs through, writing to `writer` (tests capture it): one
/// object per event, `level`, the event's `fields`, the current `span` and the list of `spans`
/// from the root, each span its fields and its `name`.
pub fn json_subscriber<W>(level: LevelFilter, writer: W) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    let lines = tracing_subscriber::fmt::layer()
        .json()
        .with_target(false)
        .without_time()
        .with_current_span(true)
        .with_span_list(true)
        .with_writer(writer);
    tracing_subscriber::registry().with(lines).with(filter(level))
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
/// provider's panic is caught and answered FAILED (`cfn_once_core::worker`), and its message,
/// place and stack belong in the same log stream as the request's other lines. The message is
/// bounded and stripped like any foreign text; the stack is the functions' names (the release
/// build strips debug information but keeps its symbols: `strip = "debuginfo"`), a frame a line.
fn log_panics_as_json() {
    std::panic::set_hook(Box::new(log_panic));
}

/// The panic hook: one ERROR line with the panic's message, place and stack.
fn log_panic(info: &std::panic::PanicHookInfo<'_>) {
    let message = cfn_once_core::worker::panic_message(info.payload());
    let location = info.location().map(|location| format!("{}:{}", location.file(), location.line()));
    let backtrace = std::backtrace::Backtrace::force_capture().to_string();
    tracing::error!(
        target: "cfn_once::panic",
        message = %cfn_once_core::response::foreign_text(&message, 512),
        location = location.as_deref().unwrap_or("unknown"),
        backtrace = %bounded(&backtrace, BACKTRACE_BYTES_MAX),
        "panicked"
    );
}

/// The most of a panic's stack a log line carries.
const BACKTRACE_BYTES_MAX: usize = 16 << 10;

/// `text`'s first `bytes_max` bytes, cut at a character boundary.
fn bounded(text: &str, bytes_max: usize) -> &str {
    &text[..text.floor_char_boundary(bytes_max)]
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

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_carries_the_level_the_fields_and_every_span_with_its_fields() {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing::subscriber::with_default(json_subscriber(LevelFilter::INFO, move || writer.clone()), || {
            let record = tracing::info_span!("record", message_id = "m-1", fence = tracing::field::Empty);
            let _record = record.enter();
            record.record("fence", 7_u64);
            let request = tracing::info_span!("request", request_id = "r-1");
            let _request = request.enter();
            tracing::warn!(delay_s = 30, why = "a \"quoted\"\nline", "message will be seen again");
        });
        let text = String::from_utf8(captured.0.lock().expect("buffer").clone()).expect("UTF-8");
        assert_eq!(text.lines().count(), 1, "{text}");
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("a JSON line");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["fields"]["message"], "message will be seen again");
        assert_eq!(line["fields"]["delay_s"], 30);
        assert_eq!(line["fields"]["why"], "a \"quoted\"\nline");
        assert_eq!(line["span"], serde_json::json!({"name": "request", "request_id": "r-1"}));
        assert_eq!(line["spans"][0], serde_json::json!({"name": "record", "message_id": "m-1", "fence": 7}));
        assert_eq!(line["spans"][1]["name"], "request");
        assert!(line.get("target").is_none() && line.get("timestamp").is_none(), "{line}");
    }

    #[inline(never)]
    fn a_provider_that_panics() {
        panic!("a provider's bug");
    }

    #[test]
    fn a_panic_is_one_json_line_with_its_message_its_place_and_the_functions_on_its_stack() {
        let captured = Captured::default();
        let writer = captured.clone();
        std::panic::set_hook(Box::new(log_panic));
        let caught = tracing::subscriber::with_default(json_subscriber(LevelFilter::INFO, move || writer.clone()), || {
            std::panic::catch_unwind(a_provider_that_panics)
        });
        // Back to the default hook for the other tests of this process.
        drop(std::panic::take_hook());
        assert!(caught.is_err());
        let text = String::from_utf8(captured.0.lock().expect("buffer").clone()).expect("UTF-8");
        assert_eq!(text.lines().count(), 1, "{text}");
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("a JSON line");
        assert_eq!(line["level"], "ERROR");
        assert_eq!(line["fields"]["message"], "a provider's bug");
        let location = line["fields"]["location"].as_str().expect("a location");
        assert!(location.contains("src/logging.rs:"), "{location}");
        let backtrace = line["fields"]["backtrace"].as_str().expect("a stack");
        assert!(backtrace.contains("a_provider_that_panics"), "the stack names the function that panicked: {backtrace}");
    }

    #[test]
    fn a_long_stack_is_cut_at_a_character_boundary() {
        assert_eq!(bounded("héllo", 2), "h");
        assert_eq!(bounded("héllo", 3), "hé");
        assert_eq!(bounded("hi", 16), "hi");
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
