//! A stack's whole life as `cfn-once play` plays it: every template read and checked before
//! anything is sent, then create, each update in turn, and delete; the report of it all.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::play::cloud::{Cloud, StackIdentity};
use crate::play::engine::{Engine, Notice, StepReport, Target};
use crate::play::faults::{Faults, Injected, RegionFaults};
use crate::play::intrinsics::{Pseudo, Scope, evaluate};
use crate::play::state::{Kind, RequestRecord, StackEvent, View};
use crate::play::template::Template;

/// What to play.
#[derive(Debug, Clone, Default)]
pub struct PlayOptions {
    pub template: PathBuf,
    /// Templates to update the stack to, in order, after its create.
    pub updates: Vec<PathBuf>,
    /// `--parameter K=V`: every template takes those it declares.
    pub parameters: BTreeMap<String, String>,
    /// `--stub Logical.Attr=value`: what `Fn::GetAtt` of a resource play does not provision gives.
    pub stubs: BTreeMap<(String, String), String>,
    /// `--fail Logical@step`.
    pub fail: Vec<(String, String)>,
    pub drill_after: Option<usize>,
    pub kill_primary_after: Option<usize>,
    pub stack_name: Option<String>,
    /// The parameter that receives the local topic's ARN when not given.
    pub service_token_parameter: String,
    /// Leave the stack standing: no delete at the end.
    pub keep: bool,
    /// After an update ends UPDATE_ROLLBACK_FAILED, continue the rollback (ContinueUpdateRollback)
    /// before the next step; without it, later updates are refused as CloudFormation refuses them.
    pub continue_update_rollback: bool,
    /// `--import NAME=VALUE`: the exports `Fn::ImportValue` reads.
    pub imports: BTreeMap<String, String>,
}

/// Where the stack lives: the region and account its StackId names, and the topics custom
/// resources may name as their ServiceToken.
#[derive(Debug, Clone)]
pub struct Place {
    pub region: String,
    pub account_id: String,
    pub topic_arn: String,
    pub topics: Vec<String>,
}

/// Everything that happened.
#[derive(Debug, Clone, Serialize)]
pub struct PlayReport {
    pub stack_name: String,
    pub stack_id: String,
    pub steps: Vec<StepReport>,
    pub events: Vec<StackEvent>,
    /// Each resource's requests, in the order it got them.
    pub resources: BTreeMap<String, Vec<RequestRecord>>,
    pub faults: Vec<Injected>,
    /// Every operation ended `*_COMPLETE` without a rollback.
    pub passed: bool,
}

/// The names of the steps: `create`, `update` (the first update), `update2`, ..., `delete`.
pub fn step_names(updates: usize) -> Vec<String> {
    let mut names = vec!["create".to_owned()];
    names.extend((1..=updates).map(|n| if n == 1 { "update".to_owned() } else { format!("update{n}") }));
    names.push("delete".into());
    names
}

/// Reads and checks every template, binds its parameters and checks every ServiceToken that
/// can be known before anything is sent. Any problem is an error naming the file and line.
pub fn prepare(options: &PlayOptions, place: &Place) -> anyhow::Result<Vec<Target>> {
    let paths: Vec<&PathBuf> = std::iter::once(&options.template).chain(&options.updates).collect();
    let mut templates = Vec::new();
    for path in &paths {
        let template = Template::load(path).map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        template.check(&options.stubs).map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        templates.push(template);
    }
    for name in options.parameters.keys() {
        if !templates.iter().any(|t| t.parameters.iter().any(|p| &p.name == name)) {
            anyhow::bail!("--parameter {name}: no template declares a parameter {name}");
        }
    }
    let names = step_names(options.updates.len());
    for (logical_id, step) in &options.fail {
        if !names.contains(step) {
            anyhow::bail!("--fail {logical_id}@{step}: the steps of this play are {}", names.join(", "));
        }
        if !templates.iter().any(|t| t.resource(logical_id).is_some()) {
            anyhow::bail!("--fail {logical_id}@{step}: no template declares a resource {logical_id}");
        }
    }
    let mut targets = Vec::new();
    for template in templates {
        let mut template = template;
        template.bind_imports(&options.imports).map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        let mut given: BTreeMap<String, String> = options
            .parameters
            .iter()
            .filter(|(name, _)| template.parameters.iter().any(|p| &p.name == *name))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let token = &options.service_token_parameter;
        if template.parameters.iter().any(|p| &p.name == token) && !given.contains_key(token) {
            given.insert(token.clone(), place.topic_arn.clone());
        }
        let parameters = template
            .bind_parameters(&given)
            .map_err(|error| anyhow::anyhow!("{}: parameters: {error}", template.path.display()))?;
        check_service_tokens(&template, &parameters, place, options)?;
        targets.push(Target { template, parameters });
    }
    Ok(targets)
}

