//! The CloudFormation templates in `infra/`, parsed and held to the properties that matter.
//! cfn-lint, `sam validate --lint` and checkov check them generally (`make lint-templates`);
//! these tests check what cfn-once itself relies on.

use cfn_once::adapters::dynamodb_lease::KEY_ATTRIBUTES;
use cfn_once_core::vocabulary::Role;
use cfn_once_sim::deployed::{Deployed, FunctionTimeout};
use cfn_once_tests::workspace_root;
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub(crate) use crate::rules::{Stack, rule_names, template};

// The production account's rules, one file each: who may touch the queues and the role's reach, the alarms
// and who they page, and the deploy-time traps (names, concurrency, the secondary's delay).
mod access;
mod alarms;
mod deploy;

fn resources<'a>(template: &'a Value, kind: &str) -> Vec<(&'a String, &'a Value)> {
    template["Resources"].as_object().expect("Resources").iter().filter(|(_, r)| r["Type"] == kind).collect()
}

fn one<'a>(template: &'a Value, kind: &str) -> &'a Value {
    let found = resources(template, kind);
    assert_eq!(found.len(), 1, "expected one {kind}");
    found[0].1
}

/// Every (actions, resource) statement of a role's inline policies.
fn statements(role: &Value) -> Vec<(Vec<String>, Value)> {
    let mut found = Vec::new();
    for policy in role["Properties"]["Policies"].as_array().expect("Policies") {
        // A conditional policy is `Fn::If [condition, policy, AWS::NoValue]`.
        let policy = policy.get("Fn::If").map_or(policy, |branches| &branches[1]);
        for statement in policy["PolicyDocument"]["Statement"].as_array().expect("Statement") {
            let actions = match &statement["Action"] {
                Value::String(action) => vec![action.clone()],
                Value::Array(actions) => actions.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
                other => panic!("unexpected Action {other}"),
            };
            found.push((actions, statement["Resource"].clone()));
        }
    }
    found
}

#[test]
fn the_lease_table_is_mrsc_with_a_witness_and_no_ttl() {
    let template = template("lease-table.yaml");
    let table = one(&template, "AWS::DynamoDB::GlobalTable");
    let properties = &table["Properties"];
    assert_eq!(
        properties["MultiRegionConsistency"], "STRONG",
        "only MRSC makes a conditional write a cross-region arbiter"
    );
    assert_eq!(properties["GlobalTableWitnesses"].as_array().map(Vec::len), Some(1), "two replicas plus a witness");
    assert_eq!(properties["Replicas"].as_array().map(Vec::len), Some(2));
    assert!(properties.get("TimeToLiveSpecification").is_none(), "MRSC tables have no TTL");
    let text = std::fs::read_to_string(workspace_root().join("infra/lease-table.yaml")).expect("read");
    assert!(!text.contains("TimeToLive"), "no TTL anywhere in the template");
    let (pk, sk) = KEY_ATTRIBUTES;
    assert_eq!(
        properties["KeySchema"],
        json!([{"AttributeName": pk, "KeyType": "HASH"}, {"AttributeName": sk, "KeyType": "RANGE"}])
    );
}

#[test]
fn the_sweeper_is_scheduled_and_may_only_scan_and_delete() {
    let template = template("lease-table.yaml");
    let sweeper = one(&template, "AWS::Serverless::Function");
    assert_eq!(sweeper["Properties"]["Environment"]["Variables"]["CFN_ONCE_MODE"], "sweeper");
    let events: Vec<&Value> = sweeper["Properties"]["Events"].as_object().expect("Events").values().collect();
    assert!(
        events.iter().any(|e| matches!(e["Type"].as_str(), Some("Schedule" | "ScheduleV2"))),
        "a schedule triggers it"
    );
    let role = one(&template, "AWS::IAM::Role");
    let dynamodb: Vec<_> =
        statements(role).into_iter().filter(|(actions, _)| actions[0].starts_with("dynamodb:")).collect();
    assert_eq!(
        dynamodb,
        vec![(
            vec!["dynamodb:Scan".to_owned(), "dynamodb:DeleteItem".to_owned()],
            json!({"Fn::GetAtt": ["LeaseTable", "Arn"]})
        )]
    );
}

/// The queues and the handler are one design: a copy may reach the DLQ only when
/// nobody can be answered or its deadline has passed. These hold the template to it, reading it
/// the way the simulator does (`cfn_once_sim::deployed`), so both see the same values.
#[test]
fn the_receive_limit_and_the_handler_agree() {
    let deployed = Deployed::regional().expect("infra/regional.yaml");
    let template = template("regional.yaml");
    let limit = json!({"Fn::FindInMap": ["Queue", "Redrive", "MaxReceiveCount"]});
    let queue = &template["Resources"]["Queue"]["Properties"];
    assert_eq!(queue["RedrivePolicy"]["maxReceiveCount"], limit, "the queue's limit is the mapped value");
    let function = one(&template, "AWS::Serverless::Function");
    assert_eq!(
        function["Properties"]["Environment"]["Variables"]["CFN_ONCE_MAX_RECEIVE_COUNT"], limit,
        "the handler is told the same value"
    );
    for role in [Role::Primary, Role::Secondary] {
        let settings = deployed.settings(role, "us-east-1").expect("the template configures the handler");
        assert_eq!(settings.max_receive_count, deployed.max_receive_count);
        let needed = settings.receives_needed().expect("a backoff floor exists for this limit");
        assert!(
            needed <= deployed.max_receive_count,
            "{needed} receives before the deadline, but the queue allows {}",
            deployed.max_receive_count
        );
    }
}

