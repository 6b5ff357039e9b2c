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
//!
//! The lines are those of tracing-subscriber's JSON format (`json()` with the current span and
//! the span list, no target, no time: Lambda stamps each line), written by [`JsonLines`]: that
//! format parses every span's stored fields back into a JSON value and serializes them again, for
//! each span of each line, which made the log lines a tenth of a warm request's CPU
//! (BENCHMARKS.md). [`JsonLines`] copies the stored text instead; the tests hold its lines to the
//! stock format's, byte for byte.

use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_serde::fields::AsMap;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::{LookupSpan, SpanRef};
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

/// The JSON subscriber the Lambda logs through, writing to `writer` (tests capture it).
pub fn json_subscriber<W>(level: LevelFilter, writer: W) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    let lines =
        tracing_subscriber::fmt::layer().fmt_fields(JsonFields::new()).event_format(JsonLines).with_writer(writer);
    tracing_subscriber::registry().with(lines).with(filter(level))
}

/// One JSON object per event: `level`, the event's `fields`, the current `span` and the list of
/// `spans` from the root, each span its fields and its `name`: the lines of tracing-subscriber's
/// `json().with_target(false).without_time().with_current_span(true).with_span_list(true)`,
/// with each span's fields copied from the text [`JsonFields`] stored for it (a JSON object with
/// its keys in order) rather than parsed and serialized again.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S> FormatEvent<S, JsonFields> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        writer.write_str("{\"level\":\"")?;
        writer.write_str(meta.level().as_str())?;
        writer.write_str("\",\"fields\":")?;
        // Serialized into a buffer the thread keeps, not into a new string for each line.
        write_serialized(&mut writer, &event.field_map())?;
        let current = event.parent().and_then(|id| ctx.span(id)).or_else(|| ctx.lookup_current());
        if let Some(span) = &current {
            writer.write_str(",\"span\":")?;
            write_span(&mut writer, span)?;
            writer.write_str(",\"spans\":[")?;
            if let Some(leaf) = ctx.lookup_current() {
                for (index, span) in leaf.scope().from_root().enumerate() {
                    if index > 0 {
                        writer.write_char(',')?;
                    }
                    write_span(&mut writer, &span)?;
                }
            }
            writer.write_char(']')?;
        }
        writer.write_str("}\n")
    }
}

/// A span as `{<its stored fields>, "name": <its name>}`.
fn write_span<S>(writer: &mut Writer<'_>, span: &SpanRef<'_, S>) -> std::fmt::Result
where
    S: for<'a> LookupSpan<'a>,
{
    let extensions = span.extensions();
    let stored = extensions.get::<FormattedFields<JsonFields>>().map(|fields| fields.fields.as_str()).unwrap_or("");
    let inner = stored.trim().strip_prefix('{').and_then(|rest| rest.strip_suffix('}')).unwrap_or("").trim();
    writer.write_char('{')?;
    if !inner.is_empty() {
        writer.write_str(inner)?;
        writer.write_char(',')?;
    }
    writer.write_str("\"name\":")?;
    write_json_string(writer, span.name())?;
    writer.write_char('}')
}

/// `text` as a JSON string, as serde_json writes it: as it is, between quotes, when nothing in
/// it needs an escape (span names are identifiers), else through serde_json.
fn write_json_string(writer: &mut Writer<'_>, text: &str) -> std::fmt::Result {
    if text.bytes().all(|byte| byte >= 0x20 && byte != b'"' && byte != b'\\') {
        writer.write_char('"')?;
        writer.write_str(text)?;
        writer.write_char('"')
    } else {
        write_serialized(writer, text)
    }
}

/// The largest serialization buffer a thread keeps between log lines.
const KEPT_BUFFER_BYTES_MAX: usize = 16 << 10;

/// `value` as serde_json writes it, through a buffer the thread keeps from line to line.
fn write_serialized<T: serde::Serialize + ?Sized>(writer: &mut Writer<'_>, value: &T) -> std::fmt::Result {
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUFFER.with(|buffer| {
        // A line written while another is being formatted (a field's `Debug` that logs) gets a
        // buffer of its own.
        let mut own = Vec::new();
        let mut borrowed = buffer.try_borrow_mut();
        let bytes = borrowed.as_deref_mut().unwrap_or(&mut own);
        bytes.clear();
        serde_json::to_writer(&mut *bytes, value).map_err(|_| std::fmt::Error)?;
        let written = writer.write_str(std::str::from_utf8(bytes).map_err(|_| std::fmt::Error)?);
        if bytes.capacity() > KEPT_BUFFER_BYTES_MAX {
            // One huge line does not pin its buffer for the process's life.
            *bytes = Vec::new();
        }
        written
    })
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

    /// What the function logs, in its shapes: events outside and inside nested spans, fields of
    /// every kind, a field recorded after the span started, text that needs escaping, an event
    /// with an explicit parent.
    fn script() {
        tracing::info!(answer = 42, "outside any span");
        let invoke = tracing::info_span!("Lambda runtime invoke", requestId = "r-1", xrayTraceId = "Root=1-2");
        let _invoke = invoke.enter();
        let record =
            tracing::info_span!("record", message_id = "m-1", receive_count = 1_u64, fence = tracing::field::Empty);
        let _record = record.enter();
        tracing::warn!(
            delay_s = 30,
            why = "a \"quoted\"\nline, not ASCII: café ☃ 🎉 \u{7}",
            shown = ?"débogué \"☃\"",
            ratio = 0.5,
            flag = true,
            "message will be seen again"
        );
        record.record("fence", 7_u64);
        let request = tracing::info_span!(
            "request",
            stack_id = "arn:aws:cloudformation:us-east-1:1:stack/s/1",
            request_type = "Create"
        );
        let _request = request.enter();
        tracing::info!(fence = 7, took_over = false, "lease acquired");
        tracing::error!(error = %std::io::Error::other("boom"), detail = ?Some("x"), "failed");
        tracing::info!(parent: &invoke, "explicit parent");
        let odd = tracing::info_span!("odd \"name\" é");
        let _odd = odd.enter();
        tracing::info!("in a span whose name needs escapes");
        drop(_odd);
        let empty = tracing::info_span!("empty");
        let _empty = empty.enter();
        tracing::info!("in a span without fields");
    }

    #[test]
    fn the_lines_are_tracing_subscribers_json_lines_byte_for_byte() {
        let stock = Captured::default();
        let writer = stock.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_target(false)
            .without_time()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(move || writer.clone())
            .finish()
            .with(filter(LevelFilter::TRACE));
        tracing::subscriber::with_default(subscriber, script);
        let ours = Captured::default();
        let writer = ours.clone();
        tracing::subscriber::with_default(json_subscriber(LevelFilter::TRACE, move || writer.clone()), script);
        let (stock, ours) = (stock.0.lock().expect("stock").clone(), ours.0.lock().expect("ours").clone());
        let (stock, ours) = (String::from_utf8(stock).expect("utf-8"), String::from_utf8(ours).expect("utf-8"));
        assert_eq!(stock.lines().count(), 7, "the script logs seven lines: {stock}");
        for (line, (expected, got)) in stock.lines().zip(ours.lines()).enumerate() {
            assert_eq!(got, expected, "line {line}");
        }
        assert_eq!(ours, stock);
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
