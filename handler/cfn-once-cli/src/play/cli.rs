//! `cfn-once play`'s flags and what it prints.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;

use crate::local::environment::EnvFile;
use crate::play::engine::Notice;
use crate::play::faults::RegionFaults;
use crate::play::mask::{Secrets, Watching};
use crate::play::render::{Columns, Printer};
use crate::play::run::{self, Place, PlayOptions};
use crate::play::wire::{LocalCloud, LocalRegionFaults};

/// The flags of `cfn-once play`.
#[derive(Debug, Args)]
pub struct PlayArgs {
    /// The template to create the stack from (YAML, short-form tags welcome, or JSON).
    #[arg(value_name = "TEMPLATE")]
    pub template: PathBuf,
    /// A template to update the stack to after its create; repeat for several updates, played
    /// in order (steps `update`, `update2`, ...).
    #[arg(long, value_name = "TEMPLATE")]
    pub update: Vec<PathBuf>,
    /// A parameter's value, NAME=VALUE; repeat. Each template takes those it declares.
    #[arg(long, value_name = "NAME=VALUE")]
    pub parameter: Vec<String>,
    /// An export's value for `Fn::ImportValue`, NAME=VALUE; repeat. An import of a name written
    /// out in the template and not given is refused before anything is sent.
    #[arg(long, value_name = "NAME=VALUE")]
    pub import: Vec<String>,
    /// What `Fn::GetAtt` of a resource play does not provision gives, LOGICAL.ATTRIBUTE=VALUE;
    /// without it such a GetAtt is refused before anything is sent.
    #[arg(long, value_name = "LOGICAL.ATTRIBUTE=VALUE")]
    pub stub: Vec<String>,
    /// Count a resource's request in a step as answered FAILED, LOGICAL[@STEP] (STEP: create,
    /// the default; update, update2, ...; delete). The request is still sent and run; a
    /// SUCCESS is counted FAILED, keeping its PhysicalResourceId, so the rollback that follows
    /// deletes what the provider made. A nested template's resource is named by its logical id,
    /// in the parent's steps.
    #[arg(long, value_name = "LOGICAL[@STEP]")]
    pub fail: Vec<String>,
    /// Drain the primary region (the active region becomes the secondary, as `cfn-once drill`
    /// does) after this many answers (at least 1); undone at the end.
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub drill_after: Option<usize>,
    /// Crash the primary region's handler of the running `cfn-once local` after this many
    /// answers (at least 1; the secondary takes over what it held); started again at the end.
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub kill_primary_after: Option<usize>,
    /// The environment `cfn-once local` (`make local`) serves.
    #[arg(long, value_name = "PATH", default_value = ".local/env.json")]
    pub env: PathBuf,
    /// The stack's name (default: play-<template's file name>-<random>).
    #[arg(long, value_name = "NAME")]
    pub stack_name: Option<String>,
    /// The parameter that receives the local ServiceToken topic's ARN when the template
    /// declares it and --parameter does not set it.
    #[arg(long, value_name = "NAME", default_value = "ServiceToken")]
    pub service_token_parameter: String,
    /// Leave the stack standing: no delete at the end.
    #[arg(long)]
    pub keep: bool,
    /// When an update ends UPDATE_ROLLBACK_FAILED, continue its rollback before the next step
    /// (and before the delete), as CloudFormation's ContinueUpdateRollback does: the Updates
    /// back that failed are sent again, then the cleanup. Without it, later updates are refused
    /// as CloudFormation refuses them.
    #[arg(long)]
    pub continue_update_rollback: bool,
    /// Print the whole report as JSON (events, steps, each resource's requests) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Send nothing: preview, as CloudFormation's change set would, what each --update (or,
    /// without one, the create) would send each custom resource (Add, Modify with its
    /// Replacement and the properties that change or may, Remove) and print it (--json too).
    /// Reads --env's file for the local topic if it is there; connects to nothing.
    #[arg(long)]
    pub plan: bool,
}

impl PlayArgs {
    /// The exports `--import` gives, by name.
    pub fn imports(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let mut imports = BTreeMap::new();
        for entry in &self.import {
            let (name, value) =
                entry.split_once('=').ok_or_else(|| anyhow::anyhow!("--import {entry:?}: expected NAME=VALUE"))?;
            imports.insert(name.trim().to_owned(), value.to_owned());
        }
        Ok(imports)
    }

