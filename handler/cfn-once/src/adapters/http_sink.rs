//! The response sink: one HTTP PUT of the committed bytes to the presigned ResponseURL.
//!
//! Its rules: the URL is the one the URL policy admitted (https, port 443, an S3 host, or an
//! allow-listed local prefix), sent as CloudFormation sent it: `ResponseUrl` keeps the text as
//! received, and the request line carries its path and query byte for byte (an `http::Uri`,
//! which validates and keeps them; never re-serialized through `url::Url`, which re-encodes and
//! resolves dot segments); the request's headers are `host` and
//! `content-length`, nothing else (no Content-Type: the URL was signed without one); redirects are
//! never followed (a presigned URL that redirects is not CloudFormation's); no proxy from the
//! environment is used; the answer is read to at most [`ANSWER_BYTES_MAX`] bytes. A 5xx, 408 or
//! 429, S3's `400 RequestTimeout` (the body was not received in time, so nothing was stored),
//! and every failure to send or read are retryable, within the request's deadline; the rest is
//! permanent.
//!
//! The client is hyper's pooled client on the function's connector (`https::hyper_client`): the
//! process's TLS configuration (aws-lc, the compiled-in roots or `SSL_CERT_FILE`'s) and its session
//! cache, shared with the AWS SDK's calls; HTTP/1.1; one timeout over resolution, TCP and TLS;
//! idle connections dropped within S3's idle limit; TCP keepalive. It keeps its connections
//! between invocations, and hyper's pool sends a request it could not send on a fresh connection.
//!
//! The URL is a credential: hyper's errors never carry it, and nothing here logs.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use aws_smithy_types::body::SdkBody;
use cfn_once_core::put::{PutError, ResponseSink};
use cfn_once_core::response_url::ResponseUrl;
use http::StatusCode;
use hyper_util::client::legacy::Client;

use crate::adapters::https::{Connector, hyper_client};

/// The longest a connect (resolution, TCP and TLS) may take, within an attempt's time.
const CONNECT_TIMEOUT_MS_MAX: u64 = 3_000;

/// The longest answer to a PUT read: S3 answers an empty body, or an error of a few hundred
/// bytes of XML.
pub const ANSWER_BYTES_MAX: usize = 64 << 10;

/// How much of an error answer is kept to find its code in.
const ERROR_BYTES_KEPT: usize = 4 << 10;

/// PUTs response bodies over HTTPS (or HTTP for allow-listed local endpoints).
#[derive(Debug, Clone)]
pub struct HttpResponseSink {
    client: Client<Connector, SdkBody>,
    attempt_timeout: Duration,
}

/// What a PUT was answered: its status, and the first bytes of its body.
struct Answer {
    status: StatusCode,
    body: Vec<u8>,
}

impl HttpResponseSink {
    /// A sink whose every attempt gives up after `attempt_timeout_ms`, on the process's TLS
    /// configuration (`https::client_config`: compiled-in roots, or `SSL_CERT_FILE`'s).
    pub fn new(attempt_timeout_ms: u64) -> anyhow::Result<Self> {
        let tls = crate::adapters::https::client_config().map_err(anyhow::Error::msg)?;
        Self::with_tls(attempt_timeout_ms, &tls)
    }

    /// As `new`, on the TLS configuration `tls`.
    pub fn with_tls(attempt_timeout_ms: u64, tls: &rustls::ClientConfig) -> anyhow::Result<Self> {
        let connect_timeout = Duration::from_millis(attempt_timeout_ms.min(CONNECT_TIMEOUT_MS_MAX));
        let client = hyper_client(tls, Some(connect_timeout));
        Ok(Self { client, attempt_timeout: Duration::from_millis(attempt_timeout_ms) })
    }

    async fn attempt(&self, url: &ResponseUrl, body: &[u8]) -> Result<Answer, PutError> {
        let request = put_request(url.expose_secret(), body)?;
        // An error and its causes, "outer: inner: root" (anyhow's `{:#}`): hyper's and the OS's
        // errors carry no URL, so neither does the text (a ResponseURL is never in an error).
        let response = self
            .client
            .request(request)
            .await
            .map_err(|error| PutError::Retryable(format!("the PUT could not be sent: {:#}", anyhow::Error::new(error))))?;
        let status = response.status();
        // The (empty) answer is read to its end, at most ANSWER_BYTES_MAX, so the connection can
        // carry the next PUT; a longer one is cut off and its connection dropped.
        let mut answer = response.into_body();
        let (mut read, mut kept) = (0, Vec::new());
        while read <= ANSWER_BYTES_MAX {
            let frame = std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut answer), cx)).await;
            match frame {
                None => break,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        read += data.len();
                        let room = ERROR_BYTES_KEPT.saturating_sub(kept.len());
                        kept.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
                Some(Err(error)) => {
                    return Err(PutError::Retryable(format!(
                        "the answer to the PUT could not be read: {:#}",
                        anyhow::Error::new(error)
                    )));
                }
            }
        }
        Ok(Answer { status, body: kept })
    }
}

