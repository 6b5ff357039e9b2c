//! An in-memory [`LeaseStore`]: linearizable, like a multi-Region strongly consistent table.
//!
//! Every operation takes one lock, evaluates the same condition the DynamoDB adapter sends
//! (`lease::admits` for acquire), and applies the same update, so the shared contract suite
//! holds both adapters to one behaviour. Used by unit tests and the simulator, and by anyone
//! who wants to run providers without AWS.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use crate::lease::{
    Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseState, LeaseStore, PollRecord, RECORD_FORMAT, RequestLabel,
    StoreError, admits, writer_stamp,
};
use crate::request::RequestKey;

/// The in-memory lease store.
#[derive(Debug, Default)]
pub struct MemoryLeaseStore {
    records: Mutex<BTreeMap<RequestKey, LeaseRecord>>,
    /// The simulator's self-check only: commit without its condition (see `planted_commit_bug`).
    unconditional_commit: bool,
    /// The simulator's self-check only: take a record of a newer format for one of this
    /// handler's (see `planted_format_blind`).
    format_blind: bool,
}

impl MemoryLeaseStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store whose commit ignores its condition (`fence = mine AND state = RUNNING`): a
    /// deliberately broken store for the simulator's self-check, which must catch the double
    /// commits it allows. Never use it for anything else.
    pub fn planted_commit_bug() -> Self {
        Self { unconditional_commit: true, ..Self::default() }
    }

    /// A store that reads and writes records of a newer format as if they were its own, as a
    /// handler that checked no format would: a deliberately broken store for the simulator's
    /// self-check, which must catch the records of an unknown format it overwrites.
    pub fn planted_format_blind() -> Self {
        Self { format_blind: true, ..Self::default() }
    }

    /// Deletes the record of `key`, as the sweeper does one past its retention.
    pub fn remove(&self, key: &RequestKey) -> Option<LeaseRecord> {
        self.records().remove(key)
    }

    /// Stores `record` as it is, whatever its format: a newer version of cfn-once writing the
    /// table (the simulator's "future" records, tests).
    pub fn put_as_written(&self, record: LeaseRecord) {
        self.records().insert(record.key.clone(), record);
    }

    /// Every record, for assertions.
    pub fn snapshot(&self) -> Vec<LeaseRecord> {
        self.records().values().cloned().collect()
    }

    /// One record.
    pub fn get(&self, key: &RequestKey) -> Option<LeaseRecord> {
        self.records().get(key).cloned()
    }

    /// Deletes every record whose `expires_ms` has passed at `now_ms`, as the sweeper does on
    /// the DynamoDB table (MRSC tables have no TTL); returns how many. For tests and the
    /// simulator, which play a stack's life over months.
    /// A record of a newer format stays: its retention is that format's to say.
    pub fn sweep(&self, now_ms: u64) -> usize {
        let blind = self.format_blind;
        let mut records = self.records();
        let before = records.len();
        records.retain(|_, record| record.expires_ms >= now_ms || (record.format > RECORD_FORMAT && !blind));
        before - records.len()
    }

    /// Stores `record` as replication would: last writer (by `updated_ms`) wins. For the
    /// simulator's eventually consistent (MREC) mode.
    pub fn replicate(&self, record: LeaseRecord) {
        let mut records = self.records();
        let newer = records.get(&record.key).is_none_or(|existing| record.updated_ms >= existing.updated_ms);
        if newer {
            records.insert(record.key.clone(), record);
        }
    }

    fn records(&self) -> MutexGuard<'_, BTreeMap<RequestKey, LeaseRecord>> {
        // Each operation below leaves the map consistent before anything can panic.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An acquire, or with `signal` a close (the acquire and its commit as one write, under one
    /// lock), as `DynamoLeaseStore::take` sends them: granted where `lease::admits` says, with
    /// a new fence; a close commits `signal` at once and leaves no work in progress.
    fn take(&self, request: &AcquireRequest, signal: Option<&[u8]>) -> Result<Acquire, StoreError> {
        let mut records = self.records();
        let existing = records.get(&request.key);
        self.known(existing)?;
        if !admits(existing, request) {
            let record = existing.cloned().ok_or_else(|| StoreError::Permanent("refused an absent record".into()))?;
            return Ok(Acquire::Refused(Box::new(record)));
        }
        let (fence, created_ms, mut attempts, poll) = match existing {
            Some(record) => (record.fence + 1, record.created_ms, record.attempts.clone(), record.poll.clone()),
            None => (1, request.now_ms, BTreeSet::new(), None),
        };
        let poll = poll.filter(|_| signal.is_none());
        let took_over = existing.is_some_and(|record| record.fingerprint == request.fingerprint);
        let interrupted = took_over && existing.is_some_and(|record| record.state == LeaseState::Running);
        let mine = poll.as_ref().filter(|poll| poll.fingerprint == request.fingerprint).cloned();
        let prior = existing.cloned().map(Box::new);
        let label = kept_replaces(existing.map(|record| record.label.replaces.clone()), &request.label);
        attempts.insert(request.fingerprint.clone());
        records.insert(
            request.key.clone(),
            LeaseRecord {
                format: RECORD_FORMAT,
                key: request.key.clone(),
                fence,
                owner: request.owner.clone(),
                lease_until_ms: request.lease_until_ms,
                heartbeat: 0,
                state: if signal.is_some() { LeaseState::Committed } else { LeaseState::Running },
                fingerprint: request.fingerprint.clone(),
                attempts,
                response: signal.map(<[u8]>::to_vec),
                delivered: false,
                unsent: None,
                sent_ms: request.sent_ms,
                created_ms,
                updated_ms: request.now_ms,
                expires_ms: request.expires_ms,
                poll,
                label,
                writer: Some(writer_stamp(request.now_ms)),
            },
        );
        Ok(Acquire::Acquired { fence, took_over, interrupted, poll: mine, prior })
    }

    /// Every write's first condition, as the DynamoDB adapter's `attribute_not_exists(format)
    /// OR format <= :format`: a record of a newer format is refused before anything else.
    fn known(&self, record: Option<&LeaseRecord>) -> Result<(), StoreError> {
        match record {
            Some(record) if !self.format_blind => StoreError::if_newer(record),
            _ => Ok(()),
        }
    }

    fn conditional(
        &self,
        key: &RequestKey,
        condition: impl FnOnce(&LeaseRecord) -> bool,
        update: impl FnOnce(&mut LeaseRecord),
    ) -> Result<Conditional, StoreError> {
        let mut records = self.records();
        self.known(records.get(key))?;
        Ok(match records.get_mut(key) {
            Some(record) if condition(record) => {
                update(record);
                record.format = RECORD_FORMAT;
                Conditional::Applied
            }
            other => Conditional::Refused(other.map(|record| Box::new(record.clone()))),
        })
    }
}

