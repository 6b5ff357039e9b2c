//! The `cfn-once-dev` command line: the tools for trying cfn-once (the function is the separate,
//! lean `cfn-once-lambda` binary; the operator's commands are `cfn-once`'s, crate cfn-once-ops,
//! which runs these as `cfn-once <command>` too). `local` and `demo` run the same handler on
//! local AWS and exercise failover; `play` plays a template's custom resources through a stack's
//! life; `soak` runs the Lambda binary itself as a two-region fleet under load and faults;
//! `golden-records` keeps the lease table's items a version of it wrote.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use cfn_once::providers::dynamodb_item::DYNAMODB_ITEM_TYPE;
use cfn_once_core::echo::ECHO_TYPE;
use cfn_once_core::vocabulary::Role;
use cfn_once_local::environment::{EnvironmentOptions, LocalEnvironment};
use cfn_once_local::functions::LocalFunctions;
use cfn_once_local::functions_file::FunctionsFile;
use cfn_once_local::moto::{MotoServer, PYTHON_VARIABLE, check_python, choose_python};
use cfn_once_local::pair::{RegionPair, printing_observer};
use cfn_once_local::settings::LOCAL_SETTINGS;
use cfn_once_local::signals::{self, PrimarySignals};
use cfn_once_local::tls_front::TlsFront;

use crate::cli::{Cli, Command, DemoArgs, LocalArgs, MotoArgs};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Local(args) => run_local(args).await,
        Command::Demo(args) => run_demo(args).await,
        Command::Soak(options) => run_soak(*options).await,
        Command::GoldenRecords(options) => run_golden_records(*options).await,
        Command::Play(args) => run_play(*args).await,
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("cfn-once-dev: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The Python interpreter for moto and the functions, absolute, checked to import `modules`
/// (moto when starting one, awslambdaric when serving functions); see `MotoArgs::python` for the
/// order it is looked for in. `None` when nothing needs Python.
fn python(args: &MotoArgs, modules: &[&str]) -> anyhow::Result<Option<PathBuf>> {
    if modules.is_empty() {
        return Ok(None);
    }
    let variable = std::env::var_os(PYTHON_VARIABLE);
    let working_dir = std::env::current_dir().context("cannot read the working directory")?;
    let exe = std::env::current_exe().ok();
    let choice = choose_python(args.python.as_deref(), variable.as_deref(), &working_dir, exe.as_deref());
    let path = check_python(&choice, modules)?;
    println!("cfn-once: Python {} ({})", path.display(), choice.origin.describe());
    Ok(Some(path))
}

/// A moto at `--endpoint-url`, or a new one run by `python` (kept alive by the returned handle).
fn moto(args: &MotoArgs, python: Option<&std::path::Path>) -> anyhow::Result<(Option<MotoServer>, String)> {
    match (&args.endpoint_url, python) {
        (Some(endpoint), _) => Ok((None, endpoint.clone())),
        (None, None) => anyhow::bail!("no Python interpreter was chosen to start moto with"),
        (None, Some(python)) => {
            let server = MotoServer::start(python)?;
            let endpoint = server.endpoint().to_owned();
            Ok((Some(server), endpoint))
        }
    }
}

async fn run_local(args: LocalArgs) -> anyhow::Result<bool> {
    cfn_once_ops::aws::init_terminal_logging();
    // A mistake in the functions file, or a Python without moto, stops everything before
    // anything starts.
    let functions_file = args.functions.as_deref().map(FunctionsFile::read).transpose()?;
    let modules =
        [args.moto.endpoint_url.is_none().then_some("moto"), functions_file.is_some().then_some("awslambdaric")];
    let python = python(&args.moto, &modules.into_iter().flatten().collect::<Vec<_>>())?;
    let (_moto, endpoint) = moto(&args.moto, python.as_deref())?;
    let options = EnvironmentOptions::local(
        format!("cfn-once-local-{:06x}", cfn_once::system_clock::random_seed() & 0xff_ffff),
        args.moto.secondary_delay_s,
    );
    // S3 over HTTPS with a CA of this environment's own, its PEM beside the env file.
    let state = args.env_file.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(state).with_context(|| format!("cannot create {}", state.display()))?;
    let front = TlsFront::start(&endpoint, state)?;
    let mut env = LocalEnvironment::provision(&endpoint, &front, &options).await?;
    let logs = std::path::absolute(".local/functions")?;
    let builds = std::path::absolute(".local/build")?;
    let functions = match (&functions_file, &args.functions, &python) {
        (Some(file), Some(path), Some(python)) => {
            println!("cfn-once local: building the functions of {}", path.display());
            let progress = |line: &str| println!("  {line}");
            Some(LocalFunctions::start(&env, python, file, &logs, &builds, &options.name, &progress).await?)
        }
        _ => None,
    };
    if let Some(functions) = &functions {
        env.file.answer_buckets = functions.answer_buckets();
        env.file.routes = functions.routes();
    }
    let head_start_s = args.head_start_s.map(|seconds| seconds.to_string());
    let mut settings = LOCAL_SETTINGS.to_vec();
    settings.extend(head_start_s.as_deref().map(|seconds| ("CFN_ONCE_HEAD_START_S", seconds)));
    let mut pair = RegionPair::start_serving(
        &env,
        &settings,
        |role| Some(printing_observer(env.region(role), role)),
        functions.as_ref(),
    )
    .await?;
    // Listening before the pid is published: a signal's default action would end the process.
    let mut signals = PrimarySignals::listen()?;
    env.file.local_pid = Some(std::process::id());
    env.file.write(&args.env_file)?;
    let file = &env.file;
    println!("cfn-once local: two regions on {endpoint}");
    for (region, topic) in &file.customer_topics {
        println!("  customer  {region:<9}  ServiceToken topic {topic}");
        for dlq in file.delivery_dlqs.iter().filter(|dlq| dlq.region == *region) {
            println!("            {region:<9}  what SNS cannot deliver to the {} queue: {}", dlq.role, dlq.url);
        }
    }
    println!("  primary   {}  queue {}", file.primary_region, file.queues.primary);
    println!(
        "  secondary {}  queue {} (delay {} s)",
        file.secondary_region, file.queues.secondary, env.secondary_delay_s
    );
    println!("  lease table {}, response bucket {}", file.table_name, file.response_bucket);
    println!("  built-in providers in each region: {ECHO_TYPE}, {DYNAMODB_ITEM_TYPE} (item table {})", file.item_table);
    match (&functions_file, &args.functions) {
        (Some(_), Some(path)) => println!("  functions of {} in each region:", path.display()),
        _ => println!("  no --functions: serving the built-in providers only"),
    }
    for route in functions_file.iter().flat_map(|file| &file.routes) {
        for function in std::iter::once(&route.on_event).chain(&route.is_complete) {
            let variables = function.environment.keys().cloned().collect::<Vec<_>>().join(" ");
            println!(
                "    {} {}: {} = {} in {} ({} s, {} MB{}{})",
                route.resource_type,
                function.kind.key(),
                function.name,
                function.handler,
                function.folder.display(),
                function.timeout_s,
                function.memory_mb,
                if variables.is_empty() { "" } else { ", variables " },
                variables
            );
        }
    }
    for (region, bucket) in &file.answer_buckets {
        println!("  answer bucket {bucket} ({region})");
    }
    if functions.is_some() {
        println!("  function logs in {}", logs.display());
    }
    println!(
        "  S3 over HTTPS at {} (answer URLs, ResponseURLs), trusting the CA in {}",
        file.https_endpoint_url,
        file.ca_file.display()
    );
    println!(
        "  environment written to {}; try `cfn-once drill --env {}`",
        args.env_file.display(),
        args.env_file.display()
    );
    println!(
        "  process {}: `kill -USR1 {0}` crashes the primary region, `kill -USR2 {0}` starts it again",
        std::process::id()
    );
    println!("handling requests; Ctrl-C to stop");
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            request = signals.next() => {
                let fresh = || {
                    let observer = printing_observer(&file.primary_region, Role::Primary);
                    RegionPair::serving_worker(&env, Role::Primary, &LOCAL_SETTINGS, Some(observer), functions.as_ref())
                };
                signals::apply(request, &mut pair, &file.primary_region, fresh).await;
            }
        }
    }
    println!("stopping");
    pair.stop().await;
    let _ = std::fs::remove_file(&args.env_file);
    Ok(true)
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => return drop(interrupt.await),
        };
        tokio::select! {
            _ = interrupt => {},
            _ = terminate.recv() => {},
        }
    }
    #[cfg(not(unix))]
    drop(interrupt.await);
}

