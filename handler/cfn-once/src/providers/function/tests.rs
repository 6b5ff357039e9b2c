//! The function provider through the real protocol (`ProviderTest`), on a scripted Lambda: the
//! event each function is given, its answers read, its errors, and Invokes whose outcome is unknown.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cfn_once_core::aws_names::FunctionRef;
use cfn_once_core::clock::{Clock, ManualClock};
use cfn_once_core::config::FunctionRoute;
use cfn_once_core::response::Status;
use cfn_once_core::testing::ProviderTest;
use serde_json::{Value, json};

use super::timeouts::{INVOKE_SLACK_MS, handler_timeout_needed_s};
use super::{FunctionInvoker, FunctionProvider, InvokeError, Invoked};

/// A fake Lambda: answers from a script per function, and keeps every event it was given and
/// the client timeout of every Invoke.
#[derive(Debug, Default)]
struct Script {
    answers: Mutex<BTreeMap<String, VecDeque<Result<Invoked, InvokeError>>>>,
    events: Mutex<Vec<(String, Value)>>,
    /// Every function's own timeout, in ms ([`FUNCTION_TIMEOUT_MS`] when not set).
    function_timeout_ms: Option<u64>,
    /// How long every Invoke runs, on the kit's clock (none: it answers at once). An Invoke
    /// whose client gives up first is an unknown outcome, as `LambdaInvoker` reports it.
    runs_for: Option<(ManualClock, u64)>,
    timeouts_ms: Mutex<Vec<u64>>,
}

/// The fake functions' own timeout, unless a test sets one: well within the kit's invocations.
const FUNCTION_TIMEOUT_MS: u64 = 30_000;

impl Script {
    /// Functions whose own timeout is `timeout_ms` and whose every run takes `run_ms` on `clock`.
    fn slow(clock: ManualClock, timeout_ms: u64, run_ms: u64) -> Self {
        Self { function_timeout_ms: Some(timeout_ms), runs_for: Some((clock, run_ms)), ..Self::default() }
    }
    fn timeouts_ms(&self) -> Vec<u64> {
        self.timeouts_ms.lock().unwrap().clone()
    }
    fn then(&self, function: &str, answer: Result<Invoked, InvokeError>) -> &Self {
        self.answers.lock().unwrap().entry(function.into()).or_default().push_back(answer);
        self
    }
    fn events(&self) -> Vec<(String, Value)> {
        self.events.lock().unwrap().clone()
    }
}

#[async_trait]
impl FunctionInvoker for Script {
    async fn invoke(&self, function: &str, payload: Vec<u8>, timeout_ms: u64) -> Result<Invoked, InvokeError> {
        self.events.lock().unwrap().push((function.into(), serde_json::from_slice(&payload).unwrap()));
        self.timeouts_ms.lock().unwrap().push(timeout_ms);
        if let Some((clock, run_ms)) = &self.runs_for {
            clock.sleep_ms((*run_ms).min(timeout_ms)).await;
            if *run_ms > timeout_ms {
                return Err(InvokeError::Unknown(format!(
                    "the Invoke of {function} had no answer within {timeout_ms} ms"
                )));
            }
        }
        self.answers
            .lock()
            .unwrap()
            .get_mut(function)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| Err(InvokeError::Permanent(format!("the script has no more answers for {function}"))))
    }

    async fn timeout_ms(&self, _function: &str) -> Result<u64, InvokeError> {
        Ok(self.function_timeout_ms.unwrap_or(FUNCTION_TIMEOUT_MS))
    }
}

fn ok(answer: Value) -> Result<Invoked, InvokeError> {
    Ok(Invoked::Response(answer.to_string().into_bytes()))
}

fn kit(script: &Arc<Script>, is_complete: bool) -> ProviderTest {
    kit_on(ProviderTest::new(), script, is_complete)
}

