//! Decoding, end to end: envelopes and bare requests, what is undeliverable and what is
//! answered FAILED, the URL kept out of every print, and requests nested too deep to parse.

use serde_json::json;

use super::address::serialized_len;
use super::*;
use crate::response_url::AllowedPrefix;

#[test]
fn lengths_are_counted_as_serialized_json() {
    for text in ["", "plain", "a\"b\\c", "\u{1}\n\t", "é→😀"] {
        assert_eq!(serialized_len(text), serde_json::to_string(text).expect("a string").len(), "{text:?}");
    }
    assert_eq!(serialized_len("a\"\u{1}"), 2 + 1 + 2 + 6);
}

#[test]
fn an_envelope_carries_its_publish_time() {
    let request = json!({
        "RequestType": "Create",
        "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=x",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
        "RequestId": "r",
        "LogicalResourceId": "L",
        "ResourceType": "Custom::Echo",
        "ResourceProperties": {},
    });
    let policy = InputPolicy {
        topic_arns: vec!["arn:aws:sns:us-east-1:123456789012:t".into()],
        raw_delivery: true,
        urls: UrlPolicy::new(vec![]),
        privileged_topic_arns: vec![],
    };
    let envelope = |timestamp: Value| {
        json!({"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-1:123456789012:t", "Message": request.to_string(), "Timestamp": timestamp})
            .to_string()
    };
    let decoded = decode(Some(&envelope(json!("2026-12-01T10:20:57.123Z"))), &policy).expect("decoded");
    assert_eq!(decoded.published_ms, Some(1_796_120_457_123));
    let unreadable = decode(Some(&envelope(json!("yesterday"))), &policy).expect("still decoded");
    assert_eq!(unreadable.published_ms, None, "an unreadable Timestamp counts as none");
    let bare = decode(Some(&request.to_string()), &policy).expect("raw delivery");
    assert_eq!(bare.published_ms, None);
}

const URL: &str = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/key?X-Amz-Signature=s3cr3t";
const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once";

fn policy() -> InputPolicy {
    InputPolicy {
        topic_arns: vec![TOPIC.into()],
        raw_delivery: true,
        urls: UrlPolicy::new(vec![AllowedPrefix::parse("http://127.0.0.1:5000/r/").expect("prefix")]),
        privileged_topic_arns: vec![],
    }
}

fn create() -> Value {
    json!({
        "RequestType": "Create",
        "ServiceToken": TOPIC,
        "ResponseURL": URL,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
        "RequestId": "e3f1c1d4-0000-4000-8000-000000000001",
        "LogicalResourceId": "Thing",
        "ResourceType": "Custom::Echo",
        "ResourceProperties": {"ServiceToken": TOPIC, "Size": "5"}
    })
}

fn envelope(message: &Value, topic: &str) -> String {
    json!({"Type": "Notification", "TopicArn": topic, "Message": message.to_string(), "MessageId": "m"}).to_string()
}

#[test]
fn raw_and_enveloped_decode_to_the_same_request() {
    let raw = decode(Some(&create().to_string()), &policy()).expect("raw");
    let wrapped = decode(Some(&envelope(&create(), TOPIC)), &policy()).expect("envelope");
    assert_eq!(raw.fingerprint, wrapped.fingerprint);
    assert_eq!(raw.key, wrapped.key);
    assert_eq!(raw.kind(), Some(RequestKind::Create));
    assert_eq!(raw.resource_type(), Some("Custom::Echo"));
    assert!(matches!(raw.body, RequestBody::Valid(_)));
}

