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
//!   same write (a close of a work: `worker::work`);
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

use std::collections::BTreeSet;

use async_trait::async_trait;

use crate::fingerprint::Fingerprint;
use crate::request::RequestKey;

/// RUNNING while some execution holds (or held) the lease; WAITING between polls of a provider
/// that answered in progress; COMMITTED once a response is stored; LEFT where an acquire found
/// no record and its lease was given back unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// An execution holds the lease, or held it until it expired; nothing is committed yet.
    Running,
    /// The provider answered in progress: its state and next poll time are stored, and nobody
    /// holds the lease until the poll is due.
    Waiting,
    /// The response is stored, and only those bytes may ever be PUT (invariant S1).
    Committed,
    /// Left, never ran: an acquire found no record, and its holder gave the lease back before
    /// running anything ([`LeaseStore::leave`]). Everyone reads it as no record at all; it only
    /// keeps the fence that acquire took, so that fence is never granted again (S3).
    Left,
}

impl LeaseState {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "RUNNING",
            Self::Waiting => "WAITING",
            Self::Committed => "COMMITTED",
            Self::Left => "LEFT",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "RUNNING" => Some(Self::Running),
            "WAITING" => Some(Self::Waiting),
            "COMMITTED" => Some(Self::Committed),
            "LEFT" => Some(Self::Left),
            _ => None,
        }
    }
}

/// A provider's work in progress, as stored in the lease record between polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollRecord {
    /// The attempt that is waiting: a record's poll fields belong to this attempt only.
    pub fingerprint: Fingerprint,
    /// The provider's state, as JSON text (at most `provider::STATE_BYTES_MAX` bytes).
    pub state: String,
    /// When the next poll is due, epoch ms on the waiter's clock.
    pub poll_at_ms: u64,
    /// When the provider first answered in progress, epoch ms.
    pub waiting_since_ms: u64,
    /// Polls that have answered so far (0 after the first in-progress answer).
    pub polls: u32,
}

/// What a request is about, kept in its record for the people who look at it (the operator
/// tools), and, for a work, which work it replaced: the one field of it the protocol reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestLabel {
    /// The resource's logical id in the template.
    pub logical_resource_id: String,
    /// Create, Update or Delete (empty when the request did not say in a readable way).
    pub request_type: String,
    /// The ResourceType, e.g. `Custom::Echo` (empty when the request did not parse).
    pub resource_type: String,
    /// For the work of an Update that named a new wait condition handle: the key (RequestId)
    /// of the work on the handle its old properties named, empty otherwise. An Update that
    /// names that old handle again while this work's record stands is the update's rollback,
    /// which waits on nothing (`Worker::waits_on`), however long ago the old work's own record
    /// was swept or whether its handle's URL says when it expires.
    pub replaces: String,
}

/// The format of the records this handler writes (answers and works alike; the control item
/// has its own, [`crate::control::CONTROL_FORMAT`]). A record carries the format of the handler
/// that last wrote it; a record without one was written before formats (through the first
/// release that had none, 47ab05d) and is format 1. A handler reads every format up to its own
/// and writes its own; it never writes, deletes or acts on a record of a newer format
/// ([`StoreError::NewerFormat`]): it leaves the message for a handler that knows it.
///
/// - 1: the records as 47ab05d wrote them.
/// - 2: `format` written; `unsent` (a work's signal recorded never sent, with `delivered`);
///   `replaces` (the work an Update's new work replaced); a close commits its FAILURE signal in
///   the same write that takes the work's lease.
///
/// One field keeps its meaning in every format, so that an older handler can let go of a
/// request a newer one finished: `delivered` true means that nothing is left for any handler to
/// do on the record (its answer or signal was PUT, or never will be). An older handler meeting a
/// newer record reads that field alone ([`StoreError::NewerFormat`]'s `settled`) and drops its
/// copy of the message instead of backing off until the dead-letter queue.
///
/// Raise it with any change an older handler would misread (a new state, a field whose absence
/// means something else, a new meaning of an old field), and add that version's golden records
/// (`make golden-records`): `tests/it/golden.rs` fails on a record whose shape changed under an
/// unchanged format.
pub const RECORD_FORMAT: u32 = 2;

