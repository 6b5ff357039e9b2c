//! The response sink: one HTTP PUT of the committed bytes to the presigned ResponseURL.
//!
//! Redirects are never followed (a presigned URL that redirects is not CloudFormation's), no
//! proxy from the environment is used, and no Content-Type is sent (the URL was signed without
//! one). Errors describe the failure with reqwest's URL stripped, so the ResponseURL cannot leak
//! through them.

use std::time::Duration;

use async_trait::async_trait;
use cfn_once_core::delivery::{PutError, ResponseSink};
use cfn_once_core::response_url::ResponseUrl;
use reqwest::StatusCode;
use reqwest::redirect::Policy;

/// PUTs response bodies over HTTPS (or HTTP for allow-listed local endpoints).
#[derive(Debug, Clone)]
pub struct HttpResponseSink {
    client: reqwest::Client,
}

impl HttpResponseSink {
    /// A sink whose every attempt gives up after `attempt_timeout_ms`.
    pub fn new(attempt_timeout_ms: u64) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(Policy::none())
            .no_proxy()
            .timeout(Duration::from_millis(attempt_timeout_ms))
            .connect_timeout(Duration::from_millis(attempt_timeout_ms.min(3_000)))
            .build()?;
        Ok(Self { client })
    }
}

#[async_trait]
impl ResponseSink for HttpResponseSink {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError> {
        let response = self
            .client
            .put(url.expose_secret())
            .body(body.to_vec())
            .send()
            .await
            .map_err(|error| describe_send_error(error.without_url()))?;
        classify_status(response.status())
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

fn describe_send_error(error: reqwest::Error) -> PutError {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    if error.is_builder() || error.is_redirect() { PutError::Permanent(text) } else { PutError::Retryable(text) }
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
