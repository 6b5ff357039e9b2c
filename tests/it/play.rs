//! `cfn-once play` on moto, through the real path: templates played against the local
//! environment `make local` provisions (SNS, both regions' queues and handlers, S3 ResponseURLs
//! over HTTPS, the lease table), and each resource's requests, in order, checked against the
//! table in docs/play.md. The example stack's whole life (a replacement, a rollback); a drill
//! and a crash of the primary in the middle; the public templates nobody here wrote, played or
//! refused before anything is sent; and `infra/long-work.yaml`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use cfn_once_core::vocabulary::Role;
use cfn_once_local::environment::{EnvironmentOptions, LocalEnvironment};
use cfn_once_local::functions::LocalFunctions;
use cfn_once_local::functions_file::FunctionsFile;
use cfn_once_local::pair::{LOCAL_SETTINGS, RegionPair};
use cfn_once_local::signals::{PrimaryRequest, apply};
use cfn_once_play::cloud::RequestType;
use cfn_once_play::engine::Notice;
use cfn_once_play::faults::RegionFaults;
use cfn_once_play::run::{self, Place, PlayOptions, PlayReport};
use cfn_once_play::wire::{LocalCloud, LocalRegionFaults};

mod nested;

/// A local environment as `make local` runs it, with `functions` served if given.
struct Local {
    env: LocalEnvironment,
    pair: tokio::sync::Mutex<RegionPair>,
    _functions: Option<LocalFunctions>,
}

impl Local {
    async fn start(functions: Option<&Path>, secondary_delay_s: u32) -> Self {
        let name = cfn_once_tests::unique("play").to_lowercase();
        let options = EnvironmentOptions::local(name.clone(), secondary_delay_s);
        let mut env = LocalEnvironment::provision(cfn_once_tests::moto(), cfn_once_tests::moto_front(), &options)
            .await
            .expect("provisioned");
        let functions = match functions {
            Some(path) => {
                let file = FunctionsFile::read(path).unwrap_or_else(|error| panic!("{error:#}"));
                let scratch = std::env::temp_dir().join(&name);
                let functions = LocalFunctions::start(
                    &env,
                    &cfn_once_tests::python(),
                    &file,
                    &scratch.join("logs"),
                    &scratch.join("build"),
                    &name,
                    &|_| {},
                )
                .await
                .unwrap_or_else(|error| panic!("the functions start: {error:#}"));
                env.file.answer_buckets = functions.answer_buckets();
                env.file.routes = functions.routes();
                Some(functions)
            }
            None => None,
        };
        let pair = RegionPair::start_serving(&env, &LOCAL_SETTINGS, |_| None, functions.as_ref())
            .await
            .expect("both regions' handlers");
        Self { env, pair: tokio::sync::Mutex::new(pair), _functions: functions }
    }

    fn place(&self) -> Place {
        let file = &self.env.file;
        Place {
            region: file.customer_region.clone(),
            account_id: "123456789012".into(),
            topic_arn: file.topic_arn.clone(),
            topics: file.topic_arns(),
        }
    }

    /// Plays `options`; the events and progress lines are printed (`--nocapture` shows them).
    async fn play(&self, options: &PlayOptions, region_faults: Option<&dyn RegionFaults>) -> PlayReport {
        let cloud = LocalCloud::connect(&self.env.file).await.expect("the environment's clients");
        self.play_on(&cloud, options, region_faults).await
    }

    /// Plays `options` through `cloud`.
    async fn play_on(
        &self,
        cloud: &LocalCloud,
        options: &PlayOptions,
        region_faults: Option<&dyn RegionFaults>,
    ) -> PlayReport {
        let place = self.place();
        let targets = run::prepare(options, &place).unwrap_or_else(|error| panic!("{error:#}"));
        let stack = run::identity(options, &place, (7, 11));
        let notify = |notice: Notice| match notice {
            Notice::Event(event) => println!("{}", cfn_once_play::render::event_line(&event)),
            Notice::Progress(line) => println!(".. {line}"),
            Notice::Secret(_) => {}
        };
        let report = run::play(cloud, region_faults, &place, stack, targets, options, &notify).await.expect("the play");
        println!("{}", cfn_once_play::render::summary(&report));
        report
    }

    async fn stop(self) {
        self.pair.into_inner().stop().await;
    }
}