/// One request's record, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The format of the handler that last wrote it ([`RECORD_FORMAT`]; 1 when the stored item
    /// has none).
    pub format: u32,
    /// The request this record is for.
    pub key: RequestKey,
    /// Strictly increasing per key (S3).
    pub fence: u64,
    /// The execution that took the current fence: region, invocation and a nonce.
    pub owner: String,
    /// When the lease ends unless a heartbeat extends it, epoch ms on the holder's clock.
    pub lease_until_ms: u64,
    /// Heartbeats written under the current fence (each acquire resets it), for anyone
    /// inspecting the table; the protocol does not read it.
    pub heartbeat: u64,
    /// Whether a response has been committed yet.
    pub state: LeaseState,
    /// The fingerprint of the attempt that took the current fence.
    pub fingerprint: Fingerprint,
    /// Every fingerprint that ever took the lease for this key.
    pub attempts: BTreeSet<Fingerprint>,
    /// When the attempt holding the record was sent (SQS SentTimestamp): an attempt sent earlier
    /// is an older deployment and never takes over from it.
    pub sent_ms: u64,
    /// The exact bytes to PUT, once COMMITTED.
    pub response: Option<Vec<u8>>,
    /// Whether the committed response was PUT (or will never be: see `unsent`), so later
    /// deliveries drop their message instead of PUTting it again.
    pub delivered: bool,
    /// Why the committed bytes were never PUT and never will be, if so: only a work's signal,
    /// whose wait condition handle had expired or refused it (a 403 is final). Set together
    /// with `delivered`: nothing is left to send.
    pub unsent: Option<String>,
    /// When the record was first written, epoch ms; kept across takeovers and new attempts.
    pub created_ms: u64,
    /// When the record was last written, epoch ms; while COMMITTED and undelivered, the commit
    /// time that the delivery grace counts from.
    pub updated_ms: u64,
    /// When the sweeper may delete the record (MRSC tables have no TTL).
    pub expires_ms: u64,
    /// The provider's work in progress, if it answered in progress: kept by acquires (a poller
    /// that crashes leaves it for the next), replaced by waits, cleared by the commit.
    pub poll: Option<PollRecord>,
    /// What the request is about, as the last acquire wrote it.
    pub label: RequestLabel,
}

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
    /// resource's work: see `worker::work`): a work polled every few seconds holds its lease
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

/// The record a [`LeaseStore::leave`] writes back for the lease `fence` took, having found
/// `prior`: that record as it was, under the fence the acquire took; or, where there was none,
/// a LEFT record holding only that fence (read as no record, admitting any acquire). The
/// acquire changed nothing else that anyone reads, so after the leave every delivery decides as
/// if it had never happened, and the next acquire is granted `fence + 1`.
pub fn left_record(
    key: &RequestKey,
    fence: u64,
    prior: Option<&LeaseRecord>,
    now_ms: u64,
    expires_ms: u64,
) -> LeaseRecord {
    match prior {
        Some(prior) => LeaseRecord { fence, ..prior.clone() },
        None => LeaseRecord {
            format: RECORD_FORMAT,
            key: key.clone(),
            fence,
            owner: String::new(),
            lease_until_ms: 0,
            heartbeat: 0,
            state: LeaseState::Left,
            fingerprint: Fingerprint::from_stored(String::new()),
            attempts: BTreeSet::new(),
            sent_ms: 0,
            response: None,
            delivered: false,
            unsent: None,
            created_ms: now_ms,
            updated_ms: now_ms,
            expires_ms,
            poll: None,
            label: RequestLabel::default(),
        },
    }
}

