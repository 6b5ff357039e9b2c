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
//! `infra/` (the repository's docs/providers.md, "Write your own provider").
//!
//! # Where to look
//!
//! - [`prelude`]: everything a provider author names, in one `use`.
//! - [`Provider`], [`ProviderContext`], [`ProviderOutput`], [`Step`], [`ProviderError`]: the
//!   resource logic, and what it is given and returns.
//! - [`Handler`] and [`ProviderSetup`]: the function's one builder.
//! - [`fenced`] ([`FencedTable`]): DynamoDB writes that are fenced (a stale execution cannot
//!   overwrite a newer one) and owned (a resource never overwrites or deletes what it did not
//!   create).
//! - [`testing`]: the provider test kit, [`testing::ProviderTest`], which runs a provider through
//!   the real protocol in memory, in microseconds: duplicates, takeovers mid-run and mid-poll, a
//!   stale execution's write after a takeover, a region lost during a wait, Delete after a failed
//!   Create. Add it with the `testing` feature (`[dev-dependencies] cfn-once = { ..., features =
//!   ["testing"] }`); docs.rs documents it.
//! - [`providers`]: the shipped `Custom::Echo` and `Custom::DynamoDBItem`, to deploy as they are
//!   or to read as examples.
//!
//! The rest of the crate (the adapters, the wiring, the Lambda entry, logging, metrics, the
//! sweeper, the configuration) is cfn-once's own machinery and not part of its API: private,
//! unless the repository's own tools build it with the `internals` feature. ARCHITECTURE.md maps
//! it. The core that does no I/O is the `cfn-once-core` crate, whose items this crate re-exports
//! where an author names them.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod fenced;
pub mod prelude;
pub mod providers;
// Compiled only with the `testing` feature, so the Lambda carries no test code; docs.rs builds
// with it ([package.metadata.docs.rs]), as does `cargo doc --features cfn-once/testing`.
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

/// cfn-once's own machinery: public only with the `internals` feature, which the repository's
/// tools, tests and benchmark enable and nothing published promises anything about; private
/// otherwise, so a provider author's API is the items above and the re-exports below.
macro_rules! machinery {
    ($($(#[$attribute:meta])* $name:ident),* $(,)?) => {$(
        $(#[$attribute])*
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        $(#[$attribute])*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports)]
        mod $name;
    )*};
}

machinery!(
    /// The ports of `cfn_once_core` on AWS and HTTP.
    adapters,
    /// The wiring: the handler's dependencies, built once per process.
    app,
    /// What every AWS call shares: its clients' bounds, and how a failed call is read.
    aws,
    /// The configuration, read once from the environment.
    config,
    /// The protocol's metrics as CloudWatch embedded-metric-format lines.
    emf,
    /// The one builder, `Handler`.
    handler,
    /// The Lambda entry: one SQS batch in, the records to see again out.
    lambda,
    /// JSON log lines, with foreign targets capped.
    logging,
    /// Lambda's SQS event made JSON text before it is deserialized, record by record.
    raw_event,
    /// Lambda's SQS event read record by record.
    sqs_records,
    /// The lease table's sweeper.
    sweeper,
    /// The system clock and the process's random seed.
    system_clock,
);

pub use async_trait::async_trait;
#[doc(hidden)]
pub use cfn_once_core as core;
pub use cfn_once_core::ownership::Fence;
pub use cfn_once_core::properties::{PropertyError, from_properties};
pub use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Step, Waiting};
pub use fenced::{FencedTable, FencedWriteError};
pub use handler::{Error, Handler, ProviderSetup};

// The crate's README (its page on the registry) compiles as doctests, so it cannot drift from
// the API. The repository's README and its guides in docs/ are tested the same way by the tests
// crate (tests/harness).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
