//! The lease record and the port that stores it.
//!
//! One record per request (StackId + RequestId) holds the lease, the fencing token and the
//! committed outcome together, because a multi-Region strongly consistent DynamoDB table has no
//! transactions. [`LeaseStore`] is the narrow port the protocol speaks; its adapters (DynamoDB,
//! in memory) translate storage errors into [`StoreError`] and condition failures into domain
//! answers, and nothing else. The rules the store must enforce atomically:
//!
//! * **acquire** succeeds when the record is absent, or RUNNING with `lease_until_ms` earlier
//!   than `now - skew`, or COMMITTED for a different fingerprint, or WAITING for a different
//!   fingerprint or with its poll due (`poll_at_ms <= now - poll lag`); a *preempting* acquire
//!   (only a close of a work does one) also takes a live RUNNING lease or a WAITING record whose
//!   poll is not due, never a COMMITTED one of its own attempt; never for an attempt the
//!   record supersedes (one that held the lease before, or one sent before the record's own
//!   attempt). It adds 1 to `fence` (S3), records the fingerprint among `attempts` and its
//!   `sent_ms`, keeps the poll fields, and returns the new fence with the poll fields as they
//!   were (if they belong to the acquiring attempt); on refusal it returns the record as it was,
//!   so no second read is needed;
//! * **close** takes the record as a preempting acquire does and commits a work's signal in the
//!   same write (a close of a work: `worker::close`);
//! * **heartbeat** and **commit** succeed only while `fence` is the caller's and the state is
//!   RUNNING; commit is the single commit point (S1) and clears the poll fields;
//! * **wait** succeeds only while `fence` is the caller's and the state is RUNNING: it stores a
//!   provider's state and next poll time and releases the lease (state WAITING), so a stale
//!   poller can never overwrite newer state (S2);
//! * **mark delivered** succeeds only while `fence` is the caller's and the state is COMMITTED;
//!   it records that the committed bytes were PUT, or that they never will be and why
//!   (`unsent`: a work's signal whose handle expired or refused it);
//! * **leave** succeeds only while `fence` is the caller's and the state is RUNNING: it gives
//!   back a lease that ran nothing (a primary that acquired before the active-region control
//!   answered, and learned it is on standby), writing the record as the acquire found it, fence
//!   kept ([`left_record`]): for everyone after, the acquire never happened, except that the
//!   fence it took is never granted again.
//!
//! The parts: this file holds the port ([`LeaseStore`]) and what its calls take and answer;
//! `record` is the record as stored ([`LeaseRecord`], its format and states), and `seen` is how
//! a delivery reads a record ([`Seen`]) and the acquire condition every store keeps ([`admits`]).

use async_trait::async_trait;

use crate::fingerprint::Fingerprint;
use crate::request::RequestKey;

mod record;
mod seen;

pub use record::{LeaseRecord, LeaseState, PollRecord, RECORD_FORMAT, RequestLabel, left_record, writer_stamp};
pub use seen::{Seen, Viewer, admits};

/// Everything an acquire needs; times are the caller's clock.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// The request whose lease is wanted.
    pub key: RequestKey,
    /// The attempt acquiring; a different fingerprint on a COMMITTED record is a new attempt.
    pub fingerprint: Fingerprint,
    /// When this attempt was sent.
    pub sent_ms: u64,
    /// Who acquires (region, invocation and a nonce), so a lost reply can be recognised later
    /// as this execution's own acquire.
    pub owner: String,
    /// The caller's current time, epoch ms: judges expiry and stamps the record.
    pub now_ms: u64,
    /// The lease end this acquire writes.
    pub lease_until_ms: u64,
    /// A RUNNING lease counts as expired only when `lease_until_ms < now_ms - skew_ms`.
    pub skew_ms: u64,
    /// When the sweeper may delete the record, epoch ms: now plus the retention.
    pub expires_ms: u64,
    /// How long past its time a poll must be before this caller takes it: 0 for the primary,
    /// a few seconds for the secondary (so the primary polls unless it missed the poll), 0 for
    /// anyone near the deadline.
    pub poll_lag_ms: u64,
    /// What the request is about, written into the record for operators.
    pub label: RequestLabel,
    /// Take the lease even from a live holder, or from a wait whose poll is not due. Only a
    /// close does ([`LeaseStore::close`]: a Delete, or an Update naming a new handle, ending a
    /// resource's work: see `worker::close`): a work polled every few seconds holds its lease
    /// again before any backoff of the close comes back, and a poll may run for longer than
    /// the close's request has left. The holder's heartbeat, wait and commit are refused from
    /// then on (S2), and the close's write commits the work's one signal (S1). Never set by
    /// anything else: an ordinary delivery waits for a live lease to end.
    pub preempt: bool,
}

impl AcquireRequest {
    /// The latest `lease_until_ms` that counts as expired for this caller: every lease, for a
    /// preempting acquire.
    pub fn expired_before_ms(&self) -> u64 {
        if self.preempt { u64::MAX } else { self.now_ms.saturating_sub(self.skew_ms) }
    }

    /// The latest `poll_at_ms` that counts as due for this caller: every poll, for a preempting
    /// acquire.
    pub fn poll_due_before_ms(&self) -> u64 {
        if self.preempt { u64::MAX } else { self.now_ms.saturating_sub(self.poll_lag_ms) }
    }
}

