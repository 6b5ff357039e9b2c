//! The `cfn-once` command line as clap reads it: the operator's commands and their flags. Their
//! doc comments are the `--help` texts, so they are written for the person typing the command;
//! `main.rs` dispatches what is parsed here.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use cfn_once_ops::OpsTarget;
use cfn_once_ops::env_file::EnvFile;

#[derive(Debug, Parser)]
#[command(
    name = "cfn-once",
    version = cfn_once_core::build::DESCRIPTION,
    about = "CloudFormation custom resources answered exactly once, from whichever of two regions is alive",
    long_about = "CloudFormation custom resources answered exactly once, from whichever of two regions is \
alive: the operator's commands. Any other command (local, demo, play, soak, golden-records) is run by \
cfn-once-dev, the tools for trying cfn-once locally, when it is beside this binary or on the PATH."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// Deploy both regions, the lease table and every customer region's topic from a few facts
    ///
    /// Refuses, before anything starts, facts the templates would refuse: a primary, secondary
    /// and witness that are not three regions of one MRSC region set (US us-east-1, us-east-2,
    /// us-west-2; EU eu-west-1, eu-west-2, eu-west-3, eu-central-1; AP ap-northeast-1,
    /// ap-northeast-2, ap-northeast-3), a customer region SNS cannot deliver from (two different
    /// SNS opt-in regions), a malformed account id, alarms that page nobody. Then writes the SAM
    /// configuration (--out, one environment per stack, every value derived from the facts),
    /// prints the plan (each stack, its region, its order and why), and runs it from the
    /// repository (--repo): `cargo fetch`, `sam build` once per template with a function, then
    /// one `sam deploy --config-file OUT --config-env ENV` per stack, each waited for (sam
    /// deploy returns when its stack operation is over); the first failure stops the rest and
    /// says what to do. sam and cargo-lambda are taken from the venv (--venv, `make
    /// build-tools` installs them). --dry-run writes the configuration and prints every command
    /// instead of running it. Each change set is shown and confirmed unless --yes.
    Deploy(Box<DeployArgs>),
    /// Whether a deployed pair, or the local environment, is wired as the templates intend
    ///
    /// Says, item by item, OK or what is miswired, and exits 1 if anything is: each customer
    /// topic subscribed to both regional queues (with the handlers' RawMessageDelivery); the
    /// primary queue undelayed and the secondary's DelaySeconds the SecondaryDelaySeconds the
    /// primary counts failover from; each queue's redrive policy (its DLQ exists,
    /// maxReceiveCount as the handler is told) and visibility timeout (the function's timeout
    /// plus 60 s, as infra/regional.yaml sets it); the lease table's key schema and, on AWS, MRSC
    /// with its replicas and witness; both handlers' ServiceTopicArns against the customer
    /// topics, and no other topic feeding the queues; the control#active item (the primary
    /// active). Alarms are not checked (no CloudWatch client in this build; the item says how
    /// to look). Deployed: give the same facts as to deploy (flags or --config); it reads with
    /// the operator's credentials (--profile): GetQueueAttributes, GetQueueUrl,
    /// GetTopicAttributes, ListSubscriptions, GetSubscriptionAttributes, DescribeTable, GetItem,
    /// GetFunctionConfiguration. Locally: --env .local/env.json (replicas and witness are not
    /// checked there: moto keeps one table).
    Check(Box<CheckArgs>),
    /// A command of cfn-once-dev (local, demo, play, soak, golden-records), run by it
    #[command(external_subcommand)]
    Dev(Vec<OsString>),
}