/// Crashes and restores the in-process primary as `cfn-once local` does on its signals, and
/// drains it through the lease table's control item as `cfn-once play --drill-after` does.
struct InProcessFaults<'a> {
    local: &'a Local,
    table: LocalRegionFaults,
    crashed: Mutex<bool>,
}

#[async_trait]
impl RegionFaults for InProcessFaults<'_> {
    async fn drain_primary(&self) -> anyhow::Result<()> {
        self.table.drain_primary().await
    }

    async fn crash_primary(&self) -> anyhow::Result<()> {
        let mut pair = self.local.pair.lock().await;
        let region = self.local.env.file.primary_region.clone();
        apply(PrimaryRequest::Crash, &mut pair, &region, || async { unreachable!("a crash builds nothing") }).await;
        *self.crashed.lock().expect("the flag") = true;
        Ok(())
    }

    async fn restore(&self) -> anyhow::Result<()> {
        self.table.restore().await?;
        if std::mem::take(&mut *self.crashed.lock().expect("the flag")) {
            let mut pair = self.local.pair.lock().await;
            let env = &self.local.env;
            let fresh = || RegionPair::serving_worker(env, Role::Primary, &LOCAL_SETTINGS, None, None);
            apply(PrimaryRequest::Restore, &mut pair, &env.file.primary_region, fresh).await;
        }
        Ok(())
    }
}

fn root() -> PathBuf {
    cfn_once_tests::workspace_root()
}

fn example(name: &str) -> PathBuf {
    root().join("examples/play").join(name)
}

fn public(name: &str) -> PathBuf {
    root().join("tests/fixtures/public-templates").join(name)
}

fn options(template: PathBuf) -> PlayOptions {
    PlayOptions { template, service_token_parameter: "ServiceToken".into(), ..PlayOptions::default() }
}

/// Each resource's requests as `step phase Type -> OUTCOME`.
fn requests(report: &PlayReport) -> BTreeMap<String, Vec<String>> {
    report
        .resources
        .iter()
        .map(|(id, records)| {
            let lines = records
                .iter()
                .map(|r| format!("{} {} {} -> {}", r.step, r.phase, r.request.request_type.as_str(), r.outcome))
                .collect();
            (id.clone(), lines)
        })
        .collect()
}

fn statuses(report: &PlayReport) -> Vec<&str> {
    report.steps.iter().map(|s| s.status.as_str()).collect()
}

/// Who answered each request, as `region/fence`.
fn answerers(report: &PlayReport) -> Vec<String> {
    report
        .resources
        .values()
        .flatten()
        .map(|r| r.answered_by.as_ref().map(|a| format!("{}/{}", a.region, a.fence)).unwrap_or_else(|| "?".into()))
        .collect()
}

