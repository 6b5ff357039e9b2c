//! The `cfn-once-dev` command line as clap reads it: each subcommand and its flags. Their doc
//! comments are the `--help` texts, so they are written for the person typing the command;
//! `main.rs` dispatches what is parsed here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cfn-once-dev",
    version = cfn_once_core::build::DESCRIPTION,
    about = "cfn-once's tools for trying it locally: both regions on moto, the demo, the player, the soak",
    long_about = "cfn-once's tools for trying it locally: both regions on moto (local), the demo, the stack \
player (play), the soak and the golden records. The operator's commands (inspect, stuck, redrive, drill) are \
the cfn-once binary's (crate cfn-once-ops), which also runs each of these as `cfn-once <command>` when \
cfn-once-dev is beside it."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run both regions on local AWS (moto) until stopped, printing a line per request handled
    ///
    /// Provisions the ServiceToken topic (customer region us-east-2), a queue and DLQ in the
    /// primary (us-east-1) and the secondary (us-west-2, delayed) region, the lease table, a
    /// response bucket and an answer bucket per region; runs one handler per region behind a
    /// local event source mapping (up to 10 batches at once, as the template's
    /// MaximumConcurrency), each serving the built-in providers (Custom::Echo,
    /// Custom::DynamoDBItem) and, with --functions, the resource types of that file from its own
    /// region's copies of the Python functions there (under awslambdaric behind a local Lambda
    /// Invoke API, each folder's requirements.txt installed into a build copy under
    /// .local/build); and writes the environment to --env-file so tests, `cfn-once drill` or
    /// the AWS CLI can send events. The functions' logs go to .local/functions. S3 is also
    /// served over HTTPS (https_endpoint_url in the env file) with a CA generated at start,
    /// whose certificate is written beside --env-file (ca_file): the answer URLs the functions
    /// PUT to are https:// URLs there, and the functions trust the CA through SSL_CERT_FILE,
    /// REQUESTS_CA_BUNDLE and AWS_CA_BUNDLE. Runs from any folder: .local/ is made in the
    /// working directory. The env file records this process's id (local_pid): SIGUSR1 crashes
    /// the primary region's worker (the secondary takes over, as in an outage), SIGUSR2 starts
    /// it again. Stop it with Ctrl-C.
    Local(LocalArgs),
    /// Run cfn-once on local AWS with the sample requests in events/, a failover drill and a
    /// primary outage
    ///
    /// Starts moto (unless --endpoint-url is given), provisions both regions, sends the sample
    /// requests as CloudFormation would (published to the topic, with presigned ResponseURLs),
    /// shows which region answered each and how fast (and each poll of the long-running one,
    /// create-echo-long.json), runs a drill, stops the primary's worker
    /// and times the secondary's takeover. Beside all that runs a resource with a wait condition
    /// (create-long-work.json): answered at once, its work outlives its 60 s ServiceTimeout and
    /// is signalled to the wait condition's handle; the demo shows when the answer and the
    /// signal came, from which region, under which fence, and how often each was PUT. Exits 0
    /// only if every request was answered exactly once, the long work was signalled once after
    /// its ServiceTimeout, and the DLQs are empty.
    Demo(DemoArgs),
    /// Run the Lambda binary as a fleet in both regions under load and faults, and check that
    /// every request was answered once, in time
    ///
    /// Starts moto and, per handler region, a local Lambda service running --binary (in the secondary:
    /// --secondary-binary, if given) as real processes under a local Runtime API (at most
    /// MaximumConcurrency at once, reused while warm, replaced when they die), fed by an event source
    /// mapping with the template's batch size; queues, function and mapping parameters come from
    /// infra/regional.yaml. Plays many stacks deploying at once (Echo fast, slow and in progress;
    /// DynamoDBItem; invalid and panicking resources; Updates and Deletes in CloudFormation's order;
    /// duplicates; retried deployments reusing a RequestId) while a seeded schedule kills processes,
    /// takes the primary region down, flips the active region and injects wire faults. Then reads every
    /// version of every response object, the item table, the DLQs, the lease records and the processes'
    /// logs, and writes soak-report.md and a picture to --out. Exits 1 on any lost, conflicting, late
    /// or wrong answer or any other failed check.
    Soak(Box<cfn_once_soak::SoakOptions>),
    /// Keep the lease table's items as a version of the function wrote them: the golden records
    ///
    /// Starts moto (unless --endpoint-url is given), runs a soak of --binary (a version's release
    /// cfn-once-lambda) as a process of its own, and scans its lease table every --interval-ms
    /// while it runs, keeping the first item of each class (answer or work record, state, poll
    /// fields, committed status, delivered, unsent; the control item) whose format is --format.
    /// Then runs the binary as a small fleet of its own and sends it resources with wait
    /// conditions, for the works' records the soak never makes. Writes each item as DynamoDB
    /// JSON to --out/<class>.json, and generated.txt; refuses an --out that exists. `make
    /// golden-records REV=<rev> FORMAT=<n>` builds the binary and runs it.
    GoldenRecords(Box<cfn_once_soak::golden::GoldenOptions>),
    /// Play a template's custom resources through a stack's whole life on the local
    /// environment: create, each --update, delete
    ///
    /// Against the environment `cfn-once local` (`make local`) serves (--env). Reads every
    /// template first (YAML with short-form tags, or JSON) and refuses, before anything is
    /// sent, whatever it does not play, naming the construct, the file and the line: it plays
    /// Parameters (SSM parameter types take the value given), Rules, Mappings, Conditions, the
    /// pseudo parameters, Ref, Fn::GetAtt, Fn::Sub, Fn::Join, Fn::Select, Fn::Split, Fn::If,
    /// Fn::FindInMap, Fn::Base64, Fn::Cidr, Fn::GetAZs, Fn::ImportValue (--import),
    /// Fn::Equals/And/Or/Not, DependsOn, DeletionPolicy, UpdateReplacePolicy and Outputs; `cdk
    /// synth` output plays unedited. Custom resources are sent through the ServiceToken
    /// topic as CloudFormation sends them, in CloudFormation's order and by its rules: parallel
    /// where independent, an Update only when resolved properties changed, a replacement's old
    /// id deleted in the cleanup phase, rollbacks of a failed create or update, a delete in
    /// reverse order, Retain sending nothing, each request's ServiceTimeout; an update
    /// CloudFormation would refuse is refused. Nested stacks (AWS::CloudFormation::Stack whose
    /// TemplateURL is a local file or a CDK asset) are played as stacks of their own. Wait condition
    /// handles and wait conditions are played; other types are not provisioned (their Ref is a
    /// made-up name; Fn::GetAtt of them needs --stub). Prints the stack events as they happen,
    /// then each operation's status and Outputs and each resource's requests with the region
    /// and fence that answered. Exits 0 only if every operation ended *_COMPLETE without a
    /// rollback. Details: docs/play.md.
    Play(Box<cfn_once_play::cli::PlayArgs>),
}

