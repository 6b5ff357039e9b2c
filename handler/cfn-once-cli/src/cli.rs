//! The `cfn-once` command line as clap reads it: each subcommand and its flags. Their doc
//! comments are the `--help` texts, so they are written for the person typing the command;
//! `main.rs` dispatches what is parsed here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use cfn_once_cli::local::environment::EnvFile;
use cfn_once_cli::ops::OpsTarget;

#[derive(Debug, Parser)]
#[command(
    name = "cfn-once",
    version = cfn_once_core::build::DESCRIPTION,
    about = "CloudFormation custom resources answered exactly once, from whichever of two regions is alive"
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
    /// it (holding their messages for a moment, then releasing them: SQS cannot be searched):
    /// the handler regions' DLQs, and the customer regions' delivery DLQs (--delivery-dlq), where
    /// SNS moves a request it could not deliver to a queue; a copy there names the alarm its
    /// arrival fires.
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
    /// keeps when the request was first sent, so its deadline still counts from then. A request
    /// in a delivery DLQ (--delivery-dlq: SNS could not deliver it) is sent on to the handler
    /// region's queue it missed, which needs the operator in that queue's RedrivePrincipalArns.
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
    Play(Box<cfn_once_cli::play::cli::PlayArgs>),
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

#[derive(Debug, Args)]
pub(crate) struct DrillArgs {
    /// Drill the local environment described by this file (written by `cfn-once local`).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["topic_arn", "table"])]
    pub(crate) env: Option<PathBuf>,
    /// The ServiceToken topic.
    #[arg(long, value_name = "ARN")]
    pub(crate) topic_arn: Option<String>,
    /// The region of the topic (the customer's stack region).
    #[arg(long, value_name = "REGION")]
    pub(crate) customer_region: Option<String>,
    /// The primary handler region.
    #[arg(long, value_name = "REGION")]
    pub(crate) primary_region: Option<String>,
    /// The secondary handler region.
    #[arg(long, value_name = "REGION")]
    pub(crate) secondary_region: Option<String>,
    /// The lease table.
    #[arg(long, value_name = "NAME")]
    pub(crate) table: Option<String>,
    /// The region of the table replica to use (default: the primary region).
    #[arg(long, value_name = "REGION")]
    pub(crate) table_region: Option<String>,
    /// An S3 bucket the drill may write probe responses to.
    #[arg(long, value_name = "NAME")]
    pub(crate) response_bucket: Option<String>,
    /// The bucket's region (default: the customer region).
    #[arg(long, value_name = "REGION")]
    pub(crate) bucket_region: Option<String>,
    /// A local AWS endpoint, for a hand-made local target.
    #[arg(long, value_name = "URL")]
    pub(crate) endpoint_url: Option<String>,
    /// How to flip the active region: the table's control item, or ARC routing controls.
    #[arg(long, value_name = "table|arc", default_value = "table")]
    pub(crate) control: String,
    /// ARC cluster endpoints, region=url, comma-separated (with --control arc).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub(crate) arc_endpoints: Vec<String>,
    /// The primary region's routing control (with --control arc).
    #[arg(long, value_name = "ARN")]
    pub(crate) primary_routing_control: Option<String>,
    /// The secondary region's routing control (with --control arc).
    #[arg(long, value_name = "ARN")]
    pub(crate) secondary_routing_control: Option<String>,
    /// Wait after each flip, at least the handlers' CFN_ONCE_CONTROL_CACHE_MS (default: 1500
    /// with --env, else 6000).
    #[arg(long, value_name = "MS")]
    pub(crate) settle_ms: Option<u64>,
    /// How long a probe may take to be answered (it includes the secondary queue's delay).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub(crate) timeout_s: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Where the operator tools look.
#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// The local environment described by this file (written by `cfn-once local`).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["table", "queue", "delivery_dlq"])]
    pub(crate) env: Option<PathBuf>,
    /// The lease table of deployed stacks.
    #[arg(long, value_name = "NAME", requires = "queue")]
    pub(crate) table: Option<String>,
    /// The region of the table replica to read (default: the first --queue's region).
    #[arg(long, value_name = "REGION")]
    pub(crate) table_region: Option<String>,
    /// A handler region's queue, ROLE=URL (e.g. primary=https://sqs.us-east-1.amazonaws.com/123456789012/cfn-once);
    /// repeat for each region. Its DLQ is read from its redrive policy.
    #[arg(long, value_name = "ROLE=URL")]
    pub(crate) queue: Vec<String>,
    /// A customer stack's delivery dead-letter queue, ROLE=URL (its PrimaryDeliveryDeadLetterQueueUrl
    /// or SecondaryDeliveryDeadLetterQueueUrl output): what SNS could not deliver to that role's
    /// --queue; repeat for each customer region and role.
    #[arg(long, value_name = "ROLE=URL", requires = "queue")]
    pub(crate) delivery_dlq: Vec<String>,
    /// The AWS profile for deployed stacks (default: the default credential chain).
    #[arg(long, value_name = "NAME")]
    pub(crate) profile: Option<String>,
    /// A local AWS endpoint for a hand-made target.
    #[arg(long, value_name = "URL")]
    pub(crate) endpoint_url: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

impl TargetArgs {
    pub(crate) async fn target(&self) -> anyhow::Result<OpsTarget> {
        match (&self.env, &self.table) {
            (Some(path), _) => Ok(OpsTarget::from_env_file(&EnvFile::read(path)?)),
            (None, Some(table)) => {
                OpsTarget::deployed(
                    table.clone(),
                    self.table_region.clone(),
                    &self.queue,
                    &self.delivery_dlq,
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
pub(crate) struct InspectArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// The stack's StackId (its ARN).
    #[arg(long, value_name = "ARN")]
    pub(crate) stack_id: String,
    /// The request's RequestId.
    #[arg(long, value_name = "ID", required_unless_present = "logical_id", conflicts_with = "logical_id")]
    pub(crate) request_id: Option<String>,
    /// A LogicalResourceId: inspect its latest requests in the stack.
    #[arg(long, value_name = "ID")]
    pub(crate) logical_id: Option<String>,
    /// How many of a logical resource's latest requests.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub(crate) limit: usize,
    /// Do not look into the DLQs (which holds their messages for a moment).
    #[arg(long)]
    pub(crate) no_dlq: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StuckArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Unanswered requests sent longer ago than this are listed.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub(crate) older_than_s: u64,
    /// Committed answers undelivered for longer than this are listed.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub(crate) undelivered_s: u64,
    /// Wait-condition works whose next poll is overdue by longer than this are listed.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub(crate) poll_overdue_s: u64,
}

#[derive(Debug, Args)]
pub(crate) struct RedriveArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Report what would be moved and what each copy would do; move nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Also move messages nobody can be answered for (no usable ResponseURL, a refused
    /// sender); the handler moves them back to the DLQ.
    #[arg(long)]
    pub(crate) include_undeliverable: bool,
    /// At most this many messages per DLQ.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub(crate) max: usize,
}
