//! The response PUT against a real HTTP peer: success, retryable and permanent failures, a
//! redirect that must not be followed, and the exact request the sink puts on the wire: the
//! ResponseURL's path and query as CloudFormation sent them, whatever a URL parser would make
//! of them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use cfn_once::adapters::http_sink::HttpResponseSink;
use cfn_once_core::put::{PutError, ResponseSink};
use cfn_once_core::response_url::{AllowedPrefix, UrlPolicy};
use cfn_once_tests::{Fault, FaultProxy, Match};

/// Answers each connection with `status_line` and `extra_headers`, and reports the request
/// line and body it received.
fn one_shot_server(status_line: &'static str, extra_headers: String) -> (u16, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let request = read_request(&stream);
            let mut stream = stream;
            let response =
                format!("HTTP/1.1 {status_line}\r\ncontent-length: 0\r\nconnection: close\r\n{extra_headers}\r\n");
            let _ = stream.write_all(response.as_bytes());
            let _ = sender.send(request);
        }
    });
    (port, receiver)
}

fn read_request(stream: &TcpStream) -> (String, Vec<u8>) {
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).expect("request line");
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).expect("header");
        if header.trim().is_empty() {
            break;
        }
        if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().expect("length");
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("body");
    (request_line.trim().to_owned(), body)
}

