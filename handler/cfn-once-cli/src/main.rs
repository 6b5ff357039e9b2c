//! The `cfn-once` command line: the tools around the Lambda function (which is the separate,
//! lean `cfn-once-lambda` binary). `cfn-once local`, `cfn-once demo` and `cfn-once drill` run the
//! same handler on local AWS and exercise failover; the drill also runs against deployed stacks.
//! `cfn-once inspect`, `stuck` and `redrive` are the operator's tools, local or deployed.
//! `cfn-once soak` runs the Lambda binary itself as a two-region fleet under load and faults;
//! `cfn-once golden-records` keeps the lease table's items a version of it wrote.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use cfn_once::config::ArcEndpoint;
use cfn_once::providers::dynamodb_item::DYNAMODB_ITEM_TYPE;
use cfn_once_cli::local::control::{self, PrimarySignals};
use cfn_once_cli::local::drill::{DrillControl, DrillOptions, DrillTarget};
use cfn_once_cli::local::environment::{EnvFile, EnvironmentOptions, LocalEnvironment};
use cfn_once_cli::local::functions::LocalFunctions;
use cfn_once_cli::local::functions_file::FunctionsFile;
use cfn_once_cli::local::moto::{MotoServer, PYTHON_VARIABLE, check_python, choose_python};
use cfn_once_cli::local::pair::{RegionPair, printing_observer};
use cfn_once_cli::local::settings::{LOCAL_SETTINGS, LOCAL_SETTLE_MS};
use cfn_once_cli::local::tls_front::TlsFront;
use cfn_once_cli::ops::OpsTarget;
use cfn_once_cli::ops::inspect::InspectOptions;
use cfn_once_cli::ops::redrive::RedriveOptions;
use cfn_once_cli::ops::stuck::StuckOptions;
use cfn_once_core::echo::ECHO_TYPE;
use cfn_once_core::vocabulary::Role;

#[derive(Debug, Parser)]
#[command(
    name = "cfn-once",
    version,
    about = "CloudFormation custom resources answered exactly once, from whichever of two regions is alive"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
    /// Fail over to the secondary region and back, through the real path, and report
    ///
    /// Flips the active-region control (the control#active item in the lease table, or ARC
    /// routing controls) to the secondary, sends a probe custom resource through the topic and
    /// checks which region answered and how fast; flips back and checks again. Works on the
    /// local environment (--env) or on deployed stacks (the target flags). Exits 0 only if both
    /// probes were answered once by the expected region.
    Drill(Box<DrillArgs>),
    /// What happened to a request: its lease record in words, its queues, its DLQ copies
    ///
    /// Reads the request's lease record (state, fence, holder region and owner, lease left,
    /// attempts, work in progress, the committed answer's status and Reason, delivered or not)
    /// and each handler region's queue and DLQ counts, and looks through the DLQs for copies of
    /// it (holding their messages for a moment, then releasing them: SQS cannot be searched).
    /// With --logical-id instead of --request-id, the latest requests of that resource in the
    /// stack. A resource with a wait condition (CfnOnceWaitHandle) has, beside its requests, a
    /// wait-condition work (RequestId cfn-once-work:...): shown as WAITING with its polls so far
    /// and its next poll, or COMMITTED with the signal's status (SUCCESS or FAILURE), Reason and
    /// UniqueId; inspecting a request that handed its work over shows the work too. Never prints
    /// a ResponseURL or a wait condition handle. Uses the operator's credentials: GetItem and
    /// Query on the table, ReceiveMessage, ChangeMessageVisibility and GetQueueAttributes on the
    /// queues.
    Inspect(InspectArgs),
    /// Requests that look stuck, oldest first; exits 1 if there are any
    ///
    /// Scans the lease table for requests unanswered for longer than --older-than-s (running,
    /// waiting for polls, or abandoned with an expired lease) and answers committed but not
    /// delivered for longer than --undelivered-s. A wait-condition work may rightly take up to
    /// 12 hours, so its age alone does not list it: it is listed when its next poll (or a
    /// poll's lease) is overdue by longer than --poll-overdue-s, when it is older than 12 hours
    /// (any wait condition's deadline has passed) and unsignalled, or when its signal was
    /// committed and not delivered for longer than --undelivered-s.
    Stuck(StuckArgs),
    /// Move dead-lettered messages back to their queue, saying what each will do
    ///
    /// Safe by construction: the handler answers duplicates once, so a redriven copy of an
    /// answered request is dropped, a committed but undelivered answer is PUT byte for byte, and
    /// unfinished work resumes. Each message's request record is read first and reported.
    /// Messages nobody can be answered for are left unless --include-undeliverable. The copy
    /// keeps when the request was first sent, so its deadline still counts from then.
    Redrive(RedriveArgs),
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
    Soak(Box<cfn_once_cli::soak::SoakOptions>),
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
    GoldenRecords(Box<cfn_once_cli::golden::GoldenOptions>),
    /// Play a template's custom resources through a stack's whole life on the local
    /// environment: create, each --update, delete
    ///
    /// Against the environment `cfn-once local` (`make local`) serves (--env). Reads every
    /// template first (YAML with short-form tags, or JSON) and refuses, before anything is
    /// sent, whatever it does not play, naming the construct, the file and the line: it plays
    /// Parameters, Conditions, the pseudo parameters, Ref, Fn::GetAtt, Fn::Sub, Fn::Join,
    /// Fn::Select, Fn::Split, Fn::If, Fn::Equals/And/Or/Not, DependsOn, DeletionPolicy,
    /// UpdateReplacePolicy and Outputs. Custom resources are sent through the ServiceToken
    /// topic as CloudFormation sends them, in CloudFormation's order and by its rules: parallel
    /// where independent, an Update only when resolved properties changed, a replacement's old
    /// id deleted in the cleanup phase, rollbacks of a failed create or update, a delete in
    /// reverse order, Retain sending nothing, each request's ServiceTimeout. Wait condition
    /// handles and wait conditions are played; other types are not provisioned (their Ref is a
    /// made-up name; Fn::GetAtt of them needs --stub). Prints the stack events as they happen,
    /// then each operation's status and Outputs and each resource's requests with the region
    /// and fence that answered. Exits 0 only if every operation ended *_COMPLETE without a
    /// rollback. Details: docs/play.md.
    Play(Box<cfn_once_cli::play::cli::PlayArgs>),
}

