//! cfn-once-sim: a seeded, deterministic simulation of the cfn-once protocol under faults.
//!
//! It runs the real batch code (`cfn_once_core::batch`) and through it the real
//! `cfn_once_core::worker::Worker` (decisions, lease protocol, heartbeats, deadlines, response
//! building) for two regions on one virtual clock, each region's Lambdas fed batches of the
//! template's `BatchSize` by an event source mapping with the template's concurrency, against
//! the real in-memory lease store (linearizable, as an MRSC table) or a replica per region with
//! lag and last-writer-wins (MREC), and injects the scenario's faults: duplicate and late SNS
//! deliveries, Lambda crashes between any two steps and region-wide kills at any moment
//! (including the last minute before a deadline), freezes longer than a lease, providers that
//! panic, clock skew and jumps, throttling, lost requests and replies and hangs in the store,
//! control reads slower than their timeout, failed, lost and hung PUTs, region outages, and
//! flips of the active region. After each seed it checks S1 (one answer), S2 (fenced writes),
//! S3 (monotonic fences), DRAIN (a drained primary starts no new work), DLQ, BUDGET and L1
//! (answered by the deadline, wherever some region could still answer).
//!
//! Where things are: [`scenario`] draws a seed's world, [`world`] runs it, [`queues`],
//! [`stores`], [`sink`], [`provider`] and [`region`] are the simulated parts (and where
//! invariants are observed), [`shared`] holds virtual time and observations.

pub mod deployed;
pub mod provider;
pub mod queues;
pub mod region;
pub mod scenario;
pub mod shared;
pub mod sink;
pub mod stores;
pub mod world;

pub use scenario::{Options, Scenario, StoreMode};
pub use world::{Parameters, SeedOutcome, run};

/// Runs `seed` with `options` on the deployed parameters; with `tracing`, the outcome carries
/// the full event trace.
pub fn run_seed(seed: u64, options: Options, tracing: bool) -> SeedOutcome {
    let parameters = Parameters::deployed();
    let scenario = Scenario::generate(seed, options, &parameters.deployed, parameters.settings[0].skew_ms);
    run(&scenario, parameters, tracing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const MRSC: Options = Options { mode: StoreMode::Mrsc, planted_bug: false };

    fn violations(options: Options, seeds: std::ops::Range<u64>) -> Vec<(u64, String)> {
        seeds
            .filter_map(|seed| run_seed(seed, options, false).violations.into_iter().next().map(|v| (seed, v)))
            .collect()
    }

    #[test]
    fn a_seed_replays_exactly() {
        for seed in [1, 43, 4242] {
            let first = run_seed(seed, MRSC, true);
            let second = run_seed(seed, MRSC, true);
            assert!(first.trace.len() > 10, "seed {seed} traced {} lines", first.trace.len());
            assert_eq!(first.trace, second.trace, "seed {seed} did not replay");
            assert_eq!(first.coverage, second.coverage);
        }
    }

    #[test]
    fn the_protocol_keeps_its_invariants() {
        let found = violations(MRSC, 0..2_000);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn the_planted_bug_is_caught_within_1000_seeds() {
        let found = violations(Options { mode: StoreMode::Mrsc, planted_bug: true }, 0..1_000);
        assert!(!found.is_empty(), "an unconditional commit went unnoticed for 1000 seeds");
        assert!(found.iter().any(|(_, v)| v.starts_with("S1")), "{found:?}");
    }

    #[test]
    fn an_eventually_consistent_table_is_caught() {
        let found = violations(Options { mode: StoreMode::Mrec { lag_ms: 1_000 }, planted_bug: false }, 0..1_000);
        assert!(!found.is_empty(), "MREC's lost races went unnoticed for 1000 seeds");
    }

    #[test]
    fn every_fault_and_interesting_path_happens() {
        let mut coverage: BTreeMap<&'static str, u64> = BTreeMap::new();
        for seed in 0..1_000 {
            for (name, count) in run_seed(seed, MRSC, false).coverage {
                *coverage.entry(name).or_default() += count;
            }
        }
        for path in [
            "lease taken over",
            "stale commit rejected",
            "heartbeat found the lease lost",
            "stored answer re-sent",
            "drained primary left the message",
            "superseded attempt dropped",
            "Lambda crashed between steps",
            "Lambda frozen for longer than a lease",
            "message delivered twice at once",
            "region outage",
            "active region flipped",
            "clock jumped",
            "store throttled",
            "store request lost",
            "store write applied, reply lost",
            "store call hung",
            "response PUT failed",
            "response PUT landed, reply lost",
            "response PUT hung",
            "scenario: drained primary, secondary down for good",
            "scenario: provider for minutes on the longest timeout, then a crash",
            "scenario: lease-store outage of 10+ minutes",
            "store call failed in an outage",
            "every Lambda of a region crashed mid-run",
            "function timeout 900 s",
            "answered FAILED",
            "provider answered in progress",
            "work in progress stored, lease released",
            "due poll taken",
            "due poll taken by the other region",
            "poll ran",
            "poll ran in the other region than the last",
            "lease taken over in the middle of a poll",
            "stale wait rejected",
            "wait finished by a poll",
            "region outage in the middle of a wait",
            "deadline reached while waiting: answered FAILED",
            "scenario: primary down for good in the middle of a wait",
            "scenario: Lambdas killed in the last minute before a deadline",
            "scenario: long-running requests batched with a slow one",
            "scenario: primary down, the secondary's copy delivered minutes late",
            "scenario: drained primary, control slower than its timeout",
            "batch of more than one record",
            "provider panicked",
            "Lambda killed in the last minute before a deadline",
            "SNS delivered a copy late",
            "visibility shortened for records near their deadline",
            "control read slower than its timeout",
            "delete with a receipt a later receive replaced",
            "L1 excused: no region could answer in time",
        ] {
            assert!(coverage.get(path).is_some_and(|count| *count > 0), "never happened: {path} ({coverage:?})");
        }
    }
}
