//! The configuration read from variables: the defaults, every problem named at once, and the
//! checks across variables.

use std::collections::HashMap;

use super::*;
use crate::aws_names::FunctionRef;

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
    assert_eq!((routes[0].resource_type.as_str(), routes[0].on_event.as_str()), ("Custom::Reservation", "on-event"));
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

#[test]
fn the_handlers_own_timeout_is_read_when_given_and_refused_outside_lambdas_range() {
    let base = [
        ("AWS_REGION", "us-east-1"),
        ("CFN_ONCE_ROLE", "primary"),
        ("CFN_ONCE_TABLE", "leases"),
        ("CFN_ONCE_TOPIC_ARNS", TOPIC),
    ];
    assert_eq!(config(&base).expect("valid").handler_timeout_s, None);
    let with = |value: &str| config(&[base.as_slice(), &[("CFN_ONCE_HANDLER_TIMEOUT_S", value)]].concat());
    assert_eq!(with("900").expect("valid").handler_timeout_s, Some(900));
    for bad in ["0", "901", "two minutes"] {
        let problems = with(bad).expect_err("refused").problems;
        assert!(
            problems
                .iter()
                .any(|problem| problem.contains("CFN_ONCE_HANDLER_TIMEOUT_S") && problem.contains("1 to 900")),
            "{bad}: {problems:?}"
        );
    }
}

#[test]
fn privileged_topics_are_read_and_each_must_be_an_accepted_topic() {
    let other = "arn:aws:sns:eu-west-1:123456789012:cfn-once";
    let stray = "arn:aws:sns:us-west-2:444455556666:elsewhere";
    let base = [
        ("AWS_REGION", "us-east-1"),
        ("CFN_ONCE_ROLE", "primary"),
        ("CFN_ONCE_TABLE", "leases"),
        (
            "CFN_ONCE_TOPIC_ARNS",
            "arn:aws:sns:us-east-1:123456789012:cfn-once, arn:aws:sns:eu-west-1:123456789012:cfn-once",
        ),
    ];
    assert!(config(&base).expect("valid").privileged_topic_arns.is_empty(), "unset: none named, all privileged");
    let with = |value: &str| config(&[base.as_slice(), &[("CFN_ONCE_PRIVILEGED_TOPIC_ARNS", value)]].concat());
    assert!(with(" ").expect("valid").privileged_topic_arns.is_empty(), "empty is unset");
    assert_eq!(with(other).expect("valid").privileged_topic_arns, vec![other.to_owned()]);
    let problems = with(&format!("{other},{stray}")).expect_err("a stray privileged topic").problems;
    assert_eq!(
        problems,
        vec![format!(
            "CFN_ONCE_PRIVILEGED_TOPIC_ARNS entry {stray:?} is not in CFN_ONCE_TOPIC_ARNS: a privileged topic must be one whose requests are accepted; add it there or remove it here"
        )]
    );
}
