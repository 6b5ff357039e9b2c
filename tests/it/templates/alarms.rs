//! The alarms, and who they page: every alarm notifies the topic given or the stack's own,
//! the stacks refuse to deploy with neither, and each alarm watches what its runbook entry in
//! docs/operating.md says it does.

use super::{PAGED, Stack, resources, rule_names, template};
use cfn_once_core::vocabulary::Role;
use cfn_once_sim::deployed::Deployed;
use serde_json::{Value, json};

/// Where every alarm sends its notification.
fn alarm_actions() -> Value {
    json!({"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}],
        {"Fn::If": ["CreatesAlarmTopic", [{"Ref": "AlarmTopic"}], {"Ref": "AWS::NoValue"}]}]})
}

/// A metric query of a metric-math alarm, by its Id.
fn query<'a>(alarm: &'a Value, id: &str) -> &'a Value {
    alarm["Properties"]["Metrics"]
        .as_array()
        .expect("a metric-math alarm")
        .iter()
        .find(|q| q["Id"] == id)
        .unwrap_or_else(|| panic!("no query {id}"))
}

/// The metric a query reads: (name, statistic, the queue or function it is about).
fn metric(query: &Value) -> (String, String, Value) {
    let stat = &query["MetricStat"];
    let dimension = stat["Metric"]["Dimensions"][0]["Value"].clone();
    (
        stat["Metric"]["MetricName"].as_str().expect("a metric").to_owned(),
        stat["Stat"].as_str().expect("Stat").to_owned(),
        dimension,
    )
}

/// Both stacks with alarms page someone: an alarm topic of yours, or one of the stack's own with
/// your address subscribed; neither is refused before anything is created.
#[test]
fn every_alarm_pages_the_given_topic_or_the_stacks_own() {
    for (name, region, base) in
        [("regional.yaml", "us-east-1", vec![("Role", "primary")]), ("lease-table.yaml", "us-east-1", vec![])]
    {
        let template = template(name);
        let alarms = resources(&template, "AWS::CloudWatch::Alarm");
        assert!(alarms.len() >= 2, "{name}");
        for (alarm_name, alarm) in &alarms {
            assert_eq!(alarm["Properties"]["AlarmActions"], alarm_actions(), "{name} {alarm_name}");
            let description = alarm["Properties"]["AlarmDescription"].as_str().unwrap_or_default();
            assert!(
                description.contains(&format!("docs/operating.md, {alarm_name}")),
                "{alarm_name}: its runbook entry"
            );
        }
        let stack = |parameters: &[(&str, &str)]| {
            let mut all = base.clone();
            all.extend_from_slice(parameters);
            let deployment = Stack::new(&template, region, &all);
            let refused = rule_names(&deployment.refusals()).iter().map(|r| (*r).to_owned()).collect::<Vec<_>>();
            (refused, deployment.condition("HasAlarmTopic"), deployment.condition("CreatesAlarmTopic"))
        };
        let topic = ("AlarmTopicArn", "arn:aws:sns:us-east-1:111122223333:oncall");
        assert_eq!(stack(&[]), (vec!["AlarmsPageSomeone".to_owned()], false, false), "{name}: nobody paged");
        assert_eq!(stack(&[PAGED]), (vec![], false, true), "{name}: an address, the stack's own topic");
        assert_eq!(stack(&[topic]), (vec![], true, false), "{name}: your topic");
        assert_eq!(stack(&[topic, PAGED]), (vec![], true, false), "{name}: your topic wins");

        // The stack's own topic is encrypted with a key CloudWatch may use to publish.
        let own = &template["Resources"]["AlarmTopic"];
        assert_eq!(own["Condition"], "CreatesAlarmTopic");
        assert_eq!(own["Properties"]["KmsMasterKeyId"], json!({"Ref": "AlarmTopicKey"}));
        assert_eq!(
            own["Properties"]["Subscription"],
            json!([{"Protocol": "email", "Endpoint": {"Ref": "AlarmEmail"}}])
        );
        let key = &template["Resources"]["AlarmTopicKey"];
        assert_eq!(
            (&key["Condition"], &key["Properties"]["EnableKeyRotation"]),
            (&json!("CreatesAlarmTopic"), &json!(true))
        );
        let cloudwatch = key["Properties"]["KeyPolicy"]["Statement"]
            .as_array()
            .expect("Statement")
            .iter()
            .find(|s| s["Principal"] == json!({"Service": "cloudwatch.amazonaws.com"}))
            .cloned()
            .expect("CloudWatch may use the key");
        assert_eq!(cloudwatch["Action"], json!(["kms:Decrypt", "kms:GenerateDataKey*"]));
    }
}

