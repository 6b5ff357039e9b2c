//! The `cfn-once` binary: the Lambda function, and the local tools around it.
//!
//! Started by Lambda (or with `cfn-once lambda`) it sets up JSON logging, reads the
//! configuration once, builds the SDK clients once and serves SQS batches until Lambda stops it.

use clap::{Parser, Subcommand};
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
    /// Serve SQS batches as the AWS Lambda function (what runs when no command is given).
    /// Configuration comes from the environment: AWS_REGION, CFN_ONCE_TABLE,
    /// CFN_ONCE_TOPIC_ARNS and the optional CFN_ONCE_* settings described in the README.
    Lambda,
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Lambda) {
        Command::Lambda => run_lambda().await,
    }
}

async fn run_lambda() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = Config::from_env()?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let app = App::from_config(&config, &sdk)?;
    let app = &app;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| cfn_once::lambda::handle(app, event))).await
}
