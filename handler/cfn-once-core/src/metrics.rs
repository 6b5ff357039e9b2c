//! What the protocol counts, as domain events, through a port.
//!
//! The worker records [`MetricEvent`]s; the Lambda's adapter turns them into CloudWatch
//! embedded-metric-format lines (`cfn_once::emf`), tests count them in memory, and local
//! tools ignore them ([`NoMetrics`]).

use crate::response::Status;

/// Something worth counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricEvent {
    /// This execution took the lease with `fence`; a fence above 1 means it took over from an
    /// earlier execution (an expired lease, or a new attempt), or took a due poll.
    LeaseAcquired {
        /// The fence taken.
        fence: u64,
        /// Taken to poll a provider's work in progress: a fence above 1 is then no takeover.
        poll: bool,
    },
    /// Another execution held the lease; the message backs off.
    LeaseContended,
    /// A response was PUT. `latency_ms` runs from when the request was sent, if known.
    ResponseSent {
        /// Whether the body said SUCCESS or FAILED.
        status: Status,
        /// Time from the request's SentTimestamp to the PUT, in ms; `None` when unknown.
        latency_ms: Option<u64>,
    },
    /// A provider answered in progress: its state was stored and the lease released until the
    /// next poll.
    Waiting,
    /// A heartbeat or commit found a newer fence: this execution lost its lease.
    FenceConflict,
    /// A record that can only end in the DLQ: nobody can be answered, or the ResponseURL
    /// refused the answer for good.
    DlqBound,
    /// A work's committed signal will never be sent: its wait condition handle had expired or
    /// refused it. The work is recorded done without it (nobody can be waiting on the handle).
    SignalUnsent,
    /// A provider panicked; its request is answered FAILED.
    ProviderPanicked,
    /// A record of a format newer than this handler's was met: nothing was written to it, and
    /// the message was left for a handler that knows the format (an upgrade in progress, or a
    /// rollback).
    NewerFormat {
        /// The record's format.
        format: u32,
    },
    /// A primary received a request whose deadline comes before the secondary's copy could be
    /// answered (ServiceTimeout shorter than the secondary's delay plus the deadline margin):
    /// that request has no failover.
    ShortServiceTimeout,
}

/// The metrics port.
pub trait MetricsSink: Send + Sync + std::fmt::Debug {
    /// Records one event; infallible, so metrics never change what the protocol does.
    fn record(&self, event: MetricEvent);
}

/// Records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl MetricsSink for NoMetrics {
    fn record(&self, _event: MetricEvent) {}
}
