//! The lease store as each region sees it: the real in-memory store (linearizable, as MRSC) or a
//! replica per region (MREC), behind seeded faults, with every grant and commit observed for
//! invariants S1 and S3, and every stored wait for S2 (only the newest fence stores a provider's
//! work in progress, and its poll count never goes back).
//!
//! Where things are: this file holds the table and a region's view of it; `table` the table's
//! copies (one, or a replica per region) and what the world does to them (replication, the
//! sweeper, a newer version's writes); `faults` the seeded faults each call meets and the
//! planted bug that forgets a signal; `observe` what the calls are checked for (S2, S3, S1,
//! DRAIN) and counted as; `lease_store` the `LeaseStore` port the workers call, which puts
//! them together.

use std::sync::Arc;

use cfn_once_core::clock::Clock;
use cfn_once_core::memory_store::MemoryLeaseStore;
use cfn_once_core::request::RequestKey;

use crate::scenario::{Region, StoreMode};
use crate::shared::Shared;

pub mod expressions;
mod faults;
mod lease_store;
mod observe;
mod table;

/// The table: one copy, or one per region.
#[derive(Debug)]
pub struct Table {
    mode: StoreMode,
    replicas: [Arc<MemoryLeaseStore>; 2],
    /// The self-check's planted bug that forgets a work's committed signal on a takeover.
    forgets_signals: bool,
}

/// A region's view of the table, misbehaving on the seed's dice inside the fault window.
#[derive(Debug)]
pub struct RegionStore {
    region: Region,
    table: Arc<Table>,
    shared: Arc<Shared>,
}

impl RegionStore {
    pub fn new(region: Region, table: Arc<Table>, shared: Arc<Shared>) -> Self {
        Self { region, table, shared }
    }

    fn local(&self) -> &MemoryLeaseStore {
        &self.table.replicas[self.region.index()]
    }

    /// MREC: the write replicates to the other region after the lag.
    fn replicate_later(&self, key: &RequestKey) {
        if let StoreMode::Mrec { lag_ms } = self.table.mode
            && let Some(record) = self.local().get(key)
        {
            let due = self.shared.clock.now_ms() + lag_ms;
            self.shared.observed().replications.push((due, self.region.other(), record));
        }
    }
}

#[cfg(test)]
mod tests;