#[tokio::test]
async fn the_example_stack_lives_its_whole_life_a_replacement_and_a_rollback_included() {
    let local = Local::start(None, 5).await;
    let mut options = options(example("stack.yaml"));
    options.updates = vec![example("stack-v2.yaml"), example("stack-v3.yaml")];
    options.fail = vec![("Database".into(), "update2".into())];
    options.stack_name = Some("shop".into());
    let report = local.play(&options, None).await;

    assert_eq!(
        statuses(&report),
        ["CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "DELETE_COMPLETE"]
    );
    assert!(!report.passed, "an update rolled back");
    let requests = requests(&report);
    assert_eq!(
        requests["Network"],
        [
            "create forward Create -> SUCCESS",
            "update forward Update -> SUCCESS",
            // The replaced id, deleted after the whole update succeeded.
            "update cleanup Delete -> SUCCESS",
            "delete delete Delete -> SUCCESS",
        ]
    );
    let network = &report.resources["Network"];
    assert_eq!(network[1].answered_physical_id.as_deref(), Some("shop-network-2"));
    assert_eq!(network[2].request.physical_resource_id.as_deref(), Some("shop-network-1"));
    assert_eq!(network[2].request.resource_properties["PhysicalId"], "shop-network-1", "the old properties");
    assert_eq!(network[3].request.physical_resource_id.as_deref(), Some("shop-network-2"));
    assert_eq!(
        requests["Database"],
        [
            "create forward Create -> SUCCESS",
            // It reads Network's id, which changed.
            "update forward Update -> SUCCESS",
            // --fail counts the provider's SUCCESS as FAILED; the rollback updates it back.
            "update2 forward Update -> SUCCESS",
            "update2 rollback Update -> SUCCESS",
            "delete delete Delete -> SUCCESS",
        ]
    );
    let database = &report.resources["Database"];
    assert_eq!(database[1].request.resource_properties["NetworkId"], "shop-network-2");
    assert_eq!(database[1].request.old_resource_properties.as_ref().unwrap()["NetworkId"], "shop-network-1");
    assert_eq!(database[3].request.resource_properties["Engine"], "postgres15", "the last good properties");
    assert_eq!(database[3].request.old_resource_properties.as_ref().unwrap()["Engine"], "postgres16");
    for unchanged in ["Backfill", "Report"] {
        assert_eq!(
            requests[unchanged],
            ["create forward Create -> SUCCESS", "delete delete Delete -> SUCCESS"],
            "{unchanged}: no update touched its properties"
        );
    }
    // The wait condition's Data reached Report, and the Outputs read it.
    let report_create = &report.resources["Report"][0].request.resource_properties;
    let data: serde_json::Value =
        serde_json::from_str(report_create["BackfillResult"].as_str().expect("text")).expect("JSON");
    assert!(data["Backfill"].as_str().expect("the signal's Data").contains("postgres15:orders"), "{data}");
    let outputs = &report.steps[2].outputs;
    assert!(outputs.iter().any(|o| o.key == "DatabaseEngine" && o.value == "postgres15"), "{outputs:?}");
    assert!(outputs.iter().any(|o| o.key == "NetworkId" && o.value == "shop-network-2"), "{outputs:?}");
    // Every request answered once, by the primary under fence 1.
    assert!(report.resources.values().flatten().all(|r| r.puts == 1));
    assert!(answerers(&report).iter().all(|a| a == "us-east-1/1"), "{:?}", answerers(&report));
    // The events never show a handle's URL.
    let events = serde_json::to_string(&report.events).expect("JSON");
    assert!(!events.contains("X-Amz-Signature"), "a presigned URL in the events");
    local.stop().await;
}

#[tokio::test]
async fn a_drill_and_a_crash_of_the_primary_mid_play_move_the_answers_to_the_secondary() {
    let local = Local::start(None, 2).await;
    let table = LocalRegionFaults::connect(&local.env.file).await;
    let faults = InProcessFaults { local: &local, table, crashed: Mutex::new(false) };
    let mut drilled = options(example("stack.yaml"));
    drilled.drill_after = Some(1);
    drilled.stack_name = Some("drilled".into());
    let report = local.play(&drilled, Some(&faults)).await;
    assert!(report.passed, "{:?}", statuses(&report));
    let drills: Vec<_> = report.faults.iter().filter(|f| f.fault.starts_with("drill")).collect();
    assert_eq!((drills.len(), drills[0].after_answers), (1, 1), "{:?}", report.faults);
    let network = &report.resources["Network"][0];
    assert_eq!(network.answered_by.as_ref().map(|a| a.region.as_str()), Some("us-east-1"), "before the drill");
    let after: Vec<_> = report.resources["Report"].iter().map(|r| r.answered_by.clone().expect("read back")).collect();
    assert!(after.iter().all(|a| a.region == "us-west-2"), "after the drill: {after:?}");

    // The handlers cache the active region for a moment: the restore takes that long to show.
    tokio::time::sleep(std::time::Duration::from_millis(cfn_once_local::pair::LOCAL_SETTLE_MS)).await;
    let mut crashed = options(example("stack.yaml"));
    crashed.kill_primary_after = Some(2);
    crashed.stack_name = Some("crashed".into());
    let report = local.play(&crashed, Some(&faults)).await;
    assert!(report.passed, "{:?}", statuses(&report));
    for before in ["Network", "Database"] {
        let create = &report.resources[before][0];
        assert_eq!(create.answered_by.as_ref().map(|a| a.region.as_str()), Some("us-east-1"), "{before}");
    }
    let deleted = report.resources["Network"].last().expect("its Delete").answered_by.clone().expect("read back");
    assert_eq!(deleted.region, "us-west-2", "the primary is down: the secondary answers");
    assert!(report.resources.values().flatten().all(|r| r.puts == 1), "each answered once");
    local.stop().await;
}

#[tokio::test]
async fn the_public_templates_play_or_are_refused_before_anything_is_sent() {
    let local = Local::start(Some(&root().join("tests/fixtures/play/functions.yaml")), 5).await;

    // The Service Catalog account factory: six custom resources, two wait conditions
    // signalled by the resources themselves, two Retain resources.
    let mut factory = options(public("gasaf-aws-service-catalog-account-creation-v2.yaml"));
    for (name, value) in [
        ("Email", "play@example.com"),
        ("AccountName", "play"),
        ("AccountGroup", "Workload"),
        ("AccountType", "dev"),
        ("GovernanceAtScaleAccountFactoryAccountTypeToOUChooserCRArn", "unused"),
        ("GovernanceAtScaleAccountFactoryAccountCreateUpdateNotifierCRArn", "unused"),
        ("ServiceCatalogPuppetVersion", "0.200.0"),
    ] {
        factory.parameters.insert(name.into(), value.into());
    }
    let report = local.play(&factory, None).await;
    assert_eq!(statuses(&report), ["CREATE_COMPLETE", "DELETE_COMPLETE"]);
    let requests = requests(&report);
    for retained in ["OUDetails", "Notifier"] {
        assert_eq!(requests[retained], ["create forward Create -> SUCCESS"], "{retained} is Retain: no Delete");
    }
    for deleted in ["Account", "MoveToOU", "AccountWaiter1", "Bootstrap"] {
        assert_eq!(requests[deleted], ["create forward Create -> SUCCESS", "delete delete Delete -> SUCCESS"]);
    }
    let move_to_ou = &report.resources["MoveToOU"][0].request.resource_properties;
    assert_eq!(
        (move_to_ou["TargetOU"].as_str(), move_to_ou["AccountId"].as_str()),
        (Some("ou-play-workload"), Some("111122223333"))
    );
    assert_eq!(report.steps[0].outputs[0].value, "111122223333");
    let waited = report.events.iter().filter(|e| e.resource_type == "AWS::CloudFormation::WaitCondition");
    assert_eq!(waited.filter(|e| e.resource_status == "CREATE_COMPLETE").count(), 2, "both signalled");

    // The User Guide's SNS walkthrough and its update: one more endpoint is an Update with
    // the old properties.
    let mut selenium = options(public("sns-walkthrough-seleniumtester.json"));
    selenium.updates = vec![public("sns-walkthrough-seleniumtester-update.json")];
    let report = local.play(&selenium, None).await;
    assert_eq!(statuses(&report), ["CREATE_COMPLETE", "UPDATE_COMPLETE", "DELETE_COMPLETE"]);
    let update = &report.resources["MySeleniumTest"][1].request;
    assert_eq!(update.resource_properties["endpoints"].as_array().map(Vec::len), Some(4));
    assert_eq!(update.old_resource_properties.as_ref().unwrap()["endpoints"].as_array().map(Vec::len), Some(3));
    assert!(report.steps[0].outputs.iter().any(|o| o.key == "topItem" && o.value == "https://example.com/results"));

    // getfromjson's consumer: ServiceTimeout 1, served by the stand-in function. The margins
    // shrink with the ServiceTimeout, so a warm handler runs the provider in its first 625 ms
    // (docs/configuration.md, "The margins follow each request's deadline"); whether an
    // answer beats CloudFormation's second on this machine depends on its load (under the test
    // lanes, SNS, SQS and moto take most of it). What holds however late: no request is
    // answered twice, a stack completes only if every Create was answered SUCCESS and rolls
    // back otherwise, a Delete is never answered FAILED (nothing of ours is left to fail on),
    // and a FAILED answer names the deadline the ServiceTimeout set.
    let report = local.play(&options(public("getfromjson-consumer.yml")), None).await;
    let status = statuses(&report);
    let records: Vec<_> = report.resources.values().flatten().collect();
    assert_eq!(records.iter().filter(|r| r.request.request_type == RequestType::Create).count(), 2);
    assert!(records.iter().all(|r| r.request.service_timeout_s == 1));
    let created =
        records.iter().filter(|r| r.request.request_type == RequestType::Create).all(|r| r.outcome == "SUCCESS");
    if created {
        assert_eq!(status, ["CREATE_COMPLETE", "DELETE_COMPLETE"]);
    } else {
        assert!(matches!(status.as_slice(), [s] if s.starts_with("ROLLBACK_")), "{status:?}");
    }
    for record in &records {
        assert!(record.puts <= 1, "{record:?}");
        match (record.request.request_type, record.outcome.as_str()) {
            (_, "TIMED OUT" | "SUCCESS") => {}
            (RequestType::Delete, outcome) => panic!("a Delete answered {outcome}: {record:?}"),
            (_, outcome) => {
                assert_eq!(outcome, "FAILED", "{record:?}");
                let reason = record.reason.as_deref().unwrap_or("");
                assert!(reason.contains("set by the resource's ServiceTimeout"), "{record:?}");
            }
        }
    }

    // The AD connector: conditions, AWS::NoValue, and a GetAtt of an IAM role it is given.
    let mut connector = options(public("adconnector.cfn.yaml"));
    connector
        .stubs
        .insert(("ADConnectorLambdaRole".into(), "Arn".into()), "arn:aws:iam::123456789012:role/play".into());
    let template = cfn_once_play::template::Template::load(&connector.template).expect("it loads");
    for parameter in template.parameters.iter().filter(|p| p.default.is_none() && p.name != "ServiceToken") {
        let value = parameter.allowed_values.first().cloned().unwrap_or_else(|| match parameter.name.as_str() {
            name if name.contains("Password") => "Play-Passw0rd!".into(),
            name if name.contains("DNSName") => "corp.example.com".into(),
            name if name.contains("DNSServers") => "10.0.0.10,10.0.0.11".into(),
            name if name.contains("NetBios") => "CORP".into(),
            name if name.contains("VPC") => "vpc-0123456789abcdef0".into(),
            name if name.contains("Subnet") => "subnet-0123456789abcdef0".into(),
            _ => "playvalue".into(),
        });
        connector.parameters.insert(parameter.name.clone(), value);
    }
    let report = local.play(&connector, None).await;
    assert_eq!(statuses(&report), ["CREATE_COMPLETE", "DELETE_COMPLETE"]);
    let create = &report.resources["ADConnectorResource"][0].request.resource_properties;
    assert_eq!(create["DOMAIN_DNS_NAME"], "corp.example.com");
    let not_provisioned = report
        .events
        .iter()
        .filter(|e| e.resource_type == "AWS::SecretsManager::Secret" && e.resource_status == "CREATE_COMPLETE");
    assert!(
        not_provisioned.clone().all(|e| e.resource_status_reason.as_deref().unwrap_or("").contains("not provisioned"))
    );

    // The prefix list stack's SSM parameter type and Fn::GetAZs are read now (they were refused
    // at :61 and :131): it is prepared, and the warnings say what play makes up for them.
    let mut prefix_list = options(public("prefixlist-cfn-endpoint-waitcondition.yaml"));
    for (name, value) in [("EnvironmentName", "play"), ("KeyName", "play-key")] {
        prefix_list.parameters.insert(name.into(), value.into());
    }
    let targets = run::prepare(&prefix_list, &local.place()).expect("the prefix list stack is prepared");
    let warnings = run::warnings(&targets).join("\n");
    assert!(warnings.contains("prefixlist-cfn-endpoint-waitcondition.yaml:61: parameter LinuxAMI"), "{warnings}");
    assert!(warnings.contains(":131: Fn::GetAZs gives play's fixed list"), "{warnings}");
    local.stop().await;
}

#[tokio::test]
async fn the_long_work_stack_plays_its_wait_condition_past_the_service_timeout() {
    let local = Local::start(None, 5).await;
    let mut long_work = options(root().join("infra/long-work.yaml"));
    for (name, value) in [("WorkTimeout", "60"), ("WorkSeconds", "8"), ("PollSeconds", "2")] {
        long_work.parameters.insert(name.into(), value.into());
    }
    let report = local.play(&long_work, None).await;
    assert!(report.passed, "{:?}", statuses(&report));
    let requests = requests(&report);
    assert_eq!(requests["Backfill"], ["create forward Create -> SUCCESS", "delete delete Delete -> SUCCESS"]);
    let result = &report.steps[0].outputs[0];
    assert_eq!(result.key, "BackfillResult");
    assert!(result.value.contains("\"Backfill\""), "the signal's Data, keyed by its UniqueId: {}", result.value);
    local.stop().await;
}

/// The item `Custom::DynamoDBItem` keeps under `pk` in the environment's item table, if any.
async fn item(local: &Local, pk: &str) -> Option<String> {
    let file = &local.env.file;
    let sdk = cfn_once_local::provision::sdk_config(&file.endpoint_url, &file.customer_region).await;
    let found = aws_sdk_dynamodb::Client::new(&sdk)
        .get_item()
        .table_name(&file.item_table)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem");
    found.item.and_then(|item| item.get("Plan").and_then(|plan| plan.as_s().ok()).cloned())
}

#[tokio::test]
async fn a_replaced_item_is_deleted_in_the_cleanup_and_the_stacks_delete_deletes_the_new_one() {
    let local = Local::start(None, 5).await;
    let fixture = |name: &str| root().join("tests/fixtures/play").join(name);
    let items = |prefix: &str, keep: bool| {
        let mut options = options(fixture("items.yaml"));
        options.updates = vec![fixture("items-v2.yaml")];
        options.parameters.insert("Table".into(), local.env.file.item_table.clone());
        options.parameters.insert("Prefix".into(), prefix.into());
        options.stack_name = Some(format!("items-{prefix}"));
        options.keep = keep;
        options
    };

    // Create, then an Update naming a new key: the provider writes the new item, answers a new
    // id, and the cleanup's Delete of the old id removes the old item.
    let kept = local.play(&items("kept", true), None).await;
    assert_eq!(statuses(&kept), ["CREATE_COMPLETE", "UPDATE_COMPLETE"]);
    assert_eq!(
        requests(&kept)["Tenant"],
        ["create forward Create -> SUCCESS", "update forward Update -> SUCCESS", "update cleanup Delete -> SUCCESS"]
    );
    assert_eq!(item(&local, "kept#2").await.as_deref(), Some("pro"), "the replacement's item is written");
    assert_eq!(item(&local, "kept#1").await, None, "the replaced item is gone after the cleanup");

    // The whole life: the stack's Delete removes the item it holds then.
    let whole = local.play(&items("whole", false), None).await;
    assert!(whole.passed, "{:?}", statuses(&whole));
    for pk in ["whole#1", "whole#2"] {
        assert_eq!(item(&local, pk).await, None, "{pk} is left after the stack's delete");
    }
    local.stop().await;
}

#[tokio::test]
async fn a_publish_whose_reply_is_lost_is_answered_once_all_the_same() {
    use cfn_once_local::fault_proxy::{Fault, FaultProxy, Match};
    let local = Local::start(None, 5).await;
    // Every attempt of the first publishes reaches SNS and loses its reply: the SDK's retries
    // deliver copies, and the player, not knowing, must look for the answer rather than fail.
    let proxy = FaultProxy::start(&local.env.file.endpoint_url);
    proxy.inject(Match::Any, Fault::ForwardThenReset, 6);
    let cloud = LocalCloud::connect_publishing_at(&local.env.file, &proxy.url()).await.expect("clients");
    let mut options = options(example("stack.yaml"));
    options.stack_name = Some("lost-replies".into());
    let report = local.play_on(&cloud, &options, None).await;
    assert!(proxy.injected() >= 3, "the replies of at least one request's every attempt were lost");
    assert_eq!(statuses(&report), ["CREATE_COMPLETE", "DELETE_COMPLETE"]);
    let network = &report.resources["Network"];
    assert_eq!(network[0].outcome, "SUCCESS");
    assert!(report.resources.values().flatten().all(|r| r.puts == 1), "each copy answered once");
    local.stop().await;
}

/// Seconds of the day an event's timestamp (`2026-01-02T03:04:05.678Z`) names.
fn seconds_of_day(timestamp: &str) -> f64 {
    let time = &timestamp[11..timestamp.len() - 1];
    time.split(':').zip([3600.0, 60.0, 1.0]).map(|(part, unit)| part.parse::<f64>().expect("a number") * unit).sum()
}

#[tokio::test]
async fn a_second_stack_of_the_same_name_waits_for_its_own_signal() {
    let local = Local::start(None, 5).await;
    let mut long_work = options(root().join("infra/long-work.yaml"));
    long_work.stack_name = Some("same-name".into());
    for (name, value) in [("WorkTimeout", "60"), ("WorkSeconds", "6"), ("PollSeconds", "2")] {
        long_work.parameters.insert(name.into(), value.into());
    }
    let (place, cloud) = (local.place(), LocalCloud::connect(&local.env.file).await.expect("clients"));
    let notify = |notice: Notice| match notice {
        Notice::Event(event) => println!("{}", cfn_once_play::render::event_line(&event)),
        Notice::Progress(line) => println!(".. {line}"),
        Notice::Secret(_) => {}
    };
    let mut waits = Vec::new();
    for seed in [(1, 2), (3, 4)] {
        // A new StackId each play, as cfn-once play makes one and CloudFormation gives every stack.
        let stack = run::identity(&long_work, &place, seed);
        let targets = run::prepare(&long_work, &place).expect("the template");
        let report = run::play(&cloud, None, &place, stack, targets, &long_work, &notify).await.expect("the play");
        assert!(report.passed, "{:?}", statuses(&report));
        let at = |status: &str| {
            let event =
                report.events.iter().find(|e| e.logical_resource_id == "BackfillDone" && e.resource_status == status);
            seconds_of_day(&event.expect("the wait's event").timestamp)
        };
        waits.push(at("CREATE_COMPLETE") - at("CREATE_IN_PROGRESS"));
    }
    println!("BackfillDone waited {waits:?} s");
    assert!(waits.iter().all(|&waited| waited >= 4.0), "each stack waits for its own work's signal: {waits:?}");
    local.stop().await;
}

/// `cfn-once play`, the built binary, against `local`'s env file in `dir`: (exit 0, stdout,
/// stderr). Run off the test's runtime, which serves the regions' handlers meanwhile.
async fn play_binary(local: &Local, dir: &Path, args: &[&str]) -> (bool, String, String) {
    local.env.file.write(&dir.join("env.json")).expect("the env file");
    let deps = std::env::current_exe().expect("the test binary");
    let mut command =
        std::process::Command::new(deps.parent().and_then(Path::parent).expect("target").join("cfn-once"));
    command.arg("play").args(args).current_dir(dir);
    let output = tokio::task::spawn_blocking(move || command.output()).await.expect("joined").expect("built");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("$ cfn-once play {}\n{stderr}", args.join(" "));
    (output.status.success(), stdout.into_owned(), stderr.into_owned())
}

#[tokio::test]
async fn a_kept_stacks_export_reaches_a_later_plays_import_and_its_name_is_not_exported_twice() {
    let local = Local::start(None, 5).await;
    let dir = std::env::temp_dir().join(cfn_once_tests::unique("play-exports"));
    std::fs::create_dir_all(&dir).expect("a folder");
    let head = "Parameters:\n  ServiceToken: {Type: String}\nResources:\n  R:\n    Type: Custom::Echo\n    Properties:\n      ServiceToken: !Ref ServiceToken\n";
    let exporter = format!(
        "{head}      PhysicalId: net-7\nOutputs:\n  Id:\n    Value: !Ref R\n    Export: {{Name: !Sub '${{AWS::StackName}}-net'}}\n"
    );
    std::fs::write(dir.join("exporter.yaml"), exporter.clone()).expect("a template");
    std::fs::write(dir.join("other.yaml"), exporter.replace("!Sub '${AWS::StackName}-net'", "exporter-net"))
        .expect("a template");
    std::fs::write(dir.join("importer.yaml"), format!("{head}      Network: !ImportValue exporter-net\n"))
        .expect("a template");
    let keep = ["--env", "env.json", "--keep", "--json", "--stack-name"];
    let (passed, _, stderr) = play_binary(&local, &dir, &[&keep[..], &["exporter", "exporter.yaml"]].concat()).await;
    assert!(
        passed
            && stderr.contains(
                "exports: recorded in env.exports.json for later plays, of stack exporter: exporter-net = net-7"
            ),
        "{stderr}"
    );
    let (passed, stdout, stderr) =
        play_binary(&local, &dir, &[&keep[..], &["importer", "importer.yaml"]].concat()).await;
    assert!(
        passed
            && stderr.contains(
                "exports: read from env.exports.json, of stacks earlier plays kept: exporter-net (stack exporter)"
            ),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("the --json report");
    assert_eq!(report["resources"]["R"][0]["request"]["ResourceProperties"]["Network"], "net-7", "{report:#}");
    // Another stack exporting the same name is refused before anything is sent.
    let (passed, stdout, stderr) =
        play_binary(&local, &dir, &["--env", "env.json", "--stack-name", "other", "other.yaml"]).await;
    assert!(!passed && stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("Export with name exporter-net is already exported by stack exporter"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
    local.stop().await;
}
