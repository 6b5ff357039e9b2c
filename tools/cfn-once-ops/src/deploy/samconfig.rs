//! The SAM CLI configuration `cfn-once deploy` writes: one environment per stack, as
//! `samconfig.toml` has them, every value derived from [`Facts`]. The account id is written only
//! where an ARN needs it (the topics in `ServiceTopicArns`, the example's `ServiceToken`, the
//! example table's ARN), each from the one `--account`; `SecondaryDelaySeconds` is one value for
//! both regional stacks; `ServiceTopicArns` lists every customer region's topic.

use super::{Control, Facts};

/// The templates a stack is made from, as SAM builds and deploys them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// The `--config-env` name: `lease-table`, `primary`, `secondary`, `customer-<region>`,
    /// `example`, `long-work`, `arc`.
    pub name: String,
    /// The source template, `infra/<x>.yaml`.
    pub template: String,
    /// For a template with a function: where `sam build` puts it (`.aws-sam/build-<x>`), whose
    /// `template.yaml` is deployed. `None`: the source template is deployed as it is.
    pub build_dir: Option<String>,
    pub stack_name: String,
    pub region: String,
    /// `CAPABILITY_IAM` for the stacks that create IAM roles.
    pub capabilities: Option<&'static str>,
    /// The parameter overrides, in order.
    pub parameters: Vec<(String, String)>,
}

impl Environment {
    /// The template `sam deploy` deploys: the built one, or the source.
    pub fn deployed_template(&self) -> String {
        match &self.build_dir {
            Some(dir) => format!("{dir}/template.yaml"),
            None => self.template.clone(),
        }
    }
}

/// Every environment the facts deploy, in the order the plan runs them, and the `arc`
/// environment last when `--control arc` (deployed by hand first: the regional stacks need its
/// outputs).
pub fn environments(facts: &Facts) -> Vec<Environment> {
    let mut all = vec![lease_table(facts), regional(facts, "primary"), regional(facts, "secondary")];
    all.extend(facts.customer_regions.iter().map(|region| customer(facts, region)));
    if facts.examples {
        let token = facts.topic_arn(&facts.customer_regions[0]);
        for (name, template) in [("example", "infra/example.yaml"), ("long-work", "infra/long-work.yaml")] {
            all.push(Environment {
                name: name.into(),
                template: template.into(),
                build_dir: None,
                stack_name: format!("{}-{name}", facts.installation),
                region: facts.customer_regions[0].clone(),
                capabilities: None,
                parameters: vec![("ServiceToken".into(), token.clone())],
            });
        }
    }
    if matches!(facts.control, Control::Arc { .. }) {
        all.push(Environment {
            name: "arc".into(),
            template: "infra/arc.yaml".into(),
            build_dir: None,
            stack_name: format!("{}-arc", facts.installation),
            region: "us-west-2".into(),
            capabilities: None,
            parameters: pairs(&[
                ("Name", &facts.installation),
                ("PrimaryRegion", &facts.primary),
                ("SecondaryRegion", &facts.secondary),
            ]),
        });
    }
    all
}

fn alarm(facts: &Facts) -> (String, String) {
    match (&facts.alarm_topic_arn, &facts.alarm_email) {
        (Some(topic), _) => ("AlarmTopicArn".into(), topic.clone()),
        (None, email) => ("AlarmEmail".into(), email.clone().unwrap_or_default()),
    }
}

