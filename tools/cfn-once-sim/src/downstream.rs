//! The provider's downstream table, written through `cfn_once_core::fenced`: the same tokens,
//! the same condition and update expressions, the same attempts and the same reading of a
//! refusal as `cfn_once::fenced::FencedTable`, sent to a table that evaluates the expressions as
//! DynamoDB does (`stores::expressions`). Between a write's attempts other invocations run, so
//! other requests' writes land there. Checked on every write: S2 (no write accepted under a
//! fence older than one the item already took, for the same request), COUNT (an `ADD` of a
//! request's step applied once), STANDS (a write that stands is never reported failed), and
//! INVALID (an expression DynamoDB would refuse).

use std::collections::HashMap;

use cfn_once_core::clock::Clock;
use cfn_once_core::failure::Failure;
use cfn_once_core::fenced::{
    Attempt, BACKOFF_MS_BASE, Condition, Expression, Failed, FencedWriteError, Kind, Literal, Plain, Sent, Update,
    carries, found, identity, send, stamp,
};
use cfn_once_core::ownership::{Refusal, WriteRules};
use cfn_once_core::provider::ProviderError;

use crate::scenario::Region;
use crate::shared::{Shared, Writer};
use crate::stores::expressions::{self, Item, Placeholders, Used};

/// What a write of the simulated provider does to its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Puts it.
    Put,
    /// Adds 1 to its count (DynamoDB's `ADD`): applied twice, it counts twice.
    Add,
    /// Creates it, with the author's condition that it is absent, which the write itself makes
    /// false: a write of it found applied is told only by its token.
    PutIfAbsent,
}

/// One write to the downstream table: of `item`, doing `op`, by `writer` in `region`, under
/// `rules`.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub shared: &'a Shared,
    pub region: Region,
    pub rules: &'a WriteRules,
    pub writer: &'a Writer,
    pub item: &'a str,
    pub op: Op,
}

/// Makes `write` as `FencedTable` makes it.
pub async fn write(write: Write<'_>) -> Result<(), ProviderError> {
    let Write { shared, rules, item, op, .. } = write;
    let key = Item::from([("pk".to_owned(), Literal::S(item.to_owned()))]);
    let condition = (op == Op::PutIfAbsent).then(|| Condition::new("attribute_not_exists(#pk)").name("#pk", "pk"));
    let update = (op == Op::Add)
        .then(|| Update::new().add_to("#count :one").name("#count", "count").value(":one", Literal::N("1".into())));
    let attributes = (op != Op::Add).then(|| Item::from([("Item".to_owned(), Literal::S(item.to_owned()))]));
    let kind = if op == Op::Add { "update" } else { "put" };
    let mut content = identity::<Plain>(kind, &key, attributes.as_ref(), update.as_ref(), condition.as_ref());
    if shared.token_per_run {
        // The planted bug: the token names the run's fence, so a rerun's write is another.
        content.push_str(&rules.fence.value.to_string());
    }
    let now_ms = shared.clock_ms();
    let token = rules.token(&content, now_ms);
    let mut attempts = 0u32;
    // The item's version our applied attempt left, once one applied (whether or not its reply
    // came back): a write that stands, told apart from the token the code under test reads.
    let mut ours: Option<u64> = None;
    let mut versions_seen: Option<u64> = None;
    let outcome = {
        let attempt = || {
            attempts += 1;
            // The planted bug: every attempt is a write of its own, with a token of its own.
            let token = if shared.unknown_as_not_applied {
                rules.token(&format!("{content}{attempts}"), now_ms)
            } else {
                token.clone()
            };
            let mut expression = Expression::for_write::<Plain>(rules, &key, Kind::Write, &token, condition.as_ref());
            let update_text = update.clone().map(|update| expression.update_text::<Plain>(rules, update, &token));
            let next = |stored: Option<&Item>| -> Result<Item, String> {
                let given = Placeholders { names: &expression.names, values: &expression.values };
                let mut used = Used::default();
                let holds = expressions::holds(&expression.text, stored, &given, &mut used)?;
                let next = match (&update_text, &attributes) {
                    (Some(text), _) => {
                        let mut next = stored.cloned().unwrap_or_else(|| key.clone());
                        expressions::apply(text, &mut next, &given, &mut used)?;
                        next
                    }
                    (None, attributes) => {
                        let mut next = key.clone();
                        next.extend(attributes.clone().unwrap_or_default());
                        stamp::<Plain>(&mut next, rules, &token);
                        next
                    }
                };
                used.all_of(&given)?;
                Ok(if holds { next } else { Item::new() })
            };
            let (result, applied) = apply_attempt(write, next, &mut versions_seen, ours.is_some());
            ours = applied.or(ours);
            // A reply that never comes is given up at the call's timeout, as `FencedTable`'s
            // client gives it up: other writers go on meanwhile.
            let waited = matches!(result, Attempt::Failed(Failed::Other(Failure::Unknown(_))))
                .then(|| shared.clock.sleep_ms(cfn_once_core::config::STORE_TIMEOUT_MS_DEFAULT));
            async move {
                if let Some(waited) = waited {
                    waited.await;
                }
                result
            }
        };
        send("downstream", &shared.clock, BACKOFF_MS_BASE, attempt).await
    };
    match outcome {
        Ok(Sent::Applied(())) => Ok(()),
        Ok(Sent::Refused(stored)) => {
            let carried = !shared.unknown_as_not_applied && carries::<Plain>(stored.as_ref(), &token);
            match rules.refused_write(carried, &found::<Plain>(stored.as_ref())) {
                Ok(_) if ours.is_some() => {
                    shared.cover("fenced write stood after its reply was lost");
                    Ok(())
                }
                Ok(_) => {
                    shared.cover("a rerun found its write applied by an earlier run of the request");
                    Ok(())
                }
                Err(Refusal::Rules(_)) => {
                    shared.cover("stale fenced write refused");
                    Err(ProviderError::Failed(format!(
                        "a newer execution already wrote {item}; fence {} refused",
                        rules.fence.value
                    )))
                }
                Err(Refusal::Condition) => {
                    if ours.is_some() && shared.observed().fenced_versions.get(item).copied() == ours {
                        shared.violation(format!("STANDS: a fenced write of {item} that stands was reported failed"));
                    }
                    Err(ProviderError::Failed(format!("the write of {item} was refused by its condition")))
                }
            }
        }
        Err(error @ FencedWriteError::Unknown(_)) => {
            shared.cover("fenced write left unknown: the provider runs again under a higher fence");
            Err(error.into())
        }
        Err(error) => Err(error.into()),
    }
}

