//! Each of CloudFormation's rules the player plays, played against a scripted provider that
//! records every request: the requests each resource got, in order, are checked against the
//! table in docs/play.md ("What CloudFormation sends, and when").
//!
//! The scripted provider: a resource's PhysicalResourceId is `<Logical>-<Name>` (so a new
//! `Name` is a replacement), its Data is its properties plus `Id`; `Fail: "yes"` answers
//! FAILED; `Silent: "yes"` never answers; a `Handle` property gets a SUCCESS signal whose
//! UniqueId is the logical id and whose Data is `done-<Logical>`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::*;
use crate::cloud::{Answer, CfnRequest, Cloud, Outcome, RequestType, Signal, StackIdentity};
use crate::faults::{Faults, RegionFaults};
use crate::intrinsics::Pseudo;
use crate::template::Template;

#[path = "engine_nested_tests.rs"]
mod nested;
#[path = "engine_refusal_tests.rs"]
mod refusals;

const TOKEN: &str = "arn:aws:sns:us-east-2:123456789012:local-topic";

#[derive(Default)]
struct Scripted {
    /// Requests (`Type Logical`) answered FAILED whatever their properties.
    refuse: Mutex<Vec<String>>,
    log: Mutex<Vec<CfnRequest>>,
    /// The StackId each request of `log` came from.
    stack_ids: Mutex<Vec<String>>,
    signals: Mutex<BTreeMap<String, Vec<Signal>>>,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
}

#[async_trait]
impl Cloud for Scripted {
    async fn send(
        &self,
        stack: &StackIdentity,
        request: &CfnRequest,
        _progress: &(dyn Fn(String) + Send + Sync),
    ) -> anyhow::Result<Outcome> {
        self.log.lock().unwrap().push(request.clone());
        self.stack_ids.lock().unwrap().push(stack.id.clone());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        let properties = &request.resource_properties;
        let text = |field: &str| properties.get(field).and_then(Value::as_str).map(str::to_owned);
        if text("Silent").as_deref() == Some("yes") && request.request_type != RequestType::Delete {
            return Ok(Outcome::TimedOut);
        }
        let id = match request.request_type {
            RequestType::Delete => request.physical_resource_id.clone().unwrap(),
            _ => format!("{}-{}", request.logical_resource_id, text("Name").unwrap_or_else(|| "x".into())),
        };
        let refused = format!("{} {}", request.request_type.as_str(), request.logical_resource_id);
        let failed = (text("Fail").as_deref() == Some("yes") && request.request_type != RequestType::Delete)
            || self.refuse.lock().unwrap().contains(&refused);
        if let (Some(handle), false, RequestType::Create | RequestType::Update) =
            (text("Handle"), failed, request.request_type)
        {
            let logical = request.logical_resource_id.clone();
            let signal = Signal {
                success: true,
                unique_id: logical.clone(),
                reason: String::new(),
                data: format!("done-{logical}"),
            };
            self.signals.lock().unwrap().entry(handle).or_default().push(signal);
        }
        let mut data: Map<String, Value> = properties.as_object().cloned().unwrap_or_default();
        data.insert("Id".into(), Value::String(id.clone()));
        Ok(Outcome::Answered(Answer {
            success: !failed,
            reason: failed.then(|| "the script says fail".to_owned()),
            physical_resource_id: Some(id),
            data,
            no_echo: false,
            answered_by: None,
            puts: 1,
            elapsed_ms: 30,
        }))
    }

    async fn create_handle(&self, _stack: &StackIdentity, logical_id: &str) -> anyhow::Result<String> {
        Ok(format!("https://handles.test/{logical_id}?X-Amz-Expires=86399&X-Amz-Signature=5ec2e7"))
    }

    async fn signals(&self, handle: &str) -> anyhow::Result<Vec<Signal>> {
        Ok(self.signals.lock().unwrap().get(handle).cloned().unwrap_or_default())
    }
}

impl Scripted {
    /// Every request, as `Type Logical (PhysicalId)`.
    fn seen(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|r| {
                let id = r.physical_resource_id.as_deref().map(|i| format!(" {i}")).unwrap_or_default();
                format!("{} {}{id}", r.request_type.as_str(), r.logical_resource_id)
            })
            .collect()
    }

    fn requests_of(&self, logical_id: &str) -> Vec<CfnRequest> {
        self.log.lock().unwrap().iter().filter(|r| r.logical_resource_id == logical_id).cloned().collect()
    }

    fn clear(&self) {
        self.log.lock().unwrap().clear();
        self.stack_ids.lock().unwrap().clear();
    }
}

