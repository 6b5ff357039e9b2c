//! `cfn-once deploy`: both handler regions, the lease table and every customer region's topic,
//! deployed from a few facts (the account, the three MRSC regions, the customer regions, who is
//! paged) instead of a hand-edited `samconfig.toml` and nine `sam deploy`s in an order that
//! matters.
//!
//! What it keeps: nothing starts unless the facts are ones the templates accept ([`Facts::refusals`]
//! applies the templates' own rules: the MRSC region set of `infra/lease-table.yaml`'s
//! `OneMrscRegionSet` and `ThreeDistinctRegions`, and `infra/customer.yaml`'s
//! `SnsDeliversBetweenTheseRegions`; `tests/it/deploy_command.rs` holds them to the templates for
//! every combination of regions); the SAM configuration is written from the facts alone, each
//! derived value (a topic's ARN, the account in it) in one place ([`samconfig`]); the stacks run
//! in the one order that works, each waited for, and the first failure stops the rest
//! ([`plan`]).

pub mod facts_file;
pub mod plan;
pub mod samconfig;

use serde::Serialize;

/// The MRSC region sets: a lease table's replicas and witness must lie in one of them. "The
/// witness must be in a different Region than the replicas and within the same Region set: US
/// Region set: US East (N. Virginia), US East (Ohio), US West (Oregon); EU Region set: Europe
/// (Ireland), Europe (London), Europe (Paris), Europe (Frankfurt); AP Region set: Asia Pacific
/// (Tokyo), Asia Pacific (Seoul), Asia Pacific (Osaka)"
/// (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-dynamodb-globaltable-globaltablewitness.html>).
/// The same sets as `infra/lease-table.yaml`'s `OneMrscRegionSet` rule; the tests compare.
pub const MRSC_REGION_SETS: [(&str, &[&str]); 3] = [
    ("US", &["us-east-1", "us-east-2", "us-west-2"]),
    ("EU", &["eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1"]),
    ("AP", &["ap-northeast-1", "ap-northeast-2", "ap-northeast-3"]),
];

/// SNS's opt-in regions, between two of which SNS does not deliver
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-cross-region-delivery.html>, its "Opt-in
/// Regions" table; docs/accounts-and-regions.md). `infra/customer.yaml`'s `Sns` / `OptInRegions`
/// mapping is the list the templates use; the tests hold this copy to it.
pub const SNS_OPT_IN_REGIONS: [&str; 12] = [
    "af-south-1",
    "ap-east-1",
    "ap-south-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-northeast-3",
    "eu-south-1",
    "eu-south-2",
    "eu-central-2",
    "il-central-1",
    "me-south-1",
    "me-central-1",
];

/// Where the primary learns whether it is active (the regional stacks' `Control`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Control {
    /// The `control#active` item of the lease table.
    Table,
    /// ARC routing controls (`infra/arc.yaml`): the cluster's endpoints and each region's
    /// routing control, as the arc stack's outputs give them.
    Arc { endpoints: String, primary_routing_control_arn: String, secondary_routing_control_arn: String },
}

/// What a deployment is made from: everything else is derived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Facts {
    /// The platform account, which owns every stack.
    pub account: String,
    pub primary: String,
    pub secondary: String,
    /// The lease table's witness region, the third of the MRSC region set.
    pub witness: String,
    /// Where stacks use the custom resources: one ServiceToken topic each, in this order.
    pub customer_regions: Vec<String>,
    pub alarm_email: Option<String>,
    pub alarm_topic_arn: Option<String>,
    /// The prefix of every name the stacks fix (the templates' `Installation`).
    pub installation: String,
    pub table: String,
    pub topic_name: String,
    /// The secondary queue's delay, which the primary also counts failover from: one value for
    /// both regional stacks.
    pub secondary_delay_s: u32,
    /// The operators' role: the only principal besides the function the queue policies let read
    /// or redrive (`RedrivePrincipalArns`, `OperatorPrincipalArns`).
    pub operator_role_arn: Option<String>,
    pub control: Control,
    /// Deploy `infra/example.yaml` and `infra/long-work.yaml` in the first customer region.
    pub examples: bool,
}

impl Facts {
    /// The facts with the templates' defaults for everything but what must be given.
    pub fn new(account: &str, primary: &str, secondary: &str, witness: &str, customer_regions: &[&str]) -> Self {
        Self {
            account: account.to_owned(),
            primary: primary.to_owned(),
            secondary: secondary.to_owned(),
            witness: witness.to_owned(),
            customer_regions: customer_regions.iter().map(|r| (*r).to_owned()).collect(),
            alarm_email: None,
            alarm_topic_arn: None,
            installation: "cfn-once".into(),
            table: "cfn-once-leases".into(),
            topic_name: "cfn-once-service-token".into(),
            secondary_delay_s: 5,
            operator_role_arn: None,
            control: Control::Table,
            examples: false,
        }
    }

