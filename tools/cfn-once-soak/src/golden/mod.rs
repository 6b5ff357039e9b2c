//! `cfn-once golden-records`: the lease table's items as one version of the Lambda function
//! wrote them, kept as fixtures (`tests/golden/records/v<format>/`) that today's handler is
//! tested against (`tests/it/golden/`).
//!
//! Nothing here writes a record: the items are the version's own, written by its release binary
//! run for real. The generator runs a soak of that binary (`cfn-once soak --binary <binary>
//! --endpoint-url <moto>`, a process of its own: a two-region fleet under load and faults,
//! in-progress providers, failures, drills) and scans the soak's lease table every few hundred
//! milliseconds while it runs, keeping the first item it sees of each [class](class_of). The soak
//! sends no resource with a wait condition, so the generator then runs the same binary as a small
//! fleet of its own ([`crate::fleet::Fleet`]) and sends it a few ([`works`]): a slow work
//! polled to SUCCESS, a failing one, one closed by its resource's Delete, and two (SUCCESS,
//! FAILURE) whose handle answers 503 and then refuses the signal with a 403; and an answer in
//! progress. Records in a state for milliseconds only are held there by a fault on the fleet's
//! wire, as the soak's own faults do: a wait's write is left unanswered once (a poller holding
//! its lease with its poll fields), a signal's PUT answered 503 (committed, undelivered). Items
//! of another format than
//! `--format` are counted and not kept: the soak flips the control item with the generator's own
//! code, which writes today's format whatever binary the fleet runs.
//!
//! Each kept item is written as DynamoDB JSON (what `aws dynamodb get-item` prints; keys
//! sorted) to `<out>/<class>.json`, with `generated.txt` saying how it was made. The directory
//! must not exist: fixtures of a version are generated once and never edited.
//!
//! What an item is (its class, format and shape) is [`records`]'s; DynamoDB JSON is
//! [`dynamodb_json`]'s; the scans are [`scan`]'s and the works [`works`]'s. This file runs them
//! and writes the fixtures.

mod dynamodb_json;
mod records;
mod scan;
mod works;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;

use cfn_once_local::environment::PRIMARY_REGION;
use cfn_once_local::provision;
use scan::{Collected, Scanner, Shared, lock};

pub use dynamodb_json::{base64_decode, base64_encode, item_from_json, item_to_json};
pub use records::{CONTROL_CLASS, CONTROL_PK, Item, class_of, format_of, shape_of};

/// What `cfn-once golden-records` runs.
#[derive(Debug, Clone, clap::Args)]
pub struct GoldenOptions {
    /// The version's release Lambda binary (`.ci/build-rev <rev>` builds it).
    #[arg(long, value_name = "PATH")]
    pub binary: PathBuf,
    /// The record format the version writes: items of any other format are not kept.
    #[arg(long, value_name = "N")]
    pub format: u32,
    /// Where to write the items (`tests/golden/records/v<format>`); must not exist yet.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The revision the binary was built from, for generated.txt.
    #[arg(long, value_name = "REV", default_value = "unknown")]
    pub revision: String,
    /// Use the moto server at this URL instead of starting one.
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// The Python interpreter with moto[server] installed (`make venv` creates it).
    #[arg(long, value_name = "PATH", default_value = ".venv/bin/python")]
    pub python: PathBuf,
    /// The soak's seed; its lease table is `soak-<seed>-leases`.
    #[arg(long, value_name = "N", default_value_t = 45)]
    pub seed: u64,
    /// The soak's minutes of load.
    #[arg(long, value_name = "MINUTES", default_value_t = 2.0)]
    pub minutes: f64,
    /// The soak's requests.
    #[arg(long, value_name = "N", default_value_t = 400)]
    pub requests: usize,
    /// How often the lease table is scanned.
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub interval_ms: u64,
    /// Where the soak and the works' fleet keep their reports and logs.
    #[arg(long, value_name = "DIR", default_value = "target/golden-records")]
    pub work_dir: PathBuf,
}