#[test]
fn a_crashed_invocation_leaves_time_to_answer() {
    let deployed = Deployed::regional().expect("infra/regional.yaml");
    let settings = deployed.settings(Role::Primary, "us-east-1").expect("the template configures the handler");
    let deadline_s = settings.deadline_ceiling_s;
    for FunctionTimeout { timeout_s, visibility_s } in deployed.function_timeouts {
        assert!(visibility_s >= timeout_s, "Lambda requires visibility >= the function timeout ({timeout_s} s)");
        // A Lambda killed at its timeout hides the message for the visibility timeout; then a
        // whole new invocation must still fit before the deadline.
        assert!(
            timeout_s + visibility_s + timeout_s <= deadline_s,
            "timeout {timeout_s} s with visibility {visibility_s} s leaves no time before a {deadline_s} s deadline"
        );
        assert!(timeout_s * 1_000 > settings.reserve_ms(), "a {timeout_s} s invocation is all reserve");
    }
    let template = template("regional.yaml");
    let function = one(&template, "AWS::Serverless::Function");
    assert_eq!(function["Properties"]["Timeout"], json!({"Ref": "FunctionTimeoutSeconds"}));
}

/// A function with providers of its own deploys from the same template: extra managed policies
/// for its role and settings for its providers, both parameters, both empty by default.
#[test]
fn a_function_of_your_own_gets_its_policies_and_settings_from_parameters() {
    let template = template("regional.yaml");
    let parameters = &template["Parameters"];
    assert_eq!(
        (
            parameters["ExtraManagedPolicyArns"]["Type"].as_str(),
            parameters["ExtraManagedPolicyArns"]["Default"].as_str()
        ),
        (Some("CommaDelimitedList"), Some(""))
    );
    assert_eq!(parameters["ProviderEnvironment"]["Default"].as_str(), Some("{}"));
    assert_eq!(
        template["Conditions"]["HasExtraManagedPolicies"],
        json!({"Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "ExtraManagedPolicyArns"}]}, ""]}]})
    );
    let variables = &one(&template, "AWS::Serverless::Function")["Properties"]["Environment"]["Variables"];
    assert_eq!(variables["CFN_ONCE_PROVIDER_ENVIRONMENT"], json!({"Ref": "ProviderEnvironment"}));
    // The default parses: the stock function starts with it.
    let deployed = Deployed::regional().expect("infra/regional.yaml");
    let config = deployed.config(Role::Primary, "us-east-1").expect("the template configures the handler");
    assert!(config.provider_environment.is_empty());
}

/// The handler shortens the visibility of records near their deadline only if it knows how long
/// a crash would hide them, and counts requests without failover only if it knows the
/// secondary's delay: both come from the same values as the queues'.
#[test]
fn the_handler_knows_the_queues_visibility_and_the_secondarys_delay() {
    let template = template("regional.yaml");
    let variables = &one(&template, "AWS::Serverless::Function")["Properties"]["Environment"]["Variables"];
    let queue = &template["Resources"]["Queue"]["Properties"];
    assert_eq!(variables["CFN_ONCE_VISIBILITY_TIMEOUT_S"], queue["VisibilityTimeout"], "the queue's own mapping");
    assert_eq!(variables["CFN_ONCE_SECONDARY_DELAY_S"], json!({"Ref": "SecondaryDelaySeconds"}));
    assert_eq!(variables["CFN_ONCE_HEAD_START_S"], json!({"Ref": "HeadStartSeconds"}));
    // The handler checks at start that its functions fit in its own timeout.
    assert_eq!(variables["CFN_ONCE_HANDLER_TIMEOUT_S"], json!({"Ref": "FunctionTimeoutSeconds"}));
    let deployed = Deployed::regional().expect("infra/regional.yaml");
    let settings = deployed.settings(Role::Secondary, "us-west-2").expect("the template configures the handler");
    assert_eq!(settings.visibility_timeout_s, deployed.default_function_timeout.visibility_s);
    assert_eq!(settings.secondary_delay_s, deployed.secondary_delay_s);
    // The deployed delay and head start leave failover to a ServiceTimeout of 30 s.
    assert!(settings.failover_minimum_s().is_some_and(|seconds| seconds <= 30), "{:?}", settings.failover_minimum_s());
}

#[test]
fn the_queue_redrives_to_its_dlq_and_the_secondary_delay_is_a_parameter() {
    let template = template("regional.yaml");
    let queue = &template["Resources"]["Queue"]["Properties"];
    assert_eq!(queue["RedrivePolicy"]["deadLetterTargetArn"], json!({"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}));
    assert_eq!(
        queue["VisibilityTimeout"],
        json!({"Fn::FindInMap": ["Timeouts", {"Ref": "FunctionTimeoutSeconds"}, "Visibility"]})
    );
    assert_eq!(queue["DelaySeconds"], json!({"Fn::If": ["IsSecondary", {"Ref": "SecondaryDelaySeconds"}, 0]}));
    assert_eq!(template["Conditions"]["IsSecondary"], json!({"Fn::Equals": [{"Ref": "Role"}, "secondary"]}));
    let delay = &template["Parameters"]["SecondaryDelaySeconds"];
    assert_eq!(
        (delay["MinValue"].as_u64(), delay["MaxValue"].as_u64()),
        (Some(1), Some(900)),
        "SQS's DelaySeconds range, but never 0: the primary must see each copy first"
    );
}

#[test]
fn the_function_reports_batch_item_failures_and_is_built_by_cargo_lambda() {
    let template = template("regional.yaml");
    let function = one(&template, "AWS::Serverless::Function");
    let properties = &function["Properties"];
    assert_eq!(
        (properties["Runtime"].as_str(), &properties["Architectures"]),
        (Some("provided.al2023"), &json!(["arm64"]))
    );
    assert_eq!(function["Metadata"]["BuildMethod"], "rust-cargolambda");
    assert_eq!(function["Metadata"]["BuildProperties"]["Binary"], "cfn-once-lambda");
    assert_eq!(properties["LoggingConfig"]["LogFormat"], "JSON");
    let events: Vec<&Value> = properties["Events"].as_object().expect("Events").values().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["Type"], "SQS");
    assert_eq!(events[0]["Properties"]["Queue"], json!({"Fn::GetAtt": ["Queue", "Arn"]}));
    assert_eq!(events[0]["Properties"]["FunctionResponseTypes"], json!(["ReportBatchItemFailures"]));
    assert_eq!(events[0]["Properties"]["ScalingConfig"]["MaximumConcurrency"], json!({"Ref": "MaximumConcurrency"}));
}

/// One statement of a role's inline policies.
#[derive(Debug, PartialEq)]
struct Grant {
    template: String,
    role: String,
    /// The condition a conditional policy (`Fn::If`) depends on.
    condition: Option<String>,
    effect: String,
    actions: Vec<String>,
    resource: Value,
}

fn grant(
    template: &str,
    role: &str,
    condition: Option<&str>,
    effect: &str,
    actions: &[&str],
    resource: Value,
) -> Grant {
    Grant {
        template: template.to_owned(),
        role: role.to_owned(),
        condition: condition.map(str::to_owned),
        effect: effect.to_owned(),
        actions: actions.iter().map(|action| (*action).to_owned()).collect(),
        resource,
    }
}

/// The actions of a policy statement; a `NotAction` statement's as `not <action>`.
fn statement_actions(statement: &Value) -> Vec<String> {
    let (key, prefix) = if statement.get("NotAction").is_some() { ("NotAction", "not ") } else { ("Action", "") };
    let names: Vec<String> = match &statement[key] {
        Value::String(action) => vec![action.clone()],
        Value::Array(actions) => actions.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        other => panic!("unexpected {key} {other}"),
    };
    names.into_iter().map(|name| format!("{prefix}{name}")).collect()
}

/// Every permission of every role in `infra/`, listed: a change to any of them fails here and
/// must be reviewed as the least-privilege change it is (docs/security.md). The sweeper's are
/// inline; the function's are one managed policy, FunctionPermissions, which is also the role's
/// permissions boundary unless you give your own.
#[test]
fn every_role_holds_exactly_these_permissions() {
    let lease_table =
        json!({"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${TableName}"});
    let lease_table_everywhere = json!([
        {"Fn::Sub": "arn:${AWS::Partition}:dynamodb:*:${AWS::AccountId}:table/${TableName}"},
        {"Fn::Sub": "arn:${AWS::Partition}:dynamodb:*:${AWS::AccountId}:table/${TableName}/*"}
    ]);
    let prefix = json!({"Fn::If": ["HasAnswerBucketPrefix", {"Ref": "AnswerBucketPrefix"}, {"Fn::Sub": "${Installation}-answers"}]});
    let function = "FunctionPermissions";
    let expected = vec![
        grant(
            "lease-table.yaml",
            "SweeperRole",
            None,
            "Allow",
            &["logs:CreateLogStream", "logs:PutLogEvents"],
            json!({"Fn::Sub": "${SweeperLogGroup.Arn}:*"}),
        ),
        grant(
            "lease-table.yaml",
            "SweeperRole",
            None,
            "Allow",
            &["dynamodb:Scan", "dynamodb:DeleteItem"],
            json!({"Fn::GetAtt": ["LeaseTable", "Arn"]}),
        ),
        grant(
            "regional.yaml",
            function,
            None,
            "Allow",
            &["logs:CreateLogStream", "logs:PutLogEvents"],
            json!({"Fn::Sub": "${FunctionLogGroup.Arn}:*"}),
        ),
        grant("regional.yaml", function, None, "Allow", &["dynamodb:GetItem", "dynamodb:UpdateItem"], lease_table),
        // Everything but the handler's two actions, on the table and all below it, everywhere.
        grant(
            "regional.yaml",
            function,
            None,
            "Deny",
            &["not dynamodb:GetItem", "not dynamodb:UpdateItem"],
            lease_table_everywhere,
        ),
        grant(
            "regional.yaml",
            function,
            None,
            "Allow",
            &[
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "sqs:ChangeMessageVisibility",
                "sqs:GetQueueUrl",
            ],
            json!({"Fn::GetAtt": ["Queue", "Arn"]}),
        ),
        grant(
            "regional.yaml",
            function,
            None,
            "Allow",
            &["sqs:SendMessage", "sqs:GetQueueUrl"],
            json!({"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}),
        ),
        grant(
            "regional.yaml",
            function,
            Some("HasItemTables"),
            "Allow",
            &["dynamodb:PutItem", "dynamodb:DeleteItem"],
            json!({"Ref": "ItemTableArns"}),
        ),
        grant(
            "regional.yaml",
            function,
            Some("HasFunctions"),
            "Allow",
            &["lambda:InvokeFunction"],
            json!({"Ref": "FunctionArns"}),
        ),
        grant(
            "regional.yaml",
            function,
            Some("HasFunctions"),
            "Allow",
            &["lambda:GetFunctionConfiguration"],
            json!({"Ref": "FunctionArns"}),
        ),
        grant(
            "regional.yaml",
            function,
            Some("HasFunctions"),
            "Allow",
            &["s3:PutObject", "s3:GetObject"],
            json!({"Fn::Sub": "${AnswerBucket.Arn}/answers/*"}),
        ),
        grant(
            "regional.yaml",
            function,
            Some("HasFunctions"),
            "Allow",
            &["s3:ListBucket"],
            json!({"Fn::GetAtt": ["AnswerBucket", "Arn"]}),
        ),
        // The other region's answers, read only: a poll held here reads them where they are.
        grant(
            "regional.yaml",
            function,
            Some("HasFunctions"),
            "Allow",
            &["s3:GetObject"],
            json!({"Fn::Sub": ["arn:${AWS::Partition}:s3:::${Prefix}-${AWS::AccountId}-${PeerRegion}/answers/*", {"Prefix": prefix}]}),
        ),
        grant(
            "regional.yaml",
            function,
            Some("HasFunctions"),
            "Allow",
            &["s3:ListBucket"],
            json!({"Fn::Sub": ["arn:${AWS::Partition}:s3:::${Prefix}-${AWS::AccountId}-${PeerRegion}", {"Prefix": prefix}]}),
        ),
        grant(
            "regional.yaml",
            function,
            Some("IsArc"),
            "Allow",
            &["route53-recovery-cluster:GetRoutingControlState"],
            json!({"Ref": "ArcRoutingControlArn"}),
        ),
    ];
    let mut found = Vec::new();
    let mut collect = |name: &str, holder: &str, condition: Option<&str>, statement: &Value| {
        let actions = statement_actions(statement);
        assert!(actions.iter().all(|a| !a.contains('*')), "no wildcard actions: {actions:?}");
        assert_ne!(statement["Resource"], json!("*"), "no wildcard resources for {actions:?}");
        found.push(Grant {
            template: name.to_owned(),
            role: holder.to_owned(),
            condition: condition.map(str::to_owned),
            effect: statement["Effect"].as_str().expect("Effect").to_owned(),
            actions,
            resource: statement["Resource"].clone(),
        });
    };
    for name in ["arc.yaml", "customer.yaml", "example.yaml", "lease-table.yaml", "long-work.yaml", "regional.yaml"] {
        let template = template(name);
        for (role_name, role) in resources(&template, "AWS::IAM::Role") {
            let inline = role["Properties"].get("Policies").and_then(Value::as_array).cloned().unwrap_or_default();
            for policy in &inline {
                // A conditional policy is `Fn::If [condition, policy, AWS::NoValue]`.
                let (condition, policy) = match policy.get("Fn::If") {
                    Some(branches) => (branches[0].as_str(), &branches[1]),
                    None => (None, policy),
                };
                for statement in policy["PolicyDocument"]["Statement"].as_array().expect("Statement") {
                    collect(name, role_name, condition, statement);
                }
            }
            // Managed policies only where an author adds them for their own providers, and
            // then only under a boundary (the ExtraPoliciesNeedABoundary rule).
            let properties = &role["Properties"];
            if (name, role_name.as_str()) == ("regional.yaml", "FunctionRole") {
                assert_eq!(
                    properties["ManagedPolicyArns"],
                    json!({"Fn::If": [
                        "HasExtraManagedPolicies",
                        {"Fn::Split": [",", {"Fn::Join": [",", [{"Ref": "FunctionPermissions"}, {"Fn::Join": [",", {"Ref": "ExtraManagedPolicyArns"}]}]]}]},
                        [{"Ref": "FunctionPermissions"}]
                    ]}),
                    "the function's role takes its own policy and ExtraManagedPolicyArns, nothing else"
                );
                assert_eq!(
                    properties["PermissionsBoundary"],
                    json!({"Fn::If": ["HasPermissionsBoundary", {"Ref": "PermissionsBoundaryArn"}, {"Ref": "FunctionPermissions"}]}),
                    "bounded by its own grants, or by the boundary you give"
                );
                assert!(inline.is_empty(), "the function's grants are all in FunctionPermissions");
            } else {
                assert!(properties.get("ManagedPolicyArns").is_none(), "{name} {role_name}: no managed policies");
            }
        }
        for (policy_name, policy) in resources(&template, "AWS::IAM::ManagedPolicy") {
            for statement in policy["Properties"]["PolicyDocument"]["Statement"].as_array().expect("Statement") {
                // A conditional statement is `Fn::If [condition, statement, AWS::NoValue]`.
                match statement.get("Fn::If") {
                    Some(branches) => collect(name, policy_name, branches[0].as_str(), &branches[1]),
                    None => collect(name, policy_name, None, statement),
                }
            }
        }
        for (function_name, function) in resources(&template, "AWS::Serverless::Function") {
            assert!(function["Properties"].get("Policies").is_none(), "{name} {function_name}: roles are explicit");
        }
    }
    assert_eq!(found, expected);
}

#[test]
fn raw_delivery_is_one_setting_for_the_topic_and_the_handler() {
    let (regional, customer) = (template("regional.yaml"), template("customer.yaml"));
    for field in ["AllowedValues", "Default"] {
        assert_eq!(
            regional["Parameters"]["RawMessageDelivery"][field], customer["Parameters"]["RawMessageDelivery"][field],
            "{field}"
        );
    }
    assert_eq!(customer["Parameters"]["RawMessageDelivery"]["Default"], "false", "envelopes, with their TopicArn");
    let function = one(&regional, "AWS::Serverless::Function");
    assert_eq!(
        function["Properties"]["Environment"]["Variables"]["CFN_ONCE_RAW_DELIVERY"],
        json!({"Ref": "RawMessageDelivery"})
    );
    // samconfig: every customer stack and both regional stacks say the same thing.
    let environments = samconfig();
    let customers = environments.iter().filter(|e| e.template == "infra/customer.yaml").count();
    assert!(customers >= 1, "samconfig.toml deploys the customer stack");
    let settings: Vec<(&str, &str)> = environments
        .iter()
        .filter_map(|e| e.parameters.get("RawMessageDelivery").map(|value| (e.name.as_str(), value.as_str())))
        .collect();
    assert_eq!(settings.len(), 2 + customers, "primary, secondary and every customer stack set it: {settings:?}");
    assert!(settings.iter().all(|(_, value)| *value == settings[0].1), "{settings:?}");
}

#[test]
fn arc_control_is_granted_only_when_chosen_and_must_name_its_routing_control() {
    let template = template("regional.yaml");
    let variables = &one(&template, "AWS::Serverless::Function")["Properties"]["Environment"]["Variables"];
    assert_eq!(variables["CFN_ONCE_CONTROL"], json!({"Ref": "Control"}));
    assert_eq!(
        variables["CFN_ONCE_ARC_ROUTING_CONTROL_ARN"],
        json!({"Fn::If": ["IsArc", {"Ref": "ArcRoutingControlArn"}, {"Ref": "AWS::NoValue"}]})
    );
    let rule = &template["Rules"]["ArcNeedsItsRoutingControl"];
    assert_eq!(rule["RuleCondition"], json!({"Fn::Equals": [{"Ref": "Control"}, "arc"]}));
    assert_eq!(rule["Assertions"].as_array().map(Vec::len), Some(2));
}

#[test]
fn the_function_environment_is_a_valid_handler_configuration() {
    let deployed = Deployed::regional().expect("infra/regional.yaml");
    for role in [Role::Primary, Role::Secondary] {
        let config = deployed.config(role, "us-west-2").expect("the template configures the handler fully");
        assert_eq!(config.role, role);
    }
}

#[test]
fn the_arc_safety_rule_keeps_one_region_on() {
    let template = template("arc.yaml");
    assert_eq!(resources(&template, "AWS::Route53RecoveryControl::RoutingControl").len(), 2);
    let rule = one(&template, "AWS::Route53RecoveryControl::SafetyRule");
    assert_eq!(rule["Properties"]["RuleConfig"], json!({"Type": "ATLEAST", "Threshold": 1, "Inverted": false}));
    assert_eq!(rule["Properties"]["AssertionRule"]["AssertedControls"].as_array().map(Vec::len), Some(2));
}

#[test]
fn the_example_uses_the_shipped_providers() {
    let template = template("example.yaml");
    for kind in ["Custom::Echo", "Custom::DynamoDBItem"] {
        let resource = one(&template, kind);
        assert_eq!(resource["Properties"]["ServiceToken"], json!({"Ref": "ServiceToken"}));
    }
}

/// The long-work example wires its wait condition the one way that works: the custom resource
/// names the handle by its Ref and states the wait condition's Timeout through the same
/// parameter (so the two cannot drift), the wait condition waits on that handle and depends on
/// the resource (its clock starts after the answer), and what needs the work reads the wait
/// condition's Data. The work fits its timeout, and the provider's Delete its ServiceTimeout.
#[test]
fn the_long_work_example_signals_its_wait_condition_through_the_handle() {
    use cfn_once_core::wait_condition::{HANDLE_PROPERTY, TIMEOUT_PROPERTY, TIMEOUT_S_MAX};
    let template = template("long-work.yaml");
    let handles = resources(&template, "AWS::CloudFormation::WaitConditionHandle");
    assert_eq!(handles.len(), 1, "one handle");
    let handle = handles[0].0;
    let (conditions, custom): (Vec<_>, Vec<_>) = template["Resources"]
        .as_object()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| {
            r["Type"] == "AWS::CloudFormation::WaitCondition" || r["Properties"].get(HANDLE_PROPERTY).is_some()
        })
        .partition(|(_, r)| r["Type"] == "AWS::CloudFormation::WaitCondition");
    assert_eq!((conditions.len(), custom.len()), (1, 1), "one wait condition, one resource that signals it");
    let (condition_name, condition) = conditions[0];
    let (resource_name, resource) = custom[0];
    let properties = &resource["Properties"];
    assert!(resource["Type"].as_str().is_some_and(|kind| kind.starts_with("Custom::")), "{resource}");
    assert_eq!(properties["ServiceToken"], json!({"Ref": "ServiceToken"}));
    assert_eq!(properties[HANDLE_PROPERTY], json!({"Ref": handle}), "the handle property is the handle's Ref");
    assert_eq!(condition["Properties"]["Handle"], json!({"Ref": handle}), "the wait condition waits on it");
    assert_eq!(condition["Properties"]["Count"], json!(1), "one signal");

    // One parameter for both timeouts, within what a wait condition accepts.
    let timeout = &properties[TIMEOUT_PROPERTY];
    assert_eq!(condition["Properties"]["Timeout"], *timeout, "the two timeouts are one value");
    let parameter_name =
        timeout["Ref"].as_str().unwrap_or_else(|| panic!("{TIMEOUT_PROPERTY} is a parameter: {timeout}"));
    let parameter = &template["Parameters"][parameter_name];
    assert_eq!((&parameter["MinValue"], &parameter["MaxValue"]), (&json!(1), &json!(TIMEOUT_S_MAX)));

    // The wait condition's clock starts once the resource is answered.
    let depends_on = match &condition["DependsOn"] {
        Value::String(name) => vec![name.as_str()],
        Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    assert!(depends_on.contains(&resource_name.as_str()), "{condition_name} DependsOn {resource_name}");

    // Something reads the work's result.
    let data = json!({"Fn::GetAtt": [condition_name, "Data"]});
    let readers: Vec<&String> = template["Resources"]
        .as_object()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| r["Properties"].as_object().is_some_and(|p| p.values().any(|v| *v == data)))
        .map(|(name, _)| name)
        .collect();
    assert!(!readers.is_empty(), "a resource reads {condition_name}.Data");

    // The example's work fits the default timeout with a poll and the cutoff window (31 s) to
    // spare, and Echo's Delete, which would otherwise wait as long, is answered at once.
    let seconds = |value: &Value| value.as_str().and_then(|s| s.parse::<u64>().ok()).or_else(|| value.as_u64());
    // A property that is a parameter's Ref takes the parameter's default.
    let resolved = |value: &Value| match value["Ref"].as_str() {
        Some(name) => template["Parameters"][name]["Default"].clone(),
        None => value.clone(),
    };
    let work_s = seconds(&resolved(&properties["InProgressForS"])).expect("InProgressForS");
    let poll_s = seconds(&resolved(&properties["PollIntervalS"])).expect("PollIntervalS");
    let default_s = seconds(&parameter["Default"]).expect("a default timeout");
    assert!(work_s + poll_s + 31 <= default_s, "{work_s} s of work polled every {poll_s} s within {default_s} s");
    assert_eq!(seconds(&properties["DeleteInProgressForS"]), Some(0));
}

/// One `samconfig.toml` environment that deploys a stack: its name, template, region and
/// parameter overrides.
#[derive(Debug)]
pub(crate) struct SamEnvironment {
    name: String,
    template: String,
    region: String,
    parameters: BTreeMap<String, String>,
}

/// Every `[<name>.deploy.parameters]` table of `samconfig.toml`. The file's values are one-line
/// strings and its overrides `Key=Value` pairs without spaces, which is all this reads.
pub(crate) fn samconfig() -> Vec<SamEnvironment> {
    let text = std::fs::read_to_string(workspace_root().join("samconfig.toml")).expect("samconfig.toml");
    let mut environments: Vec<SamEnvironment> = Vec::new();
    let mut in_deploy = false;
    for line in text.lines() {
        if line.starts_with('[') {
            let name = line.strip_prefix('[').and_then(|rest| rest.strip_suffix(".deploy.parameters]"));
            in_deploy = name.is_some();
            if let Some(name) = name {
                environments.push(SamEnvironment {
                    name: name.to_owned(),
                    template: String::new(),
                    region: String::new(),
                    parameters: BTreeMap::new(),
                });
            }
            continue;
        }
        let (Some(environment), true) = (environments.last_mut(), in_deploy) else { continue };
        let Some((key, value)) = line.split_once(" = ") else { continue };
        let value = value.trim_matches('"');
        match key {
            "template_file" => environment.template = value.to_owned(),
            "region" => environment.region = value.to_owned(),
            "parameter_overrides" => {
                for pair in value.split_whitespace() {
                    let (name, value) = pair.split_once('=').unwrap_or_else(|| panic!("{pair} is not Key=Value"));
                    environment.parameters.insert(name.to_owned(), value.to_owned());
                }
            }
            _ => {}
        }
    }
    environments
}

fn environment<'a>(environments: &'a [SamEnvironment], name: &str) -> &'a SamEnvironment {
    environments.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("samconfig.toml has no {name} environment"))
}

/// ARN matching with IAM's wildcards: `*` for any run of characters, `?` for one.
fn arn_like(pattern: &str, text: &str) -> bool {
    fn matches(pattern: &[u8], text: &[u8]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some((b'*', rest)) => (0..=text.len()).any(|skip| matches(rest, &text[skip..])),
            Some((&expected, rest)) => text
                .split_first()
                .is_some_and(|(&actual, tail)| (expected == b'?' || expected == actual) && matches(rest, tail)),
        }
    }
    matches(pattern.as_bytes(), text.as_bytes())
}

/// The MRSC region sets (DynamoDB's GlobalTableWitness reference): a lease table's replicas and
/// witness must lie in one of them.
const MRSC_REGION_SETS: [&[&str]; 3] = [
    &["us-east-1", "us-east-2", "us-west-2"],
    &["eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1"],
    &["ap-northeast-1", "ap-northeast-2", "ap-northeast-3"],
];

/// Regions MRSC does not serve, which customer stacks may still live in.
const OTHER_REGIONS: [&str; 3] = ["ca-central-1", "ap-southeast-2", "eu-north-1"];

fn mrsc_region_set(region: &str) -> Option<usize> {
    MRSC_REGION_SETS.iter().position(|set| set.contains(&region))
}

fn every_region() -> Vec<&'static str> {
    MRSC_REGION_SETS.iter().flat_map(|set| set.iter().copied()).chain(OTHER_REGIONS).collect()
}

