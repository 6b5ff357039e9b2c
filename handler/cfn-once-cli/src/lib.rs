//! cfn-once-cli: the tools around the cfn-once Lambda function, for people rather than for
//! Lambda. [`local`] runs both regions' handlers on local AWS (moto) through a local event source
//! mapping, and holds the demo and the failover drill, which also runs against deployed stacks.
//! [`ops`] holds the operator's tools (inspect a request, list stuck ones, redrive a DLQ), for
//! the local environment and deployed stacks. [`soak`] runs the Lambda binary itself as a fleet
//! of processes under load and faults and checks what landed. [`golden`] keeps the lease
//! table's items as one version of the function wrote them, the fixtures today's handler is
//! tested against. The `cfn-once` binary is their command line.

pub mod golden;
pub mod local;
pub mod ops;
pub mod play;
pub mod soak;
