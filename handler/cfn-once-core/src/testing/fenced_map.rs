//! The provider's own fenced table, in memory: the rules `cfn_once::FencedTable` keeps, for a
//! provider's fakes.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde_json::Value;

use crate::ownership::{Deleted, Fence, Found, Owner, WriteRefused, WriteRules, Written};

/// An in-memory table written under fences and owners, with the rules `cfn_once::FencedTable`
/// sends to DynamoDB as one condition ([`WriteRules`]): a write is refused when a newer fence of
/// the same request already wrote the item, and an owned write when the item belongs to another
/// resource (or cfn-once did not write it) unless it adopts; an owned delete removes only the
/// resource's own item. A delete leaves nothing, as `FencedTable`'s does;
/// [`FencedMap::delete_leaving_tombstone`] plays its opt-in tombstone, which still refuses a
/// stale write of the same request. Use it behind your provider's storage trait in
/// tests; [`FencedMap::insert_unowned`] plays a record that existed before the stack.
///
/// ```
/// use cfn_once_core::testing::FencedMap;
/// use cfn_once_core::ownership::{Deleted, Fence, Owner, WriteRefused, WriteRules, Written};
/// use serde_json::json;
///
/// let rules = |logical: &str| {
///     let fence = Fence { scope: "request-1".into(), value: 1 };
///     WriteRules::owned(&fence, Owner::new("arn:aws:cloudformation:us-east-1:123456789012:stack/s/g", logical))
/// };
/// let map = FencedMap::new();
/// map.insert_unowned("prod", json!("precious"));
/// assert_eq!(map.put(&rules("Mine"), "prod", json!("mine")), Err(WriteRefused::OwnedByAnother { owner: None }));
/// assert_eq!(map.delete(&rules("Mine"), "prod"), Ok(Deleted::NotOwned { owner: None }));
/// assert_eq!(map.get("prod"), Some(json!("precious")));
/// assert_eq!(map.put(&rules("Mine"), "new", json!(1)), Ok(Written::Created));
/// ```
#[derive(Debug, Default)]
pub struct FencedMap {
    items: Mutex<BTreeMap<String, Stored>>,
}

/// One key's state: its value (`None`: a tombstone), the fence and owner of its last write.
#[derive(Debug, Clone)]
struct Stored {
    value: Option<Value>,
    fence: Option<Fence>,
    owner: Option<Owner>,
}

impl Stored {
    fn found(stored: Option<&Stored>) -> Found {
        match stored {
            None => Found::Absent,
            Some(Stored { value: None, fence, .. }) => Found::Tombstone { fence: fence.clone() },
            Some(Stored { value: Some(_), fence, owner }) => Found::Item { owner: owner.clone(), fence: fence.clone() },
        }
    }
}

impl FencedMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `value` at `key` under `rules`: says whether the item is new, was the resource's,
    /// or was adopted; refused if a newer fence wrote it, or (owned) another resource owns it.
    pub fn put(&self, rules: &WriteRules, key: &str, value: Value) -> Result<Written, WriteRefused> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let written = rules.admits_write(&Stored::found(items.get(key)))?;
        let stored = Stored { value: Some(value), fence: Some(rules.fence.clone()), owner: rules.owner.clone() };
        items.insert(key.to_owned(), stored);
        Ok(written)
    }

    /// Deletes `key` under `rules`, leaving nothing, as `FencedTable`'s delete does. An owned
    /// delete leaves an item of another owner alone ([`Deleted::NotOwned`]); deleting what is not
    /// there succeeds.
    pub fn delete(&self, rules: &WriteRules, key: &str) -> Result<Deleted, WriteRefused> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let deleted = rules.admits_delete(&Stored::found(items.get(key)))?;
        if deleted == Deleted::Deleted || rules.owner.is_none() {
            items.remove(key);
        }
        Ok(deleted)
    }

    /// [`FencedMap::delete`], leaving a tombstone with the fence (`Write::leaving_tombstone`):
    /// a later stale write of the same request is still refused.
    pub fn delete_leaving_tombstone(&self, rules: &WriteRules, key: &str) -> Result<Deleted, WriteRefused> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let deleted = rules.admits_delete(&Stored::found(items.get(key)))?;
        if deleted == Deleted::Deleted || rules.owner.is_none() {
            let tombstone = Stored { value: None, fence: Some(rules.fence.clone()), owner: rules.owner.clone() };
            items.insert(key.to_owned(), tombstone);
        }
        Ok(deleted)
    }

    /// Puts `value` at `key` as something other than cfn-once would: no fence, no owner (a
    /// record that existed before the stack).
    pub fn insert_unowned(&self, key: &str, value: Value) {
        let stored = Stored { value: Some(value), fence: None, owner: None };
        self.items.lock().unwrap_or_else(PoisonError::into_inner).insert(key.to_owned(), stored);
    }

    /// The value at `key`; `None` if there is none, or a delete left only its tombstone.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner).get(key).and_then(|stored| stored.value.clone())
    }

    /// The fence (scope and value) of the last write or delete of `key`.
    pub fn written_by(&self, key: &str) -> Option<Fence> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner).get(key).and_then(|stored| stored.fence.clone())
    }

    /// The fence value of the last write or delete of `key`.
    pub fn fence_of(&self, key: &str) -> Option<u64> {
        self.written_by(key).map(|fence| fence.value)
    }

    /// The owner of the item at `key`, if it is live and owned.
    pub fn owner_of(&self, key: &str) -> Option<Owner> {
        let items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.get(key).filter(|stored| stored.value.is_some()).and_then(|stored| stored.owner.clone())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    #[test]
    fn the_maps_delete_leaves_nothing_and_an_opt_in_tombstone_refuses_a_stale_write_of_the_request() {
        let owner = Owner::new("arn:aws:cloudformation:us-east-1:123456789012:stack/s/1", "Item");
        let rules = |value| WriteRules::owned(&Fence { scope: "request-a".into(), value }, owner.clone());
        let map = FencedMap::new();
        map.put(&rules(1), "k", json!("one")).expect("fence 1 writes");
        assert_eq!(map.delete(&rules(2), "k"), Ok(Deleted::Deleted));
        assert_eq!((map.get("k"), map.written_by("k")), (None, None), "nothing left, not even a fence");

        let map = FencedMap::new();
        map.put(&rules(1), "k", json!("one")).expect("fence 1 writes");
        assert_eq!(map.delete_leaving_tombstone(&rules(2), "k"), Ok(Deleted::Deleted));
        assert_eq!(map.get("k"), None, "a tombstone is no item");
        assert_eq!(
            map.put(&rules(1), "k", json!("resurrected")),
            Err(WriteRefused::FencedOut { fence: 1, newer: 2 }),
            "the tombstone refuses the stale write of the same request"
        );
    }
}
