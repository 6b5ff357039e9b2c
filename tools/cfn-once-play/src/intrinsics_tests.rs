//! Tests of each intrinsic function's value and of each way it fails, on nodes read from YAML
//! as a template writes them.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::yaml;

/// The engine's answers in these tests: two resources with a physical id and attributes.
struct Played;

impl Resources for Played {
    fn reference(&self, logical_id: &str) -> Result<Value, String> {
        match logical_id {
            "Maker" => Ok(json!("maker-1")),
            "Handle" => Ok(json!("https://handle")),
            other => Err(format!("{other} is not created yet")),
        }
    }
    fn attribute(&self, logical_id: &str, attribute: &str) -> Result<Value, String> {
        match (logical_id, attribute) {
            ("Maker", "Id") => Ok(json!("id-7")),
            ("Maker", "Count") => Ok(json!(3)),
            ("Maker", "List") => Ok(json!(["x", "y"])),
            ("Stack", "Outputs.Name") => Ok(json!("nested")),
            _ => Err(format!("{logical_id} has no attribute {attribute}")),
        }
    }
}

fn pseudo() -> Pseudo {
    Pseudo::for_tests("eu-west-1", "play")
}

fn with_scope<T>(run: impl FnOnce(&Scope) -> T) -> T {
    let parameters = BTreeMap::from([
        ("Name".to_string(), json!("web")),
        ("Zones".to_string(), json!(["a", "b", "c"])),
        ("Csv".to_string(), json!("1,2,3")),
    ]);
    let conditions = BTreeMap::from([("On".to_string(), true), ("Off".to_string(), false)]);
    let pseudo = pseudo();
    run(&Scope { parameters: &parameters, pseudo: &pseudo, conditions: &conditions, resources: &Played })
}

fn node(text: &str) -> Node {
    yaml::parse(Path::new("t.yaml"), text).unwrap_or_else(|refusal| panic!("{refusal}"))
}

/// The value of `text`, a YAML value as a property would hold it.
fn value(text: &str) -> Option<Value> {
    with_scope(|scope| evaluate(&node(text), scope)).unwrap_or_else(|error| panic!("{text}: {error}"))
}

/// The error `text` evaluates to, its line and message.
fn error(text: &str) -> EvalError {
    match with_scope(|scope| evaluate(&node(text), scope)) {
        Ok(value) => panic!("{text}: evaluated to {value:?}, expected an error"),
        Err(error) => error,
    }
}

fn condition(text: &str) -> Result<bool, EvalError> {
    with_scope(|scope| evaluate_condition(&node(text), scope))
}

#[test]
fn literals_and_collections() {
    assert_eq!(value("plain"), Some(json!("plain")));
    assert_eq!(value("1"), Some(json!("1")));
    assert_eq!(value("~"), Some(Value::Null));
    assert_eq!(value("[a, 2, {b: true}]"), Some(json!(["a", "2", {"b": "true"}])));
}

#[test]
fn no_value_drops_the_entry_or_item_that_holds_it() {
    assert_eq!(value("!Ref AWS::NoValue"), None);
    assert_eq!(value("{a: 1, b: !Ref AWS::NoValue}"), Some(json!({"a": "1"})));
    assert_eq!(value("[a, !Ref AWS::NoValue, c]"), Some(json!(["a", "c"])));
    assert_eq!(value("{a: !If [Off, x, !Ref AWS::NoValue]}"), Some(json!({})));
}

#[test]
fn ref_reads_parameters_pseudo_parameters_and_resources() {
    assert_eq!(value("!Ref Name"), Some(json!("web")));
    assert_eq!(value("{Ref: Zones}"), Some(json!(["a", "b", "c"])));
    assert_eq!(value("!Ref Maker"), Some(json!("maker-1")));
    for (name, expected) in [
        ("AWS::Region", "eu-west-1"),
        ("AWS::AccountId", "123456789012"),
        ("AWS::StackName", "play"),
        ("AWS::StackId", "arn:aws:cloudformation:eu-west-1:123456789012:stack/play/1"),
        ("AWS::Partition", "aws"),
        ("AWS::URLSuffix", "amazonaws.com"),
    ] {
        assert_eq!(value(&format!("!Ref {name}")), Some(json!(expected)), "{name}");
    }
    let unknown = error("a: 1\nb: !Ref Later\n");
    assert_eq!((unknown.line, unknown.message.as_str()), (2, "Later is not created yet"));
    assert_eq!(unknown.to_string(), "line 2: Later is not created yet");
    assert!(error("!Ref AWS::NotificationARNs").message.contains("not supported"));
    assert!(error("!Ref [a]").message.contains("Ref takes a name"));
}

