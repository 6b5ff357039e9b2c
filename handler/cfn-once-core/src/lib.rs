#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
//! cfn-once-core: the part of cfn-once that does no I/O.
//!
//! Request decoding, the lease protocol and its decision rules, provider routing and response
//! building are plain types and functions here. The outside world (DynamoDB, S3 over HTTP, SQS,
//! the active-region control, the clock, randomness) is reached only through the traits in
//! [`lease`], [`put`], [`batch`], [`control`], [`metrics`], [`clock`] and [`random`]; the
//! `cfn-once` crate supplies the adapters. This crate depends on no AWS SDK, HTTP client, async
//! runtime or `lambda_runtime`, and its Cargo.toml is where that rule is enforced.
//!
//! Where things are:
//!
//! * the words every crate speaks: [`vocabulary`] is what the worker is given and what it says
//!   back (`QueueRecord`, `Invocation`, `Disposition`, `Done`, `Role`);
//! * the input: [`request`] decodes an SQS record (requests nested too deep to parse
//!   included), [`response_url`] validates and hides the ResponseURL, [`aws_names`] checks
//!   regions and DynamoDB table names, [`fingerprint`] identifies a request, [`timestamp`] reads
//!   SNS's times, and [`deadline`] works out when a request must be answered;
//! * the record: [`lease`] defines the lease record and the store port, [`memory_store`] is the
//!   in-memory store, and [`decision`] is the decision table over what a delivery sees;
//! * the tunables: [`settings`] holds them, [`config`] reads them from the environment once,
//!   and [`budget`] computes every deadline and backoff from them;
//! * providers: [`provider`] and [`properties`] are what a provider author uses, [`ownership`]
//!   holds the rules of a provider's writes (fenced and owned), and [`echo`] is the built-in
//!   `Custom::Echo`;
//! * the answer: [`response`] builds the body and [`put`] PUTs it to the ResponseURL, with
//!   retries; [`wait_condition`] reads a resource's wait condition handle, and [`work`] keys the
//!   work handed past the answer and shapes its signal;
//! * the protocol: [`worker`] ties them together for one delivery, [`batch`] for one
//!   invocation's records; [`control`] says whether this region is active, [`metrics`] counts
//!   what happened, and [`clock`] and [`random`] are the injected time and randomness;
//! * test support, with the `testing` feature (and in this crate's own tests): [`doubles`] holds the fault-injecting doubles the test suites and the
//!   simulator share, and [`testing`] is the provider test kit.
//!
//! The modules form layers: none imports one that imports it back, directly or through others
//! (`tests/module_graph.rs` fails on any cycle). The vocabulary, the names, the settings and
//! the budget sit low, below the decision table and the configuration; the worker and the batch
//! sit near the top, with only the provider test kit above them.

pub mod aws_names;
pub mod batch;
pub mod budget;
pub mod build;
pub mod clock;
pub mod config;
pub mod control;
pub mod deadline;
pub mod decision;
// Test support is compiled only for tests and with the `testing` feature: the Lambda carries none.
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod doubles;
pub mod echo;
pub mod failure;
pub mod fenced;
pub mod fingerprint;
pub mod lease;
pub mod marks;
pub mod memory_store;
pub mod metrics;
pub mod ownership;
pub mod properties;
pub mod provider;
pub mod put;
pub mod random;
pub mod request;
pub mod response;
pub mod response_url;
pub mod settings;
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod timestamp;
pub mod vocabulary;
pub mod wait_condition;
pub mod work;
pub mod worker;
pub mod write_token;

#[cfg(test)]
mod fuzz_tests;