/// DLQ arrivals, not depth: the handler's own sends (NumberOfMessagesSent) and SQS's redrive
/// moves (a rise of visible plus in-flight, which NumberOfMessagesSent does not count).
#[test]
fn the_dead_letter_alarm_counts_arrivals_both_ways() {
    let template = template("regional.yaml");
    let alarm = &template["Resources"]["DeadLetterArrivalsAlarm"];
    let dlq = json!({"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]});
    assert_eq!(metric(query(alarm, "sent")), ("NumberOfMessagesSent".into(), "Sum".into(), dlq.clone()));
    assert_eq!(
        metric(query(alarm, "visible")),
        ("ApproximateNumberOfMessagesVisible".into(), "Maximum".into(), dlq.clone())
    );
    assert_eq!(metric(query(alarm, "hidden")), ("ApproximateNumberOfMessagesNotVisible".into(), "Maximum".into(), dlq));
    assert_eq!(query(alarm, "rise")["Expression"], "DIFF(FILL(visible, 0) + FILL(hidden, 0))");
    let arrivals = query(alarm, "arrivals");
    assert_eq!(
        (&arrivals["Expression"], &arrivals["ReturnData"]),
        (&json!("FILL(sent, 0) + IF(rise > 0, rise, 0)"), &json!(true))
    );
    let properties = &alarm["Properties"];
    assert_eq!(
        (&properties["Threshold"], &properties["ComparisonOperator"]),
        (&json!(0), &json!("GreaterThanThreshold"))
    );
    assert_eq!(properties["TreatMissingData"], "notBreaching", "back to OK after a quiet minute, to fire again");
}

/// No alarm reads ApproximateAgeOfOldestMessage, which leaves out copies received three times
/// or more; the queue's copies are counted whole (visible, in flight, delayed) against the
/// arrivals over a window no copy the handler still works on can outlive.
#[test]
fn copies_are_counted_whole_against_the_longest_deadline() {
    let template = template("regional.yaml");
    let text = serde_json::to_string(&template["Resources"]).expect("json");
    assert!(!text.contains("ApproximateAgeOfOldestMessage"), "no alarm or widget reads the oldest message's age");
    let alarm = &template["Resources"]["CopiesOutliveTheirDeadlineAlarm"];
    let queue = json!({"Fn::GetAtt": ["Queue", "QueueName"]});
    let window = json!({"Fn::FindInMap": ["Timeouts", {"Ref": "FunctionTimeoutSeconds"}, "StuckAfter"]});
    for (id, name, stat) in [
        ("visible", "ApproximateNumberOfMessagesVisible", "Minimum"),
        ("hidden", "ApproximateNumberOfMessagesNotVisible", "Minimum"),
        ("delayed", "ApproximateNumberOfMessagesDelayed", "Minimum"),
        ("arrived", "NumberOfMessagesSent", "Sum"),
    ] {
        assert_eq!(metric(query(alarm, id)), (name.into(), stat.into(), queue.clone()), "{id}");
        assert_eq!(query(alarm, id)["MetricStat"]["Period"], window, "{id}: one window");
    }
    assert_eq!(
        query(alarm, "outlived")["Expression"],
        "FILL(visible, 0) + FILL(hidden, 0) + FILL(delayed, 0) - FILL(arrived, 0)"
    );
    assert_eq!(alarm["Properties"]["ComparisonOperator"], "GreaterThanThreshold");
    assert_eq!(alarm["Properties"]["Threshold"], 0);

    // The window is the deadline ceiling, one visibility timeout a crash may hide a copy for
    // past it, and one invocation: a copy older than that is none the handler works on.
    let deployed = Deployed::regional().expect("infra/regional.yaml");
    let ceiling_s = deployed.settings(Role::Primary, "us-east-1").expect("settings").deadline_ceiling_s;
    for timeout in &deployed.function_timeouts {
        let stuck_after = &template["Mappings"]["Timeouts"][timeout.timeout_s.to_string()]["StuckAfter"];
        assert_eq!(
            stuck_after.as_u64(),
            Some(ceiling_s + timeout.visibility_s + timeout.timeout_s),
            "{}",
            timeout.timeout_s
        );
        assert_eq!(stuck_after.as_u64().unwrap_or(1) % 60, 0, "CloudWatch periods are minutes");
    }

    // And copies waiting with no receive page within five minutes.
    let unconsumed = &template["Resources"]["QueueNotConsumedAlarm"];
    assert_eq!(
        metric(query(unconsumed, "visible")),
        ("ApproximateNumberOfMessagesVisible".into(), "Minimum".into(), queue.clone())
    );
    assert_eq!(metric(query(unconsumed, "received")), ("NumberOfMessagesReceived".into(), "Sum".into(), queue));
    assert_eq!(query(unconsumed, "unconsumed")["Expression"], "IF(visible > 0 AND FILL(received, 0) == 0, 1, 0)");
    assert_eq!(
        (&unconsumed["Properties"]["EvaluationPeriods"], &unconsumed["Properties"]["DatapointsToAlarm"]),
        (&json!(5), &json!(5))
    );
}

/// The secondary stack pages when its handler answers anything: a failover nobody chose, read
/// from the metric the handler emits.
#[test]
fn the_secondary_answering_pages() {
    let template = template("regional.yaml");
    let alarm = &template["Resources"]["SecondaryAnswersAlarm"];
    assert_eq!(alarm["Condition"], "IsSecondary");
    for (id, status) in [("succeeded", "SUCCESS"), ("failed", "FAILED")] {
        let stat = &query(alarm, id)["MetricStat"];
        assert_eq!(stat["Metric"]["Namespace"], cfn_once::emf::NAMESPACE);
        assert_eq!(stat["Metric"]["MetricName"], cfn_once::emf::names::RESPONSES_SENT);
        assert_eq!(
            stat["Metric"]["Dimensions"],
            json!([{"Name": "Region", "Value": {"Ref": "AWS::Region"}}, {"Name": "Role", "Value": "secondary"}, {"Name": "Status", "Value": status}])
        );
    }
    assert_eq!(query(alarm, "answered")["Expression"], "FILL(succeeded, 0) + FILL(failed, 0)");
    let secondary = Stack::new(&template, "us-west-2", &[("Role", "secondary"), PAGED]);
    let primary = Stack::new(&template, "us-east-1", &[("Role", "primary"), PAGED]);
    assert!(secondary.creates(alarm) && !primary.creates(alarm));
}

/// The sweeper pages when a run fails and when it has not run for a day: its schedule runs it
/// twice a day, so 24 hourly periods without an invocation are two missed runs.
#[test]
fn the_sweeper_failing_or_missing_pages() {
    let template = template("lease-table.yaml");
    let sweeper = json!({"Ref": "Sweeper"});
    let errors = &template["Resources"]["SweeperErrorsAlarm"]["Properties"];
    assert_eq!((&errors["MetricName"], &errors["Dimensions"][0]["Value"]), (&json!("Errors"), &sweeper));
    assert_eq!((&errors["Threshold"], &errors["ComparisonOperator"]), (&json!(0), &json!("GreaterThanThreshold")));
    let missed = &template["Resources"]["SweeperMissedAlarm"]["Properties"];
    assert_eq!((&missed["MetricName"], &missed["Dimensions"][0]["Value"]), (&json!("Invocations"), &sweeper));
    assert_eq!((&missed["Threshold"], &missed["ComparisonOperator"]), (&json!(1), &json!("LessThanThreshold")));
    assert_eq!(missed["TreatMissingData"], "breaching", "no invocation publishes no datapoint");
    let window_s = missed["Period"].as_u64().unwrap_or(0) * missed["EvaluationPeriods"].as_u64().unwrap_or(0);
    assert_eq!(missed["DatapointsToAlarm"], missed["EvaluationPeriods"], "every period of the window empty");
    let schedule =
        &template["Resources"]["Sweeper"]["Properties"]["Events"]["TwiceADay"]["Properties"]["ScheduleExpression"];
    // rate(<n> <unit>), the schedule's only form here.
    let rate = schedule.as_str().and_then(|s| s.strip_prefix("rate(")?.strip_suffix(')')).expect("a rate");
    let (count, unit) = rate.split_once(' ').expect("rate(<n> <unit>)");
    let unit_s = match unit.trim_end_matches('s') {
        "minute" => 60,
        "hour" => 3600,
        "day" => 86_400,
        other => panic!("a rate unit this test does not read: {other}"),
    };
    let every_s = count.parse::<u64>().expect("a count") * unit_s;
    assert!(window_s >= 2 * every_s, "a {window_s} s window holds two runs every {every_s} s");
}

/// The README's cost section counts the alarms `samconfig.toml` deploys, and the metrics they
/// read (CloudWatch prices an alarm per metric): this is where its figure comes from.
#[test]
fn the_readmes_alarm_count_is_what_samconfig_deploys() {
    let (mut alarms, mut metrics) = (0, 0);
    for environment in super::samconfig() {
        // A built template (.aws-sam/build-<source>/template.yaml) is its source's, function
        // code resolved.
        let file = &environment.template;
        let built = file.strip_prefix(".aws-sam/build-").and_then(|rest| rest.strip_suffix("/template.yaml"));
        let name = match (file.strip_prefix("infra/"), built) {
            (Some(source), _) => source.to_owned(),
            (None, Some(source)) => format!("{source}.yaml"),
            (None, None) => panic!("{}: a template of neither infra/ nor .aws-sam/: {file}", environment.name),
        };
        let template = template(&name);
        let parameters: Vec<(&str, &str)> =
            environment.parameters.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let stack = Stack::new(&template, &environment.region, &parameters);
        for (_, alarm) in resources(&template, "AWS::CloudWatch::Alarm") {
            if !stack.creates(alarm) {
                continue;
            }
            alarms += 1;
            metrics += match alarm["Properties"]["Metrics"].as_array() {
                Some(queries) => queries.iter().filter(|query| query.get("MetricStat").is_some()).count(),
                None => 1,
            };
        }
    }
    let readme = std::fs::read_to_string(cfn_once_tests::workspace_root().join("README.md")).expect("README.md");
    let claim = format!("{alarms} alarms reading {metrics} metrics as `samconfig.toml` deploys them");
    assert!(readme.contains(&claim), "README.md should say \"{claim}\"");
}
