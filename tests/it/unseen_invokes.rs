//! A function's Invoke whose reply is lost after the function ran: the fault proxy forwards the
//! Invoke to the local Invoke API, the function runs (and writes), and the proxy resets the
//! connection instead of relaying the reply. Nobody saw the outcome; the function may have
//! applied everything. An `onEvent` runs again only under a higher fence, so the write its
//! first run made is overwritten by the second's under a higher fence and a stale run's later
//! write would be refused; a function that answers by itself is not run again at all: the
//! answer object it wrote is read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, KeyType};
use cfn_once::providers::function::{FunctionInvoker, FunctionProvider, LambdaInvoker};
use cfn_once_core::aws_names::FunctionRef;
use cfn_once_core::config::FunctionRoute;
use cfn_once_core::provider::Router;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::worker::Ports;
use cfn_once_local::invoke_api::InvokeApi;
use cfn_once_local::lambda_service::{FunctionSpec, LocalFunction};
use cfn_once_local::provision;
use cfn_once_tests::{Fault, FaultProxy, Match, TwoRegions};

use crate::functions::{SETTINGS, answers_in, greeting, logs, signature, two_regions_with_a_responder};
use serde_json::{Value, json};

const TYPE: &str = "Custom::Written";

/// An `onEvent` that writes its resource's item to a DynamoDB table on moto, fenced as
/// docs/functions.md asks (`SET fence`, conditioned on no higher fence) and counting its runs
/// (`ADD runs`), and logs the fence it ran under.
const WRITER: &str = r#"
import json, os, boto3

def handler(event, context):
    fence = event["CfnOnce"]["Fence"]["Value"]
    print(json.dumps({"run": event["RequestId"], "fence": fence, "took_over_from": event["CfnOnce"]["TookOverFrom"]}), flush=True)
    if event["RequestType"] == "Delete":
        return {}
    name = event["ResourceProperties"]["Name"]
    dynamodb = boto3.client("dynamodb", endpoint_url=os.environ["WRITER_ENDPOINT"], region_name=os.environ["WRITER_REGION"],
                            aws_access_key_id="testing", aws_secret_access_key="testing")
    dynamodb.update_item(
        TableName=os.environ["WRITER_TABLE"], Key={"pk": {"S": name}},
        UpdateExpression="SET fence = :fence ADD runs :one",
        ConditionExpression="attribute_not_exists(fence) OR fence <= :fence",
        ExpressionAttributeValues={":fence": {"N": str(fence)}, ":one": {"N": "1"}})
    return {"PhysicalResourceId": "written-" + name, "Data": {"Fence": str(fence)}}
"#;

/// One region: the writer behind its own Invoke API, reached through a fault proxy.
struct Region {
    api: InvokeApi,
    proxy: FaultProxy,
}

async fn region(name: &str, dir: &std::path::Path, table: &str) -> (Region, Router) {
    let log = dir.join(format!("{name}-writer.log"));
    let spec = FunctionSpec::python("writer", name, &cfn_once_tests::python(), dir, "writer.handler", log);
    let mut env = spec.env.clone();
    env.insert("WRITER_ENDPOINT".into(), cfn_once_tests::moto().to_owned());
    env.insert("WRITER_TABLE".into(), table.to_owned());
    // The table is in the primary's region; both regions' copies write to it.
    env.insert("WRITER_REGION".into(), "us-east-1".to_owned());
    let function = LocalFunction::new(FunctionSpec { env, timeout_ms: 20_000, ..spec }).expect("the log opens");
    let api = InvokeApi::start(vec![function]).await.expect("the Invoke API starts");
    let proxy = FaultProxy::start(api.endpoint());
    let invoker: Arc<dyn FunctionInvoker> =
        Arc::new(LambdaInvoker::new(&provision::sdk_config(&proxy.url(), name).await));
    let route = FunctionRoute {
        resource_type: TYPE.to_owned(),
        on_event: FunctionRef::parse("writer", name).expect("a name"),
        is_complete: None,
        answers_itself: false,
    };
    let router = Router::new().register(TYPE, FunctionProvider::new(route, name, invoker));
    (Region { api, proxy }, router)
}

/// The runs the functions logged for `request_id`: (fence, took over from).
fn runs(dir: &std::path::Path, request_id: &str) -> Vec<(u64, Value)> {
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the folder") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|extension| extension == "log") {
            for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
                let Some(start) = line.find('{') else { continue };
                let Ok(logged) = serde_json::from_str::<Value>(&line[start..]) else { continue };
                if logged["run"] == json!(request_id) {
                    runs.push((logged["fence"].as_u64().expect("a fence"), logged["took_over_from"].clone()));
                }
            }
        }
    }
    runs.sort_by_key(|(fence, _)| *fence);
    runs
}