/// The answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The condition held: the caller now holds the lease, RUNNING, under a new fence.
    Acquired {
        /// The new fencing token, one above the record's previous one (1 for a new record).
        fence: u64,
        /// The lease was taken from an earlier execution of the same attempt, whose provider
        /// may have run (and written) before it stopped.
        took_over: bool,
        /// That earlier execution was still RUNNING: it stopped without finishing (it crashed,
        /// timed out, or lost its lease), rather than ending with a stored wait whose poll this
        /// acquire takes. The provider is told ([`crate::provider::ProviderContext::took_over_from`]).
        interrupted: bool,
        /// The acquiring attempt's work in progress, as the record held it: poll it rather
        /// than call the provider afresh.
        poll: Option<PollRecord>,
        /// The record as this acquire found it (`None`: there was none), for
        /// [`LeaseStore::leave`].
        prior: Option<Box<LeaseRecord>>,
    },
    /// The condition failed; the record as it was.
    Refused(Box<LeaseRecord>),
}

/// The answer to a heartbeat, commit or mark-delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conditional {
    /// The caller's fence still held and the state matched: the write was applied.
    Applied,
    /// The condition failed; the record as it was (`None` if it is gone).
    Refused(Option<Box<LeaseRecord>>),
}

/// A storage failure, already classified for the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The write was certainly not applied (throttling, a conflict, a refused connection):
    /// retry it.
    #[error("lease store is unavailable, the write was not applied: {0}")]
    Transient(String),
    /// The write may or may not have been applied (a timeout after sending, a 500): read the
    /// record back before deciding.
    #[error("lease store outcome unknown: {0}")]
    Ambiguous(String),
    /// Certainly not applied, and nothing this invocation can do changes that (credentials
    /// that expired and that nothing in this process can refresh): not retried now, the
    /// message comes back later, when a new invocation may have new ones.
    #[error("lease store refused the request for now, the write was not applied: {0}")]
    Deferred(String),
    /// Retrying will not help (missing table, access denied, validation).
    #[error("lease store refused the request: {0}")]
    Permanent(String),
    /// The record is of a format newer than this handler's ([`RECORD_FORMAT`]): written by a
    /// newer version of cfn-once (the other region upgraded first, or this one was rolled
    /// back). Nothing was written; the message is left for a handler that knows the format.
    #[error(
        "the record is of format {format}, newer than this handler's {RECORD_FORMAT}: left to a handler that knows it"
    )]
    NewerFormat {
        /// The record's format.
        format: u32,
        /// Whether the record says that nothing is left to do on it (`delivered`, the one field
        /// every format keeps): the newer version finished the request.
        settled: bool,
    },
}

impl StoreError {
    /// [`StoreError::NewerFormat`] if `record` is of a format this handler does not know.
    pub fn if_newer(record: &LeaseRecord) -> Result<(), StoreError> {
        if record.format > RECORD_FORMAT {
            Err(Self::NewerFormat { format: record.format, settled: record.delivered })
        } else {
            Ok(())
        }
    }
}

impl StoreError {
    /// Whether retrying the same call may succeed (later, for `Deferred`).
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Permanent(_))
    }

    /// Whether another attempt within this invocation may succeed.
    pub fn retry_now(&self) -> bool {
        matches!(self, Self::Transient(_) | Self::Ambiguous(_))
    }
}

/// The lease store port.
#[async_trait]
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// Takes the lease under a new fence if the record admits `request` (see [`admits`]);
    /// otherwise returns the record as it was.
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError>;

    /// Closes a work (a Delete, or an Update naming a new handle, ending it): takes the record
    /// as a preempting [`LeaseStore::acquire`] does (same condition, a new fence) and commits
    /// `signal` in the same write, so the record is COMMITTED under the close's fence from the
    /// moment the close holds it. A close that dies after this write leaves a committed signal
    /// that any copy of the work delivers; none can die holding the work without one.
    async fn close(&self, request: &AcquireRequest, signal: &[u8]) -> Result<Acquire, StoreError>;

    /// Extends the lease to `lease_until_ms`, if `fence` still holds it.
    async fn heartbeat(
        &self,
        key: &RequestKey,
        fence: u64,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> Result<Conditional, StoreError>;

    /// Stores `response` as the request's answer, if `fence` still holds the lease.
    async fn commit(
        &self,
        key: &RequestKey,
        fence: u64,
        response: &[u8],
        now_ms: u64,
    ) -> Result<Conditional, StoreError>;

    /// Stores a provider's work in progress and releases the lease (state WAITING), if `fence`
    /// still holds it.
    async fn wait(
        &self,
        key: &RequestKey,
        fence: u64,
        poll: &PollRecord,
        now_ms: u64,
    ) -> Result<Conditional, StoreError>;

    /// Records that the committed response under `fence` was PUT, or, with `unsent`, that it
    /// never will be and why (a work's signal whose handle expired or refused it): either way
    /// nothing is left to send.
    async fn mark_delivered(
        &self,
        key: &RequestKey,
        fence: u64,
        unsent: Option<&str>,
        now_ms: u64,
    ) -> Result<Conditional, StoreError>;

    /// A strongly consistent read.
    async fn read(&self, key: &RequestKey) -> Result<Option<LeaseRecord>, StoreError>;

    /// Gives back a lease `fence` holds and ran nothing under: writes `left` (made by
    /// [`left_record`] from what the acquire found), if `fence` still holds the lease (RUNNING).
    async fn leave(&self, left: &LeaseRecord) -> Result<Conditional, StoreError>;
}
