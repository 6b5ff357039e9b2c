//! The deployed parameters, read from `infra/regional.yaml` itself.
//!
//! A guarantee shown in the simulator holds on AWS only if the simulator runs what the templates
//! deploy: the queue's `maxReceiveCount` and visibility timeout, the function timeout, the
//! secondary's delay, and the handler settings its environment implies. The template is compiled
//! into the simulator (`include_str!`), its intrinsic functions are resolved here for each role
//! and each allowed function timeout, and the handler's settings are built by the same code the
//! deployed handler runs (`Config::from_lookup` on the function's environment, then
//! `Config::settings`). Changing a value in the template changes the simulation; there is no
//! second copy of any of them. The template tests read the template through this module too.

use std::collections::BTreeMap;

use cfn_once_core::config::Config;
use cfn_once_core::settings::Settings;
use cfn_once_core::vocabulary::Role;
use serde_norway::Value;

/// The regional template, as deployed.
pub const REGIONAL_TEMPLATE: &str = include_str!("../../../infra/regional.yaml");

/// Where the parameters come from, for the simulator's report.
pub const SOURCE: &str = "infra/regional.yaml";

/// Topic ARNs for the template's required `ServiceTopicArns` parameter (a CommaDelimitedList):
/// one ServiceToken topic per customer region, as `samconfig.toml` deploys them.
pub const TOPIC_ARNS: &str = "arn:aws:sns:us-east-2:123456789012:cfn-once-service-token,\
arn:aws:sns:eu-west-1:123456789012:cfn-once-service-token,\
arn:aws:sns:ap-southeast-2:123456789012:cfn-once-service-token";

/// One allowed function timeout and the queue visibility timeout the template pairs with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionTimeout {
    pub timeout_s: u64,
    pub visibility_s: u64,
}

/// What the regional template deploys, as far as the protocol's liveness depends on it.
#[derive(Debug, Clone)]
pub struct Deployed {
    /// The queue's redrive `maxReceiveCount`.
    pub max_receive_count: u32,
    /// Every allowed function timeout with its visibility timeout.
    pub function_timeouts: Vec<FunctionTimeout>,
    /// The function timeout the template defaults to.
    pub default_function_timeout: FunctionTimeout,
    /// The secondary queue's `DelaySeconds` with the template's default parameters.
    pub secondary_delay_s: u64,
    /// The event source mapping: records per invocation (`BatchSize`).
    pub batch_size: usize,
    /// The event source mapping's `MaximumBatchingWindowInSeconds` (0 when the template sets
    /// none, as SQS mappings of batches up to 10 default to).
    pub batching_window_s: u64,
    /// The event source mapping's `ScalingConfig.MaximumConcurrency`: invocations at once.
    pub maximum_concurrency: usize,
    /// The function's environment, resolved per role with the default function timeout, with
    /// the variables Lambda derives from its `LoggingConfig` (`AWS_LAMBDA_LOG_FORMAT`,
    /// `AWS_LAMBDA_LOG_LEVEL`).
    pub environment: BTreeMap<&'static str, BTreeMap<String, String>>,
    /// The same for every allowed function timeout, by role and timeout in seconds: some
    /// variables (the visibility timeout) follow it.
    pub environment_by_timeout: BTreeMap<(&'static str, u64), BTreeMap<String, String>>,
}

impl Deployed {
    /// Reads the compiled-in regional template.
    pub fn regional() -> Result<Self, String> {
        Self::parse(REGIONAL_TEMPLATE)
    }

