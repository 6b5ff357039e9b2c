//! `cfn-once play`'s flags and what it prints.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;

use crate::engine::Notice;
use crate::exports::{self, Book};
use crate::faults::RegionFaults;
use crate::mask::{Secrets, Watching};
use crate::render::{Columns, Printer};
use crate::run::{self, Place, PlayOptions};
use crate::wire::{LocalCloud, LocalRegionFaults};
use cfn_once_local::environment::EnvFile;

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
    /// An export's value for `Fn::ImportValue`, NAME=VALUE; repeat. The exports of the stacks
    /// earlier plays left standing on this environment (--keep) are read too, from the exports
    /// book beside --env's file; an --import of a name the book holds with another value is
    /// refused. An import of a name written out in the template and found in neither is refused
    /// before anything is sent.
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
    /// The environment `cfn-once local` (`make local`) serves. Its exports book is beside it,
    /// named after it (.local/env.exports.json).
    #[arg(long, value_name = "PATH", default_value = ".local/env.json")]
    pub env: PathBuf,
    /// The stack's name (default: play-<template's file name>-<random>).
    #[arg(long, value_name = "NAME")]
    pub stack_name: Option<String>,
    /// The parameter that receives the local ServiceToken topic's ARN when the template
    /// declares it and --parameter does not set it.
    #[arg(long, value_name = "NAME", default_value = "ServiceToken")]
    pub service_token_parameter: String,
    /// Leave the stack standing: no delete at the end. The exports of its Outputs are recorded
    /// in the environment's exports book, for later plays' Fn::ImportValue; a later play that
    /// exports one of their names is refused, as CloudFormation refuses it.
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
    let mut options = args.options()?;
    let file = EnvFile::read(&args.env)?;
    let place = place_of(&file);
    let book = read_book(&args.env, &file, &mut options)?;
    // Every template is read and checked before anything is sent.
    let targets = run::prepare(&options, &place)?;
    // Warnings go to stderr, with `--json` too: the report on stdout stays one document.
    for warning in run::warnings(&targets) {
        eprintln!("warning: {warning}");
    }
    let secrets = Secrets::of_parameters(&targets);
    book.add_secrets(&secrets);
    let local = LocalCloud::connect(&file).await?;
    let cloud = Watching { inner: &local, secrets: secrets.clone() };
    let region_faults = LocalRegionFaults::connect(&file).await;
    let faults: Option<&dyn RegionFaults> =
        (options.drill_after.is_some() || options.kill_primary_after.is_some()).then_some(&region_faults);
    let stack =
        run::identity(&options, &place, (cfn_once::system_clock::random_seed(), cfn_once::system_clock::random_seed()));
    let declared = exports::declared(&targets, &place, &stack)?;
    book.check(&declared, &stack)?;
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
    record_exports(&args.env, &file, &report, &declared, options.keep, &printer.secrets)?;
    if json {
        println!("{}", printer.json(&report)?);
    } else {
        println!();
        print!("{}", printer.summary(&report));
    }
    Ok(report.passed)
}

/// The exports book of the environment `file` (at `env`), said on stderr, its exports added to
/// `options`' imports.
fn read_book(env: &Path, file: &EnvFile, options: &mut PlayOptions) -> anyhow::Result<Book> {
    let path = exports::book_path(env);
    let (book, other) = Book::read(&path, &file.topic_arn)?;
    if let Some(other) = other {
        eprintln!(
            "exports: {} is of another environment (topic {other}), stopped since with its stacks: not read; a kept \
             stack's exports replace it",
            path.display()
        );
    }
    options.imports = book.imports(&options.imports, &path)?;
    if !book.exports.is_empty() {
        let names: Vec<String> =
            book.exports.iter().map(|(name, export)| format!("{name} (stack {})", export.stack_name)).collect();
        eprintln!("exports: read from {}, of stacks earlier plays kept: {}", path.display(), names.join(", "));
    }
    Ok(book)
}

/// Records in the book the exports of the stack `report` leaves standing (`keep`), and says so
/// on stderr; the book is read again first, so that a play beside this one keeps what it recorded.
fn record_exports(
    env: &Path,
    file: &EnvFile,
    report: &run::PlayReport,
    declared: &[exports::Declared],
    keep: bool,
    secrets: &Secrets,
) -> anyhow::Result<()> {
    let path = exports::book_path(env);
    if !keep {
        let names: std::collections::BTreeSet<&str> = declared.iter().map(|d| d.name.as_str()).collect();
        if !names.is_empty() {
            let names = names.into_iter().collect::<Vec<_>>().join(", ");
            eprintln!(
                "exports: {} not recorded: the stack was deleted (--keep leaves it standing and records its exports)",
                secrets.text(&names)
            );
        }
        return Ok(());
    }
    let (mut book, _) = Book::read(&path, &file.topic_arn)?;
    let (recorded, skipped) = book.record(report, secrets);
    if !recorded.is_empty() {
        book.write(&path)?;
        let shown: Vec<String> = recorded.iter().map(|name| format!("{name} = {}", book.exports[name].value)).collect();
        eprintln!(
            "exports: recorded in {} for later plays, of stack {}: {}",
            path.display(),
            report.stack_name,
            secrets.text(&shown.join(", "))
        );
    }
    if !skipped.is_empty() {
        eprintln!("exports: not recorded: {}", secrets.text(&skipped.join("; ")));
    }
    Ok(())
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
    let mut options = args.options()?;
    let mut book = None;
    let place = match EnvFile::read(&args.env) {
        Ok(file) => {
            book = Some(read_book(&args.env, &file, &mut options)?);
            place_of(&file)
        }
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
    let declared = exports::declared(&targets, &place, &stack)?;
    if let Some(book) = &book {
        book.check(&declared, &stack)?;
    }
    let pseudo = run::pseudo(&place, &stack);
    let steps = run::step_names(options.updates.len());
    let preview = crate::plan::preview(&targets, &steps, &pseudo, &options.stubs).map_err(anyhow::Error::msg)?;
    let secrets = Secrets::of_parameters(&targets);
    if let Some(book) = &book {
        book.add_secrets(&secrets);
    }
    let shown = crate::plan::masked(&preview, &secrets);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        print!("{}", crate::plan::text(&shown));
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
