//! Classifying DynamoDB SDK errors, shared by the lease store and the fenced-write helper.
//!
//! The one place that decides whether a failed call certainly did not happen (retry it), may
//! have happened (read before deciding), or will never work (stop).

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// How a failed DynamoDB call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Certainly not applied: throttled, conflicted, or never sent.
    NotApplied(String),
    /// Maybe applied: timed out after sending, a 5xx, an unreadable response.
    Unknown(String),
    /// Will never work as sent: missing table, denied, invalid.
    Permanent(String),
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

pub(crate) fn classify<E, R>(error: &SdkError<E, R>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let text = DisplayErrorContext(error).to_string();
    match error {
        SdkError::ConstructionFailure(_) => Failure::Permanent(text),
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Failure::Unknown(text),
        SdkError::DispatchFailure(dispatch) if dispatch.is_user() => Failure::Permanent(text),
        SdkError::DispatchFailure(_) => Failure::Unknown(text),
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or_default();
            if RETRYABLE_CODES.contains(&code) {
                Failure::NotApplied(text)
            } else if code == "InternalServerError" || code == "ServiceUnavailable" || code.is_empty() {
                Failure::Unknown(text)
            } else {
                Failure::Permanent(text)
            }
        }
        _ => Failure::Unknown(text),
    }
}
