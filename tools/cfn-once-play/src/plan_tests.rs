//! The preview against what the engine then sends, NoEcho masking through the whole play as
//! `cfn-once play` prints and writes it, and the event columns for long logical ids.
//!
//! The scripted provider: a resource's PhysicalResourceId is `<Logical>-<Name>` (so a new
//! `Name` is a replacement), its Data is its properties; `Secret: yes` answers with `NoEcho`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::*;
use crate::cloud::{Answer, CfnRequest, Cloud, Outcome, RequestType, Signal, StackIdentity};
use crate::mask::{Secrets, Watching};
use crate::render::{Columns, Printer};
use crate::run::{self, Place, PlayOptions};
use crate::state::{Notice, StackEvent};

const TOKEN: &str = "arn:aws:sns:us-east-2:123456789012:local-topic";

#[derive(Default)]
struct Scripted {
    log: Mutex<Vec<CfnRequest>>,
}

#[async_trait]
impl Cloud for Scripted {
    async fn send(
        &self,
        _stack: &StackIdentity,
        request: &CfnRequest,
        _progress: &(dyn Fn(String) + Send + Sync),
    ) -> anyhow::Result<Outcome> {
        self.log.lock().unwrap().push(request.clone());
        let properties = &request.resource_properties;
        let text = |field: &str| properties.get(field).and_then(Value::as_str).map(str::to_owned);
        let id = match request.request_type {
            RequestType::Delete => request.physical_resource_id.clone().unwrap(),
            _ => format!("{}-{}", request.logical_resource_id, text("Name").unwrap_or_else(|| "x".into())),
        };
        let mut data: Map<String, Value> = properties.as_object().cloned().unwrap_or_default();
        data.remove("ServiceToken");
        Ok(Outcome::Answered(Answer {
            success: true,
            reason: None,
            physical_resource_id: Some(id),
            data,
            no_echo: text("Secret").as_deref() == Some("yes"),
            answered_by: None,
            puts: 1,
            elapsed_ms: 1,
        }))
    }

    async fn create_handle(&self, _stack: &StackIdentity, logical_id: &str) -> anyhow::Result<String> {
        Ok(format!("https://handles.test/{logical_id}?X-Amz-Signature=5ec2e7"))
    }

    async fn signals(&self, _handle: &str) -> anyhow::Result<Vec<Signal>> {
        Ok(Vec::new())
    }
}

impl Scripted {
    /// Every request, as `Type Logical`.
    fn seen(&self) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter().map(|r| format!("{} {}", r.request_type.as_str(), r.logical_resource_id)).collect()
    }
}

fn target(text: &str, given: &[(&str, &str)]) -> Target {
    let text = text.replace("TOKEN", TOKEN);
    let template = Template::parse(Path::new("test.yaml"), &text).unwrap_or_else(|e| panic!("{e}"));
    template.check(&BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let given = given.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let parameters = template.bind_parameters(&given).unwrap();
    Target { template, parameters, nested: BTreeMap::new() }
}

fn place() -> Place {
    Place {
        region: "us-east-2".into(),
        account_id: "123456789012".into(),
        topic_arn: TOKEN.into(),
        topics: vec![TOKEN.into()],
    }
}

fn stack(name: &str) -> StackIdentity {
    StackIdentity { name: name.into(), id: format!("arn:aws:cloudformation:us-east-2:123456789012:stack/{name}/0") }
}

/// Plays create, one update per further target, and delete, as `cfn-once play` does.
async fn play(cloud: &dyn Cloud, targets: Vec<Target>, notify: &(dyn Fn(Notice) + Send + Sync)) -> run::PlayReport {
    let options =
        PlayOptions { updates: vec![PathBuf::from("next.yaml"); targets.len() - 1], ..PlayOptions::default() };
    run::play(cloud, None, &place(), stack("s1"), targets, &options, notify).await.unwrap()
}

const BEFORE: &str = r#"
Parameters:
  Size: {Type: String, Default: "1"}
Resources:
  Network:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: net1}
  Database:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: db, NetworkId: !Ref Network, Size: !Ref Size}
  Report:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: report, Engine: !GetAtt Database.Size}
  Stay:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: stay}
  Gone:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: gone}
"#;

