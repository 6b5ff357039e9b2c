//! The response sink: one HTTP PUT of the committed bytes to the presigned ResponseURL, on
//! `reqwest` (the design card's client).
//!
//! Its rules: the URL is the one the URL policy admitted (https, port 443, an S3 host, or an
//! allow-listed local prefix); redirects are never followed (a presigned URL that redirects is
//! not CloudFormation's); no proxy from the environment is used; no Content-Type is sent (the URL
//! was signed without one); the answer is read to at most [`ANSWER_BYTES_MAX`] bytes; a 5xx, 408
//! or 429 and every failure to send or read is retryable, the rest permanent. The client has the
//! process's TLS configuration (`https::client_config`: aws-lc, the compiled-in roots or
//! `SSL_CERT_FILE`'s), the same one the AWS SDK's calls use, HTTP/1.1 only, and keeps its
//! connections between invocations; hyper's pool sends a request it could not send on a fresh
//! connection.
//!
//! The URL is a credential: `reqwest` puts it into its errors, so every error is stripped of it
//! (`reqwest::Error::without_url`) before it is described, and nothing here logs.

use std::time::Duration;

use async_trait::async_trait;
use cfn_once_core::put::{PutError, ResponseSink};
use cfn_once_core::response_url::ResponseUrl;
use reqwest::StatusCode;

use crate::adapters::https::chain;

/// The longest a connect may take, within an attempt's time.
const CONNECT_TIMEOUT_MS_MAX: u64 = 3_000;

/// The longest answer to a PUT read: S3 answers an empty body, or an error of a few hundred
/// bytes of XML.
pub const ANSWER_BYTES_MAX: usize = 64 << 10;

/// How long an idle connection is kept for the next PUT: hyper's default.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// PUTs response bodies over HTTPS (or HTTP for allow-listed local endpoints).
#[derive(Debug, Clone)]
pub struct HttpResponseSink {
    client: reqwest::Client,
    attempt_timeout: Duration,
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
        let attempt_timeout = Duration::from_millis(attempt_timeout_ms);
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls.clone())
            .http1_only()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_millis(attempt_timeout_ms.min(CONNECT_TIMEOUT_MS_MAX)))
            .timeout(attempt_timeout)
            .pool_idle_timeout(POOL_IDLE)
            .build()
            .map_err(|error| anyhow::anyhow!("the ResponseURL client cannot be built: {}", describe(error)))?;
        Ok(Self { client, attempt_timeout })
    }

    async fn attempt(&self, url: &ResponseUrl, body: &[u8]) -> Result<StatusCode, PutError> {
        let mut response = self
            .client
            .put(url.expose_secret())
            .body(body.to_vec())
            .send()
            .await
            .map_err(|error| PutError::Retryable(format!("the PUT could not be sent: {}", describe(error))))?;
        // The (empty) answer is read to its end, at most ANSWER_BYTES_MAX, so the connection can
        // carry the next PUT; a longer one is cut off and its connection dropped.
        let mut read = 0;
        while read <= ANSWER_BYTES_MAX {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) => break,
                Err(error) => {
                    return Err(PutError::Retryable(format!(
                        "the answer to the PUT could not be read: {}",
                        describe(error)
                    )));
                }
            }
        }
        Ok(response.status())
    }
}

/// A `reqwest` error without the URL it carries (the ResponseURL is a secret), with its causes.
fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let kind = if error.is_timeout() { " (timed out)" } else { "" };
    format!("{}{kind}", chain(&error))
}

#[async_trait]
impl ResponseSink for HttpResponseSink {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError> {
        // reqwest's own timeout covers the exchange; this one also covers reading the answer.
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