    /// Reads a regional template's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let template: Value = serde_norway::from_str(text).map_err(|e| format!("{SOURCE} is not YAML: {e}"))?;
        let template = Template(&template);
        let queue = template.resource("Queue")?;
        let function = template.resource("Function")?;
        let parameter = template.get(&["Parameters", "FunctionTimeoutSeconds"])?;
        let allowed = parameter
            .get("AllowedValues")
            .and_then(Value::as_sequence)
            .ok_or("FunctionTimeoutSeconds has no AllowedValues")?;
        let mut function_timeouts = Vec::new();
        for value in allowed {
            let choice = scalar(value).ok_or("a FunctionTimeoutSeconds value is not a scalar")?;
            let resolver = template.resolver("primary", Some(&choice));
            let timeout_s = number(&resolver.resolve(function.get("Timeout").ok_or("Function has no Timeout")?)?)?;
            let visibility_s =
                number(&resolver.resolve(queue.get("VisibilityTimeout").ok_or("Queue has no VisibilityTimeout")?)?)?;
            function_timeouts.push(FunctionTimeout { timeout_s, visibility_s });
        }
        let defaults = template.resolver("secondary", None);
        let default_timeout_s = number(&defaults.resolve(function.get("Timeout").ok_or("Function has no Timeout")?)?)?;
        let default_function_timeout = *function_timeouts
            .iter()
            .find(|t| t.timeout_s == default_timeout_s)
            .ok_or("the default function timeout is not among the allowed ones")?;
        let redrive = queue.get("RedrivePolicy").ok_or("Queue has no RedrivePolicy")?;
        let max_receive_count =
            number(&defaults.resolve(redrive.get("maxReceiveCount").ok_or("RedrivePolicy has no maxReceiveCount")?)?)?;
        let secondary_delay_s =
            number(&defaults.resolve(queue.get("DelaySeconds").ok_or("Queue has no DelaySeconds")?)?)?;
        let mapping = function
            .get("Events")
            .and_then(|events| events.get("Requests"))
            .and_then(|event| event.get("Properties"))
            .ok_or("Function has no Events.Requests event source mapping")?;
        let batch_size = number(&defaults.resolve(mapping.get("BatchSize").ok_or("the mapping has no BatchSize")?)?)?;
        let batching_window_s = match mapping.get("MaximumBatchingWindowInSeconds") {
            Some(window) => number(&defaults.resolve(window)?)?,
            None => 0,
        };
        let maximum_concurrency = number(
            &defaults.resolve(
                mapping
                    .get("ScalingConfig")
                    .and_then(|scaling| scaling.get("MaximumConcurrency"))
                    .ok_or("the mapping has no ScalingConfig.MaximumConcurrency")?,
            )?,
        )?;
        let variables = function
            .get("Environment")
            .and_then(|e| e.get("Variables"))
            .and_then(Value::as_mapping)
            .ok_or("Function has no Environment.Variables")?;
        // Lambda sets AWS_LAMBDA_LOG_FORMAT and AWS_LAMBDA_LOG_LEVEL from the LoggingConfig.
        let logging = function.get("LoggingConfig");
        let lambda_sets = [("LogFormat", "AWS_LAMBDA_LOG_FORMAT"), ("ApplicationLogLevel", "AWS_LAMBDA_LOG_LEVEL")];
        let resolve_environment = |role: &str, timeout: Option<&str>| -> Result<BTreeMap<String, String>, String> {
            let resolver = template.resolver(role, timeout);
            let mut resolved = BTreeMap::new();
            for (property, variable) in lambda_sets {
                if let Some(value) = logging.and_then(|l| l.get(property)) {
                    let value =
                        scalar(&resolver.resolve(value)?).ok_or(format!("LoggingConfig.{property} is not a scalar"))?;
                    resolved.insert(variable.to_owned(), value);
                }
            }
            for (name, value) in variables {
                let name = name.as_str().ok_or("an environment variable's name is not a string")?;
                if let Some(value) = scalar(&resolver.resolve(value)?) {
                    resolved.insert(name.to_owned(), value);
                }
            }
            Ok(resolved)
        };
        let mut environment = BTreeMap::new();
        let mut environment_by_timeout = BTreeMap::new();
        for role in ["primary", "secondary"] {
            environment.insert(role, resolve_environment(role, None)?);
            for timeout in &function_timeouts {
                let choice = timeout.timeout_s.to_string();
                environment_by_timeout.insert((role, timeout.timeout_s), resolve_environment(role, Some(&choice))?);
            }
        }
        Ok(Self {
            max_receive_count: u32::try_from(max_receive_count).map_err(|e| e.to_string())?,
            function_timeouts,
            default_function_timeout,
            secondary_delay_s,
            batch_size: usize::try_from(batch_size).map_err(|e| e.to_string())?,
            batching_window_s,
            maximum_concurrency: usize::try_from(maximum_concurrency).map_err(|e| e.to_string())?,
            environment,
            environment_by_timeout,
        })
    }

    /// The handler's configuration in `region` with `role`: the template's environment for the
    /// function, as Lambda would set it, read by the handler's own parser.
    pub fn config(&self, role: Role, region: &str) -> Result<Config, String> {
        let mut environment = self.environment.get(role.as_str()).cloned().unwrap_or_default();
        environment.insert("AWS_REGION".into(), region.into());
        Config::from_lookup(|name| environment.get(name).cloned()).map_err(|e| e.to_string())
    }