#[test]
fn undeliverable_table() {
    let check = |body: Option<String>, expected: Undeliverable| {
        let got = decode(body.as_deref(), &policy()).map(|_| ()).expect_err("must be undeliverable");
        assert_eq!(got, expected);
    };
    check(None, Undeliverable::NoBody);
    check(Some("{not json".into()), Undeliverable::NotJson("Syntax error at line 1 column 2".into()));
    check(Some("[1]".into()), Undeliverable::Unrecognised);
    check(Some(json!({"hello": 1}).to_string()), Undeliverable::Unrecognised);
    let foreign = "arn:aws:sns:us-east-1:999999999999:other";
    check(Some(envelope(&create(), foreign)), Undeliverable::ForeignTopic(foreign.into()));
    let mut no_url = create();
    no_url.as_object_mut().expect("object").remove("ResponseURL");
    check(Some(no_url.to_string()), Undeliverable::Missing("ResponseURL"));
    let mut no_stack = create();
    no_stack["StackId"] = json!("");
    check(Some(no_stack.to_string()), Undeliverable::Missing("StackId"));
    let mut long = create();
    long["RequestId"] = json!("r".repeat(300));
    check(Some(long.to_string()), Undeliverable::TooLong { field: "RequestId", bytes: 300 });
    let mut evil = create();
    evil["ResponseURL"] = json!("https://evil.example.com/x?X-Amz-Signature=s3cr3t");
    check(Some(evil.to_string()), Undeliverable::Url(UrlRefused::Host("evil.example.com".into())));
}

#[test]
fn malformed_but_addressable_requests_are_answered() {
    let mut bad_type = create();
    bad_type["RequestType"] = json!("Upsert");
    let request = decode(Some(&bad_type.to_string()), &policy()).expect("addressable");
    let RequestBody::Malformed { reason, kind, .. } = &request.body else { panic!("expected malformed") };
    assert_eq!(kind, &None);
    assert!(reason.contains("Upsert"), "{reason}");

    let mut no_type = create();
    no_type.as_object_mut().expect("object").remove("ResourceType");
    let request = decode(Some(&no_type.to_string()), &policy()).expect("addressable");
    let RequestBody::Malformed { reason, kind, .. } = &request.body else { panic!("expected malformed") };
    assert_eq!(kind, &Some(RequestKind::Create));
    assert!(reason.contains("ResourceType"), "{reason}");
    assert!(!reason.contains("s3cr3t"));
}

#[test]
fn the_url_is_not_in_the_parsed_request() {
    let request = decode(Some(&create().to_string()), &policy()).expect("valid");
    let printed = format!("{request:?}");
    assert!(!printed.contains("s3cr3t") && !printed.contains("custom-resource-response"), "{printed}");
    assert_eq!(request.response_url.expose_secret(), URL);
}

#[test]
fn service_timeout_and_reserved_properties() {
    let mut with_timeout = create();
    with_timeout["ResourceProperties"]["ServiceTimeout"] = json!("120");
    let request = decode(Some(&with_timeout.to_string()), &policy()).expect("valid");
    assert_eq!(request.service_timeout_s(), Some(120));
    let stripped = provider_properties(&with_timeout["ResourceProperties"]);
    assert_eq!(stripped, json!({"Size": "5"}));
}

#[test]
fn bare_requests_need_raw_delivery_configured() {
    let envelopes_only = InputPolicy { raw_delivery: false, ..policy() };
    let raw = decode(Some(&create().to_string()), &envelopes_only).map(|_| ());
    assert_eq!(raw, Err(Undeliverable::RawRefused), "anyone who may send to the queue could forge one");
    assert!(decode(Some(&envelope(&create(), TOPIC)), &envelopes_only).is_ok());
}

/// `depth` nested arrays around a string.
fn nested(depth: usize) -> Value {
    let text = format!("{}\"deep\"{}", "[".repeat(depth), "]".repeat(depth));
    serde_json::from_str::<Value>(&text).unwrap_or(Value::Null)
}