/// An alarm address, which the lease-table and regional stacks require (AlarmsPageSomeone).
const PAGED: (&str, &str) = ("AlarmEmail", "oncall@example.com");

/// The lease table's replicas (this stack's region and ReplicaRegion) and witness must be three
/// regions of one MRSC region set, and the template refuses anything else before creating a
/// thing. Checked for every combination of 13 regions against the sets themselves, so removing
/// or weakening a rule fails here.
#[test]
fn the_lease_table_refuses_any_mix_of_mrsc_region_sets() {
    let template = template("lease-table.yaml");
    let stack = |region: &'static str, replica: &str, witness: &str| {
        Stack::new(&template, region, &[("ReplicaRegion", replica), ("WitnessRegion", witness), PAGED]).refusals()
    };
    for (region, replica, witness) in [
        ("us-east-1", "us-west-2", "us-east-2"),
        ("eu-west-1", "eu-central-1", "eu-west-2"),
        ("ap-northeast-1", "ap-northeast-3", "ap-northeast-2"),
    ] {
        assert_eq!(stack(region, replica, witness), [], "{region} + {replica}, witness {witness}: one set");
    }
    for (region, replica, witness, why) in [
        ("us-east-1", "eu-west-1", "us-east-2", "the replica in another set"),
        ("us-east-1", "us-west-2", "eu-west-1", "the witness in another set"),
        ("us-east-1", "us-west-2", "ca-central-1", "the witness in no set"),
        ("eu-west-3", "us-west-2", "us-east-2", "the stack's region in another set"),
        ("ap-southeast-2", "ap-northeast-1", "ap-northeast-2", "the stack's region in no set"),
        ("ap-northeast-1", "eu-west-1", "us-east-1", "one region of each set"),
    ] {
        assert_eq!(rule_names(&stack(region, replica, witness)), ["OneMrscRegionSet"], "{why}");
    }
    let one_set = |regions: [&str; 3]| {
        let sets = regions.map(mrsc_region_set);
        sets[0].is_some() && sets.iter().all(|set| *set == sets[0])
    };
    for region in every_region() {
        for replica in every_region() {
            for witness in every_region() {
                let distinct = region != replica && region != witness && replica != witness;
                let expected = distinct && one_set([region, replica, witness]);
                let refusals = stack(region, replica, witness);
                assert_eq!(refusals.is_empty(), expected, "{region} + {replica}, witness {witness}: {refusals:?}");
            }
        }
    }
    // The parameters' defaults are a valid US deployment, from us-east-1.
    assert_eq!(Stack::new(&template, "us-east-1", &[PAGED]).refusals(), []);
}

