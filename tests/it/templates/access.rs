//! Who may touch the queues, and how far the function's role reaches: the queue and DLQ
//! policies evaluated as IAM evaluates them, SNS's regional principals, the role's boundary,
//! the lease table's deny and the privileged topics.

use super::{PAGED, Stack, arn_like, environment, rule_names, samconfig, template};
use crate::rules::SNS_OPT_IN;
use serde_json::{Value, json};

const FUNCTION_ROLE: &str = "arn:aws:iam::111122223333:role/cfn-once-primary-FunctionRole-ABC";
const OPERATOR: &str = "arn:aws:iam::111122223333:role/cfn-once-redrive";
const STRANGER: &str = "arn:aws:iam::111122223333:role/anything-else";
const QUEUE: &str = "arn:aws:sqs:us-east-1:111122223333:cfn-once-primary";
const FOREIGN_TOPIC: &str = "arn:aws:sns:us-east-2:444455556666:cfn-once-service-token";

/// Every action that reads, removes or moves a message.
const MESSAGE_ACTIONS: [&str; 6] = [
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:PurgeQueue",
    "sqs:StartMessageMoveTask",
    "sqs:CancelMessageMoveTask",
];

/// What CloudFormation and administrators do to a queue: never denied, or a stack could not be
/// updated or deleted.
const CONTROL_ACTIONS: [&str; 10] = [
    "sqs:GetQueueAttributes",
    "sqs:SetQueueAttributes",
    "sqs:DeleteQueue",
    "sqs:CreateQueue",
    "sqs:GetQueueUrl",
    "sqs:TagQueue",
    "sqs:UntagQueue",
    "sqs:ListQueueTags",
    "sqs:AddPermission",
    "sqs:ListDeadLetterSourceQueues",
];

/// IAM's answer to a request against a queue policy (and, for principals of the queue's
/// account, their own IAM policies).
#[derive(Debug, PartialEq, Clone, Copy)]
enum Decision {
    Allowed,
    /// An explicit deny of the queue policy: nothing else can allow it.
    Denied,
    /// No statement allows it.
    NotAllowed,
}

/// A request, as far as the queue policies' conditions look at it.
#[derive(Clone, Copy, Debug)]
struct Request<'a> {
    action: &'a str,
    /// The calling service principal (`sns.amazonaws.com`), or none for an IAM principal.
    service: Option<&'a str>,
    /// `aws:PrincipalArn`, present for IAM principals (a role session's is its role's ARN).
    principal_arn: Option<&'a str>,
    /// `aws:SourceArn`, present when a service acts for a resource (SNS for its topic).
    source_arn: Option<&'a str>,
    /// `aws:SecureTransport`.
    secure: bool,
}

impl<'a> Request<'a> {
    fn from_service(action: &'a str, service: &'a str, source: &'a str) -> Self {
        Self { action, service: Some(service), principal_arn: None, source_arn: Some(source), secure: true }
    }

    fn from_role(action: &'a str, role: &'a str) -> Self {
        Self { action, service: None, principal_arn: Some(role), source_arn: None, secure: true }
    }
}

/// One of the regional template's queue policies, with its parameters given.
struct QueuePolicy<'a> {
    template: &'a Value,
    statements: Vec<Value>,
    topics: Vec<&'a str>,
    /// `RedrivePrincipalArns`; CloudFormation makes the empty default a list of one empty value.
    redrive: Vec<&'a str>,
}

impl<'a> QueuePolicy<'a> {
    fn new(template: &'a Value, resource: &str, topics: Vec<&'a str>, redrive: Vec<&'a str>) -> Self {
        let policy = &template["Resources"][resource];
        assert_eq!(policy["Type"], "AWS::SQS::QueuePolicy", "{resource}");
        let statements = policy["Properties"]["PolicyDocument"]["Statement"].as_array().expect("Statement").clone();
        Self { template, statements, topics, redrive }
    }

    /// IAM's policy evaluation for one request: an explicit deny wins, then any allow (the
    /// queue policy's, or the caller's own IAM policy when `identity_allows`).
    fn decide(&self, request: &Request, identity_allows: bool) -> Decision {
        let matching: Vec<&Value> = self.statements.iter().filter(|s| self.applies(s, request)).collect();
        if matching.iter().any(|s| s["Effect"] == "Deny") {
            Decision::Denied
        } else if identity_allows || matching.iter().any(|s| s["Effect"] == "Allow") {
            Decision::Allowed
        } else {
            Decision::NotAllowed
        }
    }

