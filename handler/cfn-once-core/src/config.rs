//! Configuration, read from the environment once at start-up.
//!
//! Nothing else in cfn-once reads the environment (the AWS SDK reads its own variables, such as
//! `AWS_ENDPOINT_URL`, when the binary loads the SDK configuration). Every missing or malformed
//! variable is reported in one error, each with what it should be. It lives in the core, beside
//! the protocol's [`Settings`], so that the simulator derives its
//! settings from the same variables and defaults a deployed handler does ([`Config::settings`]).
//! Settings are built from a configuration, never the other way round: `settings` knows nothing
//! of the environment.

use crate::aws_names::{FunctionRef, ItemTables, TableRef};
use crate::budget::BACKOFF_FLOOR_S_MAX;
use crate::put::PutPolicy;
use crate::response_url::AllowedPrefix;
use crate::settings::Settings;
use crate::vocabulary::Role;

/// Defaults, named so the README and `--help` can quote them. This one is `CFN_ONCE_LEASE_MS`:
/// how long, in ms, a lease lasts without a heartbeat before another execution may take over.
pub const LEASE_MS_DEFAULT: u64 = 30_000;
/// Default `CFN_ONCE_SKEW_MS`: margin in ms added before a lease counts as expired, for clock
/// skew between regions.
pub const SKEW_MS_DEFAULT: u64 = 2_000;
/// Default `CFN_ONCE_PUT_ATTEMPTS_MAX`: PUT attempts per delivery before the message is retried.
pub const PUT_ATTEMPTS_MAX_DEFAULT: u32 = 5;
/// Default `CFN_ONCE_PUT_TIMEOUT_MS`: how long one PUT attempt may take, in ms.
pub const PUT_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Default `CFN_ONCE_STORE_TIMEOUT_MS`: how long one lease-store call may take, in ms.
pub const STORE_TIMEOUT_MS_DEFAULT: u64 = 3_000;
/// Default `CFN_ONCE_RETENTION_DAYS`: days a lease record is kept before the sweeper may delete it.
pub const RETENTION_DAYS_DEFAULT: u64 = 30;
/// Default `CFN_ONCE_RETRY_DELAY_S_MAX`: the longest backoff of a message, in seconds.
pub const RETRY_DELAY_S_MAX_DEFAULT: u32 = 300;
/// Default `CFN_ONCE_CONTROL_CACHE_MS`: how long, in ms, an answer of the active-region control
/// is reused before the control is asked again.
pub const CONTROL_CACHE_MS_DEFAULT: u64 = 5_000;
/// Default `CFN_ONCE_STANDBY_RETRY_S`: how long, in seconds, a standby primary leaves a message
/// before looking again.
pub const STANDBY_RETRY_S_DEFAULT: u64 = 30;
/// Default `CFN_ONCE_DEADLINE_CEILING_S`: the latest deadline of any request, in seconds from
/// when it was sent (CloudFormation's longest wait).
pub const DEADLINE_CEILING_S_DEFAULT: u64 = 3_600;
/// Default `CFN_ONCE_DEADLINE_MARGIN_MS`: with this little left before a request's deadline, in
/// ms, an unanswered request is answered FAILED.
pub const DEADLINE_MARGIN_MS_DEFAULT: u64 = 20_000;
/// Default `CFN_ONCE_SQS_TIMEOUT_MS`: how long one SQS call after a batch may take, in ms.
pub const SQS_TIMEOUT_MS_DEFAULT: u64 = 2_000;
/// SQS's largest `maxReceiveCount`, which `infra/regional.yaml` sets on both queues.
pub const MAX_RECEIVE_COUNT_DEFAULT: u32 = 1_000;
/// CloudFormation waits at most an hour (`ServiceTimeout` is 1 to 3600 s).
pub const DEADLINE_CEILING_S_MAX: u64 = 3_600;
/// Default `CFN_ONCE_VISIBILITY_TIMEOUT_S`: SQS's longest visibility timeout, 12 hours. Unset,
/// every record is treated as one a crash could hide past its deadline margin, which costs one
/// ChangeMessageVisibilityBatch per batch; `infra/regional.yaml` sets the queue's own value.
pub const VISIBILITY_TIMEOUT_S_DEFAULT: u64 = 43_200;
/// Default `CFN_ONCE_SECONDARY_DELAY_S`: the secondary queue's `DelaySeconds` that
/// `infra/regional.yaml` defaults to.
pub const SECONDARY_DELAY_S_DEFAULT: u64 = 60;