/// A record as one delivery sees it: the "record seen" column of the decision table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Nothing stored yet.
    Absent,
    /// Someone holds a live lease until `until_ms` (skew margin included).
    Held {
        /// When the lease counts as expired, epoch ms: where a backoff aims.
        until_ms: u64,
    },
    /// RUNNING, but the lease expired past the skew margin: free to take over.
    Expired,
    /// A finished attempt with another fingerprint: this delivery is a new attempt (a reused
    /// RequestId).
    NewAttempt,
    /// This execution holds it: it acquired, or an acquire whose reply was lost turned out to
    /// be its own. `took_over` is true unless no earlier execution of this attempt can have run
    /// its provider (only then may a failed Create skip the provider on its rollback Delete).
    Mine {
        /// The fencing token this execution holds.
        fence: u64,
        /// Whether an earlier execution of this attempt may have run its provider.
        took_over: bool,
        /// Whether that execution may have stopped mid-run (see [`Acquire::Acquired`]).
        interrupted: bool,
        /// The attempt's work in progress: poll it instead of calling the provider afresh.
        poll: Option<PollRecord>,
    },
    /// The provider answered in progress; nobody holds the lease until the poll at
    /// `poll_at_ms` (the waiter's clock).
    Waiting {
        /// When the next poll is due, epoch ms.
        poll_at_ms: u64,
    },
    /// Answered at `committed_ms` (the committer's clock): PUT the stored bytes unless already
    /// delivered.
    Committed {
        /// The fencing token the response was committed under.
        fence: u64,
        /// The committed response body, to PUT byte for byte.
        response: Vec<u8>,
        /// Whether it was already PUT: then the message is a duplicate.
        delivered: bool,
        /// When it was committed, epoch ms on the committer's clock.
        committed_ms: u64,
    },
    /// A newer attempt with the same RequestId exists: this delivery is stale.
    Superseded,
}

/// A delivery looking at a record: the attempt it carries, when that was sent, and who looks.
#[derive(Debug, Clone, Copy)]
pub struct Viewer<'a> {
    /// The attempt this delivery carries; a different one on the record is another attempt.
    pub fingerprint: &'a Fingerprint,
    /// When that attempt was sent, epoch ms: one sent before the record's attempt is stale.
    pub sent_ms: u64,
    /// This execution's owner string, to recognise a lease it already holds.
    pub owner: &'a str,
}

impl Seen {
    /// How `record` (or its absence) looks to `viewer`.
    pub fn of(record: Option<&LeaseRecord>, viewer: &Viewer<'_>, now_ms: u64, skew_ms: u64) -> Self {
        record.map_or(Self::Absent, |record| record.seen_by(viewer, now_ms, skew_ms))
    }
}

impl LeaseRecord {
    /// The work in progress stored for `fingerprint`'s attempt, if any.
    pub fn poll_for(&self, fingerprint: &Fingerprint) -> Option<PollRecord> {
        self.poll.as_ref().filter(|poll| poll.fingerprint == *fingerprint).cloned()
    }

    /// When the stored poll is due (0 if a WAITING record lost its poll fields: due now).
    fn poll_at_ms(&self) -> u64 {
        self.poll.as_ref().map_or(0, |poll| poll.poll_at_ms)
    }

    /// Whether this record's attempt is newer than the attempt `fingerprint`, sent at `sent_ms`:
    /// that attempt held the lease before, or was sent before this one. CloudFormation retries a
    /// deployment (reusing the RequestId) only after the earlier one failed, so the later-sent
    /// attempt is the one it waits for.
    pub fn supersedes(&self, fingerprint: &Fingerprint, sent_ms: u64) -> bool {
        self.fingerprint != *fingerprint && (self.attempts.contains(fingerprint) || sent_ms < self.sent_ms)
    }