/// The PUT of `body` to `url`, whose path and query go into the request line as they are.
fn put_request(url: &str, body: &[u8]) -> Result<http::Request<SdkBody>, PutError> {
    let refused = || PutError::Permanent("the ResponseURL is not a URI an HTTP request can be sent to".into());
    let uri: http::Uri = url.parse().map_err(|_| refused())?;
    http::Request::put(uri).body(SdkBody::from(body.to_vec())).map_err(|_| refused())
}

#[async_trait]
impl ResponseSink for HttpResponseSink {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError> {
        // One timeout over the whole exchange, the answer's body included.
        match tokio::time::timeout(self.attempt_timeout, self.attempt(url, body)).await {
            Ok(answer) => classify_answer(&answer?),
            Err(_) => Err(PutError::Retryable(format!(
                "the PUT had no answer within {} ms",
                self.attempt_timeout.as_millis()
            ))),
        }
    }
}

fn classify_answer(answer: &Answer) -> Result<(), PutError> {
    let status = answer.status;
    if status.is_success() {
        return Ok(());
    }
    if status.is_redirection() {
        return Err(PutError::Permanent(format!(
            "the ResponseURL answered {status}, a redirect, which is never followed"
        )));
    }
    if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT || status == StatusCode::TOO_MANY_REQUESTS {
        return Err(PutError::Retryable(format!("the ResponseURL answered {status}")));
    }
    let code = error_code(&answer.body);
    if status == StatusCode::BAD_REQUEST && code == Some("RequestTimeout") {
        return Err(PutError::Retryable(format!(
            "the ResponseURL answered {status} RequestTimeout: S3 did not receive the body in time and stored nothing"
        )));
    }
    let named = code.map(|code| format!(" {code}")).unwrap_or_default();
    Err(PutError::Permanent(format!(
        "the ResponseURL answered {status}{named}; a presigned URL answers 403 once it has expired (CloudFormation's last two hours)"
    )))
}

/// The `<Code>` of an S3 error answer, if it has one made of letters.
fn error_code(body: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Code>")? + "<Code>".len();
    let code = &text[start..start + text[start..].find("</Code>")?];
    code.bytes().all(|byte| byte.is_ascii_alphanumeric()).then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(code: u16, body: &str, expected: &str) {
        let answer = Answer { status: StatusCode::from_u16(code).expect("status"), body: body.as_bytes().to_vec() };
        let got = match classify_answer(&answer) {
            Ok(()) => "ok",
            Err(PutError::Retryable(_)) => "retry",
            Err(PutError::Permanent(_)) => "stop",
        };
        assert_eq!(got, expected, "status {code} {body:?}");
    }

    fn s3_error(code: &str) -> String {
        format!(r#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>m</Message></Error>"#)
    }

    #[test]
    fn status_table() {
        check(200, "", "ok");
        check(204, "", "ok");
        check(301, "", "stop");
        check(307, "", "stop");
        check(403, "", "stop");
        check(403, &s3_error("AccessDenied"), "stop");
        check(404, "", "stop");
        check(400, "", "stop");
        check(400, &s3_error("BadDigest"), "stop");
        check(400, &s3_error("RequestTimeout"), "retry");
        check(408, "", "retry");
        check(429, "", "retry");
        check(500, "", "retry");
        check(503, &s3_error("SlowDown"), "retry");
    }

    #[test]
    fn the_request_line_carries_the_urls_path_and_query_as_given() {
        let url = "https://bucket.s3.us-east-1.amazonaws.com/arn%3Aaws%3Acloudformation%3Aus-east-1%3A1%3Astack/s/g%7CLogical%7Cid?X-Amz-Credential=AKID%2F20261203%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=ab%2Bcd";
        let request = put_request(url, b"{}").expect("a request");
        let target = request.uri().path_and_query().expect("a target").as_str();
        assert_eq!(target, &url["https://bucket.s3.us-east-1.amazonaws.com".len()..]);
        assert!(request.headers().is_empty(), "hyper adds host and content-length, nothing else is set");
    }

    #[test]
    fn an_explicit_443_is_kept_in_the_uri_the_client_connects_by() {
        let url = "https://bucket.s3.amazonaws.com:443/a/%2e%2e/k?X-Amz-Signature=ab";
        let request = put_request(url, b"{}").expect("a request");
        let uri = request.uri();
        assert_eq!(uri.scheme_str(), Some("https"));
        assert_eq!(uri.authority().map(http::uri::Authority::as_str), Some("bucket.s3.amazonaws.com:443"));
        assert_eq!(uri.port_u16(), Some(443));
        assert_eq!(uri.path_and_query().map(http::uri::PathAndQuery::as_str), Some("/a/%2e%2e/k?X-Amz-Signature=ab"));
        // The Host header is hyper-util's: the authority's host, with its port unless it is the
        // scheme's default (hyper-util 0.1.21, `client/legacy/client.rs`, `get_non_default_port`),
        // so `Host: bucket.s3.amazonaws.com` with or without the `:443`, as botocore's signer
        // writes the host it signs (boto/botocore#2965: the port only when not the scheme's
        // default). AWS's SigV4 documentation does not say how a default port is signed.
        assert_eq!(uri.host(), Some("bucket.s3.amazonaws.com"));
    }
}
