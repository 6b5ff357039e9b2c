//! What CloudFormation refuses before an update starts (a type change, an update with no
//! changes, an update of a stack in UPDATE_ROLLBACK_FAILED), ContinueUpdateRollback, and the
//! stack's state after a rollback: its conditions, and the new ids a failed rollback leaves.

use super::*;

/// FOUR's update that replaces A (new Name), adds E, and changes D (which the script fails).
fn replacing_update() -> Target {
    let next = FOUR.replace("Name: a1", "Name: a2").replace("Name: d1}", "Name: d1, Extra: yes}").replace(
        "Outputs:",
        "  E:\n    Type: Custom::Thing\n    Properties: {ServiceToken: TOKEN, Name: e1}\nOutputs:",
    );
    target(&next)
}

fn stack_statuses(engine: &Engine) -> Vec<String> {
    statuses(engine, "s1")
}

#[tokio::test]
async fn a_type_change_is_refused_before_anything_is_sent() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    engine.create(target(FOUR)).await.unwrap();
    cloud.clear();
    let retyped = FOUR.replace("  B:\n    Type: Custom::Thing", "  B:\n    Type: Custom::Other");
    let report = engine.update("update", target(&retyped)).await.unwrap();
    assert_eq!(report.status, "CREATE_COMPLETE", "the stack is as it was");
    assert!(!report.completed);
    assert_eq!(
        report.refused.as_deref(),
        Some(
            "Update of resource type is not permitted. The new template modifies resource type of the following \
             resources: [B]"
        )
    );
    assert!(cloud.seen().is_empty(), "{:?}", cloud.seen());
    assert_eq!(stack_statuses(&engine), ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"], "no update started");
}

#[tokio::test]
async fn an_update_with_no_changes_is_refused() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    engine.create(target(FOUR)).await.unwrap();
    cloud.clear();
    let mut same = target(FOUR);
    same.template.path = "elsewhere/same.yaml".into();
    let report = engine.update("update", same).await.unwrap();
    assert_eq!(report.refused.as_deref(), Some("No updates are to be performed."));
    assert_eq!(report.status, "CREATE_COMPLETE");
    // The summary says so, not only stderr and --json.
    let played = crate::run::PlayReport {
        stack_name: "s1".into(),
        stack_id: "id".into(),
        steps: vec![report.clone()],
        events: Vec::new(),
        resources: Default::default(),
        faults: Vec::new(),
        passed: false,
    };
    let summary = crate::render::summary(&played);
    assert!(
        summary.contains("update   CREATE_COMPLETE (refused, nothing sent: No updates are to be performed.)"),
        "{summary}"
    );
    assert_eq!(stack_statuses(&engine), ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"]);
    // A change of a parameter's value is a change.
    let with_parameter = "Parameters: {P: {Type: String, Default: x}}\n".to_owned() + FOUR;
    let mut engine = self::engine(&cloud, Faults::default());
    engine.create(target(&with_parameter)).await.unwrap();
    let mut changed = target(&with_parameter);
    changed.parameters.insert("P".into(), json!("y"));
    assert_eq!(engine.update("update", changed).await.unwrap().status, "UPDATE_COMPLETE");
}

/// Creates FOUR and plays `replacing_update` with D's Update failing forward and back.
async fn rollback_failed(cloud: &Scripted) -> Engine<'_> {
    let mut engine = engine(cloud, Faults::default());
    engine.create(target(FOUR)).await.unwrap();
    cloud.refuse.lock().unwrap().push("Update D".into());
    cloud.clear();
    let report = engine.update("update", replacing_update()).await.unwrap();
    assert_eq!(report.status, "UPDATE_ROLLBACK_FAILED");
    let seen = cloud.seen();
    assert!(seen.contains(&"Create E".to_owned()) && seen.contains(&"Update A A-a1".to_owned()), "{seen:?}");
    assert!(!seen.iter().any(|s| s.starts_with("Delete")), "no cleanup after a failed rollback: {seen:?}");
    engine
}

