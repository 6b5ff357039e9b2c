//! A request nested deeper than the JSON parser's recursion limit: its top-level fields read
//! without recursing, so it is still addressed (as any request is) and answered FAILED.

use serde_json::{Map, Value};

use super::address::{Address, address};
use super::{InputPolicy, Request, RequestBody, Undeliverable};
use crate::fingerprint::Fingerprint;
use crate::wait_condition::WaitDeclared;

/// A request too deeply nested to parse: addressed from its top-level fields and answered
/// FAILED, since its properties cannot be read.
pub(super) fn decode_too_deep(text: &str, policy: &InputPolicy) -> Result<Request, Undeliverable> {
    let Some(fields) = Shallow::read(text) else {
        return Err(Undeliverable::NotJson("a deeply nested value that is not a JSON object".into()));
    };
    let mut object = fields.into_object();
    if !object.contains_key("RequestType") && !object.contains_key("ResponseURL") {
        return Err(Undeliverable::Unrecognised);
    }
    let Address { key, logical_resource_id, response_url, kind, physical_resource_id } = address(&mut object, policy)?;
    let reason = format!(
        "the request nests deeper than {DEPTH_MAX} levels, so its properties cannot be read: flatten the resource's properties"
    );
    Ok(Request {
        key,
        logical_resource_id,
        response_url,
        fingerprint: Fingerprint::of_text(text),
        body: RequestBody::Malformed { reason, kind, physical_resource_id },
        published_ms: None,
        wait: WaitDeclared::None,
        old_wait: None,
        // A bare request's; `decode` names the envelope's topic, if it came in one.
        topic_arn: None,
        privileged: policy.privileged(None),
    })
}

/// The top-level fields of a request an answer needs, read from text too deep to parse whole.
/// Every other value, at any depth, is skipped: serde_json skips a value it is not asked to
/// build (`IgnoredAny`) with a loop, not by recursion, so no depth is too deep, and it still
/// checks the value is well-formed JSON (`[}` is an error).
#[derive(Debug, Default, serde::Deserialize)]
struct Shallow {
    #[serde(rename = "RequestType", default)]
    request_type: Text,
    #[serde(rename = "ResponseURL", default)]
    response_url: Text,
    #[serde(rename = "StackId", default)]
    stack_id: Text,
    #[serde(rename = "RequestId", default)]
    request_id: Text,
    #[serde(rename = "LogicalResourceId", default)]
    logical_resource_id: Text,
    #[serde(rename = "PhysicalResourceId", default)]
    physical_resource_id: Text,
}

impl Shallow {
    /// The fields of `text`, if it is one well-formed JSON object.
    fn read(text: &str) -> Option<Self> {
        // An object at the top: serde would also take a struct from an array, by position.
        if !text.trim_start().starts_with('{') {
            return None;
        }
        serde_json::from_str(text).ok()
    }

    /// The string fields, as an object `address` reads.
    fn into_object(self) -> Map<String, Value> {
        [
            ("RequestType", self.request_type),
            ("ResponseURL", self.response_url),
            ("StackId", self.stack_id),
            ("RequestId", self.request_id),
            ("LogicalResourceId", self.logical_resource_id),
            ("PhysicalResourceId", self.physical_resource_id),
        ]
        .into_iter()
        .filter_map(|(name, Text(value))| Some((name.to_owned(), Value::String(value?))))
        .collect()
    }
}

/// A top-level value kept when it is a string; any other value is skipped without being built.
#[derive(Debug, Default)]
struct Text(Option<String>);

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct Skip;
        impl<'de> Visitor<'de> for Skip {
            type Value = Text;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("any JSON value")
            }
            fn visit_str<E>(self, value: &str) -> Result<Text, E> {
                Ok(Text(Some(value.to_owned())))
            }
            fn visit_string<E>(self, value: String) -> Result<Text, E> {
                Ok(Text(Some(value)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Text, E> {
                Ok(Text(None))
            }
            // One level in, then each element or entry is skipped whole (iteratively).
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
        }
        deserializer.deserialize_any(Skip)
    }
}

/// serde_json's recursion limit.
const DEPTH_MAX: usize = 128;
