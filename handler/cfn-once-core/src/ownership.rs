//! The rules of a provider's writes: fenced (S2) and owned.
//!
//! A provider owns only what it created. Every item it writes records its [`Owner`], the stack
//! and logical resource (`<StackId>/<LogicalResourceId>`), and an owned write holds only where
//! the item is absent, deleted, or already this resource's:
//!
//! * a Create (or a replacing Update) that finds an item of another owner, or one cfn-once did
//!   not write, is refused ([`WriteRefused::OwnedByAnother`]) unless the author's resource opts
//!   in to taking it over ([`WriteRules::adopting`], reported as [`Written::Adopted`]);
//! * a Delete removes only an item this resource owns, and otherwise does nothing
//!   ([`Deleted::NotOwned`], [`Deleted::Absent`]): a rollback Delete after a failed Create
//!   never destroys what existed before the stack, or another resource's item.
//!
//! Fenced and owned are one condition of one write, never a read followed by a write: the
//! DynamoDB table (`cfn_once::FencedTable`) sends it as one condition expression, the test kit's
//! `FencedMap` checks it under one lock. [`WriteRules`] is what both take; a provider gets its
//! own from its context (`ProviderContext::owned`).

/// The fencing token of one execution of one request.
///
/// `value` strictly increases for a request across regions and crashes (invariant S3). A fenced
/// store accepts a write only if no write with a higher `value` for the same `scope` was
/// accepted before (invariant S2). `scope` is a short digest of StackId and RequestId.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// What fenced writes are compared within: one scope per request.
    pub scope: String,
    /// The fencing token: a write carrying a lower value than one already accepted is stale.
    pub value: u64,
}

/// Who owns an item: one logical resource of one stack, `<StackId>/<LogicalResourceId>`.
///
/// A stack deleted and created again under the same name has a new StackId, so it does not own
/// what the old one left behind (a `DeletionPolicy: Retain`, say) until it adopts it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(String);

impl Owner {
    /// The resource `logical_resource_id` of stack `stack_id`.
    pub fn new(stack_id: &str, logical_resource_id: &str) -> Self {
        Self(format!("{stack_id}/{logical_resource_id}"))
    }

    /// An owner as it was stored.
    pub fn from_stored(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The stored spelling.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How one write is conditioned: always on the fence; for an owned write, on the owner too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRules {
    /// The writing execution's fence: a write of an older execution of the same request is
    /// refused (S2).
    pub fence: Fence,
    /// The resource that must own the item (or find it free); `None` for a write that is
    /// fenced only.
    pub owner: Option<Owner>,
    /// Take over an item of another owner, or one cfn-once did not write: the explicit,
    /// documented opt-in (`Adopt: "true"` on the shipped providers).
    pub adopt: bool,
}

impl WriteRules {
    /// Fenced only: for stores that are not a resource's own (a counter shared by resources,
    /// say). Prefer owned writes (`ProviderContext::owned`).
    pub fn fenced(fence: &Fence) -> Self {
        Self { fence: fence.clone(), owner: None, adopt: false }
    }

    /// Fenced and owned by `owner`: the rule every provider should follow. A provider gets
    /// these for the resource it runs for from `ProviderContext::owned`.
    pub fn owned(fence: &Fence, owner: Owner) -> Self {
        Self { fence: fence.clone(), owner: Some(owner), adopt: false }
    }

    /// With `adopt`, a create or update takes over an item of another owner instead of being
    /// refused (deletes are not affected: an adopted item is owned, and deleted, as any other).
    pub fn adopting(mut self, adopt: bool) -> Self {
        self.adopt = adopt;
        self
    }

    /// Whether a write under these rules may overwrite an item in the state `found`.
    pub fn admits_write(&self, found: &Found) -> Result<Written, WriteRefused> {
        self.check_fence(found)?;
        let Some(owner) = &self.owner else {
            return Ok(if found.exists() { Written::Replaced } else { Written::Created });
        };
        match found {
            Found::Absent | Found::Tombstone { .. } => Ok(Written::Created),
            Found::Item { owner: Some(stored), .. } if stored == owner => Ok(Written::Replaced),
            Found::Item { owner: previous, .. } if self.adopt => {
                Ok(Written::Adopted { previous_owner: previous.clone() })
            }
            Found::Item { owner: previous, .. } => Err(WriteRefused::OwnedByAnother { owner: previous.clone() }),
        }
    }

    /// What a delete under these rules does to an item in the state `found`.
    pub fn admits_delete(&self, found: &Found) -> Result<Deleted, WriteRefused> {
        match found {
            Found::Absent | Found::Tombstone { .. } => return Ok(Deleted::Absent),
            Found::Item { owner: stored, .. } => {
                if let Some(owner) = &self.owner
                    && stored.as_ref() != Some(owner)
                {
                    return Ok(Deleted::NotOwned { owner: stored.clone() });
                }
            }
        }
        self.check_fence(found)?;
        Ok(Deleted::Deleted)
    }

    /// `attribute_not_exists(fence) OR scope <> :scope OR fence <= :fence`.
    fn check_fence(&self, found: &Found) -> Result<(), WriteRefused> {
        match found.fence() {
            Some(written) if written.scope == self.fence.scope && written.value > self.fence.value => {
                Err(WriteRefused::FencedOut { fence: self.fence.value, newer: written.value })
            }
            _ => Ok(()),
        }
    }
}

/// What a write found where it wrote: the state the rules are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Nothing at that key.
    Absent,
    /// A deleted item's tombstone, with the fence that deleted it.
    Tombstone {
        /// The deleting execution's fence.
        fence: Option<Fence>,
    },
    /// An item.
    Item {
        /// Its owner; `None` for an item cfn-once did not write (it existed before the stack,
        /// or something else wrote it).
        owner: Option<Owner>,
        /// The fence of its last fenced write, if any.
        fence: Option<Fence>,
    },
}

impl Found {
    fn exists(&self) -> bool {
        matches!(self, Self::Item { .. })
    }

