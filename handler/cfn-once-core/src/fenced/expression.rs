//! The expressions of a fenced write: the author's own [`Condition`] and [`Update`], and the one
//! condition expression a write is sent with (fence, owner, token, and the author's condition).
//!
//! Every placeholder of cfn-once's own starts with `#cfn_once` or `:cfn_once`, so none collides
//! with an author's.

use std::collections::{BTreeMap, HashMap};

use super::dialect::{Dialect, Literal, canonical_part};
use super::{
    DELETED_ATTRIBUTE, EXPIRES_ATTRIBUTE, FENCE_ATTRIBUTE, OWNER_ATTRIBUTE, SCOPE_ATTRIBUTE, WRITES_ATTRIBUTE,
};
use crate::ownership::WriteRules;
use crate::write_token::WriteToken;

/// A condition of your own, ANDed with the fence (and owner) condition: an expression with its
/// placeholders.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition<V> {
    expression: String,
    names: HashMap<String, String>,
    values: HashMap<String, V>,
}

impl<V> Condition<V> {
    /// `expression`, e.g. `#plan <> :frozen`.
    pub fn new(expression: impl Into<String>) -> Self {
        Self { expression: expression.into(), names: HashMap::new(), values: HashMap::new() }
    }

    /// Names the attribute `#placeholder` stands for.
    pub fn name(mut self, placeholder: &str, attribute: &str) -> Self {
        self.names.insert(placeholder.to_owned(), attribute.to_owned());
        self
    }

    /// Gives `:placeholder` its value.
    pub fn value(mut self, placeholder: &str, value: V) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }
}

/// An update of your own, clause by clause (`SET`, `REMOVE`, `ADD`, `DELETE`); the fence, owner
/// and write token attributes are set alongside.
#[derive(Debug, Clone, PartialEq)]
pub struct Update<V> {
    set: Vec<String>,
    remove: Vec<String>,
    add: Vec<String>,
    delete: Vec<String>,
    names: HashMap<String, String>,
    values: HashMap<String, V>,
}

impl<V> Default for Update<V> {
    fn default() -> Self {
        Self {
            set: Vec::new(),
            remove: Vec::new(),
            add: Vec::new(),
            delete: Vec::new(),
            names: HashMap::new(),
            values: HashMap::new(),
        }
    }
}

impl<V> Update<V> {
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

    /// An `ADD` action, e.g. `#seats :one` (an atomic counter, or adding to a set). Applied once
    /// per request: not again when the write is sent again after an unknown outcome, nor when
    /// the provider runs again and makes the same update, whatever other writers did between.
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
    pub fn value(mut self, placeholder: &str, value: V) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }
}

/// What a write does to the item, for its condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A put or update: may create the item, leaves the write's token on it.
    Write,
    /// A delete that leaves a tombstone carrying the write's token.
    Tombstone,
    /// A delete that removes the item, leaving nothing to carry a token.
    Delete,
}

/// The condition expression, names and values of one write.
#[derive(Debug)]
pub struct Expression<V> {
    /// The condition expression.
    pub text: String,
    /// Its attribute names, and the update's.
    pub names: HashMap<String, String>,
    /// Its values, and the update's.
    pub values: HashMap<String, V>,
}

