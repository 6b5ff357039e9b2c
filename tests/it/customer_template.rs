//! `infra/customer.yaml` held to what a production account asks of it: no request dropped in silence (a
//! dead-letter queue per subscription, in the topic's region, that only the topic and the
//! operators may touch), alarms that page someone, the queues named by installation and region,
//! a refusal before anything is created of a topic region and handler region SNS does not
//! deliver between, and an organization's publishers narrowed. Rules and conditions are
//! evaluated as CloudFormation evaluates them (`rules.rs`).

use serde_json::{Value, json};

use crate::rules::{ACCOUNT, Evaluated, SNS_OPT_IN, Stack, rule_names, template};

/// Regions enabled by default, in and out of the MRSC region sets.
const BY_DEFAULT: [&str; 8] = [
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-northeast-1",
    "ap-southeast-2",
    "ca-central-1",
];

const TOPIC: &str = "arn:aws:sns:eu-west-1:111122223333:cfn-once-service-token";

/// A deployable set of parameters, with `more` added.
fn parameters<'a>(more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all =
        vec![("PrimaryRegion", "us-east-1"), ("SecondaryRegion", "us-west-2"), ("AlarmEmail", "oncall@example.com")];
    for (name, value) in more {
        all.retain(|(given, _)| given != name);
        all.push((name, value));
    }
    all
}

fn resource<'a>(template: &'a Value, name: &str) -> &'a Value {
    let found = &template["Resources"][name];
    assert!(found.is_object(), "no resource {name}");
    found
}

#[test]
fn each_subscription_dead_letters_here_to_a_queue_of_its_own() {
    let template = template("customer.yaml");
    let stack = Stack::new(&template, "eu-west-1", &parameters(&[]));
    let mut dead_letter_queues = Vec::new();
    for (subscription, role, region) in
        [("PrimarySubscription", "primary", "us-east-1"), ("SecondarySubscription", "secondary", "us-west-2")]
    {
        let properties = &resource(&template, subscription)["Properties"];
        assert_eq!(properties["Protocol"], "sqs");
        assert_eq!(properties["RawMessageDelivery"], json!({"Ref": "RawMessageDelivery"}));
        // The queue the regional stack of the default installation names, as before.
        let endpoint = stack.substitute(properties["Endpoint"]["Fn::Sub"].as_str().expect("a built ARN"));
        assert_eq!(endpoint, format!("arn:aws:sqs:{region}:{ACCOUNT}:cfn-once-{role}"));
        let other = Stack::new(&template, "eu-west-1", &parameters(&[("Installation", "payments")]));
        assert_eq!(
            other.substitute(properties["Endpoint"]["Fn::Sub"].as_str().expect("a built ARN")),
            format!("arn:aws:sqs:{region}:{ACCOUNT}:payments-{role}")
        );
        // SNS wants the dead-letter queue in the subscription's account and region: a queue of
        // this stack.
        let target = &properties["RedrivePolicy"]["deadLetterTargetArn"];
        let queue = target["Fn::GetAtt"][0].as_str().unwrap_or_else(|| panic!("{subscription}: {target}"));
        assert_eq!(target["Fn::GetAtt"][1], "Arn");
        let queue_properties = &resource(&template, queue)["Properties"];
        assert_eq!(resource(&template, queue)["Type"], "AWS::SQS::Queue");
        assert_eq!(queue_properties["SqsManagedSseEnabled"], true, "{queue}: SSE-SQS");
        assert!(queue_properties.get("KmsMasterKeyId").is_none(), "{queue}: SSE-SQS, no key SNS must be granted");
        assert_eq!(queue_properties["MessageRetentionPeriod"], 1_209_600, "{queue}: 14 days");
        dead_letter_queues.push(queue.to_owned());
    }
    assert_ne!(dead_letter_queues[0], dead_letter_queues[1], "one per subscription: a redrive knows the queue missed");
    assert_eq!(template["Outputs"]["ServiceToken"]["Value"], json!({"Ref": "ServiceTopic"}));
    assert!(template["Outputs"]["ServiceToken"]["Export"].is_object());
}