    fn fence(&self) -> Option<&Fence> {
        match self {
            Self::Absent => None,
            Self::Tombstone { fence } | Self::Item { fence, .. } => fence.as_ref(),
        }
    }
}

/// What a create or update did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// There was nothing (or only a tombstone): the item is new.
    Created,
    /// The item was this resource's (or the write is fenced only): replaced or updated.
    Replaced,
    /// The item was another owner's, or not cfn-once's, and the write took it over.
    Adopted {
        /// Who owned it; `None` if cfn-once did not write it.
        previous_owner: Option<Owner>,
    },
}

/// What a delete did. Every one of these is a success: a Delete must succeed whether or not
/// there was anything of this resource's to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    /// The resource's item is gone (a tombstone holds its fence).
    Deleted,
    /// There was no item (or it was already deleted).
    Absent,
    /// The item belongs to another owner, or cfn-once did not write it: left as it is.
    NotOwned {
        /// Its owner; `None` if cfn-once did not write it.
        owner: Option<Owner>,
    },
}

/// Why an owned or fenced write was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteRefused {
    /// A newer execution of the same request already wrote the item.
    #[error(
        "a newer execution of this request (fence {newer}) already wrote the item; this stale write (fence {fence}) was refused"
    )]
    FencedOut {
        /// The refused write's fence.
        fence: u64,
        /// The fence that wrote the item last.
        newer: u64,
    },
    /// The item belongs to another resource, or cfn-once did not write it.
    #[error("{}", owned_by_another(owner.as_ref()))]
    OwnedByAnother {
        /// Its owner; `None` if cfn-once did not write it.
        owner: Option<Owner>,
    },
}

fn owned_by_another(owner: Option<&Owner>) -> String {
    match owner {
        Some(owner) => format!("the item belongs to another resource, {owner}"),
        None => "the item exists and was not written by cfn-once".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(scope: &str, value: u64) -> Fence {
        Fence { scope: scope.into(), value }
    }

    fn rules(adopt: bool) -> WriteRules {
        WriteRules { fence: fence("r", 2), owner: Some(Owner::new("stack", "Mine")), adopt }
    }

    fn item(owner: Option<&str>, written: Option<Fence>) -> Found {
        Found::Item { owner: owner.map(|o| Owner::from_stored(o.to_owned())), fence: written }
    }

    #[test]
    fn writes_are_fenced_and_owned() {
        let mine = Some("stack/Mine");
        let check = |found: Found, adopt: bool, expected: Result<Written, WriteRefused>| {
            assert_eq!(rules(adopt).admits_write(&found), expected, "{found:?}, adopt {adopt}");
        };
        check(Found::Absent, false, Ok(Written::Created));
        check(Found::Tombstone { fence: Some(fence("other", 9)) }, false, Ok(Written::Created));
        check(item(mine, Some(fence("r", 1))), false, Ok(Written::Replaced));
        check(item(mine, Some(fence("r", 3))), false, Err(WriteRefused::FencedOut { fence: 2, newer: 3 }));
        check(
            item(Some("stack/Other"), Some(fence("x", 1))),
            false,
            Err(WriteRefused::OwnedByAnother { owner: Some(Owner::from_stored("stack/Other")) }),
        );
        check(item(None, None), false, Err(WriteRefused::OwnedByAnother { owner: None }));
        check(
            item(Some("stack/Other"), None),
            true,
            Ok(Written::Adopted { previous_owner: Some(Owner::from_stored("stack/Other")) }),
        );
        check(item(None, None), true, Ok(Written::Adopted { previous_owner: None }));
        check(
            Found::Tombstone { fence: Some(fence("r", 3)) },
            false,
            Err(WriteRefused::FencedOut { fence: 2, newer: 3 }),
        );
        let fenced = WriteRules::fenced(&fence("r", 2));
        assert_eq!(fenced.admits_write(&item(None, None)), Ok(Written::Replaced), "fenced only: no owner rule");
    }

    #[test]
    fn deletes_remove_only_what_the_resource_owns() {
        let check = |found: Found, expected: Result<Deleted, WriteRefused>| {
            assert_eq!(rules(false).admits_delete(&found), expected, "{found:?}");
        };
        check(Found::Absent, Ok(Deleted::Absent));
        check(Found::Tombstone { fence: None }, Ok(Deleted::Absent));
        check(item(Some("stack/Mine"), Some(fence("r", 1))), Ok(Deleted::Deleted));
        check(item(Some("stack/Mine"), Some(fence("r", 5))), Err(WriteRefused::FencedOut { fence: 2, newer: 5 }));
        check(
            item(Some("stack/Other"), None),
            Ok(Deleted::NotOwned { owner: Some(Owner::from_stored("stack/Other")) }),
        );
        check(item(None, None), Ok(Deleted::NotOwned { owner: None }));
        assert_eq!(
            rules(true).admits_delete(&item(None, None)),
            Ok(Deleted::NotOwned { owner: None }),
            "adopt is for writes"
        );
    }
}