async fn run_demo(args: DemoArgs) -> anyhow::Result<bool> {
    cfn_once_ops::aws::init_terminal_logging();
    let modules = if args.moto.endpoint_url.is_some() { vec!["awslambdaric"] } else { vec!["moto", "awslambdaric"] };
    let python = python(&args.moto, &modules)?.context("the demo's functions need a Python interpreter")?;
    let options = cfn_once_local::demo::DemoOptions {
        endpoint_url: args.moto.endpoint_url,
        python,
        events_dir: args.events,
        secondary_delay_s: args.moto.secondary_delay_s,
    };
    cfn_once_local::demo::run(options).await
}

async fn run_soak(options: cfn_once_soak::SoakOptions) -> anyhow::Result<bool> {
    cfn_once_ops::aws::init_terminal_logging();
    Ok(cfn_once_soak::run(&options).await?.passed)
}

async fn run_play(args: cfn_once_play::cli::PlayArgs) -> anyhow::Result<bool> {
    cfn_once_ops::aws::init_terminal_logging();
    cfn_once_play::cli::run(args).await
}

async fn run_golden_records(options: cfn_once_soak::golden::GoldenOptions) -> anyhow::Result<bool> {
    cfn_once_ops::aws::init_terminal_logging();
    cfn_once_soak::golden::run(&options).await
}