    fn strings(&self, value: &Value) -> Vec<String> {
        match value {
            Value::String(text) => vec![text.clone()],
            Value::Array(items) => items.iter().flat_map(|item| self.strings(item)).collect(),
            Value::Object(call) => {
                if let Some(path) = call.get("Fn::FindInMap").and_then(Value::as_array) {
                    let keys: Vec<&str> = path.iter().filter_map(Value::as_str).collect();
                    let found = &self.template["Mappings"][keys[0]][keys[1]][keys[2]];
                    assert!(!found.is_null(), "no mapping {keys:?}");
                    return self.strings(found);
                }
                match (call.get("Ref").and_then(Value::as_str), call.get("Fn::GetAtt")) {
                    (Some("ServiceTopicArns"), _) => self.topics.iter().map(|t| (*t).to_owned()).collect(),
                    (Some("RedrivePrincipalArns"), _) => self.redrive.iter().map(|r| (*r).to_owned()).collect(),
                    (_, Some(attribute)) if *attribute == json!(["FunctionRole", "Arn"]) => vec![FUNCTION_ROLE.into()],
                    (_, Some(attribute)) if *attribute == json!(["Queue", "Arn"]) => vec![QUEUE.into()],
                    _ => panic!("unexpected value {value}"),
                }
            }
            other => panic!("unexpected value {other}"),
        }
    }

    fn applies(&self, statement: &Value, request: &Request) -> bool {
        let actions = self.strings(&statement["Action"]);
        if !actions.iter().any(|action| action == request.action || action == "sqs:*") {
            return false;
        }
        let principal = &statement["Principal"];
        let principal_matches = match (principal, principal.get("Service")) {
            (Value::String(any), _) if any == "*" => true,
            (_, Some(services)) => request.service.is_some_and(|s| self.strings(services).iter().any(|v| v == s)),
            _ => panic!("unexpected Principal {principal}"),
        };
        let conditions = statement.get("Condition").and_then(Value::as_object).cloned().unwrap_or_default();
        // Several operators, and several keys under one operator, are ANDed.
        principal_matches
            && conditions.iter().all(|(operator, keys)| {
                keys.as_object().expect("keys").iter().all(|(key, values)| self.holds(operator, key, values, request))
            })
    }

    /// One operator on one key, with IAM's rules for several values (OR, and NOR for a negated
    /// operator) and for an absent key (false, but true for a negated operator).
    fn holds(&self, operator: &str, key: &str, values: &Value, request: &Request) -> bool {
        let present = match key {
            "aws:SourceArn" => request.source_arn.map(str::to_owned),
            "aws:PrincipalArn" => request.principal_arn.map(str::to_owned),
            "aws:SecureTransport" => Some(request.secure.to_string()),
            other => panic!("the queue policy uses {other}, which this evaluator does not model"),
        };
        let values = self.strings(values);
        let any_matches = |actual: &str| values.iter().any(|value| arn_like(value, actual));
        match operator {
            "ArnEquals" | "ArnLike" => present.is_some_and(|actual| any_matches(&actual)),
            "ArnNotEquals" | "ArnNotLike" => present.is_none_or(|actual| !any_matches(&actual)),
            "Bool" => present.is_some_and(|actual| values.contains(&actual)),
            other => panic!("the queue policy uses {other}, which this evaluator does not model"),
        }
    }
}

fn samconfig_topics() -> Vec<String> {
    let environments = samconfig();
    environment(&environments, "primary").parameters["ServiceTopicArns"].split(',').map(str::to_owned).collect()
}

