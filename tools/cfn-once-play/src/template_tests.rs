//! Tests of the template model: what is refused, where and why; what is checked; parameters,
//! conditions and dependencies; and the public templates nobody here wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::intrinsics::{Pseudo, Resources, Scope};

const CUSTOM: &str = "Resources:\n  R:\n    Type: Custom::X\n    Properties:\n      ServiceToken: t\n";

fn parse(text: &str) -> Result<Template, Refusal> {
    Template::parse(Path::new("t.yaml"), text)
}

/// Asserts that `text` is refused when parsed, on `line`, naming `construct`.
fn refused(text: &str, line: usize, construct: &str) {
    match parse(text) {
        Ok(_) => panic!("accepted, expected a refusal of {construct}:\n{text}"),
        Err(refusal) => {
            assert_eq!((refusal.line, refusal.construct.as_str()), (line, construct), "{refusal}");
            assert!(refusal.to_string().starts_with(&format!("t.yaml:{line}: {construct}: ")));
        }
    }
}

/// Asserts that `text` parses but its check refuses it, on `line`, naming `construct`.
fn check_refused(text: &str, stubs: &[(&str, &str)], line: usize, construct: &str) -> Refusal {
    let template = parse(text).unwrap_or_else(|refusal| panic!("{refusal}"));
    match template.check(&stubs_of(stubs)) {
        Ok(()) => panic!("checked, expected a refusal of {construct}:\n{text}"),
        Err(refusal) => {
            assert_eq!((refusal.line, refusal.construct.as_str()), (line, construct), "{refusal}");
            refusal
        }
    }
}

fn checks(text: &str, stubs: &[(&str, &str)]) -> Template {
    let template = parse(text).unwrap_or_else(|refusal| panic!("{refusal}"));
    template.check(&stubs_of(stubs)).unwrap_or_else(|refusal| panic!("{refusal}"));
    template
}

fn stubs_of(stubs: &[(&str, &str)]) -> BTreeMap<(String, String), String> {
    stubs.iter().map(|(id, attr)| ((id.to_string(), attr.to_string()), "stub".to_string())).collect()
}

#[test]
fn sections_outside_the_list_are_refused() {
    for (section, line) in [("Transform", 1), ("Hooks", 1), ("Globals", 1)] {
        refused(&format!("{section}: {{}}\n{CUSTOM}"), line, section);
    }
    // Mappings and Rules are read (template/sections_tests.rs).
    parse(&format!("{CUSTOM}Mappings:\n  M: {{}}\nRules: {{}}\n")).unwrap_or_else(|refusal| panic!("{refusal}"));
    refused("AWSTemplateFormatVersion: 2011-01-01\n", 1, "AWSTemplateFormatVersion");
    refused("Description: none\n", 1, "Resources");
    refused("- a list\n", 1, "template");
    // Metadata and a date-like version are accepted.
    let template =
        parse(&format!("AWSTemplateFormatVersion: 2010-09-09\nMetadata: {{a: 1}}\nDescription: d\n{CUSTOM}")).unwrap();
    assert_eq!(template.description.as_deref(), Some("d"));
}

#[test]
fn resource_attributes_outside_the_list_are_refused() {
    let with = |attribute: &str| format!("{CUSTOM}    {attribute}\n");
    refused(&with("CreationPolicy: {}"), 6, "CreationPolicy");
    refused(&with("UpdatePolicy: {}"), 6, "UpdatePolicy");
    refused(&with("Bogus: 1"), 6, "Bogus");
    refused(&with("DeletionPolicy: Snapshot"), 6, "DeletionPolicy Snapshot");
    refused(&with("UpdateReplacePolicy: RetainExceptOnCreate"), 6, "UpdateReplacePolicy RetainExceptOnCreate");
    refused(&with("DeletionPolicy: Keep"), 6, "DeletionPolicy Keep");
    refused(
        "Resources:\n  H:\n    Type: AWS::CloudFormation::WaitConditionHandle\n    DeletionPolicy: Snapshot\n",
        4,
        "DeletionPolicy Snapshot",
    );
    refused("Resources:\n  R:\n    Properties: {}\n", 2, "resource R");
    refused("Resources:\n  My-R:\n    Type: Custom::X\n", 2, "resource My-R");
    refused("Parameters:\n  R:\n    Type: String\nResources:\n  R:\n    Type: Custom::X\n", 5, "resource R");
    let template = parse(&with("Version: '1.0'\n    Description: d\n    Metadata: {x: !GetAZs ''}")).unwrap();
    assert_eq!(template.resources[0].deletion_policy, Policy::Delete);
}

