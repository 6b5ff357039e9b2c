//! A shallow scan of a JSON object's top-level fields, for text nested too deep to parse.
//!
//! serde_json stops at its recursion limit (128 levels), so a request with deeply nested
//! properties cannot be parsed at all, yet its top-level fields still say where its answer goes.
//! [`top_level_fields`] reads them without descending into nested values: it only finds where
//! each value ends, by counting brackets outside strings, in a loop rather than by recursion, so
//! any depth is safe to skip. Names and string values are still decoded by serde_json, one
//! string at a time. Nothing here panics on input.

/// The top-level fields of a JSON object, read without descending into nested values: each
/// name with its value when that is a string, `None` otherwise. `None` for anything that is not
/// a well-formed object at the top level. Iterative, so any depth is safe to skip.
pub fn top_level_fields(text: &str) -> Option<Vec<(String, Option<String>)>> {
    let bytes = text.as_bytes();
    let mut at = skip_space(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_space(bytes, at + 1);
    let mut fields = Vec::new();
    if bytes.get(at) == Some(&b'}') {
        return (skip_space(bytes, at + 1) == bytes.len()).then_some(fields);
    }
    loop {
        let key_end = string_end(bytes, at)?;
        let name: String = serde_json::from_str(&text[at..key_end]).ok()?;
        at = skip_space(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(bytes, at + 1);
        let value = if bytes.get(at) == Some(&b'"') {
            let end = string_end(bytes, at)?;
            let value: String = serde_json::from_str(&text[at..end]).ok()?;
            at = end;
            Some(value)
        } else {
            at = value_end(bytes, at)?;
            None
        };
        fields.push((name, value));
        at = skip_space(bytes, at);
        match bytes.get(at) {
            Some(b',') => at = skip_space(bytes, at + 1),
            Some(b'}') => return (skip_space(bytes, at + 1) == bytes.len()).then_some(fields),
            _ => return None,
        }
    }
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The index just past the string starting at `at` (which must be a quote).
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut index = at + 1;
    while let Some(byte) = bytes.get(index) {
        match byte {
            b'\\' => index += 2,
            b'"' => return Some(index + 1),
            _ => index += 1,
        }
    }
    None
}

/// The index just past the non-string value starting at `at`: a number, literal, or a nested
/// array or object, skipped by counting brackets outside strings.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut index = at;
    while let Some(byte) = bytes.get(index) {
        match byte {
            b'"' => {
                index = string_end(bytes, index)?;
                if depth == 0 {
                    return Some(index);
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => return Some(index),
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(index + 1);
                }
            }
            b',' if depth == 0 => return Some(index),
            _ => {}
        }
        index += 1;
    }
    (depth == 0 && index > at).then_some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shallow_scan_reads_top_level_fields_only() {
        let fields = top_level_fields(r#" {"a": "x\"y", "b": [1, {"c": "]"}], "d": 5, "e": "z"} "#).expect("object");
        assert_eq!(
            fields,
            vec![
                ("a".into(), Some("x\"y".into())),
                ("b".into(), None),
                ("d".into(), None),
                ("e".into(), Some("z".into()))
            ]
        );
        for bad in ["", "[]", "{", r#"{"a"}"#, r#"{"a": [}"#, r#"{"a": 1} x"#, r#"{"a": "unterminated}"#] {
            assert_eq!(top_level_fields(bad), None, "{bad:?}");
        }
        assert_eq!(top_level_fields("{}"), Some(vec![]));
    }
}