fn target(text: &str) -> Target {
    let text = text.replace("TOKEN", TOKEN);
    let template = Template::parse(Path::new("test.yaml"), &text).unwrap_or_else(|e| panic!("{e}"));
    template.check(&BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let parameters = template.bind_parameters(&BTreeMap::new()).unwrap();
    Target { template, parameters, nested: BTreeMap::new() }
}

fn stack() -> StackIdentity {
    StackIdentity { name: "s1".into(), id: "arn:aws:cloudformation:us-east-2:123456789012:stack/s1/0000".into() }
}

fn pseudo() -> Pseudo {
    Pseudo { stack_id: stack().id, ..Pseudo::for_tests("us-east-2", "s1") }
}

static QUIET: fn(Notice) = |_| {};

fn engine<'a>(cloud: &'a Scripted, faults: Faults<'a>) -> Engine<'a> {
    let mut engine = Engine::new(cloud, stack(), pseudo(), BTreeMap::new(), faults, &QUIET);
    engine.wait_poll = Duration::from_millis(20);
    engine
}

fn statuses(engine: &Engine, logical_id: &str) -> Vec<String> {
    engine.events.iter().filter(|e| e.logical_resource_id == logical_id).map(|e| e.resource_status.clone()).collect()
}

fn position(seen: &[String], entry: &str) -> usize {
    seen.iter().position(|s| s == entry).unwrap_or_else(|| panic!("{entry} not in {seen:?}"))
}

const FOUR: &str = r#"
Resources:
  A:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: a1, Size: 3}
  B:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: b1}
  C:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: c1, FromA: !GetAtt A.Id}
  D:
    Type: Custom::Thing
    DependsOn: C
    Properties: {ServiceToken: TOKEN, Name: d1}
Outputs:
  AId: {Value: !Ref A}
"#;

#[tokio::test]
async fn a_create_goes_in_dependency_order_with_independent_resources_at_once() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let report = engine.create(target(FOUR)).await.unwrap();
    assert_eq!(report.status, "CREATE_COMPLETE");
    assert!(report.completed);
    let seen = cloud.seen();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(position(&seen, "Create A") < position(&seen, "Create C"), "{seen:?}");
    assert!(position(&seen, "Create C") < position(&seen, "Create D"), "{seen:?}");
    assert!(cloud.most_at_once.load(Ordering::SeqCst) >= 2, "A and B are independent: they run at once");
    let c = &cloud.requests_of("C")[0];
    assert_eq!(c.resource_properties["FromA"], json!("A-a1"), "GetAtt reads A's answered Data");
    assert_eq!(c.resource_properties["ServiceToken"], json!(TOKEN));
    assert_eq!(cloud.requests_of("A")[0].resource_properties["Size"], json!("3"), "every scalar a string");
    assert!(c.physical_resource_id.is_none() && c.old_resource_properties.is_none());
    assert_eq!(report.outputs[0].value, "A-a1");
    assert_eq!(statuses(&engine, "A"), ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"]);
}

#[tokio::test]
async fn an_update_sends_only_what_changed_with_the_old_properties() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    engine.create(target(FOUR)).await.unwrap();
    cloud.clear();
    let report = engine.update("update", target(&FOUR.replace("Name: b1}", "Name: b1, Extra: yes}"))).await.unwrap();
    assert_eq!(report.status, "UPDATE_COMPLETE");
    assert_eq!(cloud.seen(), ["Update B B-b1"], "nothing else changed, so nothing else is sent");
    let update = &cloud.requests_of("B")[0];
    assert_eq!(update.resource_properties["Extra"], json!("yes"));
    assert_eq!(update.old_resource_properties.as_ref().unwrap()["Name"], json!("b1"));
    assert!(update.old_resource_properties.as_ref().unwrap().get("Extra").is_none());
}

#[tokio::test]
async fn a_replacement_is_deleted_in_the_cleanup_after_the_whole_update() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    engine.create(target(FOUR)).await.unwrap();
    cloud.clear();
    // A's new Name is a new id: C, which reads A's Id, changes too and is updated after it.
    let report = engine.update("update", target(&FOUR.replace("Name: a1", "Name: a2"))).await.unwrap();
    assert_eq!(report.status, "UPDATE_COMPLETE");
    let seen = cloud.seen();
    assert_eq!(seen, ["Update A A-a1", "Update C C-c1", "Delete A A-a1"], "{seen:?}");
    let delete = &cloud.requests_of("A")[1];
    assert_eq!(delete.resource_properties["Name"], json!("a1"), "the old id's Delete carries the old properties");
    assert_eq!(cloud.requests_of("C")[0].resource_properties["FromA"], json!("A-a2"));
    let stack_statuses: Vec<_> =
        engine.events.iter().filter(|e| e.logical_resource_id == "s1").map(|e| e.resource_status.as_str()).collect();
    assert_eq!(
        stack_statuses[stack_statuses.len() - 3..],
        ["UPDATE_IN_PROGRESS", "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_COMPLETE"]
    );
    assert_eq!(report.outputs[0].value, "A-a2");
    // The stack's delete names the new id.
    cloud.clear();
    engine.delete().await.unwrap();
    assert!(cloud.seen().contains(&"Delete A A-a2".to_owned()));
}

