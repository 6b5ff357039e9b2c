//! Custom resources written with the libraries people use, installed from PyPI as published:
//! crhelper (`tests/functions/crhelper-greeter`) and cfnresponse
//! (`tests/functions/cfnresponse-greeter`), unmodified, behind cfn-once in both regions on moto.
//! Both answer by themselves, to the presigned answer URL cfn-once gives them in place of
//! CloudFormation's ResponseURL, which the local environment serves over HTTPS, as AWS does, with
//! a CA of its own that the functions trust through `SSL_CERT_FILE`. crhelper opens an HTTPS
//! connection whatever the URL's scheme, so on a plain-HTTP answer URL it cannot answer at all
//! (it retries its handshake until the function times out).

use std::time::{Duration, Instant};

use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_local::function_build;
use cfn_once_tests::{Sent, TwoRegions};
use serde_json::{Value, json};

use crate::functions::{answers_in, greeting, logs, signature, two_regions_with_a_responder};

const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// The first answer to `sent`, parsed.
async fn answer(regions: &TwoRegions, sent: &Sent) -> ResponseBody {
    let (body, took) = regions.wait_for_answer(sent, Instant::now(), ANSWER_TIMEOUT).await;
    let parsed = ResponseBody::parse(&body).expect("a response body");
    let request_type = sent.request["RequestType"].as_str().unwrap_or_default();
    println!("{request_type} answered {:?} in {took:?}: {:?}", parsed.status, parsed.reason);
    parsed
}

/// The function in `tests/functions/<folder>` behind cfn-once in both regions: a Create, an
/// Update and a Delete of a greeting, each answered SUCCESS, and a Create of each of
/// `failing`'s properties answered FAILED with a reason holding its text; each request answered
/// exactly once and run once, and the function's logs free of every CloudFormation ResponseURL.
/// Returns the function's logs.
async fn greets_and_fails(label: &str, folder: &str, failing: &[(Value, &str)]) -> String {
    // Built as a Lambda zip is: the folder's requirements.txt installed from PyPI into a copy.
    let source = cfn_once_tests::workspace_root().join("tests/functions").join(folder);
    let builds = cfn_once_tests::workspace_root().join("target/function-builds");
    let code = function_build::build(&source, folder, &cfn_once_tests::python(), &builds, &|line| println!("{line}"))
        .await
        .expect("the function's build");
    let (dir, [(primary_api, primary_bucket, _primary_proxy), _], mut regions) =
        two_regions_with_a_responder(label, &code, "app.handler").await;
    let started = Instant::now();

    let create = greeting(&regions, "create-echo.json", json!({"Name": "ada"})).await;
    let response_url = create.request["ResponseURL"].as_str().unwrap_or_default();
    assert!(response_url.starts_with("https://127.0.0.1:"), "CloudFormation's ResponseURLs are https:// locally too");
    regions.publish(&create).await;
    let created = answer(&regions, &create).await;
    assert_eq!(
        (created.status, created.physical_resource_id.as_str()),
        (Status::Success, "greeting-ada"),
        "{created:?}"
    );
    assert_eq!(created.data["Greeting"], json!("hello, ada"));

    let mut update = greeting(&regions, "update-echo.json", json!({"Name": "bo"})).await;
    update.request["PhysicalResourceId"] = json!("greeting-ada");
    update.request["OldResourceProperties"] = json!({"Name": "ada"});
    regions.publish(&update).await;
    let updated = answer(&regions, &update).await;
    assert_eq!(
        (updated.status, updated.physical_resource_id.as_str()),
        (Status::Success, "greeting-bo"),
        "{updated:?}"
    );
    assert_eq!(updated.data["Greeting"], json!("hello, bo"));

    let mut delete = greeting(&regions, "delete-echo.json", json!({"Name": "bo"})).await;
    delete.request["PhysicalResourceId"] = json!("greeting-bo");
    regions.publish(&delete).await;
    let deleted = answer(&regions, &delete).await;
    assert_eq!(
        (deleted.status, deleted.physical_resource_id.as_str()),
        (Status::Success, "greeting-bo"),
        "{deleted:?}"
    );

    let mut sent = vec![create, update, delete];
    for (properties, reason) in failing {
        let fails = greeting(&regions, "create-echo.json", properties.clone()).await;
        regions.publish(&fails).await;
        let failed = answer(&regions, &fails).await;
        assert_eq!(failed.status, Status::Failed, "{failed:?}");
        assert!(failed.reason.as_deref().unwrap_or_default().contains(reason), "{:?} lacks {reason:?}", failed.reason);
        sent.push(fails);
    }

    regions.drain(ANSWER_TIMEOUT).await;
    for request in &sent {
        assert_eq!(regions.responses(request).await.len(), 1, "answered once: {:?}", request.request["RequestType"]);
    }
    assert_eq!(primary_api.invokes("responder") as usize, sent.len(), "each request ran the function once");
    // What the library PUT: one object of cfn-once's per execution, each for its own request
    // (the FAILED of a function that raised before answering excepted: it PUT nothing).
    let objects = answers_in("us-east-1", &primary_bucket).await;
    let mut answered: Vec<&str> = objects.iter().filter_map(|(_, answer)| answer["RequestId"].as_str()).collect();
    answered.sort_unstable();
    let mut put_for: Vec<&str> = sent
        .iter()
        .filter(|request| !request.request["ResourceProperties"].get("RaiseWith").is_some_and(Value::is_string))
        .map(|request| request.request_key.request_id.as_str())
        .collect();
    put_for.sort_unstable();
    assert_eq!(answered, put_for, "{objects:?}");
    let logged = logs(&dir);
    for request in &sent {
        assert!(!logged.contains(&signature(request)), "the function saw CloudFormation's ResponseURL:\n{logged}");
    }
    // The library came from the folder's requirements.txt, installed into the build, not from
    // the interpreter's own packages.
    let library = folder.split('-').next().unwrap_or_default();
    let build = std::fs::canonicalize(&code).expect("the build's folder");
    let from_build = format!("{library} from {}", build.display());
    assert!(logged.contains(&from_build), "{library} was not imported from the build:\n{logged}");
    println!("{} requests answered in {:?}", sent.len(), started.elapsed());
    regions.stop().await;
    logged
}

