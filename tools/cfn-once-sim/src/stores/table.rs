//! The table: one linearizable copy (MRSC) or a replica per region (MREC), and what the world
//! does to it besides the handler's calls.

use std::sync::Arc;

use cfn_once_core::lease::{LeaseRecord, LeaseState};
use cfn_once_core::memory_store::MemoryLeaseStore;

use crate::scenario::{PlantedBug, Region, StoreMode};

use super::Table;

impl Table {
    pub fn new(mode: StoreMode, planted_bug: Option<PlantedBug>) -> Self {
        let store = || {
            Arc::new(match planted_bug {
                Some(PlantedBug::UnfencedCommit) => MemoryLeaseStore::planted_commit_bug(),
                Some(PlantedBug::FormatBlind) => MemoryLeaseStore::planted_format_blind(),
                _ => MemoryLeaseStore::new(),
            })
        };
        let first = store();
        let replicas = match mode {
            StoreMode::Mrsc => [Arc::clone(&first), first],
            StoreMode::Mrec { .. } => [first, store()],
        };
        Self { mode, replicas, forgets_signals: planted_bug == Some(PlantedBug::SignalAgain) }
    }

    /// Whether any request's provider is waiting for a poll right now.
    pub fn any_waiting(&self) -> bool {
        self.replicas.iter().any(|replica| replica.snapshot().iter().any(|r| r.state == LeaseState::Waiting))
    }

    /// The sweeper: deletes every record past its retention (in every replica). Returns the
    /// keys it deleted.
    pub fn sweep(&self, now_ms: u64) -> Vec<cfn_once_core::request::RequestKey> {
        let before: std::collections::BTreeSet<_> =
            self.replicas.iter().flat_map(|replica| replica.snapshot()).map(|record| record.key).collect();
        for replica in match self.mode {
            StoreMode::Mrsc => &self.replicas[..1],
            StoreMode::Mrec { .. } => &self.replicas[..],
        } {
            replica.sweep(now_ms);
        }
        let after: std::collections::BTreeSet<_> =
            self.replicas.iter().flat_map(|replica| replica.snapshot()).map(|record| record.key).collect();
        before.difference(&after).cloned().collect()
    }

    /// Writes `record` as a newer version of cfn-once does, to every replica.
    pub fn put_as_newer_version(&self, record: &LeaseRecord) {
        for replica in &self.replicas {
            replica.put_as_written(record.clone());
        }
    }

    /// The record of `key` in each replica, as stored.
    pub fn stored(&self, key: &cfn_once_core::request::RequestKey) -> Vec<Option<LeaseRecord>> {
        self.replicas.iter().map(|replica| replica.get(key)).collect()
    }

    /// Applies replication that has come due.
    pub fn replicate(&self, to: Region, record: LeaseRecord) {
        self.replicas[to.index()].replicate(record);
    }
}
