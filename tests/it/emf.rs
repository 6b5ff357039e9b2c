//! The metrics the handler writes are valid CloudWatch embedded metric format (EMF), checked
//! against the specification's rules, and carry what happened: each value under the dimensions
//! the alarms of `infra/regional.yaml` select (`Region`, `Role`, and `Status` for responses) and
//! again with cfn-once's `Version`.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use cfn_once::emf::{MetricsFlush, NAMESPACE, VERSION_DIMENSION, install, names};
use cfn_once_tests::{LocalRegion, Options, handler};
use serde_json::Value;

/// The EMF units CloudWatch accepts.
const UNITS: [&str; 27] = [
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// The process-wide collector (the `metrics` facade has one recorder per process).
fn collector() -> &'static MetricsFlush {
    static METRICS: OnceLock<MetricsFlush> = OnceLock::new();
    METRICS.get_or_init(|| install("us-east-1", "primary").expect("install the EMF collector"))
}

/// Checks one EMF document against the specification; returns its metric names and dimension
/// names, or what is wrong.
fn check_emf(line: &str) -> Result<(Vec<String>, Vec<String>), String> {
    fn ensure(condition: bool, why: impl FnOnce() -> String) -> Result<(), String> {
        if condition { Ok(()) } else { Err(why()) }
    }
    let document: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let aws = &document["_aws"];
    ensure(aws["Timestamp"].as_u64().is_some_and(|t| t > 1_600_000_000_000), || {
        "_aws.Timestamp is not epoch ms".into()
    })?;
    let directives = aws["CloudWatchMetrics"].as_array().ok_or("_aws.CloudWatchMetrics is not an array")?;
    ensure(!directives.is_empty(), || "no metric directive".into())?;
    let (mut metric_names, mut dimension_names) = (Vec::new(), Vec::new());
    for directive in directives {
        let namespace = directive["Namespace"].as_str().ok_or("Namespace is not a string")?;
        ensure(!namespace.is_empty() && namespace.len() <= 1024, || "Namespace length".into())?;
        for set in directive["Dimensions"].as_array().ok_or("Dimensions is not an array")? {
            let set = set.as_array().ok_or("a dimension set is not an array")?;
            ensure(set.len() <= 30, || "more than 30 dimensions in a set".into())?;
            for name in set {
                let name = name.as_str().ok_or("a dimension is not named by a string")?;
                ensure(document[name].is_string(), || format!("dimension {name} is not a string member of the root"))?;
                dimension_names.push(name.to_owned());
            }
        }
        let metrics = directive["Metrics"].as_array().ok_or("Metrics is not an array")?;
        ensure(!metrics.is_empty() && metrics.len() <= 100, || "1 to 100 metrics per directive".into())?;
        for metric in metrics {
            let name = metric["Name"].as_str().ok_or("a metric has no Name")?;
            if let Some(unit) = metric.get("Unit") {
                ensure(unit.as_str().is_some_and(|u| UNITS.contains(&u)), || format!("unknown unit {unit}"))?;
            }
            let valid = match &document[name] {
                Value::Number(_) => true,
                Value::Array(values) => {
                    !values.is_empty() && values.len() <= 100 && values.iter().all(Value::is_number)
                }
                _ => false,
            };
            ensure(valid, || format!("metric {name} is not a number or an array of 1 to 100 numbers"))?;
            metric_names.push(name.to_owned());
        }
    }
    Ok((metric_names, dimension_names))
}

#[tokio::test]
async fn the_handler_writes_valid_emf_with_what_happened() {
    let metrics = collector();
    let region =
        LocalRegion::new(Options { visibility_timeout_s: 1, max_receive_count: 2, ..Options::default() }).await;
    // The app is not given the collector, so it does not flush after each batch (to stdout);
    // this test flushes what the handler recorded itself.
    let app = region.app(&region.config(&[]));
    let esm = region.esm(10).await;
    let sent = region.request("create-echo.json").await;
    region.publish(&sent).await;
    region.sqs.send_message().queue_url(&region.queue.url).message_body("not a request").send().await.expect("send");
    region.serve_until_answered(&esm, &app, &sent, Duration::from_secs(30)).await;
    esm.poll_once(&handler(&app)).await.expect("poll");

    let mut emf = Vec::new();
    metrics.flush(&mut emf).expect("flush");
    let text = String::from_utf8(emf).expect("utf8");
    let mut seen_metrics = BTreeSet::new();
    let mut seen_dimensions = BTreeSet::new();
    for line in text.lines() {
        let (metric_names, dimension_names) =
            check_emf(line).unwrap_or_else(|why| panic!("invalid EMF ({why}): {line}"));
        seen_metrics.extend(metric_names);
        seen_dimensions.extend(dimension_names);
        let document: Value = serde_json::from_str(line).expect("json");
        assert_eq!(document["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        assert_eq!((document["Region"].as_str(), document["Role"].as_str()), (Some("us-east-1"), Some("primary")));
        if document.get(names::RESPONSES_SENT).is_some() {
            assert!(matches!(document["Status"].as_str(), Some("SUCCESS" | "FAILED")), "responses by status: {line}");
        }
        // Two dimension sets: the alarms' own, unchanged, and the same with the version.
        let sets: Vec<Vec<&str>> = document["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
            .as_array()
            .expect("a DimensionSet array")
            .iter()
            .map(|set| set.as_array().expect("a set").iter().map(|name| name.as_str().expect("a name")).collect())
            .collect();
        let alarms: Vec<&str> =
            if document.get("Status").is_some() { vec!["Region", "Role", "Status"] } else { vec!["Region", "Role"] };
        let versioned: Vec<&str> = alarms.iter().copied().chain([VERSION_DIMENSION]).collect();
        assert_eq!(sets, vec![alarms, versioned], "the alarms' dimension set, then it with the version: {line}");
        assert_eq!(document[VERSION_DIMENSION].as_str(), Some(cfn_once_core::build::VERSION), "{line}");
        if let Some(latency) = document.get(names::RESPONSE_LATENCY) {
            assert!(latency.is_array() || latency.is_number());
        }
    }
    for expected in [names::LEASES_ACQUIRED, names::RESPONSES_SENT, names::RESPONSE_LATENCY, names::DLQ_BOUND_FAILURES]
    {
        assert!(seen_metrics.contains(expected), "{expected} missing from {text}");
    }
    assert!(seen_dimensions.contains("Status"));
    assert!(seen_dimensions.contains(VERSION_DIMENSION));
    println!("{text}");
}

#[test]
fn the_checker_rejects_what_cloudwatch_would() {
    let good = r#"{"_aws":{"Timestamp":1795939200000,"CloudWatchMetrics":[{"Namespace":"cfn-once","Dimensions":[["Region"]],"Metrics":[{"Name":"LeasesAcquired","Unit":"Count"}]}]},"Region":"us-east-1","LeasesAcquired":1}"#;
    assert!(check_emf(good).is_ok());
    for bad in [
        good.replace(r#""Region":"us-east-1","#, ""),
        good.replace(r#""Unit":"Count""#, r#""Unit":"Widgets""#),
        good.replace(r#""LeasesAcquired":1}"#, r#""LeasesAcquired":"one"}"#),
        good.replace("1795939200000", "\"now\""),
    ] {
        assert!(check_emf(&bad).is_err(), "accepted {bad}");
    }
}