#[tokio::test]
async fn update_replace_policy_retain_keeps_the_old_id() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let retained = FOUR
        .replace("  B:\n    Type: Custom::Thing\n", "  B:\n    Type: Custom::Thing\n    UpdateReplacePolicy: Retain\n");
    engine.create(target(&retained)).await.unwrap();
    cloud.clear();
    engine.update("update", target(&retained.replace("Name: b1", "Name: b2"))).await.unwrap();
    assert_eq!(cloud.seen(), ["Update B B-b1"], "no Delete of B-b1");
    assert!(statuses(&engine, "B").contains(&"DELETE_SKIPPED".to_owned()));
}

#[tokio::test]
async fn a_failed_create_deletes_what_it_created_in_reverse_order_and_the_failed_ones_answered_id() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let failing = FOUR.replace("Name: d1}", "Name: d1, Fail: yes}");
    let report = engine.create(target(&failing)).await.unwrap();
    assert_eq!(report.status, "ROLLBACK_COMPLETE");
    assert!(!report.completed);
    let seen = cloud.seen();
    assert!(seen.contains(&"Delete D D-d1".to_owned()), "the FAILED answer's id: {seen:?}");
    assert!(position(&seen, "Delete D D-d1") < position(&seen, "Delete C C-c1"), "{seen:?}");
    assert!(position(&seen, "Delete C C-c1") < position(&seen, "Delete A A-a1"), "{seen:?}");
    assert!(seen.contains(&"Delete B B-b1".to_owned()));
    assert_eq!(
        statuses(&engine, "D"),
        ["CREATE_IN_PROGRESS", "CREATE_FAILED", "DELETE_IN_PROGRESS", "DELETE_COMPLETE"]
    );
    assert!(!engine.exists());
}

#[tokio::test]
async fn a_create_never_answered_is_deleted_under_a_made_up_id_after_its_service_timeout() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let silent = r#"
Resources:
  Quiet:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Silent: "yes", ServiceTimeout: 1}
"#;
    let report = engine.create(target(silent)).await.unwrap();
    assert_eq!(report.status, "ROLLBACK_COMPLETE");
    let requests = cloud.requests_of("Quiet");
    assert_eq!(requests[0].service_timeout_s, 1);
    assert_eq!(requests[1].request_type, RequestType::Delete);
    let made_up = requests[1].physical_resource_id.clone().unwrap();
    assert!(made_up.starts_with("s1-Quiet-"), "{made_up}");
    let reason = engine.events.iter().find(|e| e.resource_status == "CREATE_FAILED").unwrap();
    assert!(reason.resource_status_reason.as_deref().unwrap().contains("ServiceTimeout of 1 s"));
}

#[tokio::test]
async fn a_failed_update_rolls_back_with_updates_back_then_deletes_the_new_ids() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    engine.create(target(FOUR)).await.unwrap();
    cloud.clear();
    // B is updated in place, A replaced; D fails once C (which reads A) was updated.
    let next = FOUR
        .replace("Name: b1}", "Name: b1, Extra: yes}")
        .replace("Name: a1", "Name: a2")
        .replace("Name: d1}", "Name: d1, Fail: yes}");
    let report = engine.update("update", target(&next)).await.unwrap();
    assert_eq!(report.status, "UPDATE_ROLLBACK_COMPLETE");
    let seen = cloud.seen();
    // Forward: A (new id a2), B, C, D (fails). Back: B, C and D get their old properties;
    // A takes its old id back with no request. Cleanup: A's new id is deleted.
    let rollback_start = position(&seen, "Update D D-d1") + 1;
    let mut back: Vec<String> = seen[rollback_start..seen.len() - 1].to_vec();
    back.sort();
    assert_eq!(back, ["Update B B-b1", "Update C C-c1", "Update D D-d1"], "{seen:?}");
    assert_eq!(seen.last().unwrap(), "Delete A A-a2", "{seen:?}");
    let d_back = cloud.requests_of("D").pop().unwrap();
    assert_eq!(d_back.resource_properties.get("Fail"), None, "ResourceProperties are the last good ones");
    assert_eq!(d_back.old_resource_properties.unwrap()["Fail"], json!("yes"), "Old: the ones being applied");
    let c_back = cloud.requests_of("C").pop().unwrap();
    assert_eq!(c_back.resource_properties["FromA"], json!("A-a1"));
    let b_back = cloud.requests_of("B").pop().unwrap();
    assert!(b_back.resource_properties.get("Extra").is_none());
    let a_delete = cloud.requests_of("A").pop().unwrap();
    assert_eq!(a_delete.resource_properties["Name"], json!("a2"), "the new id's properties");
    // The stack stands on the old template: its delete names A's old id.
    assert_eq!(report.outputs[0].value, "A-a1");
    cloud.clear();
    engine.delete().await.unwrap();
    assert!(cloud.seen().contains(&"Delete A A-a1".to_owned()), "{:?}", cloud.seen());
}