/// What the templates of `targets` are warned of (`Template::warnings`), each once.
pub fn warnings(targets: &[Target]) -> Vec<String> {
    let mut warnings: Vec<String> = Vec::new();
    for warning in targets.iter().flat_map(|target| target.template.warnings()) {
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    warnings
}

/// Every custom resource whose ServiceToken depends on parameters only must name a topic of
/// the local environment; one that reads another resource is checked when it is sent. A nested
/// stack (`AWS::CloudFormation::Stack`) is refused, naming its TemplateURL: play does not play
/// nested stacks yet, and would read a nested template only from a local file.
fn check_service_tokens(
    template: &Template,
    parameters: &BTreeMap<String, Value>,
    place: &Place,
    options: &PlayOptions,
) -> anyhow::Result<()> {
    let stack = StackIdentity { name: "check".into(), id: "check".into() };
    let live = BTreeMap::new();
    let view = View { live: &live, declared: &template.resources, stack: &stack, stubs: &options.stubs, masked: false };
    let pseudo = pseudo(place, &stack);
    let conditions = {
        let scope = Scope { parameters, pseudo: &pseudo, conditions: &BTreeMap::new(), resources: &view };
        template.resolve_conditions(&scope).map_err(|refusal| anyhow::anyhow!("{refusal}"))?
    };
    let scope = Scope { parameters, pseudo: &pseudo, conditions: &conditions, resources: &view };
    for resource in template.resources.iter().filter(|r| Kind::of(&r.resource_type) == Kind::Custom) {
        let crate::play::yaml::NodeValue::Map(entries) = &resource.properties.value else { continue };
        let Some((_, node)) = entries.iter().find(|(key, _)| key.name == "ServiceToken") else {
            anyhow::bail!(
                "{}:{}: {}: a custom resource needs a ServiceToken",
                template.path.display(),
                resource.line,
                resource.logical_id
            );
        };
        if let Ok(Some(Value::String(token))) = evaluate(node, &scope)
            && !place.topics.contains(&token)
        {
            anyhow::bail!(
                "{}:{}: {}: ServiceToken {token:?} is not the local environment's topic ({}): give the template's \
                 ServiceToken parameter that topic, or leave it unset for play to fill it in",
                template.path.display(),
                node.line,
                resource.logical_id,
                place.topic_arn
            );
        }
    }
    for resource in template.resources.iter().filter(|r| r.resource_type == NESTED_STACK) {
        let crate::play::yaml::NodeValue::Map(entries) = &resource.properties.value else { continue };
        let url = entries
            .iter()
            .find(|(key, _)| key.name == "TemplateURL")
            .and_then(|(_, node)| evaluate(node, &scope).ok().flatten())
            .map(|value| value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string()))
            .unwrap_or_else(|| "(none that resolves before anything is sent)".into());
        let remote = ["https://", "http://", "s3://"].iter().any(|scheme| url.to_ascii_lowercase().starts_with(scheme));
        let why = if remote {
            "play reads no template from a URL: a nested stack's template would be a local file, relative to the \
             parent template, and nested stacks are not played yet"
        } else {
            "nested stacks are not played yet: the custom resources of the nested template would get no request"
        };
        anyhow::bail!(
            "{}:{}: {}: {NESTED_STACK} with TemplateURL {url:?}: {why}; nothing was sent",
            template.path.display(),
            resource.line,
            resource.logical_id
        );
    }
    Ok(())
}

/// A nested stack's type.
const NESTED_STACK: &str = "AWS::CloudFormation::Stack";

/// The pseudo parameters of a stack in `place`.
pub fn pseudo(place: &Place, stack: &StackIdentity) -> Pseudo {
    Pseudo {
        region: place.region.clone(),
        account_id: place.account_id.clone(),
        stack_name: stack.name.clone(),
        stack_id: stack.id.clone(),
        partition: "aws".into(),
        url_suffix: "amazonaws.com".into(),
    }
}

/// A stack's identity: `name` (or one made from the template's file name) and a StackId.
pub fn identity(options: &PlayOptions, place: &Place, seed: (u64, u64)) -> StackIdentity {
    let name = options.stack_name.clone().unwrap_or_else(|| {
        let stem = options.template.file_stem().and_then(|s| s.to_str()).unwrap_or("stack");
        let clean: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).take(60).collect();
        format!("play-{}-{:06x}", clean.trim_matches('-'), seed.0 & 0xff_ffff)
    });
    let id = format!(
        "arn:aws:cloudformation:{}:{}:stack/{name}/{}",
        place.region,
        place.account_id,
        crate::play::wire::uuid_like(seed.0, seed.1)
    );
    StackIdentity { name, id }
}

