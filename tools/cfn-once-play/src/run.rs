//! A stack's whole life as `cfn-once play` plays it: every template read and checked before
//! anything is sent, then create, each update in turn, and delete; the report of it all.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::cloud::{Cloud, StackIdentity};
use crate::engine::{Engine, NestedTemplate, Notice, StepReport, Target};
use crate::faults::{Faults, Injected, RegionFaults};
use crate::intrinsics::{Pseudo, Scope, evaluate};
use crate::state::{Kind, RequestRecord, StackEvent, View};
use crate::template::{NESTED_STACK, Template};

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
    let mut nested = Vec::new();
    for path in &paths {
        let template = Template::load(path).map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        template.check(&options.stubs).map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        nested.push(load_nested(&template, place, options, &mut vec![template.path.clone()])?);
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
        let declared = |t: &Template| t.resource(logical_id).is_some();
        if !templates.iter().any(declared) && !nested.iter().any(|n| any_nested(n, &declared)) {
            anyhow::bail!(
                "--fail {logical_id}@{step}: no template (nor nested template) declares a resource {logical_id}"
            );
        }
    }
    let mut targets = Vec::new();
    for (template, nested) in templates.into_iter().zip(nested) {
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
        targets.push(Target { template, parameters, nested });
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
/// the local environment; one that reads another resource is checked when it is sent.
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
        let crate::yaml::NodeValue::Map(entries) = &resource.properties.value else { continue };
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
    Ok(())
}

/// Whether `nested` or a template nested in it satisfies `test`.
fn any_nested(nested: &BTreeMap<String, NestedTemplate>, test: &dyn Fn(&Template) -> bool) -> bool {
    nested.values().any(|n| test(&n.template) || any_nested(&n.nested, test))
}

/// Reads the template of every nested stack `template` declares, from where its TemplateURL
/// points ([`crate::nested_source::locate`]), checks it, and reads its own nested stacks
/// in turn. A TemplateURL that does not resolve before anything is sent (it reads a resource),
/// that play cannot read, a template that nests itself, or a `Fn::GetAtt Nested.Outputs.NAME`
/// whose template declares no Output NAME is refused, naming it. `chain` holds the templates
/// being read, outermost first.
fn load_nested(
    template: &Template,
    place: &Place,
    options: &PlayOptions,
    chain: &mut Vec<PathBuf>,
) -> anyhow::Result<BTreeMap<String, NestedTemplate>> {
    let mut nested = BTreeMap::new();
    let declared = template.resources.iter().filter(|r| r.resource_type == NESTED_STACK);
    for resource in declared {
        let where_ = format!("{}:{}: {}: {NESTED_STACK}", template.path.display(), resource.line, resource.logical_id);
        let crate::yaml::NodeValue::Map(entries) = &resource.properties.value else {
            anyhow::bail!("{where_}: needs Properties with a TemplateURL");
        };
        let Some((_, node)) = entries.iter().find(|(key, _)| key.name == "TemplateURL") else {
            anyhow::bail!("{where_}: needs a TemplateURL");
        };
        let url = match static_value(template, node, place, options) {
            Some(Value::String(url)) => url,
            _ => anyhow::bail!(
                "{where_}: its TemplateURL must be known before anything is sent (written out, or from parameters \
                 and pseudo parameters); nothing was sent"
            ),
        };
        let located = crate::nested_source::locate(&template.path, &url, &place.region, &place.account_id)
            .map_err(|why| anyhow::anyhow!("{where_} with TemplateURL {url:?}: {why}; nothing was sent"))?;
        if chain.contains(&located.path) {
            anyhow::bail!(
                "{where_} with TemplateURL {url:?}: {} nests itself ({}); nothing was sent",
                located.path.display(),
                chain.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" -> ")
            );
        }
        let mut child = Template::load(&located.path).map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        child.check(&options.stubs).map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        child.bind_imports(&options.imports).map_err(|refusal| anyhow::anyhow!("{refusal}"))?;
        chain.push(located.path.clone());
        let grandchildren = load_nested(&child, place, options, chain)?;
        chain.pop();
        for output in template.nested_outputs_read(&resource.logical_id) {
            if !child.outputs.iter().any(|o| o.name == output) {
                anyhow::bail!(
                    "{where_}: Fn::GetAtt {}.Outputs.{output}: its template {} declares no Output {output}; nothing \
                     was sent",
                    resource.logical_id,
                    located.path.display()
                );
            }
        }
        nested.insert(
            resource.logical_id.clone(),
            NestedTemplate { template: child, nested: grandchildren, how: located.how },
        );
    }
    Ok(nested)
}

