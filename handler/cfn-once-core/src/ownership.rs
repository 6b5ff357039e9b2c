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
//!
//! **A write that stands is never reported failed.** A write's outcome can be unknown: it timed
//! out, or was answered with a 5xx, or its reply was lost, after the table applied it. So every
//! write carries a token of its own, the same in all its attempts and in every rerun of the
//! request that makes the same write (`crate::fenced::WriteToken`), leaves it on the item, and
//! holds only where the item does not carry it already: a write of a request is applied once,
//! whatever order its attempts land in and whatever other writers do between them (an `ADD` is
//! added once per request). The write is then sent again, and if that attempt is refused, the
//! item that refused it tells what happened ([`WriteRules::refused_write`],
//! [`WriteRules::refused_delete`]): this write's token on it means the write applied and stands
//! ([`Written::Stands`]); otherwise the rules or the author's own condition refused a write that
//! is not in the item. What "a write" is, and when an outcome stays unknown, is
//! `crate::fenced`'s.

use crate::write_token::{WriteScope, WriteToken};

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
    /// Whose writes these are, for their tokens: the step of the request that makes them
    /// (`ProviderContext::owned`, `ProviderContext::fenced`), or the bare request.
    writes: WriteScope,
}

impl WriteRules {
    /// Fenced only: for stores that are not a resource's own (a counter shared by resources,
    /// say). Prefer owned writes (`ProviderContext::owned`).
    ///
    /// Rules made here from a bare fence know only the request, not its step: every identical
    /// write of the request is one write, applied once (an `ADD` of the same value to the same
    /// item, made twice by one run or once by the run and once by a poll, counts once). A
    /// provider takes its rules from `ProviderContext::fenced` or `ProviderContext::owned`.
    pub fn fenced(fence: &Fence) -> Self {
        Self { fence: fence.clone(), owner: None, adopt: false, writes: WriteScope::of_request(&fence.scope) }
    }

    /// Fenced and owned by `owner`: the rule every provider should follow. A provider gets
    /// these for the resource it runs for from `ProviderContext::owned`.
    pub fn owned(fence: &Fence, owner: Owner) -> Self {
        Self { owner: Some(owner), ..Self::fenced(fence) }
    }

    /// The same rules, for the writes of `writes` (a step of a request).
    pub fn made_by(mut self, writes: &WriteScope) -> Self {
        self.writes = writes.clone();
        self
    }

