//! Local AWS: everything needed to run cfn-once on this machine against moto, exactly as it
//! runs in Lambda, with only the endpoint changed.

pub mod demo;
pub mod esm;
pub mod moto;
pub mod provision;
