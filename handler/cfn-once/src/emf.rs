//! Metrics as CloudWatch embedded-metric-format (EMF) lines on stdout.
//!
//! The worker's [`MetricEvent`]s go to the `metrics` facade; `metrics_cloudwatch_embedded`
//! collects them and, when the Lambda entry flushes after each batch, writes one EMF JSON
//! document per dimension set. CloudWatch Logs turns those lines into metrics in the `cfn-once`
//! namespace, dimensioned by `Region` and `Role` (and `Status` for responses), with no API call
//! on the hot path. Without an installed collector (the local tools) the facade records nothing.
//!
//! Every document carries a second dimension set, the first with `Version` (cfn-once's version,
//! [`cfn_once_core::build::VERSION`]) added: EMF's `Dimensions` is an array of dimension sets,
//! and "every DimensionSet used creates a new metric in CloudWatch"
//! (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>,
//! "DimensionSet array"). So each value is published twice: as `Region`, `Role` (`Status`),
//! exactly the metric the alarms and the dashboard of `infra/regional.yaml` select, which goes on
//! counting whatever version writes it, and as the same with `Version`, which tells two versions
//! apart during an upgrade. It doubles the custom metrics CloudWatch bills (one per metric name
//! and dimension combination, so one more per version that ran in the month). The collector
//! (`metrics_cloudwatch_embedded`) writes one set only; [`with_version_set`] adds the second.

use cfn_once_core::metrics::{MetricEvent, MetricsSink};
use cfn_once_core::response::Status;
use metrics::Unit;

/// The CloudWatch namespace.
pub const NAMESPACE: &str = "cfn-once";

/// Metric names, as they appear in CloudWatch (and in the alarms of `infra/regional.yaml`).
pub mod names {
    /// Leases taken, any fence.
    pub const LEASES_ACQUIRED: &str = "LeasesAcquired";
    /// Deliveries that found the lease held by another execution and backed off.
    pub const LEASES_CONTENDED: &str = "LeasesContended";
    /// Leases taken from an expired holder or for a new attempt (fence above 1, not a poll).
    pub const LEASES_TAKEN_OVER: &str = "LeasesTakenOver";
    /// Leases taken to poll a provider's work in progress.
    pub const POLLS: &str = "Polls";
    /// Providers' in-progress answers stored, each releasing the lease until the next poll.
    pub const WAITS: &str = "Waits";
    /// Responses PUT, by `Status`.
    pub const RESPONSES_SENT: &str = "ResponsesSent";
    /// Milliseconds from the request being sent to its response being PUT.
    pub const RESPONSE_LATENCY: &str = "ResponseLatency";
    /// Commits or heartbeats refused because a newer fence holds the lease.
    pub const FENCE_CONFLICTS: &str = "FenceConflicts";
    /// Messages nobody can be answered for (they go to the DLQ).
    pub const DLQ_BOUND_FAILURES: &str = "DlqBoundFailures";
    /// Provider runs that panicked (each answered FAILED).
    pub const PROVIDER_PANICS: &str = "ProviderPanics";
    /// Work signals never sent because their wait condition handle had expired or refused them.
    pub const SIGNALS_UNSENT: &str = "SignalsUnsent";
    /// Records met of a format newer than this handler's, left untouched (an upgrade or a
    /// rollback in progress: the other region, or this one upgraded, finishes them).
    pub const NEWER_FORMAT_RECORDS: &str = "NewerFormatRecords";
    /// Requests a primary received whose ServiceTimeout is shorter than the secondary's delay
    /// plus the deadline margin: they have no failover.
    pub const SHORT_SERVICE_TIMEOUTS: &str = "ShortServiceTimeout";
}

/// Writes to `writer` what was collected since the last flush.
type FlushFn = dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + Send + Sync;

/// Writes the metrics collected since the last flush as EMF lines.
#[derive(Clone)]
pub struct MetricsFlush(std::sync::Arc<FlushFn>);

impl MetricsFlush {
    /// Writes one EMF document per dimension set to `writer`.
    pub fn flush(&self, writer: &mut dyn std::io::Write) -> std::io::Result<()> {
        (self.0)(writer)
    }
}

impl std::fmt::Debug for MetricsFlush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsFlush")
    }
}