/// The label an acquire or a close writes: the request's, but `replaces` as the first write
/// that named one set it (the DynamoDB adapter's `if_not_exists`): a close of the work, or a
/// poll, never changes which work it replaced.
fn kept_replaces(existing: Option<String>, label: &RequestLabel) -> RequestLabel {
    let replaces = existing.filter(|replaces| !replaces.is_empty()).unwrap_or_else(|| label.replaces.clone());
    RequestLabel { replaces, ..label.clone() }
}

/// The one condition every fenced write carries: the record still holds `fence` in `state`.
fn under_fence(fence: u64, state: LeaseState) -> impl Fn(&LeaseRecord) -> bool {
    move |record| record.fence == fence && record.state == state
}

#[async_trait]
impl LeaseStore for MemoryLeaseStore {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.take(request, None)
    }

    async fn close(&self, request: &AcquireRequest, signal: &[u8]) -> Result<Acquire, StoreError> {
        self.take(request, Some(signal))
    }

    async fn heartbeat(
        &self,
        key: &RequestKey,
        fence: u64,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.conditional(key, under_fence(fence, LeaseState::Running), |record| {
            record.lease_until_ms = lease_until_ms;
            record.heartbeat += 1;
            record.updated_ms = now_ms;
            record.writer = Some(writer_stamp(now_ms));
        })
    }

    async fn commit(
        &self,
        key: &RequestKey,
        fence: u64,
        response: &[u8],
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        let unconditional = self.unconditional_commit;
        self.conditional(
            key,
            |record| unconditional || under_fence(fence, LeaseState::Running)(record),
            |record| {
                record.state = LeaseState::Committed;
                record.response = Some(response.to_vec());
                record.updated_ms = now_ms;
                record.writer = Some(writer_stamp(now_ms));
                record.poll = None;
            },
        )
    }

    async fn wait(
        &self,
        key: &RequestKey,
        fence: u64,
        poll: &PollRecord,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.conditional(key, under_fence(fence, LeaseState::Running), |record| {
            record.state = LeaseState::Waiting;
            record.poll = Some(poll.clone());
            record.lease_until_ms = now_ms;
            record.updated_ms = now_ms;
            record.writer = Some(writer_stamp(now_ms));
        })
    }

    async fn mark_delivered(
        &self,
        key: &RequestKey,
        fence: u64,
        unsent: Option<&str>,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.conditional(key, under_fence(fence, LeaseState::Committed), |record| {
            record.delivered = true;
            if let Some(why) = unsent {
                record.unsent = Some(why.to_owned());
            }
            record.updated_ms = now_ms;
            record.writer = Some(writer_stamp(now_ms));
        })
    }

    async fn read(&self, key: &RequestKey) -> Result<Option<LeaseRecord>, StoreError> {
        let record = self.records().get(key).cloned();
        self.known(record.as_ref())?;
        Ok(record)
    }

    async fn leave(&self, left: &LeaseRecord) -> Result<Conditional, StoreError> {
        self.conditional(&left.key, under_fence(left.fence, LeaseState::Running), |record| *record = left.clone())
    }
}