/// The handler's configuration. Deliberately no `Default`: a deployment states what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `AWS_REGION`: this deployment's region (set by Lambda).
    pub region: String,
    /// `CFN_ONCE_ROLE`: `primary` or `secondary`.
    pub role: Role,
    /// `CFN_ONCE_TABLE`: the lease table.
    pub table_name: String,
    /// `CFN_ONCE_TABLE_REGION` (default `AWS_REGION`): the region whose replica of the table to
    /// use. In AWS every region has its MRSC replica; locally both regions share one table.
    pub table_region: String,
    /// `CFN_ONCE_CONTROL` (default `table`): where a primary learns whether it is active.
    pub control: ControlSource,
    /// `CFN_ONCE_CONTROL_CACHE_MS` (default 5000): how long an answer of the control is reused.
    pub control_cache_ms: u64,
    /// `CFN_ONCE_TOPIC_ARNS`: comma-separated SNS topics whose envelopes are accepted.
    pub topic_arns: Vec<String>,
    /// `CFN_ONCE_RAW_DELIVERY` (default `false`): also accept bare requests, as SNS sends them
    /// with raw message delivery. They carry no TopicArn, so only the queue policy vouches for
    /// them; the customer template's `RawMessageDelivery` must say the same.
    pub raw_delivery: bool,
    /// `CFN_ONCE_RESPONSE_URL_ALLOW`: comma-separated URL prefixes accepted besides S3 (local
    /// endpoints, drills). Empty in production.
    pub response_url_allow: Vec<AllowedPrefix>,
    /// `CFN_ONCE_ITEM_TABLES`: tables `Custom::DynamoDBItem` may write, comma-separated, or `*`
    /// for any table but the lease table. Empty disables writes.
    pub item_tables: ItemTables,
    /// `CFN_ONCE_LEASE_MS` (default 30000): how long an acquire or heartbeat holds the lease, so
    /// a crashed holder is taken over this long (plus the skew) after its last heartbeat.
    pub lease_ms: u64,
    /// `CFN_ONCE_SKEW_MS` (default 2000): clock-skew margin before a lease counts as expired.
    pub skew_ms: u64,
    /// `CFN_ONCE_HEARTBEAT_MS` (default a third of the lease): how often a running provider's
    /// lease is extended; must be shorter than the lease.
    pub heartbeat_ms: u64,
    /// `CFN_ONCE_PUT_ATTEMPTS_MAX` (default 5): PUT attempts per delivery before the message is
    /// retried later.
    pub put_attempts_max: u32,
    /// `CFN_ONCE_PUT_TIMEOUT_MS` (default 5000): per PUT attempt.
    pub put_timeout_ms: u64,
    /// `CFN_ONCE_STORE_TIMEOUT_MS` (default 3000): per lease-store call.
    pub store_timeout_ms: u64,
    /// `CFN_ONCE_SQS_TIMEOUT_MS` (default 2000): per SQS call after a batch (rescheduling a
    /// message, or moving it to the DLQ).
    pub sqs_timeout_ms: u64,
    /// `CFN_ONCE_MAX_RECEIVE_COUNT` (default 1000): the queue's redrive `maxReceiveCount`, which
    /// the regional template sets from the same value. Backoffs are spaced so that a message is
    /// received fewer times than this before its deadline.
    pub max_receive_count: u32,
    /// `CFN_ONCE_RETENTION_DAYS` (default 30): how long lease records are kept.
    pub retention_days: u64,
    /// `CFN_ONCE_RETRY_DELAY_S_MAX` (default 300): longest backoff of a message.
    pub retry_delay_s_max: u32,
    /// `CFN_ONCE_STANDBY_RETRY_S` (default 30): how long a standby primary leaves a message
    /// before looking again.
    pub standby_retry_s: u32,
    /// `CFN_ONCE_DEADLINE_CEILING_S` (default and most 3600): the latest deadline of any request,
    /// from when it was sent.
    pub deadline_ceiling_s: u64,
    /// `CFN_ONCE_DEADLINE_MARGIN_MS` (default 20000): when this little is left before a request's
    /// deadline and nobody has answered, answer FAILED now. Must exceed the time a taker-over
    /// needs to answer (an acquire and `Settings::answer_ms`, computed from the call timeouts).
    pub deadline_margin_ms: u64,
    /// `CFN_ONCE_VISIBILITY_TIMEOUT_S` (default 43200, SQS's longest): the queue's visibility
    /// timeout, for which a crashed invocation hides every record of its batch. A record received
    /// closer than this to its deadline margin has its visibility shortened at once, so a crash
    /// still leaves a copy to answer. The regional template sets it from the queue's value.
    pub visibility_timeout_s: u64,
    /// `CFN_ONCE_SECONDARY_DELAY_S` (default 60): the secondary queue's `DelaySeconds`. A primary
    /// counts the requests whose deadline comes too soon for the secondary to answer them
    /// (`ShortServiceTimeout`): they have no failover. The regional template sets it.
    pub secondary_delay_s: u64,
    /// `CFN_ONCE_PROVIDER_ENVIRONMENT` (default none): settings for the function's own
    /// providers, a JSON object of names to strings (`{"POLICY_TABLE": "bucket-policies"}`),
    /// handed to them at start (`cfn_once::ProviderSetup::var`). The regional template passes
    /// its `ProviderEnvironment` parameter here.
    pub provider_environment: std::collections::BTreeMap<String, String>,
    /// `CFN_ONCE_FUNCTIONS` (default none): resource types served by existing Lambda functions
    /// of this region, the CDK Provider framework's way: `Custom::Type=on-event[|is-complete]`,
    /// comma-separated, each function by name or ARN; `Custom::Type=cfn-response:function` for a
    /// function that answers by itself (PUTs to the ResponseURL it is given, as `cfn-response`
    /// and crhelper do). The regional template passes its `Functions` parameter here and grants
    /// `lambda:InvokeFunction` on exactly those.
    pub functions: Vec<FunctionRoute>,
    /// `CFN_ONCE_ANSWER_BUCKET` (required with a `cfn-response:` function, else none): the bucket
    /// of this region where functions that answer by themselves PUT their answers, each to an
    /// object presigned for one execution. The regional template creates it.
    pub answer_bucket: Option<String>,
}

/// A resource type answered by existing functions: `onEvent`, and `isComplete` if configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionRoute {
    /// The resource type, `Custom::Name`.
    pub resource_type: String,
    /// The function every request of the type is passed to.
    pub on_event: FunctionRef,
    /// The function polled until it says `IsComplete`, if the type has one.
    pub is_complete: Option<FunctionRef>,
    /// The function answers by itself (`cfn-response:`): it is given a presigned URL of an
    /// object of cfn-once's instead of the ResponseURL, and what it PUTs there is the answer.
    pub answers_itself: bool,
}

