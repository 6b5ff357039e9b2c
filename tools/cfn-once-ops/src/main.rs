//! `cfn-once`: the operator's commands, on the local environment (`--env .local/env.json`) or on
//! deployed stacks. `deploy` writes the SAM configuration from a few facts and runs the stacks in
//! order; `check` says whether they are wired as the templates intend. `inspect`, `stuck` and `redrive` read what the protocol writes; `drill` fails
//! over to the secondary region and back through the real path. Any other command is
//! `cfn-once-dev`'s (local, demo, play, soak, golden-records), run from beside this binary or
//! the PATH, as git and cargo run their external subcommands.

mod cli;
mod commands;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use cfn_once::config::ArcEndpoint;
use cfn_once_ops::drill::{DrillControl, DrillOptions, DrillTarget};
use cfn_once_ops::env_file::EnvFile;
use cfn_once_ops::inspect::InspectOptions;
use cfn_once_ops::redrive::RedriveOptions;
use cfn_once_ops::stuck::StuckOptions;

use crate::cli::{Cli, Command, DrillArgs, InspectArgs, RedriveArgs, StuckArgs};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Deploy(args) => commands::run_deploy(&args),
        Command::Check(args) => {
            cfn_once_ops::aws::init_terminal_logging();
            commands::run_check(&args).await
        }
        Command::Drill(args) => run_drill(*args).await,
        Command::Inspect(args) => run_inspect(args).await,
        Command::Stuck(args) => run_stuck(args).await,
        Command::Redrive(args) => run_redrive(args).await,
        Command::Dev(args) => return run_dev(&args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("cfn-once: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The commands of `cfn-once-dev`, the tools for trying cfn-once locally.
const DEV_COMMANDS: [&str; 5] = ["local", "demo", "play", "soak", "golden-records"];

/// Runs `cfn-once-dev` with `args` (its command first): the one beside this binary, else the
/// one on the PATH. On Unix this process becomes it (as cargo runs its external commands), so
/// signals (Ctrl-C, `cfn-once local`'s SIGUSR1 and SIGUSR2) and the exit status are its own.
fn run_dev(args: &[OsString]) -> ExitCode {
    let wanted = args.first().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    if !DEV_COMMANDS.contains(&wanted.as_str()) {
        eprintln!(
            "cfn-once: no command {wanted:?}: the operator's are deploy, check, inspect, stuck, redrive and drill, and cfn-once-dev's \
             (run from here) are {}; see `cfn-once --help`",
            DEV_COMMANDS.join(", ")
        );
        return ExitCode::from(2);
    }
    let name = format!("cfn-once-dev{}", std::env::consts::EXE_SUFFIX);
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join(&name)));
    let program = beside.filter(|path| path.is_file()).unwrap_or_else(|| name.clone().into());
    let mut command = std::process::Command::new(&program);
    command.args(args);
    #[cfg(unix)]
    let error = std::os::unix::process::CommandExt::exec(&mut command);
    #[cfg(not(unix))]
    let error = match command.status() {
        Ok(status) => return ExitCode::from(status.code().and_then(|code| u8::try_from(code).ok()).unwrap_or(1)),
        Err(error) => error,
    };
    eprintln!(
        "cfn-once: {wanted:?} is not an operator's command (deploy, check, inspect, stuck, redrive, drill), and cfn-once-dev, \
         which runs the others (local, demo, play, soak, golden-records), could not be run: {error}; build it \
         beside this binary with `cargo build -p cfn-once-dev` (`make local` does)"
    );
    ExitCode::FAILURE
}

async fn run_drill(args: DrillArgs) -> anyhow::Result<bool> {
    cfn_once_ops::aws::init_terminal_logging();
    let (target, default_settle_ms) = drill_target(&args)?;
    let options = DrillOptions {
        settle_ms: args.settle_ms.unwrap_or(default_settle_ms),
        answer_timeout_ms: args.timeout_s * 1000,
    };
    let quiet = args.json;
    let report = cfn_once_ops::drill::run(&target, options, |line| {
        if !quiet {
            eprintln!(".. {line}");
        }
    })
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.render());
    }
    Ok(report.passed)
}

