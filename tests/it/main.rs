//! cfn-once's integration tests, one binary (matklad, "Delete Cargo Integration Tests").
//!
//! Everything here runs the real handler code against local AWS (moto), started by the harness.

mod contract;