#[test]
fn policies_are_read() {
    let text = "Resources:\n  B:\n    Type: AWS::S3::Bucket\n    DeletionPolicy: Snapshot\n    UpdateReplacePolicy: Retain\n  C:\n    Type: Custom::X\n    DeletionPolicy: Retain\n";
    let template = parse(text).unwrap();
    let bucket = template.resource("B").unwrap();
    assert_eq!((bucket.deletion_policy, bucket.update_replace_policy), (Policy::Snapshot, Policy::Retain));
    let custom = template.resource("C").unwrap();
    assert_eq!((custom.deletion_policy, custom.update_replace_policy), (Policy::Retain, Policy::Delete));
    assert_eq!(custom.properties.as_map().map(<[_]>::len), Some(0));
}

#[test]
fn functions_outside_the_list_are_refused_by_name_and_line() {
    for (function, written) in [
        ("Fn::Length", "!Length [a]"),
        ("Fn::ToJsonString", "!ToJsonString {a: 1}"),
        ("Fn::Transform", "!Transform {Name: x}"),
        ("Fn::Select", "!Select [0, !Length [a]]"),
    ] {
        let short = function.trim_start_matches("Fn::");
        let expected = if function == "Fn::Select" {
            "Fn::Length (!Length)".to_string()
        } else {
            format!("{function} (!{short})")
        };
        refused(&format!("{CUSTOM}      P:\n        - a\n        - {written}\n"), 8, &expected);
    }
    refused(&format!("{CUSTOM}      P: !Equals [a, b]\n"), 6, "Fn::Equals");
    refused(&format!("{CUSTOM}      P: !Ref AWS::NotificationARNs\n"), 6, "Ref AWS::NotificationARNs");
    refused(&format!("{CUSTOM}      P: !Sub '${{AWS::Nope}}'\n"), 6, "Fn::Sub AWS::Nope");
    refused(&format!("{CUSTOM}      P: !Sub 'a${{b'\n"), 6, "Fn::Sub");
    refused(&format!("{CUSTOM}      P: !GetAtt NoDot\n"), 6, "Fn::GetAtt");
    refused(&format!("{CUSTOM}      P: !Join [',']\n"), 6, "Fn::Join");
    refused(&format!("{CUSTOM}      P: !If [C, a]\n"), 6, "Fn::If");
    refused(&format!("{CUSTOM}Outputs:\n  O:\n    Value: !ToJsonString x\n"), 8, "Fn::ToJsonString (!ToJsonString)");
    refused(&format!("Conditions:\n  C: !Equals [!FindInMap [M, a, b], x]\n{CUSTOM}"), 2, "Fn::FindInMap M");
    refused(&format!("Conditions:\n  C: yes\n{CUSTOM}"), 2, "condition");
    // A single-key map named Condition is plain data in a property (an IAM statement's shape).
    parse(&format!("{CUSTOM}      P: {{Condition: {{StringEquals: {{a: b}}}}}}\n")).unwrap();
}