#[test]
fn get_att_in_both_forms_splits_at_the_first_dot() {
    assert_eq!(value("!GetAtt Maker.Id"), Some(json!("id-7")));
    assert_eq!(value("{'Fn::GetAtt': [Maker, Count]}"), Some(json!(3)));
    assert_eq!(value("!GetAtt Stack.Outputs.Name"), Some(json!("nested")));
    assert_eq!(error("\n\n!GetAtt Maker.Nope").line, 3);
    assert!(error("!GetAtt Maker").message.contains("Logical.Attribute"));
}

#[test]
fn sub_replaces_names_attributes_and_keeps_escaped_literals() {
    assert_eq!(
        value("!Sub 'arn:${AWS::Partition}:s3:::${Name}-${AWS::Region}/${Maker}/${Maker.Id}'"),
        Some(json!("arn:aws:s3:::web-eu-west-1/maker-1/id-7"))
    );
    assert_eq!(value("!Sub '${!Literal}-${Name}-${!Another}'"), Some(json!("${Literal}-web-${Another}")));
    assert_eq!(value("!Sub 'count ${Maker.Count}'"), Some(json!("count 3")));
    assert_eq!(value("!Sub ['${Name}.${Domain}', {Domain: !Ref Maker, Name: own}]"), Some(json!("own.maker-1")));
    assert_eq!(value("!Sub no variables"), Some(json!("no variables")));
    assert!(error("!Sub '${Zones}'").message.contains("is a list"));
    assert!(error("!Sub '${Maker.List}'").message.contains("is a list"));
    assert!(error("!Sub '${AWS::NoValue}'").message.contains("AWS::NoValue"));
    assert!(error("!Sub 'a ${b'").message.contains("without a closing"));
    assert!(error("!Sub [a]").message.contains("Fn::Sub takes"));
}

#[test]
fn sub_parts_split_text_from_variables() {
    assert_eq!(
        sub_parts("a${B}c${!D}${E.F}").unwrap(),
        [SubPart::Text("a".into()), SubPart::Variable("B"), SubPart::Text("c${D}".into()), SubPart::Variable("E.F")]
    );
    assert!(sub_parts("${}").is_err());
}

#[test]
fn join_select_and_split() {
    assert_eq!(value("!Join ['-', [a, !Ref Name, !GetAtt Maker.Count]]"), Some(json!("a-web-3")));
    assert_eq!(value("!Join [',', !Ref Zones]"), Some(json!("a,b,c")));
    assert_eq!(value("!Join ['', [a, !Ref AWS::NoValue, b]]"), Some(json!("ab")));
    assert!(error("!Join [',', !Ref Name]").message.contains("not a list"));
    assert!(error("!Join [',', [[a]]]").message.contains("not text"));
    assert_eq!(value("!Select [1, !Ref Zones]"), Some(json!("b")));
    assert_eq!(value("!Select ['2', [x, y, z]]"), Some(json!("z")));
    assert_eq!(value("!Select [0, !Split [',', !Ref Csv]]"), Some(json!("1")));
    assert!(error("!Select [3, !Ref Zones]").message.contains("past the list's 3 items"));
    assert!(error("!Select [one, !Ref Zones]").message.contains("not a whole number"));
    assert_eq!(value("!Split ['/', 'a/b//c']"), Some(json!(["a", "b", "", "c"])));
    assert!(error("!Split ['', abc]").message.contains("delimiter is empty"));
}

#[test]
fn if_picks_a_branch_by_condition() {
    assert_eq!(value("!If [On, yes, no]"), Some(json!("yes")));
    assert_eq!(value("!If [Off, yes, !Ref Name]"), Some(json!("web")));
    assert!(error("!If [Unknown, a, b]").message.contains("not declared"));
    assert!(error("!If [On, a]").message.contains("Fn::If takes"));
}

#[test]
fn functions_outside_the_list_do_not_evaluate() {
    assert!(error("!Length [a]").message.contains("Fn::Length is not evaluated"));
    assert!(error("!Equals [a, a]").message.contains("not evaluated"));
}

#[test]
fn conditions_evaluate() {
    assert_eq!(condition("!Equals [!Ref Name, web]"), Ok(true));
    assert_eq!(condition("!Equals [1, '1']"), Ok(true));
    assert_eq!(condition("!Equals [!Ref Zones, [a, b, c]]"), Ok(true));
    assert_eq!(condition("!Not [!Equals [!Ref Name, web]]"), Ok(false));
    assert_eq!(condition("!And [!Condition On, !Condition Off]"), Ok(false));
    assert_eq!(condition("!Or [!Condition On, !Condition Off]"), Ok(true));
    assert_eq!(condition("!Condition Off"), Ok(false));
    assert_eq!(condition("!If [Off, !Condition On, !Not [!Condition On]]"), Ok(false));
    assert!(condition("!And [!Condition On]").unwrap_err().message.contains("2 to 10"));
    assert!(condition("!Condition Nope").unwrap_err().message.contains("not declared"));
    assert!(condition("!Equals [!Ref AWS::NoValue, a]").unwrap_err().message.contains("NoValue"));
    assert_eq!(condition("\nplain").unwrap_err().line, 2);
}

