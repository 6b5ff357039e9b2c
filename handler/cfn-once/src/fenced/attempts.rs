//! One attempt of a fenced write through the AWS SDK, as `cfn_once_core::fenced::send` takes it:
//! applied, refused by an item (which the refusal returns), or failed as [`classify`] says.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use cfn_once_core::fenced::{Attempt, Failed};

use super::Item;
use crate::aws::classify;

/// One attempt's result.
pub(super) fn attempt<O, E>(result: Result<O, SdkError<E, HttpResponse>>) -> Attempt<O, Item>
where
    E: Refusable + ProvideErrorMetadata + std::error::Error + 'static,
{
    let error = match result {
        Ok(output) => return Attempt::Applied(output),
        Err(error) => error,
    };
    if let SdkError::ServiceError(service) = &error {
        if let Some(item) = service.err().refused_by() {
            return Attempt::Refused(item.cloned());
        }
        if service.err().code() == Some("ResourceNotFoundException") {
            return Attempt::Failed(Failed::NoSuchTable);
        }
    }
    Attempt::Failed(Failed::Other(classify(&error)))
}

/// An operation's error that may be a refused condition, carrying the item that refused it.
pub(super) trait Refusable {
    /// The item a refused condition met (`Some(None)`: there was none); `None` if the call
    /// failed otherwise.
    fn refused_by(&self) -> Option<Option<&Item>>;
}

impl Refusable for PutItemError {
    fn refused_by(&self) -> Option<Option<&Item>> {
        match self {
            Self::ConditionalCheckFailedException(failed) => Some(failed.item.as_ref()),
            _ => None,
        }
    }
}

impl Refusable for UpdateItemError {
    fn refused_by(&self) -> Option<Option<&Item>> {
        match self {
            Self::ConditionalCheckFailedException(failed) => Some(failed.item.as_ref()),
            _ => None,
        }
    }
}

impl Refusable for DeleteItemError {
    fn refused_by(&self) -> Option<Option<&Item>> {
        match self {
            Self::ConditionalCheckFailedException(failed) => Some(failed.item.as_ref()),
            _ => None,
        }
    }
}

/// A read's errors are never refusals.
impl Refusable for GetItemError {
    fn refused_by(&self) -> Option<Option<&Item>> {
        None
    }
}