/// The queue admits a delivery from any ServiceToken topic (one per customer region), through
/// any of SNS's principals, and a send from the redrive operators; it lets only the function's
/// role and the operators read, delete, purge or move messages, whatever IAM policies in the
/// account grant. Evaluated for the topics `samconfig.toml` lists.
#[test]
fn the_queue_policy_admits_every_service_topic_and_nobody_else() {
    let template = template("regional.yaml");
    let topics = samconfig_topics();
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    assert!(topics.len() >= 2, "samconfig.toml shows several customer regions: {topics:?}");
    for redrive in [vec![OPERATOR], vec![""]] {
        let queue = QueuePolicy::new(&template, "QueuePolicy", topics.clone(), redrive.clone());
        let listed = redrive == [OPERATOR];
        for topic in &topics {
            for sns in ["sns.amazonaws.com", "sns.ap-northeast-3.amazonaws.com", "sns.me-central-1.amazonaws.com"] {
                let delivery = Request::from_service("sqs:SendMessage", sns, topic);
                assert_eq!(queue.decide(&delivery, false), Decision::Allowed, "{sns} delivering from {topic}");
            }
            let insecure =
                Request { secure: false, ..Request::from_service("sqs:SendMessage", "sns.amazonaws.com", topic) };
            assert_eq!(queue.decide(&insecure, false), Decision::Denied, "{topic} without TLS");
            for action in MESSAGE_ACTIONS {
                let sns = Request::from_service(action, "sns.amazonaws.com", topic);
                assert_ne!(queue.decide(&sns, false), Decision::Allowed, "SNS may only send, not {action}");
            }
        }
        let foreign = Request::from_service("sqs:SendMessage", "sns.amazonaws.com", FOREIGN_TOPIC);
        assert_eq!(queue.decide(&foreign, false), Decision::Denied, "another account's topic");
        // A role of this account whose IAM policy grants every SQS action on the queue. Its own
        // requests carry no aws:SourceArn: AWS sets that key when a service acts for a resource.
        for action in MESSAGE_ACTIONS.iter().chain(&["sqs:SendMessage"]) {
            assert_eq!(queue.decide(&Request::from_role(action, STRANGER), true), Decision::Denied, "{action}");
        }
        for action in MESSAGE_ACTIONS {
            let function = Request::from_role(action, FUNCTION_ROLE);
            assert_eq!(queue.decide(&function, true), Decision::Allowed, "the function's role: {action}");
            let expected = if listed { Decision::Allowed } else { Decision::Denied };
            assert_eq!(queue.decide(&Request::from_role(action, OPERATOR), true), expected, "{action}, {redrive:?}");
        }
        // The queue policy only spares the operators; their own IAM policy must grant the send.
        let send = Request::from_role("sqs:SendMessage", OPERATOR);
        let (granted, not_granted) =
            if listed { (Decision::Allowed, Decision::NotAllowed) } else { (Decision::Denied, Decision::Denied) };
        assert_eq!(queue.decide(&send, true), granted, "the operator, redrive {redrive:?}");
        assert_eq!(queue.decide(&send, false), not_granted, "no grant, redrive {redrive:?}");
    }
}

/// The DLQ holds the same ResponseURLs, and `cfn-once redrive` injects what it holds: only the
/// function's role (which moves messages there) and the operators may read, remove or send.
#[test]
fn the_dead_letter_queue_is_the_function_and_the_operators_only() {
    let template = template("regional.yaml");
    let topics = samconfig_topics();
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    for redrive in [vec![OPERATOR], vec![""]] {
        let dlq = QueuePolicy::new(&template, "DeadLetterQueuePolicy", topics.clone(), redrive.clone());
        let listed = redrive == [OPERATOR];
        for action in MESSAGE_ACTIONS.iter().chain(&["sqs:SendMessage"]) {
            assert_eq!(dlq.decide(&Request::from_role(action, STRANGER), true), Decision::Denied, "{action}");
            assert_eq!(dlq.decide(&Request::from_role(action, FUNCTION_ROLE), true), Decision::Allowed, "{action}");
            let expected = if listed { Decision::Allowed } else { Decision::Denied };
            assert_eq!(dlq.decide(&Request::from_role(action, OPERATOR), true), expected, "{action} {redrive:?}");
            let insecure = Request { secure: false, ..Request::from_role(action, FUNCTION_ROLE) };
            assert_eq!(dlq.decide(&insecure, true), Decision::Denied, "{action} without TLS");
        }
        // Nobody forges a DLQ message through a topic, and SQS's own move past maxReceiveCount,
        // should the DLQ's policy apply to it at all, is not denied.
        for topic in &topics {
            let sns = Request::from_service("sqs:SendMessage", "sns.amazonaws.com", topic);
            assert_ne!(dlq.decide(&sns, false), Decision::Allowed, "{topic}");
        }
        let moved = Request::from_service("sqs:SendMessage", "sqs.amazonaws.com", QUEUE);
        assert_ne!(dlq.decide(&moved, true), Decision::Denied, "SQS's redrive from the queue");
    }
}

