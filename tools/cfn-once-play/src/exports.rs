//! The exports book of a local environment: the Outputs with an `Export` name of every stack a
//! play left standing (`--keep`), so that a later play's `Fn::ImportValue` reads them, as a
//! later stack reads an earlier one's exports on CloudFormation.
//!
//! The rules are the User Guide's, for cross-stack references
//! (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/intrinsic-function-reference-importvalue.html>):
//! "Export names must be unique within a Region", so a stack that exports a name another stack
//! exports is refused (CloudFormation's words, as users report them in serverless#9498:
//! "Export with name X is already exported by stack Y"); and "the value of the Name property of
//! an Export can't use Ref or GetAtt functions that depend on a resource", so every export name
//! is known from parameters and pseudo parameters alone, and both checks run before anything is
//! sent.
//!
//! The book is a JSON file beside the environment file (`.local/env.json` has
//! `.local/env.exports.json`) and belongs to one environment: the ServiceToken topic's ARN names
//! it, and `cfn-once local` names every environment it starts afresh
//! (`cfn-once-local-<random>`). A kept stack lives only in its environment's moto, so a book of
//! another environment (one stopped since) is ignored and replaced, never read. The book holds
//! each value in clear, NoEcho ones too (it is read back as the value); a value that held a
//! NoEcho text of the recording play is marked `no_echo`, and masked in what a later play
//! prints.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cloud::StackIdentity;
use crate::engine::Target;
use crate::intrinsics::{Resources, Scope, evaluate};
use crate::mask::{MASK, Secrets};
use crate::run::{Place, PlayReport, pseudo};

/// One export, as CloudFormation's ListExports gives it: its value and the stack exporting it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Export {
    pub value: String,
    pub stack_name: String,
    pub stack_id: String,
    /// The value held a NoEcho text of the play that recorded it: masked wherever play prints it.
    #[serde(default)]
    pub no_echo: bool,
}

/// The exports of one local environment, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Book {
    /// The environment the stacks live in: its ServiceToken topic's ARN.
    pub environment: String,
    pub exports: BTreeMap<String, Export>,
}

/// An export name a template declares, as it evaluates for the stack about to be played.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub path: PathBuf,
    pub line: usize,
    pub output: String,
    pub name: String,
}

/// Where the book of the environment file `env` is: beside it, `<stem>.exports.json`.
pub fn book_path(env: &Path) -> PathBuf {
    let stem = env.file_stem().and_then(|s| s.to_str()).unwrap_or("env");
    env.with_file_name(format!("{stem}.exports.json"))
}