/// `Network` gets a new Name (its provider will replace it), `Size` a new value, `Gone` goes
/// and `Fresh` comes.
fn after() -> String {
    BEFORE.replace("Name: net1", "Name: net2").replace(
        "  Gone:\n    Type: Custom::Thing\n    Properties: {ServiceToken: TOKEN, Name: gone}",
        "  Fresh:\n    Type: Custom::Thing\n    Properties: {ServiceToken: TOKEN, Name: fresh}",
    )
}

fn preview_of(targets: &[Target]) -> Preview {
    let pseudo = run::pseudo(&place(), &stack("s1"));
    preview(targets, &run::step_names(targets.len() - 1), &pseudo, &BTreeMap::new()).unwrap()
}

fn entry<'p>(preview: &'p Preview, logical_id: &str) -> &'p ResourcePreview {
    let step = preview.steps.last().unwrap();
    step.resources.iter().find(|r| r.logical_resource_id == logical_id).unwrap()
}

fn detail(entry: &ResourcePreview) -> Vec<String> {
    entry
        .details
        .iter()
        .map(|d| {
            let entity = d.causing_entity.as_deref().unwrap_or("-");
            format!("{} {} {} {entity}", d.name, d.evaluation, d.change_source)
        })
        .collect()
}

#[test]
fn the_preview_says_what_a_change_set_says_of_each_custom_resource_and_why() {
    let targets = [target(BEFORE, &[]), target(&after(), &[("Size", "2")])];
    let preview = preview_of(&targets);
    assert_eq!(preview.steps.len(), 1);
    let network = entry(&preview, "Network");
    assert_eq!((network.action.as_str(), network.replacement.as_deref()), ("Modify", Some("Conditional")));
    assert_eq!(detail(network), ["Name Static DirectModification -"]);
    assert_eq!(network.old_resource_properties.as_ref().unwrap()["Name"], "net1");
    assert_eq!(network.resource_properties.as_ref().unwrap()["Name"], "net2");
    assert!(network.requests[1].contains("Delete of the old id"), "{:?}", network.requests);
    let database = entry(&preview, "Database");
    assert_eq!(
        detail(database),
        ["NetworkId Dynamic ResourceReference Network", "Size Static ParameterReference Size"]
    );
    assert_eq!(database.resource_properties.as_ref().unwrap()["NetworkId"], "{{Ref Network}}");
    let report = entry(&preview, "Report");
    assert_eq!(detail(report), ["Engine Dynamic ResourceAttribute Database.Size"]);
    assert!(report.requests[0].contains("only if !GetAtt Database.Size changes"), "{:?}", report.requests);
    assert_eq!((entry(&preview, "Stay").action.as_str(), entry(&preview, "Stay").requests.len()), ("None", 0));
    assert_eq!(entry(&preview, "Gone").action, "Remove");
    assert_eq!(entry(&preview, "Fresh").action, "Add");
    let text = text(&preview);
    assert!(text.contains("Network (Custom::Thing): Action Modify, Replacement Conditional"), "{text}");
    assert!(text.contains("decided by its provider's answer"), "{text}");
}

#[tokio::test]
async fn what_the_preview_says_is_what_the_update_then_sends() {
    let targets = vec![target(BEFORE, &[]), target(&after(), &[("Size", "2")])];
    let preview = preview_of(&targets);
    let cloud = Scripted::default();
    let report = play(&cloud, targets, &|_| {}).await;
    let update: Vec<String> = report
        .resources
        .iter()
        .flat_map(|(id, records)| records.iter().filter(|r| r.step == "update").map(move |r| (id, r)))
        .map(|(id, r)| format!("{} {id} ({})", r.request.request_type.as_str(), r.phase))
        .collect();
    // Network is replaced (a new Name, a new id): its old id is deleted in the cleanup; Report
    // reads Database.Size, which did change, so its conditional Update is sent.
    assert_eq!(
        update,
        [
            "Update Database (forward)",
            "Create Fresh (forward)",
            "Delete Gone (cleanup)",
            "Update Network (forward)",
            "Delete Network (cleanup)",
            "Update Report (forward)"
        ]
    );
    let got_nothing: Vec<&str> = preview.steps[0]
        .resources
        .iter()
        .filter(|r| r.action == "None")
        .map(|r| r.logical_resource_id.as_str())
        .collect();
    assert_eq!(got_nothing, ["Stay"]);
    assert!(cloud.seen().iter().all(|s| !s.ends_with(" Stay") || !s.starts_with("Update")));
}

const SECRETS: &str = r#"
Parameters:
  Password: {Type: String, NoEcho: true}
