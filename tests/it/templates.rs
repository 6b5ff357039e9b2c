//! The CloudFormation templates in `infra/`, parsed and held to the properties that matter.
//! cfn-lint, `sam validate --lint` and checkov check them generally (`make lint-templates`);
//! these tests check what cfn-once itself relies on.

use cfn_once::adapters::dynamodb_lease::KEY_ATTRIBUTES;
use cfn_once_core::decision::Role;
use cfn_once_sim::deployed::{Deployed, FunctionTimeout};
use cfn_once_tests::workspace_root;
use serde_json::{Value, json};

/// A template as JSON, with YAML short-form intrinsics (`!Ref x`) in their long form.
fn template(name: &str) -> Value {
    let path = workspace_root().join("infra").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let yaml: serde_norway::Value = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"));
    to_json(yaml)
}

fn to_json(yaml: serde_norway::Value) -> Value {
    use serde_norway::Value as Yaml;
    match yaml {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(b),
        Yaml::Number(n) => serde_json::to_value(n).unwrap_or(Value::Null),
        Yaml::String(s) => Value::String(s),
        Yaml::Sequence(items) => Value::Array(items.into_iter().map(to_json).collect()),
        Yaml::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k.as_str().map(str::to_owned).unwrap_or_else(|| format!("{k:?}")), to_json(v)))
                .collect(),
        ),
        Yaml::Tagged(tagged) => {
            let tag = tagged.tag.to_string();
            let name = tag.trim_start_matches('!');
            let value = to_json(tagged.value);
            match name {
                "Ref" | "Condition" => json!({ name: value }),
                "GetAtt" => match value {
                    Value::String(path) => {
                        let (resource, attribute) = path.split_once('.').unwrap_or((&path, ""));
                        json!({"Fn::GetAtt": [resource, attribute]})
                    }
                    other => json!({"Fn::GetAtt": other}),
                },
                other => json!({ format!("Fn::{other}"): value }),
            }
        }
    }
}

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

/// The queues and the handler are one design (DESIGN §2): a copy may reach the DLQ only when
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
        (Some(0), Some(900)),
        "SQS's DelaySeconds range"
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