/// The regional stack uses its own region's replica of the lease table, so it refuses a region
/// MRSC does not serve; it names no other region, so that is all it can check.
#[test]
fn the_regional_stack_refuses_a_region_without_an_mrsc_replica() {
    let template = template("regional.yaml");
    for region in every_region() {
        let refusals = Stack::new(&template, region, &[("Role", "primary"), PAGED]).refusals();
        assert_eq!(refusals.is_empty(), mrsc_region_set(region).is_some(), "{region}: {refusals:?}");
    }
    // The ARC rule still applies on its own condition.
    let arc = Stack::new(&template, "us-east-1", &[("Role", "primary"), ("Control", "arc"), PAGED]).refusals();
    assert_eq!(rule_names(&arc), ["ArcNeedsItsRoutingControl", "ArcNeedsItsRoutingControl"]);
}

#[test]
fn the_arc_stack_refuses_handler_regions_of_two_sets() {
    let template = template("arc.yaml");
    for primary in every_region() {
        for secondary in every_region() {
            let parameters = [("PrimaryRegion", primary), ("SecondaryRegion", secondary)];
            let refusals = Stack::new(&template, "us-west-2", &parameters).refusals();
            let expected = primary != secondary
                && mrsc_region_set(primary).is_some()
                && mrsc_region_set(primary) == mrsc_region_set(secondary);
            assert_eq!(refusals.is_empty(), expected, "{primary} + {secondary}: {refusals:?}");
        }
    }
}