/// IAM's answer to one request against a dead-letter queue's policy (and the caller's own IAM
/// policy, which is taken to allow it).
#[derive(Debug, PartialEq)]
enum Decision {
    Allowed,
    Denied,
    NotAllowed,
}

struct Request<'a> {
    action: &'a str,
    /// A service principal (`sns.amazonaws.com`), or none for an IAM principal.
    service: Option<&'a str>,
    principal_arn: Option<&'a str>,
    source_arn: Option<&'a str>,
    secure: bool,
}

impl<'a> Request<'a> {
    fn sns(action: &'a str, topic: &'a str) -> Self {
        Self { action, service: Some("sns.amazonaws.com"), principal_arn: None, source_arn: Some(topic), secure: true }
    }

    fn role(action: &'a str, role: &'a str) -> Self {
        Self { action, service: None, principal_arn: Some(role), source_arn: None, secure: true }
    }
}

/// Evaluates `statements` (a queue policy resolved for `stack`) for `request`: an explicit deny
/// wins; an IAM principal's own policy is taken to allow (the worst case for the queue).
fn decide(stack: &Stack, statements: &[Value], request: &Request) -> Decision {
    let value = |value: &Value| -> Vec<String> {
        match value {
            Value::String(text) => vec![text.clone()],
            Value::Object(reference) if reference.get("Ref") == Some(&json!("ServiceTopic")) => vec![TOPIC.to_owned()],
            other => match stack.evaluate(other) {
                Evaluated::List(items) => items,
                Evaluated::Text(text) => vec![text],
                Evaluated::Bool(b) => vec![b.to_string()],
            },
        }
    };
    let actions = |statement: &Value| match &statement["Action"] {
        Value::String(action) => vec![action.clone()],
        Value::Array(actions) => actions.iter().map(|a| a.as_str().expect("an action").to_owned()).collect(),
        other => panic!("Action {other}"),
    };
    let applies = |statement: &&Value| {
        let action_matches = actions(statement).iter().any(|a| a == request.action || a == "sqs:*");
        let principal = &statement["Principal"];
        let principal_matches = match principal.get("Service") {
            Some(service) => request.service == service.as_str(),
            None => *principal == json!("*"),
        };
        let conditions = statement.get("Condition").and_then(Value::as_object).cloned().unwrap_or_default();
        action_matches
            && principal_matches
            && conditions.iter().all(|(operator, keys)| {
                keys.as_object().expect("keys").iter().all(|(key, values)| {
                    let present = match key.as_str() {
                        "aws:SourceArn" => request.source_arn.map(str::to_owned),
                        "aws:PrincipalArn" => request.principal_arn.map(str::to_owned),
                        "aws:SecureTransport" => Some(request.secure.to_string()),
                        other => panic!("{other} is not modelled"),
                    };
                    let values = value(values);
                    let any = |actual: &str| values.iter().any(|v| v == actual);
                    match operator.as_str() {
                        "ArnEquals" | "ArnLike" | "Bool" => present.is_some_and(|actual| any(&actual)),
                        "ArnNotEquals" | "ArnNotLike" => present.is_none_or(|actual| !any(&actual)),
                        other => panic!("{other} is not modelled"),
                    }
                })
            })
    };
    let matching: Vec<&Value> = statements.iter().filter(applies).collect();
    if matching.iter().any(|s| s["Effect"] == "Deny") {
        Decision::Denied
    } else if request.service.is_none() || matching.iter().any(|s| s["Effect"] == "Allow") {
        Decision::Allowed
    } else {
        Decision::NotAllowed
    }
}