#[test]
fn parameter_declarations_are_checked() {
    let with = |body: &str| format!("Parameters:\n  P:\n{body}{CUSTOM}");
    refused(
        &with("    Type: AWS::SSM::Parameter::Value<Text>\n"),
        2,
        "parameter type AWS::SSM::Parameter::Value<Text>",
    );
    refused(&with("    Type: AWS::SSM::Parameter::Other\n"), 2, "parameter type AWS::SSM::Parameter::Other");
    refused(&with("    Type: Text\n"), 2, "parameter type Text");
    refused(&with("    Default: x\n"), 2, "parameter P");
    refused(&with("    Type: String\n    Colour: red\n"), 4, "Colour");
    refused(&with("    Type: Number\n    MinValue: small\n"), 4, "MinValue");
    refused(&with("    Type: String\n    AllowedPattern: '(unclosed'\n"), 4, "AllowedPattern");
    for kind in [
        "String",
        "Number",
        "List<Number>",
        "CommaDelimitedList",
        "AWS::EC2::VPC::Id",
        "List<AWS::EC2::Subnet::Id>",
        "AWS::SSM::Parameter::Name",
        "AWS::SSM::Parameter::Value<String>",
        "AWS::SSM::Parameter::Value<List<String>>",
        "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>",
    ] {
        parse(&with(&format!("    Type: {kind}\n"))).unwrap_or_else(|refusal| panic!("{kind}: {refusal}"));
    }
}

const REFERENCES: &str = "Parameters:
  Name:
    Type: String
Conditions:
  On: !Equals [!Ref Name, on]
Resources:
  Bucket:
    Type: AWS::S3::Bucket
  Handle:
    Type: AWS::CloudFormation::WaitConditionHandle
  Wait:
    Type: AWS::CloudFormation::WaitCondition
    DependsOn: Maker
    Properties:
      Handle: !Ref Handle
  Maker:
    Type: Custom::Maker
    DependsOn: [Bucket]
    Properties:
      ServiceToken: !Ref Name
      Where: !Sub '${Bucket}-${AWS::Region}-${Name}'
  User:
    Type: Custom::User
    Condition: On
    Properties:
      ServiceToken: !Ref Name
      Made: !GetAtt Maker.Out.Deep
      Data: !GetAtt [Wait, Data]
      Either: !If [On, !Sub '${Maker.Id}', !Ref AWS::NoValue]
      Own: !Sub ['${Bucket}', {Bucket: !Ref Name}]
Outputs:
  Made:
    Condition: On
    Value: !GetAtt User.Anything
    Export:
      Name: !Sub '${AWS::StackName}-made'
";

#[test]
fn dependencies_are_depends_on_and_every_resource_named() {
    let template = checks(REFERENCES, &[]);
    let of = |id| template.dependencies(id).into_iter().collect::<Vec<_>>();
    assert_eq!(of("Maker"), ["Bucket"]);
    assert_eq!(of("Wait"), ["Handle", "Maker"]);
    // Own's ${Bucket} is the Sub's own variable, not the resource.
    assert_eq!(of("User"), ["Maker", "Wait"]);
    assert_eq!(of("Bucket"), Vec::<String>::new());
    assert_eq!(of("Nobody"), Vec::<String>::new());
}

#[test]
fn names_that_resolve_to_nothing_are_refused() {
    let swap = |from: &str, to: &str| {
        assert!(REFERENCES.contains(from), "{from}");
        REFERENCES.replacen(from, to, 1)
    };
    check_refused(&swap("Handle: !Ref Handle", "Handle: !Ref Handel"), &[], 15, "Ref Handel");
    check_refused(&swap("!GetAtt Maker.Out.Deep", "!GetAtt Makr.Out"), &[], 27, "Fn::GetAtt Makr.Out");
    check_refused(&swap("!GetAtt [Wait, Data]", "!GetAtt [Wait, Result]"), &[], 28, "Fn::GetAtt Wait.Result");
    check_refused(&swap("!If [On,", "!If [Off,"), &[], 29, "Condition Off");
    check_refused(&swap("Condition: On\n    Properties", "Condition: Off\n    Properties"), &[], 22, "Condition Off");
    check_refused(&swap("DependsOn: [Bucket]", "DependsOn: [Buckets]"), &[], 16, "DependsOn Buckets");
    check_refused(&swap("${AWS::StackName}-made", "${Nothing}-made"), &[], 36, "Ref Nothing");
    check_refused(&swap("[!Ref Name, on]", "[!Ref Bucket, on]"), &[], 5, "Ref Bucket");
    check_refused(&swap("[!Ref Name, on]", "[!GetAtt Maker.Id, on]"), &[], 5, "Fn::GetAtt Maker.Id");
}