/// Every permission of every role in `infra/`, listed: a change to any of them fails here and
/// must be reviewed as the least-privilege change it is (docs/security.md).
#[test]
fn every_role_holds_exactly_these_permissions() {
    let lease_table =
        json!({"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${TableName}"});
    let lease_table_everywhere =
        json!({"Fn::Sub": "arn:${AWS::Partition}:dynamodb:*:${AWS::AccountId}:table/${TableName}"});
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
            "FunctionRole",
            None,
            "Allow",
            &["logs:CreateLogStream", "logs:PutLogEvents"],
            json!({"Fn::Sub": "${FunctionLogGroup.Arn}:*"}),
        ),
        grant(
            "regional.yaml",
            "FunctionRole",
            None,
            "Allow",
            &["dynamodb:GetItem", "dynamodb:UpdateItem"],
            lease_table,
        ),
        grant(
            "regional.yaml",
            "FunctionRole",
            None,
            "Deny",
            &["dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"],
            lease_table_everywhere,
        ),
        grant(
            "regional.yaml",
            "FunctionRole",
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
            "FunctionRole",
            None,
            "Allow",
            &["sqs:SendMessage", "sqs:GetQueueUrl"],
            json!({"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}),
        ),
        grant(
            "regional.yaml",
            "FunctionRole",
            Some("HasItemTables"),
            "Allow",
            &["dynamodb:PutItem", "dynamodb:DeleteItem"],
            json!({"Ref": "ItemTableArns"}),
        ),
        grant(
            "regional.yaml",
            "FunctionRole",
            Some("IsArc"),
            "Allow",
            &["route53-recovery-cluster:GetRoutingControlState"],
            json!({"Ref": "ArcRoutingControlArn"}),
        ),
    ];
    let mut found = Vec::new();
    for name in ["arc.yaml", "customer.yaml", "example.yaml", "lease-table.yaml", "regional.yaml"] {
        let template = template(name);
        for (role_name, role) in resources(&template, "AWS::IAM::Role") {
            for policy in role["Properties"]["Policies"].as_array().expect("inline policies only") {
                // A conditional policy is `Fn::If [condition, policy, AWS::NoValue]`.
                let (condition, policy) = match policy.get("Fn::If") {
                    Some(branches) => (branches[0].as_str(), &branches[1]),
                    None => (None, policy),
                };
                for statement in policy["PolicyDocument"]["Statement"].as_array().expect("Statement") {
                    let actions: Vec<String> = match &statement["Action"] {
                        Value::String(action) => vec![action.clone()],
                        Value::Array(actions) => actions.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
                        other => panic!("unexpected Action {other}"),
                    };
                    assert!(actions.iter().all(|a| !a.contains('*')), "no wildcard actions: {actions:?}");
                    assert_ne!(statement["Resource"], json!("*"), "no wildcard resources for {actions:?}");
                    let effect = statement["Effect"].as_str().expect("Effect").to_owned();
                    found.push(Grant {
                        template: name.to_owned(),
                        role: role_name.clone(),
                        condition: condition.map(str::to_owned),
                        effect,
                        actions,
                        resource: statement["Resource"].clone(),
                    });
                }
            }
            assert!(role["Properties"].get("ManagedPolicyArns").is_none(), "{name} {role_name}: no managed policies");
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
    // samconfig: the customer stack and both regional stacks say the same thing.
    let samconfig = std::fs::read_to_string(workspace_root().join("samconfig.toml")).expect("samconfig.toml");
    let settings: Vec<&str> = samconfig
        .lines()
        .filter(|line| line.starts_with("parameter_overrides") && line.contains("RawMessageDelivery="))
        .map(|line| {
            line.split("RawMessageDelivery=").nth(1).and_then(|rest| rest.split([' ', '"']).next()).unwrap_or("")
        })
        .collect();
    assert_eq!(settings.len(), 3, "primary, secondary and customer each set it: {settings:?}");
    assert!(settings.iter().all(|value| *value == settings[0]), "{settings:?}");
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
fn the_queue_policy_is_bound_to_the_service_topic() {
    let template = template("regional.yaml");
    let policy = one(&template, "AWS::SQS::QueuePolicy");
    let statements = policy["Properties"]["PolicyDocument"]["Statement"].as_array().expect("Statement");
    let allows: Vec<&Value> = statements.iter().filter(|s| s["Effect"] == "Allow").collect();
    assert_eq!(allows.len(), 1, "one way in");
    assert_eq!(allows[0]["Principal"], json!({"Service": "sns.amazonaws.com"}));
    assert_eq!(allows[0]["Action"], "sqs:SendMessage");
    assert_eq!(allows[0]["Condition"], json!({"ArnEquals": {"aws:SourceArn": {"Ref": "ServiceTopicArn"}}}));
    // And every other sender is denied, whatever an IAM policy in the account grants, but for
    // the operators who redrive.
    let deny = statements.iter().find(|s| s["Sid"] == "NoOtherSenders").expect("a deny for other senders");
    assert_eq!(
        (&deny["Effect"], &deny["Principal"], &deny["Action"]),
        (&json!("Deny"), &json!("*"), &json!("sqs:SendMessage"))
    );
    assert_eq!(
        deny["Condition"],
        json!({
            "ArnNotEquals": {"aws:SourceArn": {"Ref": "ServiceTopicArn"}},
            "ArnNotLike": {"aws:PrincipalArn": {"Ref": "RedrivePrincipalArns"}}
        })
    );
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
fn the_customer_stack_exports_the_service_token_and_subscribes_both_queues() {
    let template = template("customer.yaml");
    assert_eq!(template["Outputs"]["ServiceToken"]["Value"], json!({"Ref": "ServiceTopic"}));
    assert!(template["Outputs"]["ServiceToken"]["Export"].is_object());
    let subscriptions = resources(&template, "AWS::SNS::Subscription");
    let endpoints: Vec<&Value> = subscriptions.iter().map(|(_, s)| &s["Properties"]["Endpoint"]).collect();
    assert_eq!(endpoints, vec![&json!({"Ref": "PrimaryQueueArn"}), &json!({"Ref": "SecondaryQueueArn"})]);
    for (_, subscription) in subscriptions {
        assert_eq!(subscription["Properties"]["Protocol"], "sqs");
        assert_eq!(subscription["Properties"]["RawMessageDelivery"], json!({"Ref": "RawMessageDelivery"}));
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