#[derive(Debug, Args)]
struct MotoArgs {
    /// Use the moto server at this URL instead of starting one.
    #[arg(long, value_name = "URL")]
    endpoint_url: Option<String>,
    /// The Python interpreter with moto[server] (and awslambdaric, for functions) installed.
    /// By default, the first of: $CFN_ONCE_PYTHON; .venv/bin/python in the working directory;
    /// the .venv/bin/python of the cfn-once checkout this binary was built in (`make venv`
    /// there creates it); python3 on the PATH. Checked before anything starts.
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// The secondary queue's DelaySeconds: how long the primary has before the secondary acts.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    secondary_delay_s: u32,
}

#[derive(Debug, Args)]
struct LocalArgs {
    #[command(flatten)]
    moto: MotoArgs,
    /// Where to write the environment's description; the local CA's certificate goes beside it.
    #[arg(long, value_name = "PATH", default_value = ".local/env.json")]
    env_file: PathBuf,
    /// The functions file: each Custom:: type to its functions by kind (on-event, is-complete,
    /// cfn-response), each with its folder, handler, environment, timeout-s and memory-mb (see
    /// the README's "Bring your functions"); checked before anything starts. Without it, only
    /// the built-in providers are served: Custom::Echo and Custom::DynamoDBItem (`make local`
    /// passes the examples' file). The functions run with --python.
    #[arg(long, value_name = "FILE")]
    functions: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct DemoArgs {
    #[command(flatten)]
    moto: MotoArgs,
    /// Where the sample requests are.
    #[arg(long, value_name = "DIR", default_value = "events")]
    events: PathBuf,
}

#[derive(Debug, Args)]
struct DrillArgs {
    /// Drill the local environment described by this file (written by `cfn-once local`).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["topic_arn", "table"])]
    env: Option<PathBuf>,
    /// The ServiceToken topic.
    #[arg(long, value_name = "ARN")]
    topic_arn: Option<String>,
    /// The region of the topic (the customer's stack region).
    #[arg(long, value_name = "REGION")]
    customer_region: Option<String>,
    /// The primary handler region.
    #[arg(long, value_name = "REGION")]
    primary_region: Option<String>,
    /// The secondary handler region.
    #[arg(long, value_name = "REGION")]
    secondary_region: Option<String>,
    /// The lease table.
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// The region of the table replica to use (default: the primary region).
    #[arg(long, value_name = "REGION")]
    table_region: Option<String>,
    /// An S3 bucket the drill may write probe responses to.
    #[arg(long, value_name = "NAME")]
    response_bucket: Option<String>,
    /// The bucket's region (default: the customer region).
    #[arg(long, value_name = "REGION")]
    bucket_region: Option<String>,
    /// A local AWS endpoint, for a hand-made local target.
    #[arg(long, value_name = "URL")]
    endpoint_url: Option<String>,
    /// How to flip the active region: the table's control item, or ARC routing controls.
    #[arg(long, value_name = "table|arc", default_value = "table")]
    control: String,
    /// ARC cluster endpoints, region=url, comma-separated (with --control arc).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    arc_endpoints: Vec<String>,
    /// The primary region's routing control (with --control arc).
    #[arg(long, value_name = "ARN")]
    primary_routing_control: Option<String>,
    /// The secondary region's routing control (with --control arc).
    #[arg(long, value_name = "ARN")]
    secondary_routing_control: Option<String>,
    /// Wait after each flip, at least the handlers' CFN_ONCE_CONTROL_CACHE_MS (default: 1500
    /// with --env, else 6000).
    #[arg(long, value_name = "MS")]
    settle_ms: Option<u64>,
    /// How long a probe may take to be answered (it includes the secondary queue's delay).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    timeout_s: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Where the operator tools look.
#[derive(Debug, Args)]
struct TargetArgs {
    /// The local environment described by this file (written by `cfn-once local`).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["table", "queue"])]
    env: Option<PathBuf>,
    /// The lease table of deployed stacks.
    #[arg(long, value_name = "NAME", requires = "queue")]
    table: Option<String>,
    /// The region of the table replica to read (default: the first --queue's region).
    #[arg(long, value_name = "REGION")]
    table_region: Option<String>,
    /// A handler region's queue, ROLE=URL (e.g. primary=https://sqs.us-east-1.amazonaws.com/123456789012/cfn-once);
    /// repeat for each region. Its DLQ is read from its redrive policy.
    #[arg(long, value_name = "ROLE=URL")]
    queue: Vec<String>,
    /// The AWS profile for deployed stacks (default: the default credential chain).
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// A local AWS endpoint for a hand-made target.
    #[arg(long, value_name = "URL")]
    endpoint_url: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl TargetArgs {
    async fn target(&self) -> anyhow::Result<OpsTarget> {
        match (&self.env, &self.table) {
            (Some(path), _) => Ok(OpsTarget::from_env_file(&EnvFile::read(path)?)),
            (None, Some(table)) => {
                OpsTarget::deployed(
                    table.clone(),
                    self.table_region.clone(),
                    &self.queue,
                    self.profile.clone(),
                    self.endpoint_url.clone(),
                )
                .await
            }
            (None, None) => anyhow::bail!(
                "say where to look: --env .local/env.json for the local environment, or --table NAME --queue primary=URL --queue secondary=URL"
            ),
        }
    }
}

#[derive(Debug, Args)]
struct InspectArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The stack's StackId (its ARN).
    #[arg(long, value_name = "ARN")]
    stack_id: String,
    /// The request's RequestId.
    #[arg(long, value_name = "ID", required_unless_present = "logical_id", conflicts_with = "logical_id")]
    request_id: Option<String>,
    /// A LogicalResourceId: inspect its latest requests in the stack.
    #[arg(long, value_name = "ID")]
    logical_id: Option<String>,
    /// How many of a logical resource's latest requests.
    #[arg(long, value_name = "N", default_value_t = 5)]
    limit: usize,
    /// Do not look into the DLQs (which holds their messages for a moment).
    #[arg(long)]
    no_dlq: bool,
}

#[derive(Debug, Args)]
struct StuckArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Unanswered requests sent longer ago than this are listed.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    older_than_s: u64,
    /// Committed answers undelivered for longer than this are listed.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    undelivered_s: u64,
    /// Wait-condition works whose next poll is overdue by longer than this are listed.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    poll_overdue_s: u64,
}

#[derive(Debug, Args)]
struct RedriveArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Report what would be moved and what each copy would do; move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also move messages nobody can be answered for (no usable ResponseURL, a refused
    /// sender); the handler moves them back to the DLQ.
    #[arg(long)]
    include_undeliverable: bool,
    /// At most this many messages per DLQ.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    max: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Local(args) => run_local(args).await,
        Command::Demo(args) => run_demo(args).await,
        Command::Drill(args) => run_drill(*args).await,
        Command::Inspect(args) => run_inspect(args).await,
        Command::Stuck(args) => run_stuck(args).await,
        Command::Redrive(args) => run_redrive(args).await,
        Command::Soak(options) => run_soak(*options).await,
        Command::GoldenRecords(options) => run_golden_records(*options).await,
        Command::Play(args) => run_play(*args).await,
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

/// Only problems reach the terminal: the local tools print their own progress.
fn init_terminal_logging() {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::ERROR)
        .with_target(false)
        .with_writer(std::io::stderr)
        .init();
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
    init_terminal_logging();
    // A mistake in the functions file, or a Python without moto, stops everything before
    // anything starts.
    let functions_file = args.functions.as_deref().map(FunctionsFile::read).transpose()?;
    let modules =
        [args.moto.endpoint_url.is_none().then_some("moto"), functions_file.is_some().then_some("awslambdaric")];
    let python = python(&args.moto, &modules.into_iter().flatten().collect::<Vec<_>>())?;
    let (_moto, endpoint) = moto(&args.moto, python.as_deref())?;
    let options = EnvironmentOptions::local(
        format!("cfn-once-local-{:06x}", cfn_once::clock::random_seed() & 0xff_ffff),
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
    let mut pair = RegionPair::start_serving(
        &env,
        &LOCAL_SETTINGS,
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
                control::apply(request, &mut pair, &file.primary_region, fresh).await;
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
    init_terminal_logging();
    let modules = if args.moto.endpoint_url.is_some() { vec!["awslambdaric"] } else { vec!["moto", "awslambdaric"] };
    let python = python(&args.moto, &modules)?.context("the demo's functions need a Python interpreter")?;
    let options = cfn_once_cli::local::demo::DemoOptions {
        endpoint_url: args.moto.endpoint_url,
        python,
        events_dir: args.events,
        secondary_delay_s: args.moto.secondary_delay_s,
    };
    cfn_once_cli::local::demo::run(options).await
}

async fn run_drill(args: DrillArgs) -> anyhow::Result<bool> {
    init_terminal_logging();
    let (target, default_settle_ms) = drill_target(&args)?;
    let options = DrillOptions {
        settle_ms: args.settle_ms.unwrap_or(default_settle_ms),
        answer_timeout_ms: args.timeout_s * 1000,
    };
    let quiet = args.json;
    let report = cfn_once_cli::local::drill::run(&target, options, |line| {
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
    init_terminal_logging();
    let target = args.target.target().await?;
    let options = InspectOptions {
        stack_id: args.stack_id,
        request_id: args.request_id,
        logical_id: args.logical_id,
        limit: args.limit,
        dead_letters: !args.no_dlq,
    };
    let report = cfn_once_cli::ops::inspect::inspect(&target, &options).await?;
    if args.target.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.render());
    }
    Ok(true)
}

async fn run_stuck(args: StuckArgs) -> anyhow::Result<bool> {
    init_terminal_logging();
    let target = args.target.target().await?;
    let options = StuckOptions {
        older_than_ms: args.older_than_s * 1000,
        undelivered_ms: args.undelivered_s * 1000,
        poll_overdue_ms: args.poll_overdue_s * 1000,
    };
    let stuck = cfn_once_cli::ops::stuck::stuck(&target, options).await?;
    if args.target.json {
        println!("{}", serde_json::to_string_pretty(&stuck)?);
    } else {
        println!("{}", cfn_once_cli::ops::stuck::render(&stuck));
    }
    Ok(stuck.is_empty())
}

async fn run_redrive(args: RedriveArgs) -> anyhow::Result<bool> {
    init_terminal_logging();
    let target = args.target.target().await?;
    let options =
        RedriveOptions { dry_run: args.dry_run, include_undeliverable: args.include_undeliverable, max: args.max };
    let report = cfn_once_cli::ops::redrive::redrive(&target, options).await?;
    if args.target.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.render());
    }
    Ok(true)
}

async fn run_soak(options: cfn_once_cli::soak::SoakOptions) -> anyhow::Result<bool> {
    init_terminal_logging();
    Ok(cfn_once_cli::soak::run(&options).await?.passed)
}

async fn run_play(args: cfn_once_cli::play::cli::PlayArgs) -> anyhow::Result<bool> {
    init_terminal_logging();
    cfn_once_cli::play::cli::run(args).await
}

async fn run_golden_records(options: cfn_once_cli::golden::GoldenOptions) -> anyhow::Result<bool> {
    init_terminal_logging();
    cfn_once_cli::golden::run(&options).await
}

fn drill_target(args: &DrillArgs) -> anyhow::Result<(DrillTarget, u64)> {
    let (mut target, settle_ms) = match &args.env {
        Some(path) => (DrillTarget::from_env_file(&EnvFile::read(path)?), LOCAL_SETTLE_MS),
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