#[test]
fn only_the_topic_and_the_operators_touch_the_dead_letter_queues() {
    let template = template("customer.yaml");
    let operator = "arn:aws:iam::111122223333:role/cfn-once-operator";
    let handler = "arn:aws:iam::111122223333:role/cfn-once-primary-FunctionRole";
    let stranger = "arn:aws:sns:eu-west-1:444455556666:elsewhere";
    let data_plane =
        ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:PurgeQueue", "sqs:SendMessage", "sqs:ChangeMessageVisibility"];
    for policy in ["PrimaryDeliveryDeadLetterQueuePolicy", "SecondaryDeliveryDeadLetterQueuePolicy"] {
        for operators in ["", operator] {
            let stack = Stack::new(&template, "eu-west-1", &parameters(&[("OperatorPrincipalArns", operators)]));
            let resolved = stack.resolve(&resource(&template, policy)["Properties"]).expect("a policy");
            let statements = resolved["PolicyDocument"]["Statement"].as_array().expect("Statement").clone();
            let decide = |request: Request| decide(&stack, &statements, &request);
            assert_eq!(decide(Request::sns("sqs:SendMessage", TOPIC)), Decision::Allowed, "{policy}: the topic");
            assert_eq!(decide(Request::sns("sqs:SendMessage", stranger)), Decision::Denied, "{policy}: another topic");
            for action in data_plane {
                assert_eq!(
                    decide(Request::role(action, handler)),
                    Decision::Denied,
                    "{policy}: {action} by a non-operator"
                );
                let expected = if operators.is_empty() { Decision::Denied } else { Decision::Allowed };
                assert_eq!(decide(Request::role(action, operator)), expected, "{policy}: {action} by {operators:?}");
            }
            // CloudFormation must still be able to update and delete the queue.
            for action in ["sqs:SetQueueAttributes", "sqs:DeleteQueue", "sqs:GetQueueAttributes", "sqs:TagQueue"] {
                assert_eq!(decide(Request::role(action, handler)), Decision::Allowed, "{policy}: {action} is IAM's");
            }
            let insecure = Request { secure: false, ..Request::role("sqs:ReceiveMessage", operator) };
            assert_eq!(decide(insecure), Decision::Denied, "{policy}: TLS only");
        }
    }
}

#[test]
fn every_alarm_pages_someone_and_a_stack_with_nobody_to_page_is_refused() {
    let template = template("customer.yaml");
    let nobody =
        Stack::new(&template, "eu-west-1", &[("PrimaryRegion", "us-east-1"), ("SecondaryRegion", "us-west-2")]);
    let refused = nobody.refusals();
    assert_eq!(rule_names(&refused), ["AlarmsPageSomeone"]);
    assert!(refused[0].1.contains("AlarmTopicArn") && refused[0].1.contains("AlarmEmail"), "{}", refused[0].1);

    let pager = "arn:aws:sns:eu-west-1:111122223333:pager";
    let alarms: Vec<(&String, &Value)> = template["Resources"]
        .as_object()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm")
        .collect();
    let metrics: Vec<(String, String, String)> = alarms
        .iter()
        .map(|(_, alarm)| {
            let p = &alarm["Properties"];
            let dimension = p["Dimensions"][0]["Value"]["Fn::GetAtt"][0].as_str().unwrap_or_default().to_owned();
            (
                p["Namespace"].as_str().unwrap_or_default().to_owned(),
                p["MetricName"].as_str().unwrap_or_default().to_owned(),
                dimension,
            )
        })
        .collect();
    for expected in [
        ("AWS/SQS", "NumberOfMessagesSent", "PrimaryDeliveryDeadLetterQueue"),
        ("AWS/SQS", "NumberOfMessagesSent", "SecondaryDeliveryDeadLetterQueue"),
        ("AWS/SNS", "NumberOfNotificationsFailed", "ServiceTopic"),
        ("AWS/SNS", "NumberOfNotificationsFailedToRedriveToDlq", "ServiceTopic"),
    ] {
        let found = (expected.0.to_owned(), expected.1.to_owned(), expected.2.to_owned());
        assert!(metrics.contains(&found), "an alarm on {expected:?}: {metrics:?}");
    }
    for (given, creates, notified) in [
        (vec![("AlarmTopicArn", pager)], false, json!({"Ref": "AlarmTopicArn"})),
        (vec![("AlarmEmail", "oncall@example.com")], true, json!({"Ref": "AlarmTopic"})),
        (vec![("AlarmTopicArn", pager), ("AlarmEmail", "oncall@example.com")], false, json!({"Ref": "AlarmTopicArn"})),
    ] {
        let mut all = vec![("PrimaryRegion", "us-east-1"), ("SecondaryRegion", "us-west-2")];
        all.extend(given.iter().copied());
        let stack = Stack::new(&template, "eu-west-1", &all);
        assert_eq!(stack.refusals(), [], "{given:?}");
        let topic = resource(&template, "AlarmTopic");
        assert_eq!(stack.creates(topic), creates, "{given:?}");
        if creates {
            let subscriptions = &topic["Properties"]["Subscription"];
            assert_eq!(subscriptions, &json!([{"Protocol": "email", "Endpoint": {"Ref": "AlarmEmail"}}]));
        }
        for (name, alarm) in &alarms {
            let actions = stack.resolve(&alarm["Properties"]["AlarmActions"]).expect("actions");
            assert_eq!(actions, json!([notified]), "{name} with {given:?}");
            let p = &alarm["Properties"];
            assert_eq!(
                (&p["Threshold"], &p["ComparisonOperator"]),
                (&json!(0), &json!("GreaterThanThreshold")),
                "{name}"
            );
            assert_eq!(p["TreatMissingData"], "notBreaching", "{name}");
        }
    }
}