/// Marks a function that PUTs its own answer, in `CFN_ONCE_FUNCTIONS`. A bare function name
/// holds no `:` and an ARN begins with `arn:`, so the mark cannot be read as either.
pub const ANSWERS_ITSELF: &str = "cfn-response:";

/// Parses `CFN_ONCE_FUNCTIONS` for `region`; every problem named.
fn function_routes(entries: &[String], region: &str) -> Result<Vec<FunctionRoute>, Vec<String>> {
    let (mut routes, mut problems) = (Vec::<FunctionRoute>::new(), Vec::new());
    for entry in entries {
        let Some((resource_type, functions)) = entry.split_once('=') else {
            problems.push(format!(
                "CFN_ONCE_FUNCTIONS entry {entry:?} is not Custom::Type=on-event[|is-complete] nor Custom::Type=cfn-response:function"
            ));
            continue;
        };
        let resource_type = resource_type.trim();
        let name = resource_type.strip_prefix("Custom::").unwrap_or_default();
        if name.is_empty()
            || name.len() > 60
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'@' | b'-'))
        {
            problems
                .push(format!("CFN_ONCE_FUNCTIONS: {resource_type:?} is not a custom resource type (Custom::Name)"));
            continue;
        }
        if routes.iter().any(|route| route.resource_type == resource_type) {
            problems.push(format!("CFN_ONCE_FUNCTIONS names {resource_type} twice"));
            continue;
        }
        if let Some(function) = functions.trim().strip_prefix(ANSWERS_ITSELF) {
            if function.contains('|') {
                problems.push(format!(
                    "CFN_ONCE_FUNCTIONS: {resource_type}: a function that answers by itself has no is-complete function"
                ));
                continue;
            }
            match FunctionRef::parse(function.trim(), region) {
                Ok(on_event) => routes.push(FunctionRoute {
                    resource_type: resource_type.to_owned(),
                    on_event,
                    is_complete: None,
                    answers_itself: true,
                }),
                Err(why) => problems.push(format!("CFN_ONCE_FUNCTIONS: {resource_type}: {why}")),
            }
            continue;
        }
        let mut refs = functions.split('|').map(|f| FunctionRef::parse(f.trim(), region));
        let on_event = refs.next().expect("split yields one part at least");
        let is_complete = refs.next().transpose();
        let extra = refs.next().is_some();
        match (on_event, is_complete, extra) {
            (_, _, true) => problems.push(format!("CFN_ONCE_FUNCTIONS: {resource_type} names more than two functions")),
            (Ok(on_event), Ok(is_complete), false) => routes.push(FunctionRoute {
                resource_type: resource_type.to_owned(),
                on_event,
                is_complete,
                answers_itself: false,
            }),
            (Err(why), _, _) | (_, Err(why), _) => problems.push(format!("CFN_ONCE_FUNCTIONS: {resource_type}: {why}")),
        }
    }
    if problems.is_empty() { Ok(routes) } else { Err(problems) }
}

/// Where a primary learns whether it is the active region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlSource {
    /// The `control#active` item in the lease table (strongly consistent, no extra cost).
    Table,
    /// An ARC routing control for this region, read from the cluster's endpoints in rotation.
    Arc {
        /// `CFN_ONCE_ARC_ENDPOINTS`: `region=url` pairs, comma-separated.
        endpoints: Vec<ArcEndpoint>,
        /// `CFN_ONCE_ARC_ROUTING_CONTROL_ARN`: this region's routing control.
        routing_control_arn: String,
    },
}

/// One ARC cluster endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArcEndpoint {
    /// The region the endpoint is in, which calls to it are signed for.
    pub region: String,
    /// The endpoint's URL: https, or plain http on loopback for local stand-ins.
    pub url: String,
}

impl ArcEndpoint {
    /// Parses `CFN_ONCE_ARC_ENDPOINTS`: `us-east-1=https://...,ap-southeast-2=https://...`.
    /// Plain http is accepted only on loopback, for local stand-ins.
    pub fn parse_list(entries: &[String]) -> Result<Vec<Self>, String> {
        let acceptable = |url: &str| {
            url.starts_with("https://") || url.starts_with("http://127.0.0.1:") || url.starts_with("http://localhost:")
        };
        entries
            .iter()
            .map(|entry| match entry.split_once('=') {
                Some((region, url)) if !region.trim().is_empty() && acceptable(url.trim()) => {
                    Ok(Self { region: region.trim().to_owned(), url: url.trim().to_owned() })
                }
                _ => Err(format!("CFN_ONCE_ARC_ENDPOINTS entry {entry:?} is not region=https://endpoint")),
            })
            .collect()
    }
}

/// Every problem found in the environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration is invalid: {}", .problems.join("; "))]
pub struct ConfigError {
    /// One message per missing or malformed variable, each saying what it should be.
    pub problems: Vec<String>,
}

/// What the Lambda function is: the request handler (default) or the lease-table sweeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Answers CloudFormation requests from the SQS queue (`CFN_ONCE_MODE` unset or `handler`).
    Handler,
    /// Deletes lease records past their retention, on a schedule (`CFN_ONCE_MODE=sweeper`).
    Sweeper,
}

/// `CFN_ONCE_MODE`: `handler` (the default) or `sweeper`.
pub fn mode() -> Result<Mode, ConfigError> {
    match std::env::var("CFN_ONCE_MODE").ok().as_deref().map(str::trim) {
        None | Some("") | Some("handler") => Ok(Mode::Handler),
        Some("sweeper") => Ok(Mode::Sweeper),
        Some(other) => {
            Err(ConfigError { problems: vec![format!("CFN_ONCE_MODE is {other:?}: expected handler or sweeper")] })
        }
    }
}

