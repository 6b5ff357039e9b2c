//! Classifying failed AWS calls, once for every adapter: the lease store, the fenced-write helper,
//! the active-region control, the answer bucket and the providers that call AWS.
//!
//! The one place that decides whether a failed call certainly did not happen (retry it), may have
//! happened (read before deciding, or retry an idempotent call), or will never work (stop). It is
//! modelled on the AWS SDKs' standard retry classifiers, and reads the same things they do: the
//! HTTP status and the error code. Any 5xx, with or without a code and whatever its body (a load
//! balancer's 502, an HTML 503), and the SDK's transient codes (`RequestTimeout`,
//! `RequestTimeoutException`) may have been applied; the SDK's throttling codes, 429, write
//! conflicts, expired credentials and a signature the service refused for the request's time were
//! certainly not, and are retried: the SDK's identity cache reloads credentials as they expire,
//! and its clock-skew interceptor learns the service's time from the refusal's `Date`, so the next
//! attempt is signed right. Everything else (a missing table, access denied, a bad request) is
//! permanent. The worker retries within the invocation's time whatever is retryable; the SDK
//! clients make one attempt per call, so the decision is the worker's, deadline-aware.

use aws_runtime::retries::classifiers::{THROTTLING_ERRORS, TRANSIENT_ERRORS};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// How a failed AWS call ended: what [`classify`] makes of an SDK error, so that a provider
/// calling AWS itself retries what may clear and fails on what will not
/// (`ProviderError::from(classify(&error))`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Certainly not applied: throttled, conflicted, refused before it was processed.
    NotApplied(String),
    /// Maybe applied: timed out after sending, a 5xx, an unreadable response.
    Unknown(String),
    /// Certainly not applied, and nothing this process can do changes that now (credentials
    /// that expired and that nothing here can refresh): tried again by a later invocation.
    Deferred(String),
    /// Will never work as sent: missing table, denied, invalid.
    Permanent(String),
}

impl Failure {
    /// What went wrong, in a line.
    pub fn into_text(self) -> String {
        match self {
            Self::NotApplied(text) | Self::Unknown(text) | Self::Deferred(text) | Self::Permanent(text) => text,
        }
    }

    /// Whether trying the same call again may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Permanent(_))
    }
}

/// Codes refused before anything was applied that a retry clears, besides the SDK's throttling
/// codes: DynamoDB's write conflicts (MRSC's `ReplicatedWriteConflictException` among them).
const CONFLICT_CODES: [&str; 2] = ["ReplicatedWriteConflictException", "TransactionConflictException"];

/// Credentials that expired: the request was refused unread. The SDK's identity cache loads new
/// ones when those it holds expire.
const EXPIRED_CREDENTIAL_CODES: [&str; 4] =
    ["ExpiredToken", "ExpiredTokenException", "RequestExpired", "TokenRefreshRequired"];

/// A signature the service refused for the time it carries (the SDK's clock-skew codes, less
/// `AccessDeniedException`, which the SDK counts as skew only when it measured one, and which here
/// is a missing permission). The refusal's `Date` corrects the next attempt's signing time.
const SKEW_CODES: [&str; 5] =
    ["InvalidSignatureException", "SignatureDoesNotMatch", "AuthFailure", "RequestTimeTooSkewed", "RequestInTheFuture"];

/// What a failed AWS call means: certainly not applied (retry it), maybe applied (read before
/// deciding, or retry an idempotent write), or never going to work (stop). The text is one line:
/// the service's code and message, or the HTTP status, never the SDK's full dump.
pub fn classify<E>(error: &SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let text = brief(error);
    match error {
        SdkError::ConstructionFailure(_) => Failure::Permanent(text),
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Failure::Unknown(text),
        SdkError::DispatchFailure(dispatch) if dispatch.is_user() => Failure::Permanent(text),
        SdkError::DispatchFailure(_) => Failure::Unknown(text),
        SdkError::ServiceError(service) => {
            of_answer(service.raw().status().as_u16(), service.err().code().unwrap_or_default(), text)
        }
        _ => Failure::Unknown(text),
    }
}

/// What an error answer means, by its HTTP status and its code (empty when it named none).
pub fn of_answer(status: u16, code: &str, text: String) -> Failure {
    let named = |codes: &[&str]| codes.contains(&code);
    let refused_unread =
        named(THROTTLING_ERRORS) || named(&CONFLICT_CODES) || named(&EXPIRED_CREDENTIAL_CODES) || named(&SKEW_CODES);
    if refused_unread || status == 429 {
        Failure::NotApplied(text)
    } else if named(TRANSIENT_ERRORS) || (500..600).contains(&status) {
        Failure::Unknown(text)
    } else {
        Failure::Permanent(text)
    }
}

/// What went wrong, in a line: the service's error code and message (or the HTTP status, for an
/// answer that named no code), or the kind of transport failure and its root cause. Never the
/// SDK's full dump (HTTP headers, HTML bodies), which would end up in a Reason, and never a URL.
pub fn brief<E>(error: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let root = || {
        let mut cause: &dyn std::error::Error = error;
        while let Some(source) = cause.source() {
            cause = source;
        }
        cause.to_string()
    };
    match error {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            match (service.err().code(), service.err().message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_owned(),
                (None, _) => format!("the service answered HTTP {status} without an error code"),
            }
        }
        SdkError::TimeoutError(_) => "no answer before the timeout".to_owned(),
        SdkError::DispatchFailure(_) => format!("the request could not be sent: {}", root()),
        SdkError::ResponseError(_) => format!("the response could not be read: {}", root()),
        SdkError::ConstructionFailure(_) => format!("the request could not be built: {}", root()),
        _ => root(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (status, code, expected): "not applied", "unknown" or "permanent".
    #[test]
    fn answers_are_classified_by_status_and_code_as_the_sdk_retries_them() {
        let cases = [
            (500, "InternalServerError", "unknown"),
            (500, "InternalFailure", "unknown"),
            (500, "SomethingNobodyNamed", "unknown"),
            (502, "", "unknown"),
            (503, "", "unknown"),
            (503, "ServiceUnavailable", "unknown"),
            (504, "", "unknown"),
            (599, "", "unknown"),
            (400, "RequestTimeoutException", "unknown"),
            (400, "RequestTimeout", "unknown"),
            (400, "ThrottlingException", "not applied"),
            (400, "ProvisionedThroughputExceededException", "not applied"),
            (400, "RequestLimitExceeded", "not applied"),
            (400, "LimitExceededException", "not applied"),
            (409, "ReplicatedWriteConflictException", "not applied"),
            (400, "TransactionConflictException", "not applied"),
            (429, "", "not applied"),
            (400, "ExpiredTokenException", "not applied"),
            (403, "ExpiredToken", "not applied"),
            (400, "InvalidSignatureException", "not applied"),
            (403, "SignatureDoesNotMatch", "not applied"),
            (403, "RequestTimeTooSkewed", "not applied"),
            (400, "ConditionalCheckFailedException", "permanent"),
            (400, "ResourceNotFoundException", "permanent"),
            (400, "AccessDeniedException", "permanent"),
            (400, "ValidationException", "permanent"),
            (403, "", "permanent"),
            (404, "", "permanent"),
        ];
        for (status, code, expected) in cases {
            let got = match of_answer(status, code, String::new()) {
                Failure::NotApplied(_) => "not applied",
                Failure::Unknown(_) => "unknown",
                Failure::Deferred(_) => "deferred",
                Failure::Permanent(_) => "permanent",
            };
            assert_eq!(got, expected, "HTTP {status} {code:?}");
        }
    }
}