/// `kit`'s provider on `test`, a kit set up by the caller (its invocations' length).
fn kit_on(test: ProviderTest, script: &Arc<Script>, is_complete: bool) -> ProviderTest {
    let route = FunctionRoute {
        resource_type: "Custom::Reservation".into(),
        on_event: FunctionRef::parse("on-event", "us-east-1").unwrap(),
        is_complete: is_complete.then(|| FunctionRef::parse("is-complete", "us-east-1").unwrap()),
        answers_itself: false,
    };
    let invoker: Arc<dyn FunctionInvoker> = script.clone();
    test.provider("Custom::Reservation", FunctionProvider::new(route, "us-east-1", invoker))
}

#[test]
fn on_event_gets_the_cdk_event_without_the_response_url_and_its_answer_is_the_answer() {
    let script = Arc::new(Script::default());
    script.then("on-event", ok(json!({"PhysicalResourceId": "r-ada", "Data": {"Size": 3}})));
    script.then("on-event", ok(json!({"Data": {"Size": 4}})));
    script.then("on-event", ok(Value::Null));
    let mut kit = kit(&script, false);
    let created = kit.create("Custom::Reservation", json!({"Name": "ada"}));
    assert_eq!(created.status(), Some(Status::Success));
    assert_eq!(created.physical_resource_id(), "r-ada");
    assert_eq!(created.data()["Size"], json!(3));
    let updated =
        kit.update("Custom::Reservation", "r-ada", json!({"Name": "ada", "Size": "4"}), json!({"Name": "ada"}));
    assert_eq!(
        (updated.status(), updated.physical_resource_id()),
        (Some(Status::Success), "r-ada"),
        "the id stays by default"
    );
    let deleted = kit.delete("Custom::Reservation", "r-ada", json!({"Name": "ada"}));
    assert_eq!(deleted.status(), Some(Status::Success));

    let events = script.events();
    assert_eq!(events.len(), 3);
    let (function, create) = &events[0];
    assert_eq!(function, "on-event");
    assert!(create.get("ResponseURL").is_none(), "the function never sees the ResponseURL: {create}");
    assert!(!create.to_string().contains("X-Amz-Signature"));
    assert_eq!(create["RequestType"], "Create");
    assert_eq!(create["ResourceType"], "Custom::Reservation");
    assert_eq!(create["ResourceProperties"]["Name"], "ada");
    assert!(create.get("PhysicalResourceId").is_none());
    assert_eq!(create["CfnOnce"]["Fence"]["Value"], 1);
    assert_eq!(create["CfnOnce"]["Region"], "us-east-1");
    assert_eq!(create["CfnOnce"]["TookOverFrom"], Value::Null);
    assert!(create["CfnOnce"]["RemainingMs"].as_u64().unwrap() > 0);
    assert_eq!(
        (events[1].1["RequestType"].as_str(), events[1].1["PhysicalResourceId"].as_str()),
        (Some("Update"), Some("r-ada"))
    );
    assert_eq!(events[1].1["OldResourceProperties"]["Name"], "ada");
    assert_eq!(events[2].1["RequestType"], "Delete");
}

#[test]
fn the_properties_come_without_their_service_token() {
    let script = Arc::new(Script::default());
    script.then("on-event", ok(json!({})));
    kit(&script, false)
        .create("Custom::Reservation", json!({"ServiceToken": "arn:aws:sns:us-east-2:1:t", "Name": "al"}));
    assert_eq!(script.events()[0].1["ResourceProperties"], json!({"Name": "al"}));
}

#[test]
fn a_create_without_an_id_gets_the_request_id_as_the_cdk_framework_gives() {
    let script = Arc::new(Script::default());
    script.then("on-event", ok(json!({})));
    let mut kit = kit(&script, false);
    let request = kit.create_request("Custom::Reservation", json!({"Name": "bo"}));
    let created = kit.deliver(&request);
    assert_eq!(created.physical_resource_id(), request.request["RequestId"].as_str().unwrap());
}

