//! The response sink: one HTTP PUT of the committed bytes to the presigned ResponseURL.
//!
//! Redirects are never followed (a presigned URL that redirects is not CloudFormation's), no
//! proxy from the environment is used, and no Content-Type is sent (the URL was signed without
//! one). It runs on the lease store wire's HTTP/1.1 client (`h1`: the exchange on the caller's
//! task, keep-alive connections) with the process's TLS configuration (`https`), the same one
//! the AWS SDK's calls use. Errors describe the failure from the OS's and TLS's errors, which
//! carry no URL, so the ResponseURL cannot leak through them.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cfn_once_core::put::{PutError, ResponseSink};
use cfn_once_core::response_url::ResponseUrl;

use crate::adapters::h1;
use http::StatusCode;

/// The longest a connect may take, within an attempt's time.
const CONNECT_TIMEOUT_MS_MAX: u64 = 3_000;

/// The longest answer to a PUT read: S3 answers an empty body, or an error of a few hundred
/// bytes of XML.
const ANSWER_BYTES_MAX: usize = 64 << 10;

/// PUTs response bodies over HTTPS (or HTTP for allow-listed local endpoints).
#[derive(Debug, Clone)]
pub struct HttpResponseSink {
    client: Arc<h1::Client>,
    attempt_timeout: Duration,
}

impl HttpResponseSink {
    /// A sink whose every attempt gives up after `attempt_timeout_ms`, on the process's TLS
    /// configuration (`https::client_config`: compiled-in roots, or `SSL_CERT_FILE`'s).
    pub fn new(attempt_timeout_ms: u64) -> anyhow::Result<Self> {
        let tls = crate::adapters::https::client_config().map_err(anyhow::Error::msg)?;
        Ok(Self::with_tls(attempt_timeout_ms, &tls))
    }

    /// As `new`, on the TLS configuration `tls`.
    pub fn with_tls(attempt_timeout_ms: u64, tls: &rustls::ClientConfig) -> Self {
        let connect_timeout = Duration::from_millis(attempt_timeout_ms.min(CONNECT_TIMEOUT_MS_MAX));
        let client = Arc::new(h1::Client::new(tls, connect_timeout));
        Self { client, attempt_timeout: Duration::from_millis(attempt_timeout_ms) }
    }

    async fn attempt(&self, url: &ResponseUrl, body: &[u8]) -> Result<StatusCode, PutError> {
        // The URL passed the URL policy, so these do not happen; the errors name no URL.
        let uri: http::Uri = url
            .expose_secret()
            .parse()
            .map_err(|_| PutError::Permanent("the ResponseURL is not a URL the PUT can be sent to".to_owned()))?;
        let origin = h1::Origin::of(&uri)
            .map_err(|error| PutError::Permanent(format!("the PUT could not be built: {error}")))?;
        let request = put_request(&uri, &origin, body);
        // The (empty) answer is read to its end, so the connection can carry the next PUT.
        let answer = self.client.exchange(&origin, &request, ANSWER_BYTES_MAX).await.map_err(|error| match error {
            h1::ExchangeError::Send(why) => PutError::Retryable(format!("the PUT could not be sent: {why}")),
            h1::ExchangeError::Read(why) => {
                PutError::Retryable(format!("the answer to the PUT could not be read: {why}"))
            }
        })?;
        StatusCode::from_u16(answer.status).map_err(|_| {
            PutError::Retryable(format!("the ResponseURL answered a status out of range ({})", answer.status))
        })
    }
}

/// The PUT of `body` to `uri` as HTTP/1.1 writes it: the path and query (the presigned
/// signature), the `host` the URL was signed for (its port only when it is not the scheme's),
/// the body's length, and no Content-Type.
fn put_request(uri: &http::Uri, origin: &h1::Origin, body: &[u8]) -> Vec<u8> {
    let target = uri.path_and_query().map_or("/", http::uri::PathAndQuery::as_str);
    let host = uri.host().unwrap_or_default();
    let default_port = if origin.tls { 443 } else { 80 };
    let host = if origin.port == default_port { host.to_owned() } else { format!("{host}:{}", origin.port) };
    h1::request("PUT", target, [("host", host.as_bytes())], body)
}

#[async_trait]
impl ResponseSink for HttpResponseSink {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError> {
        match tokio::time::timeout(self.attempt_timeout, self.attempt(url, body)).await {
            Ok(status) => classify_status(status?),
            Err(_) => Err(PutError::Retryable(format!(
                "the PUT had no answer within {} ms",
                self.attempt_timeout.as_millis()
            ))),
        }
    }
}

fn classify_status(status: StatusCode) -> Result<(), PutError> {
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
    Err(PutError::Permanent(format!(
        "the ResponseURL answered {status}; a presigned URL answers 403 once it has expired (CloudFormation's last two hours)"
    )))
}

// Every failure to send or to read the answer may be transient (refused, reset, a DNS or TLS
// failure, a timeout): retried within the request's time, and past it the copy goes to the
// dead-letter queue.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_put_carries_the_signed_host_and_the_query_as_they_are() {
        let check = |url: &str, head: &str| {
            let uri: http::Uri = url.parse().expect("uri");
            let origin = h1::Origin::of(&uri).expect("origin");
            let request = put_request(&uri, &origin, b"{}");
            assert_eq!(String::from_utf8(request).expect("text"), format!("{head}\r\ncontent-length: 2\r\n\r\n{{}}"));
        };
        check(
            "https://b.s3.amazonaws.com/k%2Fey?X-Amz-Signature=ab&a=b",
            "PUT /k%2Fey?X-Amz-Signature=ab&a=b HTTP/1.1\r\nhost: b.s3.amazonaws.com",
        );
        check("https://b.s3.amazonaws.com:443/k", "PUT /k HTTP/1.1\r\nhost: b.s3.amazonaws.com");
        check("http://127.0.0.1:5000/k?x=1", "PUT /k?x=1 HTTP/1.1\r\nhost: 127.0.0.1:5000");
        check("https://[::1]:8443/k", "PUT /k HTTP/1.1\r\nhost: [::1]:8443");
    }

    #[test]
    fn status_table() {
        let check = |code: u16, expected: &str| {
            let got = match classify_status(StatusCode::from_u16(code).expect("status")) {
                Ok(()) => "ok",
                Err(PutError::Retryable(_)) => "retry",
                Err(PutError::Permanent(_)) => "stop",
            };
            assert_eq!(got, expected, "status {code}");
        };
        check(200, "ok");
        check(204, "ok");
        check(301, "stop");
        check(307, "stop");
        check(403, "stop");
        check(404, "stop");
        check(408, "retry");
        check(429, "retry");
        check(500, "retry");
        check(503, "retry");
    }
}