#[tokio::test]
async fn an_on_event_whose_invoke_reply_is_lost_runs_again_only_under_a_higher_fence() {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique("unseen-invoke"));
    std::fs::create_dir_all(&dir).expect("a folder for the function");
    std::fs::write(dir.join("writer.py"), WRITER).expect("the function's code");
    let table = cfn_once_tests::unique("written");
    let dynamodb = aws_sdk_dynamodb::Client::new(&provision::sdk_config(cfn_once_tests::moto(), "us-east-1").await);
    provision::create_table(&dynamodb, &table, &[("pk", KeyType::Hash)]).await.expect("the function's table");
    let (primary, primary_router) = region("us-east-1", &dir, &table).await;
    let (secondary, secondary_router) = region("us-west-2", &dir, &table).await;
    // The first Invoke reaches the function, which runs and writes; its reply never comes back.
    primary.proxy.inject(Match::Post, Fault::ForwardThenReset, 1);
    let mut regions = TwoRegions::with_ports(
        2,
        &SETTINGS,
        move |ports: Ports| Ports { router: Arc::new(primary_router), ..ports },
        move |ports: Ports| Ports { router: Arc::new(secondary_router), ..ports },
    )
    .await;

    let mut sent = regions.request("create-echo.json").await;
    sent.request["ResourceType"] = json!(TYPE);
    sent.request["ResourceProperties"] = json!({"ServiceToken": "x", "Name": "ada"});
    let started = Instant::now();
    regions.publish(&sent).await;
    let (body, took) = regions.wait_for_answer(&sent, started, Duration::from_secs(90)).await;
    let answered = ResponseBody::parse(&body).expect("body");
    regions.drain(Duration::from_secs(30)).await;

    let request_id = sent.request["RequestId"].as_str().expect("a RequestId");
    let runs = runs(&dir, request_id);
    let item = dynamodb
        .get_item()
        .table_name(&table)
        .key("pk", AttributeValue::S("ada".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
        .expect("the function's item");
    let number = |name: &str| item.get(name).and_then(|value| value.as_n().ok()).cloned().unwrap_or_default();
    println!(
        "answered {:?} in {took:?} ({:?}); runs (fence, took over from): {runs:?}; item: fence {}, runs {}; Invokes {} + {}",
        answered.status,
        answered.data,
        number("fence"),
        number("runs"),
        primary.api.invokes("writer"),
        secondary.api.invokes("writer"),
    );
    assert_eq!(primary.proxy.injected(), 1, "the first Invoke's reply was lost");
    assert_eq!(answered.status, Status::Success, "{:?}", answered.reason);
    assert_eq!(regions.responses(&sent).await.len(), 1, "answered once");
    assert_eq!(runs.len(), 2, "the run whose reply was lost and one more: {runs:?}");
    let [(first, _), (second, took_over_from)] = [runs[0].clone(), runs[1].clone()];
    assert!(second > first, "the second run's fence {second} is not above the first's {first}");
    assert_eq!(took_over_from, json!(first), "the second run names the first");
    assert_eq!(answered.data["Fence"], json!(second.to_string()), "answered by the run under the higher fence");
    // Each run's write applied once, the last under the highest fence.
    assert_eq!((number("fence"), number("runs")), (second.to_string(), "2".to_owned()));
    regions.stop().await;
}

#[tokio::test]
async fn a_self_answering_function_whose_invoke_reply_is_lost_is_read_not_run_again() {
    let code = cfn_once_tests::workspace_root().join("examples/functions/cfn-response");
    let (dir, [(primary_api, primary_bucket, primary_proxy), (secondary_api, _, _secondary_proxy)], mut regions) =
        two_regions_with_a_responder("unseen-self-answer", &code, "app.handler").await;
    // The function runs and PUTs its answer to cfn-once's object; the Invoke's reply is lost.
    primary_proxy.inject(Match::Post, Fault::ForwardThenReset, 1);
    let started = Instant::now();
    let sent = greeting(&regions, "create-echo.json", json!({"Name": "ada"})).await;
    regions.publish(&sent).await;
    let (body, took) = regions.wait_for_answer(&sent, started, Duration::from_secs(60)).await;
    let answered = ResponseBody::parse(&body).expect("body");
    regions.drain(Duration::from_secs(30)).await;
    let objects = answers_in("us-east-1", &primary_bucket).await;
    println!(
        "answered {:?} in {took:?}; Invokes {} + {}; answer objects {}; fence {:?}",
        answered.status,
        primary_api.invokes("responder"),
        secondary_api.invokes("responder"),
        objects.len(),
        regions.record(&sent).await.map(|record| record.fence),
    );
    assert_eq!(primary_proxy.injected(), 1, "the Invoke's reply was lost");
    assert_eq!((answered.status, answered.physical_resource_id.as_str()), (Status::Success, "greeting-ada"));
    assert_eq!(answered.data["Greeting"], json!("hello, ada"));
    assert_eq!(regions.responses(&sent).await.len(), 1, "answered once");
    assert_eq!(primary_api.invokes("responder") + secondary_api.invokes("responder"), 1, "the function ran once");
    assert_eq!(objects.len(), 1, "one answer object: {objects:?}");
    assert!(!logs(&dir).contains(&signature(&sent)), "the function saw CloudFormation's ResponseURL");
    regions.stop().await;
}
