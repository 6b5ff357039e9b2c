//! Nested stacks, played against the scripted provider: each nested stack's requests come from
//! its own StackId; its create, update, cleanup, rollback and delete happen within its parent's,
//! in the order docs/play.md ("Nested stacks") gives.

use super::*;
use crate::engine::NestedTemplate;

/// The nested template: a custom resource C whose Name is a parameter, and an Output.
const CHILD: &str = r#"
Parameters:
  Token: {Type: String}
  Name: {Type: String}
Resources:
  C:
    Type: Custom::Thing
    Properties: {ServiceToken: !Ref Token, Name: !Ref Name, Fail: FAIL}
Outputs:
  CId: {Value: !GetAtt C.Id}
"#;

/// The parent: the nested stack `Child`, and `A`, which reads the nested stack's Output.
const PARENT: &str = r#"
Resources:
  Child:
    Type: AWS::CloudFormation::Stack
    Properties:
      TemplateURL: child.yaml
      Parameters: {Token: TOKEN, Name: NAME}
  A:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: A_NAME, FromChild: !GetAtt Child.Outputs.CId, Fail: A_FAIL}
Outputs:
  Nested: {Value: !Ref Child}
"#;

/// The parent with `name` for C, `a_name` for A, C failing with `child_fails`, A with `a_fails`.
fn nested_target(name: &str, a_name: &str, child_fails: bool, a_fails: bool) -> Target {
    let yes_no = |fails: bool| if fails { "yes" } else { "no" };
    let parent = PARENT.replace("A_NAME", a_name).replace("A_FAIL", yes_no(a_fails)).replace("NAME", name);
    let mut target = target(&parent);
    let child = Template::parse(Path::new("child.yaml"), &CHILD.replace("FAIL", yes_no(child_fails)))
        .unwrap_or_else(|e| panic!("{e}"));
    child.check(&BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let nested = NestedTemplate { template: child, nested: BTreeMap::new(), how: "the local file child.yaml".into() };
    target.nested.insert("Child".into(), nested);
    target
}

/// Each event of the whole tree as `Path/Logical STATUS`, in order.
fn timeline(engine: &Engine) -> Vec<String> {
    engine
        .all_events()
        .iter()
        .map(|e| {
            let path: String = e.nested_in.iter().map(|n| format!("{n}/")).collect();
            format!("{path}{} {}", e.logical_resource_id, e.resource_status)
        })
        .collect()
}

fn index(lines: &[String], entry: &str) -> usize {
    lines.iter().position(|l| l == entry).unwrap_or_else(|| panic!("{entry} not in {lines:#?}"))
}

#[tokio::test]
async fn a_nested_stack_is_created_updated_and_deleted_in_its_own_stack_id() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let report = engine.create(nested_target("c1", "a1", false, false)).await.unwrap();
    assert_eq!(report.status, "CREATE_COMPLETE", "{:#?}", timeline(&engine));
    assert_eq!(cloud.seen(), ["Create C", "Create A"], "A reads the nested stack's Output: it waits for it");
    let ids = cloud.stack_ids.lock().unwrap().clone();
    assert_ne!(ids[0], ids[1], "C's request comes from the nested stack's own StackId");
    assert!(ids[0].contains(":stack/s1-Child-"), "named as CloudFormation names a nested stack: {}", ids[0]);
    assert_eq!(cloud.requests_of("A")[0].resource_properties["FromChild"], json!("C-c1"));
    assert_eq!(report.outputs[0].value, ids[0], "Ref of a nested stack is its StackId");
    assert_eq!(statuses(&engine, "Child"), ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"]);

    // The update replaces C (a new Name): the nested stack's forward phase runs in the parent's
    // forward phase; its cleanup (the old C's Delete) in the parent's cleanup phase.
    cloud.clear();
    let report = engine.update("update", nested_target("c2", "a1", false, false)).await.unwrap();
    assert_eq!(report.status, "UPDATE_COMPLETE", "{:#?}", timeline(&engine));
    assert_eq!(cloud.seen(), ["Update C C-c1", "Update A A-a1", "Delete C C-c1"]);
    assert_eq!(cloud.requests_of("A")[0].resource_properties["FromChild"], json!("C-c2"));
    let lines = timeline(&engine);
    assert!(
        index(&lines, "s1 UPDATE_COMPLETE_CLEANUP_IN_PROGRESS") < index(&lines, "Child/C DELETE_IN_PROGRESS"),
        "the nested stack's cleanup waits for its parent's cleanup phase: {lines:#?}"
    );

    // An update that changes nothing of the nested stack leaves it alone.
    cloud.clear();
    engine.update("update2", nested_target("c2", "a2", false, false)).await.unwrap();
    assert_eq!(cloud.seen(), ["Update A A-a1", "Delete A A-a1"], "an unmodified nested stack is not updated");

    // The delete: A first (it depends on the nested stack), then the nested stack's resources.
    cloud.clear();
    let report = engine.delete().await.unwrap();
    assert_eq!(report.status, "DELETE_COMPLETE");
    assert_eq!(cloud.seen(), ["Delete A A-a2", "Delete C C-c2"]);
    assert_eq!(statuses(&engine, "Child").last().map(String::as_str), Some("DELETE_COMPLETE"));
    let history = engine.all_history();
    assert_eq!(history["Child/C"].len(), 4, "a nested resource's requests are kept as Nested/Logical");
}

#[tokio::test]
async fn a_failed_nested_create_fails_its_parent_whose_rollback_deletes_it() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let report = engine.create(nested_target("c1", "a1", true, false)).await.unwrap();
    assert_eq!(report.status, "ROLLBACK_COMPLETE");
    assert_eq!(cloud.seen(), ["Create C", "Delete C C-c1"], "A never created; C deleted by the rollback");
    let failed =
        engine.events.iter().find(|e| e.logical_resource_id == "Child" && e.resource_status == "CREATE_FAILED");
    let reason = failed.and_then(|e| e.resource_status_reason.clone()).unwrap_or_default();
    assert!(
        reason.starts_with("Embedded stack arn:aws:cloudformation:us-east-2:123456789012:stack/s1-Child-"),
        "{reason}"
    );
    assert!(
        reason.ends_with("was not successfully created: The following resource(s) failed to create: [C]."),
        "{reason}"
    );
    let lines = timeline(&engine);
    assert!(index(&lines, "s1 ROLLBACK_IN_PROGRESS") < index(&lines, "Child/C DELETE_COMPLETE"), "{lines:#?}");
}

