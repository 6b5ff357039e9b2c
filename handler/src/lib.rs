//! cfn-once: CloudFormation custom resources answered exactly once, from whichever of two
//! regions is alive.
//!
//! This crate is the shell around `cfn_once_core`: [`config`] reads the environment once,
//! [`app`] wires the adapters, [`lambda`] turns an SQS batch into a partial batch response,
//! [`adapters`] implement the core's ports on DynamoDB, SQS and HTTP, [`sweeper`] deletes expired
//! lease records, [`fenced`] offers fenced
//! DynamoDB writes to provider authors, [`providers`] holds the shipped providers, [`logging`]
//! sets up JSON logs, [`metrics`] writes CloudWatch embedded-metric-format lines, and [`local`] runs the same handler against a local AWS (moto) through a
//! local event source mapping.

pub mod adapters;
pub mod app;
pub mod clock;
pub mod config;
pub mod fenced;
pub mod lambda;
pub mod local;
pub mod logging;
pub mod metrics;
pub mod providers;
pub mod sweeper;

pub use cfn_once_core as core;

// The README's Rust examples compile as doctests, so the README cannot drift from the API.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
