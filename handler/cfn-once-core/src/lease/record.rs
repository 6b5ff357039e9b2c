//! The lease record as stored: one per request, holding the lease, the fence and the committed
//! outcome together, in a format a handler of an older version can tell it must leave alone.

use std::collections::BTreeSet;

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
    ///
    /// [`LeaseStore::leave`]: super::LeaseStore::leave
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
/// that last wrote it; a record without one was written before formats (by the revisions
/// before 0.1.0) and is format 1. A handler reads every format up to its own
/// and writes its own; it never writes, deletes or acts on a record of a newer format
/// ([`StoreError::NewerFormat`]): it leaves the message for a handler that knows it.
///
/// - 1: the records as the revisions before 0.1.0 wrote them (`tests/golden/records/v1/`).
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
/// (`make golden-records`): `tests/it/golden/` fails on a record whose shape changed under an
/// unchanged format. An attribute no decision reads, whose value stays true whatever an older
/// handler writes after it, is no such change: `writer` ([`writer_stamp`], since 0.2.0) is
/// one, and `INFORMATIONAL` in `tests/it/golden/informational.rs` lists each, with a test that
/// it changes no decision.
///
/// [`StoreError::NewerFormat`]: super::StoreError::NewerFormat
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
    /// Which version of cfn-once wrote the record last, as [`writer_stamp`] spells it: the
    /// version and the `updated_ms` of its write. For the people who look at the table (the
    /// protocol never reads it); absent on records no handler since 0.2.0 wrote. See
    /// [`LeaseRecord::written_by`].
    pub writer: Option<String>,
}

/// The `writer` a handler of this version puts on a record it writes at `now_ms` (the same
/// `now_ms` the write puts in `updated_ms`): `"0.2.0@1765139000123"`.
///
/// A handler older than 0.2.0 writes no `writer` and leaves one it finds as it was, so a
/// version alone would name the last writer that knew the field, not the last writer. With the
/// time of its write, the stamp is true by construction of what it claims: the record was last
/// written by that version exactly when the stamp's time is the record's `updated_ms`, which
/// every write of every version sets (`written_by`). This is why the field needed no new format:
/// an older handler misreads nothing by ignoring it, and what it leaves behind stays true.
pub fn writer_stamp(now_ms: u64) -> String {
    format!("{}@{now_ms}", crate::build::VERSION)
}

impl LeaseRecord {
    /// The version of cfn-once that wrote this record last, if its `writer` says so: `None`
    /// where the record has no stamp, or a stamp older than its `updated_ms` (a handler older
    /// than 0.2.0 wrote it since; two writes in the same millisecond by a stamping and an older
    /// handler are the one case this cannot tell apart).
    pub fn written_by(&self) -> Option<&str> {
        let (version, at) = self.writer.as_deref()?.rsplit_once('@')?;
        (at.parse::<u64>().ok()? == self.updated_ms).then_some(version)
    }
}

/// The record a [`LeaseStore::leave`] writes back for the lease `fence` took, having found
/// `prior`: that record as it was, under the fence the acquire took; or, where there was none,
/// a LEFT record holding only that fence (read as no record, admitting any acquire). The
/// acquire changed nothing else that anyone reads, so after the leave every delivery decides as
/// if it had never happened, and the next acquire is granted `fence + 1`.
///
/// [`LeaseStore::leave`]: super::LeaseStore::leave
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
            writer: Some(writer_stamp(now_ms)),
        },
    }
}
