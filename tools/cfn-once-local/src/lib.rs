//! cfn-once on this machine: both handler regions on moto (local AWS), exactly as they run in
//! Lambda, with only the endpoint changed. `cfn-once local` and `cfn-once demo` are built on it,
//! and so are the player (crate cfn-once-play), the soak (cfn-once-soak) and the tests.
//!
//! * **AWS** ([`moto`]): a moto server of its own, started from the repository's Python venv,
//!   and [`tls_front`], a TLS endpoint in front of it so that the function's own HTTPS client is
//!   used; [`fault_proxy`] sits between a region and moto and drops, delays or resets calls.
//! * **The environment** ([`environment`], [`provision`]): the topics, the queues with their
//!   delay and redrive, the lease table and the answer bucket, as `infra/` declares them, written
//!   down in `.local/env.json` for the operator's tool ([`settings`] holds the handlers'
//!   environment).
//! * **The functions** ([`lambda_service`], [`invoke_api`], [`functions`], [`functions_file`],
//!   [`function_build`]): a Lambda Runtime API and an Invoke API that run real processes, the
//!   stock binary or a user's functions (`functions.yaml`), built on demand.
//! * **Delivery** ([`esm`], [`worker`], [`pair`]): an event source mapping per region that
//!   polls its queue and invokes the handler, and the two regions side by side; [`signals`]
//!   crashes or restores the primary by signal, for a drill; [`long_work`] is the sample provider
//!   that answers in progress.
//! * **Output** ([`report`], [`demo`]): a line per request, and the demo's table.

pub mod demo;
pub mod environment;
pub mod esm;
pub mod fault_proxy;
pub mod function_build;
pub mod functions;
pub mod functions_file;
pub mod http_server;
pub mod invoke_api;
pub mod lambda_service;
pub mod long_work;
pub mod moto;
pub mod pair;
pub mod provision;
pub mod report;
pub mod settings;
pub mod signals;
pub mod tls_front;
pub mod worker;