    /// The token of the next write under these rules whose canonical form is `content`
    /// (`cfn_once_core::fenced::identity`), made at `now_ms`.
    pub fn token(&self, content: &str, now_ms: u64) -> WriteToken {
        self.writes.token(content, now_ms)
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

    /// What a create or update comes to when its condition was refused by the item `found`,
    /// which `carries` the write's token or not (`cfn_once_core::fenced::carries`).
    ///
    /// The write's own token on the item means the write applied before (an earlier attempt
    /// whose reply was lost, or an earlier run of the request) and stands: [`Written::Stands`],
    /// whatever the write's condition says of the item now. Updates keep the tokens they find,
    /// so other writers' updates between the attempts do not hide it; a put replaces the item,
    /// and the tokens on it with it. Otherwise the write is not in the item: the rules refuse it
    /// ([`Refusal::Rules`]: a newer fence, another owner), or, where they would admit it, the
    /// author's own condition is false ([`Refusal::Condition`]).
    pub fn refused_write(&self, carries: bool, found: &Found) -> Result<Written, Refusal> {
        if carries {
            return Ok(Written::Stands);
        }
        match self.admits_write(found) {
            Ok(_) => Err(Refusal::Condition),
            Err(refused) => Err(Refusal::Rules(refused)),
        }
    }

    /// As [`WriteRules::refused_write`], for a delete (a delete leaving a tombstone stamps its
    /// token there; a delete that removes the item leaves none).
    ///
    /// A tombstone carrying the token is this delete's, applied by an earlier attempt:
    /// [`Deleted::Deleted`]. No item, a tombstone of another write, or an item that is not the
    /// resource's are successes as [`WriteRules::admits_delete`] says ([`Deleted::Absent`],
    /// [`Deleted::NotOwned`]); after an attempt whose outcome was unknown, `Absent` may be this
    /// delete's own work, which removed the item and left nothing to tell it by. An item the
    /// rules would delete refused it by the author's own condition ([`Refusal::Condition`]).
    pub fn refused_delete(&self, carries: bool, found: &Found) -> Result<Deleted, Refusal> {
        if carries && matches!(found, Found::Tombstone { .. }) {
            return Ok(Deleted::Deleted);
        }
        match self.admits_delete(found) {
            Ok(Deleted::Deleted) => Err(Refusal::Condition),
            Ok(other) => Ok(other),
            Err(refused) => Err(Refusal::Rules(refused)),
        }
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

    /// The fence of the write that left it, if any.
    pub fn fence(&self) -> Option<&Fence> {
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
    /// An earlier attempt of this write applied (its reply was lost, or it timed out) and the
    /// item still carries it: written, but whether it created, replaced or adopted the item is
    /// not known.
    Stands,
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

/// Why a write's condition was refused where the write is not in the item
/// ([`WriteRules::refused_write`], [`WriteRules::refused_delete`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The rules refuse it: a newer execution of the request wrote the item, or it is another's.
    Rules(WriteRefused),
    /// The rules admit it: the write's own condition (the author's) is false where the item is.
    Condition,
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
        WriteRules::owned(&fence("r", 2), Owner::new("stack", "Mine")).adopting(adopt)
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
    fn a_refused_write_stands_where_the_item_carries_its_token() {
        let mine = Some("stack/Mine");
        let check = |found: Found, found_token: Option<&str>, expected: Result<Written, Refusal>| {
            assert_eq!(
                rules(false).refused_write(found_token == Some("t1"), &found),
                expected,
                "{found:?}, {found_token:?}"
            );
        };
        // An earlier attempt applied: whatever refused this one (the author's condition, which
        // that attempt made false; the token clause), the write stands.
        check(item(mine, Some(fence("r", 2))), Some("t1"), Ok(Written::Stands));
        // ... even where a later write of the rules' kind would be refused: the token is what
        // counts, and only this write carries it.
        check(item(Some("stack/Other"), Some(fence("r", 2))), Some("t1"), Ok(Written::Stands));
        // Another write's token: the rules explain the refusal, or else the author's condition.
        check(item(mine, Some(fence("r", 2))), Some("t0"), Err(Refusal::Condition));
        check(item(mine, Some(fence("r", 1))), None, Err(Refusal::Condition));
        check(Found::Absent, None, Err(Refusal::Condition));
        check(Found::Tombstone { fence: Some(fence("r", 1)) }, Some("t0"), Err(Refusal::Condition));
        check(
            item(mine, Some(fence("r", 3))),
            Some("t3"),
            Err(Refusal::Rules(WriteRefused::FencedOut { fence: 2, newer: 3 })),
        );
        check(
            Found::Tombstone { fence: Some(fence("r", 3)) },
            Some("t3"),
            Err(Refusal::Rules(WriteRefused::FencedOut { fence: 2, newer: 3 })),
        );
        check(
            item(Some("stack/Other"), Some(fence("x", 1))),
            Some("t9"),
            Err(Refusal::Rules(WriteRefused::OwnedByAnother { owner: Some(Owner::from_stored("stack/Other")) })),
        );
        check(item(None, None), None, Err(Refusal::Rules(WriteRefused::OwnedByAnother { owner: None })));
        let adopting = rules(true);
        assert_eq!(adopting.refused_write(false, &item(None, None)), Err(Refusal::Condition), "adopt admits it");
        let fenced = WriteRules::fenced(&fence("r", 2));
        assert_eq!(fenced.refused_write(true, &item(None, Some(fence("r", 2)))), Ok(Written::Stands));
        assert_eq!(fenced.refused_write(false, &item(None, None)), Err(Refusal::Condition));
    }

    #[test]
    fn a_refused_delete_is_explained_by_its_tombstone_or_the_rules() {
        let check = |found: Found, found_token: Option<&str>, expected: Result<Deleted, Refusal>| {
            assert_eq!(
                rules(false).refused_delete(found_token == Some("t1"), &found),
                expected,
                "{found:?}, {found_token:?}"
            );
        };
        // This delete's own tombstone: an earlier attempt deleted the item.
        check(Found::Tombstone { fence: Some(fence("r", 2)) }, Some("t1"), Ok(Deleted::Deleted));
        // Nothing there, or another's tombstone: nothing to delete (maybe this delete removed it).
        check(Found::Absent, None, Ok(Deleted::Absent));
        check(Found::Tombstone { fence: Some(fence("r", 1)) }, Some("t0"), Ok(Deleted::Absent));
        check(
            item(Some("stack/Other"), None),
            Some("t0"),
            Ok(Deleted::NotOwned { owner: Some(Owner::from_stored("stack/Other")) }),
        );
        // The resource's own item, which the rules would delete: the author's condition refused.
        check(item(Some("stack/Mine"), Some(fence("r", 1))), Some("t0"), Err(Refusal::Condition));
        // An item carrying this delete's token is no tombstone: this delete did not remove it.
        check(item(Some("stack/Mine"), Some(fence("r", 2))), Some("t1"), Err(Refusal::Condition));
        check(
            item(Some("stack/Mine"), Some(fence("r", 5))),
            Some("t5"),
            Err(Refusal::Rules(WriteRefused::FencedOut { fence: 2, newer: 5 })),
        );
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
