//! `--config deploy.toml`: the same facts as the flags, one `key = value` a line, so that a
//! deployment's facts live in a file beside the team's other configuration:
//!
//! ```toml
//! account = "111122223333"
//! primary = "us-east-1"
//! secondary = "us-west-2"
//! witness = "us-east-2"
//! customer_regions = ["us-east-2", "eu-west-1"]
//! alarm_email = "oncall@example.com"
//! secondary_delay_s = 5
//! ```
//!
//! Only that flat form of TOML is read (strings, whole numbers, booleans, arrays of strings, `#`
//! comments): the workspace has no TOML parser, and a table or a multi-line value is refused by
//! name rather than misread. Flags given beside the file win.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};

/// One value of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    Number(u64),
    Bool(bool),
    List(Vec<String>),
}

/// The keys a facts file may hold, as the flags name them with `_` for `-`.
pub const KEYS: [&str; 17] = [
    "account",
    "primary",
    "secondary",
    "witness",
    "customer_regions",
    "alarm_email",
    "alarm_topic_arn",
    "installation",
    "table",
    "topic_name",
    "secondary_delay_s",
    "operator_role_arn",
    "control",
    "arc_endpoints",
    "primary_routing_control",
    "secondary_routing_control",
    "examples",
];

/// Reads `path`.
pub fn read(path: &Path) -> anyhow::Result<BTreeMap<String, Value>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text).with_context(|| format!("{} is not a cfn-once deploy file", path.display()))
}

/// Parses the flat form described above.
pub fn parse(text: &str) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut values = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = strip_comment(line).trim();
        if line.is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            bail!("line {}: {line:?} is not `key = value` (tables are not read)", number + 1)
        };
        let key = key.trim();
        if !KEYS.contains(&key) {
            bail!("line {}: unknown key {key:?}; the keys are {}", number + 1, KEYS.join(", "));
        }
        let value = parse_value(value.trim()).with_context(|| format!("line {}: {key}", number + 1))?;
        if values.insert(key.to_owned(), value).is_some() {
            bail!("line {}: {key} is given twice", number + 1);
        }
    }
    Ok(values)
}

/// The line up to a `#` outside a string.
fn strip_comment(line: &str) -> &str {
    let mut in_string = false;
    for (index, c) in line.char_indices() {
        match c {
            '"' => in_string = !in_string,
            '#' if !in_string => return &line[..index],
            _ => {}
        }
    }
    line
}

fn parse_value(text: &str) -> anyhow::Result<Value> {
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner.strip_suffix(']').context("an array must close on its line")?;
        let items = inner.split(',').map(str::trim).filter(|item| !item.is_empty());
        return items.map(string).collect::<anyhow::Result<_>>().map(Value::List);
    }
    match text {
        "true" => return Ok(Value::Bool(true)),
        "false" => return Ok(Value::Bool(false)),
        _ => {}
    }
    if text.starts_with('"') {
        return string(text).map(Value::Text);
    }
    text.parse().map(Value::Number).with_context(|| format!("{text:?} is no string, number, boolean or array"))
}

fn string(text: &str) -> anyhow::Result<String> {
    let inner = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')).context("a string is written \"...\"")?;
    if inner.contains(['"', '\\']) {
        bail!("{text}: escapes are not read");
    }
    Ok(inner.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flat_form_is_read_and_anything_else_named() {
        let values = parse(
            "# facts\naccount = \"111122223333\" # the platform\ncustomer_regions = [\"us-east-2\", \"eu-west-1\"]\nsecondary_delay_s = 7\nexamples = true\n",
        )
        .expect("parsed");
        assert_eq!(values["account"], Value::Text("111122223333".into()));
        assert_eq!(values["customer_regions"], Value::List(vec!["us-east-2".into(), "eu-west-1".into()]));
        assert_eq!((&values["secondary_delay_s"], &values["examples"]), (&Value::Number(7), &Value::Bool(true)));
        for (text, needle) in [
            ("[deploy]\n", "not `key = value`"),
            ("acount = \"1\"\n", "unknown key \"acount\""),
            ("primary = us-east-1\n", "no string, number"),
            ("primary = \"a\"\nprimary = \"b\"\n", "given twice"),
        ] {
            let error = format!("{:#}", parse(text).unwrap_err());
            assert!(error.contains(needle), "{text:?}: {error}");
        }
    }
}