/// `samconfig.toml` deploys what the rules accept, with one topic per customer region, every
/// one of them admitted by both regional stacks and nothing else admitted.
#[test]
fn samconfig_deploys_one_region_set_and_admits_every_customer_topic() {
    let environments = samconfig();
    // lease-table, primary and secondary deploy the built templates (.aws-sam/...): these
    // sources with the function code resolved, and the same rules.
    for (name, file) in [
        ("lease-table", "lease-table.yaml"),
        ("primary", "regional.yaml"),
        ("secondary", "regional.yaml"),
        ("arc", "arc.yaml"),
    ] {
        let environment = environment(&environments, name);
        let template = template(file);
        let parameters: Vec<(&str, &str)> =
            environment.parameters.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let refusals = Stack::new(&template, &environment.region, &parameters).refusals();
        assert_eq!(refusals, [], "{name} in {}", environment.region);
    }
    let (lease_table, primary, secondary, arc) = (
        environment(&environments, "lease-table"),
        environment(&environments, "primary"),
        environment(&environments, "secondary"),
        environment(&environments, "arc"),
    );
    assert_eq!(lease_table.region, primary.region, "the lease table stack lives in the primary region");
    assert_eq!(lease_table.parameters["ReplicaRegion"], secondary.region, "its replica is the secondary region");
    assert_eq!(
        (arc.parameters["PrimaryRegion"].as_str(), arc.parameters["SecondaryRegion"].as_str()),
        (primary.region.as_str(), secondary.region.as_str())
    );

    let customers: Vec<&SamEnvironment> = environments.iter().filter(|e| e.template == "infra/customer.yaml").collect();
    assert!(customers.len() >= 3, "samconfig.toml shows several customer regions");
    let mut expected_topics = Vec::new();
    for customer in &customers {
        assert!(customer.name.ends_with(&customer.region), "{} deploys to {}", customer.name, customer.region);
        assert_eq!(customer.parameters["PrimaryRegion"], primary.region, "{}", customer.name);
        assert_eq!(customer.parameters["SecondaryRegion"], secondary.region, "{}", customer.name);
        // The customer stack builds the queues' ARNs from the installation's name: the same
        // name as the regional stacks' (each stack's default when samconfig gives none).
        let installation = |e: &SamEnvironment| e.parameters.get("Installation").cloned().unwrap_or("cfn-once".into());
        assert_eq!(installation(customer), installation(primary), "{}", customer.name);
        assert_eq!(installation(customer), installation(secondary), "{}", customer.name);
        let account = crate::rules::ACCOUNT;
        let topic = &customer.parameters["TopicName"];
        expected_topics.push(format!("arn:aws:sns:{}:{account}:{topic}", customer.region));
    }
    for regional in [primary, secondary] {
        let admitted: Vec<String> = regional.parameters["ServiceTopicArns"].split(',').map(str::to_owned).collect();
        assert_eq!(admitted, expected_topics, "{} admits exactly the customer stacks' topics", regional.name);
    }
    // The example stacks use the topic of their own region.
    for name in ["example", "long-work"] {
        let example = environment(&environments, name);
        let token = &example.parameters["ServiceToken"];
        assert!(expected_topics.contains(token), "{name}: {token} is a customer stack's topic");
        assert_eq!(
            token.split(':').nth(3),
            Some(example.region.as_str()),
            "{name}: CloudFormation wants it in the stack's region"
        );
    }
}

