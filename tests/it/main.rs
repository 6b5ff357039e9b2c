//! cfn-once's integration tests, one binary (matklad, "Delete Cargo Integration Tests").
//!
//! Everything here runs the real handler code against local AWS (moto), started by the harness.

mod arc;
mod bad_input;
mod calls;
mod classes;
mod contract;
mod crashes;
mod customer_template;
mod dropped;
mod duplicates;
mod e2e;
mod emf;
mod esm;
mod expired_credentials;
mod fenced;
mod fenced_unknown;
mod formats;
mod functions;
mod golden;
mod hostile;
mod hostile_http;
mod http_sink;
mod invoke_api;
mod lambda_service;
mod layout;
mod lifecycle;
mod links;
mod local_anywhere;
mod local_functions;
mod logs;
mod long_life;
mod ops;
mod play;
mod privileged;
mod pypi_functions;
mod release;
mod rules;
mod sweeper;
mod templates;
mod tls;
mod two_regions;
mod unreadable_record;
mod unseen_invokes;
mod wait_conditions;
mod wire_faults;