#[test]
fn properties_are_stringified_as_cloudformation_sends_them() {
    let value = json!({"n": 1, "f": 2.5, "b": false, "z": null, "l": [1, {"t": true}], "s": "x"});
    let expected = json!({"n": "1", "f": "2.5", "b": "false", "z": null, "l": ["1", {"t": "true"}], "s": "x"});
    assert_eq!(to_properties(value), expected);
}

#[test]
fn scan_reports_what_a_value_names() {
    let text = "a: !Ref Name\nb: !Sub ['${Maker.Id}${Own}${AWS::Region}${Other}', {Own: !Ref Handle}]\nc: !If [On, !GetAtt [W, Data], x]\n";
    let root = node(text);
    let mut found = Vec::new();
    scan(Path::new("t.yaml"), &root, Place::Value, &mut |mention| found.push(mention)).unwrap();
    assert_eq!(
        found,
        [
            Mention::Ref { name: "Name", line: 1 },
            Mention::Ref { name: "Handle", line: 2 },
            Mention::GetAtt { logical_id: "Maker", attribute: "Id", line: 2 },
            Mention::Ref { name: "Other", line: 2 },
            Mention::Condition { name: "On", line: 3 },
            Mention::GetAtt { logical_id: "W", attribute: "Data", line: 3 },
        ]
    );
}

#[test]
fn base64_get_azs_and_cidr_evaluate() {
    assert_eq!(value("!Base64 'hello world'"), Some(json!("aGVsbG8gd29ybGQ=")));
    assert_eq!(value("!Base64 {'Fn::Sub': '${Name}'}"), Some(json!("d2Vi")));
    // "Specifying an empty string is equivalent to specifying AWS::Region" (the User Guide).
    assert_eq!(value("!GetAZs ''"), Some(json!(["eu-west-1a", "eu-west-1b", "eu-west-1c"])));
    assert_eq!(value("!GetAZs us-east-1"), Some(json!(["us-east-1a", "us-east-1b", "us-east-1c"])));
    assert_eq!(value("!Select [1, !GetAZs {Ref: AWS::Region}]"), Some(json!("eu-west-1b")));
    // The User Guide's example: "6 CIDRs with a subnet mask /27 inside from a CIDR with a mask of /24".
    assert_eq!(
        value("!Cidr ['192.168.0.0/24', 6, 5]"),
        Some(json!([
            "192.168.0.0/27",
            "192.168.0.32/27",
            "192.168.0.64/27",
            "192.168.0.96/27",
            "192.168.0.128/27",
            "192.168.0.160/27"
        ]))
    );
    // "specifying a value 8 for this parameter will create a CIDR with a mask of /24".
    assert_eq!(value("!Cidr ['10.0.0.0/16', '2', '8']"), Some(json!(["10.0.0.0/24", "10.0.1.0/24"])));
    // IPv6, as the Guide's second example splits a VPC's block into /64s.
    assert_eq!(
        value("!Cidr ['2001:db8:1234:1a00::/56', 2, 64]"),
        Some(json!(["2001:db8:1234:1a00::/64", "2001:db8:1234:1a01::/64"]))
    );
    // Host bits in the block start from its network address.
    assert_eq!(value("!Cidr ['10.0.3.7/16', 1, 8]"), Some(json!(["10.0.0.0/24"])));
    for (text, says) in [
        ("!Cidr ['10.0.0.0/24', 9, 5]", "holds 8 blocks of /27, fewer than the count 9"),
        ("!Cidr ['10.0.0.0/24', 0, 5]", "count \"0\" is not a whole number from 1 to 256"),
        ("!Cidr ['10.0.0.0/24', 257, 1]", "from 1 to 256"),
        ("!Cidr ['10.0.0.0/24', 1, 9]", "more than the 8 host bits"),
        ("!Cidr ['10.0.0.0', 1, 8]", "not a CIDR block"),
        ("!Cidr ['nope/8', 1, 8]", "not an IPv4 or IPv6 address"),
    ] {
        let message = error(text).message;
        assert!(message.contains(says), "{text}: {message}");
    }
}

#[test]
fn an_import_without_exports_names_the_flag() {
    let message = error("!ImportValue shared").message;
    assert_eq!(message, "No export named shared found: give its value with --import shared=VALUE");
}