/// Runs the soak while scanning, then the works, and writes the items. `Ok(false)` when nothing
/// was kept.
pub async fn run(options: &GoldenOptions) -> anyhow::Result<bool> {
    if options.out.exists() {
        anyhow::bail!(
            "{} exists: golden records are generated once and never edited; a new format gets a directory of its own",
            options.out.display()
        );
    }
    if !options.binary.exists() {
        anyhow::bail!("{} does not exist: build it with .ci/build-rev <rev>", options.binary.display());
    }
    let started_ms = SystemClock.now_ms();
    let moto_server;
    let endpoint = match &options.endpoint_url {
        Some(url) => url.clone(),
        None => {
            moto_server = cfn_once_local::moto::MotoServer::start(&options.python)?;
            moto_server.endpoint().to_owned()
        }
    };
    let sdk = provision::sdk_config(&endpoint, PRIMARY_REGION).await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let collected: Shared = Arc::default();

    // The soak, as `cfn-once soak` runs it: a process of its own.
    let program = std::env::current_exe().context("where is cfn-once?")?;
    let text = |path: &Path| path.display().to_string();
    let args = vec![
        "soak".to_owned(),
        format!("--seed={}", options.seed),
        format!("--minutes={}", options.minutes),
        format!("--requests={}", options.requests),
        format!("--binary={}", text(&options.binary)),
        format!("--python={}", text(&options.python)),
        format!("--endpoint-url={endpoint}"),
        format!("--out={}", text(&options.work_dir.join("soak"))),
    ];
    let command = format!("cfn-once {}", args.join(" "));
    let table = format!("soak-{}-leases", options.seed);
    println!("golden-records: scanning {table} every {} ms while `{command}` runs", options.interval_ms);
    let mut child = tokio::process::Command::new(&program)
        .args(&args)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run {}", program.display()))?;
    let scanner = Scanner::start(&client, &table, options.format, options.interval_ms, &collected);
    let status = child.wait().await.context("waiting for the soak")?;
    scanner.finish().await;
    println!("golden-records: the soak ended ({status}); {} classes so far", lock(&collected).kept.len());

    let works = works::run(options, &endpoint, &collected).await.unwrap_or_else(|error| {
        let line = format!("the works did not run: {error:#}");
        eprintln!("golden-records: {line}");
        vec![line]
    });

    let collected = std::mem::take(&mut *lock(&collected));
    let run = Run { started_ms, command, status: status.to_string(), works };
    write(options, &collected, &run)?;
    Ok(!collected.kept.is_empty())
}

/// How the items were made, for generated.txt.
struct Run {
    started_ms: u64,
    command: String,
    status: String,
    works: Vec<String>,
}

/// Writes each kept item and `generated.txt`.
fn write(options: &GoldenOptions, collected: &Collected, run: &Run) -> anyhow::Result<()> {
    let out = &options.out;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    for (class, item) in &collected.kept {
        let path = out.join(format!("{class}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&item_to_json(item))? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut text = String::new();
    let line = |text: &mut String, line: String| {
        text.push_str(&line);
        text.push('\n');
    };
    line(&mut text, "Written by `cfn-once golden-records`; never edited by hand.".to_owned());
    line(&mut text, format!("format: {}", options.format));
    line(&mut text, format!("revision: {}", options.revision));
    line(&mut text, format!("started: {}", cfn_once_core::timestamp::format_ms(run.started_ms)));
    line(&mut text, format!("finished: {}", cfn_once_core::timestamp::format_ms(SystemClock.now_ms())));
    let size = std::fs::metadata(&options.binary).map_or_else(|_| "?".to_owned(), |m| m.len().to_string());
    line(&mut text, format!("binary: {} ({size} bytes)", options.binary.display()));
    line(&mut text, format!("soak: {}", run.command));
    line(&mut text, format!("soak's exit: {}", run.status));
    line(&mut text, format!("scans: {}", collected.scans));
    line(&mut text, String::new());
    line(&mut text, "classes kept (times an item of the class was seen, over all scans):".to_owned());
    for (class, count) in &collected.seen {
        line(&mut text, format!("  {class}: {count}"));
        for other in collected.shapes.get(class).into_iter().flat_map(|(_, others)| others) {
            line(&mut text, format!("    also seen in another shape than the one kept: {other}"));
        }
    }
    if !collected.other_formats.is_empty() {
        line(&mut text, String::new());
        line(&mut text, format!("seen in another format than {}, not kept:", options.format));
        for ((class, format), count) in &collected.other_formats {
            line(&mut text, format!("  {class} of format {format}: {count}"));
        }
    }
    line(&mut text, String::new());
    line(&mut text, "works (resources with wait conditions, sent after the soak):".to_owned());
    for work in &run.works {
        line(&mut text, format!("  {work}"));
    }
    let path = out.join("generated.txt");
    std::fs::write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    print!("{text}");
    println!("golden-records: wrote {} items to {}", collected.kept.len(), out.display());
    Ok(())
}