async fn run_inspect(args: InspectArgs) -> anyhow::Result<bool> {
    cfn_once_ops::aws::init_terminal_logging();
    let target = args.target.target().await?;
    let options = InspectOptions {
        stack_id: args.stack_id,
        request_id: args.request_id,
        logical_id: args.logical_id,
        limit: args.limit,
        dead_letters: !args.no_dlq,
    };
    let report = cfn_once_ops::inspect::inspect(&target, &options).await?;
    if args.target.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.render());
    }
    Ok(true)
}

async fn run_stuck(args: StuckArgs) -> anyhow::Result<bool> {
    cfn_once_ops::aws::init_terminal_logging();
    let target = args.target.target().await?;
    let options = StuckOptions {
        older_than_ms: args.older_than_s * 1000,
        undelivered_ms: args.undelivered_s * 1000,
        poll_overdue_ms: args.poll_overdue_s * 1000,
    };
    let stuck = cfn_once_ops::stuck::stuck(&target, options).await?;
    if args.target.json {
        println!("{}", serde_json::to_string_pretty(&stuck)?);
    } else {
        println!("{}", cfn_once_ops::stuck::render(&stuck));
    }
    Ok(stuck.is_empty())
}

async fn run_redrive(args: RedriveArgs) -> anyhow::Result<bool> {
    cfn_once_ops::aws::init_terminal_logging();
    let target = args.target.target().await?;
    let options =
        RedriveOptions { dry_run: args.dry_run, include_undeliverable: args.include_undeliverable, max: args.max };
    let report = cfn_once_ops::redrive::redrive(&target, options).await?;
    if args.target.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.render());
    }
    Ok(true)
}

fn drill_target(args: &DrillArgs) -> anyhow::Result<(DrillTarget, u64)> {
    let (mut target, settle_ms) = match &args.env {
        Some(path) => (DrillTarget::from_env_file(&EnvFile::read(path)?), cfn_once_ops::drill::LOCAL_SETTLE_MS),
        None => {
            let required = |value: &Option<String>, flag: &str| {
                value.clone().ok_or_else(|| anyhow::anyhow!("{flag} is required without --env"))
            };
            let customer_region = required(&args.customer_region, "--customer-region")?;
            let primary_region = required(&args.primary_region, "--primary-region")?;
            let target = DrillTarget {
                topic_arn: required(&args.topic_arn, "--topic-arn")?,
                secondary_region: required(&args.secondary_region, "--secondary-region")?,
                table_name: required(&args.table, "--table")?,
                table_region: args.table_region.clone().unwrap_or_else(|| primary_region.clone()),
                response_bucket: required(&args.response_bucket, "--response-bucket")?,
                bucket_region: args.bucket_region.clone().unwrap_or_else(|| customer_region.clone()),
                endpoint_url: args.endpoint_url.clone(),
                control: DrillControl::Table,
                customer_region,
                primary_region,
            };
            (target, cfn_once::config::CONTROL_CACHE_MS_DEFAULT + 1_000)
        }
    };
    target.control = match args.control.as_str() {
        "table" => DrillControl::Table,
        "arc" => DrillControl::Arc {
            endpoints: ArcEndpoint::parse_list(&args.arc_endpoints).map_err(anyhow::Error::msg)?,
            primary_routing_control_arn: args
                .primary_routing_control
                .clone()
                .ok_or_else(|| anyhow::anyhow!("--primary-routing-control is required with --control arc"))?,
            secondary_routing_control_arn: args
                .secondary_routing_control
                .clone()
                .ok_or_else(|| anyhow::anyhow!("--secondary-routing-control is required with --control arc"))?,
        },
        other => anyhow::bail!("--control is {other:?}: expected table or arc"),
    };
    Ok((target, settle_ms))
}