#[tokio::test]
async fn a_delete_goes_in_reverse_dependency_order_and_retain_sends_nothing() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let retained =
        FOUR.replace("  B:\n    Type: Custom::Thing\n", "  B:\n    Type: Custom::Thing\n    DeletionPolicy: Retain\n");
    engine.create(target(&retained)).await.unwrap();
    cloud.clear();
    let report = engine.delete().await.unwrap();
    assert_eq!(report.status, "DELETE_COMPLETE");
    let seen = cloud.seen();
    assert_eq!(seen.len(), 3, "B is retained: {seen:?}");
    assert!(position(&seen, "Delete D D-d1") < position(&seen, "Delete C C-c1"));
    assert!(position(&seen, "Delete C C-c1") < position(&seen, "Delete A A-a1"));
    assert_eq!(statuses(&engine, "B").last().unwrap(), "DELETE_SKIPPED");
}

#[tokio::test]
async fn a_removed_resource_is_deleted_in_the_cleanup_unless_retained() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    engine.create(target(FOUR)).await.unwrap();
    cloud.clear();
    let without_b =
        FOUR.replace("  B:\n    Type: Custom::Thing\n    Properties: {ServiceToken: TOKEN, Name: b1}\n", "");
    let report = engine.update("update", target(&without_b)).await.unwrap();
    assert_eq!(report.status, "UPDATE_COMPLETE");
    assert_eq!(cloud.seen(), ["Delete B B-b1"]);
    let stack_events: Vec<_> = engine.events.iter().map(|e| e.resource_status.as_str()).collect();
    let cleanup = stack_events.iter().position(|s| *s == "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS").unwrap();
    let deleted = stack_events.iter().position(|s| *s == "DELETE_COMPLETE").unwrap();
    assert!(cleanup < deleted);
}

#[tokio::test]
async fn fail_on_purpose_runs_the_request_and_rolls_back_what_it_made() {
    let cloud = Scripted::default();
    let faults = Faults { fail: [("C".to_owned(), "create".to_owned())].into(), ..Faults::default() };
    let mut engine = engine(&cloud, faults);
    let report = engine.create(target(FOUR)).await.unwrap();
    assert_eq!(report.status, "ROLLBACK_COMPLETE");
    let c = cloud.seen().into_iter().filter(|s| s.ends_with(" C") || s.contains(" C ")).collect::<Vec<_>>();
    assert_eq!(c, ["Create C", "Delete C C-c1"], "the provider's own id is deleted");
    let failed = engine.events.iter().find(|e| e.resource_status == "CREATE_FAILED").unwrap();
    assert!(failed.resource_status_reason.as_deref().unwrap().contains("failed on purpose (--fail C@create)"));
}

const WAITING: &str = r#"
Resources:
  Handle:
    Type: AWS::CloudFormation::WaitConditionHandle
  Worker:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Handle: !Ref Handle}
  Done:
    Type: AWS::CloudFormation::WaitCondition
    DependsOn: Worker
    Properties: {Handle: !Ref Handle, Timeout: "2", Count: "1"}
  Report:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Result: !GetAtt Done.Data}
"#;