/// `node` evaluated before anything is sent: from literals, the template's parameters (as
/// given, or their defaults) and pseudo parameters; None when it reads more.
fn static_value(template: &Template, node: &crate::yaml::Node, place: &Place, options: &PlayOptions) -> Option<Value> {
    let given: BTreeMap<String, String> = options
        .parameters
        .iter()
        .filter(|(name, _)| template.parameters.iter().any(|p| &p.name == *name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let parameters = template.bind_parameters(&given).unwrap_or_default();
    let stack = StackIdentity { name: "check".into(), id: "check".into() };
    let live = BTreeMap::new();
    let view = View { live: &live, declared: &template.resources, stack: &stack, stubs: &options.stubs, masked: false };
    let pseudo = pseudo(place, &stack);
    let conditions = BTreeMap::new();
    let scope = Scope { parameters: &parameters, pseudo: &pseudo, conditions: &conditions, resources: &view };
    evaluate(node, &scope).ok().flatten()
}

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
        crate::wire::uuid_like(seed.0, seed.1)
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
    engine.restore_faults().await;
    let passed = steps.iter().all(|s| s.completed);
    Ok(PlayReport {
        stack_name: engine.stack.name.clone(),
        stack_id: engine.stack.id.clone(),
        steps,
        events: engine.all_events(),
        resources: engine.all_history(),
        faults: engine.injected().await,
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
    fn nested_templates_are_read_before_anything_is_sent_or_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("play-nested-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = "Parameters:\n  Name: {Type: String, Default: n}\nResources:\n  Inner:\n    Type: AWS::SNS::Topic\nOutputs:\n  Out: {Value: !Ref Name}\n";
        std::fs::write(dir.join("child.yaml"), child).unwrap();
        std::fs::write(
            dir.join("loop.yaml"),
            "Resources:\n  Again:\n    Type: AWS::CloudFormation::Stack\n    Properties: {TemplateURL: loop.yaml}\n",
        )
        .unwrap();
        let parent = |url: &str, output: &str| {
            let path = dir.join("parent.yaml");
            let text = format!(
                "Resources:\n  Child:\n    Type: AWS::CloudFormation::Stack\n    Properties:\n      TemplateURL: {url}\n  Topic:\n    Type: AWS::SNS::Topic\n    Properties: {{TopicName: !GetAtt Child.Outputs.{output}}}\n"
            );
            std::fs::write(&path, text).unwrap();
            PlayOptions { template: path, service_token_parameter: "ServiceToken".into(), ..PlayOptions::default() }
        };
        let targets = prepare(&parent("child.yaml", "Out"), &place()).unwrap_or_else(|e| panic!("{e:#}"));
        let nested = &targets[0].nested["Child"];
        assert_eq!(nested.template.resources[0].logical_id, "Inner");
        assert!(nested.how.contains("child.yaml"), "{}", nested.how);
        for (url, output, says) in [
            ("https://example.com/child.yaml", "Out", "TemplateURL \"https://example.com/child.yaml\""),
            ("missing.yaml", "Out", "TemplateURL \"missing.yaml\""),
            ("loop.yaml", "Out", "nests itself"),
            ("child.yaml", "Missing", "Fn::GetAtt Child.Outputs.Missing: its template"),
        ] {
            let error = format!("{:#}", prepare(&parent(url, output), &place()).expect_err(url));
            assert!(error.contains(says) && error.contains("nothing was sent"), "{url}: {error}");
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
