//! The function provider through the real protocol (`ProviderTest`), on a scripted Lambda: the
//! event each function is given, its answers read, its errors, and Invokes whose outcome is unknown.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cfn_once_core::aws_names::FunctionRef;
use cfn_once_core::config::FunctionRoute;
use cfn_once_core::response::Status;
use cfn_once_core::testing::ProviderTest;
use serde_json::{Value, json};

use super::{FunctionInvoker, FunctionProvider, InvokeError, Invoked};

/// A fake Lambda: answers from a script per function, and keeps every event it was given.
#[derive(Debug, Default)]
struct Script {
    answers: Mutex<BTreeMap<String, VecDeque<Result<Invoked, InvokeError>>>>,
    events: Mutex<Vec<(String, Value)>>,
}

impl Script {
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
    async fn invoke(&self, function: &str, payload: Vec<u8>, _timeout_ms: u64) -> Result<Invoked, InvokeError> {
        self.events.lock().unwrap().push((function.into(), serde_json::from_slice(&payload).unwrap()));
        self.answers
            .lock()
            .unwrap()
            .get_mut(function)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| Err(InvokeError::Permanent(format!("the script has no more answers for {function}"))))
    }
}

fn ok(answer: Value) -> Result<Invoked, InvokeError> {
    Ok(Invoked::Response(answer.to_string().into_bytes()))
}

fn kit(script: &Arc<Script>, is_complete: bool) -> ProviderTest {
    let route = FunctionRoute {
        resource_type: "Custom::Reservation".into(),
        on_event: FunctionRef::parse("on-event", "us-east-1").unwrap(),
        is_complete: is_complete.then(|| FunctionRef::parse("is-complete", "us-east-1").unwrap()),
        answers_itself: false,
    };
    let invoker: Arc<dyn FunctionInvoker> = script.clone();
    ProviderTest::new().provider("Custom::Reservation", FunctionProvider::new(route, "us-east-1", invoker))
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