#[test]
fn is_complete_is_polled_until_it_says_so_and_its_data_is_merged() {
    let script = Arc::new(Script::default());
    script.then("on-event", ok(json!({"PhysicalResourceId": "r-cy", "Data": {"Started": "yes", "Size": 1}})));
    script.then("is-complete", ok(json!({"IsComplete": false})));
    script.then("is-complete", ok(json!({"IsComplete": false})));
    script.then("is-complete", ok(json!({"IsComplete": true, "Data": {"Ready": "true", "Size": 2}})));
    let mut kit = kit(&script, true);
    let created = kit.create("Custom::Reservation", json!({"Name": "cy"}));
    assert_eq!(created.status(), Some(Status::Success), "{:?}", created.reason());
    assert_eq!(created.physical_resource_id(), "r-cy");
    assert_eq!(created.data()["Started"], json!("yes"));
    assert_eq!(created.data()["Ready"], json!("true"));
    assert_eq!(created.data()["Size"], json!(2), "isComplete's Data wins");
    let events = script.events();
    assert_eq!(events.iter().filter(|(f, _)| f == "is-complete").count(), 3);
    let polled = &events[1].1;
    assert_eq!(
        (polled["PhysicalResourceId"].as_str(), polled["Data"]["Started"].as_str()),
        (Some("r-cy"), Some("yes"))
    );
    assert!(polled.get("ResponseURL").is_none());
}

#[test]
fn on_event_saying_not_complete_is_asked_again_when_there_is_no_is_complete() {
    let script = Arc::new(Script::default());
    script.then("on-event", ok(json!({"PhysicalResourceId": "r-di", "IsComplete": false})));
    script.then("on-event", ok(json!({"IsComplete": true, "Data": {"Done": "1"}})));
    let created = kit(&script, false).create("Custom::Reservation", json!({"Name": "di"}));
    assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "r-di"));
    assert_eq!(created.data()["Done"], json!("1"));
}

#[test]
fn function_errors_timeouts_and_bad_answers_are_failed_with_a_clear_reason() {
    for (answer, says) in [
        (
            Ok(Invoked::FunctionError(
                br#"{"errorType":"RuntimeError","errorMessage":"the quota is exhausted"}"#.to_vec(),
            )),
            "on-event failed: RuntimeError: the quota is exhausted",
        ),
        (
            Ok(Invoked::FunctionError(
                br#"{"errorType":"Sandbox.Timedout","errorMessage":"Task timed out after 3.00 seconds"}"#.to_vec(),
            )),
            "on-event timed out: Task timed out after 3.00 seconds",
        ),
        (ok(json!([1, 2])), "on-event answered an array, not a JSON object"),
        (Ok(Invoked::Response(b"<html>".to_vec())), "on-event answered something that is not JSON"),
        (ok(json!({"PhysicalResourceId": 7})), "PhysicalResourceId that is a number"),
        (ok(json!({"Data": "x"})), "Data that is a string, not an object"),
        (
            Err(InvokeError::Permanent("the Invoke of on-event failed: ResourceNotFoundException".into())),
            "ResourceNotFoundException",
        ),
        (ok(json!({"Data": {"Blob": "x".repeat(5000)}})), "4096"),
    ] {
        let script = Arc::new(Script::default());
        script.then("on-event", answer);
        let failed = kit(&script, false).create("Custom::Reservation", json!({"Name": "ed"}));
        assert_eq!(failed.status(), Some(Status::Failed), "{says}");
        assert!(failed.reason().unwrap_or_default().contains(says), "{says}: {:?}", failed.reason());
    }
}

#[test]
fn a_throttled_invoke_is_tried_again() {
    let script = Arc::new(Script::default());
    script.then(
        "on-event",
        Err(InvokeError::Transient("the Invoke of on-event failed: TooManyRequestsException".into())),
    );
    script.then("on-event", Err(InvokeError::Transient("the Invoke of on-event failed: ServiceException".into())));
    script.then("on-event", ok(json!({"PhysicalResourceId": "r-fy"})));
    let created = kit(&script, false).create("Custom::Reservation", json!({"Name": "fy"}));
    assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "r-fy"));
    assert_eq!(script.events().len(), 3);
}