    /// The protocol settings the deployed handler in `region` with `role` runs with.
    pub fn settings(&self, role: Role, region: &str) -> Result<Settings, String> {
        self.config(role, region).map(|config| config.settings())
    }

    /// The settings of a deployment with `role` in `region` whose FunctionTimeoutSeconds is
    /// `timeout_s` (one of the allowed values).
    pub fn settings_with_timeout(&self, role: Role, region: &str, timeout_s: u64) -> Result<Settings, String> {
        let mut environment = self
            .environment_by_timeout
            .get(&(role.as_str(), timeout_s))
            .cloned()
            .ok_or_else(|| format!("{timeout_s} s is not an allowed FunctionTimeoutSeconds"))?;
        environment.insert("AWS_REGION".into(), region.into());
        let config = Config::from_lookup(|name| environment.get(name).cloned()).map_err(|e| e.to_string())?;
        Ok(config.settings())
    }

    /// The one-line summary `make simulate` prints before it starts.
    pub fn summary(&self) -> String {
        let FunctionTimeout { timeout_s, visibility_s } = self.default_function_timeout;
        format!(
            "sqs: maxReceiveCount={} visibility={visibility_s}s function-timeout={timeout_s}s secondary-delay={}s batch-size={} batching-window={}s concurrency={} (from {SOURCE})",
            self.max_receive_count,
            self.secondary_delay_s,
            self.batch_size,
            self.batching_window_s,
            self.maximum_concurrency
        )
    }
}

/// A parsed template and the intrinsic functions the regional template uses.
struct Template<'a>(&'a Value);

impl<'a> Template<'a> {
    fn get(&self, path: &[&str]) -> Result<&'a Value, String> {
        let mut value = self.0;
        for key in path {
            value = value.get(*key).ok_or_else(|| format!("{SOURCE} has no {}", path.join(".")))?;
        }
        Ok(value)
    }

    fn resource(&self, name: &str) -> Result<&'a Value, String> {
        self.get(&["Resources", name, "Properties"])
    }

    /// Resolves for a deployment with `role` and, if given, this FunctionTimeoutSeconds;
    /// every other parameter takes its default.
    fn resolver(&self, role: &str, function_timeout: Option<&str>) -> Resolver<'a> {
        let mut parameters = BTreeMap::from([("Role".to_owned(), role.to_owned())]);
        parameters.insert("ServiceTopicArns".into(), TOPIC_ARNS.into());
        if let Some(timeout) = function_timeout {
            parameters.insert("FunctionTimeoutSeconds".into(), timeout.into());
        }
        Resolver { template: self.0, parameters }
    }
}

struct Resolver<'a> {
    template: &'a Value,
    parameters: BTreeMap<String, String>,
}

