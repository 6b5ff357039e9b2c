//! Deploy-time traps: fixed names that allow one installation per account and region, a
//! reserved concurrency the account may not have, the secondary's delay read from two places.

use super::{environment, samconfig, template};
use serde_json::{Value, json};

/// The name properties of every named resource: (template, resource, property, value).
fn names(file: &str) -> Vec<(String, String, Value)> {
    let template = template(file);
    let mut found = Vec::new();
    for (resource, body) in template["Resources"].as_object().expect("Resources") {
        for property in ["QueueName", "FunctionName", "LogGroupName", "DashboardName", "TopicName", "BucketName"] {
            if let Some(value) = body["Properties"].get(property) {
                found.push((resource.clone(), property.to_owned(), value.clone()));
            }
        }
    }
    found
}

/// A name as deployed with the default Installation (and AnswerBucketPrefix): `Fn::Sub` with
/// `Role` and the pseudo parameters given, and the answer bucket's prefix resolved.
fn render(value: &Value, role: &str) -> String {
    let substitute = |text: &str, prefix: Option<&str>| {
        let mut text = text
            .replace("${Installation}", "cfn-once")
            .replace("${Role}", role)
            .replace("${AWS::Region}", "us-east-1")
            .replace("${AWS::AccountId}", "111122223333");
        if let Some(prefix) = prefix {
            text = text.replace("${Prefix}", prefix);
        }
        text
    };
    match &value["Fn::Sub"] {
        Value::String(text) => substitute(text, None),
        Value::Array(parts) => {
            assert_eq!(
                parts[1]["Prefix"],
                json!({"Fn::If": ["HasAnswerBucketPrefix", {"Ref": "AnswerBucketPrefix"}, {"Fn::Sub": "${Installation}-answers"}]}),
                "the prefix, or <Installation>-answers"
            );
            let prefix = substitute("${Installation}-answers", None);
            substitute(parts[0].as_str().expect("a Sub template"), Some(&prefix))
        }
        _ => panic!("{value} is not named from Installation"),
    }
}

/// Every name a stack fixes starts with Installation, so a second installation in an account
/// and region takes another value; with the default the names are the ones deployed stacks
/// already have, so an update replaces nothing.
#[test]
fn every_fixed_name_starts_with_the_installation_and_keeps_todays_names() {
    let expected = [
        ("regional.yaml", "primary", "DeadLetterQueue", "cfn-once-primary-dlq"),
        ("regional.yaml", "primary", "Queue", "cfn-once-primary"),
        ("regional.yaml", "primary", "AnswerBucket", "cfn-once-answers-111122223333-us-east-1"),
        ("regional.yaml", "primary", "FunctionLogGroup", "/aws/lambda/cfn-once-primary"),
        ("regional.yaml", "primary", "Function", "cfn-once-primary"),
        ("regional.yaml", "secondary", "Queue", "cfn-once-secondary"),
        ("regional.yaml", "secondary", "Function", "cfn-once-secondary"),
        ("regional.yaml", "primary", "Dashboard", "cfn-once-primary-us-east-1"),
        ("regional.yaml", "primary", "AlarmTopic", "cfn-once-primary-alarms"),
        ("lease-table.yaml", "", "SweeperLogGroup", "/aws/lambda/cfn-once-sweeper"),
        ("lease-table.yaml", "", "Sweeper", "cfn-once-sweeper"),
        ("lease-table.yaml", "", "AlarmTopic", "cfn-once-sweeper-alarms"),
    ];
    for file in ["regional.yaml", "lease-table.yaml"] {
        let template = template(file);
        let installation = &template["Parameters"]["Installation"];
        assert_eq!(
            (&installation["Default"], &installation["AllowedPattern"]),
            (&json!("cfn-once"), &json!("^[a-z][a-z0-9-]{0,25}$"))
        );
        let found = names(file);
        assert!(!found.is_empty(), "{file}");
        for (resource, property, value) in &found {
            assert!(value.to_string().contains("${Installation}"), "{file} {resource}.{property} = {value}");
            let wanted: Vec<_> = expected.iter().filter(|e| e.0 == file && e.2 == resource).collect();
            assert!(!wanted.is_empty(), "{file} {resource}: a name this test does not know");
            for (_, role, _, name) in wanted {
                assert_eq!(render(value, role), *name, "{file} {resource}.{property}");
            }
        }
    }
    // The longest Installation still leaves a valid answer bucket name (63 characters at most)
    // in the region with the longest name an MRSC replica may have.
    let longest = format!("{}-answers-111122223333-ap-northeast-1", "a".repeat(26));
    assert!(longest.len() <= 63, "{}", longest.len());
}

