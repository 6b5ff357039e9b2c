//! The values a fenced write is made of, in the dialect of whoever sends it: the AWS SDK's
//! `AttributeValue` in `cfn_once`, [`Literal`] in the simulator and the tests. The write's own
//! attributes (fence, scope, owner, tokens) are only ever strings, numbers and a string set.

use std::collections::HashMap;

use super::{DELETED_ATTRIBUTE, FENCE_ATTRIBUTE, OWNER_ATTRIBUTE, SCOPE_ATTRIBUTE, WRITES_ATTRIBUTE};
use crate::ownership::{Fence, Found, Owner, WriteRules};
use crate::write_token::WriteToken;

/// One of the write's own values.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Literal {
    /// A string.
    S(String),
    /// A number, as DynamoDB carries it: its decimal text.
    N(String),
    /// A set of strings (never empty: DynamoDB has no empty set).
    Ss(Vec<String>),
}

/// How a sender spells values: made from the write's own [`Literal`]s, read back as text, and
/// written out canonically, so that the same write has the same token wherever it is made.
pub trait Dialect {
    /// An attribute's value.
    type Value: Clone + std::fmt::Debug;

    /// `literal` in this dialect.
    fn value(literal: Literal) -> Self::Value;

    /// The string or number `value` holds; `None` for anything else.
    fn text(value: &Self::Value) -> Option<&str>;

    /// The members of the string set `value` is; `None` if it is none.
    fn members(value: &Self::Value) -> Option<Vec<&str>>;

    /// `value` written out unambiguously into `out` (type and contents, sets sorted, maps by
    /// key), the same for equal values in every version.
    fn canonical(value: &Self::Value, out: &mut String);
}

/// The dialect of [`Literal`] values.
#[derive(Debug, Clone, Copy)]
pub struct Plain;

impl Dialect for Plain {
    type Value = Literal;

    fn value(literal: Literal) -> Literal {
        literal
    }

    fn text(value: &Literal) -> Option<&str> {
        match value {
            Literal::S(text) | Literal::N(text) => Some(text),
            Literal::Ss(_) => None,
        }
    }

    fn members(value: &Literal) -> Option<Vec<&str>> {
        match value {
            Literal::Ss(members) => Some(members.iter().map(String::as_str).collect()),
            _ => None,
        }
    }

    fn canonical(value: &Literal, out: &mut String) {
        match value {
            Literal::S(text) => canonical_part(out, "S", text),
            Literal::N(text) => canonical_part(out, "N", text),
            Literal::Ss(members) => {
                let mut sorted: Vec<&String> = members.iter().collect();
                sorted.sort();
                out.push_str(&format!("SS{}[", sorted.len()));
                for member in sorted {
                    canonical_part(out, "", member);
                }
                out.push(']');
            }
        }
    }
}

/// `tag`, then `text` length-prefixed, so that no two different values write the same.
pub fn canonical_part(out: &mut String, tag: &str, text: &str) {
    out.push_str(&format!("{tag}{}:{text}", text.len()));
}

/// What a stored item is, for the rules.
pub fn found<D: Dialect>(item: Option<&HashMap<String, D::Value>>) -> Found {
    let Some(item) = item else { return Found::Absent };
    let text = |name: &str| item.get(name).and_then(D::text);
    let fence = match (text(SCOPE_ATTRIBUTE), text(FENCE_ATTRIBUTE)) {
        (Some(scope), Some(value)) => value.parse().ok().map(|value| Fence { scope: scope.to_owned(), value }),
        _ => None,
    };
    if item.contains_key(DELETED_ATTRIBUTE) {
        return Found::Tombstone { fence };
    }
    Found::Item { owner: text(OWNER_ATTRIBUTE).map(Owner::from_stored), fence }
}

/// Whether `item` carries `token`: an attempt of the write applied to it (and stands).
pub fn carries<D: Dialect>(item: Option<&HashMap<String, D::Value>>, token: &WriteToken) -> bool {
    item.and_then(|item| item.get(WRITES_ATTRIBUTE))
        .and_then(D::members)
        .is_some_and(|members| token.is_among(&members))
}

/// The tokens on `item` too old for any write of theirs to be made again at `now_ms` (see
/// [`WriteToken`]): an update may remove them.
pub fn stale_tokens<D: Dialect>(item: &HashMap<String, D::Value>, now_ms: u64) -> Vec<String> {
    let members = item.get(WRITES_ATTRIBUTE).and_then(D::members).unwrap_or_default();
    members.into_iter().filter(|member| WriteToken::is_stale(member, now_ms)).map(str::to_owned).collect()
}

/// Stamps a put's (or tombstone's) item with the write's fence, owner and token: the item it
/// replaces goes, and the tokens on it with it.
pub fn stamp<D: Dialect>(item: &mut HashMap<String, D::Value>, rules: &WriteRules, token: &WriteToken) {
    item.insert(FENCE_ATTRIBUTE.into(), D::value(Literal::N(rules.fence.value.to_string())));
    item.insert(SCOPE_ATTRIBUTE.into(), D::value(Literal::S(rules.fence.scope.clone())));
    item.insert(WRITES_ATTRIBUTE.into(), D::value(Literal::Ss(vec![token.text().to_owned()])));
    if let Some(owner) = &rules.owner {
        item.insert(OWNER_ATTRIBUTE.into(), D::value(Literal::S(owner.as_str().to_owned())));
    }
}
