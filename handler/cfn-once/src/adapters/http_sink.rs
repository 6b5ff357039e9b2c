//! The response sink: one HTTP PUT of the committed bytes to the presigned ResponseURL.
//!
//! Redirects are never followed (a presigned URL that redirects is not CloudFormation's), no
//! proxy from the environment is used, and no Content-Type is sent (the URL was signed without
//! one). It runs on hyper with the process's TLS configuration (`https`), the same one the AWS
//! SDK's calls use. Errors describe the failure from hyper's and the OS's error chain, which
//! carries no URL, so the ResponseURL cannot leak through them.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use cfn_once_core::put::{PutError, ResponseSink};
use cfn_once_core::response_url::ResponseUrl;

use crate::adapters::https::chain;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

/// The longest a connect may take, within an attempt's time.
const CONNECT_TIMEOUT_MS_MAX: u64 = 3_000;

/// PUTs response bodies over HTTPS (or HTTP for allow-listed local endpoints).
#[derive(Debug, Clone)]
pub struct HttpResponseSink {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
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
        let client = crate::adapters::https::hyper_client(tls, Some(connect_timeout));
        Self { client, attempt_timeout: Duration::from_millis(attempt_timeout_ms) }
    }

    async fn attempt(&self, url: &ResponseUrl, body: &[u8]) -> Result<StatusCode, PutError> {
        let request = http::Request::put(url.expose_secret())
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(Full::new(Bytes::copy_from_slice(body)))
            // The URL passed the URL policy, so this does not happen; the error names no URL.
            .map_err(|error| PutError::Permanent(format!("the PUT could not be built: {error}")))?;
        let response = self.client.request(request).await.map_err(describe_send_error)?;
        let status = response.status();
        // Read the (empty) answer to its end so the connection goes back to the pool.
        response.into_body().collect().await.map_err(|error| {
            PutError::Retryable(format!("the answer to the PUT could not be read: {}", chain(&error)))
        })?;
        Ok(status)
    }
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

/// Every failure to send may be transient (refused, reset, a DNS or TLS failure, a timeout):
/// retried within the request's time, and past it the copy goes to the dead-letter queue.
fn describe_send_error(error: hyper_util::client::legacy::Error) -> PutError {
    PutError::Retryable(format!("the PUT could not be sent: {}", chain(&error)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
