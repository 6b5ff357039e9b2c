//! DynamoDB's condition and update expressions, evaluated on the simulator's downstream table:
//! the part of the language `cfn_once_core::fenced` writes (`AND`, `OR`, `NOT`, parentheses,
//! comparisons, `attribute_exists`, `attribute_not_exists`, `contains`; `SET path = value`,
//! `REMOVE`, `ADD` to a number or a string set, `DELETE` from a string set), with DynamoDB's
//! rule that every name and value given must be used. Anything else is an error, which the
//! simulator reports as a violation: the real expressions are what is checked here.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use cfn_once_core::fenced::Literal;

/// An item of the simulated table.
pub type Item = crate::shared::DownstreamItem;

/// One expression's placeholders.
#[derive(Debug)]
pub struct Placeholders<'a> {
    pub names: &'a HashMap<String, String>,
    pub values: &'a HashMap<String, Literal>,
}

/// Whether `condition` holds on `item` (`None`: there is none, and every attribute is absent).
pub fn holds(condition: &str, item: Option<&Item>, given: &Placeholders, used: &mut Used) -> Result<bool, String> {
    let tokens = tokenize(condition)?;
    let mut parser = Parser { tokens, at: 0, given, used, item };
    let value = parser.or()?;
    match parser.tokens.get(parser.at) {
        None => Ok(value),
        Some(token) => Err(format!("unexpected {token:?} in {condition:?}")),
    }
}

/// Applies `update` to `item` (an empty one if there was none).
pub fn apply(update: &str, item: &mut Item, given: &Placeholders, used: &mut Used) -> Result<(), String> {
    let tokens = tokenize(update)?;
    let mut clause = "";
    let mut at = 0;
    while at < tokens.len() {
        if ["SET", "REMOVE", "ADD", "DELETE"].contains(&tokens[at].as_str()) {
            clause = keyword(&tokens[at]);
            at += 1;
            continue;
        }
        if tokens[at] == "," {
            at += 1;
            continue;
        }
        let path = used.name(given, &tokens[at])?;
        match clause {
            "SET" => {
                if tokens.get(at + 1).map(String::as_str) != Some("=") {
                    return Err(format!("SET {path} without `=` in {update:?}"));
                }
                let value = used.value(given, tokens.get(at + 2).ok_or("SET without a value")?)?;
                item.insert(path, value);
                at += 3;
            }
            "REMOVE" => {
                item.remove(&path);
                at += 1;
            }
            "ADD" | "DELETE" => {
                let value = used.value(given, tokens.get(at + 1).ok_or("ADD without a value")?)?;
                let now = item.remove(&path);
                if let Some(next) = if clause == "ADD" { add(now, value)? } else { delete(now, value)? } {
                    item.insert(path, next);
                }
                at += 2;
            }
            _ => return Err(format!("an action outside any clause in {update:?}")),
        }
    }
    Ok(())
}

fn keyword(token: &str) -> &'static str {
    match token {
        "SET" => "SET",
        "REMOVE" => "REMOVE",
        "ADD" => "ADD",
        _ => "DELETE",
    }
}

fn add(now: Option<Literal>, value: Literal) -> Result<Option<Literal>, String> {
    Ok(Some(match (now, value) {
        (None, value) => value,
        (Some(Literal::N(a)), Literal::N(b)) => Literal::N((number(&a)? + number(&b)?).to_string()),
        (Some(Literal::Ss(mut members)), Literal::Ss(more)) => {
            members.extend(more);
            Literal::Ss(members.into_iter().collect::<BTreeSet<_>>().into_iter().collect())
        }
        (now, value) => return Err(format!("ADD of {value:?} to {now:?}: a type mismatch")),
    }))
}

fn delete(now: Option<Literal>, value: Literal) -> Result<Option<Literal>, String> {
    match (now, value) {
        (None, _) => Ok(None),
        (Some(Literal::Ss(members)), Literal::Ss(gone)) => {
            let left: Vec<String> = members.into_iter().filter(|member| !gone.contains(member)).collect();
            Ok((!left.is_empty()).then_some(Literal::Ss(left)))
        }
        (now, value) => Err(format!("DELETE of {value:?} from {now:?}: a type mismatch")),
    }
}

