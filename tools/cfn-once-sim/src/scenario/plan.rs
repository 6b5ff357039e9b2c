//! What a scenario is made of: the requests CloudFormation sends, how their providers wait,
//! the faults' probabilities, and the upgrade in progress.

use super::Region;

/// One request CloudFormation sends.
#[derive(Debug, Clone)]
pub struct RequestPlan {
    /// When it is published, ms after the start.
    pub sent_at_ms: u64,
    /// How long the provider works on it.
    pub work_ms: u64,
    pub service_timeout_s: u64,
    /// A retried deployment reusing this earlier request's RequestId, with a new ResponseURL.
    pub retry_of: Option<usize>,
    /// A long-running provider: in progress this long after its first run, then done.
    pub wait: Option<WaitPlan>,
    /// Each run (or poll) of the provider panics with this probability, in percent.
    pub panic_percent: u64,
    /// SNS delivers this region's copy this long after the publish (its SentTimestamp too).
    pub late: Option<(Region, u64)>,
    /// The resource names a wait condition handle with this timeout, in seconds: its provider's
    /// work is signalled to the handle.
    pub wait_condition_s: Option<u64>,
    /// This request is the Delete of that request's resource (the same handle in its
    /// properties), sent while its work may still run.
    pub delete_of: Option<usize>,
    /// This request is an Update of that request's resource naming a new handle (its own
    /// `wait_condition_s`), sent while the old work may still run: it closes the old work and
    /// hands a new one over.
    pub update_of: Option<usize>,
    /// The request whose wait condition handle this one names, where it is not its own (an
    /// Update that keeps its handle, an update rollback naming the earlier one, a Delete).
    pub handle_from: Option<usize>,
    /// The request whose properties are this Update's `OldResourceProperties` (by default the
    /// one it updates).
    pub old_from: Option<usize>,
}

impl RequestPlan {
    /// A request sent `sent_at_ms` after the start, whose provider works `work_ms` and answers
    /// at once, due `service_timeout_s` later, and nothing more: no wait, no panics, no late
    /// copy, no wait condition, no earlier request it retries, updates or deletes. Each story
    /// names what its requests add to that.
    pub fn plain(sent_at_ms: u64, work_ms: u64, service_timeout_s: u64) -> Self {
        Self {
            sent_at_ms,
            work_ms,
            service_timeout_s,
            retry_of: None,
            wait: None,
            panic_percent: 0,
            late: None,
            wait_condition_s: None,
            delete_of: None,
            update_of: None,
            handle_from: None,
            old_from: None,
        }
    }

    /// How long after the publish SNS delivers `region`'s copy.
    pub fn late_ms(&self, region: Region) -> u64 {
        self.late.filter(|(late, _)| *late == region).map_or(0, |(_, ms)| ms)
    }

    /// When the request's answer is due, ms after the start.
    pub fn deadline_ms(&self) -> u64 {
        self.sent_at_ms + self.service_timeout_s * 1_000
    }

    /// When the work's signal is due (the wait condition's timeout), if it hands work over.
    pub fn work_deadline_ms(&self) -> Option<u64> {
        self.wait_condition_s.filter(|_| self.delete_of.is_none()).map(|s| self.sent_at_ms + s * 1_000)
    }

    /// The request whose resource this one is about (itself, unless a Delete, an Update or a
    /// retry of an earlier one).
    pub fn original(&self, index: usize) -> usize {
        self.delete_of.or(self.update_of).or(self.retry_of).unwrap_or(index)
    }

    /// The request whose wait condition handle this one names: its own for a Create or an
    /// Update that names a new one, the resource's for a Delete, unless `handle_from` says.
    pub fn handle_owner(&self, index: usize) -> usize {
        self.handle_from.unwrap_or(if self.update_of.is_some() { index } else { self.original(index) })
    }

    /// Whether this is an Update whose properties declare no new wait: it keeps its handle, or
    /// names one an earlier request made (an update rollback). Its provider must run.
    pub fn updates_without_a_new_wait(&self, index: usize) -> bool {
        self.update_of.is_some() && self.handle_owner(index) != index
    }

    /// Until when a copy of the request is owed an answer or a signal.
    pub fn owed_until_ms(&self) -> u64 {
        self.work_deadline_ms().map_or(self.deadline_ms(), |work_ms| work_ms.max(self.deadline_ms()))
    }
}

/// How a long-running provider waits.
#[derive(Debug, Clone, Copy)]
pub struct WaitPlan {
    /// In progress until this long after the provider first ran.
    pub in_progress_ms: u64,
    /// The poll interval it asks for (the handler's backoff floor applies).
    pub poll_interval_s: u64,
    /// How long each poll works; sometimes longer than a lease.
    pub poll_work_ms: u64,
}

/// Fault probabilities, each applied per opportunity inside the fault window.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub window_end_ms: u64,
    pub store_transient: f64,
    pub store_lost_request: f64,
    pub store_lost_reply: f64,
    pub store_hang: f64,
    pub put_fail: f64,
    pub put_lost_reply: f64,
    pub put_hang: f64,
    /// Per poll of a running Lambda: it crashes between two steps.
    pub crash: f64,
    /// Per delivery: SQS hands the same message to a second Lambda at once.
    pub duplicate: f64,
    /// Per delivery: the Lambda is frozen, mid-run, for longer than a lease.
    pub freeze: f64,
    /// Per read of the active-region control: it answers later than the call's timeout.
    pub control_slow: f64,
    /// Per run or poll of the provider: it does its work and its answer is lost (an Invoke that
    /// timed out after it was sent, a reset), while it keeps running for a while: the caller
    /// sees an unknown outcome (`Kind::UnseenOutcomes`).
    pub provider_lost_reply: f64,
    /// Per fenced write of the provider: it is applied and its reply is lost.
    pub fenced_lost_reply: f64,
}

/// Lease-store faults outside the fault window, in every region: (from, to) elapsed ms, and
/// the probabilities per call of a lost reply (applied, unknown outcome) and a lost request (not
/// applied, unknown outcome).
#[derive(Debug, Clone, Copy)]
pub struct LateStoreFaults {
    pub from_ms: u64,
    pub to_ms: u64,
    pub lost_reply: f64,
    pub lost_request: f64,
}

/// An upgrade in progress: which region runs the last release's decisions until when, and the
/// requests a newer version takes first.
#[derive(Debug, Clone)]
pub struct Upgrade {
    /// The region still on the last release.
    pub old_region: Region,
    /// When it is upgraded (ms after the start): from then on it runs this version.
    pub upgraded_at_ms: u64,
    /// Requests a newer version takes first: (request, when it tries, how long it takes to
    /// answer). It takes one only where no record exists yet.
    pub newer_takes: Vec<(usize, u64, u64)>,
}
