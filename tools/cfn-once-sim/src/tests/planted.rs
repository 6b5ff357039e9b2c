//! The self-check: each planted bug is caught within 1,000 seeds, by the invariant it breaks.

use super::*;

#[test]
fn the_planted_bug_is_caught_within_1000_seeds() {
    let found = violations(
        Options { mode: StoreMode::Mrsc, planted_bug: Some(PlantedBug::UnfencedCommit), user_settings: false },
        0..1_000,
    );
    assert!(!found.is_empty(), "an unconditional commit went unnoticed for 1000 seeds");
    assert!(found.iter().any(|(_, v)| v.starts_with("S1")), "{found:?}");
}

#[test]
fn the_planted_second_signal_is_caught_within_1000_seeds() {
    let found = violations(
        Options { mode: StoreMode::Mrsc, planted_bug: Some(PlantedBug::SignalAgain), user_settings: false },
        0..1_000,
    );
    assert!(
        found.iter().any(|(_, v)| v.contains("cfn-once-work:") || v.starts_with("SIGNAL")),
        "a takeover that signalled a handle again went unnoticed for 1000 seeds: {found:?}"
    );
    // Every violation it causes is about a work: the bug touches nothing else.
    assert!(
        found
            .iter()
            .all(|(_, v)| v.contains("cfn-once-work:") || v.contains("waitcondition") || v.starts_with("SIGNAL")),
        "{found:?}"
    );
}

#[test]
fn the_planted_retry_of_a_refused_signal_is_caught_within_1000_seeds() {
    let options =
        Options { mode: StoreMode::Mrsc, planted_bug: Some(PlantedBug::ExpiredRetried), user_settings: false };
    let found: Vec<(u64, String)> = (0..1_000)
        .flat_map(|seed| run_seed(seed, options, false).violations.into_iter().map(move |v| (seed, v)))
        .collect();
    assert!(
        found.iter().any(|(_, v)| v.starts_with("EXPIRED")),
        "a signal retried after its handle refused it went unnoticed for 1000 seeds: {found:?}"
    );
    // A close that cannot finish (its signal retried against the refusing handle) no
    // longer holds up the Delete or Update behind it: that is answered FAILED in its margin.
    assert!(!found.iter().any(|(_, v)| v.starts_with("L1")), "{found:?}");
}

#[test]
fn the_planted_rerun_under_the_same_fence_is_caught_within_1000_seeds() {
    let found = violations(
        Options { mode: StoreMode::Mrsc, planted_bug: Some(PlantedBug::RerunSameFence), user_settings: false },
        0..1_000,
    );
    assert!(
        found.iter().any(|(_, v)| v.starts_with("OVERLAP")),
        "a provider run again under the same fence after a lost answer went unnoticed for 1000 seeds: {found:?}"
    );
}

#[test]
fn the_planted_lost_reply_read_as_a_refusal_is_caught_within_1000_seeds() {
    let found = violations(
        Options { mode: StoreMode::Mrsc, planted_bug: Some(PlantedBug::UnknownAsNotApplied), user_settings: false },
        0..1_000,
    );
    assert!(
        found.iter().any(|(_, v)| v.starts_with("STANDS")),
        "a fenced write that stands, reported failed after its reply was lost, went unnoticed for 1000 seeds: {found:?}"
    );
    assert!(
        found.iter().any(|(_, v)| v.starts_with("COUNT")),
        "an ADD applied twice after its reply was lost went unnoticed for 1000 seeds: {found:?}"
    );
}

#[test]
fn the_planted_token_per_run_is_caught_within_1000_seeds() {
    let found = violations(
        Options { mode: StoreMode::Mrsc, planted_bug: Some(PlantedBug::TokenPerRun), user_settings: false },
        0..1_000,
    );
    assert!(
        found.iter().any(|(_, v)| v.starts_with("COUNT")),
        "an ADD applied again by a rerun of its request went unnoticed for 1000 seeds: {found:?}"
    );
}

#[test]
fn the_planted_fixed_margin_is_caught_within_1000_seeds_of_user_settings() {
    let options = Options { mode: StoreMode::Mrsc, planted_bug: Some(PlantedBug::FixedMargin), user_settings: true };
    let found = violations(options, 0..1_000);
    assert!(found.iter().any(|(_, v)| v.starts_with("TIME")), "{found:?}");
}

#[test]
fn the_planted_format_blind_store_is_caught_within_1000_seeds() {
    let options = Options { mode: StoreMode::Mrsc, planted_bug: Some(PlantedBug::FormatBlind), user_settings: false };
    let found: Vec<(u64, String)> = (0..1_000)
        .flat_map(|seed| run_seed(seed, options, false).violations.into_iter().map(move |v| (seed, v)))
        .collect();
    assert!(
        found.iter().any(|(_, v)| v.starts_with("FORMAT")),
        "records of a newer format overwritten went unnoticed for 1000 seeds: {found:?}"
    );
}