fn number(text: &str) -> Result<i128, String> {
    text.parse().map_err(|_| format!("{text:?} is not a number the simulator adds"))
}

/// The placeholders an expression used, to find those given and never used (DynamoDB refuses
/// them: "Value provided in ExpressionAttributeValues unused in expressions").
#[derive(Debug, Default)]
pub struct Used {
    names: BTreeSet<String>,
    values: BTreeSet<String>,
}

impl Used {
    fn name(&mut self, given: &Placeholders, token: &str) -> Result<String, String> {
        if !token.starts_with('#') {
            return Ok(token.to_owned());
        }
        self.names.insert(token.to_owned());
        given.names.get(token).cloned().ok_or_else(|| format!("the name {token} is not given"))
    }

    fn value(&mut self, given: &Placeholders, token: &str) -> Result<Literal, String> {
        if !token.starts_with(':') {
            return Err(format!("{token:?} is not a value"));
        }
        self.values.insert(token.to_owned());
        given.values.get(token).cloned().ok_or_else(|| format!("the value {token} is not given"))
    }

    /// An error naming every placeholder given and not used.
    pub fn all_of(&self, given: &Placeholders) -> Result<(), String> {
        let names = given.names.keys().filter(|name| !self.names.contains(*name));
        let values = given.values.keys().filter(|value| !self.values.contains(*value));
        let unused: Vec<&String> = names.chain(values).collect();
        if unused.is_empty() { Ok(()) } else { Err(format!("placeholders given and not used: {unused:?}")) }
    }
}

fn tokenize(text: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if "(),=".contains(c) {
            tokens.push(c.to_string());
            chars.next();
        } else if c == '<' || c == '>' {
            chars.next();
            let mut op = c.to_string();
            if let Some(&next) = chars.peek().filter(|next| **next == '=' || (c == '<' && **next == '>')) {
                op.push(next);
                chars.next();
            }
            tokens.push(op);
        } else if c.is_alphanumeric() || "#:_".contains(c) {
            let mut word = String::new();
            while let Some(&c) = chars.peek().filter(|c| c.is_alphanumeric() || "#:_.".contains(**c)) {
                word.push(c);
                chars.next();
            }
            tokens.push(word);
        } else {
            return Err(format!("unexpected {c:?} in {text:?}"));
        }
    }
    Ok(tokens)
}

struct Parser<'a, 'g> {
    tokens: Vec<String>,
    at: usize,
    given: &'a Placeholders<'g>,
    used: &'a mut Used,
    item: Option<&'a Item>,
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn next(&mut self) -> Result<String, String> {
        let token = self.tokens.get(self.at).cloned().ok_or("the expression ends too soon")?;
        self.at += 1;
        Ok(token)
    }

    fn expect(&mut self, wanted: &str) -> Result<(), String> {
        let token = self.next()?;
        if token == wanted { Ok(()) } else { Err(format!("{wanted:?} expected, {token:?} found")) }
    }

    fn or(&mut self) -> Result<bool, String> {
        let mut value = self.and()?;
        while self.peek() == Some("OR") {
            self.at += 1;
            value |= self.and()?;
        }
        Ok(value)
    }

    fn and(&mut self) -> Result<bool, String> {
        let mut value = self.not()?;
        while self.peek() == Some("AND") {
            self.at += 1;
            value &= self.not()?;
        }
        Ok(value)
    }