#[tokio::test]
async fn after_update_rollback_failed_an_update_is_refused_and_continue_finishes_the_rollback() {
    let cloud = Scripted::default();
    let mut engine = rollback_failed(&cloud).await;
    cloud.clear();
    let later = target(&FOUR.replace("Name: b1}", "Name: b1, Later: yes}"));
    let report = engine.update("update2", later).await.unwrap();
    assert!(report.refused.as_deref().unwrap().contains("is in UPDATE_ROLLBACK_FAILED state and can not be updated"));
    assert!(cloud.seen().is_empty(), "{:?}", cloud.seen());
    // The provider is fixed; ContinueUpdateRollback sends D's Update back again, then cleans up.
    cloud.refuse.lock().unwrap().clear();
    let report = engine.continue_update_rollback("continue").await.unwrap();
    assert_eq!(report.status, "UPDATE_ROLLBACK_COMPLETE");
    assert_eq!(report.outputs[0].value, "A-a1", "the stack stands on the old template");
    let seen = cloud.seen();
    assert_eq!(seen[0], "Update D D-d1", "{seen:?}");
    let mut cleanup = seen[1..].to_vec();
    cleanup.sort();
    assert_eq!(cleanup, ["Delete A A-a2", "Delete E E-e1"], "{seen:?}");
    assert_eq!(
        stack_statuses(&engine)[stack_statuses(&engine).len() - 3..],
        ["UPDATE_ROLLBACK_IN_PROGRESS", "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_ROLLBACK_COMPLETE"]
    );
    cloud.clear();
    let later = target(&FOUR.replace("Name: b1}", "Name: b1, Later: yes}"));
    assert_eq!(engine.update("update2", later).await.unwrap().status, "UPDATE_COMPLETE");
    assert_eq!(cloud.seen(), ["Update B B-b1"]);
    assert!(engine.continue_update_rollback("again").await.is_err(), "nothing left to continue");
}

#[tokio::test]
async fn a_failed_rollbacks_new_ids_are_deleted_with_the_stack_each_once() {
    let cloud = Scripted::default();
    let mut engine = rollback_failed(&cloud).await;
    cloud.clear();
    let report = engine.delete().await.unwrap();
    assert_eq!(report.status, "DELETE_COMPLETE");
    let mut seen = cloud.seen();
    seen.sort();
    assert_eq!(
        seen,
        ["Delete A A-a1", "Delete A A-a2", "Delete B B-b1", "Delete C C-c1", "Delete D D-d1", "Delete E E-e1"]
    );
}

#[tokio::test]
async fn after_a_rollback_the_stack_has_its_old_conditions_and_not_the_new_resources() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let on = r#"
Parameters: {Mode: {Type: String, Default: "on"}}
Conditions: {IsOn: !Equals [!Ref Mode, "on"]}
Resources:
  A:
    Type: Custom::Thing
    Properties: {ServiceToken: TOKEN, Name: a1}
Outputs:
  Shown: {Condition: IsOn, Value: !Ref A}
"#;
    assert_eq!(engine.create(target(on)).await.unwrap().outputs.len(), 1);
    let off = on.replace("Default: \"on\"", "Default: \"off\"").replace("Name: a1}", "Name: a1, Fail: yes}").replace(
        "Outputs:",
        "  New:\n    Type: Custom::Thing\n    Properties: {ServiceToken: TOKEN, Name: n1}\nOutputs:",
    );
    let report = engine.update("update", target(&off)).await.unwrap();
    assert_eq!(report.status, "UPDATE_ROLLBACK_COMPLETE");
    let outputs: Vec<_> = report.outputs.iter().map(|o| (o.key.as_str(), o.value.as_str())).collect();
    assert_eq!(outputs, [("Shown", "A-a1")], "the old template's condition holds again");
    cloud.clear();
    engine.delete().await.unwrap();
    assert_eq!(cloud.seen(), ["Delete A A-a1"], "New was deleted in the rollback's cleanup, not again");
}

#[tokio::test]
async fn a_snapshot_policy_deletes_after_its_snapshot() {
    let cloud = Scripted::default();
    let mut engine = engine(&cloud, Faults::default());
    let with_volume = FOUR.replace(
        "Resources:\n",
        "Resources:\n  Volume:\n    Type: AWS::EC2::Volume\n    DeletionPolicy: Snapshot\n    Properties: {Size: 8}\n",
    );
    engine.create(target(&with_volume)).await.unwrap();
    assert_eq!(engine.delete().await.unwrap().status, "DELETE_COMPLETE");
    let events: Vec<(String, Option<String>)> = engine
        .events
        .iter()
        .filter(|e| e.logical_resource_id == "Volume")
        .map(|e| (e.resource_status.clone(), e.resource_status_reason.clone()))
        .collect();
    let deleting = &events[events.len() - 2..];
    assert_eq!(deleting[0].0, "DELETE_IN_PROGRESS", "{events:?}");
    assert!(deleting[0].1.as_deref().is_some_and(|why| why.contains("snapshot")), "{events:?}");
    assert_eq!(deleting[1].0, "DELETE_COMPLETE", "deleted after the snapshot, not retained: {events:?}");
}
