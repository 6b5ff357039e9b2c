//! Tests of what CDK templates bring: Mappings and their binding, Rules evaluated before
//! anything is sent, Systems Manager parameter types, imports, nulls; and the templates
//! `make cdk-synth` checked in, parsed and checked unedited.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::super::{Refusal, Template};
use crate::intrinsics::{Pseudo, Resources, Scope, evaluate};

struct Nothing;

impl Resources for Nothing {
    fn reference(&self, logical_id: &str) -> Result<Value, String> {
        Ok(json!(format!("{logical_id}-id")))
    }
    fn attribute(&self, logical_id: &str, attribute: &str) -> Result<Value, String> {
        Err(format!("{logical_id}.{attribute} is not known here"))
    }
}

fn parse(text: &str) -> Result<Template, Refusal> {
    Template::parse(Path::new("t.yaml"), text)
}

fn cdk(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/play/cdk").join(name)
}

/// The template's conditions (and so its Rules) resolved with `given` parameters in `region`.
fn resolve(template: &Template, given: &[(&str, &str)], region: &str) -> Result<BTreeMap<String, bool>, Refusal> {
    let given: BTreeMap<String, String> = given.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let parameters = template.bind_parameters(&given).unwrap_or_else(|e| panic!("{e}"));
    let pseudo = Pseudo::for_tests(region, "s1");
    let scope = Scope { parameters: &parameters, pseudo: &pseudo, conditions: &BTreeMap::new(), resources: &Nothing };
    template.resolve_conditions(&scope)
}

/// A resource's properties evaluated, with `given` parameters in `region`.
fn properties(template: &Template, logical_id: &str, given: &[(&str, &str)], region: &str) -> Value {
    let given: BTreeMap<String, String> = given.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let parameters = template.bind_parameters(&given).unwrap_or_else(|e| panic!("{e}"));
    let pseudo = Pseudo::for_tests(region, "s1");
    let conditions =
        resolve(template, &given.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>(), region)
            .unwrap_or_else(|e| panic!("{e}"));
    let scope = Scope { parameters: &parameters, pseudo: &pseudo, conditions: &conditions, resources: &Nothing };
    let resource = template.resource(logical_id).expect("the resource");
    evaluate(&resource.properties, &scope).unwrap_or_else(|e| panic!("{e}")).expect("a value")
}

