//! cfn-once-cli: the tools around the cfn-once Lambda function, for people rather than for
//! Lambda. [`local`] runs both regions' handlers on local AWS (moto) through a local event source
//! mapping, and holds the demo and the failover drill, which also runs against deployed stacks.
//! The `cfn-once` binary is their command line.

pub mod local;