/// The facts a deployment is made from, as flags or in a file.
#[derive(Debug, Args)]
pub(crate) struct FactsArgs {
    /// A file of the facts, `key = "value"` a line (account, primary, secondary, witness,
    /// customer_regions = [...], alarm_email, ...); flags given beside it win.
    #[arg(long, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// The platform account, which owns every stack (twelve digits).
    #[arg(long, value_name = "ID")]
    pub(crate) account: Option<String>,
    /// The primary handler region; the lease table stack lives here too.
    #[arg(long, value_name = "REGION")]
    pub(crate) primary: Option<String>,
    /// The secondary handler region (the table's other replica).
    #[arg(long, value_name = "REGION")]
    pub(crate) secondary: Option<String>,
    /// The lease table's witness: the third region of the same MRSC region set.
    #[arg(long, value_name = "REGION")]
    pub(crate) witness: Option<String>,
    /// Where stacks use the custom resources, comma-separated: one ServiceToken topic each.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub(crate) customer_regions: Vec<String>,
    /// The address every stack's alarms mail (SNS asks it to confirm first).
    #[arg(long, value_name = "ADDRESS")]
    pub(crate) alarm_email: Option<String>,
    /// Your paging topic instead of --alarm-email.
    #[arg(long, value_name = "ARN")]
    pub(crate) alarm_topic_arn: Option<String>,
    /// The prefix of every name the stacks fix [default: cfn-once].
    #[arg(long, value_name = "NAME")]
    pub(crate) installation: Option<String>,
    /// The lease table's name [default: cfn-once-leases].
    #[arg(long, value_name = "NAME")]
    pub(crate) table: Option<String>,
    /// The ServiceToken topics' name [default: cfn-once-service-token].
    #[arg(long, value_name = "NAME")]
    pub(crate) topic_name: Option<String>,
    /// The secondary queue's delay, which the primary counts failover from: one value for both
    /// regional stacks [default: 5].
    #[arg(long, value_name = "SECONDS")]
    pub(crate) secondary_delay_s: Option<u32>,
    /// The operators' role (RedrivePrincipalArns, OperatorPrincipalArns): besides the function,
    /// the only principal the queue policies let read or redrive. Without it, nobody can.
    #[arg(long, value_name = "ARN")]
    pub(crate) operator_role_arn: Option<String>,
    /// Where the primary learns whether it is active: the table's control item, or ARC routing
    /// controls (deploy infra/arc.yaml first and give its endpoints and routing controls).
    #[arg(long, value_name = "table|arc")]
    pub(crate) control: Option<String>,
    /// With --control arc: the cluster's endpoints, region=url, comma-separated.
    #[arg(long, value_name = "LIST")]
    pub(crate) arc_endpoints: Option<String>,
    /// With --control arc: the primary region's routing control.
    #[arg(long, value_name = "ARN")]
    pub(crate) primary_routing_control: Option<String>,
    /// With --control arc: the secondary region's routing control.
    #[arg(long, value_name = "ARN")]
    pub(crate) secondary_routing_control: Option<String>,
    /// Also deploy infra/example.yaml and infra/long-work.yaml in the first customer region.
    #[arg(long)]
    pub(crate) examples: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DeployArgs {
    #[command(flatten)]
    pub(crate) facts: FactsArgs,
    /// The SAM configuration to write, relative to --repo.
    #[arg(long, value_name = "PATH", default_value = "samconfig.deploy.toml")]
    pub(crate) out: String,
    /// The repository (its infra/ templates and Cargo workspace), where sam runs.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub(crate) repo: PathBuf,
    /// The venv whose bin/ holds sam and cargo-lambda [default: <repo>/.venv].
    #[arg(long, value_name = "DIR")]
    pub(crate) venv: Option<PathBuf>,
    /// Write the configuration and print every command; run nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Deploy each change set without asking (sam deploy --no-confirm-changeset).
    #[arg(long)]
    pub(crate) yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The local environment described by this file (written by `cfn-once local`).
    #[arg(long, value_name = "PATH")]
    pub(crate) env: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) facts: FactsArgs,
    /// The AWS profile (default: the default credential chain).
    #[arg(long, value_name = "NAME")]
    pub(crate) profile: Option<String>,
    /// A local AWS endpoint for a hand-made target.
    #[arg(long, value_name = "URL")]
    pub(crate) endpoint_url: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
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