impl<V: Clone> Expression<V> {
    /// The fence clause; for an owned write the owner clause; for a write that leaves its token
    /// the token clause, so that the write is never applied where it already was; and the
    /// author's own condition (`extra`). A put or update may create the item; a delete must
    /// find it live and owned.
    pub fn for_write<D: Dialect<Value = V>>(
        rules: &WriteRules,
        key: &HashMap<String, V>,
        kind: Kind,
        token: &WriteToken,
        extra: Option<&Condition<V>>,
    ) -> Self {
        let may_create = kind == Kind::Write;
        let mut names = HashMap::from([
            ("#cfn_once_fence".to_owned(), FENCE_ATTRIBUTE.to_owned()),
            ("#cfn_once_scope".to_owned(), SCOPE_ATTRIBUTE.to_owned()),
        ]);
        let mut values = HashMap::from([
            (":cfn_once_fence".to_owned(), D::value(Literal::N(rules.fence.value.to_string()))),
            (":cfn_once_scope".to_owned(), D::value(Literal::S(rules.fence.scope.clone()))),
        ]);
        let mut clauses = vec![
            "(attribute_not_exists(#cfn_once_fence) OR #cfn_once_scope <> :cfn_once_scope OR #cfn_once_fence <= :cfn_once_fence)"
                .to_owned(),
        ];
        if kind != Kind::Delete {
            names.insert("#cfn_once_writes".into(), WRITES_ATTRIBUTE.into());
            values.insert(":cfn_once_write".into(), D::value(Literal::S(token.text().to_owned())));
            values.insert(":cfn_once_write_before".into(), D::value(Literal::S(token.earlier().to_owned())));
            clauses.push(
                "(NOT contains(#cfn_once_writes, :cfn_once_write) AND NOT contains(#cfn_once_writes, :cfn_once_write_before))"
                    .into(),
            );
        }
        if let Some(owner) = rules.owner.as_ref().filter(|_| !(may_create && rules.adopt)) {
            names.insert("#cfn_once_owner".into(), OWNER_ATTRIBUTE.into());
            names.insert("#cfn_once_deleted".into(), DELETED_ATTRIBUTE.into());
            values.insert(":cfn_once_owner".into(), D::value(Literal::S(owner.as_str().to_owned())));
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

    /// The update expression of `update` under `rules`, stamped as a put is (fence, scope, owner)
    /// with the write's token added to the item's, and a tombstone's attributes removed. Adds
    /// its names and values to this condition's, which the update is sent with.
    pub fn update_text<D: Dialect<Value = V>>(
        &mut self,
        rules: &WriteRules,
        update: Update<V>,
        token: &WriteToken,
    ) -> String {
        self.names.extend(update.names);
        self.values.extend(update.values);
        let mut set = update.set;
        set.push("#cfn_once_fence = :cfn_once_fence".into());
        set.push("#cfn_once_scope = :cfn_once_scope".into());
        if let Some(owner) = &rules.owner {
            set.push("#cfn_once_owner = :cfn_once_owner".into());
            self.names.insert("#cfn_once_owner".into(), OWNER_ATTRIBUTE.into());
            self.values.insert(":cfn_once_owner".into(), D::value(Literal::S(owner.as_str().to_owned())));
        }
        self.names.insert("#cfn_once_writes".into(), WRITES_ATTRIBUTE.into());
        self.values.insert(":cfn_once_writes".into(), D::value(Literal::Ss(vec![token.text().to_owned()])));
        self.names.insert("#cfn_once_deleted".into(), DELETED_ATTRIBUTE.into());
        self.names.insert("#cfn_once_expires".into(), EXPIRES_ATTRIBUTE.into());
        let mut remove = update.remove;
        remove.push("#cfn_once_deleted".into());
        remove.push("#cfn_once_expires".into());
        let mut add = update.add;
        add.push("#cfn_once_writes :cfn_once_writes".into());
        let mut text = format!("SET {} REMOVE {} ADD {}", set.join(", "), remove.join(", "), add.join(", "));
        if !update.delete.is_empty() {
            text.push_str(&format!(" DELETE {}", update.delete.join(", ")));
        }
        text
    }
}

/// What identifies a write for its token: what it is (`kind`), where (`key`), what it writes
/// (a put's `attributes`, an update's clauses) and under which condition of the author's, all
/// written out canonically. The fence is not in it: a rerun under a higher fence makes the same
/// write.
pub fn identity<D: Dialect>(
    kind: &str,
    key: &HashMap<String, D::Value>,
    attributes: Option<&HashMap<String, D::Value>>,
    update: Option<&Update<D::Value>>,
    condition: Option<&Condition<D::Value>>,
) -> String {
    let mut out = String::new();
    canonical_part(&mut out, "kind", kind);
    let mut values = |tag: &str, map: &HashMap<String, D::Value>| {
        let sorted: BTreeMap<_, _> = map.iter().collect();
        out.push_str(&format!("{tag}{}{{", sorted.len()));
        for (name, value) in sorted {
            canonical_part(&mut out, "", name);
            D::canonical(value, &mut out);
        }
        out.push('}');
    };
    values("key", key);
    if let Some(attributes) = attributes {
        values("item", attributes);
    }
    if let Some(update) = update {
        values("values", &update.values);
    }
    if let Some(condition) = condition {
        values("condition-values", &condition.values);
    }
    let mut texts = |tag: &str, parts: &[String]| {
        out.push_str(&format!("{tag}{}[", parts.len()));
        for part in parts {
            canonical_part(&mut out, "", part);
        }
        out.push(']');
    };
    if let Some(update) = update {
        texts("set", &update.set);
        texts("remove", &update.remove);
        texts("add", &update.add);
        texts("delete", &update.delete);
        let names: Vec<String> =
            update.names.iter().collect::<BTreeMap<_, _>>().iter().map(|(k, v)| format!("{k}={v}")).collect();
        texts("names", &names);
    }
    if let Some(condition) = condition {
        texts("condition", std::slice::from_ref(&condition.expression));
        let names: Vec<String> =
            condition.names.iter().collect::<BTreeMap<_, _>>().iter().map(|(k, v)| format!("{k}={v}")).collect();
        texts("condition-names", &names);
    }
    out
}
