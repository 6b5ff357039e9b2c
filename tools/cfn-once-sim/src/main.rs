//! `cfn-once-sim`: run the protocol simulation over many seeds, or replay one.
//!
//! ```text
//! cfn-once-sim --seeds 10000            # seeds 0..10000 on every core, progress on stderr
//! cfn-once-sim --seeds 10000 --jobs 1   # the same on one thread (the same result)
//! cfn-once-sim --seeds 1000000          # a fresh range nobody ran: its first seed drawn at random
//! cfn-once-sim --seeds 1000000 --first 4821337000   # that range again
//! cfn-once-sim --seed 4242              # replay one seed, printing its trace
//! cfn-once-sim --seeds 1000 --mrec      # the same against an MREC (eventually consistent) table
//! cfn-once-sim --seeds 1000 --planted-bug               # a store whose commit ignores its fence
//! cfn-once-sim --seeds 1000 --planted-bug=signal-again  # a store that forgets a work's signal on a takeover
//! cfn-once-sim --seeds 1000 --planted-bug=expired-retried  # S3's 403 to an expired handle made retryable
//! cfn-once-sim --seeds 1000 --planted-bug=rerun-same-fence  # a lost answer reported as transient
//! cfn-once-sim --seeds 1000 --planted-bug=unknown-as-not-applied  # a fenced write's lost reply read as a refusal
//! cfn-once-sim --seeds 1000 --planted-bug=token-per-run  # a fenced write once per run, not per request
//! cfn-once-sim --seeds 1000 --planted-bug=format-blind  # a store that takes a newer format's records for its own
//! ```
//!
//! Each seed is a world of its own, so seeds run on `--jobs` threads (every core by default)
//! and their counts are summed: the report is the same whatever the number of threads, only
//! faster. The first line names the range; the last reads `seeds F..=L: N seeds, V violations,
//! X seeds/s, T s on J threads`; the exit status is 1 if any seed broke an invariant.
//!
//! A run of [`FRESH_SEEDS_MIN`] seeds or more without `--first` draws its first seed at random:
//! a fix proven on the seeds it was made against proves those seeds, not the class of bug, so
//! a long run before a protocol change lands must meet worlds nobody has run. Shorter runs
//! without `--first` start at 0, the fixed range CI runs, so that they repeat exactly.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use cfn_once_sim::{Options, Parameters, PlantedBug, SeedOutcome, StoreMode, run_seed};

/// A world allocates and frees small strings and maps by the million (request bodies, records,
/// expressions): with glibc's allocator that was nearly half of a seed's time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs at least this long draw a fresh first seed unless `--first` is given.
const FRESH_SEEDS_MIN: u64 = 100_000;

/// Fresh first seeds are drawn below this (and above the ranges run by hand before fresh
/// ranges were drawn, 0 to 1,999,999), as a multiple of a million so a range reads easily.
const FRESH_FIRST_MAX: u64 = 1 << 50;

