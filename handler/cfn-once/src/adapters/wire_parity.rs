//! The lease store on its own wire and on the SDK, held to the same requests and the same
//! answers: both stores are pointed at one scripted HTTP server, which answers each request
//! with the same canned response; every outcome the lease protocol reads (applied, refused and
//! with which record, not applied, unknown, permanent) and every request body must agree.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_credential_types::Credentials;
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{AcquireRequest, LeaseStore, RequestLabel, StoreError};
use cfn_once_core::request::{RequestKey, StackArn};
use serde_json::Value;

use super::dynamodb_lease::DynamoLeaseStore;
use super::dynamodb_wire::DynamoWire;

/// Extra headers of a scripted answer.
type Headers = Vec<(&'static str, &'static str)>;

/// What the server does with a request.
#[derive(Clone)]
enum Script {
    /// Answers with this status, these extra headers and this body.
    Answer(u16, Headers, &'static str),
    /// Closes the connection without a word.
    Hang,
    /// Reads the request and says nothing until the client gives up.
    Silent,
}

/// A request as the server read it: its headers (lower-cased names) and its JSON body.
#[derive(Debug, Clone)]
struct Seen {
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }
}

/// A one-script HTTP/1.1 server on loopback, on its own thread; every connection is answered
/// once and closed.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(script: Script) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut headers = Vec::new();
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':') {
                        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_owned());
                        if name == "content-length" {
                            length = value.parse().unwrap_or(0);
                        }
                        headers.push((name, value));
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    continue;
                }
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                record.lock().expect("seen").push(Seen { headers, body });
                match &script {
                    Script::Answer(status, extra, body) => {
                        let mut response = format!(
                            "HTTP/1.1 {status} Whatever\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\nconnection: close\r\n",
                            body.len()
                        );
                        for (name, value) in extra {
                            response.push_str(&format!("{name}: {value}\r\n"));
                        }
                        response.push_str("\r\n");
                        response.push_str(body);
                        let _ = stream.write_all(response.as_bytes());
                    }
                    Script::Hang => {}
                    Script::Silent => std::thread::sleep(Duration::from_secs(2)),
                }
            }
        });
        Self { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }
}

/// The two stores on `server`: the SDK's client, and the same with the wire.
async fn stores(server: &Server) -> (DynamoLeaseStore, DynamoLeaseStore) {
    let tls = super::https::client_config().expect("tls");
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(&server.url)
        .region(aws_config::Region::new("eu-west-1"))
        .credentials_provider(Credentials::new("AKIDEXAMPLE", "secret", Some("token".into()), None, "test"))
        .http_client(super::https::sdk_http_client(tls))
        .load()
        .await;
    let client = crate::app::dynamodb_client(&sdk, 500, "eu-west-1");
    let wire = DynamoWire::from_sdk(&sdk, "eu-west-1", 500).expect("wire");
    let sdk_store = DynamoLeaseStore::new(client, "leases");
    let wire_store = sdk_store.clone().with_wire(wire);
    (sdk_store, wire_store)
}

fn key() -> RequestKey {
    RequestKey {
        stack_id: StackArn::parse("arn:aws:cloudformation:eu-west-1:123456789012:stack/s/1").expect("arn"),
        request_id: "request-1".into(),
    }
}

fn acquire_request() -> AcquireRequest {
    AcquireRequest {
        key: key(),
        fingerprint: Fingerprint::from_stored("fp-new".into()),
        owner: "eu-west-1/test".into(),
        now_ms: 1_000_000,
        lease_until_ms: 1_060_000,
        sent_ms: 999_000,
        expires_ms: 9_000_000,
        skew_ms: 2_000,
        poll_lag_ms: 1_000,
        label: RequestLabel {
            logical_resource_id: "Thing".into(),
            request_type: "Create".into(),
            resource_type: "Custom::Thing".into(),
        },
    }
}

/// A whole record as DynamoDB's JSON, the item a refusal or an ALL_OLD answer carries.
const RECORD: &str = r#"{"pk":{"S":"arn:aws:cloudformation:eu-west-1:123456789012:stack/s/1"},"sk":{"S":"request-1"},
  "fence":{"N":"7"},"owner":{"S":"us-east-1/other"},"lease_until_ms":{"N":"1200000"},"heartbeat":{"N":"2"},
  "state":{"S":"COMMITTED"},"fingerprint":{"S":"fp-old"},"attempts":{"SS":["fp-old","fp-older"]},
  "sent_ms":{"N":"900000"},"response":{"B":"eyJTdGF0dXMiOiJTVUNDRVNTIn0="},"delivered":{"BOOL":true},
  "created_ms":{"N":"800000"},"updated_ms":{"N":"950000"},"expires_ms":{"N":"8000000"},
  "logical_id":{"S":"Thing"},"request_type":{"S":"Create"},"resource_type":{"S":"Custom::Thing"}}"#;

/// An outcome with what may differ between the two transports' words taken out: a transport
/// failure's text (the SDK words a dropped connection its own way); a service error's text is
/// kept (both say "code: message").
fn shape(outcome: Result<String, StoreError>) -> String {
    match outcome {
        Ok(answer) => answer,
        Err(StoreError::Transient(text)) => format!("Transient({text})"),
        Err(StoreError::Permanent(text)) => format!("Permanent({text})"),
        Err(StoreError::Ambiguous(text)) if text.starts_with("the ") || text.starts_with("no answer") => {
            "Ambiguous(transport)".into()
        }
        Err(StoreError::Ambiguous(text)) => format!("Ambiguous({text})"),
    }
}

