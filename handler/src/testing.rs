//! The provider test kit: run a provider through the real protocol (the worker, the decision
//! table, the lease store, response building) in memory, on a manual clock, without AWS.
//! Re-exported from `cfn_once_core::kit`; see [`ProviderTest`].

pub use cfn_once_core::kit::*;