impl Book {
    /// The book of `environment` at `path`: empty when there is none, and when the one there is
    /// of another environment, whose ServiceToken topic the second value then names.
    pub fn read(path: &Path, environment: &str) -> anyhow::Result<(Self, Option<String>)> {
        let empty = Self { environment: environment.to_owned(), exports: BTreeMap::new() };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok((empty, None)),
            Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
        };
        let book: Self = serde_json::from_str(&text).with_context(|| {
            format!("{} is not a cfn-once exports book: move it away, and play the stacks again", path.display())
        })?;
        if book.environment == environment { Ok((book, None)) } else { Ok((empty, Some(book.environment))) }
    }

    /// Writes the book whole (a new file renamed over the old, so a reader never sees half).
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let scratch = path.with_extension(format!("json.{}", std::process::id()));
        std::fs::write(&scratch, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("cannot write {}", scratch.display()))?;
        std::fs::rename(&scratch, path).with_context(|| format!("cannot write {}", path.display()))
    }

    /// `--import`'s exports with the book's: CloudFormation has one value per export name in a
    /// region, so an `--import` of a name the book holds with another value is refused.
    pub fn imports(&self, given: &BTreeMap<String, String>, path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
        let mut imports = given.clone();
        for (name, export) in &self.exports {
            if let Some(value) = given.get(name)
                && *value != export.value
            {
                anyhow::bail!(
                    "--import {name}: stack {} of this environment exports {name} with another value ({}); an export \
                     name has one value in a region: drop --import {name}, or play against a fresh environment",
                    export.stack_name,
                    path.display()
                );
            }
            imports.insert(name.clone(), export.value.clone());
        }
        Ok(imports)
    }

    /// Refuses a declared export name another stack of the environment exports, as
    /// CloudFormation refuses the stack.
    pub fn check(&self, declared: &[Declared], stack: &StackIdentity) -> anyhow::Result<()> {
        for export in declared {
            if let Some(other) = self.exports.get(&export.name).filter(|other| other.stack_id != stack.id) {
                anyhow::bail!(
                    "{}:{}: Outputs {}: Export with name {} is already exported by stack {} (CloudFormation's words; \
                     an export name is unique in a region): rename the export, or play against a fresh environment; \
                     nothing was sent",
                    export.path.display(),
                    export.line,
                    export.output,
                    export.name,
                    other.stack_name
                );
            }
        }
        Ok(())
    }

    /// Records the exports of the stack `report` leaves standing: the Outputs with an export
    /// name of its last operation (none after a delete, or in a state without Outputs). Returns
    /// the names recorded, and those not recorded with why: a name another stack took meanwhile
    /// (a play beside this one), or a value the report carries masked (a NoEcho answer's Data,
    /// a presigned URL), which the book cannot hold.
    pub fn record(&mut self, report: &PlayReport, secrets: &Secrets) -> (Vec<String>, Vec<String>) {
        let (mut recorded, mut skipped) = (Vec::new(), Vec::new());
        let Some(last) = report.steps.last() else { return (recorded, skipped) };
        for output in &last.outputs {
            let Some(name) = &output.export_name else { continue };
            if let Some(other) = self.exports.get(name).filter(|other| other.stack_id != report.stack_id) {
                skipped.push(format!("{name} (already exported by stack {})", other.stack_name));
                continue;
            }
            let value = &output.value;
            if value.contains(MASK) || value.contains(", not shown)") || value.starts_with("(cannot be evaluated") {
                skipped.push(format!("{name} (its value reaches the report masked or unevaluated: {value})"));
                continue;
            }
            let export = Export {
                value: value.clone(),
                stack_name: report.stack_name.clone(),
                stack_id: report.stack_id.clone(),
                no_echo: secrets.text(value) != *value,
            };
            self.exports.insert(name.clone(), export);
            recorded.push(name.clone());
        }
        (recorded, skipped)
    }

    /// Adds the values recorded as NoEcho to what play masks.
    pub fn add_secrets(&self, secrets: &Secrets) {
        for export in self.exports.values().filter(|export| export.no_echo) {
            secrets.add_value(&Value::String(export.value.clone()));
        }
    }
}

/// Every export name the templates of `targets` declare for `stack` (Outputs whose condition
/// holds), evaluated before anything is sent. A name that reads a resource is refused, as the
/// Guide forbids it; so is a name two Outputs of one template export.
pub fn declared(targets: &[Target], place: &Place, stack: &StackIdentity) -> anyhow::Result<Vec<Declared>> {
    let pseudo = pseudo(place, stack);
    let mut declared = Vec::new();
    for target in targets {
        let template = &target.template;
        let no_conditions = BTreeMap::new();
        let scope = Scope {
            parameters: &target.parameters,
            pseudo: &pseudo,
            conditions: &no_conditions,
            resources: &NoResources,
        };
        let conditions = template.resolve_conditions(&scope).map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        let scope = Scope { conditions: &conditions, ..scope };
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for output in &template.outputs {
            let Some(node) = &output.export_name else { continue };
            if output.condition.as_ref().is_some_and(|c| !conditions.get(c).copied().unwrap_or(false)) {
                continue;
            }
            let at = format!("{}:{}: Outputs {}", template.path.display(), node.line, output.name);
            let name = match evaluate(node, &scope) {
                Ok(Some(Value::String(name))) => name,
                Ok(Some(other)) => other.to_string(),
                Ok(None) => continue,
                Err(error) => anyhow::bail!("{at}: Export Name: {error}"),
            };
            if let Some(first) = names.insert(name.clone(), output.name.clone()) {
                anyhow::bail!(
                    "{at}: Export Name {name} is exported by Output {first} too: an export name is unique in a region"
                );
            }
            declared.push(Declared { path: template.path.clone(), line: node.line, output: output.name.clone(), name });
        }
    }
    Ok(declared)
}

/// What an export name may not read: any resource.
struct NoResources;

const READS_A_RESOURCE: &str = "the Name of an Export can't use Ref or GetAtt functions that depend on a resource \
                                (Fn::ImportValue in the User Guide)";

impl Resources for NoResources {
    fn reference(&self, logical_id: &str) -> Result<Value, String> {
        Err(format!("Ref {logical_id}: {READS_A_RESOURCE}"))
    }

    fn attribute(&self, logical_id: &str, attribute: &str) -> Result<Value, String> {
        Err(format!("Fn::GetAtt {logical_id}.{attribute}: {READS_A_RESOURCE}"))
    }
}

#[cfg(test)]
#[path = "exports_tests.rs"]
mod tests;
