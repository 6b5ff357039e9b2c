//! cfn-once: AWS CloudFormation custom resources answered exactly once, from whichever of two
//! regions is alive.
//!
//! A provider author's whole `main.rs`:
//!
//! ```no_run
//! use cfn_once::{Provider, ProviderContext, ProviderError, ProviderOutput, Step, async_trait};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! #[serde(rename_all = "PascalCase")]
//! struct Properties {
//!     bucket_name: String,
//! }
//!
//! struct BucketPolicy;
//!
//! #[async_trait]
//! impl Provider for BucketPolicy {
//!     type Properties = Properties;
//!
//!     async fn create(&self, _ctx: &ProviderContext, props: Properties) -> Result<Step, ProviderError> {
//!         let id = format!("policy-{}", props.bucket_name);
//!         Ok(ProviderOutput { physical_resource_id: Some(id), ..Default::default() }.into())
//!     }
//!
//!     async fn update(
//!         &self,
//!         ctx: &ProviderContext,
//!         _id: &str,
//!         props: Properties,
//!         _old: Option<Properties>,
//!     ) -> Result<Step, ProviderError> {
//!         self.create(ctx, props).await
//!     }
//!
//!     async fn delete(&self, _ctx: &ProviderContext, _id: &str, _props: Properties) -> Result<Step<()>, ProviderError> {
//!         Ok(Step::Done(()))
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), cfn_once::Error> {
//!     cfn_once::Handler::from_env()? // the same CFN_ONCE_* configuration as the stock function
//!         .provider("Custom::BucketPolicy", BucketPolicy)
//!         .with_standard_providers() // Custom::Echo and Custom::DynamoDBItem
//!         .run() // the Lambda; CFN_ONCE_MODE=sweeper runs the lease table's sweeper instead
//!         .await
//! }
//! ```
//!
//! Build it with `cargo lambda build --release --arm64` and deploy it with the templates in
//! `infra/` (the README's "Write your own provider"). With the `testing` feature,
//! [`testing::ProviderTest`](cfn_once_core::kit::ProviderTest) runs a provider through the real protocol in memory, in
//! microseconds: duplicates, a takeover mid-run, Delete after a failed Create, and a provider
//! that answers [`Step::InProgress`] followed through its polls.
//!
//! This crate is the shell around `cfn_once_core`, which does no I/O: [`config`] reads the
//! environment once, [`handler`] is the entry ([`Handler`]), [`app`] wires the adapters,
//! [`lambda`] turns an SQS batch into a partial batch response, [`adapters`] implement the
//! core's ports on DynamoDB, SQS and HTTP (and ARC, with the `arc` feature), [`sweeper`]
//! deletes expired lease records, [`fenced`] offers fenced DynamoDB writes to provider
//! authors, [`providers`] holds the shipped providers, [`logging`] sets up JSON logs and
//! [`metrics`] writes CloudWatch embedded-metric-format lines. The local and operator tools
//! (`cfn-once local`, `demo`, `drill`) live in the separate `cfn-once-cli` package, so the
//! function carries only what it runs.

#![warn(missing_docs)]

pub mod adapters;
pub mod app;
pub mod clock;
pub mod config;
pub mod fenced;
pub mod handler;
pub mod lambda;
pub mod logging;
pub mod metrics;
pub mod providers;
pub mod sweeper;
#[cfg(feature = "testing")]
pub mod testing;

pub use async_trait::async_trait;
pub use cfn_once_core as core;
pub use cfn_once_core::properties::{PropertyError, from_properties};
pub use cfn_once_core::provider::{Fence, Provider, ProviderContext, ProviderError, ProviderOutput, Step, Waiting};
pub use fenced::{FencedTable, FencedWriteError};
pub use handler::{Error, Handler};

// The README's Rust examples compile as doctests, so the README cannot drift from the API.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
