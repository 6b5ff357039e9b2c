//! What a failed DynamoDB call means to the lease store: the AWS failure, as `aws::classify`
//! reads it, as the port's `StoreError`.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use cfn_once_core::lease::StoreError;

use crate::aws::{Failure, classify};

/// A failed operator read as the port's error (expired credentials deferred: the operator's own
/// tools read once and report).
pub(super) fn store_error<E>(error: &SdkError<E, HttpResponse>) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    of_failure(classify(error))
}

/// A classified failure as the port's error.
pub(super) fn of_failure(failure: Failure) -> StoreError {
    match failure {
        Failure::NotApplied(text) => StoreError::Transient(text),
        Failure::Unknown(text) => StoreError::Ambiguous(text),
        Failure::Deferred(text) => StoreError::Deferred(text),
        Failure::Permanent(text) => StoreError::Permanent(text),
    }
}
