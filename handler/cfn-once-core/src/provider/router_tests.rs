//! The router's privilege rule: a type registered for privileged requests only is refused,
//! before its provider runs, to any other request; the refused Create's rollback Delete
//! succeeds without it; every other type, and a privileged request, are served as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::*;
use crate::clock::ManualClock;
use crate::ownership::Fence;
use crate::provider::{ProviderOutput, Step};
use crate::request::{InputPolicy, decode};
use crate::response::{self, ResponseBody, Status};
use crate::response_url::UrlPolicy;

const PLAIN: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once";
const PRIVILEGED: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once-platform";
const URL: &str = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=one";

/// A provider that counts its runs and succeeds at once (the crate's `doubles` build on this
/// module, so its tests cannot use them).
#[derive(Clone, Default)]
struct CountingEcho(Arc<AtomicU32>);

impl CountingEcho {
    fn calls(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Provider for CountingEcho {
    type Properties = Value;
    const UPDATE_THROUGH_CREATE: bool = true;

    async fn create(&self, _: &ProviderContext, _: Value) -> Result<Step, ProviderError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ProviderOutput::new().into())
    }

    async fn delete(&self, _: &ProviderContext, _: &str, _: Value) -> Result<Step<()>, ProviderError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Step::Done(()))
    }
}

fn policy() -> InputPolicy {
    InputPolicy {
        topic_arns: vec![PLAIN.into(), PRIVILEGED.into()],
        raw_delivery: true,
        urls: UrlPolicy::new(vec![]),
        privileged_topic_arns: vec![PRIVILEGED.into()],
    }
}

fn request(kind: &str, resource_type: &str, physical_id: Option<&str>) -> Value {
    let mut request = json!({
        "RequestType": kind,
        "ResponseURL": URL,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
        "RequestId": format!("req-{kind}"),
        "LogicalResourceId": "Thing",
        "ResourceType": resource_type,
        "ResourceProperties": {"ServiceToken": PLAIN},
    });
    if let Some(id) = physical_id {
        request["PhysicalResourceId"] = json!(id);
    }
    request
}

/// `request` as it arrives through `topic` (`None`: bare, under raw delivery), run by `router`:
/// the answer it gets.
fn answer(router: &Router, request: &Value, topic: Option<&str>) -> ResponseBody {
    let body = match topic {
        Some(topic) => {
            json!({"Type": "Notification", "TopicArn": topic, "Message": request.to_string(), "MessageId": "m"})
                .to_string()
        }
        None => request.to_string(),
    };
    let decoded = decode(Some(&body), &policy()).expect("decoded");
    let resource_type = decoded.resource_type().unwrap_or_default().to_owned();
    let fence = Fence { scope: "scope".into(), value: 1 };
    let clock = ManualClock::new(0);
    let ctx = ProviderContext::new(
        fence,
        &decoded,
        &resource_type,
        u64::MAX,
        Arc::new(clock.clone()),
        Arc::new(AtomicBool::new(false)),
    );
    // Nothing here waits: the run is ready at its first poll.
    let run = std::pin::pin!(router.run(&decoded, &ctx)).poll(&mut Context::from_waker(Waker::noop()));
    let outcome = match run {
        Poll::Ready(Ok(Progress::Finished(outcome))) => outcome,
        other => panic!("expected an answer, got {other:?}"),
    };
    ResponseBody::parse(&response::build(&decoded, outcome)).expect("a response body")
}

#[test]
fn a_privileged_type_is_refused_to_other_topics_before_its_provider_runs_and_its_rollback_succeeds() {
    let guarded = CountingEcho::default();
    let open = CountingEcho::default();
    let router =
        Router::new().register_privileged("Custom::Guarded", guarded.clone()).register("Custom::Open", open.clone());

    for (through, topic) in [("a topic that is not privileged", Some(PLAIN)), ("no topic (raw delivery)", None)] {
        let refused = answer(&router, &request("Create", "Custom::Guarded", None), topic);
        assert_eq!(refused.status, Status::Failed, "{through}");
        let reason = refused.reason.clone().expect("a reason");
        assert!(
            reason.contains("privileged requests only") && reason.contains("CFN_ONCE_PRIVILEGED_TOPIC_ARNS"),
            "{through}: {reason}"
        );
        assert!(!reason.contains("X-Amz-Signature"), "the ResponseURL is never in a reason");
        assert!(response::is_failed_create_id(&refused.physical_resource_id), "{through}: refused, not run");
        // CloudFormation's rollback Delete, through the same topic: succeeds without the provider.
        let rollback =
            answer(&router, &request("Delete", "Custom::Guarded", Some(&refused.physical_resource_id)), topic);
        assert_eq!(rollback.status, Status::Success, "{through}: a stack is never stuck");
        // An Update of what exists is refused too; a Delete of any other id succeeds, without the
        // provider (which may not act for this request): a stack is never stuck, and another
        // resource's id reaches nothing.
        let existing = Some("made-by-a-privileged-create");
        assert_eq!(answer(&router, &request("Update", "Custom::Guarded", existing), topic).status, Status::Failed);
        assert_eq!(answer(&router, &request("Delete", "Custom::Guarded", existing), topic).status, Status::Success);
        // The other types are served as ever.
        assert_eq!(answer(&router, &request("Create", "Custom::Open", None), topic).status, Status::Success);
    }
    assert_eq!(guarded.calls(), 0, "the privileged type's provider never ran for an unprivileged request");
    assert_eq!(open.calls(), 2);

    assert_eq!(answer(&router, &request("Create", "Custom::Guarded", None), Some(PRIVILEGED)).status, Status::Success);
    assert_eq!(guarded.calls(), 1, "a privileged request reaches it");
}

#[test]
fn a_later_plain_registration_lifts_the_privilege_rule() {
    let replaced = CountingEcho::default();
    let router = Router::new()
        .register_privileged("Custom::Thing", CountingEcho::default())
        .register("Custom::Thing", replaced.clone());
    assert_eq!(answer(&router, &request("Create", "Custom::Thing", None), Some(PLAIN)).status, Status::Success);
    assert_eq!(replaced.calls(), 1);
}