/// The store's three kinds of call, each as its outcome in words.
async fn calls(store: &DynamoLeaseStore) -> Vec<String> {
    let heartbeat = store.heartbeat(&key(), 7, 1_070_000, 1_000_000).await.map(|answer| format!("{answer:?}"));
    let acquire = store.acquire(&acquire_request()).await.map(|answer| format!("{answer:?}"));
    let read = store.read(&key()).await.map(|answer| format!("{answer:?}"));
    vec![shape(heartbeat), shape(acquire), shape(read)]
}

/// Both stores against `script`: their outcomes, which must be the same, and what the server
/// saw of each (SDK first).
async fn both(script: Script) -> (Vec<String>, Vec<Seen>, Vec<Seen>) {
    let sdk_server = Server::start(script.clone());
    let wire_server = Server::start(script);
    let (sdk, _) = stores(&sdk_server).await;
    let (_, wire) = stores(&wire_server).await;
    let by_sdk = calls(&sdk).await;
    let by_wire = calls(&wire).await;
    assert_eq!(by_wire, by_sdk, "the wire and the SDK read the same answers differently");
    (by_sdk, sdk_server.seen(), wire_server.seen())
}

#[tokio::test]
async fn the_wire_sends_what_the_sdk_sends() {
    let (_, by_sdk, by_wire) = both(Script::Answer(200, vec![], "{}")).await;
    assert_eq!(by_sdk.len(), 3, "heartbeat, acquire, read");
    assert_eq!(by_wire.len(), 3);
    for (sdk, wire) in by_sdk.iter().zip(&by_wire) {
        assert_eq!(wire.body, sdk.body, "the JSON body");
        for header in ["x-amz-target", "content-type", "x-amz-security-token"] {
            assert_eq!(wire.header(header), sdk.header(header), "{header}");
        }
        let scope = |seen: &Seen| {
            let authorization = seen.header("authorization").expect("signed").to_owned();
            let credential = authorization.split("Credential=").nth(1).expect("a credential");
            let credential = credential.split(',').next().unwrap_or_default().to_owned();
            credential.split('/').skip(2).take(3).collect::<Vec<_>>().join("/")
        };
        assert_eq!(scope(wire), "eu-west-1/dynamodb/aws4_request");
        assert_eq!(scope(wire), scope(sdk));
        let signed = |seen: &Seen| {
            seen.header("authorization").and_then(|a| a.split("SignedHeaders=").nth(1)).map(str::to_owned)
        };
        let wire_signed = signed(wire).expect("signed headers");
        for header in ["content-type", "host", "x-amz-date", "x-amz-security-token", "x-amz-target"] {
            assert!(wire_signed.contains(header), "{header} is signed: {wire_signed}");
        }
    }
}

#[tokio::test]
async fn a_success_reads_the_same() {
    let attributes: &'static str = Box::leak(format!(r#"{{"Attributes":{RECORD},"Item":{RECORD}}}"#).into_boxed_str());
    let (outcomes, _, _) = both(Script::Answer(200, vec![], attributes)).await;
    assert!(outcomes[1].starts_with("Acquired { fence: 8"), "{outcomes:?}");
    assert!(outcomes[2].starts_with("Some(LeaseRecord"), "{outcomes:?}");
}

#[tokio::test]
async fn a_failed_condition_returns_the_same_record() {
    let body: &'static str = Box::leak(
        format!(
            r#"{{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed","Item":{RECORD}}}"#
        )
        .into_boxed_str(),
    );
    let (outcomes, _, _) = both(Script::Answer(400, vec![], body)).await;
    assert!(outcomes[0].starts_with("Refused(Some(LeaseRecord"), "{outcomes:?}");
    assert!(outcomes[1].starts_with("Refused(LeaseRecord"), "{outcomes:?}");
    let (outcomes, _, _) = both(Script::Answer(
        400,
        vec![],
        r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}"#,
    ))
    .await;
    assert_eq!(outcomes[0], "Refused(None)");
}

#[tokio::test]
async fn service_errors_are_classified_alike() {
    let cases: [(u16, Headers, &'static str, &str); 9] = [
        (
            400,
            vec![],
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"}"#,
            "Transient",
        ),
        (400, vec![], r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException"}"#, "Transient"),
        (
            400,
            vec![("x-amzn-ErrorType", "ReplicatedWriteConflictException:http://internal.amazon.com/")],
            "",
            "Transient",
        ),
        (
            400,
            vec![],
            r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"bad expression"}"#,
            "Permanent",
        ),
        (
            400,
            vec![],
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"no table"}"#,
            "Permanent",
        ),
        (403, vec![], r#"{"__type":"com.amazon.coral.service#AccessDeniedException","Message":"denied"}"#, "Permanent"),
        (
            500,
            vec![],
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"oops"}"#,
            "Ambiguous",
        ),
        (503, vec![], "<html>Service Unavailable</html>", "Ambiguous"),
        (400, vec![("x-amzn-ErrorType", "ValidationException")], "not json", "Ambiguous"),
    ];
    for (status, headers, body, expected) in cases {
        let (outcomes, _, _) = both(Script::Answer(status, headers, body)).await;
        for outcome in &outcomes {
            assert!(outcome.starts_with(expected), "{status} {body}: {outcomes:?}");
        }
    }
}

#[tokio::test]
async fn a_garbled_success_or_no_answer_is_an_unknown_outcome() {
    for script in [Script::Answer(200, vec![], "{not json"), Script::Hang, Script::Silent] {
        let (outcomes, _, _) = both(script).await;
        for outcome in &outcomes {
            assert!(outcome.starts_with("Ambiguous"), "{outcomes:?}");
        }
    }
}
