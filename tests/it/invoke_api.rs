//! The local Invoke API (`cfn_once_local::invoke_api`) answers the real `aws-sdk-lambda`
//! client as Lambda does, for real Python functions under `awslambdaric` (the examples in
//! `examples/functions`): a response, a function error, a timeout, a throttle, a function that
//! does not exist. These check the local service that stands in for Lambda, not cfn-once's
//! handling of what it answers.

use aws_sdk_lambda::primitives::Blob;
use cfn_once_local::invoke_api::InvokeApi;
use cfn_once_local::lambda_service::{FunctionSpec, LocalFunction};
use serde_json::{Value, json};

/// A Python function of `examples/functions/<example>` whose handler is `handler` (`app.on_event`).
fn python_function(name: &str, example: &str, handler: &str, timeout_ms: u64, concurrency_max: usize) -> LocalFunction {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique("invoke-api"));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let code = cfn_once_tests::workspace_root().join("examples/functions").join(example);
    let log = dir.join(format!("{name}.log"));
    let spec = FunctionSpec::python(name, "us-east-1", &cfn_once_tests::python(), &code, handler, log);
    LocalFunction::new(FunctionSpec { timeout_ms, concurrency_max, ..spec }).expect("the function's log opens")
}

async fn client(api: &InvokeApi) -> aws_sdk_lambda::Client {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_lambda::config::Credentials::new("testing", "testing", None, None, "tests"))
        .endpoint_url(api.endpoint())
        .load()
        .await;
    aws_sdk_lambda::Client::from_conf(
        aws_sdk_lambda::config::Builder::from(&config)
            .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled())
            .build(),
    )
}

fn create(properties: Value) -> Vec<u8> {
    json!({
        "RequestType": "Create",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1",
        "RequestId": "r-1",
        "ResourceType": "Custom::Reservation",
        "LogicalResourceId": "Reservation",
        "ResourceProperties": properties,
    })
    .to_string()
    .into_bytes()
}

#[tokio::test]
async fn python_functions_answer_the_sdk_as_lambda_does() {
    let api = InvokeApi::start(vec![
        python_function("on-event", "cdk-provider", "app.on_event", 2_000, 2),
        python_function("is-complete", "cdk-provider", "app.is_complete", 2_000, 1),
    ])
    .await
    .expect("the Invoke API starts");
    let lambda = client(&api).await;

    // A response: the function's payload, no FunctionError.
    let output = lambda
        .invoke()
        .function_name("on-event")
        .payload(Blob::new(create(json!({"Name": "ada", "ReadyInS": "0"}))))
        .send()
        .await
        .expect("the invoke succeeds");
    assert_eq!(output.status_code(), 200);
    assert_eq!(output.function_error(), None);
    assert_eq!(output.executed_version(), Some("$LATEST"));
    let payload: Value = serde_json::from_slice(output.payload().expect("a payload").as_ref()).expect("JSON");
    assert_eq!(payload["PhysicalResourceId"], "reservation-ada");

    // By ARN too.
    let output = lambda
        .invoke()
        .function_name("arn:aws:lambda:us-east-1:123456789012:function:is-complete")
        .payload(Blob::new(create(json!({"Name": "ada"}))))
        .send()
        .await
        .expect("the invoke by ARN succeeds");
    let payload: Value = serde_json::from_slice(output.payload().expect("a payload").as_ref()).expect("JSON");
    assert_eq!(payload["IsComplete"], true);

    // A function error: 200 with FunctionError and the runtime's error document.
    let output = lambda
        .invoke()
        .function_name("on-event")
        .payload(Blob::new(create(json!({"Name": "ada", "FailWith": "the quota is exhausted"}))))
        .send()
        .await
        .expect("a function error is an answer, not an SDK error");
    assert_eq!(output.function_error(), Some("Unhandled"));
    let error: Value = serde_json::from_slice(output.payload().expect("a payload").as_ref()).expect("JSON");
    assert_eq!(error["errorMessage"], "the quota is exhausted");
    assert_eq!(error["errorType"], "RuntimeError");

    // A timeout: the process is killed at the function timeout, and Lambda's message comes back.
    let output = lambda
        .invoke()
        .function_name("on-event")
        .payload(Blob::new(create(json!({"Name": "ada", "SleepS": "5"}))))
        .send()
        .await
        .expect("a timeout is an answer, not an SDK error");
    assert_eq!(output.function_error(), Some("Unhandled"));
    let error: Value = serde_json::from_slice(output.payload().expect("a payload").as_ref()).expect("JSON");
    assert_eq!(error["errorType"], "Sandbox.Timedout");
    assert_eq!(error["errorMessage"], "Task timed out after 2.00 seconds");
    assert_eq!(api.function("on-event").expect("served").stats().timed_out, 1);

    // A throttle: TooManyRequestsException, the SDK's error for it.
    api.throttle_next("on-event", 1);
    let error = lambda
        .invoke()
        .function_name("on-event")
        .payload(Blob::new(create(json!({"Name": "ada"}))))
        .send()
        .await
        .expect_err("a throttled invoke is an SDK error");
    assert!(
        matches!(
            error.as_service_error(),
            Some(aws_sdk_lambda::operation::invoke::InvokeError::TooManyRequestsException(_))
        ),
        "{error:?}"
    );
    // ... and the next one runs.
    let output = lambda
        .invoke()
        .function_name("on-event")
        .payload(Blob::new(create(json!({"Name": "bo"}))))
        .send()
        .await
        .expect("the next invoke runs");
    assert_eq!(output.function_error(), None);

    // A function that does not exist.
    let error = lambda.invoke().function_name("nobody").send().await.expect_err("no such function");
    assert!(
        matches!(
            error.as_service_error(),
            Some(aws_sdk_lambda::operation::invoke::InvokeError::ResourceNotFoundException(_))
        ),
        "{error:?}"
    );
    assert_eq!(api.invokes("on-event"), 5);
}
