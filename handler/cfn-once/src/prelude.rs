//! Everything a provider author names, in one import: `use cfn_once::prelude::*;`.
//!
//! The provider API ([`Provider`], [`ProviderContext`], [`ProviderOutput`], [`Step`],
//! [`ProviderError`], [`from_properties`]), the function's builder ([`Handler`],
//! [`ProviderSetup`]), fenced and owned writes ([`FencedTable`], [`WriteRules`], [`Written`],
//! [`Deleted`], [`item`], [`AttributeValue`]), and what tests compare answers with
//! ([`Status`], [`RequestKind`]).

pub use async_trait::async_trait;
pub use aws_sdk_dynamodb::types::AttributeValue;
pub use cfn_once_core::ownership::{Deleted, Fence, Owner, WriteRefused, WriteRules, Written};
pub use cfn_once_core::properties::{PropertyError, from_properties};
pub use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Step, Waiting};
pub use cfn_once_core::request::RequestKind;
pub use cfn_once_core::response::Status;

pub use crate::fenced::{FencedTable, FencedWriteError, Item, item};
pub use crate::handler::{Error, Handler, ProviderSetup};