async fn put(port: u16) -> Result<(), PutError> {
    let url = UrlPolicy::new(vec![AllowedPrefix::parse(&format!("http://127.0.0.1:{port}/")).expect("prefix")])
        .check(&format!("http://127.0.0.1:{port}/bucket/key?X-Amz-Signature=secret"))
        .expect("allowed");
    HttpResponseSink::new(2_000).expect("client").put(&url, br#"{"Status":"SUCCESS"}"#).await
}

#[tokio::test]
async fn a_2xx_is_success_and_the_body_is_sent_as_is() {
    let (port, received) = one_shot_server("200 OK", String::new());
    put(port).await.expect("success");
    let (request_line, body) = received.recv_timeout(Duration::from_secs(5)).expect("request");
    assert_eq!(request_line, "PUT /bucket/key?X-Amz-Signature=secret HTTP/1.1");
    assert_eq!(body, br#"{"Status":"SUCCESS"}"#);
}

#[tokio::test]
async fn a_5xx_is_retryable_and_a_403_is_not() {
    let (port, _) = one_shot_server("503 Slow Down", String::new());
    assert!(matches!(put(port).await, Err(PutError::Retryable(_))));
    let (port, _) = one_shot_server("403 Forbidden", String::new());
    let error = put(port).await.expect_err("refused");
    assert!(matches!(error, PutError::Permanent(ref why) if why.contains("403")), "{error:?}");
    assert!(!error.to_string().contains("secret"), "{error}");
}

#[tokio::test]
async fn a_redirect_is_never_followed() {
    let (target_port, target) = one_shot_server("200 OK", String::new());
    let location = format!("location: http://127.0.0.1:{target_port}/elsewhere\r\n");
    let (port, _) = one_shot_server("307 Temporary Redirect", location);
    let error = put(port).await.expect_err("a redirect is not success");
    assert!(matches!(error, PutError::Permanent(ref why) if why.contains("redirect")), "{error:?}");
    assert!(target.recv_timeout(Duration::from_millis(500)).is_err(), "the redirect target was contacted");
}

#[tokio::test]
async fn a_refused_connection_is_retryable_and_names_no_url() {
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let error = put(port).await.expect_err("nobody listens");
    assert!(matches!(error, PutError::Retryable(_)), "{error:?}");
    assert!(!error.to_string().contains("secret") && !error.to_string().contains("/bucket/key"), "{error}");
}

/// A ResponseURL shaped as CloudFormation's: the key is the stack ARN, the logical id and the
/// request id, percent-encoded; the query is SigV4's, its credential scope percent-encoded.
const PATH_AND_QUERY: &str = "/bucket/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/s/0a1b%7CLogical%7Crequest-1\
    ?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20261203%2Fus-east-1%2Fs3%2Faws4_request\
    &X-Amz-Date=20261203T161500Z&X-Amz-Expires=7200&X-Amz-SignedHeaders=host&X-Amz-Signature=0123abcd";

#[tokio::test]
async fn the_put_is_the_urls_request_line_and_two_headers_exactly() {
    // The proxy answers as S3 does to a stored object, without forwarding anything.
    let proxy = FaultProxy::start("http://127.0.0.1:9");
    let stored = Fault::Respond { status: 200, content_type: "application/xml".into(), body: String::new() };
    proxy.inject(Match::Put, stored, 1);
    let base = proxy.url();
    let url = UrlPolicy::new(vec![AllowedPrefix::parse(&format!("{base}/bucket/")).expect("prefix")])
        .check(&format!("{base}{PATH_AND_QUERY}"))
        .expect("allowed");
    let body = br#"{"Status":"SUCCESS","Reason":"","PhysicalResourceId":"p","StackId":"s","RequestId":"r","LogicalResourceId":"l"}"#;
    HttpResponseSink::new(2_000).expect("client").put(&url, body).await.expect("stored");
    let heads = proxy.heads(&Match::Put);
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert_eq!(heads[0].line, format!("PUT {PATH_AND_QUERY} HTTP/1.1"), "the URL's path and query, byte for byte");
    let mut headers = heads[0].headers.clone();
    headers.sort();
    let authority = base.strip_prefix("http://").expect("http");
    assert_eq!(
        headers,
        [("content-length".to_owned(), body.len().to_string()), ("host".to_owned(), authority.to_owned())],
        "host and content-length, nothing else: no Content-Type (the URL was signed without one), no Expect"
    );
    assert_eq!(proxy.bodies(&Match::Put), [body.to_vec()]);
}

/// Paths and queries a URL parser rewrites (`url::Url` resolves `..` and `%2e%2e` segments and
/// percent-encodes `'` in a query), and the two presigned query shapes, SigV2's and SigV4's,
/// with their percent-encoded `+`, `/` and `=`.
const AS_SENT: [&str; 7] = [
    "/bucket/stack/a/%2e%2e/b%2E%2E/key",
    "/bucket/stack/a/../b/./key",
    "/bucket/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/demo/1a2b%7CThing%7C5f3c",
    "/bucket/~owner/key~1",
    "/bucket/it's/key?note='quoted'",
    "/bucket/k?AWSAccessKeyId=AKIDEXAMPLE&Expires=1795944791&Signature=ab%2Bcd%2Fef%3D",
    "/bucket/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20261203%2Fus-east-1%2Fs3%2Faws4_request\
        &X-Amz-Date=20261203T161500Z&X-Amz-Expires=7200&X-Amz-SignedHeaders=host&X-Amz-Signature=0123abcd",
];

#[tokio::test]
async fn the_put_sends_the_urls_path_and_query_as_cloudformation_sent_them() {
    let proxy = FaultProxy::start("http://127.0.0.1:9");
    let stored = Fault::Respond { status: 200, content_type: "application/xml".into(), body: String::new() };
    proxy.inject(Match::Put, stored, AS_SENT.len() as u32);
    let base = proxy.url();
    let authority = base.strip_prefix("http://").expect("http");
    let policy = UrlPolicy::new(vec![AllowedPrefix::parse(&format!("{base}/bucket/")).expect("prefix")]);
    let sink = HttpResponseSink::new(2_000).expect("client");
    let mut observed = Vec::new();
    for path_and_query in AS_SENT {
        let url = policy.check(&format!("{base}{path_and_query}")).expect("allowed");
        sink.put(&url, b"{}").await.expect("stored");
        let head = proxy.heads(&Match::Put).pop().expect("the PUT reached the proxy");
        let host = head.headers.iter().find(|(name, _)| name == "host").map(|(_, value)| value.clone());
        observed.push((head.line, host));
    }
    let expected: Vec<_> = AS_SENT
        .iter()
        .map(|path_and_query| (format!("PUT {path_and_query} HTTP/1.1"), Some(authority.to_owned())))
        .collect();
    assert_eq!(observed, expected, "each request line is the URL's path and query byte for byte; Host its authority");
}

#[tokio::test]
async fn s3s_request_timeout_is_retryable() {
    let timeout = r#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>RequestTimeout</Code><Message>Your socket connection to the server was not read from or written to within the timeout period.</Message></Error>"#;
    let proxy = FaultProxy::start("http://127.0.0.1:9");
    proxy.inject(
        Match::Put,
        Fault::Respond { status: 400, content_type: "application/xml".into(), body: timeout.into() },
        1,
    );
    let base = proxy.url();
    let url = UrlPolicy::new(vec![AllowedPrefix::parse(&format!("{base}/bucket/")).expect("prefix")])
        .check(&format!("{base}{PATH_AND_QUERY}"))
        .expect("allowed");
    let error = HttpResponseSink::new(2_000).expect("client").put(&url, b"{}").await.expect_err("not stored");
    assert!(matches!(error, PutError::Retryable(ref why) if why.contains("RequestTimeout")), "{error:?}");
}
