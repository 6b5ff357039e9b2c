//! AWS names as the handler accepts them: regions, and the DynamoDB tables
//! `Custom::DynamoDBItem` may write.
//!
//! Each check is strict about shape, because these strings end up in an SDK client's endpoint
//! or in a request's target: a region must look like one before a client is built for it (never
//! a host name or a URL), and a table is compared by identity (name, region, account), never as a
//! string, so that no spelling of the lease table can pass for another table. The configuration
//! (`CFN_ONCE_ITEM_TABLES`), the ResponseURL check, the StackId check and the shipped providers
//! all use these.

/// Which tables `Custom::DynamoDBItem` may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemTables {
    /// Any table except the lease table.
    Any,
    /// Only these (names, or ARNs for tables of other regions or accounts).
    Only(Vec<TableRef>),
}

impl ItemTables {
    /// Whether `table` may be written. Never the lease table, however it is named: by name, by
    /// ARN, or in another region (an MRSC table has a replica of that name in every region of
    /// its set), so identities are compared, not strings.
    pub fn allows(&self, table: &TableRef, lease_table: &str) -> bool {
        table.name != lease_table
            && match self {
                Self::Any => true,
                Self::Only(tables) => tables.iter().any(|allowed| allowed.admits(table)),
            }
    }
}

/// A DynamoDB table as `TableName` may name it: a plain name, or a table ARN (which DynamoDB
/// also accepts as `TableName`, and which can point into another region or account).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRef {
    /// The table's name, from the plain name or the ARN; compared with the lease table's name.
    pub name: String,
    /// From an ARN; a plain name means the region written to.
    pub region: Option<String>,
    /// From an ARN; a plain name means this account.
    pub account: Option<String>,
}

impl TableRef {
    /// Parses a table name or a table ARN (`arn:<partition>:dynamodb:<region>:<account>:table/<name>`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(rest) = text.strip_prefix("arn:") {
            let parts: Vec<&str> = rest.splitn(5, ':').collect();
            let [_partition, service, region, account, resource] = parts.as_slice() else {
                return Err(format!("{text:?} is not a DynamoDB table ARN"));
            };
            let name = resource.strip_prefix("table/").filter(|name| !name.contains('/'));
            return match name {
                Some(name)
                    if *service == "dynamodb" && is_region(region) && is_account(account) && is_table_name(name) =>
                {
                    Ok(Self {
                        name: name.to_owned(),
                        region: Some((*region).to_owned()),
                        account: Some((*account).to_owned()),
                    })
                }
                _ => Err(format!("{text:?} is not a DynamoDB table ARN")),
            };
        }
        if is_table_name(text) {
            Ok(Self { name: text.to_owned(), region: None, account: None })
        } else {
            Err(format!("{text:?} is not a DynamoDB table name (3 to 255 of a-z, A-Z, 0-9, _, - and .) or table ARN"))
        }
    }

    /// Whether this allow-list entry admits `table`: the same name, and the same region and
    /// account wherever this entry names them. A plain-name entry admits only plain names: a
    /// table named by ARN must be listed by ARN.
    fn admits(&self, table: &TableRef) -> bool {
        let same = |entry: &Option<String>, other: &Option<String>| entry.is_none() || entry == other;
        self.name == table.name
            && (self.account.is_some() || table.account.is_none())
            && same(&self.region, &table.region)
            && same(&self.account, &table.account)
    }
}

/// An AWS region's shape: `us-east-1`, `us-gov-west-1`, `ap-southeast-5`. Anything else (a host
/// name, a URL) is refused before an SDK client would turn it into an endpoint.
pub fn is_region(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    parts.len() >= 3
        && parts.len() <= 4
        && parts[0].len() == 2
        && parts[..parts.len() - 1].iter().all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase()))
        && parts.last().is_some_and(|last| (1..=2).contains(&last.len()) && last.bytes().all(|b| b.is_ascii_digit()))
}

/// A Lambda function of this region, by name (`reservation-on-event`) or ARN
/// (`arn:aws:lambda:us-east-1:123456789012:function:reservation-on-event[:alias]`). A handler
/// region invokes its own region's copy of a function only, so that an outage takes the pair
/// down together and the other region's pair carries on: an ARN of another region is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionRef(String);

impl FunctionRef {
    /// Parses `text` as a function of `region`.
    pub fn parse(text: &str, region: &str) -> Result<Self, String> {
        if let Some(rest) = text.strip_prefix("arn:") {
            let parts: Vec<&str> = rest.split(':').collect();
            let ok = matches!(parts.as_slice(),
                [partition, "lambda", arn_region, account, "function", name, qualifier @ ..]
                    if partition.starts_with("aws") && is_region(arn_region) && is_account(account)
                        && is_function_name(name) && qualifier.len() <= 1
                        && qualifier.iter().all(|q| !q.is_empty() && q.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'$'))));
            if !ok {
                return Err(format!(
                    "{text:?} is not a Lambda function ARN (arn:aws:lambda:<region>:<account>:function:<name>)"
                ));
            }
            if parts[2] != region {
                return Err(format!(
                    "{text:?} is a function of {}: each handler region invokes its own region's copy ({region})",
                    parts[2]
                ));
            }
            return Ok(Self(text.to_owned()));
        }
        if is_function_name(text) {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!("{text:?} is not a Lambda function name (1 to 64 letters, digits, - and _) or ARN"))
        }
    }

    /// The name or ARN, as the Invoke API takes it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An S3 bucket name as S3 accepts it for new buckets: 3 to 63 lowercase letters, digits, `-`