/// A poll held in one region reads a self-answer from the other region's answer bucket: the
/// bucket each regional stack creates must be the one the other stack's role may read, named by
/// the same prefix, account and (its own, the other's PeerRegion) region.
#[test]
fn each_regions_answer_bucket_is_the_one_the_other_region_may_read() {
    let template = template("regional.yaml");
    let name = &template["Resources"]["AnswerBucket"]["Properties"]["BucketName"]["Fn::Sub"];
    let (bucket, prefix) = (name[0].as_str().expect("the answer bucket is named with Fn::Sub"), &name[1]["Prefix"]);
    let statements = template["Resources"]["FunctionPermissions"]["Properties"]["PolicyDocument"]["Statement"]
        .as_array()
        .expect("statements")
        .clone();
    let peer: Vec<(String, &Value)> = statements
        .iter()
        .filter_map(|statement| statement.get("Fn::If").map(|branches| &branches[1]["Resource"]["Fn::Sub"]))
        .filter_map(|sub| Some((sub[0].as_str()?, &sub[1]["Prefix"])))
        .filter(|(resource, _)| resource.contains("${PeerRegion}"))
        .map(|(resource, prefix)| (resource.replace("${PeerRegion}", "${AWS::Region}"), prefix))
        .collect();
    assert_eq!(
        peer,
        [
            (format!("arn:${{AWS::Partition}}:s3:::{bucket}/answers/*"), prefix),
            (format!("arn:${{AWS::Partition}}:s3:::{bucket}"), prefix)
        ],
        "the peer grants name the bucket the other region's stack creates, with the same prefix"
    );
    let rule = &template["Rules"]["FunctionsNeedThePeerRegion"];
    assert!(rule["Assertions"][0]["Assert"].to_string().contains("PeerRegion"), "{rule}");
}