    /// The options these flags ask for, or what is wrong with them.
    pub fn options(&self) -> anyhow::Result<PlayOptions> {
        let mut parameters = BTreeMap::new();
        for entry in &self.parameter {
            let (name, value) =
                entry.split_once('=').ok_or_else(|| anyhow::anyhow!("--parameter {entry:?}: expected NAME=VALUE"))?;
            parameters.insert(name.trim().to_owned(), value.to_owned());
        }
        let mut stubs = BTreeMap::new();
        for entry in &self.stub {
            let parsed = entry.split_once('=').and_then(|(name, value)| {
                let (logical, attribute) = name.split_once('.')?;
                Some(((logical.to_owned(), attribute.to_owned()), value.to_owned()))
            });
            let (key, value) =
                parsed.ok_or_else(|| anyhow::anyhow!("--stub {entry:?}: expected LOGICAL.ATTRIBUTE=VALUE"))?;
            stubs.insert(key, value);
        }
        let fail = self
            .fail
            .iter()
            .map(|entry| match entry.split_once('@') {
                Some((logical, step)) => (logical.to_owned(), step.to_owned()),
                None => (entry.clone(), "create".to_owned()),
            })
            .collect();
        Ok(PlayOptions {
            template: self.template.clone(),
            updates: self.update.clone(),
            parameters,
            stubs,
            fail,
            drill_after: self.drill_after,
            kill_primary_after: self.kill_primary_after,
            stack_name: self.stack_name.clone(),
            service_token_parameter: self.service_token_parameter.clone(),
            keep: self.keep,
            continue_update_rollback: self.continue_update_rollback,
            imports: self.imports()?,
        })
    }
}

/// Runs `cfn-once play`; true when every operation ended `*_COMPLETE` without a rollback.
pub async fn run(args: PlayArgs) -> anyhow::Result<bool> {
    if args.plan {
        return plan(&args);
    }
    let options = args.options()?;
    let file = EnvFile::read(&args.env)?;
    let place = place_of(&file);
    // Every template is read and checked before anything is sent.
    let targets = run::prepare(&options, &place)?;
    // Warnings go to stderr, with `--json` too: the report on stdout stays one document.
    for warning in run::warnings(&targets) {
        eprintln!("warning: {warning}");
    }
    let secrets = Secrets::of_parameters(&targets);
    let local = LocalCloud::connect(&file).await?;
    let cloud = Watching { inner: &local, secrets: secrets.clone() };
    let region_faults = LocalRegionFaults::connect(&file).await;
    let faults: Option<&dyn RegionFaults> =
        (options.drill_after.is_some() || options.kill_primary_after.is_some()).then_some(&region_faults);
    let stack = run::identity(&options, &place, (cfn_once::clock::random_seed(), cfn_once::clock::random_seed()));
    let printer = Printer { columns: Columns::for_stack(&stack.name, &targets), secrets };
    let json = args.json;
    if !json {
        println!(
            "cfn-once play: stack {} in {} on the environment of {}",
            stack.name,
            place.region,
            args.env.display()
        );
        println!("{}", printer.heading());
    }
    let notify = |notice: Notice| match notice {
        Notice::Event(event) if !json => println!("{}", printer.event(&event)),
        Notice::Event(_) => {}
        Notice::Progress(line) => eprintln!("{}", printer.progress(&line)),
        Notice::Secret(value) => printer.secrets.add_value(&value),
    };
    let report = run::play(&cloud, faults, &place, stack, targets, &options, &notify).await?;
    if json {
        println!("{}", printer.json(&report)?);
    } else {
        println!();
        print!("{}", printer.summary(&report));
    }
    Ok(report.passed)
}

/// Where a stack of the local environment `file` lives: its customer region, the account its
/// topic names, and its topics.
fn place_of(file: &EnvFile) -> Place {
    Place {
        region: file.customer_region.clone(),
        account_id: file.topic_arn.split(':').nth(4).unwrap_or("123456789012").to_owned(),
        topic_arn: file.topic_arn.clone(),
        topics: file.topic_arns(),
    }
}

/// `--plan`: the preview of every step, printed; nothing is sent and nothing is connected to.
fn plan(args: &PlayArgs) -> anyhow::Result<bool> {
    let options = args.options()?;
    let place = match EnvFile::read(&args.env) {
        Ok(file) => place_of(&file),
        Err(_) => {
            let topic = "arn:aws:sns:us-east-2:123456789012:the-local-service-token-topic".to_owned();
            eprintln!(
                "cfn-once play --plan: no environment at {}: the ServiceToken parameter stands for {topic}",
                args.env.display()
            );
            Place {
                region: "us-east-2".into(),
                account_id: "123456789012".into(),
                topic_arn: topic.clone(),
                topics: vec![topic],
            }
        }
    };
    let targets = run::prepare(&options, &place)?;
    for warning in run::warnings(&targets) {
        eprintln!("warning: {warning}");
    }
    let stack = run::identity(&options, &place, (0, 0));
    let pseudo = run::pseudo(&place, &stack);
    let steps = run::step_names(options.updates.len());
    let preview = crate::play::plan::preview(&targets, &steps, &pseudo, &options.stubs).map_err(anyhow::Error::msg)?;
    let shown = crate::play::plan::masked(&preview, &Secrets::of_parameters(&targets));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        print!("{}", crate::play::plan::text(&shown));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Play {
        #[command(flatten)]
        args: super::PlayArgs,
    }

    #[test]
    fn a_fault_after_zero_answers_is_refused_as_a_flag_value() {
        for flag in ["--kill-primary-after", "--drill-after"] {
            let error = Play::try_parse_from(["play", "t.yaml", flag, "0"]).expect_err(flag).to_string();
            assert!(error.contains(flag) && error.contains("0"), "{error}");
            let parsed = Play::try_parse_from(["play", "t.yaml", flag, "1"]).expect(flag).args.options().unwrap();
            assert_eq!(parsed.kill_primary_after.or(parsed.drill_after), Some(1));
        }
    }
}
