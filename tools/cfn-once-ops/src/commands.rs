//! `cfn-once deploy` and `cfn-once check` as the command line runs them: the facts from the
//! flags and the file, the configuration written, the plan printed and run, the check's report.

use std::path::Path;

use anyhow::{Context, bail};

use cfn_once_ops::check::gather::{CheckTarget, check};
use cfn_once_ops::deploy::facts_file::{self, Value};
use cfn_once_ops::deploy::plan::{self, Outcome, PlanOptions};
use cfn_once_ops::deploy::{Control, Facts, samconfig};
use cfn_once_ops::env_file::EnvFile;

use crate::cli::{CheckArgs, DeployArgs, FactsArgs};

impl FactsArgs {
    /// The facts: each flag, else the file's value, else the templates' default; `required`
    /// names what must be given (deploy needs an alarm, check does not).
    pub(crate) fn facts(&self) -> anyhow::Result<Facts> {
        let file = match &self.config {
            Some(path) => facts_file::read(path)?,
            None => Default::default(),
        };
        let text = |flag: &Option<String>, key: &str| -> anyhow::Result<Option<String>> {
            match (flag, file.get(key)) {
                (Some(value), _) => Ok(Some(value.clone())),
                (None, Some(Value::Text(value))) => Ok(Some(value.clone())),
                (None, None) => Ok(None),
                (None, Some(other)) => bail!("{key} in the deploy file is {other:?}, not a string"),
            }
        };
        let required = |flag: &Option<String>, key: &str| -> anyhow::Result<String> {
            text(flag, key)?
                .with_context(|| format!("--{} is required (or `{key} = ...` in --config)", key.replace('_', "-")))
        };
        let customer_regions = match (self.customer_regions.is_empty(), file.get("customer_regions")) {
            (false, _) => self.customer_regions.clone(),
            (true, Some(Value::List(regions))) => regions.clone(),
            (true, Some(Value::Text(regions))) => regions.split(',').map(|r| r.trim().to_owned()).collect(),
            (true, _) => Vec::new(),
        };
        let account = required(&self.account, "account")?;
        let primary = required(&self.primary, "primary")?;
        let secondary = required(&self.secondary, "secondary")?;
        let witness = required(&self.witness, "witness")?;
        let regions: Vec<&str> = customer_regions.iter().map(String::as_str).collect();
        let mut facts = Facts::new(&account, &primary, &secondary, &witness, &regions);
        facts.alarm_email = text(&self.alarm_email, "alarm_email")?;
        facts.alarm_topic_arn = text(&self.alarm_topic_arn, "alarm_topic_arn")?;
        facts.operator_role_arn = text(&self.operator_role_arn, "operator_role_arn")?;
        if let Some(installation) = text(&self.installation, "installation")? {
            facts.installation = installation;
        }
        if let Some(table) = text(&self.table, "table")? {
            facts.table = table;
        }
        if let Some(topic_name) = text(&self.topic_name, "topic_name")? {
            facts.topic_name = topic_name;
        }
        facts.secondary_delay_s = match (self.secondary_delay_s, file.get("secondary_delay_s")) {
            (Some(delay_s), _) => delay_s,
            (None, Some(Value::Number(delay_s))) => u32::try_from(*delay_s).unwrap_or(u32::MAX),
            (None, None) => facts.secondary_delay_s,
            (None, Some(other)) => bail!("secondary_delay_s in the deploy file is {other:?}, not a number"),
        };
        facts.examples = self.examples || file.get("examples") == Some(&Value::Bool(true));
        facts.control = match text(&self.control, "control")?.as_deref() {
            None | Some("table") => Control::Table,
            Some("arc") => Control::Arc {
                endpoints: required(&self.arc_endpoints, "arc_endpoints")?,
                primary_routing_control_arn: required(&self.primary_routing_control, "primary_routing_control")?,
                secondary_routing_control_arn: required(&self.secondary_routing_control, "secondary_routing_control")?,
            },
            Some(other) => bail!("--control is {other:?}: expected table or arc"),
        };
        Ok(facts)
    }
}