/// One attempt on the table: `next` says what the item becomes (empty: the condition refused
/// it), and the attempt is checked, applied, and its reply maybe lost. With the attempt's
/// result, the item's version it left if it applied.
fn apply_attempt(
    write: Write<'_>,
    next: impl FnOnce(Option<&Item>) -> Result<Item, String>,
    versions_seen: &mut Option<u64>,
    ours_applied: bool,
) -> (Attempt<(), Item>, Option<u64>) {
    let Write { shared, region, rules, writer, item, op } = write;
    let mut observed = shared.observed();
    let stored = observed.fenced.get(item).cloned();
    let version = observed.fenced_versions.get(item).copied().unwrap_or(0);
    // Other writers' writes since the first attempt (our own applied one not counted).
    let between = versions_seen.is_some_and(|seen| version > seen + u64::from(ours_applied));
    versions_seen.get_or_insert(version);
    let next = match next(stored.as_ref()) {
        Ok(next) => next,
        Err(why) => {
            drop(observed);
            shared.violation(format!("INVALID: a fenced write of {item} DynamoDB would refuse: {why}"));
            return (Attempt::Failed(Failed::Other(Failure::Permanent(why))), None);
        }
    };
    if next.is_empty() {
        drop(observed);
        if between {
            shared.cover("another writer's write landed between a write's attempts");
        }
        return (Attempt::Refused(stored), None);
    }
    let older = match found::<Plain>(stored.as_ref()).fence() {
        Some(written) if written.scope == rules.fence.scope && written.value > rules.fence.value => Some(written.value),
        _ => None,
    };
    observed.fenced.insert(item.to_owned(), next);
    let applied = version + 1;
    observed.fenced_versions.insert(item.to_owned(), applied);
    let added = (op == Op::Add).then(|| {
        let count = observed.adds.entry((writer.clone(), item.to_owned())).or_default();
        *count += 1;
        *count
    });
    drop(observed);
    if between {
        shared.cover("another writer's write landed between a write's attempts");
    }
    if let Some(newer) = older {
        shared.violation(format!("S2: {item} accepted fence {} after fence {newer}", rules.fence.value));
    }
    if added.is_some_and(|count| count > 1) {
        shared.violation(format!("COUNT: {item} added to {} times by one step of one request", added.unwrap_or(0)));
    }
    if shared.fault(shared.faults.fenced_lost_reply) {
        shared.cover("fenced write applied, its reply lost");
        shared.fault_happened(region, "fenced write applied, its reply lost");
        return (Attempt::Failed(Failed::Other(Failure::Unknown("the reply was lost".into()))), Some(applied));
    }
    (Attempt::Applied(()), Some(applied))
}

/// COUNT, at the end: every counter holds as many as the ADDs applied to it (the table's own
/// evaluation agrees with what the writes did).
pub fn check_counts(shared: &Shared) {
    let observed = shared.observed();
    let mut applied: HashMap<&str, u32> = HashMap::new();
    for ((_, item), count) in &observed.adds {
        *applied.entry(item.as_str()).or_default() += count;
    }
    let mut wrong = Vec::new();
    for (item, count) in &applied {
        let stored = observed.fenced.get(*item).and_then(|stored| stored.get("count")).cloned();
        if stored != Some(Literal::N(count.to_string())) {
            wrong.push(format!("COUNT: {item} holds {stored:?} after {count} ADDs applied"));
        }
    }
    let added = !applied.is_empty();
    drop(observed);
    if added {
        shared.cover("a counter added to");
    }
    for violation in wrong {
        shared.violation(violation);
    }
}