/// A stuck stack is the worst failure: no deny may reach what CloudFormation or an administrator
/// does to the queues, over TLS, whoever they are. Both policies deny one list of message actions.
#[test]
fn no_queue_policy_denies_the_control_plane() {
    let template = template("regional.yaml");
    let topics = samconfig_topics();
    for resource in ["QueuePolicy", "DeadLetterQueuePolicy"] {
        let policy = QueuePolicy::new(&template, resource, topics.iter().map(String::as_str).collect(), vec![""]);
        for action in CONTROL_ACTIONS {
            let cloudformation = Request::from_role(action, STRANGER);
            assert_eq!(policy.decide(&cloudformation, true), Decision::Allowed, "{resource}: {action}");
        }
        let readers = policy.statements.iter().find(|s| s["Sid"] == "NoOtherReaders").expect("NoOtherReaders");
        assert_eq!(readers["Action"], json!(MESSAGE_ACTIONS), "{resource}");
    }
}

/// The queue admits SNS's regional principal of every opt-in Region AWS lists, this handler
/// region's own among them (ap-northeast-3 is an MRSC region and an SNS opt-in Region), from one
/// list in the template's Mappings.
#[test]
fn the_queue_admits_sns_from_every_opt_in_region() {
    let template = template("regional.yaml");
    let mut expected = vec!["sns.amazonaws.com".to_owned()];
    expected.extend(SNS_OPT_IN.iter().map(|region| format!("sns.{region}.amazonaws.com")));
    assert_eq!(template["Mappings"]["Sns"]["Principals"]["Service"], json!(expected));
    let allow = &template["Resources"]["QueuePolicy"]["Properties"]["PolicyDocument"]["Statement"][0];
    assert_eq!(allow["Principal"]["Service"], json!({"Fn::FindInMap": ["Sns", "Principals", "Service"]}));
    for region in super::MRSC_REGION_SETS.iter().flat_map(|set| set.iter()) {
        if SNS_OPT_IN.contains(region) {
            assert!(expected.contains(&format!("sns.{region}.amazonaws.com")), "{region}, a handler region");
        }
    }
    // SNS does not deliver from one opt-in Region to another at all: samconfig.toml never pairs
    // a customer topic and a handler queue that are both in one.
    let environments = samconfig();
    for handler in ["primary", "secondary"] {
        let region = environment(&environments, handler).region.clone();
        for topic in samconfig_topics() {
            let topic_region = topic.split(':').nth(3).unwrap_or_default();
            let both = SNS_OPT_IN.contains(&region.as_str()) && SNS_OPT_IN.contains(&topic_region);
            assert!(!both, "{topic} cannot deliver to the {handler} in {region}");
        }
    }
}

