//! What identifies one request: its StackId, which must be a CloudFormation stack ARN, and its
//! RequestId.

use crate::aws_names::is_region;

/// What identifies one request: CloudFormation's StackId and RequestId.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestKey {
    /// CloudFormation's StackId: the stack's ARN.
    pub stack_id: StackArn,
    /// CloudFormation's RequestId, which it may reuse when it retries a failed deployment.
    pub request_id: String,
}

/// A CloudFormation stack's ARN, as CloudFormation sends it in `StackId`:
/// `arn:<partition>:cloudformation:<region>:<account>:stack/<name>/<id>`.
///
/// Every request key holds one, and the only way to make one is [`StackArn::parse`], so a
/// request's lease record can never be keyed like an item of another kind in the lease table
/// (the active-region control's partition, `control#active`, is no stack ARN): the key spaces
/// are disjoint by construction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackArn(String);

impl StackArn {
    /// Parses a stack ARN; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix("arn:")?;
        let parts: Vec<&str> = rest.splitn(5, ':').collect();
        let [partition, service, region, account, resource] = parts.as_slice() else {
            return None;
        };
        let (name, id) = resource.strip_prefix("stack/")?.split_once('/')?;
        let name_ok = name.len() <= 128
            && name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        let id_ok = !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        let partition_ok =
            partition.starts_with("aws") && partition.bytes().all(|b| b.is_ascii_lowercase() || b == b'-');
        let account_ok = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
        (partition_ok && *service == "cloudformation" && is_region(region) && account_ok && name_ok && id_ok)
            .then(|| Self(text.to_owned()))
    }

    /// The ARN's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The region in the ARN: the stack's region.
    pub fn region(&self) -> &str {
        self.0.split(':').nth(3).unwrap_or_default()
    }
}

impl std::ops::Deref for StackArn {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for StackArn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<StackArn> for String {
    fn from(arn: StackArn) -> Self {
        arn.0
    }
}

impl PartialEq<str> for StackArn {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for StackArn {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_id_must_be_a_stack_arn() {
        for good in [
            "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
            "arn:aws-cn:cloudformation:cn-north-1:123456789012:stack/My-Stack-1/5b0a3c20-5a1e-11ef-9d3f-0a1b2c3d4e5f",
            "arn:aws-us-gov:cloudformation:us-gov-west-1:123456789012:stack/s/g",
        ] {
            let arn = StackArn::parse(good).unwrap_or_else(|| panic!("{good}"));
            assert_eq!(arn.as_str(), good);
        }
        assert_eq!(
            StackArn::parse("arn:aws:cloudformation:eu-west-1:123456789012:stack/s/g")
                .map(|arn| arn.region().to_owned()),
            Some("eu-west-1".to_owned())
        );
        for bad in [
            "control#active",
            "",
            "s",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/demo",
            "arn:aws:cloudformation:us-east-1:123456789012:stack//guid",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid/more",
            "arn:aws:cloudformation:us-east-1:12345:stack/demo/guid",
            "arn:aws:sqs:us-east-1:123456789012:stack/demo/guid",
            "arn:aws:cloudformation:us-east-1.evil:123456789012:stack/demo/guid",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/1demo/guid",
            "arn:aws:cloudformation:us-east-1:123456789012:changeSet/demo/guid",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/de mo/guid",
        ] {
            assert_eq!(StackArn::parse(bad), None, "{bad:?}");
        }
    }
}