/// The sweeper's configuration: `AWS_REGION` and `CFN_ONCE_TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweeperConfig {
    /// `AWS_REGION`: the region the sweeper runs in (set by Lambda).
    pub region: String,
    /// `CFN_ONCE_TABLE`: the lease table whose expired records are deleted.
    pub table_name: String,
}

impl SweeperConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let lookup = |name: &str| std::env::var(name).ok();
        let mut vars = Vars { lookup: &lookup, problems: &mut problems };
        let region = vars.required("AWS_REGION", "the region this deployment runs in, e.g. us-east-1");
        let table_name = vars.required("CFN_ONCE_TABLE", "the lease table's name");
        if problems.is_empty() { Ok(Self { region, table_name }) } else { Err(ConfigError { problems }) }
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let mut vars = Vars { lookup: &lookup, problems: &mut problems };

        let region = vars.required("AWS_REGION", "the region this deployment runs in, e.g. us-east-1");
        let role = match vars.get("CFN_ONCE_ROLE") {
            Some(raw) => Role::parse(&raw).unwrap_or_else(|| {
                vars.problems.push(format!("CFN_ONCE_ROLE is {raw:?}: expected primary or secondary"));
                Role::Primary
            }),
            None => {
                vars.problems.push("CFN_ONCE_ROLE is not set: set it to primary or secondary".into());
                Role::Primary
            }
        };
        let table_name = vars.required("CFN_ONCE_TABLE", "the lease table's name");
        let table_region = vars.get("CFN_ONCE_TABLE_REGION").unwrap_or_else(|| region.clone());
        let control = match vars.get("CFN_ONCE_CONTROL").as_deref() {
            None | Some("table") => ControlSource::Table,
            Some("arc") => {
                let entries = vars.list("CFN_ONCE_ARC_ENDPOINTS");
                if entries.is_empty() {
                    vars.problems.push("CFN_ONCE_ARC_ENDPOINTS is not set: with CFN_ONCE_CONTROL=arc, list the cluster's region=url endpoints".into());
                }
                let endpoints = ArcEndpoint::parse_list(&entries).unwrap_or_else(|why| {
                    vars.problems.push(why);
                    Vec::new()
                });
                let routing_control_arn =
                    vars.required("CFN_ONCE_ARC_ROUTING_CONTROL_ARN", "this region's ARC routing control ARN");
                ControlSource::Arc { endpoints, routing_control_arn }
            }
            Some(other) => {
                vars.problems.push(format!("CFN_ONCE_CONTROL is {other:?}: expected table or arc"));
                ControlSource::Table
            }
        };
        let control_cache_ms = vars.number("CFN_ONCE_CONTROL_CACHE_MS", CONTROL_CACHE_MS_DEFAULT, 0, 300_000);
        let topic_arns = vars.list("CFN_ONCE_TOPIC_ARNS");
        let raw_delivery = vars.flag("CFN_ONCE_RAW_DELIVERY", false);
        let response_url_allow = vars
            .list("CFN_ONCE_RESPONSE_URL_ALLOW")
            .iter()
            .filter_map(|entry| match AllowedPrefix::parse(entry) {
                Ok(prefix) => Some(prefix),
                Err(why) => {
                    vars.problems.push(format!("CFN_ONCE_RESPONSE_URL_ALLOW: {why}"));
                    None
                }
            })
            .collect();
        let item_tables = match vars.list("CFN_ONCE_ITEM_TABLES").as_slice() {
            [star] if star == "*" => ItemTables::Any,
            tables => ItemTables::Only(
                tables
                    .iter()
                    .filter_map(|table| {
                        TableRef::parse(table)
                            .map_err(|why| vars.problems.push(format!("CFN_ONCE_ITEM_TABLES entry {why}")))
                            .ok()
                    })
                    .collect(),
            ),
        };
        let lease_ms = vars.number("CFN_ONCE_LEASE_MS", LEASE_MS_DEFAULT, 1_000, 900_000);
        let skew_ms = vars.number("CFN_ONCE_SKEW_MS", SKEW_MS_DEFAULT, 0, 60_000);
        let heartbeat_ms = vars.number("CFN_ONCE_HEARTBEAT_MS", (lease_ms / 3).max(100), 100, 300_000);
        let put_attempts_max = vars.number("CFN_ONCE_PUT_ATTEMPTS_MAX", PUT_ATTEMPTS_MAX_DEFAULT.into(), 1, 20) as u32;
        let put_timeout_ms = vars.number("CFN_ONCE_PUT_TIMEOUT_MS", PUT_TIMEOUT_MS_DEFAULT, 100, 60_000);
        let store_timeout_ms = vars.number("CFN_ONCE_STORE_TIMEOUT_MS", STORE_TIMEOUT_MS_DEFAULT, 100, 60_000);
        let sqs_timeout_ms = vars.number("CFN_ONCE_SQS_TIMEOUT_MS", SQS_TIMEOUT_MS_DEFAULT, 100, 60_000);
        let max_receive_count =
            vars.number("CFN_ONCE_MAX_RECEIVE_COUNT", MAX_RECEIVE_COUNT_DEFAULT.into(), 1, 1_000) as u32;
        let retention_days = vars.number("CFN_ONCE_RETENTION_DAYS", RETENTION_DAYS_DEFAULT, 1, 3_650);
        let retry_delay_s_max =
            vars.number("CFN_ONCE_RETRY_DELAY_S_MAX", RETRY_DELAY_S_MAX_DEFAULT.into(), 1, 43_200) as u32;
        let standby_retry_s = vars.number("CFN_ONCE_STANDBY_RETRY_S", STANDBY_RETRY_S_DEFAULT, 1, 43_200) as u32;
        let deadline_ceiling_s =
            vars.number("CFN_ONCE_DEADLINE_CEILING_S", DEADLINE_CEILING_S_DEFAULT, 10, DEADLINE_CEILING_S_MAX);
        let deadline_margin_ms = vars.number("CFN_ONCE_DEADLINE_MARGIN_MS", DEADLINE_MARGIN_MS_DEFAULT, 1_000, 600_000);
        let visibility_timeout_s =
            vars.number("CFN_ONCE_VISIBILITY_TIMEOUT_S", VISIBILITY_TIMEOUT_S_DEFAULT, 0, 43_200);
        let secondary_delay_s = vars.number("CFN_ONCE_SECONDARY_DELAY_S", SECONDARY_DELAY_S_DEFAULT, 0, 900);
        let functions = function_routes(&vars.list("CFN_ONCE_FUNCTIONS"), &region).unwrap_or_else(|why| {
            vars.problems.extend(why);
            Vec::new()
        });
        let answer_bucket = vars.get("CFN_ONCE_ANSWER_BUCKET");
        if let Some(bucket) = &answer_bucket
            && !crate::aws_names::is_bucket_name(bucket)
        {
            vars.problems.push(format!("CFN_ONCE_ANSWER_BUCKET {bucket:?} is not an S3 bucket name"));
        }
        if answer_bucket.is_none() && functions.iter().any(|route| route.answers_itself) {
            vars.problems.push(
                "CFN_ONCE_FUNCTIONS names a function that answers by itself (cfn-response:), which needs CFN_ONCE_ANSWER_BUCKET: the bucket its answers are PUT to".into(),
            );
        }
        let provider_environment = match vars.get("CFN_ONCE_PROVIDER_ENVIRONMENT") {
            None => std::collections::BTreeMap::new(),
            Some(text) => provider_environment(&text).unwrap_or_else(|why| {
                vars.problems.push(format!("CFN_ONCE_PROVIDER_ENVIRONMENT {why}"));
                std::collections::BTreeMap::new()
            }),
        };

        if topic_arns.is_empty() {
            problems.push(
                "CFN_ONCE_TOPIC_ARNS is not set: set it to the ServiceToken topic's ARN (comma-separate several)"
                    .into(),
            );
        }
        for arn in &topic_arns {
            if !arn.starts_with("arn:") || arn.split(':').count() != 6 {
                problems.push(format!("CFN_ONCE_TOPIC_ARNS entry {arn:?} is not an SNS topic ARN"));
            }
        }
        if heartbeat_ms >= lease_ms {
            problems.push(format!(
                "CFN_ONCE_HEARTBEAT_MS ({heartbeat_ms}) must be shorter than CFN_ONCE_LEASE_MS ({lease_ms}), or the lease lapses between heartbeats"
            ));
        }
        if lookup("CFN_ONCE_RESERVE_MS").is_some() {
            problems.push(
                "CFN_ONCE_RESERVE_MS is no longer read: the time kept to answer is computed from CFN_ONCE_STORE_TIMEOUT_MS, CFN_ONCE_PUT_TIMEOUT_MS and CFN_ONCE_SQS_TIMEOUT_MS; remove it"
                    .into(),
            );
        }
        let config = Self {
            region,
            role,
            table_name,
            table_region,
            control,
            control_cache_ms,
            topic_arns,
            raw_delivery,
            response_url_allow,
            item_tables,
            lease_ms,
            skew_ms,
            heartbeat_ms,
            put_attempts_max,
            put_timeout_ms,
            store_timeout_ms,
            sqs_timeout_ms,
            max_receive_count,
            retention_days,
            retry_delay_s_max,
            standby_retry_s,
            deadline_ceiling_s,
            deadline_margin_ms,
            visibility_timeout_s,
            secondary_delay_s,
            provider_environment,
            functions,
            answer_bucket,
        };
        let settings = config.settings();
        if config.deadline_margin_ms <= settings.take_over_answer_ms() {
            problems.push(format!(
                "CFN_ONCE_DEADLINE_MARGIN_MS ({}) must exceed the {} ms a taker-over needs to answer (an acquire and three more lease-store calls of CFN_ONCE_STORE_TIMEOUT_MS, and a PUT of CFN_ONCE_PUT_TIMEOUT_MS): leases end where the margin begins, so a holder that crashes just before it leaves exactly the margin to answer FAILED",
                config.deadline_margin_ms,
                settings.take_over_answer_ms()
            ));
        }
        if let Some(floor_s) = settings.backoff_floor_s()
            && config.retry_delay_s_max < floor_s
        {
            problems.push(format!(
                "CFN_ONCE_RETRY_DELAY_S_MAX ({}) is shorter than the {floor_s} s backoff floor that keeps a message's receives within CFN_ONCE_MAX_RECEIVE_COUNT ({}) until its deadline; set it to at least {floor_s}",
                config.retry_delay_s_max, config.max_receive_count
            ));
        }
        if settings.backoff_floor_s().is_none() {
            problems.push(format!(
                "CFN_ONCE_MAX_RECEIVE_COUNT ({}) is too small for a {} s deadline ceiling: a message would reach the DLQ before its deadline unless it waited over {BACKOFF_FLOOR_S_MAX} s between looks; set the queue's maxReceiveCount and this variable to {MAX_RECEIVE_COUNT_DEFAULT} (infra/regional.yaml does)",
                config.max_receive_count, config.deadline_ceiling_s
            ));
        }
        if problems.is_empty() { Ok(config) } else { Err(ConfigError { problems }) }
    }

    /// The settings a deployed handler runs with: this configuration's values and the fixed
    /// retry policies. The simulator builds its settings here too, from the template's
    /// environment.
    pub fn settings(&self) -> Settings {
        Settings {
            region: self.region.clone(),
            role: self.role,
            lease_ms: self.lease_ms,
            skew_ms: self.skew_ms,
            heartbeat_ms: self.heartbeat_ms,
            store_attempts_max: 4,
            store_call_timeout_ms: self.store_timeout_ms,
            store_backoff_base_ms: 50,
            store_backoff_max_ms: 1_000,
            provider_retry_ms: 60_000,
            provider_backoff_base_ms: 200,
            provider_backoff_max_ms: 5_000,
            put: PutPolicy {
                attempts_max: self.put_attempts_max,
                attempt_timeout_ms: self.put_timeout_ms,
                backoff_base_ms: 200,
                backoff_max_ms: 2_000,
            },
            queue_call_timeout_ms: self.sqs_timeout_ms,
            retention_ms: self.retention_days * 86_400_000,
            retry_delay_s_max: self.retry_delay_s_max,
            standby_retry_s: self.standby_retry_s,
            deadline_ceiling_s: self.deadline_ceiling_s,
            deadline_margin_ms: self.deadline_margin_ms,
            max_receive_count: self.max_receive_count,
            control_cache_ms: self.control_cache_ms,
            visibility_timeout_s: self.visibility_timeout_s,
            secondary_delay_s: self.secondary_delay_s,
        }
    }
}