impl Resolver<'_> {
    /// Evaluates `!Ref` (parameters), `!FindInMap`, `!If`, `!Equals` and `!Join` over `value`.
    fn resolve(&self, value: &Value) -> Result<Value, String> {
        let Value::Tagged(tagged) = value else {
            return Ok(value.clone());
        };
        let tag = tagged.tag.to_string();
        match tag.trim_start_matches('!') {
            "Ref" => {
                let name = tagged.value.as_str().ok_or("!Ref of a non-string")?;
                let value = self.parameter(name)?;
                if self.is_list(name) {
                    // CloudFormation splits a CommaDelimitedList at its commas and trims each
                    // value; a `Ref` to it is the list.
                    let items = value.split(',').map(|item| Value::String(item.trim().to_owned())).collect();
                    return Ok(Value::Sequence(items));
                }
                Ok(Value::String(value))
            }
            "FindInMap" => {
                let args = self.arguments(&tagged.value, 3)?;
                let keys: Vec<String> = args.iter().map(|a| scalar(a).unwrap_or_default()).collect();
                self.template
                    .get("Mappings")
                    .and_then(|m| m.get(keys[0].as_str()))
                    .and_then(|m| m.get(keys[1].as_str()))
                    .and_then(|m| m.get(keys[2].as_str()))
                    .cloned()
                    .ok_or_else(|| format!("no mapping {}", keys.join(".")))
            }
            "If" => {
                let args = tagged.value.as_sequence().filter(|a| a.len() == 3).ok_or("!If needs three arguments")?;
                let condition = args[0].as_str().ok_or("!If's condition is not a name")?;
                let chosen = if self.condition(condition)? { &args[1] } else { &args[2] };
                self.resolve(chosen)
            }
            "Equals" => {
                let args = self.arguments(&tagged.value, 2)?;
                Ok(Value::Bool(scalar(&args[0]) == scalar(&args[1])))
            }
            "Join" => {
                let args = self.arguments(&tagged.value, 2)?;
                let delimiter = scalar(&args[0]).ok_or("!Join's delimiter is not a string")?;
                let items = args[1].as_sequence().ok_or("!Join's second argument is not a list")?;
                let items: Option<Vec<String>> = items.iter().map(scalar).collect();
                Ok(Value::String(items.ok_or("!Join of a list with a non-scalar value")?.join(&delimiter)))
            }
            // `!Sub`, `!GetAtt` and the rest name deployed resources, which no parameter of the
            // protocol depends on: the value is left out.
            _ => Ok(Value::Null),
        }
    }

    fn arguments(&self, value: &Value, count: usize) -> Result<Vec<Value>, String> {
        let args = value.as_sequence().filter(|a| a.len() == count).ok_or("wrong number of arguments")?;
        args.iter().map(|a| self.resolve(a)).collect()
    }

    fn parameter(&self, name: &str) -> Result<String, String> {
        if let Some(value) = self.parameters.get(name) {
            return Ok(value.clone());
        }
        if name.starts_with("AWS::") {
            return Ok(String::new());
        }
        self.template
            .get("Parameters")
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("Default"))
            .and_then(scalar)
            .ok_or_else(|| format!("parameter {name} has no default"))
    }

    /// Whether the template declares parameter `name` as a CommaDelimitedList.
    fn is_list(&self, name: &str) -> bool {
        self.template
            .get("Parameters")
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("Type"))
            .and_then(Value::as_str)
            .is_some_and(|kind| kind == "CommaDelimitedList")
    }

    fn condition(&self, name: &str) -> Result<bool, String> {
        let definition =
            self.template.get("Conditions").and_then(|c| c.get(name)).ok_or_else(|| format!("no condition {name}"))?;
        match self.resolve(definition)? {
            Value::Bool(value) => Ok(value),
            // Conditions over other conditions (`!Not`, `!And`) concern optional resources
            // only (alarm topics, item tables): not there.
            _ => Ok(false),
        }
    }
}

/// A YAML scalar as text.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn number(value: &Value) -> Result<u64, String> {
    scalar(value).and_then(|text| text.parse().ok()).ok_or_else(|| format!("{value:?} is not a whole number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_regional_template_is_read() {
        let deployed = Deployed::regional().expect("the template parses");
        assert!(deployed.function_timeouts.len() >= 2, "{deployed:?}");
        assert!(deployed.function_timeouts.iter().all(|t| t.visibility_s >= t.timeout_s), "{deployed:?}");
        assert!(deployed.secondary_delay_s > 0);
        for role in [Role::Primary, Role::Secondary] {
            let settings = deployed.settings(role, "us-east-1").expect("the template's environment is valid");
            assert_eq!(settings.role, role);
            assert_eq!(settings.max_receive_count, deployed.max_receive_count);
        }
    }

    #[test]
    fn lambda_s_logging_variables_come_from_the_logging_config() {
        let deployed = Deployed::regional().expect("the template parses");
        let environment = &deployed.environment["primary"];
        assert_eq!(environment.get("AWS_LAMBDA_LOG_LEVEL").map(String::as_str), Some("INFO"));
        assert_eq!(environment.get("AWS_LAMBDA_LOG_FORMAT").map(String::as_str), Some("JSON"));
    }

    #[test]
    fn the_handler_accepts_every_service_topic_the_template_is_given() {
        let deployed = Deployed::regional().expect("the template parses");
        for role in [Role::Primary, Role::Secondary] {
            let environment = &deployed.environment[role.as_str()];
            assert_eq!(environment.get("CFN_ONCE_TOPIC_ARNS").map(String::as_str), Some(TOPIC_ARNS));
            let config = deployed.config(role, "us-east-1").expect("the template's environment is valid");
            let expected: Vec<&str> = TOPIC_ARNS.split(',').collect();
            assert_eq!(config.topic_arns, expected, "one accepted topic per customer region");
        }
    }

    #[test]
    fn a_changed_template_changes_what_is_read() {
        let changed = REGIONAL_TEMPLATE.replacen("Default: 5\n", "Default: 75\n", 1);
        assert_ne!(changed, REGIONAL_TEMPLATE, "the secondary delay's default moved; update this test");
        assert_eq!(Deployed::parse(&changed).expect("parses").secondary_delay_s, 75);
    }
}