const USAGE: &str =
    "usage: cfn-once-sim [--seeds N] [--first S] [--jobs J] [--seed N] [--mrec] [--legacy-draws] [--planted-bug[=BUG]]

  --seeds N       run N seeds (default 1000), starting at --first
  --first S       the first seed; without it, a run of 100000 seeds or more starts at a
                  fresh seed drawn at random (printed first, to repeat the run), a shorter
                  one at 0 (CI's fixed range)
  --jobs J        threads to run seeds on (default: every core); the result does not depend on it
  --seed N        replay one seed and print its trace
  --mrec          use an eventually consistent (MREC) table: replicas with lag, last writer wins
  --legacy-draws  draw settings as runs before user-written settings did: ServiceTimeouts from
                  30 s and the deployed secondary delay only. By default four requests in ten
                  get a ServiceTimeout log-uniform from 1 s to 3600 s, and four weather seeds in
                  ten a secondary queue delay from 0 to 900 s. Seeds found before (the named
                  ones in lib.rs) replay with this flag
  --planted-bug   the self-check: use a deliberately broken lease store, which must show violations:
                  =unfenced-commit (the default) commits without its condition (fence, state);
                  =signal-again forgets a wait condition work's committed signal when another
                  execution takes its lease, so the takeover signals the handle a second time;
                  =expired-retried has the response bucket answer a PUT to an expired wait
                  condition handle with a retryable error instead of S3's final 403;
                  =rerun-same-fence has the provider report a call whose answer was lost as
                  transient, so it runs again under the same fence while the first run goes on;
                  =unknown-as-not-applied sends a fenced write whose reply was lost again as if
                  it had not applied (each attempt with a token of its own, a refusal read
                  without it), so an ADD counts twice and a create whose condition it made
                  false is reported failed although it stands (STANDS, COUNT);
                  =token-per-run makes a fenced write's token name the run's fence, so a rerun
                  of the request after an unknown outcome adds again (COUNT);
                  =format-blind has the lease store read and write records of a newer format as
                  its own, so an upgrade's older region overwrites what a newer version wrote;
                  =fixed-margin keeps the handler's 20 s deadline margin whole whatever a
                  request's time, so short ServiceTimeouts are answered FAILED unrun (TIME)";

struct Args {
    seeds: u64,
    first: Option<u64>,
    jobs: usize,
    replay: Option<u64>,
    options: Options,
}

fn parse() -> Result<Args, String> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let mut args = Args {
        seeds: 1_000,
        first: None,
        jobs: cores,
        replay: None,
        options: Options { mode: StoreMode::Mrsc, planted_bug: None, user_settings: true },
    };
    let mut items = std::env::args().skip(1);
    let number = |value: Option<String>, flag: &str| -> Result<u64, String> {
        value.and_then(|v| v.parse().ok()).ok_or_else(|| format!("{flag} needs a whole number"))
    };
    while let Some(item) = items.next() {
        match item.as_str() {
            "--seeds" => args.seeds = number(items.next(), "--seeds")?,
            "--first" => args.first = Some(number(items.next(), "--first")?),
            "--jobs" => {
                args.jobs = usize::try_from(number(items.next(), "--jobs")?)
                    .ok()
                    .filter(|jobs| *jobs > 0)
                    .ok_or("--jobs needs at least 1")?;
            }
            "--seed" => args.replay = Some(number(items.next(), "--seed")?),
            "--mrec" => args.options.mode = StoreMode::Mrec { lag_ms: 1_000 },
            "--planted-bug" => args.options.planted_bug = Some(PlantedBug::UnfencedCommit),
            "--legacy-draws" => args.options.user_settings = false,
            flag if flag.starts_with("--planted-bug=") => {
                let name = &flag["--planted-bug=".len()..];
                let bug = PlantedBug::parse(name).ok_or_else(|| {
                    format!("unknown planted bug {name:?}: use unfenced-commit, signal-again, expired-retried, rerun-same-fence, unknown-as-not-applied, token-per-run, format-blind or fixed-margin")
                })?;
                args.options.planted_bug = Some(bug);
            }
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(problem) => {
            if !problem.is_empty() {
                eprintln!("cfn-once-sim: {problem}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(seed) = args.replay {
        let outcome = run_seed(seed, args.options, true);
        for line in &outcome.trace {
            println!("{line}");
        }
        println!("seed {seed}: {} violations", outcome.violations.len());
        for violation in &outcome.violations {
            println!("  {violation}");
        }
        return if outcome.violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }

    let (first, how) = match args.first {
        Some(first) => (first, format!("--first {first}")),
        None if args.seeds >= FRESH_SEEDS_MIN => {
            let first = fresh_first_seed();
            (first, format!("a fresh range, its first seed drawn at random; repeat it with --first {first}"))
        }
        None => (0, "the fixed range; give --first for another".to_owned()),
    };
    let Some(last) = first.checked_add(args.seeds.saturating_sub(1)) else {
        eprintln!("cfn-once-sim: --first {first} with --seeds {} runs past the last seed", args.seeds);
        return ExitCode::from(2);
    };
    let range = format!("seeds {first}..={last}");
    println!("{range} ({how})");
    let parameters = Parameters::deployed();
    println!("{}", parameters.deployed.summary());
    let timeouts: Vec<String> = parameters
        .deployed
        .function_timeouts
        .iter()
        .map(|t| format!("{} s (visibility {} s)", t.timeout_s, t.visibility_s))
        .collect();
    println!("function timeouts drawn per seed: {}", timeouts.join(", "));
    let settings = &parameters.settings[0];
    println!(
        "handler: lease={}ms skew={}ms heartbeat={}ms store-call={}ms put={}x{}ms reserve={}ms backoff-floor={}s retry-max={}s standby-retry={}s margin={}ms head-start={}s failover-minimum={} (the template's environment and the handler's defaults)",
        settings.lease_ms,
        settings.skew_ms,
        settings.heartbeat_ms,
        settings.store_call_timeout_ms,
        settings.put.attempts_max,
        settings.put.attempt_timeout_ms,
        settings.reserve_ms(),
        settings.backoff_floor_s().unwrap_or_default(),
        settings.retry_delay_s_max,
        settings.standby_retry_s,
        settings.deadline_margin_ms,
        settings.head_start_s,
        parameters.settings[1].failover_minimum_s().map_or("none".to_owned(), |seconds| format!("{seconds}s")),
    );
    let started = Instant::now();
    let mut coverage: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut failing: Vec<(u64, String)> = Vec::new();
    let mut violations = 0u64;
    // Violations by invariant (the text before the colon), and failing seeds by story.
    let mut by_invariant: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_story: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    // On a terminal the bar redraws in place every 1%; in a log it is a line every 10%.
    let terminal = std::io::stderr().is_terminal();
    let step = (args.seeds / if terminal { 100 } else { 10 }).max(1);
    let jobs = args.jobs.min(usize::try_from(args.seeds).unwrap_or(usize::MAX)).max(1);
    let mut done = 0u64;
    run_seeds(first, args.seeds, jobs, args.options, |outcome| {
        for (name, count) in outcome.coverage {
            *coverage.entry(name).or_default() += count;
        }
        let story = by_story.entry(outcome.story).or_default();
        story.0 += 1;
        if !outcome.violations.is_empty() {
            story.1 += 1;
            violations += outcome.violations.len() as u64;
            for violation in &outcome.violations {
                let invariant = violation.split(':').next().unwrap_or_default().to_owned();
                *by_invariant.entry(invariant).or_default() += 1;
            }
            failing.push((outcome.seed, outcome.violations[0].clone()));
        }
        done += 1;
        if done.is_multiple_of(step) || done == args.seeds {
            let width = 40;
            let filled = (done * width / args.seeds.max(1)) as usize;
            let bar = format!(
                "[{}{}] {done}/{} seeds, {} failing, {:.0} seeds/s",
                "#".repeat(filled),
                "-".repeat(width as usize - filled),
                args.seeds,
                failing.len(),
                done as f64 / started.elapsed().as_secs_f64().max(1e-9)
            );
            if terminal {
                eprint!("\r{bar}");
                std::io::stderr().flush().ok();
            } else {
                eprintln!("{bar}");
            }
        }
    });
    // Seeds finish in any order on several threads: report them in seed order.
    failing.sort_by_key(|(seed, _)| *seed);
    if terminal {
        eprintln!();
    }
    let seconds = started.elapsed().as_secs_f64();
    println!("coverage (times each fault and path happened):");
    for (name, count) in &coverage {
        println!("  {count:>10}  {name}");
    }
    println!("stories (seeds, of which failing):");
    for (story, (seeds, failed)) in &by_story {
        println!("  {seeds:>10}  {failed:>8} failing  {story}");
    }
    if !by_invariant.is_empty() {
        println!("violations by invariant:");
        for (invariant, count) in &by_invariant {
            println!("  {count:>10}  {invariant}");
        }
    }
    if let Some((seed, _)) = failing.first() {
        println!("trace of the first failing seed, {seed}:");
        for line in run_seed(*seed, args.options, true).trace {
            println!("  {line}");
        }
    }
    for (seed, violation) in failing.iter().take(10) {
        println!("seed {seed}: {violation}  (replay: cfn-once-sim --seed {seed}{})", flags(args.options));
    }
    println!(
        "{range}: {} seeds, {violations} violations, {:.0} seeds/s, {seconds:.0} s on {jobs} thread{}",
        args.seeds,
        args.seeds as f64 / seconds.max(1e-9),
        if jobs == 1 { "" } else { "s" }
    );
    if violations == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// A first seed nobody has run: drawn from the standard library's per-process random keys and
/// the time, a multiple of a million between 2,000,000 and [`FRESH_FIRST_MAX`].
fn fresh_first_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    let millions = FRESH_FIRST_MAX / 1_000_000 - 2;
    (2 + hasher.finish() % millions) * 1_000_000
}

/// Runs seeds `first..first + count` on `jobs` threads, each taking the next seed not yet
/// taken, and hands every outcome to `each` on this thread, as it comes.
fn run_seeds(first: u64, count: u64, jobs: usize, options: Options, mut each: impl FnMut(SeedOutcome)) {
    let next = AtomicU64::new(first);
    let end = first.saturating_add(count);
    let (sender, outcomes) = mpsc::sync_channel::<SeedOutcome>(1_024);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let (next, sender) = (&next, sender.clone());
            scope.spawn(move || {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end || sender.send(run_seed(seed, options, false)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);
        for outcome in outcomes {
            each(outcome);
        }
    });
}

fn flags(options: Options) -> String {
    let mut flags = String::new();
    if matches!(options.mode, StoreMode::Mrec { .. }) {
        flags.push_str(" --mrec");
    }
    if let Some(bug) = options.planted_bug {
        flags.push_str(&format!(" --planted-bug={}", bug.name()));
    }
    if !options.user_settings {
        flags.push_str(" --legacy-draws");
    }
    flags
}
