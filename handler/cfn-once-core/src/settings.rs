//! The protocol's tunables: every timeout, bound and backoff parameter a worker runs with, each
//! with its unit in its name.
//!
//! A deployed handler's come from its configuration (`Config::settings`: the environment's
//! values and the fixed retry policies); tests and the simulator may build their own. What is
//! derived from them, how an invocation's time is split and how far apart a message's receives
//! must be, is computed in `budget`, not configured.

use crate::put::PutPolicy;
use crate::vocabulary::Role;

/// The protocol's tunables, all with units in their names.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This deployment's region, recorded in the lease owner.
    pub region: String,
    /// This region's role; only a primary asks the control whether it is active.
    pub role: Role,
    /// How far ahead an acquire or heartbeat sets the lease's end.
    pub lease_ms: u64,
    /// Margin added before a lease counts as expired, for clock skew between regions.
    pub skew_ms: u64,
    /// How often a running provider's lease is extended; shorter than `lease_ms`.
    pub heartbeat_ms: u64,
    /// Attempts of one lease-store operation (acquire, read, commit) before the message is
    /// retried later.
    pub store_attempts_max: u32,
    /// One lease-store call, start to answer (the SDK client makes one attempt per call; the
    /// worker retries).
    pub store_call_timeout_ms: u64,
    /// Full-jitter backoff base between lease-store attempts, doubled per attempt.
    pub store_backoff_base_ms: u64,
    /// The longest backoff between lease-store attempts.
    pub store_backoff_max_ms: u64,
    /// How long a provider that keeps failing transiently (throttling, a 5xx) is run again,
    /// from its first attempt, before the answer is FAILED; never past the run's end. Counted in
    /// time, not attempts: a throttling burst lasts seconds, whatever the backoff.
    pub provider_retry_ms: u64,
    /// Full-jitter backoff base between provider runs, doubled per attempt.
    pub provider_backoff_base_ms: u64,
    /// The longest backoff between provider runs.
    pub provider_backoff_max_ms: u64,
    /// How the response is PUT; its attempt timeout is also the delivery grace of a fresh commit.
    pub put: PutPolicy,
    /// One SQS call after the batch (ChangeMessageVisibility, or moving a message to the DLQ).
    pub queue_call_timeout_ms: u64,
    /// How long a record is kept before the sweeper may delete it.
    pub retention_ms: u64,
    /// Upper bound on any backoff expressed as a visibility timeout.
    pub retry_delay_s_max: u32,
    /// How long a standby primary leaves a message before looking again.
    pub standby_retry_s: u32,
    /// Upper bound on any request's deadline, from when it was sent.
    pub deadline_ceiling_s: u64,
    /// How close to the deadline a request counts as "near": then it is answered now.
    pub deadline_margin_ms: u64,
    /// The queue's redrive `maxReceiveCount`: receives before SQS moves a message to the DLQ.
    pub max_receive_count: u32,
    /// How long an answer of the active-region control is reused (`CachedActivity`).
    pub control_cache_ms: u64,
    /// The queue's visibility timeout: how long a crashed invocation hides its batch.
    pub visibility_timeout_s: u64,
    /// The secondary queue's delay: a primary's request due sooner than this and the margin has
    /// no failover.
    pub secondary_delay_s: u64,
    /// The longest head start the secondary leaves the primary on a request nobody started;
    /// a request with less time gets a fifth of it (`Settings::head_start_ms`).
    pub head_start_s: u64,
    /// Whether the margins kept before a deadline are proportioned to each request's time
    /// (`Settings::lease_end_before_deadline_ms`). Always true for a handler; false only in
    /// the simulator's planted bug that keeps the configured margins whole, which answers
    /// requests with a short ServiceTimeout FAILED without running them.
    pub proportioned_margins: bool,
}