    /// Classifies this record for `viewer` at `now_ms`.
    pub fn seen_by(&self, viewer: &Viewer<'_>, now_ms: u64, skew_ms: u64) -> Seen {
        let (fingerprint, owner) = (viewer.fingerprint, viewer.owner);
        let expired = self.lease_until_ms < now_ms.saturating_sub(skew_ms);
        let held = || Seen::Held { until_ms: self.lease_until_ms.saturating_add(skew_ms) };
        if self.supersedes(fingerprint, viewer.sent_ms) {
            return Seen::Superseded;
        }
        if self.state == LeaseState::Left {
            return Seen::Absent;
        }
        if self.fingerprint != *fingerprint {
            return match self.state {
                // A newer attempt replaces one that is waiting: CloudFormation gave up on it.
                LeaseState::Committed | LeaseState::Waiting => Seen::NewAttempt,
                LeaseState::Running if expired => Seen::Expired,
                LeaseState::Running => held(),
                LeaseState::Left => Seen::Absent,
            };
        }
        match (self.state, &self.response) {
            (LeaseState::Committed, Some(response)) => {
                // Nothing but mark-delivered writes a COMMITTED record, so `updated_ms` is the
                // commit time until it is delivered.
                Seen::Committed {
                    fence: self.fence,
                    response: response.clone(),
                    delivered: self.delivered,
                    committed_ms: self.updated_ms,
                }
            }
            (LeaseState::Waiting, _) => Seen::Waiting { poll_at_ms: self.poll_at_ms() },
            // A COMMITTED record always carries its response; without one, treat it as running
            // so that nobody replays an empty answer.
            (LeaseState::Committed, None) | (LeaseState::Running | LeaseState::Left, _) => {
                if self.owner == owner {
                    // Whether this acquire took over from someone is not known here; only the
                    // first fence a record ever granted is certainly not a takeover.
                    Seen::Mine {
                        fence: self.fence,
                        took_over: self.fence > 1,
                        interrupted: self.fence > 1,
                        poll: self.poll_for(fingerprint),
                    }
                } else if expired {
                    Seen::Expired
                } else {
                    held()
                }
            }
        }
    }
}