#[test]
fn get_att_of_a_resource_nobody_provisions_needs_a_stub() {
    let text = REFERENCES.replacen("!GetAtt Maker.Out.Deep", "!GetAtt Bucket.Arn", 1);
    let refusal = check_refused(&text, &[], 27, "Fn::GetAtt Bucket.Arn");
    assert!(refusal.why.contains("--stub Bucket.Arn=VALUE"), "{refusal}");
    check_refused(&text, &[("Bucket", "DomainName")], 27, "Fn::GetAtt Bucket.Arn");
    checks(&text, &[("Bucket", "Arn")]);
    let in_sub = REFERENCES.replacen("${Maker.Id}", "${Handle.Url}", 1);
    check_refused(&in_sub, &[], 29, "Fn::GetAtt Handle.Url");
}

#[test]
fn cycles_are_refused_naming_them() {
    let text = REFERENCES.replacen("DependsOn: [Bucket]", "DependsOn: [Bucket, User]", 1);
    // Wait waits for Maker, which now waits for User, which reads Wait's Data.
    let refusal = check_refused(&text, &[], 11, "dependency cycle");
    assert!(refusal.why.starts_with("Wait -> Maker -> User -> Wait:"), "{refusal}");
    let itself = format!("{CUSTOM}      Me: !Ref R\n");
    let refusal = check_refused(&itself, &[], 2, "dependency cycle");
    assert!(refusal.why.starts_with("R -> R:"), "{refusal}");
    let conditions = format!("Conditions:\n  A: !Not [!Condition B]\n  B: !And [!Condition A, !Condition A]\n{CUSTOM}");
    let refusal = check_refused(&conditions, &[], 2, "condition cycle");
    assert!(refusal.why.starts_with("A -> B -> A:"), "{refusal}");
}

struct NoResources;

impl Resources for NoResources {
    fn reference(&self, logical_id: &str) -> Result<Value, String> {
        Err(format!("{logical_id} is not played in this test"))
    }
    fn attribute(&self, logical_id: &str, attribute: &str) -> Result<Value, String> {
        Err(format!("{logical_id}.{attribute} is not played in this test"))
    }
}

fn pseudo() -> Pseudo {
    Pseudo::for_tests("eu-west-1", "play")
}

fn resolve(template: &Template, parameters: &BTreeMap<String, Value>) -> Result<BTreeMap<String, bool>, Refusal> {
    let (pseudo, none) = (pseudo(), BTreeMap::new());
    let scope = Scope { parameters, pseudo: &pseudo, conditions: &none, resources: &NoResources };
    template.resolve_conditions(&scope)
}

#[test]
fn conditions_resolve_in_the_order_they_name_each_other() {
    let text = format!(
        "Parameters:\n  Env:\n    Type: String\nConditions:\n  Either: !Or [!Condition Prod, !Condition Test]\n  Neither: !Not [!Condition Either]\n  Prod: !Equals [!Ref Env, prod]\n  Test: !Equals [test, !Ref Env]\n  Here: !And [!Condition Either, !Equals [!Ref 'AWS::Region', eu-west-1]]\n  Picked: !If [Prod, !Condition Here, !Condition Neither]\n{CUSTOM}"
    );
    let template = checks(&text, &[]);
    let given = |env: &str| BTreeMap::from([("Env".to_string(), json!(env))]);
    let prod = resolve(&template, &given("prod")).unwrap();
    let expected =
        [("Either", true), ("Here", true), ("Neither", false), ("Picked", true), ("Prod", true), ("Test", false)];
    assert_eq!(prod, expected.map(|(name, value)| (name.to_string(), value)).into_iter().collect());
    let dev = resolve(&template, &given("dev")).unwrap();
    assert_eq!((dev["Either"], dev["Neither"], dev["Picked"]), (false, true, true));
    let refusal = resolve(&template, &BTreeMap::new()).unwrap_err();
    assert_eq!((refusal.line, refusal.construct.as_str()), (7, "condition Prod"), "{refusal}");
}