/// SNS does not deliver from one opt-in region to another; the rule refuses exactly those pairs
/// of the topic's region and a handler region, for every opt-in region, before anything is
/// created, and names the role whose region it is.
#[test]
fn a_topic_and_handler_region_sns_cannot_deliver_between_are_refused() {
    let template = template("customer.yaml");
    let mapped: Vec<&str> = template["Mappings"]["Sns"]["OptInRegions"]["Regions"]
        .as_array()
        .expect("the opt-in regions' mapping")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(mapped, SNS_OPT_IN, "the template's list is SNS's");
    // A rule cannot read a mapping, so it spells the list out: every copy is the mapping's.
    let rule = template["Rules"]["SnsDeliversBetweenTheseRegions"].to_string();
    let copies = rule.matches("\"af-south-1\"").count();
    assert_eq!(copies, 3, "the condition and one assertion per handler region");
    assert_eq!(rule.matches(&json!(SNS_OPT_IN).to_string()).count(), copies, "every copy is the whole list, in order");

    let opt_in = |region: &str| SNS_OPT_IN.contains(&region);
    let regions: Vec<&str> = SNS_OPT_IN.iter().chain(BY_DEFAULT.iter()).copied().collect();
    for topic in &regions {
        for primary in &regions {
            for secondary in ["us-west-2", "ap-northeast-3", "me-south-1"] {
                let given = parameters(&[("PrimaryRegion", *primary), ("SecondaryRegion", secondary)]);
                let refusals = Stack::new(&template, topic, &given).refusals();
                let mut expected = Vec::new();
                let mut described = Vec::new();
                for (handler, role) in [(*primary, "PrimaryRegion"), (secondary, "SecondaryRegion")] {
                    if opt_in(topic) && opt_in(handler) && *topic != handler {
                        expected.push("SnsDeliversBetweenTheseRegions");
                        described.push(role);
                    }
                }
                assert_eq!(
                    rule_names(&refusals),
                    expected,
                    "topic in {topic}, primary {primary}, secondary {secondary}"
                );
                for ((_, description), role) in refusals.iter().zip(described) {
                    assert!(description.contains(role) && description.contains("this stack's region"), "{description}");
                    assert!(SNS_OPT_IN.iter().all(|region| description.contains(region)), "{description}");
                }
            }
        }
    }
}

