//! Request fingerprints: what makes two deliveries "the same request".
//!
//! CloudFormation has been seen to reuse a RequestId when a failed deployment is retried, with a
//! new ResponseURL. A stored outcome may only be replayed to a delivery with the same
//! fingerprint, so the fingerprint covers the whole request as CloudFormation sent it (type,
//! properties, old properties, ResponseURL, ...), in a canonical form that does not depend on
//! key order or whitespace, so an SNS envelope and a raw delivery of one request agree.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// A 128-bit digest of a request, as 32 lowercase hex characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of a request as decoded from JSON.
    pub fn of(request: &Value) -> Self {
        let mut canonical = Vec::with_capacity(1_024);
        write_canonical(request, &mut canonical);
        Self(hex_prefix(&Sha256::digest(&canonical), 16))
    }

    /// The fingerprint of a request kept as text (one too deeply nested to decode): its bytes,
    /// as sent, so every copy of one message agrees.
    pub fn of_text(text: &str) -> Self {
        Self(hex_prefix(&Sha256::digest(text.as_bytes()), 16))
    }

    /// Wraps a fingerprint read back from storage.
    pub fn from_stored(value: String) -> Self {
        Self(value)
    }

    /// The hex form, as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lowercase hex of the first `bytes` bytes of `digest`.
pub fn hex_prefix(digest: &[u8], bytes: usize) -> String {
    use std::fmt::Write;
    digest.iter().take(bytes).fold(String::with_capacity(bytes * 2), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

/// A short stable digest of some strings, for identifiers derived from a request.
pub fn short_digest(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        // Length-prefix each part so ("ab", "c") and ("a", "bc") differ.
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hex_prefix(&hasher.finalize(), 8)
}

/// JSON with object keys sorted and no insignificant whitespace. Written by hand rather than
/// relying on serde_json's map order, which a feature flag elsewhere in the build could change;
/// strings and scalars are serde_json's own compact form, written straight into `out`.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_scalar(key, out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

/// A string or scalar in serde_json's compact form. Writing a string, number, bool or null into
/// a `Vec` cannot fail.
fn write_scalar<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    let written = serde_json::to_writer(out, value);
    debug_assert!(written.is_ok(), "a scalar serializes");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).expect("json");
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).expect("json");
        assert_eq!(Fingerprint::of(&a), Fingerprint::of(&b));
        assert_eq!(Fingerprint::of(&a).as_str().len(), 32);
    }

    #[test]
    fn any_difference_changes_it() {
        let base = json!({"RequestType": "Create", "ResponseURL": "https://a", "ResourceProperties": {"N": "1"}});
        let url = json!({"RequestType": "Create", "ResponseURL": "https://b", "ResourceProperties": {"N": "1"}});
        let props = json!({"RequestType": "Create", "ResponseURL": "https://a", "ResourceProperties": {"N": "2"}});
        assert_ne!(Fingerprint::of(&base), Fingerprint::of(&url));
        assert_ne!(Fingerprint::of(&base), Fingerprint::of(&props));
    }

    #[test]
    fn the_canonical_form_is_stable() {
        // Stored records carry fingerprints: a change to the canonical form would make every
        // stored outcome look like another attempt's. Escapes, numbers, nesting and key order.
        let request = json!({
            "b": [1, -2.5, true, null, {"z": "\u{1}\"\\/\n", "a": "é"}],
            "a": {"ResponseURL": "https://x?y=1&z=2", "N": 12345678901234567890u64},
        });
        let mut canonical = Vec::new();
        write_canonical(&request, &mut canonical);
        assert_eq!(
            String::from_utf8(canonical).expect("UTF-8"),
            r#"{"a":{"N":12345678901234567890,"ResponseURL":"https://x?y=1&z=2"},"b":[1,-2.5,true,null,{"a":"é","z":"\u0001\"\\/\n"}]}"#
        );
        assert_eq!(Fingerprint::of(&request).as_str(), "103c77a03440b9664240a2673e13d542");
    }

    #[test]
    fn short_digest_separates_parts() {
        assert_ne!(short_digest(&["ab", "c"]), short_digest(&["a", "bc"]));
        assert_eq!(short_digest(&["x"]).len(), 16);
    }
}