const PARAMETERS: &str = "Parameters:
  Size:
    Type: String
    AllowedValues: [Small, Large]
    Default: Small
  Count:
    Type: Number
    MinValue: 1
    MaxValue: 10
  Name:
    Type: String
    MinLength: 2
    MaxLength: 4
    AllowedPattern: '[a-z]+'
    ConstraintDescription: lower-case letters
  Secret:
    Type: String
    NoEcho: true
    AllowedPattern: '(?=.*\\d).{4,}'
    Default: abc1
  Zones:
    Type: CommaDelimitedList
    AllowedValues: [a, b, c]
    Default: a, b
  Ports:
    Type: List<Number>
    Default: '80,443'
    MaxValue: 1000
";

fn bind(given: &[(&str, &str)]) -> Result<BTreeMap<String, Value>, String> {
    let template = parse(&format!("{PARAMETERS}{CUSTOM}")).unwrap();
    let mut values: BTreeMap<String, String> =
        [("Count", "3"), ("Name", "abc")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    values.extend(given.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    template.bind_parameters(&values)
}

#[test]
fn parameters_bind_given_values_over_defaults() {
    let bound = bind(&[("Size", "Large")]).unwrap();
    let expected = json!({"Size": "Large", "Count": "3", "Name": "abc", "Secret": "abc1", "Zones": ["a", "b"], "Ports": ["80", "443"]});
    assert_eq!(Value::Object(bound.into_iter().collect()), expected);
}

#[test]
fn parameters_that_break_their_constraints_are_errors() {
    let error = |given: &[(&str, &str)]| bind(given).unwrap_err();
    for (given, expected) in [
        (("Size", "Medium"), "t.yaml:2: parameter Size: \"Medium\" is not one of the AllowedValues Small, Large"),
        (("Count", "11"), "t.yaml:6: parameter Count: \"11\" is outside MinValue"),
        (("Count", "0"), "is outside MinValue"),
        (("Count", "three"), "\"three\" is not a number"),
        (("Name", "a"), "\"a\" has 1 characters"),
        (("Name", "abcde"), "\"abcde\" has 5 characters"),
        (("Name", "ab1"), "does not match the AllowedPattern [a-z]+ (lower-case letters)"),
        (("Zones", "a,d"), "parameter Zones: \"d\" is not one of"),
        (("Ports", "80,x"), "parameter Ports: \"x\" is not a number"),
        (("Ports", "80,1001"), "\"1001\" is outside"),
        (("Colour", "red"), "t.yaml: parameter Colour is not declared in the template"),
    ] {
        let message = error(&[given]);
        assert!(message.contains(expected), "{given:?}: {message}");
    }
    let secret = error(&[("Secret", "hunter")]);
    assert!(secret.contains("the value (NoEcho) does not match") && !secret.contains("hunter"), "{secret}");
    let template = parse(&format!("{PARAMETERS}{CUSTOM}")).unwrap();
    let missing = template.bind_parameters(&BTreeMap::new()).unwrap_err();
    assert_eq!(missing, "t.yaml:6: parameter Count has no value and no Default: give one with --parameter Count=VALUE");
}

fn public(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/public-templates").join(name)
}

fn load(path: &Path) -> Template {
    Template::load(path).unwrap_or_else(|refusal| panic!("{refusal}"))
}

#[test]
fn the_account_factory_loads_and_checks() {
    let template = load(&public("gasaf-aws-service-catalog-account-creation-v2.yaml"));
    template.check(&BTreeMap::new()).unwrap();
    let custom = template.resources.iter().filter(|r| is_custom(&r.resource_type)).count();
    let waits = template.resources.iter().filter(|r| r.resource_type == WAIT_CONDITION).count();
    assert_eq!((custom, waits, template.resources.len()), (6, 2, 10));
    let retained: Vec<_> = template
        .resources
        .iter()
        .filter(|r| r.deletion_policy == Policy::Retain)
        .map(|r| r.logical_id.as_str())
        .collect();
    assert_eq!(retained, ["OUDetails", "Notifier"]);
    assert_eq!(template.dependencies("MoveToOU"), BTreeSet::from(["Account".to_string(), "OUDetails".to_string()]));
}

#[test]
fn the_sns_walkthrough_and_its_update_load_and_check() {
    for name in ["sns-walkthrough-seleniumtester.json", "sns-walkthrough-seleniumtester-update.json"] {
        let template = load(&public(name));
        template.check(&BTreeMap::new()).unwrap();
        let tester = template.resource("MySeleniumTest").unwrap();
        assert_eq!((tester.resource_type.as_str(), tester.line), ("Custom::SeleniumTester", 10));
        let endpoints = tester.properties.get("endpoints").and_then(Node::as_seq).map(<[_]>::len);
        assert_eq!(endpoints, Some(if name.contains("update") { 4 } else { 3 }));
        assert_eq!(template.outputs.len(), 2);
    }
}

#[test]
fn the_getfromjson_consumer_loads_and_checks() {
    let template = load(&public("getfromjson-consumer.yml"));
    template.check(&BTreeMap::new()).unwrap();
    assert_eq!(template.resources.len(), 2);
}

#[test]
fn the_prefix_list_template_loads_with_its_ssm_parameter_and_get_azs() {
    // Refused at :61 (its AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>) and :131 (Fn::GetAZs)
    // before play read them; both are read now and warned of.
    let template =
        Template::load(&public("prefixlist-cfn-endpoint-waitcondition.yaml")).unwrap_or_else(|e| panic!("{e}"));
    template.check(&BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let warnings = template.warnings().join("\n");
    assert!(
        warnings.contains(":61: parameter LinuxAMI (AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>)"),
        "{warnings}"
    );
    assert!(warnings.contains(":131: Fn::GetAZs gives play's fixed list"), "{warnings}");
}

#[test]
fn the_ad_connector_needs_a_stub_for_its_role() {
    let template = load(&public("adconnector.cfn.yaml"));
    let refusal = template.check(&BTreeMap::new()).unwrap_err();
    assert_eq!((refusal.line, refusal.construct.as_str()), (280, "Fn::GetAtt ADConnectorLambdaRole.Arn"), "{refusal}");
    template.check(&stubs_of(&[("ADConnectorLambdaRole", "Arn")])).unwrap();
    assert_eq!(template.conditions.len(), 7);
    assert!(template.parameters.iter().any(|p| p.name == "DomainJoinUserPassword" && p.no_echo));
    let mut given: BTreeMap<String, String> = [
        ("ServiceToken", "arn:aws:sns:eu-west-1:123456789012:cfn-once"),
        ("DomainDNSName", "corp.example.com"),
        ("DomainDNSServers", "10.0.0.1,10.0.0.2"),
        ("DomainNetBiosName", "CORP"),
        ("DomainJoinUser", "joiner"),
        ("DomainJoinUserPassword", "Secr3t-pass"),
        ("LambdaS3BucketName", "my-bucket"),
        ("PrivateSubnet1ID", "subnet-1"),
        ("PrivateSubnet2ID", "subnet-2"),
        ("VPCID", "vpc-1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let bound = template.bind_parameters(&given).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(bound["LambdaLogsLogGroupRetention"], json!("14"));
    let conditions = resolve(&template, &bound).unwrap();
    assert_eq!(conditions.values().filter(|on| **on).count(), 0, "{conditions:?}");
    // The look-ahead patterns apply: a bucket name with two dots in a row is refused.
    given.insert("LambdaS3BucketName".into(), "my..bucket".into());
    let error = template.bind_parameters(&given).unwrap_err();
    assert!(error.contains("parameter LambdaS3BucketName: \"my..bucket\" does not match"), "{error}");
    given.insert("LambdaS3BucketName".into(), "my-bucket".into());
    given.insert("DomainJoinUserPassword".into(), "alllowercase".into());
    let error = template.bind_parameters(&given).unwrap_err();
    assert!(error.contains("DomainJoinUserPassword") && !error.contains("alllowercase"), "{error}");
}

#[test]
fn the_long_work_example_loads_and_checks() {
    let template = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/long-work.yaml"));
    template.check(&BTreeMap::new()).unwrap();
    let timeout = template.parameters.iter().find(|p| p.name == "WorkTimeout").unwrap();
    assert_eq!((timeout.kind.as_str(), timeout.min_value, timeout.max_value), ("Number", Some(1.0), Some(43200.0)));
    let given = |timeout: &str| {
        BTreeMap::from([
            ("ServiceToken".to_string(), "t".to_string()),
            ("WorkTimeout".to_string(), timeout.to_string()),
        ])
    };
    assert_eq!(template.bind_parameters(&given("7200")).unwrap()["WorkTimeout"], json!("7200"));
    assert!(template.bind_parameters(&given("43201")).is_err());
    assert_eq!(template.dependencies("BackfillReport"), BTreeSet::from(["BackfillDone".to_string()]));
}

#[test]
fn a_missing_file_is_a_refusal_naming_it() {
    let refusal = Template::load(Path::new("no/such/template.yaml")).unwrap_err();
    assert!(
        refusal.to_string().starts_with("no/such/template.yaml:1: template: cannot read the template"),
        "{refusal}"
    );
}

/// A custom resource with a wait condition handle and `attributes` (indented as attributes).
fn wait_resource(attributes: &str) -> String {
    format!(
        "Parameters:\n  Long:\n    Type: Number\n    Default: 7200\nResources:\n  BackfillHandle:\n    Type: AWS::CloudFormation::WaitConditionHandle\n  Backfill:\n    Type: Custom::Echo\n{attributes}    Properties:\n      ServiceToken: t\n      CfnOnceWaitHandle: !Ref BackfillHandle\n      CfnOnceWaitTimeout: 7200\n  Other:\n    Type: Custom::Echo\n    DeletionPolicy: Retain\n    Properties:\n      ServiceToken: t\n      CfnOnceWaitTimeout: !Ref Long\n"
    )
}

#[test]
fn a_retained_resource_beside_a_wait_handle_is_warned_of_by_name_bound_and_remedy() {
    let template = checks(&wait_resource("    DeletionPolicy: Retain\n"), &[]);
    let warnings = template.warnings();
    assert_eq!(warnings.len(), 1, "only the resource with a handle: {warnings:?}");
    let warning = &warnings[0];
    assert!(warning.starts_with("t.yaml:8: Backfill: DeletionPolicy Retain beside a CfnOnceWaitHandle: "), "{warning}");
    for said in ["sends Backfill no Delete", "7200 s here", "12 hours", "use DeletionPolicy Delete"] {
        assert!(warning.contains(said), "says {said:?}: {warning}");
    }
    assert!(!warning.ends_with('.'), "{warning}");
    // A timeout given by a parameter is named as such.
    let by_parameter = wait_resource("    DeletionPolicy: Retain\n")
        .replace("CfnOnceWaitTimeout: 7200", "CfnOnceWaitTimeout: !Ref Long");
    let warnings = checks(&by_parameter, &[]).warnings();
    assert!(warnings[0].contains("as its parameter says"), "{warnings:?}");
}

#[test]
fn a_deleted_or_replace_retained_resource_beside_a_wait_handle_is_not_warned_of() {
    // A Delete stops the work; a replacement never leaves one behind (the Update naming a new
    // handle closes the old work itself).
    for attributes in ["", "    DeletionPolicy: Delete\n", "    UpdateReplacePolicy: Retain\n"] {
        let warnings = checks(&wait_resource(attributes), &[]).warnings();
        assert!(warnings.is_empty(), "{attributes:?}: {warnings:?}");
    }
}
