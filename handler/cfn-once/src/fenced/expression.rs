//! The fenced write's expressions in the AWS SDK's dialect: `cfn_once_core::fenced` builds them,
//! here its values are DynamoDB `AttributeValue`s, written out canonically for the write's token.

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::fenced::{Dialect, Literal, canonical_part};

/// A condition of your own, ANDed with the fence (and owner) condition: an expression with its
/// placeholders, e.g. `Condition::new("#plan <> :frozen").name("#plan", "Plan").value(":frozen",
/// AttributeValue::S("frozen".into()))`.
pub type Condition = cfn_once_core::fenced::Condition<AttributeValue>;

/// An update of your own, clause by clause (`SET`, `REMOVE`, `ADD`, `DELETE`); the fence, owner
/// and write token attributes are set alongside. Applied once per request (see the
/// [module](super)).
pub type Update = cfn_once_core::fenced::Update<AttributeValue>;

/// DynamoDB's values, as the AWS SDK spells them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sdk;

impl Dialect for Sdk {
    type Value = AttributeValue;

    fn value(literal: Literal) -> AttributeValue {
        match literal {
            Literal::S(text) => AttributeValue::S(text),
            Literal::N(text) => AttributeValue::N(text),
            Literal::Ss(members) => AttributeValue::Ss(members),
        }
    }

    fn text(value: &AttributeValue) -> Option<&str> {
        match value {
            AttributeValue::S(text) | AttributeValue::N(text) => Some(text),
            _ => None,
        }
    }

    fn members(value: &AttributeValue) -> Option<Vec<&str>> {
        match value {
            AttributeValue::Ss(members) => Some(members.iter().map(String::as_str).collect()),
            _ => None,
        }
    }

    fn canonical(value: &AttributeValue, out: &mut String) {
        let sorted = |out: &mut String, tag: &str, members: Vec<String>| {
            let mut members = members;
            members.sort();
            out.push_str(&format!("{tag}{}[", members.len()));
            for member in members {
                canonical_part(out, "", &member);
            }
            out.push(']');
        };
        let bytes = |blob: &aws_sdk_dynamodb::primitives::Blob| {
            blob.as_ref().iter().map(|byte| format!("{byte:02x}")).collect::<String>()
        };
        match value {
            AttributeValue::S(text) => canonical_part(out, "S", text),
            AttributeValue::N(text) => canonical_part(out, "N", text),
            AttributeValue::B(blob) => canonical_part(out, "B", &bytes(blob)),
            AttributeValue::Bool(flag) => canonical_part(out, "BOOL", &flag.to_string()),
            AttributeValue::Null(flag) => canonical_part(out, "NULL", &flag.to_string()),
            AttributeValue::Ss(members) | AttributeValue::Ns(members) => {
                let tag = if matches!(value, AttributeValue::Ss(_)) { "SS" } else { "NS" };
                sorted(out, tag, members.clone());
            }
            AttributeValue::Bs(blobs) => sorted(out, "BS", blobs.iter().map(bytes).collect()),
            AttributeValue::L(list) => {
                out.push_str(&format!("L{}[", list.len()));
                for element in list {
                    Self::canonical(element, out);
                }
                out.push(']');
            }
            AttributeValue::M(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                out.push_str(&format!("M{}{{", entries.len()));
                for (name, element) in entries {
                    canonical_part(out, "", name);
                    Self::canonical(element, out);
                }
                out.push('}');
            }
            // A kind of value this SDK does not know: its debug form, which names it.
            other => canonical_part(out, "?", &format!("{other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn canonical(value: &AttributeValue) -> String {
        let mut out = String::new();
        Sdk::canonical(value, &mut out);
        out
    }

    #[test]
    fn equal_values_are_written_alike_and_different_ones_apart() {
        let map = |pairs: &[(&str, AttributeValue)]| {
            AttributeValue::M(pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect::<HashMap<_, _>>())
        };
        let s = |text: &str| AttributeValue::S(text.into());
        assert_eq!(canonical(&map(&[("a", s("1")), ("b", s("2"))])), canonical(&map(&[("b", s("2")), ("a", s("1"))])));
        assert_eq!(
            canonical(&AttributeValue::Ss(vec!["x".into(), "y".into()])),
            canonical(&AttributeValue::Ss(vec!["y".into(), "x".into()]))
        );
        let different = [
            s("1"),
            AttributeValue::N("1".into()),
            AttributeValue::Ss(vec!["1".into()]),
            AttributeValue::Ns(vec!["1".into()]),
            AttributeValue::L(vec![s("1")]),
            map(&[("1", s(""))]),
            s("1,"),
            AttributeValue::Bool(true),
        ];
        let written: std::collections::BTreeSet<String> = different.iter().map(canonical).collect();
        assert_eq!(written.len(), different.len(), "{written:?}");
    }
}
