//! A type kept for privileged requests (`Router::register_privileged`) and a wait condition: a
//! Create of it that did not arrive through a privileged topic is answered FAILED at once, the
//! refused Create's id, and never handed over (answered SUCCESS first, its work then refused,
//! and the stack's rollback left to a Delete of an id that looks created). Through a privileged
//! topic it is handed over as any request.

use super::*;
use crate::wait_condition::{HANDLE_PROPERTY, TIMEOUT_PROPERTY, WORK_DATA_NAME, is_work_id};

const PRIVILEGED: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once-platform";
const HANDLE: &str = "https://cloudformation-waitcondition-us-east-1.s3.amazonaws.com/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/demo/guid/Handle?X-Amz-Signature=h1";

/// A worker serving `Custom::Echo` to privileged requests only, [`PRIVILEGED`] the privileged
/// topic, [`TOPIC`] accepted too.
fn privileged_only_echo(h: &Harness) -> Worker {
    let ports = Ports {
        store: h.store.clone(),
        sink: h.sink.clone(),
        router: Arc::new(Router::new().register_privileged(ECHO_TYPE, Echo)),
        clock: Arc::new(h.clock.clone()),
        random: Arc::new(SplitMix64::new(7)),
        control: Arc::new(FixedActivity(Activity::Active)),
        metrics: Arc::new(h.metrics.clone()),
    };
    let input = InputPolicy {
        topic_arns: vec![TOPIC.into(), PRIVILEGED.into()],
        raw_delivery: true,
        urls: UrlPolicy::new(vec![]),
        privileged_topic_arns: vec![PRIVILEGED.into()],
    };
    Worker::new(ports, input, settings("us-east-1"))
}

/// A Create of an Echo whose work (an hour, polled every 10 minutes) goes to a wait condition,
/// enveloped as `topic` publishes it.
fn long_create_through(topic: &str) -> String {
    let properties = json!({
        "InProgressForS": "3600", "PollIntervalS": "600", "Size": "3",
        HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200",
    });
    let message = request("Create", ECHO_TYPE, properties, URL);
    json!({"Type": "Notification", "TopicArn": topic, "Message": message, "MessageId": "m"}).to_string()
}

#[test]
fn a_create_its_type_is_kept_from_is_refused_at_once_and_never_handed_over() {
    let h = Harness::new();
    let worker = privileged_only_echo(&h);
    let done = h.handle(&worker, &long_create_through(TOPIC));
    assert_eq!(answered(&done).1, Status::Failed, "{done:?}");
    let answers = h.bodies(URL);
    assert_eq!(answers.len(), 1, "answered once");
    let reason = answers[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains("privileged requests only") && reason.contains("CFN_ONCE_PRIVILEGED_TOPIC_ARNS"),
        "{reason}"
    );
    assert!(is_failed_create_id(&answers[0].physical_resource_id), "the rollback Delete is known: {answers:?}");
    assert!(h.memory.snapshot().iter().all(|record| !is_work_id(&record.key.request_id)), "no work was handed over");
    assert!(h.sink.bodies(HANDLE).is_empty(), "nothing signalled");
}

#[test]
fn through_a_privileged_topic_the_create_is_handed_over() {
    let h = Harness::new();
    let worker = privileged_only_echo(&h);
    let first = h.handle(&worker, &long_create_through(PRIVILEGED));
    assert!(matches!(first, Disposition::Retry { .. }), "its work waits: {first:?}");
    let answers = h.bodies(URL);
    assert_eq!((answers.len(), answers[0].status), (1, Status::Success));
    assert!(answers[0].data[WORK_DATA_NAME].as_str().is_some_and(|text| text.starts_with("continues")));
}