fn pairs(values: &[(&str, &str)]) -> Vec<(String, String)> {
    values.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn lease_table(facts: &Facts) -> Environment {
    let mut parameters = pairs(&[
        ("TableName", &facts.table),
        ("ReplicaRegion", &facts.secondary),
        ("WitnessRegion", &facts.witness),
        ("Installation", &facts.installation),
    ]);
    parameters.push(alarm(facts));
    Environment {
        name: "lease-table".into(),
        template: "infra/lease-table.yaml".into(),
        build_dir: Some(".aws-sam/build-lease-table".into()),
        stack_name: format!("{}-lease-table", facts.installation),
        region: facts.primary.clone(),
        capabilities: Some("CAPABILITY_IAM"),
        parameters,
    }
}

fn regional(facts: &Facts, role: &str) -> Environment {
    let (region, peer) = match role {
        "primary" => (&facts.primary, &facts.secondary),
        _ => (&facts.secondary, &facts.primary),
    };
    let delay = facts.secondary_delay_s.to_string();
    let mut parameters = pairs(&[
        ("Role", role),
        ("Installation", &facts.installation),
        ("PeerRegion", peer),
        ("RawMessageDelivery", "false"),
        ("SecondaryDelaySeconds", &delay),
        ("TableName", &facts.table),
        ("ServiceTopicArns", &facts.topic_arns().join(",")),
    ]);
    parameters.push(alarm(facts));
    if let Some(role_arn) = &facts.operator_role_arn {
        parameters.push(("RedrivePrincipalArns".into(), role_arn.clone()));
    }
    if facts.examples {
        // The example stack's table, which Custom::DynamoDBItem writes (infra/example.yaml).
        let table = "cfn-once-example-settings";
        let arn = format!("arn:aws:dynamodb:{}:{}:table/{table}", facts.customer_regions[0], facts.account);
        parameters.extend(pairs(&[("ItemTables", table), ("ItemTableArns", &arn)]));
    }
    if let Control::Arc { endpoints, primary_routing_control_arn, secondary_routing_control_arn } = &facts.control {
        let routing_control =
            if role == "primary" { primary_routing_control_arn } else { secondary_routing_control_arn };
        parameters.extend(pairs(&[
            ("Control", "arc"),
            ("ArcEndpoints", endpoints),
            ("ArcRoutingControlArn", routing_control),
        ]));
    }
    Environment {
        name: role.into(),
        template: "infra/regional.yaml".into(),
        // The secondary deploys the primary's build: one template, one build.
        build_dir: Some(".aws-sam/build-regional".into()),
        stack_name: format!("{}-{role}", facts.installation),
        region: region.clone(),
        capabilities: Some("CAPABILITY_IAM"),
        parameters,
    }
}

fn customer(facts: &Facts, region: &str) -> Environment {
    let mut parameters = pairs(&[
        ("TopicName", &facts.topic_name),
        ("Installation", &facts.installation),
        ("PrimaryRegion", &facts.primary),
        ("SecondaryRegion", &facts.secondary),
        ("RawMessageDelivery", "false"),
    ]);
    parameters.push(alarm(facts));
    if let Some(role_arn) = &facts.operator_role_arn {
        parameters.push(("OperatorPrincipalArns".into(), role_arn.clone()));
    }
    Environment {
        name: format!("customer-{region}"),
        template: "infra/customer.yaml".into(),
        build_dir: None,
        stack_name: format!("{}-customer", facts.installation),
        region: region.to_owned(),
        capabilities: None,
        parameters,
    }
}

/// The configuration file's text: a header naming the facts, then each environment's `build`
/// (templates with a function), `validate` (so that `sam validate --lint --config-env X` lints
/// the environment's template) and `deploy` tables.
pub fn render(facts: &Facts, environments: &[Environment], command: &str) -> String {
    let mut text = format!(
        "# Written by `{command}`.\n# Edit the facts and run it again rather than this file: every value here is derived from\n\
         # the account {account}, the regions (primary {primary}, secondary {secondary}, witness {witness}),\n\
         # the customer regions ({customers}) and who is paged.\nversion = 0.1\n\n[default.global.parameters]\nbeta_features = true\n",
        account = facts.account,
        primary = facts.primary,
        secondary = facts.secondary,
        witness = facts.witness,
        customers = facts.customer_regions.join(", "),
    );
    for environment in environments {
        let name = &environment.name;
        // The secondary deploys the primary's build of the same template.
        if let Some(dir) = environment.build_dir.as_ref().filter(|_| name != "secondary") {
            text.push_str(&format!(
                "\n[{name}.build.parameters]\ntemplate_file = {}\nbuild_dir = {}\nbeta_features = true\n",
                quoted(&environment.template),
                quoted(dir)
            ));
        }
        text.push_str(&format!(
            "\n[{name}.validate.parameters]\ntemplate_file = {}\nregion = {}\nlint = true\n",
            quoted(&environment.template),
            quoted(&environment.region)
        ));
        text.push_str(&format!(
            "\n[{name}.deploy.parameters]\ntemplate_file = {}\nstack_name = {}\nregion = {}\n",
            quoted(&environment.deployed_template()),
            quoted(&environment.stack_name),
            quoted(&environment.region)
        ));
        if let Some(capabilities) = environment.capabilities {
            text.push_str(&format!("capabilities = {}\nresolve_s3 = true\n", quoted(capabilities)));
        }
        text.push_str(&format!("parameter_overrides = {}\n", quoted(&overrides(&environment.parameters))));
        // A rerun with nothing changed is a success, not an error (sam deploy's
        // --no-fail-on-empty-changeset); each change set is shown and confirmed unless --yes.
        text.push_str("fail_on_empty_changeset = false\nconfirm_changeset = true\n");
    }
    text
}

/// `Key=Value` pairs separated by spaces, as `sam deploy --parameter-overrides` takes them; a
/// value with a space, `=` or a quote is double-quoted (SAM reads `Key="a b"`).
pub fn overrides(parameters: &[(String, String)]) -> String {
    parameters
        .iter()
        .map(|(key, value)| {
            if value.contains([' ', '=', '"']) {
                format!("{key}=\"{}\"", value.replace('"', "\\\""))
            } else {
                format!("{key}={value}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A TOML basic string.
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        let mut facts = Facts::new("111122223333", "us-east-1", "us-west-2", "us-east-2", &["us-east-2", "eu-west-1"]);
        facts.alarm_email = Some("oncall@example.com".into());
        facts.operator_role_arn = Some("arn:aws:iam::111122223333:role/ops".into());
        facts
    }

    fn parameter<'a>(environment: &'a Environment, key: &str) -> Option<&'a str> {
        environment.parameters.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn both_regional_stacks_admit_every_topic_and_share_the_delay() {
        let mut facts = facts();
        facts.secondary_delay_s = 7;
        let all = environments(&facts);
        let names: Vec<&str> = all.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["lease-table", "primary", "secondary", "customer-us-east-2", "customer-eu-west-1"]);
        let topics = "arn:aws:sns:us-east-2:111122223333:cfn-once-service-token,arn:aws:sns:eu-west-1:111122223333:cfn-once-service-token";
        for regional in &all[1..3] {
            assert_eq!(parameter(regional, "ServiceTopicArns"), Some(topics), "{}", regional.name);
            assert_eq!(parameter(regional, "SecondaryDelaySeconds"), Some("7"), "{}", regional.name);
        }
        assert_eq!((all[1].region.as_str(), all[2].region.as_str()), ("us-east-1", "us-west-2"));
        assert_eq!(parameter(&all[0], "WitnessRegion"), Some("us-east-2"));
    }

    #[test]
    fn values_sam_would_split_are_quoted() {
        let parameters = vec![
            ("A".to_owned(), "x,y".to_owned()),
            ("B".to_owned(), "us-east-1=https://a,us-west-2=https://b".to_owned()),
        ];
        assert_eq!(overrides(&parameters), "A=x,y B=\"us-east-1=https://a,us-west-2=https://b\"");
        assert_eq!(quoted("B=\"x\""), "\"B=\\\"x\\\"\"");
    }
}