#[tokio::test]
async fn a_parent_that_fails_after_its_nested_stack_updated_rolls_the_nested_stack_back() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    engine.create(nested_target("c1", "a1", false, false)).await.unwrap();
    cloud.clear();
    // C is replaced (c2) in the nested stack; then A fails in the parent.
    let report = engine.update("update", nested_target("c2", "a1", false, true)).await.unwrap();
    assert_eq!(report.status, "UPDATE_ROLLBACK_COMPLETE", "{:#?}", timeline(&engine));
    assert_eq!(
        cloud.seen(),
        ["Update C C-c1", "Update A A-a1", "Update A A-a1", "Delete C C-c2"],
        "A updated back; the nested stack rolls back: C's new id deleted, its old one kept"
    );
    let lines = timeline(&engine);
    let child_rolled_back = |l: &&String| l.starts_with("Child/s1-Child-") && l.ends_with(" UPDATE_ROLLBACK_COMPLETE");
    assert!(lines.iter().any(|l| child_rolled_back(&l)), "{lines:#?}");
    assert!(
        !lines.iter().any(|l| l.starts_with("Child/s1-Child-") && l.ends_with(" UPDATE_COMPLETE")),
        "the nested stack's update never completed: {lines:#?}"
    );
    // The stack stands on the old template: the nested stack's Output is C's old id again.
    cloud.clear();
    engine.delete().await.unwrap();
    assert_eq!(cloud.seen(), ["Delete A A-a1", "Delete C C-c1"]);
}

#[tokio::test]
async fn a_nested_stack_that_fails_its_own_update_rolls_back_and_fails_its_parent() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    engine.create(nested_target("c1", "a1", false, false)).await.unwrap();
    cloud.clear();
    let report = engine.update("update", nested_target("c1", "a1", true, false)).await.unwrap();
    assert_eq!(report.status, "UPDATE_ROLLBACK_COMPLETE", "{:#?}", timeline(&engine));
    assert_eq!(cloud.seen(), ["Update C C-c1", "Update C C-c1"], "C failed, then C updated back; A never sent");
    let failed =
        engine.events.iter().find(|e| e.logical_resource_id == "Child" && e.resource_status == "UPDATE_FAILED");
    let reason = failed.and_then(|e| e.resource_status_reason.clone()).unwrap_or_default();
    assert!(reason.contains("was not successfully updated. Currently in UPDATE_ROLLBACK_IN_PROGRESS"), "{reason}");
    assert!(reason.contains("failed to update: [C]"), "{reason}");
    let lines = timeline(&engine);
    let done = lines
        .iter()
        .position(|l| l.starts_with("Child/s1-Child-") && l.ends_with(" UPDATE_ROLLBACK_COMPLETE"))
        .unwrap_or_else(|| panic!("the nested stack's rollback completes: {lines:#?}"));
    assert!(index(&lines, "s1 UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS") < done, "{lines:#?}");
}