#[test]
fn an_invoke_whose_outcome_is_unknown_runs_again_only_under_a_higher_fence() {
    let script = Arc::new(Script::default());
    script.then("on-event", Err(InvokeError::Unknown("the Invoke of on-event had no answer within 900 ms".into())));
    script.then("on-event", ok(json!({"PhysicalResourceId": "r-gi"})));
    let created = kit(&script, false).create("Custom::Reservation", json!({"Name": "gi"}));
    assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "r-gi"));
    let fences: Vec<(Value, Value)> = script
        .events()
        .iter()
        .map(|(_, event)| (event["CfnOnce"]["Fence"]["Value"].clone(), event["CfnOnce"]["TookOverFrom"].clone()))
        .collect();
    assert_eq!(fences, vec![(json!(1), Value::Null), (json!(2), json!(1))], "never twice under one fence");
}

#[test]
fn an_invoke_refused_for_expired_credentials_is_left_to_a_later_invocation_under_a_higher_fence() {
    let script = Arc::new(Script::default());
    script.then(
        "on-event",
        Err(InvokeError::Deferred("the Invoke of on-event failed: ExpiredTokenException: expired".into())),
    );
    script.then("on-event", ok(json!({"PhysicalResourceId": "r-ex"})));
    let created = kit(&script, false).create("Custom::Reservation", json!({"Name": "ex"}));
    assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "r-ex"));
    let fences: Vec<(Value, Value)> = script
        .events()
        .iter()
        .map(|(_, event)| (event["CfnOnce"]["Fence"]["Value"].clone(), event["CfnOnce"]["TookOverFrom"].clone()))
        .collect();
    // Not retried under the same fence within the invocation (a transient error would be): the
    // run ended unanswered and a later delivery took it over.
    assert_eq!(fences, vec![(json!(1), Value::Null), (json!(2), json!(1))]);
}

#[test]
fn an_is_complete_whose_outcome_is_unknown_is_polled_again_under_a_higher_fence() {
    let script = Arc::new(Script::default());
    script.then("on-event", ok(json!({"PhysicalResourceId": "r-hu"})));
    script.then("is-complete", Err(InvokeError::Unknown("the Invoke of is-complete failed: 502".into())));
    script.then("is-complete", ok(json!({"IsComplete": true})));
    let created = kit(&script, true).create("Custom::Reservation", json!({"Name": "hu"}));
    assert_eq!(created.status(), Some(Status::Success), "{:?}", created.reason());
    let fences: Vec<Value> =
        script.events().iter().map(|(_, event)| event["CfnOnce"]["Fence"]["Value"].clone()).collect();
    assert_eq!(fences, vec![json!(1), json!(2), json!(3)]);
}

/// The reason of `answer`, which must be FAILED.
fn failed_reason(answer: &cfn_once_core::testing::Answer) -> String {
    assert_eq!(answer.status(), Some(Status::Failed), "{:?}", answer.reason());
    answer.reason().unwrap_or_default().to_owned()
}

#[test]
fn a_function_slower_than_the_run_window_runs_once_and_its_cut_off_is_never_an_unknown_outcome() {
    // The request's ServiceTimeout (300 s) ends the run long before the function (its own
    // timeout 600 s, a run of 400 s) answers; the handler's invocation is Lambda's longest.
    let test = ProviderTest::new().function_timeout_ms(900_000);
    let script = Arc::new(Script::slow(test.clock(), 600_000, 400_000));
    script.then("on-event", ok(json!({"PhysicalResourceId": "r-io"})));
    let mut kit = kit_on(test, &script, false);
    let failed = kit.create("Custom::Reservation", json!({"Name": "io", "ServiceTimeout": "300"}));
    let reason = failed_reason(&failed);
    assert_eq!(script.events().len(), 1, "invoked once, never again under a higher fence: {reason}");
    assert_eq!(
        script.timeouts_ms(),
        vec![600_000 + INVOKE_SLACK_MS],
        "the Invoke waits for the function's own timeout"
    );
    assert!(reason.contains("did not finish before"), "{reason}");
    assert!(!reason.contains("unknown"), "cfn-once's own cut-off is not an unknown outcome: {reason}");
}

