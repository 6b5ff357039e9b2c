use std::collections::HashMap;
use std::sync::Mutex;

use futures_util::future::BoxFuture;

use super::*;
use crate::clock::Clock;
use crate::ownership::{Fence, Owner, WriteRules};

/// A clock whose sleeps end at once.
#[derive(Debug)]
struct NoWait;

impl Clock for NoWait {
    fn now_ms(&self) -> u64 {
        0
    }

    fn sleep_ms(&self, _duration_ms: u64) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

type Plainly = Attempt<&'static str, ()>;

/// Sends a write whose attempts come to `attempts`, in order; what it came to, and how many
/// attempts were made.
async fn sent(attempts: Vec<Plainly>) -> (Result<Sent<&'static str, ()>, FencedWriteError>, usize) {
    let total = attempts.len();
    let attempts = Mutex::new(attempts.into_iter());
    let result = send("t", &NoWait, 0, || {
        let next = attempts.lock().expect("attempts").next().expect("no more attempts than given");
        async move { next }
    })
    .await;
    let left = attempts.lock().expect("attempts").len();
    (result, total - left)
}

fn failed(failure: Failure) -> Plainly {
    Attempt::Failed(Failed::Other(failure))
}

fn unknown() -> Plainly {
    failed(Failure::Unknown("reset".into()))
}

fn throttled() -> Plainly {
    failed(Failure::NotApplied("throttled".into()))
}

#[tokio::test]
async fn an_unknown_outcome_is_settled_by_the_next_attempt_that_reaches_the_table() {
    let check = |attempts: Vec<Plainly>, expected: &'static str, made: usize| async move {
        let (result, attempts) = sent(attempts).await;
        assert_eq!((format!("{result:?}"), attempts), (expected.to_owned(), made));
    };
    let denied = || failed(Failure::Permanent("denied".into()));
    let expired = || failed(Failure::Deferred("expired".into()));
    check(vec![Attempt::Applied("out")], r#"Ok(Applied("out"))"#, 1).await;
    check(vec![unknown(), Attempt::Applied("out")], r#"Ok(Applied("out"))"#, 2).await;
    check(vec![unknown(), Attempt::Refused(None)], "Ok(Refused(None))", 2).await;
    check(vec![throttled(), unknown(), Attempt::Refused(None)], "Ok(Refused(None))", 3).await;
    check(vec![unknown(), unknown(), unknown()], r#"Err(Unknown("reset"))"#, 3).await;
    check(vec![unknown(), throttled(), throttled()], r#"Err(Unknown("reset; then throttled"))"#, 3).await;
    check(vec![throttled(), throttled(), throttled()], r#"Err(Transient("throttled"))"#, 3).await;
    check(vec![denied()], r#"Err(Permanent("denied"))"#, 1).await;
    check(vec![unknown(), denied()], r#"Err(Unknown("reset; then refused: denied"))"#, 2).await;
    check(vec![unknown(), Attempt::Failed(Failed::NoSuchTable)], r#"Err(NoSuchTable { table: "t" })"#, 2).await;
    // Expired credentials stay expired in this invocation: not sent again here.
    check(vec![expired()], r#"Err(Deferred("expired"))"#, 1).await;
    check(vec![unknown(), expired()], r#"Err(Unknown("reset; then deferred: expired"))"#, 2).await;
}

fn fence(value: u64) -> Fence {
    Fence { scope: "request-a".into(), value }
}

const DAY_MS: u64 = 86_400_000;

#[test]
fn a_step_makes_the_same_token_for_the_same_write_whatever_its_fence_and_process() {
    let now_ms = 400 * DAY_MS;
    // The run under fence 1 in one region, and a rerun of it under fence 4 in another.
    let first = WriteRules::fenced(&fence(1)).made_by(&WriteScope::of_step("request-a", "attempt", 0));
    let rerun = WriteRules::fenced(&fence(4)).made_by(&WriteScope::of_step("request-a", "attempt", 0));
    let (a, b) = (first.token("add seats 1", now_ms), first.token("put plan", now_ms));
    assert_eq!(rerun.token("put plan", now_ms), b, "made in another order: the same token for the same write");
    assert_eq!(rerun.token("add seats 1", now_ms), a);
    assert_ne!(a, b);
    // The same write made again by the same step is another write, and a rerun makes it again.
    let second = first.token("add seats 1", now_ms);
    assert_ne!(second, a);
    assert_eq!(rerun.token("add seats 1", now_ms), second);
    // Called again after a transient error: counted from none.
    let scope = WriteScope::of_step("request-a", "attempt", 0);
    let again = WriteRules::fenced(&fence(1)).made_by(&scope);
    assert_eq!(again.token("add seats 1", now_ms), a);
    scope.restart();
    assert_eq!(again.token("add seats 1", now_ms), a);
    // Another step (a poll), another attempt (a reused RequestId), another request: others.
    for other in [("request-a", "attempt", 1), ("request-a", "other attempt", 0), ("request-b", "attempt", 0)] {
        let rules = WriteRules::fenced(&fence(1)).made_by(&WriteScope::of_step(other.0, other.1, other.2));
        assert_ne!(rules.token("add seats 1", now_ms), a, "{other:?}");
    }
}

#[test]
fn a_token_is_found_in_the_next_period_and_goes_stale_after_it() {
    let scope = WriteScope::of_step("request-a", "attempt", 0);
    let period_ms = WRITE_TOKEN_PERIOD_S * 1000;
    let made_ms = 3 * period_ms + period_ms - 1;
    let token = scope.token("add", made_ms);
    scope.restart();
    let next_period = scope.token("add", made_ms + 1);
    assert_ne!(token, next_period, "the period moved on");
    assert!(next_period.is_among(&[token.text()]), "a rerun in the next period still finds the write");
    assert!(!WriteToken::is_stale(token.text(), made_ms + period_ms));
    assert!(WriteToken::is_stale(token.text(), made_ms + 1 + period_ms), "two periods on, no write looks for it");
    assert!(!WriteToken::is_stale("not a token", u64::MAX));
}

fn key() -> HashMap<String, Literal> {
    HashMap::from([("pk".to_owned(), Literal::S("x".into()))])
}

#[test]
fn every_write_but_a_plain_delete_is_refused_where_its_token_already_is() {
    let rules = WriteRules::owned(&fence(2), Owner::new("stack", "Mine"));
    let token = rules.token("t", 0);
    let check = |kind: Kind, carries: bool| {
        let expression = Expression::for_write::<Plain>(&rules, &key(), kind, &token, None);
        assert_eq!(expression.text.contains("NOT contains(#cfn_once_writes, :cfn_once_write)"), carries, "{kind:?}");
        assert_eq!(
            expression.values.get(":cfn_once_write"),
            carries.then(|| Literal::S(token.text().to_owned())).as_ref(),
            "{kind:?}"
        );
    };
    check(Kind::Write, true);
    check(Kind::Tombstone, true);
    check(Kind::Delete, false);
}

#[test]
fn an_update_stamps_the_fence_and_adds_its_token_to_the_items() {
    let rules = WriteRules::owned(&fence(2), Owner::new("stack", "Mine"));
    let token = rules.token("t", 0);
    let mut expression = Expression::for_write::<Plain>(&rules, &key(), Kind::Write, &token, None);
    let text = expression.update_text::<Plain>(&rules, Update::new().add_to("#n :one"), &token);
    assert!(text.starts_with("SET #cfn_once_fence = :cfn_once_fence, #cfn_once_scope = :cfn_once_scope"), "{text}");
    assert!(text.contains(" ADD #n :one, #cfn_once_writes :cfn_once_writes"), "{text}");
    assert_eq!(expression.values.get(":cfn_once_writes"), Some(&Literal::Ss(vec![token.text().to_owned()])));
}

#[test]
fn a_writes_identity_names_everything_it_writes_and_nothing_of_its_fence() {
    let update = |value: &str| Update::new().add_to("#n :v").name("#n", "Seats").value(":v", Literal::N(value.into()));
    let of = |update: &Update<Literal>| identity::<Plain>("update", &key(), None, Some(update), None);
    assert_eq!(of(&update("1")), of(&update("1")));
    assert_ne!(of(&update("1")), of(&update("2")));
    assert_ne!(of(&update("1")), of(&update("1").name("#n", "Other")));
    let condition = Condition::new("#p <> :v").name("#p", "Plan").value(":v", Literal::S("frozen".into()));
    let with = identity::<Plain>("update", &key(), None, Some(&update("1")), Some(&condition));
    assert_ne!(with, of(&update("1")));
    let other_key = HashMap::from([("pk".to_owned(), Literal::S("y".into()))]);
    assert_ne!(identity::<Plain>("update", &other_key, None, Some(&update("1")), None), of(&update("1")));
}
