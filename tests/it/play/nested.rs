//! Nested stacks played on moto: examples/play/nested's parent and its nested stack through a
//! create, an update that replaces a resource inside the nested stack, an update whose failure
//! in the parent rolls the nested stack back, and the delete; and the CDK app's provider stack,
//! whose nested template is found through its asset manifest.

use cfn_once_play::run::{self, PlayReport};

use super::{Local, example, options, requests, statuses};

#[tokio::test]
async fn a_nested_stack_lives_its_parents_life_its_rollback_and_cleanup_included() {
    let local = Local::start(None, 5).await;
    let mut options = options(example("nested/parent.yaml"));
    options.updates = vec![example("nested/parent-v2.yaml"), example("nested/parent-v3.yaml")];
    options.fail = vec![("Front".into(), "update2".into())];
    options.stack_name = Some("shop".into());
    let report = local.play(&options, None).await;

    assert_eq!(
        statuses(&report),
        ["CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "DELETE_COMPLETE"]
    );
    let requests = requests(&report);
    assert_eq!(
        requests["Workers/Queue"],
        [
            "create forward Create -> SUCCESS",
            // child-v2.yaml gives it a new PhysicalId: a replacement, whose old id the parent's
            // cleanup phase deletes.
            "update forward Update -> SUCCESS",
            "update cleanup Delete -> SUCCESS",
            "delete delete Delete -> SUCCESS",
        ]
    );
    assert_eq!(
        requests["Workers/Worker"],
        [
            "create forward Create -> SUCCESS",
            // It reads the queue's id, which changed.
            "update forward Update -> SUCCESS",
            // A larger worker, then Front fails in the parent: the nested stack rolls back.
            "update2 forward Update -> SUCCESS",
            "update2 rollback Update -> SUCCESS",
            "delete delete Delete -> SUCCESS",
        ]
    );
    let worker = &report.resources["Workers/Worker"];
    assert_eq!(worker[2].request.resource_properties["Size"], "large");
    assert_eq!(worker[3].request.resource_properties["Size"], "small", "updated back to what it was");
    // Front read the nested stack's Output, the queue's id, each time it changed.
    let front = &report.resources["Front"];
    assert_eq!(front[0].request.resource_properties["QueueId"], "shop-queue-1");
    assert_eq!(front[1].request.resource_properties["QueueId"], "shop-queue-2");
    // The nested stack's requests came from its own StackId, named as CloudFormation names it.
    let outputs = &report.steps[0].outputs;
    let nested_id = &outputs.iter().find(|o| o.key == "WorkersStack").expect("Ref Workers").value;
    assert!(nested_id.contains(":stack/shop-Workers-"), "{nested_id}");
    assert_ne!(nested_id, &report.stack_id);
    // The parent's events say why the nested stack's resource failed; the nested stack's own
    // events are in the report, marked with where they come from.
    assert!(
        report.events.iter().any(|e| e.nested_in == ["Workers"] && e.resource_status == "UPDATE_ROLLBACK_COMPLETE")
    );
    assert!(report.resources.values().flatten().all(|r| r.puts == 1));
    plan_says_what_was_sent(&local, &options, &report);
    local.stop().await;
}

/// `--plan`'s preview of the same templates against what the play sent: a custom resource the
/// preview says nothing happens to got no request in that step's forward phase; one it says is
/// added or modified by a Static change got its Create or Update (a Dynamic one may or may not).
fn plan_says_what_was_sent(local: &Local, options: &cfn_once_play::run::PlayOptions, report: &PlayReport) {
    let place = local.place();
    let targets = run::prepare(options, &place).unwrap_or_else(|error| panic!("{error:#}"));
    let stack = run::identity(options, &place, (7, 11));
    let steps = run::step_names(options.updates.len());
    let preview = cfn_once_play::plan::preview(&targets, &steps, &run::pseudo(&place, &stack), &options.stubs)
        .unwrap_or_else(|error| panic!("{error}"));
    let mut checked = 0;
    for step in &preview.steps {
        for resource in step.resources.iter().filter(|r| r.resource_type != "AWS::CloudFormation::Stack") {
            let sent = report
                .resources
                .get(&resource.logical_resource_id)
                .is_some_and(|records| records.iter().any(|r| r.step == step.step && r.phase == "forward"));
            let static_change = resource.details.iter().any(|d| d.evaluation == "Static");
            let expected = match resource.action.as_str() {
                "None" => Some(false),
                "Add" => Some(true),
                "Modify" if static_change => Some(true),
                _ => None,
            };
            if let Some(expected) = expected {
                assert_eq!(
                    sent, expected,
                    "{} {}: the preview said {}",
                    step.step, resource.logical_resource_id, resource.action
                );
                checked += 1;
            }
        }
    }
    // update: Workers/Queue (Static); update2: Front and Workers/Worker (Static), Workers/Queue (None).
    assert_eq!(checked, 4, "the preview names the nested stack's resources too");
}

#[tokio::test]
async fn the_cdk_provider_stack_plays_with_its_nested_template_found_through_the_asset_manifest() {
    let local = Local::start(None, 5).await;
    let mut options = options(example("cdk/CdkProviderStack.template.json"));
    // The provider's Lambda function is not provisioned: its Arn, the parent's ServiceToken
    // through the nested stack's Output, stands for the local topic.
    let topic = local.place().topic_arn;
    options.stubs.insert(("ProviderframeworkonEvent83C1D0A7".into(), "Arn".into()), topic.clone());
    // The roles and the onEvent function's Arns the nested template reads, as a user stubs them.
    for role in ["OnEventServiceRole6D9476C1", "ProviderframeworkonEventServiceRole9FF04296", "OnEvent74718524"] {
        options.stubs.insert((role.into(), "Arn".into()), format!("arn:aws:iam::123456789012:role/{role}"));
    }
    options.stack_name = Some("cdk-provider".into());
    let report = local.play(&options, None).await;
    // The local environment serves Custom::Echo and Custom::DynamoDBItem, not the type CDK
    // writes (AWS::CloudFormation::CustomResource): Greeting is answered FAILED, and the
    // rollback deletes it, then the nested stack, as CloudFormation would.
    assert_eq!(statuses(&report), ["ROLLBACK_COMPLETE"], "{:#?}", report.steps);
    let greeting = &report.resources["Greeting"];
    assert_eq!(greeting[0].request.service_token, topic, "the ServiceToken came through the nested stack's Output");
    assert!(greeting[0].reason.as_deref().unwrap_or_default().contains("no provider serves ResourceType"));
    assert_eq!(requests(&report)["Greeting"], ["create forward Create -> FAILED", "create rollback Delete -> SUCCESS"]);
    let nested = "ProviderStackNestedStackProviderStackNestedStackResource4CA0AF4D";
    let nested_statuses: Vec<&str> = report
        .events
        .iter()
        .filter(|e| e.logical_resource_id == nested && e.nested_in.is_empty())
        .map(|e| e.resource_status.as_str())
        .collect();
    assert_eq!(nested_statuses, ["CREATE_IN_PROGRESS", "CREATE_COMPLETE", "DELETE_IN_PROGRESS", "DELETE_COMPLETE"]);
    let nested_stack_ends: Vec<&str> = report
        .events
        .iter()
        .filter(|e| e.nested_in == [nested] && e.resource_type == "AWS::CloudFormation::Stack")
        .map(|e| e.resource_status.as_str())
        .collect();
    assert_eq!(nested_stack_ends, ["CREATE_IN_PROGRESS", "CREATE_COMPLETE", "DELETE_IN_PROGRESS", "DELETE_COMPLETE"]);
    local.stop().await;
}