/// Installs the process-wide EMF collector with `Region` and `Role` dimensions. Call once.
pub fn install(region: &str, role: &str) -> anyhow::Result<MetricsFlush> {
    let collector = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(NAMESPACE)
        .with_dimension("Region", region.to_owned())
        .with_dimension("Role", role.to_owned())
        .init()
        .map_err(|error| anyhow::anyhow!("cannot install the metrics collector: {error}"))?;
    let version = cfn_once_core::build::VERSION;
    for counter in [
        names::LEASES_ACQUIRED,
        names::LEASES_CONTENDED,
        names::LEASES_TAKEN_OVER,
        names::POLLS,
        names::WAITS,
        names::RESPONSES_SENT,
        names::FENCE_CONFLICTS,
        names::DLQ_BOUND_FAILURES,
        names::SIGNALS_UNSENT,
        names::NEWER_FORMAT_RECORDS,
    ] {
        metrics::describe_counter!(counter, Unit::Count, "");
    }
    metrics::describe_histogram!(names::RESPONSE_LATENCY, Unit::Milliseconds, "");
    Ok(MetricsFlush(std::sync::Arc::new(move |writer| {
        let mut documents = Vec::new();
        collector.flush(&mut documents)?;
        for line in String::from_utf8_lossy(&documents).lines() {
            writeln!(writer, "{}", with_version_set(line, version))?;
        }
        Ok(())
    })))
}

/// The dimension every document's second set adds to its first.
pub const VERSION_DIMENSION: &str = "Version";

/// One EMF document with the version as a root member and, in each directive, a second
/// dimension set: the first one and `Version`. A line that is not such a document (none is
/// expected) is returned as it is.
pub fn with_version_set(line: &str, version: &str) -> String {
    /// The document with `_aws` first, as the collector writes it.
    #[derive(serde::Serialize)]
    struct Document {
        _aws: serde_json::Value,
        #[serde(flatten)]
        rest: serde_json::Map<String, serde_json::Value>,
    }
    let versioned = || {
        let mut rest: serde_json::Map<String, serde_json::Value> = serde_json::from_str(line).ok()?;
        let mut aws = rest.remove("_aws")?;
        for directive in aws.get_mut("CloudWatchMetrics")?.as_array_mut()? {
            let sets = directive.get_mut("Dimensions")?.as_array_mut()?;
            let mut with_version = sets.first()?.as_array()?.clone();
            with_version.push(VERSION_DIMENSION.into());
            sets.push(with_version.into());
        }
        rest.insert(VERSION_DIMENSION.to_owned(), version.into());
        serde_json::to_string(&Document { _aws: aws, rest }).ok()
    };
    versioned().unwrap_or_else(|| line.to_owned())
}

/// The worker's metrics port on the `metrics` facade.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmfMetrics;

impl MetricsSink for EmfMetrics {
    fn record(&self, event: MetricEvent) {
        match event {
            MetricEvent::LeaseAcquired { fence, poll } => {
                metrics::counter!(names::LEASES_ACQUIRED).increment(1);
                if poll {
                    metrics::counter!(names::POLLS).increment(1);
                } else if fence > 1 {
                    metrics::counter!(names::LEASES_TAKEN_OVER).increment(1);
                }
            }
            MetricEvent::Waiting => metrics::counter!(names::WAITS).increment(1),
            MetricEvent::LeaseContended => metrics::counter!(names::LEASES_CONTENDED).increment(1),
            MetricEvent::ResponseSent { status, latency_ms } => {
                let status = match status {
                    Status::Success => "SUCCESS",
                    Status::Failed => "FAILED",
                };
                metrics::counter!(names::RESPONSES_SENT, "Status" => status).increment(1);
                if let Some(latency_ms) = latency_ms {
                    metrics::histogram!(names::RESPONSE_LATENCY).record(latency_ms as f64);
                }
            }
            MetricEvent::FenceConflict => metrics::counter!(names::FENCE_CONFLICTS).increment(1),
            MetricEvent::DlqBound => metrics::counter!(names::DLQ_BOUND_FAILURES).increment(1),
            MetricEvent::ProviderPanicked => metrics::counter!(names::PROVIDER_PANICS).increment(1),
            MetricEvent::SignalUnsent => metrics::counter!(names::SIGNALS_UNSENT).increment(1),
            MetricEvent::NewerFormat { .. } => metrics::counter!(names::NEWER_FORMAT_RECORDS).increment(1),
            MetricEvent::ShortServiceTimeout => metrics::counter!(names::SHORT_SERVICE_TIMEOUTS).increment(1),
        }
    }
}
