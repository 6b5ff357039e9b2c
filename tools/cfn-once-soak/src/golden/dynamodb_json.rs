//! Items as DynamoDB JSON (what `aws dynamodb get-item` prints), the form the fixtures are kept
//! in: written with attributes in name order, read back exactly.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value, json};

use crate::golden::records::Item;

/// An item as DynamoDB JSON, attributes in name order.
pub fn item_to_json(item: &Item) -> Value {
    let sorted: BTreeMap<&String, &AttributeValue> = item.iter().collect();
    Value::Object(sorted.into_iter().map(|(name, value)| (name.clone(), value_to_json(value))).collect())
}

fn value_to_json(value: &AttributeValue) -> Value {
    let strings = |values: &[String]| Value::Array(values.iter().cloned().map(Value::String).collect());
    match value {
        AttributeValue::S(text) => json!({"S": text}),
        AttributeValue::N(number) => json!({"N": number}),
        AttributeValue::B(blob) => json!({"B": base64_encode(blob.as_ref())}),
        AttributeValue::Bool(flag) => json!({"BOOL": flag}),
        AttributeValue::Null(flag) => json!({"NULL": flag}),
        AttributeValue::Ss(values) => json!({"SS": strings(values)}),
        AttributeValue::Ns(values) => json!({"NS": strings(values)}),
        AttributeValue::Bs(blobs) => {
            json!({"BS": blobs.iter().map(|blob| base64_encode(blob.as_ref())).collect::<Vec<_>>()})
        }
        AttributeValue::L(values) => json!({"L": values.iter().map(value_to_json).collect::<Vec<_>>()}),
        AttributeValue::M(map) => {
            let sorted: BTreeMap<&String, &AttributeValue> = map.iter().collect();
            json!({"M": Map::from_iter(sorted.into_iter().map(|(k, v)| (k.clone(), value_to_json(v))))})
        }
        _ => Value::Null,
    }
}

/// An item from DynamoDB JSON, as [`item_to_json`] writes it.
pub fn item_from_json(json: &Value) -> Result<Item, String> {
    let object = json.as_object().ok_or("an item is a JSON object")?;
    object
        .iter()
        .map(|(name, value)| Ok((name.clone(), value_from_json(value).map_err(|e| format!("{name}: {e}"))?)))
        .collect()
}

fn value_from_json(json: &Value) -> Result<AttributeValue, String> {
    let object = json.as_object().filter(|o| o.len() == 1).ok_or("a value is an object of one type tag")?;
    let (tag, value) = object.iter().next().ok_or("no type tag")?;
    let text = || value.as_str().map(str::to_owned).ok_or_else(|| format!("{tag} holds a string"));
    let texts = || {
        value
            .as_array()
            .and_then(|values| values.iter().map(|v| v.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>())
            .ok_or_else(|| format!("{tag} holds strings"))
    };
    Ok(match tag.as_str() {
        "S" => AttributeValue::S(text()?),
        "N" => AttributeValue::N(text()?),
        "B" => AttributeValue::B(Blob::new(base64_decode(&text()?)?)),
        "BOOL" => AttributeValue::Bool(value.as_bool().ok_or("BOOL holds a boolean")?),
        "NULL" => AttributeValue::Null(value.as_bool().ok_or("NULL holds a boolean")?),
        "SS" => AttributeValue::Ss(texts()?),
        "NS" => AttributeValue::Ns(texts()?),
        "BS" => AttributeValue::Bs(
            texts()?.iter().map(|text| base64_decode(text).map(Blob::new)).collect::<Result<Vec<_>, _>>()?,
        ),
        "L" => AttributeValue::L(
            value.as_array().ok_or("L holds an array")?.iter().map(value_from_json).collect::<Result<_, _>>()?,
        ),
        "M" => AttributeValue::M(item_from_json(value)?),
        other => return Err(format!("unknown type tag {other}")),
    })
}

/// Standard base64 with padding, as DynamoDB JSON holds binary values (the SDK's own).
pub fn base64_encode(bytes: &[u8]) -> String {
    aws_smithy_types::base64::encode(bytes)
}

/// The inverse of [`base64_encode`].
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    aws_smithy_types::base64::decode(text).map_err(|error| format!("not base64 ({error}): {text:?}"))
}