#[test]
fn the_synthesized_cdk_template_parses_checks_and_evaluates_unedited() {
    let template = Template::load(&cdk("CdkPlayStack.template.json")).unwrap_or_else(|e| panic!("{e}"));
    template.check(&BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        template.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["PremiumOnlyInUsEast", "CheckBootstrapVersion"]
    );
    let token = [("ServiceToken", "arn:aws:sns:us-east-2:123456789012:t")];
    // CDKMetadataAvailable holds in us-east-2: AWS::CDK::Metadata is declared, and not provisioned.
    assert!(resolve(&template, &token, "us-east-2").unwrap()["CDKMetadataAvailable"]);
    let greeter = properties(&template, "Greeter", &token, "us-east-2");
    assert_eq!(greeter["Size"], "medium", "Fn::FindInMap [SizeByRegion, AWS::Region, Size]");
    assert_eq!(greeter["Zone"], "us-east-2a", "Fn::Select [0, Fn::GetAZs '']");
    assert_eq!(greeter["Subnets"], json!(["10.0.0.0/24", "10.0.1.0/24"]), "Fn::Cidr [10.0.0.0/16, 2, 8]");
    assert_eq!(greeter["Banner"], "aGVsbG8gZnJvbSBzMQ==", "Fn::Base64 of 'hello from s1'");
    let warnings = template.warnings().join("\n");
    assert!(warnings.contains("parameter BootstrapVersion (AWS::SSM::Parameter::Value<String>)"), "{warnings}");
    assert!(warnings.contains("\"/cdk-bootstrap/hnb659fds/version\""), "{warnings}");
    // The update CDK synthesized with greeting=v2 differs in that one property.
    let v2 = Template::load(&cdk("CdkPlayStack-v2.template.json")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(properties(&v2, "Greeter", &token, "us-east-2")["Greeting"], "v2");
}

#[test]
fn a_failing_assertion_refuses_with_its_description() {
    let template = Template::load(&cdk("CdkPlayStack.template.json")).unwrap_or_else(|e| panic!("{e}"));
    let token = ("ServiceToken", "t");
    // The rule's condition is false for the standard tier: it does not take effect.
    resolve(&template, &[token], "eu-west-1").unwrap_or_else(|e| panic!("{e}"));
    resolve(&template, &[token, ("Tier", "premium")], "us-east-2").unwrap_or_else(|e| panic!("{e}"));
    let refusal = resolve(&template, &[token, ("Tier", "premium")], "eu-west-1").unwrap_err();
    assert_eq!(refusal.construct, "rule PremiumOnlyInUsEast");
    assert!(refusal.why.starts_with("The premium tier is offered in us-east-1 and us-east-2 only"), "{refusal}");
    // CDK's bootstrap check: a version the template cannot use is refused with CDK's message.
    let refusal = resolve(&template, &[token, ("BootstrapVersion", "5")], "us-east-2").unwrap_err();
    assert_eq!(refusal.construct, "rule CheckBootstrapVersion");
    assert!(refusal.why.starts_with("CDK bootstrap stack version 6 required."), "{refusal}");
    resolve(&template, &[token, ("BootstrapVersion", "21")], "us-east-2").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn rule_functions_evaluate_and_account_reads_are_refused() {
    let rule = |assert: &str| {
        format!(
            "Parameters:\n  Env: {{Type: String, Default: prod}}\n  Zones: {{Type: CommaDelimitedList, Default: 'a,b'}}\nRules:\n  R:\n    Assertions:\n      - Assert: {assert}\n        AssertDescription: no\nResources:\n  X: {{Type: Custom::X, Properties: {{ServiceToken: t}}}}\n"
        )
    };
    let holds = |assert: &str| {
        let template = parse(&rule(assert)).unwrap_or_else(|e| panic!("{assert}: {e}"));
        template.check(&BTreeMap::new()).unwrap_or_else(|e| panic!("{assert}: {e}"));
        resolve(&template, &[], "us-east-2").is_ok()
    };
    assert!(holds("!Equals [!Ref Env, prod]"));
    assert!(!holds("!Not [!Equals [!Ref Env, prod]]"));
    assert!(holds("{'Fn::Contains': [[dev, prod], !Ref Env]}"));
    assert!(!holds("{'Fn::Contains': [[dev], !Ref Env]}"));
    assert!(holds("{'Fn::EachMemberIn': [!Ref Zones, [a, b, c]]}"));
    assert!(!holds("{'Fn::EachMemberIn': [!Ref Zones, [a]]}"));
    assert!(holds("{'Fn::EachMemberEquals': [[prod, prod], !Ref Env]}"));
    assert!(!holds("{'Fn::EachMemberEquals': [!Ref Zones, a]}"));
    assert!(holds("!And [!Equals [!Ref AWS::Region, us-east-2], !Or [!Equals [a, b], !Equals [a, a]]]"));
    for (assert, construct) in [
        ("{'Fn::RefAll': 'AWS::EC2::VPC::Id'}", "Fn::RefAll"),
        ("{'Fn::EachMemberIn': [{'Fn::ValueOfAll': ['AWS::EC2::Subnet::Id', VpcId]}, [a]]}", "Fn::ValueOfAll"),
        ("!Equals [!Sub x, x]", "Fn::Sub"),
    ] {
        let refusal = parse(&rule(assert)).unwrap_err();
        assert_eq!((refusal.line, refusal.construct.as_str()), (7, construct), "{refusal}");
    }
    // A rule reads parameters, not resources.
    let refusal = parse(&rule("!Equals [!Ref X, x]")).unwrap().check(&BTreeMap::new()).unwrap_err();
    assert_eq!(refusal.construct, "Ref X");
}

#[test]
fn nulls_are_refused_with_cloudformations_path() {
    for (text, line, pointer) in [
        (
            "Resources:\n  R:\n    Type: Custom::X\n    Properties:\n      ServiceToken: t\n      Size:\n",
            6,
            "[/Resources/R/Properties/Size]",
        ),
        (
            "Resources:\n  R:\n    Type: Custom::X\n    Properties:\n      List: [a, ~]\n",
            5,
            "[/Resources/R/Properties/List/1]",
        ),
        ("{\"Resources\": {\"R\": {\"Type\": \"Custom::X\", \"Properties\": null}}}", 1, "[/Resources/R/Properties]"),
        ("Outputs:\n  O:\n    Value: null\n", 3, "[/Outputs/O/Value]"),
    ] {
        let refusal = parse(text).unwrap_err();
        assert_eq!((refusal.line, refusal.construct.as_str()), (line, pointer), "{refusal}");
        assert!(refusal.why.starts_with("'null' values are not allowed in templates"), "{refusal}");
    }
    // The text null, quoted, is a value.
    parse("Resources:\n  R:\n    Type: Custom::X\n    Properties:\n      ServiceToken: t\n      Size: 'null'\n")
        .unwrap();
}

#[test]
fn mappings_are_checked_and_find_in_map_is_bound() {
    let with = |mappings: &str, value: &str| {
        format!(
            "Mappings:\n{mappings}Resources:\n  R:\n    Type: Custom::X\n    Properties:\n      ServiceToken: t\n      V: {value}\n"
        )
    };
    let template =
        parse(&with("  M:\n    eu-west-1: {Size: small, Zones: [a, b]}\n", "!FindInMap [M, !Ref AWS::Region, Zones]"))
            .unwrap();
    assert_eq!(properties(&template, "R", &[], "eu-west-1")["V"], json!(["a", "b"]));
    let refusal = parse(&with("  M:\n    k: {s: !Ref AWS::Region}\n", "x")).unwrap_err();
    assert_eq!(refusal.construct, "mapping M.k.s");
    let refusal = parse(&with("  M: {k: {s: v}}\n", "!FindInMap [Other, k, s]")).unwrap_err();
    assert_eq!((refusal.line, refusal.construct.as_str()), (8, "Fn::FindInMap Other"));
    // The DefaultValue form needs the AWS::LanguageExtensions transform.
    let refusal = parse(&with("  M: {k: {s: v}}\n", "!FindInMap [M, k, s, {DefaultValue: d}]")).unwrap_err();
    assert_eq!(refusal.construct, "Fn::FindInMap DefaultValue");
    // A template cannot write the bound form itself.
    let refusal =
        parse(&with("  M: {k: {s: v}}\n", "{'Fn::FindInMap': {Arguments: [M, k, s], Mappings: {}}}")).unwrap_err();
    assert_eq!(refusal.construct, "Fn::FindInMap");
}

#[test]
fn imports_are_bound_and_a_missing_one_is_refused() {
    let text = "Parameters:\n  Env: {Type: String, Default: prod}\nResources:\n  R:\n    Type: Custom::X\n    Properties:\n      ServiceToken: t\n      Vpc: !ImportValue shared-vpc\n      Db: !ImportValue {'Fn::Sub': '${Env}-db'}\n";
    let mut template = parse(text).unwrap();
    let refusal = template.clone().bind_imports(&BTreeMap::new()).unwrap_err();
    assert_eq!((refusal.line, refusal.construct.as_str()), (8, "Fn::ImportValue shared-vpc"));
    assert!(refusal.why.contains("--import shared-vpc=VALUE"), "{refusal}");
    let exports =
        BTreeMap::from([("shared-vpc".to_string(), "vpc-1".to_string()), ("prod-db".to_string(), "db-1".to_string())]);
    template.bind_imports(&exports).unwrap();
    template.check(&BTreeMap::new()).unwrap();
    let values = properties(&template, "R", &[], "us-east-2");
    assert_eq!((values["Vpc"].as_str(), values["Db"].as_str()), (Some("vpc-1"), Some("db-1")));
}

#[test]
fn the_cdk_nested_provider_stacks_parse_and_check_unedited() {
    let parent = Template::load(&cdk("CdkProviderStack.template.json")).unwrap_or_else(|e| panic!("{e}"));
    let nested = "ProviderStackNestedStackProviderStackNestedStackResource4CA0AF4D";
    assert_eq!(parent.resource(nested).map(|r| r.resource_type.as_str()), Some("AWS::CloudFormation::Stack"));
    assert_eq!(
        parent.resource("Greeting").map(|r| r.resource_type.as_str()),
        Some("AWS::CloudFormation::CustomResource")
    );
    // The ServiceToken is the nested stack's Output: checked against the nested template when
    // play reads it (run::prepare), so the parent checks without a stub.
    parent.check(&BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let attribute = "CdkProviderStackProviderframeworkonEvent69112EECArn";
    assert_eq!(parent.nested_outputs_read(nested), [attribute]);
    let child = Template::load(&cdk("CdkProviderStack51805E60.nested.template.json")).unwrap_or_else(|e| panic!("{e}"));
    let types: Vec<&str> = child.resources.iter().map(|r| r.resource_type.as_str()).collect();
    assert!(types.contains(&"AWS::Lambda::Function") && types.contains(&"AWS::IAM::Role"), "{types:?}");
    // The child's GetAtt of its Lambda functions' Arn is stubbed as a user would.
    let stubs: BTreeMap<(String, String), String> = child
        .resources
        .iter()
        .filter(|r| r.resource_type == "AWS::Lambda::Function" || r.resource_type == "AWS::IAM::Role")
        .map(|r| ((r.logical_id.clone(), "Arn".to_string()), "arn".to_string()))
        .collect();
    child.check(&stubs).unwrap_or_else(|e| panic!("{e}"));
}