#[tokio::test]
async fn a_wait_condition_waits_for_its_signal_and_gives_its_data() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let report = engine.create(target(WAITING)).await.unwrap();
    assert_eq!(report.status, "CREATE_COMPLETE");
    assert_eq!(
        cloud.requests_of("Worker")[0].resource_properties["Handle"],
        json!("https://handles.test/Handle?X-Amz-Expires=86399&X-Amz-Signature=5ec2e7")
    );
    let result = &cloud.requests_of("Report")[0].resource_properties["Result"];
    assert_eq!(result, &json!(r#"{"Worker":"done-Worker"}"#));
    assert_eq!(statuses(&engine, "Done"), ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"]);
    let kept = serde_json::to_string(&engine.history).unwrap();
    assert!(!kept.contains("handles.test"), "the report keeps no handle URL: {kept}");
    let handle_events = engine.events.iter().filter(|e| e.logical_resource_id == "Handle");
    assert!(handle_events.clone().all(|e| !e.physical_resource_id.as_deref().unwrap_or("").contains("handles.test")));
}

#[tokio::test]
async fn a_wait_condition_without_its_signal_times_out_and_rolls_back() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let unsignalled = WAITING.replace("Handle: !Ref Handle}", "Other: x}").replace("Timeout: \"2\"", "Timeout: \"1\"");
    let report = engine.create(target(&unsignalled)).await.unwrap();
    assert_eq!(report.status, "ROLLBACK_COMPLETE");
    let failed = engine.events.iter().find(|e| e.resource_status == "CREATE_FAILED").unwrap();
    assert_eq!(failed.logical_resource_id, "Done");
    assert_eq!(
        failed.resource_status_reason.as_deref(),
        Some("WaitCondition timed out. Received 0 conditions when expecting 1")
    );
    assert!(cloud.requests_of("Report").is_empty(), "what waits on the condition never starts");
    assert_eq!(cloud.requests_of("Worker").last().unwrap().request_type, RequestType::Delete);
}

#[tokio::test]
async fn conditions_leave_resources_and_properties_out() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let conditional = r#"
Parameters:
  Env: {Type: String, Default: dev}
Conditions:
  IsProd: !Equals [!Ref Env, prod]
Resources:
  Always:
    Type: Custom::Thing
    Properties:
      ServiceToken: TOKEN
      Tier: !If [IsProd, gold, !Ref AWS::NoValue]
      Where: !Sub "${AWS::Region}/${AWS::StackName}"
  OnlyProd:
    Type: Custom::Thing
    Condition: IsProd
    Properties: {ServiceToken: TOKEN}
"#;
    engine.create(target(conditional)).await.unwrap();
    assert_eq!(cloud.seen(), ["Create Always"]);
    let properties = &cloud.requests_of("Always")[0].resource_properties;
    assert!(properties.get("Tier").is_none(), "AWS::NoValue drops the property");
    assert_eq!(properties["Where"], json!("us-east-2/s1"));
}

#[tokio::test]
async fn a_changed_service_token_fails_the_update_and_rolls_back() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    engine.create(target(FOUR)).await.unwrap();
    cloud.clear();
    let moved =
        FOUR.replace("Properties: {ServiceToken: TOKEN, Name: b1}", "Properties: {ServiceToken: other, Name: b1}");
    let report = engine.update("update", target(&moved)).await.unwrap();
    assert_eq!(report.status, "UPDATE_ROLLBACK_COMPLETE");
    assert!(cloud.seen().is_empty(), "nothing is sent: {:?}", cloud.seen());
    let failed = engine.events.iter().find(|e| e.resource_status == "UPDATE_FAILED").unwrap();
    assert_eq!(failed.resource_status_reason.as_deref(), Some("Modifying service token is not allowed."));
}

#[derive(Default)]
struct CountingFaults {
    drained: AtomicUsize,
    restored: AtomicUsize,
}

#[async_trait]
impl RegionFaults for CountingFaults {
    async fn drain_primary(&self) -> anyhow::Result<()> {
        self.drained.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    async fn crash_primary(&self) -> anyhow::Result<()> {
        anyhow::bail!("not in this test")
    }
    async fn restore(&self) -> anyhow::Result<()> {
        self.restored.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_drill_is_injected_after_the_nth_answer_and_undone_at_the_end() {
    let cloud = Scripted::default();
    let region = CountingFaults::default();
    let faults = Faults { drill_after: Some(2), region: Some(&region), ..Faults::default() };
    let mut engine = engine(&cloud, faults);
    engine.create(target(FOUR)).await.unwrap();
    assert_eq!(region.drained.load(Ordering::SeqCst), 1);
    assert_eq!(engine.injected().await[0].after_answers, 2);
    engine.restore_faults().await;
    assert_eq!(region.restored.load(Ordering::SeqCst), 1);
}

#[test]
fn event_times_are_utc_to_the_millisecond() {
    let stamp = super::events::now();
    assert_eq!(stamp.len(), 24, "{stamp}");
    assert!(stamp.ends_with('Z') && stamp.as_bytes()[19] == b'.', "{stamp}");
}