#[tokio::test]
async fn a_crhelper_function_from_pypi_answers_over_https() {
    let logged = greets_and_fails(
        "crhelper",
        "crhelper-greeter",
        &[(
            json!({"Name": "cy", "FailWith": "the quota is exhausted"}),
            "responder answered FAILED: the quota is exhausted",
        )],
    )
    .await;
    // crhelper logs where it PUTs (cfn-once's answer URL, never CloudFormation's) and S3's reply.
    assert!(logged.contains("CFN response URL: https://127.0.0.1:"), "crhelper did not PUT over HTTPS:\n{logged}");
    assert!(logged.contains("CloudFormation returned status code: OK"), "{logged}");
    assert!(!logged.contains("Unexpected failure sending response"), "crhelper had to retry its PUT:\n{logged}");
}

#[tokio::test]
async fn a_cfnresponse_function_from_pypi_answers_over_https() {
    let logged = greets_and_fails(
        "cfnresponse",
        "cfnresponse-greeter",
        &[
            (
                json!({"Name": "cy", "FailWith": "the quota is exhausted"}),
                "responder answered FAILED: the quota is exhausted",
            ),
            (
                json!({"Name": "di", "RaiseWith": "the disk is full"}),
                "responder failed: RuntimeError: the disk is full",
            ),
        ],
    )
    .await;
    // cfnresponse prints the URL it PUTs to (cfn-once's answer URL) and S3's status.
    assert!(
        logged.lines().any(|line| line.contains("https://127.0.0.1:")),
        "cfnresponse did not PUT over HTTPS:\n{logged}"
    );
    assert!(logged.contains("Status code: 200"), "{logged}");
    assert!(!logged.contains("send(..) failed"), "{logged}");
}
