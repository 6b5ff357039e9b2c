//! The exports book: recorded from a kept stack's last Outputs, read back by the same
//! environment only, merged with `--import`, and a name another stack exports refused before
//! anything is sent.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;
use crate::engine::{OutputValue, StepReport};
use crate::run::{PlayOptions, prepare};

const ENVIRONMENT: &str = "arn:aws:sns:us-east-2:123456789012:cfn-once-local-abc123-service-token";

fn place() -> Place {
    Place {
        region: "us-east-2".into(),
        account_id: "123456789012".into(),
        topic_arn: ENVIRONMENT.into(),
        topics: vec![ENVIRONMENT.into()],
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("play-exports-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

fn stack(name: &str) -> StackIdentity {
    StackIdentity { name: name.into(), id: format!("arn:aws:cloudformation:us-east-2:123456789012:stack/{name}/1") }
}

/// A kept stack's report whose last operation shows `outputs` (name, value, export name).
fn report(stack: &StackIdentity, outputs: &[(&str, &str, Option<&str>)]) -> PlayReport {
    let outputs = outputs
        .iter()
        .map(|(key, value, export)| OutputValue {
            key: (*key).into(),
            value: (*value).into(),
            description: None,
            export_name: export.map(str::to_owned),
        })
        .collect();
    let step = |name: &str, outputs| StepReport {
        step: name.into(),
        template: None,
        status: "CREATE_COMPLETE".into(),
        completed: true,
        outputs,
        refused: None,
    };
    PlayReport {
        stack_name: stack.name.clone(),
        stack_id: stack.id.clone(),
        steps: vec![step("create", vec![]), step("update", outputs)],
        events: vec![],
        resources: BTreeMap::new(),
        faults: vec![],
        passed: true,
    }
}

/// The targets of `template`, bound as a play binds them.
fn targets(dir: &std::path::Path, template: &str, parameters: &[(&str, &str)]) -> Vec<Target> {
    let path = dir.join("stack.yaml");
    std::fs::write(&path, template).expect("the template");
    let options = PlayOptions {
        template: path,
        service_token_parameter: "ServiceToken".into(),
        parameters: parameters.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
        ..PlayOptions::default()
    };
    prepare(&options, &place()).unwrap_or_else(|error| panic!("{error:#}"))
}

#[test]
fn a_kept_stacks_exports_are_recorded_and_read_back_by_its_environment() {
    let dir = scratch("record");
    let path = book_path(&dir.join("env.json"));
    assert_eq!(path, dir.join("env.exports.json"));
    let (mut book, other) = Book::read(&path, ENVIRONMENT).expect("no book yet is an empty one");
    assert!(book.exports.is_empty() && other.is_none());
    let network = stack("network");
    let played = report(&network, &[("VpcId", "vpc-1", Some("shared-vpc")), ("Plain", "x", None)]);
    let (recorded, skipped) = book.record(&played, &Secrets::default());
    assert_eq!((recorded, skipped), (vec!["shared-vpc".to_owned()], vec![]), "only Outputs with an Export");
    book.write(&path).expect("written");

    let (read, other) = Book::read(&path, ENVIRONMENT).expect("read back");
    assert!(other.is_none());
    let export = &read.exports["shared-vpc"];
    assert_eq!((export.value.as_str(), export.stack_name.as_str()), ("vpc-1", "network"));
    assert_eq!(export.stack_id, network.id);
    let imports = read.imports(&BTreeMap::from([("other".into(), "o".into())]), &path).expect("merged");
    assert_eq!(imports, BTreeMap::from([("other".into(), "o".into()), ("shared-vpc".into(), "vpc-1".into())]));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_book_of_an_environment_that_is_gone_is_ignored() {
    let dir = scratch("stale");
    let path = dir.join("env.exports.json");
    let mut old = Book {
        environment: "arn:aws:sns:us-east-2:123456789012:cfn-once-local-old".into(),
        ..Book::read(&path, "x").unwrap().0
    };
    old.record(&report(&stack("network"), &[("VpcId", "vpc-1", Some("shared-vpc"))]), &Secrets::default());
    old.write(&path).unwrap();
    let (book, other) = Book::read(&path, ENVIRONMENT).expect("read");
    assert!(book.exports.is_empty(), "a stopped environment's stacks are gone with it: {book:?}");
    assert_eq!(book.environment, ENVIRONMENT, "recording replaces it with this environment's");
    assert_eq!(other.as_deref(), Some(old.environment.as_str()), "and says whose it was");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_import_given_with_another_value_than_the_book_holds_is_refused() {
    let dir = scratch("conflict");
    let path = dir.join("env.exports.json");
    let mut book = Book::read(&path, ENVIRONMENT).unwrap().0;
    book.record(&report(&stack("network"), &[("VpcId", "vpc-1", Some("shared-vpc"))]), &Secrets::default());
    let same = BTreeMap::from([("shared-vpc".into(), "vpc-1".into())]);
    assert_eq!(book.imports(&same, &path).expect("the same value agrees"), same);
    let other = BTreeMap::from([("shared-vpc".into(), "vpc-2".into())]);
    let error = book.imports(&other, &path).expect_err("one value per export name").to_string();
    assert!(error.contains("--import shared-vpc: stack network of this environment exports shared-vpc"), "{error}");
    assert!(!error.contains("vpc-1") && !error.contains("vpc-2"), "no value in the message: {error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_name_another_stack_exports_is_refused_before_anything_is_sent() {
    let dir = scratch("duplicate");
    let mut book = Book::read(&dir.join("env.exports.json"), ENVIRONMENT).unwrap().0;
    book.record(
        &report(&stack("network"), &[("A", "vpc-1", Some("shared-vpc")), ("B", "b", Some("prefix-two"))]),
        &Secrets::default(),
    );
    let template = "Parameters:\n  Prefix: {Type: String, Default: prefix}\nConditions:\n  Never: !Equals [a, b]\n\
                    Resources:\n  W:\n    Type: AWS::CloudFormation::WaitConditionHandle\nOutputs:\n  \
                    Vpc:\n    Value: v\n    Export: {Name: shared-vpc}\n  \
                    Two:\n    Value: t\n    Export: {Name: !Sub '${Prefix}-two'}\n  \
                    Off:\n    Condition: Never\n    Value: o\n    Export: {Name: off}\n";
    let app = stack("app");
    let names = declared(&targets(&dir, template, &[]), &place(), &app).expect("static names");
    let shown: Vec<(&str, usize)> = names.iter().map(|d| (d.name.as_str(), d.line)).collect();
    assert_eq!(shown, [("shared-vpc", 11), ("prefix-two", 14)], "a false condition exports nothing");
    let error = book.check(&names, &app).expect_err("taken").to_string();
    assert!(
        error.contains("stack.yaml:11: Outputs Vpc: Export with name shared-vpc is already exported by stack network"),
        "{error}"
    );
    // A name computed from a parameter is checked too; another value frees it.
    let error = book.check(&names[1..], &app).expect_err("taken").to_string();
    assert!(error.contains("Export with name prefix-two"), "{error}");
    let names =
        declared(&targets(&dir, &template.replace("shared-vpc", "app-vpc"), &[("Prefix", "mine")]), &place(), &app);
    book.check(&names.unwrap(), &app).expect("free names");
    // The stack that exports a name may export it again (its own update).
    book.check(&declared(&targets(&dir, template, &[]), &place(), &app).unwrap(), &stack("network")).expect("its own");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_export_name_reading_a_resource_or_exported_twice_is_refused() {
    let dir = scratch("refused");
    let head = "Resources:\n  W:\n    Type: AWS::CloudFormation::WaitConditionHandle\nOutputs:\n";
    for (outputs, says) in [
        ("  A:\n    Value: a\n    Export: {Name: !Ref W}\n", "Ref W: the Name of an Export can't use Ref or GetAtt"),
        (
            "  A:\n    Value: a\n    Export: {Name: same}\n  B:\n    Value: b\n    Export: {Name: same}\n",
            "Outputs B: Export Name same is exported by Output A too",
        ),
    ] {
        let error = declared(&targets(&dir, &format!("{head}{outputs}"), &[]), &place(), &stack("app"))
            .expect_err(says)
            .to_string();
        assert!(error.contains(says), "{error}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_no_echo_value_is_kept_in_clear_marked_and_masked_when_read_back() {
    let dir = scratch("noecho");
    let mut book = Book::read(&dir.join("env.exports.json"), ENVIRONMENT).unwrap().0;
    let secrets = Secrets::default();
    secrets.add_value(&Value::String("hunter2".into()));
    let played = report(
        &stack("db"),
        &[
            ("Url", "db://admin:hunter2@db", Some("db-url")),
            ("Data", "****", Some("masked")),
            ("Id", "db-1", Some("db-id")),
        ],
    );
    let (recorded, skipped) = book.record(&played, &secrets);
    assert_eq!(recorded, ["db-url", "db-id"]);
    assert_eq!(skipped.len(), 1, "a value the report carries masked is not recorded: {skipped:?}");
    assert!(skipped[0].starts_with("masked ("), "{skipped:?}");
    let url = &book.exports["db-url"];
    assert_eq!((url.value.as_str(), url.no_echo), ("db://admin:hunter2@db", true), "the real value, marked");
    assert!(!book.exports["db-id"].no_echo);
    let later = Secrets::default();
    book.add_secrets(&later);
    assert_eq!(later.text("url db://admin:hunter2@db, id db-1"), "url ****, id db-1");
    std::fs::remove_dir_all(&dir).unwrap();
}