/// With OrganizationId, publishing and the key are open only to the accounts or units named, and
/// a stack naming neither is refused; without it, this account alone.
#[test]
fn an_organizations_publishers_are_the_accounts_and_units_named() {
    let template = template("customer.yaml");
    let organization = ("OrganizationId", "o-a1b2c3d4e5");
    let refused = Stack::new(&template, "eu-west-1", &parameters(&[organization])).refusals();
    assert_eq!(rule_names(&refused), ["AnOrganizationNamesItsPublishers"]);

    let accounts = ("PublisherAccountIds", "444455556666,777788889999");
    let paths = ("PublisherOrgPaths", "o-a1b2c3d4e5/r-ab12/ou-ab12-11111111/*");
    let is_wildcard = |principal: &Value| *principal == json!("*") || *principal == json!({"AWS": "*"});
    for (given, by_account, by_path) in [
        (vec![], false, false),
        (vec![organization, accounts], true, false),
        (vec![organization, paths], false, true),
        (vec![organization, accounts, paths], true, true),
    ] {
        let stack = Stack::new(&template, "eu-west-1", &parameters(&given));
        assert_eq!(stack.refusals(), [], "{given:?}");
        let topic_policy = stack.resolve(&resource(&template, "ServiceTopicPolicy")["Properties"]).expect("a policy");
        let key = resource(&template, "ServiceTopicKey");
        let shared = !given.is_empty();
        assert_eq!(stack.creates(key), shared, "a key of the stack only for an organization");
        assert_eq!(stack.creates(&template["Outputs"]["ServiceTopicKeyArn"]), shared);
        let topic = stack.resolve(&resource(&template, "ServiceTopic")["Properties"]).expect("a topic");
        let expected_key =
            if shared { json!({"Fn::GetAtt": ["ServiceTopicKey", "Arn"]}) } else { json!("alias/aws/sns") };
        assert_eq!(topic["KmsMasterKeyId"], expected_key, "alias/aws/sns serves this account only");
        let this_account = json!({"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}});
        let allows = topic_policy["PolicyDocument"]["Statement"].as_array().expect("statements").clone();
        assert!(
            allows.iter().any(|s| s["Effect"] == "Allow" && s["Principal"] == this_account),
            "this account publishes"
        );
        assert_eq!(key["Properties"]["EnableKeyRotation"], true);
        let key_statements = if stack.creates(key) {
            stack.resolve(&key["Properties"]["KeyPolicy"]["Statement"]).expect("key statements")
        } else {
            json!([])
        };
        for statements in [&topic_policy["PolicyDocument"]["Statement"], &key_statements] {
            let open: Vec<&Value> = statements
                .as_array()
                .expect("statements")
                .iter()
                .filter(|s| s["Effect"] == "Allow" && is_wildcard(&s["Principal"]))
                .collect();
            assert_eq!(open.len(), usize::from(by_account) + usize::from(by_path), "{given:?}: {open:?}");
            for statement in open {
                let condition = &statement["Condition"];
                assert_eq!(condition["StringEquals"]["aws:PrincipalOrgID"], json!({"Ref": "OrganizationId"}));
                if statement.get("Action") != Some(&json!("sns:Publish")) {
                    // The key: through SNS in this region, for this topic only.
                    assert_eq!(statement["Action"], json!(["kms:GenerateDataKey*", "kms:Decrypt"]));
                    assert_eq!(
                        condition["StringEquals"]["kms:ViaService"],
                        json!({"Fn::Sub": "sns.${AWS::Region}.${AWS::URLSuffix}"})
                    );
                    assert_eq!(
                        condition["StringEquals"]["kms:EncryptionContext:aws:sns:topicArn"],
                        json!({"Fn::Sub": "arn:${AWS::Partition}:sns:${AWS::Region}:${AWS::AccountId}:${TopicName}"})
                    );
                }
                let narrowed = condition["StringEquals"]["aws:PrincipalAccount"]
                    == json!({"Ref": "PublisherAccountIds"})
                    || condition["ForAnyValue:StringLike"]["aws:PrincipalOrgPaths"]
                        == json!({"Ref": "PublisherOrgPaths"});
                assert!(narrowed, "never the whole organization: {statement}");
            }
        }
    }
}