/// The command line that reproduces `facts`, for the configuration's header and the advice
/// after a failure.
fn command_line(facts: &Facts, out: &str) -> String {
    let mut line = format!(
        "cfn-once deploy --account {} --primary {} --secondary {} --witness {} --customer-regions {}",
        facts.account,
        facts.primary,
        facts.secondary,
        facts.witness,
        facts.customer_regions.join(",")
    );
    for (flag, value) in [
        ("--alarm-email", &facts.alarm_email),
        ("--alarm-topic-arn", &facts.alarm_topic_arn),
        ("--operator-role-arn", &facts.operator_role_arn),
    ] {
        if let Some(value) = value {
            line.push_str(&format!(" {flag} {value}"));
        }
    }
    if facts.installation != "cfn-once" {
        line.push_str(&format!(" --installation {}", facts.installation));
    }
    if facts.secondary_delay_s != 5 {
        line.push_str(&format!(" --secondary-delay-s {}", facts.secondary_delay_s));
    }
    if facts.examples {
        line.push_str(" --examples");
    }
    if out != "samconfig.deploy.toml" {
        line.push_str(&format!(" --out {out}"));
    }
    line
}

pub(crate) fn run_deploy(args: &DeployArgs) -> anyhow::Result<bool> {
    let facts = args.facts.facts()?;
    let refusals = facts.refusals();
    if !refusals.is_empty() {
        eprintln!("cfn-once deploy: nothing was written or run:");
        for refusal in &refusals {
            eprintln!("  - {refusal}");
        }
        return Ok(false);
    }
    let repo = &args.repo;
    if !repo.join("infra/regional.yaml").is_file() {
        bail!("{} holds no infra/regional.yaml: run from the cfn-once repository, or give --repo", repo.display());
    }
    let environments = samconfig::environments(&facts);
    let rerun = command_line(&facts, &args.out);
    let out = repo.join(&args.out);
    std::fs::write(&out, samconfig::render(&facts, &environments, &rerun))
        .with_context(|| format!("cannot write {}", out.display()))?;
    println!("wrote {} ({} environments)", args.out, environments.len());
    if facts.operator_role_arn.is_none() {
        println!(
            "note: no --operator-role-arn: the queue policies will let only the functions read or redrive, so `cfn-once inspect`, `stuck` and `redrive` will be denied"
        );
    }
    let steps = plan::steps(&environments, &PlanOptions { config_file: args.out.clone(), yes: args.yes });
    println!("\nplan:\n{}\n", plan::render(&steps));
    let venv = args.venv.clone().unwrap_or_else(|| repo.join(".venv"));
    if args.dry_run {
        println!("commands (from {}, with {} first on PATH):", repo.display(), venv.join("bin").display());
        for step in &steps {
            println!("{}", step.shell());
        }
        return Ok(true);
    }
    let path = plan::tools_path(&venv);
    for tool in ["sam", "cargo-lambda"] {
        if plan::find_on(&path, tool).is_none() {
            bail!(
                "no {tool} in {} or on the PATH: run `make build-tools` (it installs sam's cargo-lambda and zig into .venv), or give --venv",
                venv.join("bin").display()
            );
        }
    }
    let outcome = plan::run(&steps, Path::new(repo), &path, |index, step| {
        println!("==> {}/{}: {}", index + 1, steps.len(), step.shell());
    });
    match outcome {
        Outcome::Done => {
            println!(
                "\nevery stack deployed. Next: `{}` checks the wiring, and `cfn-once drill` a failover.",
                rerun.replacen("deploy", "check", 1)
            );
            Ok(true)
        }
        Outcome::Failed { index, status } => {
            eprintln!("\ncfn-once deploy stopped: {}", plan::after_failure(&steps, index, &status, &rerun));
            Ok(false)
        }
    }
}

pub(crate) async fn run_check(args: &CheckArgs) -> anyhow::Result<bool> {
    let target = match &args.env {
        Some(path) => CheckTarget::from_env_file(&EnvFile::read(path)?, &path.display().to_string()),
        None => CheckTarget::from_facts(&args.facts.facts()?, args.profile.clone(), args.endpoint_url.clone()),
    };
    if let Some(problem) = target.credentials_problem().await {
        anyhow::bail!("nothing was checked: {problem}");
    }
    let report = check(&target).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.render());
    }
    Ok(report.passed())
}