Resources:
  Vault:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: vault, Secret: "yes", Key: answered-key-9q}
  User:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: user, Password: !Ref Password, Key: !GetAtt Vault.Key, Login: !Sub "admin:${Password}"}
Outputs:
  Password: {Value: !Ref Password}
  Key: {Value: !GetAtt User.Key}
"#;

#[tokio::test]
async fn noecho_values_are_masked_in_everything_play_prints_or_writes() {
    let targets = vec![
        target(SECRETS, &[("Password", "hunter2-x")]),
        target(&SECRETS.replace("Name: user,", "Name: user2,"), &[("Password", "hunter2-x")]),
    ];
    let preview = preview_of(&targets);
    let secrets = Secrets::of_parameters(&targets);
    let printer = Printer { columns: Columns::for_stack("s1", &targets), secrets: secrets.clone() };
    let cloud = Scripted::default();
    let watching = Watching { inner: &cloud, secrets };
    let printed = Mutex::new(Vec::new());
    let notify = |notice: Notice| match notice {
        Notice::Event(event) => printed.lock().unwrap().push(printer.event(&event)),
        Notice::Progress(line) => printed.lock().unwrap().push(printer.progress(&line)),
        Notice::Secret(value) => printer.secrets.add_value(&value),
    };
    let report = play(&watching, targets, &notify).await;
    // The provider is sent the values in clear, as CloudFormation sends them.
    let sent = cloud.log.lock().unwrap().clone();
    let user = sent.iter().find(|r| r.logical_resource_id == "User").unwrap();
    assert_eq!(user.resource_properties["Password"], "hunter2-x");
    assert_eq!(user.resource_properties["Key"], "answered-key-9q");
    let mut everything = printed.into_inner().unwrap().join("\n");
    everything.push_str(&printer.summary(&report));
    let json = printer.json(&report).unwrap();
    everything.push_str(&json);
    everything
        .push_str(&text(&masked(&preview, &Secrets::of_parameters(&[target(SECRETS, &[("Password", "hunter2-x")])]))));
    for secret in ["hunter2-x", "answered-key-9q"] {
        assert!(!everything.contains(secret), "{secret} shown in:\n{everything}");
    }
    assert!(json.contains(r#""Login": "admin:****""#), "{json}");
    assert!(json.contains(r#""Key": "****""#), "{json}");
    assert!(printer.summary(&report).contains("Output Password = ****"), "{}", printer.summary(&report));
}

fn event(logical_id: &str, resource_type: &str) -> StackEvent {
    StackEvent {
        timestamp: "2025-01-01T00:00:00.000Z".into(),
        logical_resource_id: logical_id.into(),
        physical_resource_id: None,
        resource_type: resource_type.into(),
        resource_status: "CREATE_IN_PROGRESS".into(),
        resource_status_reason: Some("Resource creation Initiated".into()),
        nested_in: Vec::new(),
    }
}

#[test]
fn event_columns_stay_aligned_for_logical_ids_up_to_cloudformations_255_characters() {
    let ids: Vec<String> = [1, 28, 29, 40, 41, 255].iter().map(|n| format!("R{}", "x".repeat(n - 1))).collect();
    let mut template = String::from("Resources:\n");
    for id in &ids {
        template.push_str(&format!("  {id}:\n    Type: Custom::Thing\n    Properties: {{ServiceToken: TOKEN}}\n"));
    }
    template.push_str("  Long:\n    Type: Custom::AVeryLongTypeNameThatGoesPastFortyCharactersOfType\n");
    template.push_str("    Properties: {ServiceToken: TOKEN}\n");
    let targets = [target(&template, &[])];
    let columns = Columns::for_stack("a-stack-name", &targets);
    let mut lines = vec![columns.heading()];
    lines.extend(ids.iter().map(|id| columns.line(&event(id, "Custom::Thing"))));
    lines.push(columns.line(&event("Long", "Custom::AVeryLongTypeNameThatGoesPastFortyCharactersOfType")));
    lines.push(columns.line(&event("a-stack-name", "AWS::CloudFormation::Stack")));
    let status_at = |line: &str| {
        let at = line.find("CREATE_IN_PROGRESS").or_else(|| line.find("Status")).unwrap();
        line[..at].chars().count()
    };
    let first = status_at(&lines[0]);
    for line in &lines {
        assert_eq!(status_at(line), first, "misaligned:\n{}", lines.join("\n"));
    }
    assert!(lines.iter().any(|l| l.contains(&ids[5])), "a 255-character id is shown whole");
}