/// Your own managed policies are attached only under a boundary of yours; without them the role
/// is bounded by its own grants (every_role_holds_exactly_these_permissions).
#[test]
fn extra_managed_policies_need_a_permissions_boundary() {
    let template = template("regional.yaml");
    let extra = ("ExtraManagedPolicyArns", "arn:aws:iam::111122223333:policy/my-providers");
    let boundary = ("PermissionsBoundaryArn", "arn:aws:iam::111122223333:policy/my-boundary");
    let refusals = |parameters: &[(&str, &str)]| {
        let mut all = vec![("Role", "primary"), PAGED];
        all.extend_from_slice(parameters);
        rule_names(&Stack::new(&template, "us-east-1", &all).refusals())
            .iter()
            .map(|r| (*r).to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(refusals(&[extra]), ["ExtraPoliciesNeedABoundary"]);
    assert_eq!(refusals(&[extra, boundary]), Vec::<String>::new());
    assert_eq!(refusals(&[boundary]), Vec::<String>::new());
    assert_eq!(refusals(&[]), Vec::<String>::new());
    let stack = Stack::new(&template, "us-east-1", &[("Role", "primary"), PAGED]);
    assert!(!stack.condition("HasPermissionsBoundary"), "the stack's own boundary by default");
}

/// The lease table's deny leaves the function's role, whatever else it is granted, the two
/// actions the handler needs: every write DynamoDB names, PartiQL's and the table's own
/// included, is denied on the table and everything below it, in every region.
#[test]
fn the_lease_table_deny_leaves_only_get_and_update() {
    let template = template("regional.yaml");
    let statements = template["Resources"]["FunctionPermissions"]["Properties"]["PolicyDocument"]["Statement"]
        .as_array()
        .expect("Statement")
        .clone();
    let deny = statements.iter().find(|s| s["Sid"] == "NothingElseOnTheLeaseTable").expect("the lease table's deny");
    assert_eq!(deny["Effect"], "Deny");
    assert!(deny.get("Action").is_none(), "a NotAction deny, so that actions DynamoDB adds are denied too");
    let spared: Vec<&str> = deny["NotAction"].as_array().expect("NotAction").iter().filter_map(Value::as_str).collect();
    assert_eq!(spared, ["dynamodb:GetItem", "dynamodb:UpdateItem"]);
    let resources: Vec<&str> =
        deny["Resource"].as_array().expect("resources").iter().filter_map(|r| r["Fn::Sub"].as_str()).collect();
    assert_eq!(
        resources,
        [
            "arn:${AWS::Partition}:dynamodb:*:${AWS::AccountId}:table/${TableName}",
            "arn:${AWS::Partition}:dynamodb:*:${AWS::AccountId}:table/${TableName}/*"
        ]
    );
    // The writes of the Service Authorization Reference for DynamoDB (TransactWriteItems and
    // the PartiQL statements are authorized as these), none of them spared.
    for write in [
        "PutItem",
        "DeleteItem",
        "BatchWriteItem",
        "ConditionCheckItem",
        "PartiQLInsert",
        "PartiQLUpdate",
        "PartiQLDelete",
        "DeleteTable",
        "UpdateTable",
        "UpdateTimeToLive",
        "UpdateContinuousBackups",
        "RestoreTableToPointInTime",
        "PutResourcePolicy",
    ] {
        assert!(!spared.contains(&format!("dynamodb:{write}").as_str()), "{write}");
    }
}

/// The topics trusted with Adopt and the Functions routes reach the handler as one variable.
#[test]
fn privileged_topics_are_a_parameter_the_handler_reads() {
    let template = template("regional.yaml");
    let parameter = &template["Parameters"]["PrivilegedTopicArns"];
    assert_eq!((&parameter["Type"], &parameter["Default"]), (&json!("CommaDelimitedList"), &json!("")));
    let variables = &template["Resources"]["Function"]["Properties"]["Environment"]["Variables"];
    assert_eq!(variables["CFN_ONCE_PRIVILEGED_TOPIC_ARNS"], json!({"Fn::Join": [",", {"Ref": "PrivilegedTopicArns"}]}));
}

/// A privileged topic the handler does not accept, or privilege under raw delivery (where no
/// request carries its topic), is refused before the change set runs.
#[test]
fn privileged_topics_must_be_service_topics_delivered_in_envelopes() {
    let template = template("regional.yaml");
    let topics = "arn:aws:sns:us-east-2:111122223333:cfn-once-service-token,arn:aws:sns:eu-west-1:111122223333:org";
    let deploy = |privileged: &str, raw: &str| {
        let parameters = [
            ("Role", "primary"),
            ("ServiceTopicArns", topics),
            ("PrivilegedTopicArns", privileged),
            ("RawMessageDelivery", raw),
            PAGED,
        ];
        rule_names(&Stack::new(&template, "us-east-1", &parameters).refusals()).join(",")
    };
    assert_eq!(deploy("", "false"), "", "none named: every topic is privileged");
    assert_eq!(deploy("", "true"), "", "raw delivery without privileged topics");
    assert_eq!(deploy("arn:aws:sns:us-east-2:111122223333:cfn-once-service-token", "false"), "");
    let stray = "arn:aws:sns:us-east-2:111122223333:cfn-once-service-token,arn:aws:sns:us-east-2:111122223333:other";
    assert_eq!(deploy(stray, "false"), "PrivilegedTopicsAreServiceTopics");
    assert_eq!(
        deploy("arn:aws:sns:us-east-2:111122223333:cfn-once-service-token", "true"),
        "PrivilegedTopicsAreServiceTopics"
    );
}