/// Whether `record` admits `request`'s acquire: the condition every store evaluates atomically.
/// The in-memory store calls it directly; the DynamoDB adapter expresses the same rule as a
/// ConditionExpression, and the shared contract suite holds both to it.
pub fn admits(record: Option<&LeaseRecord>, request: &AcquireRequest) -> bool {
    let Some(record) = record else {
        return true;
    };
    let same_attempt = record.fingerprint == request.fingerprint;
    if record.supersedes(&request.fingerprint, request.sent_ms) {
        return false;
    }
    match record.state {
        LeaseState::Running => record.lease_until_ms < request.expired_before_ms(),
        LeaseState::Waiting => !same_attempt || record.poll_at_ms() <= request.poll_due_before_ms(),
        LeaseState::Committed => !same_attempt,
        LeaseState::Left => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(name: &str) -> Fingerprint {
        Fingerprint::from_stored(name.to_owned())
    }

    fn record(state: LeaseState, fingerprint: &str, lease_until_ms: u64, attempts: &[&str]) -> LeaseRecord {
        LeaseRecord {
            format: crate::lease::RECORD_FORMAT,
            key: RequestKey {
                stack_id: crate::request::StackArn::parse("arn:aws:cloudformation:us-east-1:123456789012:stack/s/g")
                    .expect("an ARN"),
                request_id: "r".into(),
            },
            fence: 3,
            owner: "us-east-1/inv/1".into(),
            lease_until_ms,
            heartbeat: 0,
            state,
            fingerprint: fp(fingerprint),
            attempts: attempts.iter().map(|a| fp(a)).collect(),
            response: (state == LeaseState::Committed).then(|| b"{}".to_vec()),
            delivered: false,
            unsent: None,
            // The record's attempt was sent at 100; viewers' attempts at 100 unless a case says.
            sent_ms: 100,
            created_ms: 0,
            updated_ms: 0,
            expires_ms: 0,
            poll: None,
            label: RequestLabel::default(),
        }
    }

    /// A record waiting for a poll at `poll_at_ms`, stored by attempt "a".
    fn waiting(poll_at_ms: u64) -> LeaseRecord {
        LeaseRecord {
            poll: Some(PollRecord {
                fingerprint: fp("a"),
                state: "{}".into(),
                poll_at_ms,
                waiting_since_ms: 0,
                polls: 1,
            }),
            ..record(LeaseState::Waiting, "a", 0, &["a"])
        }
    }

    fn acquire(fingerprint: &str, now_ms: u64) -> AcquireRequest {
        sent_at(fingerprint, now_ms, 100)
    }

    fn sent_at(fingerprint: &str, now_ms: u64, sent_ms: u64) -> AcquireRequest {
        AcquireRequest {
            key: RequestKey {
                stack_id: crate::request::StackArn::parse("arn:aws:cloudformation:us-east-1:123456789012:stack/s/g")
                    .expect("an ARN"),
                request_id: "r".into(),
            },
            fingerprint: fp(fingerprint),
            sent_ms,
            owner: "us-west-2/inv/2".into(),
            now_ms,
            lease_until_ms: now_ms + 30_000,
            skew_ms: 1_000,
            expires_ms: now_ms + 1,
            poll_lag_ms: 0,
            label: RequestLabel::default(),
            preempt: false,
        }
    }

    #[test]
    fn admits_table() {
        use LeaseState::*;
        let cases: [(&str, Option<LeaseRecord>, AcquireRequest, bool); 12] = [
            ("absent", None, acquire("a", 10_000), true),
            ("running, live", Some(record(Running, "a", 10_000, &["a"])), acquire("a", 10_000), false),
            (
                "running, expired but inside skew",
                Some(record(Running, "a", 10_000, &["a"])),
                acquire("a", 11_000),
                false,
            ),
            ("running, expired past skew", Some(record(Running, "a", 10_000, &["a"])), acquire("a", 11_001), true),
            ("committed, same attempt", Some(record(Committed, "a", 0, &["a"])), acquire("a", 99_000), false),
            ("committed, new attempt", Some(record(Committed, "a", 0, &["a"])), acquire("b", 1), true),
            ("committed, superseded attempt", Some(record(Committed, "b", 0, &["a", "b"])), acquire("a", 1), false),
            (
                "running expired, superseded attempt",
                Some(record(Running, "b", 0, &["a", "b"])),
                acquire("a", 99_000),
                false,
            ),
            ("running live, new attempt", Some(record(Running, "a", 10_000, &["a"])), acquire("b", 10_000), false),
            // An attempt sent before the record's is an older deployment, even if never seen.
            ("running expired, older attempt", Some(record(Running, "b", 0, &["b"])), sent_at("a", 99_000, 99), false),
            ("committed, older attempt", Some(record(Committed, "b", 0, &["b"])), sent_at("a", 99_000, 99), false),
            ("committed, newer attempt", Some(record(Committed, "b", 0, &["b"])), sent_at("a", 99_000, 101), true),
        ];
        for (name, record, request, expected) in cases {
            assert_eq!(admits(record.as_ref(), &request), expected, "{name}");
        }
    }

    #[test]
    fn a_preempting_acquire_takes_a_live_lease_or_a_wait_but_nothing_committed_or_newer() {
        use LeaseState::*;
        let preempting = |fingerprint: &str, now_ms| AcquireRequest { preempt: true, ..acquire(fingerprint, now_ms) };
        let cases = [
            ("running, live", Some(record(Running, "a", 10_000, &["a"])), preempting("b", 5_000), true),
            (
                "running, live, its own attempt",
                Some(record(Running, "a", 10_000, &["a"])),
                preempting("a", 5_000),
                true,
            ),
            ("waiting, poll not due", Some(waiting(50_000)), preempting("a", 5_000), true),
            ("committed, same attempt", Some(record(Committed, "a", 0, &["a"])), preempting("a", 5_000), false),
            ("committed, new attempt", Some(record(Committed, "a", 0, &["a"])), preempting("b", 5_000), true),
            (
                "running, superseded attempt",
                Some(record(Running, "b", 10_000, &["a", "b"])),
                preempting("a", 5_000),
                false,
            ),
            ("absent", None, preempting("a", 5_000), true),
        ];
        for (name, record, request, expected) in cases {
            assert_eq!(admits(record.as_ref(), &request), expected, "{name}");
            // Without preempting, nothing live is taken.
            if record.as_ref().is_some_and(|r| r.state == Running && r.lease_until_ms >= 5_000) {
                assert!(!admits(record.as_ref(), &AcquireRequest { preempt: false, ..request }), "{name}");
            }
        }
    }

    #[test]
    fn a_wait_admits_its_due_poll_and_newer_attempts_only() {
        let lagging = |now_ms, lag_ms| AcquireRequest { poll_lag_ms: lag_ms, ..acquire("a", now_ms) };
        let cases = [
            ("poll not due", waiting(5_000), acquire("a", 4_999), false),
            ("poll due", waiting(5_000), acquire("a", 5_000), true),
            ("poll due, but not past the caller's lag", waiting(5_000), lagging(12_999, 8_000), false),
            ("poll due past the caller's lag", waiting(5_000), lagging(13_000, 8_000), true),
            ("a newer attempt, poll not due", waiting(5_000), acquire("b", 1), true),
            ("an older attempt", waiting(5_000), sent_at("b", 99_000, 99), false),
        ];
        for (name, record, request, expected) in cases {
            assert_eq!(admits(Some(&record), &request), expected, "{name}");
        }
        let me = Viewer { fingerprint: &fp("a"), sent_ms: 100, owner: "us-west-2/inv/2" };
        assert_eq!(waiting(5_000).seen_by(&me, 1, 1_000), Seen::Waiting { poll_at_ms: 5_000 });
        let newer = Viewer { fingerprint: &fp("b"), sent_ms: 100, owner: "us-west-2/inv/2" };
        assert_eq!(waiting(5_000).seen_by(&newer, 1, 1_000), Seen::NewAttempt);
        // The poll fields belong to their attempt: a newer attempt that took the lease over
        // starts afresh, the same attempt after a crash mid-poll polls again.
        let running = LeaseRecord { state: LeaseState::Running, owner: "us-west-2/inv/2".into(), ..waiting(5_000) };
        assert!(matches!(running.seen_by(&me, 1, 1_000), Seen::Mine { poll: Some(_), .. }));
        let replaced = LeaseRecord { fingerprint: fp("b"), ..running };
        let newer_mine = Viewer { fingerprint: &fp("b"), ..me };
        assert!(matches!(replaced.seen_by(&newer_mine, 1, 1_000), Seen::Mine { poll: None, .. }));
    }

    #[test]
    fn seen_by_table() {
        use LeaseState::*;
        let me = "us-west-2/inv/2";
        let check = |record: LeaseRecord, fingerprint: &str, owner: &str, now_ms: u64, expected: Seen| {
            let viewer = Viewer { fingerprint: &fp(fingerprint), sent_ms: 100, owner };
            assert_eq!(record.seen_by(&viewer, now_ms, 1_000), expected);
        };
        check(record(Running, "a", 10_000, &["a"]), "a", me, 5_000, Seen::Held { until_ms: 11_000 });
        check(record(Running, "a", 10_000, &["a"]), "a", me, 11_001, Seen::Expired);
        check(record(Running, "a", 10_000, &["a"]), "b", me, 11_001, Seen::Expired);
        check(
            record(Running, "a", 10_000, &["a"]),
            "a",
            "us-east-1/inv/1",
            5_000,
            Seen::Mine { fence: 3, took_over: true, interrupted: true, poll: None },
        );
        check(
            record(Committed, "a", 0, &["a"]),
            "a",
            me,
            5_000,
            Seen::Committed { fence: 3, response: b"{}".to_vec(), delivered: false, committed_ms: 0 },
        );
        check(record(Committed, "a", 0, &["a"]), "b", me, 5_000, Seen::NewAttempt);
        check(record(Running, "a", 10_000, &["a"]), "b", me, 5_000, Seen::Held { until_ms: 11_000 });
        check(record(Committed, "b", 0, &["a", "b"]), "a", me, 5_000, Seen::Superseded);
        let older = Viewer { fingerprint: &fp("a"), sent_ms: 99, owner: me };
        assert_eq!(record(Running, "b", 0, &["b"]).seen_by(&older, 99_000, 1_000), Seen::Superseded);
    }
}