#[test]
fn a_function_that_works_longer_than_the_old_window_is_answered_from_one_run_in_a_handler_sized_for_it() {
    // The issue's function: 90 s of work, its own timeout 300 s, in a handler sized for it
    // (where a 60 s handler ran it six times, each run overlapping the last).
    let reserve_ms = cfn_once_core::config::Config::from_lookup(|name| match name {
        "AWS_REGION" => Some("us-east-1".into()),
        "CFN_ONCE_ROLE" => Some("primary".into()),
        "CFN_ONCE_TABLE" => Some("t".into()),
        "CFN_ONCE_TOPIC_ARNS" => Some("arn:aws:sns:us-east-1:123456789012:t".into()),
        _ => None,
    })
    .unwrap()
    .settings()
    .reserve_ms();
    let handler_s = handler_timeout_needed_s(300_000, reserve_ms);
    let test = ProviderTest::new().function_timeout_ms(handler_s * 1000);
    let script = Arc::new(Script::slow(test.clock(), 300_000, 90_000));
    script.then("on-event", ok(json!({"PhysicalResourceId": "r-jo"})));
    let mut kit = kit_on(test, &script, false);
    let created = kit.create("Custom::Reservation", json!({"Name": "jo", "ServiceTimeout": "420"}));
    assert_eq!(
        (created.status(), created.physical_resource_id()),
        (Some(Status::Success), "r-jo"),
        "{:?}",
        created.reason()
    );
    assert_eq!(script.events().len(), 1);
    assert_eq!(script.timeouts_ms(), vec![300_000 + INVOKE_SLACK_MS]);
}

#[test]
fn a_function_that_outlasts_the_handlers_invocation_is_never_invoked_and_the_answer_says_what_to_raise() {
    // The issue's configuration: a handler invocation of 60 s, a function whose own timeout is
    // 300 s, a ServiceTimeout of 420 s.
    for is_complete in [false, true] {
        let test = ProviderTest::new().function_timeout_ms(60_000);
        let script = Arc::new(Script::slow(test.clock(), 300_000, 90_000));
        let mut kit = kit_on(test, &script, is_complete);
        let failed = kit.create("Custom::Reservation", json!({"Name": "ko", "ServiceTimeout": "420"}));
        let reason = failed_reason(&failed);
        assert!(script.events().is_empty(), "never invoked where it could be cut off: {reason}");
        assert!(reason.contains("on-event was not invoked: its timeout of 300 s outlasts the"), "{reason}");
        assert!(reason.contains("FunctionTimeoutSeconds"), "{reason}");
        assert_eq!(kit.provider_runs(), 1, "one run, no run under a higher fence");
    }
}

#[tokio::test]
async fn a_handler_refuses_at_start_a_function_whose_timeout_does_not_fit_naming_both_timeouts() {
    let script = Script { function_timeout_ms: Some(300_000), ..Script::default() };
    let refused = super::check_at_start(["on-event"], &script, 120, 16_500).await.unwrap_err();
    assert!(
        refused.starts_with("on-event's timeout of 300 s does not fit in this handler's timeout of 120 s"),
        "{refused}"
    );
    assert!(refused.contains("FunctionTimeoutSeconds, CFN_ONCE_HANDLER_TIMEOUT_S) to at least 342 s"), "{refused}");
    assert_eq!(super::check_at_start(["on-event"], &script, 900, 16_500).await, Ok(()));
}