/// Parses `CFN_ONCE_PROVIDER_ENVIRONMENT`: a JSON object whose values are strings, named like
/// environment variables.
fn provider_environment(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    let parsed: serde_json::Value = serde_json::from_str(text)
        .map_err(|_| "is not JSON: expected an object such as {\"TABLE\": \"name\"}".to_owned())?;
    let object = parsed.as_object().ok_or("is not a JSON object: expected {\"NAME\": \"value\", ...}")?;
    let mut environment = std::collections::BTreeMap::new();
    for (name, value) in object {
        let name_ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !name_ok {
            return Err(format!("names {name:?}, which is not a variable name (letters, digits and _)"));
        }
        let Some(value) = value.as_str() else {
            return Err(format!("gives {name} a value that is not a string"));
        };
        environment.insert(name.clone(), value.to_owned());
    }
    Ok(environment)
}

struct Vars<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    problems: &'a mut Vec<String>,
}

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty())
    }

    fn required(&mut self, name: &str, what: &str) -> String {
        self.get(name).unwrap_or_else(|| {
            self.problems.push(format!("{name} is not set: set it to {what}"));
            String::new()
        })
    }

    fn list(&self, name: &str) -> Vec<String> {
        self.get(name)
            .map(|value| value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default()
    }

    fn flag(&mut self, name: &str, default: bool) -> bool {
        match self.get(name).map(|raw| raw.to_ascii_lowercase()) {
            None => default,
            Some(raw) if raw == "true" => true,
            Some(raw) if raw == "false" => false,
            Some(raw) => {
                self.problems.push(format!("{name} is {raw:?}: expected true or false"));
                default
            }
        }
    }

    fn number(&mut self, name: &str, default: u64, min: u64, max: u64) -> u64 {
        let Some(raw) = self.get(name) else {
            return default;
        };
        match raw.parse::<u64>() {
            Ok(value) if (min..=max).contains(&value) => value,
            _ => {
                self.problems.push(format!("{name} is {raw:?}: expected a whole number from {min} to {max}"));
                default
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Config::from_lookup(|name| vars.get(name).cloned())
    }

    const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once";

    #[test]
    fn minimal_configuration_takes_the_defaults() {
        let config = config(&[
            ("AWS_REGION", "us-east-1"),
            ("CFN_ONCE_ROLE", "primary"),
            ("CFN_ONCE_TABLE", "leases"),
            ("CFN_ONCE_TOPIC_ARNS", TOPIC),
        ])
        .expect("valid");
        assert_eq!(
            (config.role, config.table_region.as_str(), &config.control),
            (Role::Primary, "us-east-1", &ControlSource::Table)
        );
        assert_eq!((config.standby_retry_s, config.deadline_margin_ms), (30, DEADLINE_MARGIN_MS_DEFAULT));
        assert_eq!(config.lease_ms, LEASE_MS_DEFAULT);
        assert_eq!(config.heartbeat_ms, LEASE_MS_DEFAULT / 3);
        assert_eq!(config.topic_arns, vec![TOPIC.to_owned()]);
        assert_eq!(config.item_tables, ItemTables::Only(vec![]));
        assert!(config.response_url_allow.is_empty());
    }

    #[test]
    fn functions_route_resource_types_to_this_regions_functions() {
        let base = [
            ("AWS_REGION", "us-east-1"),
            ("CFN_ONCE_ROLE", "primary"),
            ("CFN_ONCE_TABLE", "leases"),
            ("CFN_ONCE_TOPIC_ARNS", TOPIC),
        ];
        let with = |functions: &str| {
            let mut vars = base.to_vec();
            vars.push(("CFN_ONCE_FUNCTIONS", functions));
            config(&vars)
        };
        let routes = with("Custom::Reservation=on-event|is-complete, Custom::Greeting=arn:aws:lambda:us-east-1:123456789012:function:greet")
            .expect("valid")
            .functions;
        assert_eq!(routes.len(), 2);
        assert_eq!(
            (routes[0].resource_type.as_str(), routes[0].on_event.as_str()),
            ("Custom::Reservation", "on-event")
        );
        assert_eq!(routes[0].is_complete.as_ref().map(FunctionRef::as_str), Some("is-complete"));
        assert_eq!(routes[1].is_complete, None);
        assert!(config(&base).expect("valid").functions.is_empty());
        for (bad, says) in [
            ("Custom::X", "is not Custom::Type=on-event"),
            ("AWS::S3::Bucket=f", "is not a custom resource type"),
            ("Custom::X=f,Custom::X=g", "names Custom::X twice"),
            ("Custom::X=a|b|c", "more than two functions"),
            ("Custom::X=arn:aws:lambda:us-west-2:123456789012:function:f", "its own region's copy"),
            ("Custom::X=not a name", "is not a Lambda function name"),
            ("Custom::X=cfn-response:a|b", "answers by itself has no is-complete function"),
            ("Custom::X=cfn-response:", "is not a Lambda function name"),
            ("Custom::X=cfn-response:f", "needs CFN_ONCE_ANSWER_BUCKET"),
        ] {
            let error = with(bad).expect_err(bad).to_string();
            assert!(error.contains(says), "{bad}: {error}");
        }
        assert!(routes.iter().all(|route| !route.answers_itself));
    }

    #[test]
    fn a_function_that_answers_by_itself_is_marked_and_needs_the_answer_bucket() {
        let with = |bucket: &str| {
            config(&[
                ("AWS_REGION", "us-east-1"),
                ("CFN_ONCE_ROLE", "primary"),
                ("CFN_ONCE_TABLE", "leases"),
                ("CFN_ONCE_TOPIC_ARNS", TOPIC),
                ("CFN_ONCE_FUNCTIONS", "Custom::Greeting=cfn-response:greeter,Custom::Reservation=on-event"),
                ("CFN_ONCE_ANSWER_BUCKET", bucket),
            ])
        };
        let config = with("cfn-once-answers-us-east-1").expect("valid");
        assert_eq!(config.answer_bucket.as_deref(), Some("cfn-once-answers-us-east-1"));
        let greeting = &config.functions[0];
        assert_eq!(
            (greeting.resource_type.as_str(), greeting.on_event.as_str(), greeting.answers_itself),
            ("Custom::Greeting", "greeter", true)
        );
        assert_eq!(greeting.is_complete, None);
        assert!(!config.functions[1].answers_itself);
        let error = with("Not_A_Bucket").expect_err("a bad bucket").to_string();
        assert!(error.contains("CFN_ONCE_ANSWER_BUCKET \"Not_A_Bucket\" is not an S3 bucket name"), "{error}");
        assert!(with("").expect_err("no bucket").to_string().contains("needs CFN_ONCE_ANSWER_BUCKET"));
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let error = config(&[
            ("CFN_ONCE_LEASE_MS", "soon"),
            ("CFN_ONCE_PUT_ATTEMPTS_MAX", "0"),
            ("CFN_ONCE_RESPONSE_URL_ALLOW", "ftp://x/"),
            ("CFN_ONCE_TOPIC_ARNS", "not-an-arn"),
            ("CFN_ONCE_CONTROL", "arc"),
            ("CFN_ONCE_ARC_ENDPOINTS", "us-east-1"),
        ])
        .expect_err("invalid");
        let text = error.to_string();
        for expected in [
            "AWS_REGION is not set",
            "CFN_ONCE_TABLE is not set",
            "CFN_ONCE_LEASE_MS is \"soon\": expected a whole number from 1000 to 900000",
            "CFN_ONCE_PUT_ATTEMPTS_MAX is \"0\"",
            "CFN_ONCE_RESPONSE_URL_ALLOW: \"ftp://x/\" must be an http or https URL",
            "CFN_ONCE_TOPIC_ARNS entry \"not-an-arn\" is not an SNS topic ARN",
            "CFN_ONCE_ROLE is not set: set it to primary or secondary",
            "CFN_ONCE_ARC_ENDPOINTS entry \"us-east-1\" is not region=https://endpoint",
            "CFN_ONCE_ARC_ROUTING_CONTROL_ARN is not set",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in {text}");
        }
        assert_eq!(error.problems.len(), 9);
    }

    #[test]
    fn heartbeat_must_be_shorter_than_the_lease_and_the_margin_longer_than_an_answer() {
        let error = config(&[
            ("AWS_REGION", "us-east-1"),
            ("CFN_ONCE_ROLE", "secondary"),
            ("CFN_ONCE_TABLE", "leases"),
            ("CFN_ONCE_TOPIC_ARNS", TOPIC),
            ("CFN_ONCE_LEASE_MS", "5000"),
            ("CFN_ONCE_HEARTBEAT_MS", "5000"),
            ("CFN_ONCE_DEADLINE_MARGIN_MS", "5000"),
        ])
        .expect_err("invalid");
        assert!(error.to_string().contains("must be shorter than CFN_ONCE_LEASE_MS"));
        assert!(
            error
                .to_string()
                .contains("CFN_ONCE_DEADLINE_MARGIN_MS (5000) must exceed the 17000 ms a taker-over needs to answer"),
            "{error}"
        );
    }

    #[test]
    fn the_receive_budget_must_cover_the_deadline_and_the_reserve_is_computed() {
        let error = config(&[
            ("AWS_REGION", "us-east-1"),
            ("CFN_ONCE_ROLE", "primary"),
            ("CFN_ONCE_TABLE", "leases"),
            ("CFN_ONCE_TOPIC_ARNS", TOPIC),
            ("CFN_ONCE_MAX_RECEIVE_COUNT", "10"),
            ("CFN_ONCE_RESERVE_MS", "10000"),
        ])
        .expect_err("invalid");
        let text = error.to_string();
        assert!(text.contains("CFN_ONCE_MAX_RECEIVE_COUNT (10) is too small for a 3600 s deadline ceiling"), "{text}");
        assert!(text.contains("CFN_ONCE_RESERVE_MS is no longer read"), "{text}");
        let shorter = config(&[
            ("AWS_REGION", "us-east-1"),
            ("CFN_ONCE_ROLE", "primary"),
            ("CFN_ONCE_TABLE", "leases"),
            ("CFN_ONCE_TOPIC_ARNS", TOPIC),
            ("CFN_ONCE_MAX_RECEIVE_COUNT", "100"),
            ("CFN_ONCE_DEADLINE_CEILING_S", "600"),
        ])
        .expect("a short ceiling needs fewer receives");
        assert_eq!(shorter.settings().backoff_floor_s(), Some(8));
    }

    #[test]
    fn the_longest_backoff_cannot_be_shorter_than_the_backoff_floor() {
        let with = |delay: &str| {
            config(&[
                ("AWS_REGION", "us-east-1"),
                ("CFN_ONCE_ROLE", "primary"),
                ("CFN_ONCE_TABLE", "leases"),
                ("CFN_ONCE_TOPIC_ARNS", TOPIC),
                ("CFN_ONCE_RETRY_DELAY_S_MAX", delay),
            ])
        };
        let error = with("2").expect_err("a 2 s ceiling under a 4 s floor");
        assert!(
            error.to_string().contains(
                "CFN_ONCE_RETRY_DELAY_S_MAX (2) is shorter than the 4 s backoff floor that keeps a message's receives within CFN_ONCE_MAX_RECEIVE_COUNT (1000) until its deadline; set it to at least 4"
            ),
            "{error}"
        );
        assert!(with("4").is_ok(), "the floor itself is enough");
    }

    #[test]
    fn the_queue_parameters_the_handler_relies_on_are_read() {
        let config = config(&[
            ("AWS_REGION", "us-east-1"),
            ("CFN_ONCE_ROLE", "primary"),
            ("CFN_ONCE_TABLE", "leases"),
            ("CFN_ONCE_TOPIC_ARNS", TOPIC),
            ("CFN_ONCE_VISIBILITY_TIMEOUT_S", "180"),
            ("CFN_ONCE_SECONDARY_DELAY_S", "90"),
        ])
        .expect("valid");
        assert_eq!((config.visibility_timeout_s, config.secondary_delay_s), (180, 90));
        let defaults = super::tests::config(&[
            ("AWS_REGION", "us-east-1"),
            ("CFN_ONCE_ROLE", "primary"),
            ("CFN_ONCE_TABLE", "leases"),
            ("CFN_ONCE_TOPIC_ARNS", TOPIC),
        ])
        .expect("valid");
        assert_eq!(
            (defaults.visibility_timeout_s, defaults.secondary_delay_s),
            (VISIBILITY_TIMEOUT_S_DEFAULT, SECONDARY_DELAY_S_DEFAULT),
            "unset, every record counts as one a crash could hide past its margin"
        );
    }

    #[test]
    fn providers_get_settings_of_their_own() {
        let with = |environment: &str| {
            config(&[
                ("AWS_REGION", "us-east-1"),
                ("CFN_ONCE_ROLE", "primary"),
                ("CFN_ONCE_TABLE", "leases"),
                ("CFN_ONCE_TOPIC_ARNS", TOPIC),
                ("CFN_ONCE_PROVIDER_ENVIRONMENT", environment),
            ])
        };
        let config = with(r#"{"POLICY_TABLE": "bucket-policies", "_X1": ""}"#).expect("valid");
        assert_eq!(config.provider_environment.get("POLICY_TABLE").map(String::as_str), Some("bucket-policies"));
        assert_eq!(config.provider_environment.len(), 2);
        for (bad, expected) in [
            ("POLICY_TABLE=x", "CFN_ONCE_PROVIDER_ENVIRONMENT is not JSON"),
            ("[1]", "is not a JSON object"),
            (r#"{"TABLE": 5}"#, "gives TABLE a value that is not a string"),
            (r#"{"my-table": "x"}"#, "names \"my-table\", which is not a variable name"),
        ] {
            let error = with(bad).expect_err(bad).to_string();
            assert!(error.contains(expected), "{bad}: {error}");
        }
    }

    #[test]
    fn arc_control_is_configured_with_its_endpoints() {
        let config = config(&[
            ("AWS_REGION", "us-west-2"),
            ("CFN_ONCE_ROLE", "primary"),
            ("CFN_ONCE_TABLE", "leases"),
            ("CFN_ONCE_TOPIC_ARNS", TOPIC),
            ("CFN_ONCE_CONTROL", "arc"),
            ("CFN_ONCE_ARC_ENDPOINTS", "us-east-1=https://a.example/v1, ap-southeast-2=https://b.example/v1"),
            ("CFN_ONCE_ARC_ROUTING_CONTROL_ARN", "arn:aws:route53-recovery-control::1:controlpanel/p/routingcontrol/r"),
        ])
        .expect("valid");
        let ControlSource::Arc { endpoints, routing_control_arn } = config.control else { panic!("expected ARC") };
        assert_eq!(endpoints.len(), 2);
        assert_eq!(endpoints[1], ArcEndpoint { region: "ap-southeast-2".into(), url: "https://b.example/v1".into() });
        assert!(routing_control_arn.ends_with("routingcontrol/r"));
    }
}
