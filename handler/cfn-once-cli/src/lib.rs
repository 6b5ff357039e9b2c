//! cfn-once-cli: the tools for trying cfn-once, for people rather than for Lambda or operators.
//! [`local`] runs both regions' handlers on local AWS (moto) through a local event source
//! mapping, and holds the demo. [`play`] plays a template's custom resources through a stack's
//! whole life. [`soak`] runs the Lambda binary itself as a fleet of processes under load and
//! faults and checks what landed. [`golden`] keeps the lease table's items as one version of
//! the function wrote them, the fixtures today's handler is tested against. The `cfn-once-dev`
//! binary is their command line; the operator's commands (inspect, stuck, redrive, drill) are
//! the crate `cfn-once-ops`'s, whose `cfn-once` binary runs these too.

pub mod golden;
pub mod local;
pub mod play;
pub mod soak;
