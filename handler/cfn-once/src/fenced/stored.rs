//! What cfn-once keeps on an item it writes, and reads back from one: the fence and its scope,
//! the owner, the write's token, a tombstone's times.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::ownership::{Fence, Found, Owner, WriteRules};

use super::{DELETED_ATTRIBUTE, FENCE_ATTRIBUTE, Item, OWNER_ATTRIBUTE, SCOPE_ATTRIBUTE, WRITE_ATTRIBUTE};

/// A token unique to one write: its fence, this process's random nonce, and how many writes the
/// process made before it. A fence is granted to one execution, and the nonce tells processes
/// apart, so no two writes anywhere carry the same token; every attempt of one write carries it.
pub(super) fn new_token(fence: &Fence) -> String {
    static NONCE: OnceLock<u64> = OnceLock::new();
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let nonce = *NONCE.get_or_init(crate::clock::random_seed);
    format!("{}.{nonce:016x}.{}", fence.value, WRITES.fetch_add(1, Ordering::Relaxed))
}

/// What a stored item is, for the rules.
pub(super) fn found(item: Option<&Item>) -> Found {
    let Some(item) = item else { return Found::Absent };
    let fence = match (item.get(SCOPE_ATTRIBUTE), item.get(FENCE_ATTRIBUTE)) {
        (Some(AttributeValue::S(scope)), Some(AttributeValue::N(value))) => {
            value.parse().ok().map(|value| Fence { scope: scope.clone(), value })
        }
        _ => None,
    };
    if item.contains_key(DELETED_ATTRIBUTE) {
        return Found::Tombstone { fence };
    }
    let owner = match item.get(OWNER_ATTRIBUTE) {
        Some(AttributeValue::S(owner)) => Some(Owner::from_stored(owner.clone())),
        _ => None,
    };
    Found::Item { owner, fence }
}

/// The token of the write that left `item`, if it carries one.
pub(super) fn token_of(item: Option<&Item>) -> Option<&str> {
    match item?.get(WRITE_ATTRIBUTE)? {
        AttributeValue::S(token) => Some(token),
        _ => None,
    }
}

/// Stamps a write's fence, owner and token on an item.
pub(super) fn stamp(item: &mut Item, rules: &WriteRules, token: &str) {
    item.insert(FENCE_ATTRIBUTE.into(), AttributeValue::N(rules.fence.value.to_string()));
    item.insert(SCOPE_ATTRIBUTE.into(), AttributeValue::S(rules.fence.scope.clone()));
    item.insert(WRITE_ATTRIBUTE.into(), AttributeValue::S(token.to_owned()));
    if let Some(owner) = &rules.owner {
        item.insert(OWNER_ATTRIBUTE.into(), AttributeValue::S(owner.as_str().to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_per_write_and_name_the_fence() {
        let fence = Fence { scope: "r".into(), value: 7 };
        let (first, second) = (new_token(&fence), new_token(&fence));
        assert_ne!(first, second);
        assert!(first.starts_with("7."), "{first}");
    }

    #[test]
    fn a_stored_item_reads_back_as_written() {
        let rules = WriteRules::owned(&Fence { scope: "r".into(), value: 2 }, Owner::new("stack", "Mine"));
        let mut item = Item::from([("pk".to_owned(), AttributeValue::S("x".into()))]);
        stamp(&mut item, &rules, "t1");
        assert_eq!(
            found(Some(&item)),
            Found::Item { owner: Some(Owner::new("stack", "Mine")), fence: Some(rules.fence.clone()) }
        );
        assert_eq!(token_of(Some(&item)), Some("t1"));
        item.insert(DELETED_ATTRIBUTE.into(), AttributeValue::N("1".into()));
        assert_eq!(found(Some(&item)), Found::Tombstone { fence: Some(rules.fence) });
        assert_eq!((found(None), token_of(None)), (Found::Absent, None));
    }
}
