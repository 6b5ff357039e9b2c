//! The operator's tools: `cfn-once inspect`, `stuck` and `redrive`, against the local
//! environment (`--env .local/env.json`) or deployed stacks (the lease table and the queues,
//! with the operator's own AWS credentials: the function's role may not Query, Scan or redrive).
//!
//! They read what the protocol writes: the lease record of each request (`view` puts it in
//! words), the queues' counts, and the dead-letter queues' messages (`dlq`): the handler regions'
//! and the customer regions' delivery dead-letter queues, where SNS moves what it could not
//! deliver to a handler region's queue. They hold those messages
//! invisible while reading and then release or move. None of them ever prints a ResponseURL: a
//! queued message is only identified (`identify`), never shown.

//!
//! This crate is the operator's tool, `cfn-once`, on its own: it builds without the local
//! environment, the player, the soak and the simulator (crates cfn-once-local, cfn-once-play,
//! cfn-once-soak and cfn-once-sim, whose command line is `cfn-once-dev`), and installs with
//! `cargo install --locked --path tools/cfn-once-ops`.
//! [`drill`] runs a failover drill against deployed stacks or the local environment;
//! [`env_file`] reads what `cfn-once local` writes about the environment it serves. [`deploy`]
//! writes the SAM configuration from a few facts and runs the stacks in order; [`check`] says
//! whether a deployed pair, or the local environment, is wired as the templates intend.

pub mod aws;
pub mod check;
pub mod deploy;
pub mod dlq;
pub mod drill;
pub mod env_file;
pub mod inspect;
pub mod redrive;
pub mod stuck;
pub mod target;
pub mod text;
pub mod view;

pub use target::{DeliveryTarget, Identified, OpsTarget, QueueTarget, identify, span, utc};