/// No reservation unless asked for: it takes executions from an account that keeps 100 of
/// them unreserved, and fails the deploy where they are not there.
#[test]
fn reserved_concurrency_is_optional_and_never_below_the_mapping() {
    let template = template("regional.yaml");
    let parameter = &template["Parameters"]["ReservedConcurrency"];
    assert_eq!(
        (&parameter["Type"], &parameter["Default"], &parameter["MinValue"]),
        (&json!("Number"), &json!(0), &json!(0))
    );
    let description = parameter["Description"].as_str().unwrap_or_default();
    assert!(description.contains("100") && description.contains("MaximumConcurrency"), "{description}");
    assert_eq!(
        template["Resources"]["Function"]["Properties"]["ReservedConcurrentExecutions"],
        json!({"Fn::If": ["HasReservedConcurrency", {"Ref": "ReservedConcurrency"}, {"Ref": "AWS::NoValue"}]})
    );
    assert_eq!(
        template["Conditions"]["HasReservedConcurrency"],
        json!({"Fn::Not": [{"Fn::Equals": [{"Ref": "ReservedConcurrency"}, "0"]}]})
    );
    let reserves = |parameters: &[(&str, &str)]| {
        super::Stack::new(&template, "us-east-1", parameters).condition("HasReservedConcurrency")
    };
    assert!(!reserves(&[]), "no reservation by default");
    assert!(reserves(&[("ReservedConcurrency", "20")]), "a reservation when asked for");
    // A rule cannot compare numbers, so samconfig.toml is held to it here.
    let environments = samconfig();
    for name in ["primary", "secondary"] {
        let parameters = &environment(&environments, name).parameters;
        let number = |key: &str, default: &Value| {
            parameters.get(key).map(|v| v.parse::<u64>().expect("a number")).or(default.as_u64()).expect("a value")
        };
        let reserved = number("ReservedConcurrency", &parameter["Default"]);
        let maximum = number("MaximumConcurrency", &template["Parameters"]["MaximumConcurrency"]["Default"]);
        assert!(reserved == 0 || reserved >= maximum, "{name}: {reserved} reserved below {maximum}");
    }
}

/// The secondary's delay is one value: the secondary's queue delays by it and the primary
/// counts failover time from it, so both regional stacks set it, to the same value, never 0.
#[test]
fn both_regions_read_one_secondary_delay() {
    let environments = samconfig();
    let delays: Vec<Option<&String>> = ["primary", "secondary"]
        .iter()
        .map(|name| environment(&environments, name).parameters.get("SecondaryDelaySeconds"))
        .collect();
    assert!(delays.iter().all(Option::is_some), "both regional stacks set SecondaryDelaySeconds: {delays:?}");
    assert_eq!(delays[0], delays[1], "the primary counts failover from the delay the secondary's queue applies");
    let delay_s: u64 = delays[0].and_then(|d| d.parse().ok()).expect("a number");
    let template = template("regional.yaml");
    let parameter = &template["Parameters"]["SecondaryDelaySeconds"];
    assert_eq!(parameter["MinValue"], 1, "a delay of 0 lets the secondary race a healthy primary");
    assert!(delay_s >= 1, "samconfig.toml: {delay_s}");
    let variables = &template["Resources"]["Function"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        variables["CFN_ONCE_SECONDARY_DELAY_S"],
        json!({"Ref": "SecondaryDelaySeconds"}),
        "not only the queue's"
    );
}