    fn not(&mut self) -> Result<bool, String> {
        if self.peek() == Some("NOT") {
            self.at += 1;
            return Ok(!self.not()?);
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<bool, String> {
        let token = self.next()?;
        match token.as_str() {
            "(" => {
                let value = self.or()?;
                self.expect(")")?;
                Ok(value)
            }
            "attribute_exists" | "attribute_not_exists" => {
                self.expect("(")?;
                let path = self.path()?;
                self.expect(")")?;
                let exists = self.item.is_some_and(|item| item.contains_key(&path));
                Ok(exists == (token == "attribute_exists"))
            }
            "contains" => {
                self.expect("(")?;
                let path = self.path()?;
                self.expect(",")?;
                let operand = self.operand()?;
                self.expect(")")?;
                Ok(match (self.attribute(&path), operand) {
                    (Some(Literal::Ss(members)), Some(Literal::S(member))) => members.contains(&member),
                    (Some(Literal::S(text)), Some(Literal::S(part))) => text.contains(&part),
                    _ => false,
                })
            }
            _ => {
                self.at -= 1;
                let left = self.operand()?;
                let op = self.next()?;
                let right = self.operand()?;
                compare(left.as_ref(), &op, right.as_ref())
            }
        }
    }

    fn path(&mut self) -> Result<String, String> {
        let token = self.next()?;
        self.used.name(self.given, &token)
    }

    fn attribute(&self, path: &str) -> Option<Literal> {
        self.item.and_then(|item| item.get(path)).cloned()
    }

    /// A value or an attribute's (`None`: absent).
    fn operand(&mut self) -> Result<Option<Literal>, String> {
        let token = self.next()?;
        if token.starts_with(':') {
            return self.used.value(self.given, &token).map(Some);
        }
        let path = self.used.name(self.given, &token)?;
        Ok(self.attribute(&path))
    }
}

/// A comparison: an absent attribute compares false with anything, as in DynamoDB.
fn compare(left: Option<&Literal>, op: &str, right: Option<&Literal>) -> Result<bool, String> {
    let (Some(left), Some(right)) = (left, right) else { return Ok(false) };
    let order = match (left, right) {
        (Literal::N(a), Literal::N(b)) => number(a)?.cmp(&number(b)?),
        (Literal::S(a), Literal::S(b)) => a.cmp(b),
        // Different types are never equal, and never ordered.
        _ => return Ok(op == "<>"),
    };
    Ok(match op {
        "=" => order == Ordering::Equal,
        "<>" => order != Ordering::Equal,
        "<" => order == Ordering::Less,
        "<=" => order != Ordering::Greater,
        ">" => order == Ordering::Greater,
        ">=" => order != Ordering::Less,
        _ => return Err(format!("unknown comparison {op:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Literal {
        Literal::S(text.into())
    }

    #[test]
    fn conditions_and_updates_are_evaluated_as_dynamodb_does() {
        let names = HashMap::from([("#f".to_owned(), "fence".to_owned()), ("#w".to_owned(), "writes".to_owned())]);
        let values = HashMap::from([
            (":f".to_owned(), Literal::N("3".into())),
            (":t".to_owned(), s("t1")),
            (":ts".to_owned(), Literal::Ss(vec!["t1".into()])),
        ]);
        let given = Placeholders { names: &names, values: &values };
        let condition = "(attribute_not_exists(#f) OR #f <= :f) AND NOT contains(#w, :t)";
        let update = "SET #f = :f ADD #w :ts";
        let check = |item: Option<&Item>| {
            let mut used = Used::default();
            let holds = holds(condition, item, &given, &mut used).expect("condition");
            let mut next = item.cloned().unwrap_or_default();
            apply(update, &mut next, &given, &mut used).expect("update");
            used.all_of(&given).expect("every placeholder used");
            (holds, next)
        };
        let (holds_absent, written) = check(None);
        assert!(holds_absent);
        assert_eq!(written.get("writes"), Some(&Literal::Ss(vec!["t1".into()])));
        assert!(!check(Some(&written)).0, "refused where the token is");
        let newer = Item::from([("fence".to_owned(), Literal::N("10".into()))]);
        assert!(!check(Some(&newer)).0, "10 > 3: numbers compare as numbers");
        let unused = HashMap::from([(":x".to_owned(), s("x"))]);
        let used = Used::default();
        assert!(used.all_of(&Placeholders { names: &names, values: &unused }).is_err());
        assert!(holds("#f <= :f AND", None, &given, &mut Used::default()).is_err());
    }
}