#[test]
fn a_request_nested_too_deep_to_parse_is_still_answered() {
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let text = create().to_string().replacen(r#""Size":"5""#, &format!(r#""Size":{deep}"#), 1);
    assert!(serde_json::from_str::<Value>(&text).is_err(), "beyond the parser's limit");
    for body in [text.clone(), json!({"Type": "Notification", "TopicArn": TOPIC, "Message": text}).to_string()] {
        let request = decode(Some(&body), &policy()).expect("addressable despite the depth");
        assert_eq!(request.key.request_id, "e3f1c1d4-0000-4000-8000-000000000001");
        assert_eq!(request.response_url.expose_secret(), URL);
        let RequestBody::Malformed { reason, kind, .. } = &request.body else { panic!("expected malformed") };
        assert_eq!(kind, &Some(RequestKind::Create));
        assert!(reason.contains("nests deeper than 128 levels"), "{reason}");
    }
    assert!(nested(100).is_array(), "depths within the limit parse as usual");
}

#[test]
fn a_request_nested_100000_levels_deep_is_answered_failed_and_malformed_nesting_is_refused() {
    let with = |size: &str| create().to_string().replacen(r#""Size":"5""#, &format!(r#""Size":{size}"#), 1);
    let envelope = |text: &str| json!({"Type": "Notification", "TopicArn": TOPIC, "Message": text}).to_string();
    let arrays = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000));
    for deep in [arrays, objects] {
        let text = with(&deep);
        for body in [text.clone(), envelope(&text)] {
            let request = decode(Some(&body), &policy()).expect("addressable at any depth");
            assert_eq!(request.response_url.expose_secret(), URL);
            let RequestBody::Malformed { reason, .. } = &request.body else { panic!("expected malformed") };
            assert!(reason.contains("nests deeper than 128 levels"), "{reason}");
        }
    }
    // Brackets that do not match, shallow or deep: not JSON, so nobody can be answered.
    let shallow = with("[}");
    let deep = with(&format!("{}}}", "[".repeat(100_000)));
    for text in [shallow, deep] {
        for body in [text.clone(), envelope(&text)] {
            let refused = decode(Some(&body), &policy()).expect_err("not JSON");
            assert!(matches!(refused, Undeliverable::NotJson(_) | Undeliverable::MessageNotJson(_)), "{refused:?}");
        }
    }
    // A deep array at the top is no request, even one whose elements look like its fields.
    let array = format!(r#"["Create","{URL}",{}1{}]"#, "[".repeat(200), "]".repeat(200));
    assert!(decode(Some(&array), &policy()).is_err());
}

#[test]
fn missing_resource_properties_become_empty() {
    let mut bare = create();
    bare.as_object_mut().expect("object").remove("ResourceProperties");
    let request = decode(Some(&bare.to_string()), &policy()).expect("valid");
    assert!(matches!(request.body, RequestBody::Valid(_)));
}

#[test]
fn the_topic_a_request_arrived_through_is_kept_and_decides_its_privilege() {
    let second = "arn:aws:sns:eu-west-1:123456789012:cfn-once";
    let all = InputPolicy { topic_arns: vec![TOPIC.into(), second.into()], ..policy() };
    let only_second = InputPolicy { privileged_topic_arns: vec![second.into()], ..all.clone() };
    let mut deep = create();
    let mut nested = json!("leaf");
    for _ in 0..200 {
        nested = json!([nested]);
    }
    deep["ResourceProperties"]["Deep"] = nested;
    for (name, request) in [("shallow", create()), ("too deep to parse", deep)] {
        let through = |topic: &str, policy: &InputPolicy| {
            let decoded = decode(Some(&envelope(&request, topic)), policy).expect("decoded");
            (decoded.topic_arn, decoded.privileged)
        };
        let bare = |policy: &InputPolicy| {
            let decoded = decode(Some(&request.to_string()), policy).expect("raw delivery");
            (decoded.topic_arn, decoded.privileged)
        };
        // None named privileged: every accepted request is, as before the setting existed.
        assert_eq!(through(TOPIC, &all), (Some(TOPIC.to_owned()), true), "{name}");
        assert_eq!(bare(&all), (None, true), "{name}");
        // Named: only through one of them; a bare request has no topic, so it is not.
        assert_eq!(through(second, &only_second), (Some(second.to_owned()), true), "{name}");
        assert_eq!(through(TOPIC, &only_second), (Some(TOPIC.to_owned()), false), "{name}");
        assert_eq!(bare(&only_second), (None, false), "{name}");
    }
}