    /// Every customer region's ServiceToken topic, in order.
    pub fn topic_arns(&self) -> Vec<String> {
        self.customer_regions.iter().map(|region| self.topic_arn(region)).collect()
    }

    /// The topic `infra/customer.yaml` creates in `region` (fixed by its name).
    pub fn topic_arn(&self, region: &str) -> String {
        format!("arn:aws:sns:{region}:{}:{}", self.account, self.topic_name)
    }

    /// A handler region's queue, as `infra/regional.yaml` names it (`<Installation>-<Role>`).
    pub fn queue_url(&self, role: &str) -> String {
        let region = if role == "primary" { &self.primary } else { &self.secondary };
        format!("https://sqs.{region}.amazonaws.com/{}/{}-{role}", self.account, self.installation)
    }

    /// Everything the templates would refuse, or that could not work, each in words; empty when
    /// the facts can be deployed. Checked before anything is written or run.
    pub fn refusals(&self) -> Vec<String> {
        let mut refusals = Vec::new();
        if !(self.account.len() == 12 && self.account.bytes().all(|b| b.is_ascii_digit())) {
            refusals.push(format!("--account {:?} is not an AWS account id (twelve digits)", self.account));
        }
        for (flag, region) in
            [("--primary", &self.primary), ("--secondary", &self.secondary), ("--witness", &self.witness)]
        {
            if !is_region_name(region) {
                refusals.push(format!("{flag} {region:?} is not a region name such as us-east-1"));
            }
        }
        refusals.extend(self.mrsc_refusals());
        if self.customer_regions.is_empty() {
            refusals.push(
                "--customer-regions names no region: give at least one where stacks use the custom resources".into(),
            );
        }
        for (index, region) in self.customer_regions.iter().enumerate() {
            if !is_region_name(region) {
                refusals.push(format!("--customer-regions: {region:?} is not a region name such as eu-west-1"));
            } else if self.customer_regions[..index].contains(region) {
                refusals.push(format!("--customer-regions names {region} twice: one topic per region"));
            }
            refusals.extend(self.sns_refusals(region));
        }
        match (&self.alarm_email, &self.alarm_topic_arn) {
            (None, None) => refusals.push(
                "give --alarm-email or --alarm-topic-arn: every stack refuses alarms that notify nobody (AlarmsPageSomeone)"
                    .into(),
            ),
            (Some(email), _) if !is_email(email) => refusals.push(format!("--alarm-email {email:?} is not an address")),
            _ => {}
        }
        if let Some(arn) = &self.alarm_topic_arn
            && !(arn.starts_with("arn:aws") && arn.split(':').nth(2) == Some("sns") && arn.split(':').count() == 6)
        {
            refusals.push(format!("--alarm-topic-arn {arn:?} is not an SNS topic ARN"));
        }
        if !(1..=900).contains(&self.secondary_delay_s) {
            refusals.push(format!(
                "--secondary-delay-s {} is outside 1..=900: SQS delays at most 900 s, and with 0 the secondary races a healthy primary",
                self.secondary_delay_s
            ));
        }
        let installation = self.installation.as_bytes();
        if !(installation.first().is_some_and(u8::is_ascii_lowercase)
            && installation.len() <= 26
            && installation.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-'))
        {
            refusals.push(format!(
                "--installation {:?}: lower-case letters, digits and hyphens, starting with a letter, at most 26 characters",
                self.installation
            ));
        }
        if let Some(arn) = &self.operator_role_arn {
            let parts: Vec<&str> = arn.splitn(6, ':').collect();
            if !(parts.len() == 6 && parts[2] == "iam" && parts[5].starts_with("role/") && parts[5].len() > 5) {
                refusals.push(format!(
                    "--operator-role-arn {arn:?} is not an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)"
                ));
            }
        }
        refusals
    }

    /// `OneMrscRegionSet` and `ThreeDistinctRegions` of `infra/lease-table.yaml`.
    fn mrsc_refusals(&self) -> Vec<String> {
        let mut refusals = Vec::new();
        let (p, s, w) = (&self.primary, &self.secondary, &self.witness);
        if p == s || p == w || s == w {
            refusals.push(format!(
                "the primary ({p}), secondary ({s}) and witness ({w}) must be three different regions: an MRSC table has two replicas and a witness"
            ));
        }
        let sets = [p, s, w].map(|region| mrsc_region_set(region));
        if sets[0].is_none() || sets.iter().any(|set| *set != sets[0]) {
            let named = |region: &String, set: Option<&str>| match set {
                Some(set) => format!("{region} (set {set})"),
                None => format!("{region} (in no set)"),
            };
            refusals.push(format!(
                "the primary, secondary and witness must lie in one MRSC region set, and {}, {} and {} do not: {}",
                named(p, sets[0]),
                named(s, sets[1]),
                named(w, sets[2]),
                MRSC_REGION_SETS
                    .iter()
                    .map(|(name, regions)| format!("{name} {}", regions.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        refusals
    }

    /// `SnsDeliversBetweenTheseRegions` of `infra/customer.yaml`, for the topic in `region`.
    fn sns_refusals(&self, region: &str) -> Vec<String> {
        if !is_opt_in(region) {
            return Vec::new();
        }
        [("primary", &self.primary), ("secondary", &self.secondary)]
            .into_iter()
            .filter(|(_, handler)| *handler != region && is_opt_in(handler))
            .map(|(role, handler)| {
                format!(
                    "customer region {region} and the {role} region {handler} are two SNS opt-in regions: SNS does not deliver from one to the other, so the {role} queue would never get a request"
                )
            })
            .collect()
    }
}

/// The MRSC region set `region` lies in, by name.
pub fn mrsc_region_set(region: &str) -> Option<&'static str> {
    MRSC_REGION_SETS.iter().find(|(_, regions)| regions.contains(&region)).map(|(name, _)| *name)
}

/// Whether SNS lists `region` as an opt-in region.
pub fn is_opt_in(region: &str) -> bool {
    SNS_OPT_IN_REGIONS.contains(&region)
}

/// `us-east-1`, `ap-southeast-2`, `us-gov-west-1`: the customer template's `AllowedPattern`,
/// `^[a-z]{2}(-[a-z]+)+-[0-9]$`.
fn is_region_name(region: &str) -> bool {
    let parts: Vec<&str> = region.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[0].bytes().all(|b| b.is_ascii_lowercase())
        && parts[1..parts.len() - 1].iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1].len() == 1
        && parts[parts.len() - 1].bytes().all(|b| b.is_ascii_digit())
}

/// The templates' `AlarmEmail` pattern, `^[^@\s]+@[^@\s]+$`.
fn is_email(text: &str) -> bool {
    let mut parts = text.split('@');
    let (Some(local), Some(domain), None) = (parts.next(), parts.next(), parts.next()) else { return false };
    !local.is_empty() && !domain.is_empty() && !text.chars().any(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readme() -> Facts {
        let mut facts = Facts::new(
            "111122223333",
            "us-east-1",
            "us-west-2",
            "us-east-2",
            &["us-east-2", "eu-west-1", "ap-southeast-2"],
        );
        facts.alarm_email = Some("oncall@example.com".into());
        facts
    }

    #[test]
    fn the_readmes_layout_is_accepted() {
        assert_eq!(readme().refusals(), Vec::<String>::new());
    }

    #[test]
    fn each_bad_fact_is_refused_in_words() {
        let check = |change: fn(&mut Facts), needle: &str| {
            let mut facts = readme();
            change(&mut facts);
            let refusals = facts.refusals();
            assert!(refusals.iter().any(|r| r.contains(needle)), "{needle:?} not in {refusals:?}");
        };
        check(|f| f.account = "11112222333".into(), "not an AWS account id");
        check(|f| f.account = "11112222333x".into(), "not an AWS account id");
        check(|f| f.witness = "eu-west-1".into(), "one MRSC region set");
        check(|f| f.secondary = "ap-southeast-2".into(), "ap-southeast-2 (in no set)");
        check(|f| f.witness = "us-west-2".into(), "three different regions");
        check(|f| f.customer_regions = vec![], "names no region");
        check(|f| f.customer_regions.push("eu-west-1".into()), "names eu-west-1 twice");
        check(|f| f.customer_regions.push("eu_west_9".into()), "not a region name");
        check(|f| f.alarm_email = None, "--alarm-email or --alarm-topic-arn");
        check(|f| f.alarm_email = Some("on call@x".into()), "is not an address");
        check(|f| f.secondary_delay_s = 0, "outside 1..=900");
        check(|f| f.installation = "Payments".into(), "--installation");
        check(|f| f.operator_role_arn = Some("arn:aws:iam::111122223333:user/x".into()), "not an IAM role ARN");
    }

    #[test]
    fn a_customer_region_sns_cannot_deliver_from_is_refused() {
        // ap-northeast-3 is both an MRSC region (AP) and an SNS opt-in region.
        let mut facts =
            Facts::new("111122223333", "ap-northeast-3", "ap-northeast-1", "ap-northeast-2", &["me-south-1"]);
        facts.alarm_email = Some("oncall@example.com".into());
        let refusals = facts.refusals();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert!(refusals[0].contains("me-south-1 and the primary region ap-northeast-3"), "{refusals:?}");
        // A topic in the primary's own region is no cross-region delivery.
        facts.customer_regions = vec!["ap-northeast-3".into()];
        assert_eq!(facts.refusals(), Vec::<String>::new());
    }
}
