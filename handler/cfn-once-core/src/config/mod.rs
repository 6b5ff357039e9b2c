//! Configuration, read from the environment once at start-up.
//!
//! Nothing else in cfn-once reads the environment (the AWS SDK reads its own variables, such as
//! `AWS_ENDPOINT_URL`, when the binary loads the SDK configuration). Every missing or malformed
//! variable is reported in one error, each with what it should be. It lives in the core, beside
//! the protocol's [`Settings`], so that the simulator derives its
//! settings from the same variables and defaults a deployed handler does ([`Config::settings`]).
//! Settings are built from a configuration, never the other way round: `settings` knows nothing
//! of the environment.
//!
//! The parts: this file holds the [`Config`] and reads it (`Config::from_lookup`); `defaults`
//! names every default, `vars` reads one variable (trimmed, ranged, every problem kept),
//! `functions` and `control_source` parse the two variables with a grammar of their own, and `checks`
//! holds the checks across variables.

use crate::aws_names::{ItemTables, TableRef};
use crate::put::PutPolicy;
use crate::response_url::AllowedPrefix;
use crate::settings::Settings;
use crate::vocabulary::Role;

mod checks;
mod control_source;
mod defaults;
mod functions;
mod vars;

pub use control_source::{ArcEndpoint, ControlSource};
pub use defaults::*;
use functions::function_routes;
pub use functions::{ANSWERS_ITSELF, FunctionRoute};
use vars::Vars;

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
    /// `CFN_ONCE_PRIVILEGED_TOPIC_ARNS` (default none): the topics of `topic_arns` whose
    /// requests are privileged, comma-separated. Only a privileged request may take over an
    /// existing item with `Custom::DynamoDBItem`'s `Adopt: "true"` or reach a `CFN_ONCE_FUNCTIONS`
    /// route; any other is answered FAILED saying so. None named: every accepted request is
    /// privileged. Named: a bare request (raw delivery, no topic) is not. Each must be one of
    /// `topic_arns`.
    pub privileged_topic_arns: Vec<String>,
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
    /// `CFN_ONCE_SECONDARY_DELAY_S` (default 5): the secondary queue's `DelaySeconds`. A primary
    /// counts the requests whose deadline comes too soon for the secondary to answer them
    /// (`ShortServiceTimeout`): they have no failover. The regional template sets it.
    pub secondary_delay_s: u64,
    /// `CFN_ONCE_HEAD_START_S` (default 60): the longest the secondary leaves a request nobody
    /// has started to the primary, from when it was sent; a request with less than five times
    /// this gets a fifth of its time (`Settings::head_start_ms`). The regional template sets it.
    pub head_start_s: u64,
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
    /// `CFN_ONCE_HANDLER_TIMEOUT_S` (default none): this handler's own Lambda timeout, in
    /// seconds (the regional template passes `FunctionTimeoutSeconds`). With it, the handler
    /// refuses to start when a `CFN_ONCE_FUNCTIONS` function's timeout does not fit in one of
    /// its invocations with the time kept to answer, since such a function could be cut off
    /// while it may still be running. Without it, that is found only when a request runs.
    pub handler_timeout_s: Option<u64>,
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
        let privileged_topic_arns = vars.list("CFN_ONCE_PRIVILEGED_TOPIC_ARNS");
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
        let head_start_s = vars.number("CFN_ONCE_HEAD_START_S", HEAD_START_S_DEFAULT, 0, 900);
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
        let handler_timeout_s =
            vars.get("CFN_ONCE_HANDLER_TIMEOUT_S").map(|_| vars.number("CFN_ONCE_HANDLER_TIMEOUT_S", 0, 1, 900));
        let provider_environment = match vars.get("CFN_ONCE_PROVIDER_ENVIRONMENT") {
            None => std::collections::BTreeMap::new(),
            Some(text) => provider_environment(&text).unwrap_or_else(|why| {
                vars.problems.push(format!("CFN_ONCE_PROVIDER_ENVIRONMENT {why}"));
                std::collections::BTreeMap::new()
            }),
        };

        let config = Self {
            region,
            role,
            table_name,
            table_region,
            control,
            control_cache_ms,
            topic_arns,
            privileged_topic_arns,
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
            head_start_s,
            provider_environment,
            functions,
            answer_bucket,
            handler_timeout_s,
        };
        problems.extend(checks::problems(&config, lookup("CFN_ONCE_RESERVE_MS").is_some()));
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
            head_start_s: self.head_start_s,
            proportioned_margins: true,
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

#[cfg(test)]
mod tests;