/// Plays `targets` (from [`prepare`]): create, each update, then delete unless `keep`.
pub async fn play(
    cloud: &dyn Cloud,
    region_faults: Option<&dyn RegionFaults>,
    place: &Place,
    stack: StackIdentity,
    targets: Vec<Target>,
    options: &PlayOptions,
    notify: &(dyn Fn(Notice) + Send + Sync),
) -> anyhow::Result<PlayReport> {
    let faults = Faults {
        fail: options.fail.iter().cloned().collect::<BTreeSet<_>>(),
        drill_after: options.drill_after,
        kill_after: options.kill_primary_after,
        region: region_faults,
        ..Faults::default()
    };
    let pseudo = pseudo(place, &stack);
    let mut engine = Engine::new(cloud, stack, pseudo, options.stubs.clone(), faults, notify);
    let names = step_names(options.updates.len());
    let mut steps = Vec::new();
    let mut targets = targets.into_iter();
    let first = targets.next().ok_or_else(|| anyhow::anyhow!("no template to play"))?;
    steps.push(engine.create(first).await?);
    for (target, name) in targets.zip(&names[1..]) {
        if !engine.exists() {
            notify(Notice::Progress(format!("{name}: skipped, the stack does not exist (its create rolled back)")));
            break;
        }
        if options.continue_update_rollback && engine.status == "UPDATE_ROLLBACK_FAILED" {
            steps.push(engine.continue_update_rollback(&format!("continue-before-{name}")).await?);
        }
        steps.push(engine.update(name, target).await?);
    }
    if options.continue_update_rollback && engine.status == "UPDATE_ROLLBACK_FAILED" {
        steps.push(engine.continue_update_rollback("continue-update-rollback").await?);
    }
    if !options.keep && engine.exists() {
        steps.push(engine.delete().await?);
    }
    engine.faults.restore(notify).await;
    let passed = steps.iter().all(|s| s.completed);
    Ok(PlayReport {
        stack_name: engine.stack.name.clone(),
        stack_id: engine.stack.id.clone(),
        steps,
        events: engine.events.clone(),
        resources: engine.history.clone(),
        faults: engine.faults.injected.clone(),
        passed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> Place {
        let topic = "arn:aws:sns:us-east-2:123456789012:local-topic".to_owned();
        Place {
            region: "us-east-2".into(),
            account_id: "123456789012".into(),
            topics: vec![topic.clone()],
            topic_arn: topic,
        }
    }

    #[test]
    fn a_nested_stack_is_refused_by_its_template_url_before_anything_is_sent() {
        let dir = std::env::temp_dir().join(format!("play-nested-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (url, says) in [
            ("https://s3.amazonaws.com/bucket/child.yaml", "play reads no template from a URL"),
            ("s3://bucket/child.yaml", "play reads no template from a URL"),
            ("child.yaml", "nested stacks are not played yet"),
        ] {
            let path = dir.join("parent.yaml");
            let text = format!(
                "Resources:\n  Child:\n    Type: AWS::CloudFormation::Stack\n    Properties:\n      TemplateURL: {url}\n"
            );
            std::fs::write(&path, text).unwrap();
            let options = PlayOptions {
                template: path,
                service_token_parameter: "ServiceToken".into(),
                ..PlayOptions::default()
            };
            let error = prepare(&options, &place()).expect_err(url).to_string();
            assert!(
                error.contains(&format!("parent.yaml:2: Child: AWS::CloudFormation::Stack with TemplateURL \"{url}\"")),
                "{error}"
            );
            assert!(error.contains(says), "{error}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn imports_are_bound_by_prepare_for_every_caller() {
        let dir = std::env::temp_dir().join(format!("play-imports-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stack.yaml");
        let text = "Parameters:\n  ServiceToken: {Type: String}\nResources:\n  Thing:\n    Type: Custom::Echo\n    Properties:\n      ServiceToken: !Ref ServiceToken\n      Vpc: !ImportValue shared-vpc\n";
        std::fs::write(&path, text).unwrap();
        let options = |imports: &[(&str, &str)]| PlayOptions {
            template: path.clone(),
            service_token_parameter: "ServiceToken".into(),
            imports: imports.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            ..PlayOptions::default()
        };
        let refused = prepare(&options(&[]), &place()).expect_err("no export given").to_string();
        assert!(refused.contains("shared-vpc"), "{refused}");
        prepare(&options(&[("shared-vpc", "vpc-123")]), &place()).expect("bound by prepare itself");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
