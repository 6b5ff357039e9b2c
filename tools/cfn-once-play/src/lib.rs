//! `cfn-once play`: a template's custom resources through a whole stack life, locally. The
//! template is read ([`yaml`], [`template`]) and its intrinsic functions evaluated
//! ([`intrinsics`]); the [`engine`] plays CloudFormation's rules for create, update, rollback
//! and delete; [`jobs`] wait for answers and signals; [`wire`] sends the requests through the
//! local environment's ServiceToken topic and reads the answers back; [`run`] is the whole
//! life, as the command line asks for it; [`plan`] previews an update as a change set would,
//! sending nothing; [`mask`] keeps NoEcho values out of everything play prints or writes;
//! [`nested_source`] finds the local file a nested stack's `TemplateURL` names; [`exports`]
//! keeps the exports of the stacks plays leave standing, for later plays to import.

pub mod cli;
pub mod cloud;
pub mod engine;
pub mod exports;
pub mod faults;
pub mod intrinsics;
pub mod jobs;
pub mod mask;
pub mod nested_source;
pub mod plan;
pub mod render;
pub mod run;
pub mod state;
pub mod template;
pub mod wire;
pub mod yaml;