#[derive(Debug, Args)]
pub(crate) struct MotoArgs {
    /// Use the moto server at this URL instead of starting one.
    #[arg(long, value_name = "URL")]
    pub(crate) endpoint_url: Option<String>,
    /// The Python interpreter with moto[server] (and awslambdaric, for functions) installed.
    /// By default, the first of: $CFN_ONCE_PYTHON; .venv/bin/python in the working directory;
    /// the .venv/bin/python of the cfn-once checkout this binary was built in (`make venv`
    /// there creates it); python3 on the PATH. Checked before anything starts.
    #[arg(long, value_name = "PATH")]
    pub(crate) python: Option<PathBuf>,
    /// The secondary queue's DelaySeconds: how long the primary has before the secondary acts.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub(crate) secondary_delay_s: u32,
}

#[derive(Debug, Args)]
pub(crate) struct LocalArgs {
    #[command(flatten)]
    pub(crate) moto: MotoArgs,
    /// Where to write the environment's description; the local CA's certificate goes beside it.
    #[arg(long, value_name = "PATH", default_value = ".local/env.json")]
    pub(crate) env_file: PathBuf,
    /// The functions file: each Custom:: type to its functions by kind (on-event, is-complete,
    /// cfn-response), each with its folder, handler, environment, timeout-s and memory-mb (see
    /// docs/functions.md, "Bring your functions"); checked before anything starts. Without it, only
    /// the built-in providers are served: Custom::Echo and Custom::DynamoDBItem (`make local`
    /// passes the examples' file). The functions run with --python. Each region's handler gets
    /// invocations long enough to wait for its longest function's whole timeout-s, 42 s more
    /// with the defaults (at least 60 s), so no function is ever cut off and run again.
    #[arg(long, value_name = "FILE")]
    pub(crate) functions: Option<PathBuf>,
    /// The longest head start the secondary leaves a request nobody started to the primary
    /// (CFN_ONCE_HEAD_START_S; a request with less than five times this gets a fifth of its
    /// ServiceTimeout). Default: --secondary-delay-s, so a failover shows within seconds;
    /// `--head-start-s 60` plays what infra/regional.yaml deploys.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(0..=900))]
    pub(crate) head_start_s: Option<u32>,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    #[command(flatten)]
    pub(crate) moto: MotoArgs,
    /// Where the sample requests are.
    #[arg(long, value_name = "DIR", default_value = "events")]
    pub(crate) events: PathBuf,
}
