//! Classifying DynamoDB SDK errors, shared by the lease store and the fenced-write helper.
//!
//! The one place that decides whether a failed call certainly did not happen (retry it), may
//! have happened (read before deciding), or will never work (stop).

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

/// How a failed DynamoDB call ended: what [`classify`] makes of an SDK error, so that a provider
/// calling DynamoDB itself retries what may clear and fails on what will not
/// (`ProviderError::from(classify(&error))`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Certainly not applied: throttled, conflicted, or never sent.
    NotApplied(String),
    /// Maybe applied: timed out after sending, a 5xx, an unreadable response.
    Unknown(String),
    /// Will never work as sent: missing table, denied, invalid.
    Permanent(String),
}

impl Failure {
    /// What went wrong, in a line.
    pub fn into_text(self) -> String {
        match self {
            Self::NotApplied(text) | Self::Unknown(text) | Self::Permanent(text) => text,
        }
    }
}

/// Error codes DynamoDB returns before applying anything, which a retry may clear.
const RETRYABLE_CODES: [&str; 6] = [
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "ReplicatedWriteConflictException",
    "TransactionConflictException",
    "LimitExceededException",
];

/// What a failed DynamoDB call means: certainly not applied (retry it), maybe applied (read
/// before deciding, or retry an idempotent write), or never going to work (stop). The text is
/// one line: the service's code and message, never the SDK's full dump.
pub fn classify<E, R>(error: &SdkError<E, R>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let text = brief(error);
    match error {
        SdkError::ConstructionFailure(_) => Failure::Permanent(text),
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Failure::Unknown(text),
        SdkError::DispatchFailure(dispatch) if dispatch.is_user() => Failure::Permanent(text),
        SdkError::DispatchFailure(_) => Failure::Unknown(text),
        SdkError::ServiceError(service) => of_service_error(service.err().code().unwrap_or_default(), text),
        _ => Failure::Unknown(text),
    }
}

/// What an error DynamoDB answered with means, by its code (empty when the answer named none):
/// the one table both the SDK's errors ([`classify`]) and the lease store's own wire
/// (`dynamodb_wire`) are read with.
pub(crate) fn of_service_error(code: &str, text: String) -> Failure {
    if RETRYABLE_CODES.contains(&code) {
        Failure::NotApplied(text)
    } else if code == "InternalServerError" || code == "ServiceUnavailable" || code.is_empty() {
        Failure::Unknown(text)
    } else {
        Failure::Permanent(text)
    }
}

/// What went wrong, in a line: the service's error code and message, or the kind of transport
/// failure and its root cause. Never the SDK's full dump (HTTP headers, HTML bodies), which would
/// end up in a Reason.
pub(crate) fn brief<E, R>(error: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
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
            let code = service.err().code().unwrap_or("an unnamed error");
            match service.err().message() {
                Some(message) => format!("{code}: {message}"),
                None => code.to_owned(),
            }
        }
        SdkError::TimeoutError(_) => "no answer before the timeout".to_owned(),
        SdkError::DispatchFailure(_) => format!("the request could not be sent: {}", root()),
        SdkError::ResponseError(_) => format!("the response could not be read: {}", root()),
        SdkError::ConstructionFailure(_) => format!("the request could not be built: {}", root()),
        _ => root(),
    }
}
