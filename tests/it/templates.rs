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
    assert_eq!(function["Metadata"]["BuildProperties"]["Binary"], "cfn-once");
    assert_eq!(properties["LoggingConfig"]["LogFormat"], "JSON");
    let events: Vec<&Value> = properties["Events"].as_object().expect("Events").values().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["Type"], "SQS");
    assert_eq!(events[0]["Properties"]["Queue"], json!({"Fn::GetAtt": ["Queue", "Arn"]}));
    assert_eq!(events[0]["Properties"]["FunctionResponseTypes"], json!(["ReportBatchItemFailures"]));
    assert_eq!(events[0]["Properties"]["ScalingConfig"]["MaximumConcurrency"], json!({"Ref": "MaximumConcurrency"}));
}

#[test]
fn iam_is_limited_to_item_actions_on_the_table() {
    let template = template("regional.yaml");
    let role = one(&template, "AWS::IAM::Role");
    let table_arn =
        json!({"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${TableName}"});
    let item_actions = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"];
    let mut lease_table_granted = false;
    for (actions, resource) in statements(role) {
        assert!(actions.iter().all(|a| !a.contains('*')), "no wildcard actions: {actions:?}");
        assert_ne!(resource, json!("*"), "no wildcard resources for {actions:?}");
        let service = actions[0].split(':').next().unwrap_or_default().to_owned();
        assert!(actions.iter().all(|a| a.starts_with(&format!("{service}:"))), "one service per statement");
        match service.as_str() {
            "dynamodb" if resource == table_arn => {
                assert!(
                    actions.iter().all(|a| item_actions.contains(&a.as_str())),
                    "only item actions on the lease table: {actions:?}"
                );
                lease_table_granted = true;
            }
            "dynamodb" => {
                assert_eq!(resource, json!({"Ref": "ItemTableArns"}), "other tables only as configured");
                assert_eq!(actions, vec!["dynamodb:PutItem", "dynamodb:DeleteItem"]);
            }
            "sqs" if resource == json!({"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}) => {
                assert_eq!(actions, vec!["sqs:SendMessage", "sqs:GetQueueUrl"], "it only moves messages to its DLQ")
            }
            "sqs" => assert_eq!(resource, json!({"Fn::GetAtt": ["Queue", "Arn"]}), "only its own queue"),
            "logs" => assert_eq!(resource, json!({"Fn::Sub": "${FunctionLogGroup.Arn}:*"}), "only its own log group"),
            other => panic!("unexpected service {other}"),
        }
    }
    assert!(lease_table_granted);
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