/// and `.`, beginning and ending with a letter or digit, no `..`, not an IP address.
pub fn is_bucket_name(text: &str) -> bool {
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (3..=63).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
        && edge(text.bytes().next())
        && edge(text.bytes().last())
        && !text.contains("..")
        && text.parse::<std::net::Ipv4Addr>().is_err()
}

fn is_function_name(text: &str) -> bool {
    (1..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

fn is_account(text: &str) -> bool {
    text.len() == 12 && text.bytes().all(|b| b.is_ascii_digit())
}

fn is_table_name(text: &str) -> bool {
    (3..=255).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_this_regions_by_name_or_arn() {
        assert!(FunctionRef::parse("reservation-on-event", "us-east-1").is_ok());
        assert!(FunctionRef::parse("arn:aws:lambda:us-east-1:123456789012:function:on-event", "us-east-1").is_ok());
        assert!(
            FunctionRef::parse("arn:aws:lambda:us-east-1:123456789012:function:on-event:live", "us-east-1").is_ok()
        );
        let other = FunctionRef::parse("arn:aws:lambda:us-west-2:123456789012:function:on-event", "us-east-1");
        assert!(other.unwrap_err().contains("its own region's copy (us-east-1)"));
        for bad in
            ["", "has space", "a/b", &"x".repeat(65), "arn:aws:lambda:us-east-1:1234:function:f", "arn:aws:s3:::bucket"]
        {
            assert!(FunctionRef::parse(bad, "us-east-1").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bucket_names_follow_s3s_rules() {
        for good in ["cfn-once-answers-us-east-1-123456789012", "abc", "a.b-c", &"a".repeat(63)] {
            assert!(is_bucket_name(good), "{good:?}");
        }
        for bad in ["ab", &"a".repeat(64), "Upper", "-edge", "edge-", "a..b", "192.168.0.1", "a_b", "a/b"] {
            assert!(!is_bucket_name(bad), "{bad:?}");
        }
    }

    fn table(text: &str) -> TableRef {
        TableRef::parse(text).expect("a table")
    }

    #[test]
    fn item_tables_never_include_the_lease_table_however_it_is_named() {
        let arn = |region: &str, name: &str| table(&format!("arn:aws:dynamodb:{region}:123456789012:table/{name}"));
        assert!(ItemTables::Any.allows(&table("app-settings"), "leases"));
        for lease in
            [table("leases"), arn("us-east-1", "leases"), arn("us-west-2", "leases"), arn("eu-west-1", "leases")]
        {
            assert!(!ItemTables::Any.allows(&lease, "leases"), "{lease:?}");
            assert!(!ItemTables::Only(vec![table("leases"), lease.clone()]).allows(&lease, "leases"), "{lease:?}");
        }
        assert!(!ItemTables::Only(vec![]).allows(&table("xyz"), "leases"));
        let only = ItemTables::Only(vec![table("settings"), arn("us-west-2", "shared")]);
        assert!(only.allows(&table("settings"), "leases"));
        assert!(!only.allows(&arn("us-east-1", "settings"), "leases"), "an ARN must be listed as an ARN");
        assert!(only.allows(&arn("us-west-2", "shared"), "leases"));
        assert!(!only.allows(&arn("us-east-1", "shared"), "leases"), "another region's table of that name");
    }

    #[test]
    fn table_names_arns_and_regions_parse_strictly() {
        assert_eq!(
            table("arn:aws:dynamodb:us-east-1:123456789012:table/leases"),
            TableRef { name: "leases".into(), region: Some("us-east-1".into()), account: Some("123456789012".into()) }
        );
        for bad in [
            "ab",
            "has space",
            "arn:aws:s3:::bucket",
            "arn:aws:dynamodb:us-east-1:123456789012:table/t/index/i",
            "arn:aws:dynamodb:us-east-1.evil.example:123456789012:table/t",
            "arn:aws:dynamodb:us-east-1:12345:table/t",
        ] {
            assert!(TableRef::parse(bad).is_err(), "{bad}");
        }
        for region in ["us-east-1", "us-gov-west-1", "ap-southeast-5", "il-central-1", "cn-north-1"] {
            assert!(is_region(region), "{region}");
        }
        for bad in ["us-east-1.evil.example", "us-east", "US-EAST-1", "x-east-1", "us-east-123", "", "localhost"] {
            assert!(!is_region(bad), "{bad}");
        }
    }
}
