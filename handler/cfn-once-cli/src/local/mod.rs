//! Local AWS: everything needed to run cfn-once on this machine against moto, exactly as it
//! runs in Lambda, with only the endpoint changed.

pub mod control;
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
pub mod tls_front;
pub mod worker;
