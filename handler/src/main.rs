//! The `cfn-once` binary: the Lambda function, and the local tools around it.
//!
//! Started by Lambda (or with `cfn-once lambda`) it sets up JSON logging, reads the
//! configuration once, builds the SDK clients once and serves SQS batches until Lambda stops it.
//! `cfn-once demo` runs the same handler on local AWS.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use lambda_runtime::{LambdaEvent, service_fn};

use cfn_once::app::App;
use cfn_once::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "cfn-once",
    version,
    about = "CloudFormation custom resources answered exactly once, from whichever of two regions is alive"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve SQS batches as the AWS Lambda function (the default)
    ///
    /// Configuration comes from the environment: AWS_REGION, CFN_ONCE_TABLE,
    /// CFN_ONCE_TOPIC_ARNS and the optional CFN_ONCE_* settings described in the README. Logs
    /// are JSON lines on stdout.
    Lambda,
    /// Run cfn-once on local AWS (moto) with the sample requests in events/
    ///
    /// Starts moto (unless --endpoint-url is given), provisions a region (topic, queue + DLQ,
    /// lease table, response bucket), serves it with the handler behind a local event source
    /// mapping, sends the sample requests as CloudFormation would (published to the topic, with
    /// presigned ResponseURLs) and shows who answered what. Exits 0 only if every request was
    /// answered exactly once.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Use the moto server at this URL instead of starting one.
    #[arg(long, value_name = "URL")]
    endpoint_url: Option<String>,
    /// The Python interpreter with moto[server] installed (`make venv` creates it).
    #[arg(long, value_name = "PATH", default_value = ".venv/bin/python")]
    python: PathBuf,
    /// Where the sample requests are.
    #[arg(long, value_name = "DIR", default_value = "events")]
    events: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Lambda) {
        Command::Lambda => run_lambda().await,
        Command::Demo(args) => run_demo(args).await,
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("cfn-once: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run_demo(args: DemoArgs) -> Result<ExitCode, lambda_runtime::Error> {
    // Only problems reach the terminal; the demo prints its own progress and table.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::ERROR)
        .with_target(false)
        .with_writer(std::io::stderr)
        .init();
    let options = cfn_once::local::demo::DemoOptions {
        endpoint_url: args.endpoint_url,
        python: args.python,
        events_dir: args.events,
    };
    let passed = cfn_once::local::demo::run(options).await.map_err(|error| format!("demo failed: {error:#}"))?;
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn run_lambda() -> Result<ExitCode, lambda_runtime::Error> {
    cfn_once::logging::init_json(cfn_once::config::log_level());
    let config = Config::from_env().inspect_err(|error| tracing::error!(%error, "cannot start"))?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let app = App::from_config(&config, &sdk)?;
    let app = &app;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| cfn_once::lambda::handle(app, event))).await?;
    Ok(ExitCode::SUCCESS)
}
