//! The expressions of a fenced write: the author's own [`Condition`] and [`Update`], and the one
//! condition expression a write is sent with (fence, owner, token, and the author's condition).
//!
//! Every placeholder of cfn-once's own starts with `#cfn_once` or `:cfn_once`, so none collides
//! with an author's.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::ownership::WriteRules;

use super::{
    DELETED_ATTRIBUTE, EXPIRES_ATTRIBUTE, FENCE_ATTRIBUTE, Item, OWNER_ATTRIBUTE, SCOPE_ATTRIBUTE, WRITE_ATTRIBUTE,
};

/// A condition of your own, ANDed with the fence (and owner) condition: an expression with its
/// placeholders.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Condition {
    expression: String,
    names: HashMap<String, String>,
    values: Item,
}

impl Condition {
    /// `expression`, e.g. `#plan <> :frozen`.
    pub fn new(expression: impl Into<String>) -> Self {
        Self { expression: expression.into(), ..Self::default() }
    }

    /// Names the attribute `#placeholder` stands for.
    pub fn name(mut self, placeholder: &str, attribute: &str) -> Self {
        self.names.insert(placeholder.to_owned(), attribute.to_owned());
        self
    }

    /// Gives `:placeholder` its value.
    pub fn value(mut self, placeholder: &str, value: AttributeValue) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }
}

/// An update of your own, clause by clause (`SET`, `REMOVE`, `ADD`, `DELETE`); the fence, owner
/// and write token attributes are set alongside.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Update {
    set: Vec<String>,
    remove: Vec<String>,
    add: Vec<String>,
    delete: Vec<String>,
    names: HashMap<String, String>,
    values: Item,
}

impl Update {
    /// An update that changes nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A `SET` action, e.g. `#plan = :plan`.
    pub fn set(mut self, action: impl Into<String>) -> Self {
        self.set.push(action.into());
        self
    }

    /// A `REMOVE` action, e.g. `#legacy`.
    pub fn remove(mut self, action: impl Into<String>) -> Self {
        self.remove.push(action.into());
        self
    }

    /// An `ADD` action, e.g. `#seats :one` (an atomic counter, or adding to a set). Applied at
    /// most once per write, even when the write is sent again after an unknown outcome.
    pub fn add_to(mut self, action: impl Into<String>) -> Self {
        self.add.push(action.into());
        self
    }

    /// A `DELETE` action (removing members from a set), e.g. `#tags :old`.
    pub fn delete_from(mut self, action: impl Into<String>) -> Self {
        self.delete.push(action.into());
        self
    }

    /// Names the attribute `#placeholder` stands for.
    pub fn name(mut self, placeholder: &str, attribute: &str) -> Self {
        self.names.insert(placeholder.to_owned(), attribute.to_owned());
        self
    }

    /// Gives `:placeholder` its value.
    pub fn value(mut self, placeholder: &str, value: AttributeValue) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }
}

/// What a write does to the item, for its condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A put or update: may create the item, leaves the write's token on it.
    Write,
    /// A delete that leaves a tombstone carrying the write's token.
    Tombstone,
    /// A delete that removes the item, leaving nothing to carry a token.
    Delete,
}

/// The condition expression, names and values of one write.
#[derive(Debug)]
pub(super) struct Expression {
    pub(super) text: String,
    pub(super) names: HashMap<String, String>,
    pub(super) values: Item,
}

