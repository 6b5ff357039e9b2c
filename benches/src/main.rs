//! `cfn-once-bench`: cfn-once side by side with the Python way, measured the same way.
//!
//! Both functions run as Lambda runs them, polling a fake Lambda Runtime API
//! (`cfn_once_tests::FakeRuntime`) that hands each process one invocation with one SQS record,
//! then warm batches of ten, every record a distinct SNS-wrapped CloudFormation request with its
//! own presigned ResponseURL, against the same moto. Every AWS call and every ResponseURL PUT is
//! HTTPS, as in production, to a TLS front (`cfn_once_tests::TlsFront`, a CA of its own per run,
//! which each function trusts through `SSL_CERT_FILE` or `AWS_CA_BUNDLE` instead of its
//! production roots), which relays plaintext to a counting proxy before moto.
//! The peer (`benches/python/handler.py`) is crhelper for the response and Powertools
//! idempotency on DynamoDB for exactly-once, run by `awslambdaric`. Runs are interleaved
//! (R P, P R, ...), every answer is checked in S3, and each figure is reported as min, median and
//! max per side and the median of the paired ratios (Python ÷ Rust). See `benches/README.md`.

mod measure;
mod report;
mod setup;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::measure::{Latencies, Mode, Side, run_once};
use crate::report::Report;
use crate::setup::Bench;

/// Where the results go.
const DEFAULT_OUT: &str = "BENCHMARKS.md";

#[derive(Debug, Parser)]
#[command(name = "cfn-once-bench", about = "cfn-once side by side with crhelper + Powertools idempotency")]
struct Args {
    /// Interleaved pairs of runs (one Rust, one Python each).
    #[arg(long, default_value_t = 10)]
    pairs: usize,
    /// Warm batches of ten records per run, after the first invocation.
    #[arg(long, default_value_t = 5)]
    warm_batches: usize,
    /// One pair per mode, one warm batch, no BENCHMARKS.md: proves the harness works (CI).
    #[arg(long)]
    quick: bool,
    /// The Rust function (`cargo build --release --bin cfn-once-lambda`).
    #[arg(long, value_name = "PATH", default_value = "target/release/cfn-once-lambda")]
    rust_binary: PathBuf,
    /// The peer's Python, with benches/python/requirements.txt installed.
    #[arg(long, value_name = "PATH", default_value = ".venv-bench/bin/python")]
    peer_python: PathBuf,
    /// An A/B of two Rust builds: this build runs in the peer's place, with the Rust function's
    /// environment, and the "Python" column and the ratios are its (ratio > 1: it is the slower).
    /// Nothing is written unless --out names a file other than BENCHMARKS.md.
    #[arg(long, value_name = "PATH")]
    against: Option<PathBuf>,
    /// The Python with moto[server] (`make venv`).
    #[arg(long, value_name = "PATH", default_value = ".venv/bin/python")]
    moto_python: PathBuf,
    /// Where to write the results (not in quick mode).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_OUT)]
    out: PathBuf,
    /// criterion's output for the hot path (`cargo bench --bench hot_path`), put in BENCHMARKS.md.
    #[arg(long, value_name = "PATH")]
    microbenchmarks: Option<PathBuf>,
    /// Which certificate store the Rust function parses in production: `compiled` (today's
    /// function: roots compiled in, so it gets the run's CA alone) or `system` (a function built
    /// before that, which read the system store: it gets that store plus the run's CA).
    #[arg(long, value_name = "STORE", default_value = "compiled", value_parser = ["compiled", "system"])]
    rust_roots: String,
    /// The modes to run, each a full set of pairs: `tls` (HTTPS, no latency added: the
    /// functions' own costs), `latency` (HTTPS and each call class's round trip added at the
    /// proxy: time to answer), `plain` (the AWS calls in plain HTTP, the response PUT still
    /// HTTPS: the costs without TLS on the AWS calls).
    #[arg(long, value_name = "MODES", value_delimiter = ',', default_value = "tls,latency,plain")]
    modes: Vec<String>,
    /// The latency mode's round trip per call class, in ms: `dynamodb=20,s3=30,sqs=10` (any
    /// subset; see benches/README.md for where the defaults come from).
    #[arg(long, value_name = "CLASS=MS,...", default_value = "")]
    latency: String,
    /// How the results were produced, for BENCHMARKS.md.
    #[arg(long, value_name = "TEXT", default_value = "make bench")]
    command: String,
    /// Print each run's first invocation call by call: when each call reached the proxy, the
    /// round trip added there, moto's time, when it was answered (ms from the hand-out).
    #[arg(long)]
    timeline: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = Args::parse();
    if args.quick {
        args.pairs = 1;
        args.warm_batches = 1;
    }
    let latencies = match Latencies::parse(&args.latency) {
        Ok(latencies) => latencies,
        Err(error) => {
            eprintln!("cfn-once-bench: --latency: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut modes = Vec::new();
    for mode in &args.modes {
        modes.push(match mode.as_str() {
            "tls" => Mode::Tls,
            "latency" => Mode::Latency(latencies),
            "plain" => Mode::Plain,
            other => {
                eprintln!("cfn-once-bench: --modes: {other:?} is not tls, latency or plain");
                return ExitCode::FAILURE;
            }
        });
    }
    match run(&args, &modes).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cfn-once-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args, modes: &[Mode]) -> anyhow::Result<()> {
    let bench = Bench::start(
        &args.moto_python,
        &args.rust_binary,
        &args.peer_python,
        args.against.as_deref(),
        args.rust_roots == "system",
    )
    .await?;
    if let Some(against) = &args.against {
        eprintln!("A/B: {} in the peer's column", against.display());
    }
    eprintln!(
        "benchmarking {} pairs ({} warm batches of 10 each) on {}; functions log to {}",
        args.pairs,
        args.warm_batches,
        bench.moto_endpoint(),
        bench.log_dir().display()
    );
    let mut reports = Vec::new();
    for mode in modes {
        eprintln!("mode {}", mode.name());
        let mut report = Report::new(mode.clone());
        for pair in 0..args.pairs {
            let order = if pair % 2 == 0 { [Side::Rust, Side::Python] } else { [Side::Python, Side::Rust] };
            for side in order {
                let sample = run_once(&bench, mode, side, pair, args.warm_batches).await?;
                eprintln!("  pair {}/{} {}: {}", pair + 1, args.pairs, side.name(), sample.one_line());
                if args.timeline {
                    for line in &sample.first_timeline {
                        eprintln!("    {line}");
                    }
                }
                report.add(side, sample);
            }
        }
        println!("{}\n", report.table());
        reports.push(report);
    }
    // An A/B never replaces BENCHMARKS.md: it writes only where --out says.
    let ab_without_out = args.against.is_some() && args.out == std::path::Path::new(DEFAULT_OUT);
    if ab_without_out && !args.quick {
        eprintln!("A/B: nothing written (give --out <file> to keep the report)");
    }
    if !args.quick && !ab_without_out {
        let micro = match &args.microbenchmarks {
            Some(path) => report::criterion_times(&std::fs::read_to_string(path)?),
            None => Vec::new(),
        };
        let document = report::markdown(
            &reports,
            &bench.environment().await,
            &args.command,
            args.pairs,
            args.warm_batches,
            &micro,
        );
        std::fs::write(&args.out, document)?;
        eprintln!("wrote {}", args.out.display());
    }
    Ok(())
}
