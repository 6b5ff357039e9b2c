//! The order `cfn-once deploy` runs the stacks in, why, and running it: `sam build` once per
//! template with a function (as `make sam-build` does), then one `sam deploy` per environment,
//! each run to its end before the next starts, and the first failure stops the rest with what to
//! do. `sam deploy` waits for its stack: it polls the stack's state (`describe_stack`) until the
//! operation is over, and exits non-zero when it failed
//! (<https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-cli-command-reference-sam-deploy.html>,
//! `SAM_CLI_POLL_DELAY`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use super::samconfig::Environment;

/// One step: a command and why it runs where it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `cargo`, `sam`.
    pub program: String,
    pub args: Vec<String>,
    /// Extra environment variables (beside PATH, which names the venv first).
    pub env: Vec<(String, String)>,
    /// The stack it deploys and its region, for the plan.
    pub stack: Option<(String, String)>,
    pub why: String,
}

impl Step {
    /// The command as a shell would run it from the repository root.
    pub fn shell(&self) -> String {
        let env: String = self.env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        format!("{env}{} {}", self.program, self.args.join(" "))
    }
}

/// What the plan needs to know besides the environments.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// The SAM configuration file, as given on the command line (relative to the repository).
    pub config_file: String,
    /// Pass `--no-confirm-changeset`: deploy each change set without asking.
    pub yes: bool,
}

/// Why each kind of stack runs where it does.
fn why(environment: &Environment) -> String {
    match environment.name.as_str() {
        "lease-table" => "first: the MRSC table (replica in the secondary region, witness) that both handlers use from their first request; the regional stacks grant their functions this table".into(),
        "primary" => "before any topic: its queue must exist and admit every ServiceToken topic before a topic delivers, or SNS's deliveries land in the delivery DLQs".into(),
        "secondary" => "after the primary, so that no request is ever answered by the secondary alone; needs the table's replica in its region".into(),
        "example" | "long-work" => "last: uses the ServiceToken topic, which needs both handlers and the customer stack".into(),
        "arc" => "(not run: with --control arc, deploy it first and give its outputs)".into(),
        _ => "after both regional stacks: subscribes their queues (which now exist and admit this topic) to the ServiceToken topic of this region".into(),
    }
}

/// The steps, in order: fetch the crates, build each template with a function once, deploy.
pub fn steps(environments: &[Environment], options: &PlanOptions) -> Vec<Step> {
    let mut steps = vec![Step {
        program: "cargo".into(),
        args: vec!["fetch".into(), "--locked".into()],
        env: Vec::new(),
        stack: None,
        why: "the crates the function needs, so that the builds run offline as `make sam-build` does".into(),
    }];
    let sam_env = || vec![("SAM_CLI_TELEMETRY".to_owned(), "0".to_owned())];
    for environment in environments.iter().filter(|e| e.build_dir.is_some() && e.name != "secondary") {
        let mut env = sam_env();
        env.push(("CARGO_NET_OFFLINE".into(), "true".into()));
        steps.push(Step {
            program: "sam".into(),
            args: config_args("build", options, &environment.name),
            env,
            stack: None,
            why: format!(
                "cargo-lambda builds {} once (arm64) into {}",
                environment.template,
                environment.build_dir.as_deref().unwrap_or_default()
            ),
        });
    }
    for environment in environments.iter().filter(|e| e.name != "arc") {
        let mut args = config_args("deploy", options, &environment.name);
        if options.yes {
            args.push("--no-confirm-changeset".into());
        }
        steps.push(Step {
            program: "sam".into(),
            args,
            env: sam_env(),
            stack: Some((environment.stack_name.clone(), environment.region.clone())),
            why: why(environment),
        });
    }
    steps
}

fn config_args(command: &str, options: &PlanOptions, environment: &str) -> Vec<String> {
    vec![command.into(), "--config-file".into(), options.config_file.clone(), "--config-env".into(), environment.into()]
}

/// The plan in words: each stack, its region, its order and why.
pub fn render(steps: &[Step]) -> String {
    let mut lines = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let what = match &step.stack {
            Some((stack, region)) => format!("deploy {stack} in {region}"),
            None => format!("{} {}", step.program, step.args.first().map(String::as_str).unwrap_or_default()),
        };
        lines.push(format!("{:>2}. {what}: {}", index + 1, step.why));
    }
    lines.join("\n")
}

/// The PATH the steps run with: the venv's tools (sam, cargo-lambda, zig) first, as the
/// Makefile's TOOLS_PATH puts them.
pub fn tools_path(venv: &Path) -> OsString {
    let mut paths = vec![venv.join("bin")];
    if let Some(path) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(paths).unwrap_or_default()
}

/// Where a program is found on `path`, as the shell would find it.
pub fn find_on(path: &OsString, program: &str) -> Option<PathBuf> {
    std::env::split_paths(path).map(|dir| dir.join(program)).find(|candidate| candidate.is_file())
}

/// How running stopped.
#[derive(Debug)]
pub enum Outcome {
    /// Every step succeeded.
    Done,
    /// Step `index` (0-based) failed; nothing after it ran.
    Failed { index: usize, status: String },
}

/// Runs `steps` in `repo` with `path`, each to its end; stops at the first that fails. Each step
/// inherits the terminal, so `sam deploy`'s change set and its confirmation reach the operator.
pub fn run(steps: &[Step], repo: &Path, path: &OsString, mut announce: impl FnMut(usize, &Step)) -> Outcome {
    for (index, step) in steps.iter().enumerate() {
        announce(index, step);
        // The program as found on the tools' PATH (a bare name would be looked up on this
        // process's PATH, not the child's).
        let program = find_on(path, &step.program).unwrap_or_else(|| PathBuf::from(&step.program));
        let status: std::io::Result<ExitStatus> = Command::new(&program)
            .args(&step.args)
            .envs(step.env.iter().map(|(k, v)| (k, v)))
            .env("PATH", path)
            .current_dir(repo)
            .status();
        match status {
            Ok(status) if status.success() => {}
            Ok(status) => return Outcome::Failed { index, status: status.to_string() },
            Err(error) => {
                return Outcome::Failed { index, status: format!("could not start {}: {error}", step.program) };
            }
        }
    }
    Outcome::Done
}

/// What to do after step `index` failed: fix the cause, then run the same command again (the
/// stacks already deployed are left as they are; a rerun finds them unchanged and goes on).
pub fn after_failure(steps: &[Step], index: usize, status: &str, rerun: &str) -> String {
    let step = &steps[index];
    let stack = match &step.stack {
        Some((stack, region)) => format!(
            "{stack} in {region} did not deploy ({status}). Read the stack's events above (or `aws cloudformation describe-stack-events --stack-name {stack} --region {region}`): a rule's refusal names the parameter, a resource's failure its reason."
        ),
        None => format!("`{}` failed ({status}).", step.shell()),
    };
    let skipped: Vec<String> = steps[index + 1..]
        .iter()
        .filter_map(|s| s.stack.as_ref().map(|(stack, region)| format!("{stack} ({region})")))
        .collect();
    let skipped = if skipped.is_empty() { String::new() } else { format!(" Not run: {}.", skipped.join(", ")) };
    format!(
        "{stack}{skipped} Fix the cause, then run `{rerun}` again: stacks already deployed are found unchanged and skipped over."
    )
}