impl Expression {
    /// The fence clause; for an owned write the owner clause; for a write that leaves its token
    /// (`token`) the token clause, so that two attempts of one write never both apply; and the
    /// author's own condition (`extra`). A put or update may create the item; a delete must find
    /// it live and owned.
    pub(super) fn for_write(
        rules: &WriteRules,
        key: &Item,
        kind: Kind,
        token: &str,
        extra: Option<&Condition>,
    ) -> Self {
        let may_create = kind == Kind::Write;
        let mut names = HashMap::from([
            ("#cfn_once_fence".to_owned(), FENCE_ATTRIBUTE.to_owned()),
            ("#cfn_once_scope".to_owned(), SCOPE_ATTRIBUTE.to_owned()),
        ]);
        let mut values = HashMap::from([
            (":cfn_once_fence".to_owned(), AttributeValue::N(rules.fence.value.to_string())),
            (":cfn_once_scope".to_owned(), AttributeValue::S(rules.fence.scope.clone())),
        ]);
        let mut clauses = vec![
            "(attribute_not_exists(#cfn_once_fence) OR #cfn_once_scope <> :cfn_once_scope OR #cfn_once_fence <= :cfn_once_fence)"
                .to_owned(),
        ];
        if kind != Kind::Delete {
            names.insert("#cfn_once_write".into(), WRITE_ATTRIBUTE.into());
            values.insert(":cfn_once_write".into(), AttributeValue::S(token.to_owned()));
            clauses.push("(attribute_not_exists(#cfn_once_write) OR #cfn_once_write <> :cfn_once_write)".into());
        }
        if let Some(owner) = rules.owner.as_ref().filter(|_| !(may_create && rules.adopt)) {
            names.insert("#cfn_once_owner".into(), OWNER_ATTRIBUTE.into());
            names.insert("#cfn_once_deleted".into(), DELETED_ATTRIBUTE.into());
            values.insert(":cfn_once_owner".into(), AttributeValue::S(owner.as_str().to_owned()));
            if !may_create {
                clauses.push("(#cfn_once_owner = :cfn_once_owner AND attribute_not_exists(#cfn_once_deleted))".into());
            } else {
                // Any key attribute exists on every item: its absence means there is none.
                let absent = match key.keys().min() {
                    Some(name) => {
                        names.insert("#cfn_once_key".into(), name.clone());
                        "attribute_not_exists(#cfn_once_key) OR "
                    }
                    None => "",
                };
                clauses.push(format!(
                    "({absent}attribute_exists(#cfn_once_deleted) OR #cfn_once_owner = :cfn_once_owner)"
                ));
            }
        }
        if let Some(condition) = extra {
            clauses.push(format!("({})", condition.expression));
            names.extend(condition.names.clone());
            values.extend(condition.values.clone());
        }
        Self { text: clauses.join(" AND "), names, values }
    }

    /// The update expression of `update` under `rules`, stamped as a put is (fence, scope, owner,
    /// the write's token), and a tombstone's attributes removed. Adds its names and values to
    /// this condition's, which the update is sent with.
    pub(super) fn update_text(&mut self, rules: &WriteRules, update: Update) -> String {
        self.names.extend(update.names);
        self.values.extend(update.values);
        let mut set = update.set;
        set.push("#cfn_once_fence = :cfn_once_fence".into());
        set.push("#cfn_once_scope = :cfn_once_scope".into());
        set.push("#cfn_once_write = :cfn_once_write".into());
        if let Some(owner) = &rules.owner {
            set.push("#cfn_once_owner = :cfn_once_owner".into());
            self.names.insert("#cfn_once_owner".into(), OWNER_ATTRIBUTE.into());
            self.values.insert(":cfn_once_owner".into(), AttributeValue::S(owner.as_str().to_owned()));
        }
        self.names.insert("#cfn_once_deleted".into(), DELETED_ATTRIBUTE.into());
        self.names.insert("#cfn_once_expires".into(), EXPIRES_ATTRIBUTE.into());
        let mut remove = update.remove;
        remove.push("#cfn_once_deleted".into());
        remove.push("#cfn_once_expires".into());
        let mut text = format!("SET {} REMOVE {}", set.join(", "), remove.join(", "));
        if !update.add.is_empty() {
            text.push_str(&format!(" ADD {}", update.add.join(", ")));
        }
        if !update.delete.is_empty() {
            text.push_str(&format!(" DELETE {}", update.delete.join(", ")));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfn_once_core::ownership::{Fence, Owner};

    fn rules() -> WriteRules {
        WriteRules::owned(&Fence { scope: "r".into(), value: 2 }, Owner::new("stack", "Mine"))
    }

    fn key() -> Item {
        Item::from([("pk".to_owned(), AttributeValue::S("x".into()))])
    }

    #[test]
    fn every_write_but_a_plain_delete_is_refused_where_its_token_already_is() {
        let check = |kind: Kind, carries: bool| {
            let expression = Expression::for_write(&rules(), &key(), kind, "t1", None);
            assert_eq!(expression.text.contains("#cfn_once_write <> :cfn_once_write"), carries, "{kind:?}");
            assert_eq!(
                expression.values.get(":cfn_once_write"),
                carries.then(|| AttributeValue::S("t1".into())).as_ref(),
                "{kind:?}"
            );
        };
        check(Kind::Write, true);
        check(Kind::Tombstone, true);
        check(Kind::Delete, false);
    }

    #[test]
    fn an_update_stamps_the_token_with_the_fence() {
        let mut expression = Expression::for_write(&rules(), &key(), Kind::Write, "t1", None);
        let text = expression.update_text(&rules(), Update::new().add_to("#n :one"));
        assert!(text.starts_with("SET #cfn_once_fence = :cfn_once_fence, #cfn_once_scope = :cfn_once_scope, #cfn_once_write = :cfn_once_write"), "{text}");
        assert!(text.ends_with(" ADD #n :one"), "{text}");
        assert_eq!(expression.names.get("#cfn_once_write").map(String::as_str), Some(WRITE_ATTRIBUTE));
    }
}
