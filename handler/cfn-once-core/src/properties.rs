//! Typed resource properties from CloudFormation's all-strings JSON.
//!
//! CloudFormation delivers every scalar property as a string (`"5"`, `"true"`), whatever the
//! template said. [`from_properties`] deserializes them into a provider's own `Deserialize` type
//! and coerces on the way: a string where a number or bool is expected is parsed, and a number or
//! bool where a string is expected is formatted. Errors name the property path and what was
//! expected, so they read well as a FAILED Reason.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A property that could not be turned into the provider's type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PropertyError {
    message: String,
}

impl PropertyError {
    /// An error with a ready-made message, for checks a provider makes after deserializing.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }
}

/// Deserializes `properties` into `T`, coercing CloudFormation's strings.
pub fn from_properties<T: DeserializeOwned>(properties: &Value) -> Result<T, PropertyError> {
    serde_path_to_error::deserialize(Coerce(properties)).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let message = if path == "." || path.is_empty() {
            format!("invalid properties: {inner}")
        } else {
            format!("invalid property {path}: {inner}")
        };
        PropertyError { message }
    })
}

/// A `serde_json::Value` deserializer that accepts strings for numbers and bools.
struct Coerce<'a>(&'a Value);

#[derive(Debug)]
struct CoerceError(String);

impl std::fmt::Display for CoerceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CoerceError {}

impl de::Error for CoerceError {
    fn custom<T: std::fmt::Display>(message: T) -> Self {
        Self(message.to_string())
    }
}

impl<'a> Coerce<'a> {
    fn unexpected(&self) -> de::Unexpected<'a> {
        match self.0 {
            Value::Null => de::Unexpected::Unit,
            Value::Bool(b) => de::Unexpected::Bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => de::Unexpected::Unsigned(u),
                (_, Some(i), _) => de::Unexpected::Signed(i),
                (_, _, Some(f)) => de::Unexpected::Float(f),
                _ => de::Unexpected::Other("number"),
            },
            Value::String(s) => de::Unexpected::Str(s),
            Value::Array(_) => de::Unexpected::Seq,
            Value::Object(_) => de::Unexpected::Map,
        }
    }

    fn invalid<V: Visitor<'a>>(&self, visitor: &V) -> CoerceError {
        de::Error::invalid_type(self.unexpected(), visitor)
    }
}

macro_rules! coerce_number {
    ($method:ident, $visit:ident, $ty:ty) => {
        fn $method<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
            match self.0 {
                Value::String(text) => match text.trim().parse::<$ty>() {
                    Ok(parsed) => visitor.$visit(parsed),
                    Err(_) => Err(de::Error::invalid_value(de::Unexpected::Str(text), &visitor)),
                },
                Value::Number(number) => {
                    let parsed: Option<$ty> = number.to_string().parse().ok();
                    match parsed {
                        Some(parsed) => visitor.$visit(parsed),
                        None => Err(self.invalid(&visitor)),
                    }
                }
                _ => Err(self.invalid(&visitor)),
            }
        }
    };
}

impl<'a> de::Deserializer<'a> for Coerce<'a> {
    type Error = CoerceError;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(CoerceSeq { items: items.iter() }),
            Value::Object(map) => visitor.visit_map(CoerceMap { entries: map.iter(), value: None }),
        }
    }

    fn deserialize_bool<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        match self.0 {
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::String(text) if text.eq_ignore_ascii_case("true") => visitor.visit_bool(true),
            Value::String(text) if text.eq_ignore_ascii_case("false") => visitor.visit_bool(false),
            Value::String(text) => Err(de::Error::invalid_value(de::Unexpected::Str(text), &"\"true\" or \"false\"")),
            _ => Err(self.invalid(&visitor)),
        }
    }

    coerce_number!(deserialize_i8, visit_i8, i8);
    coerce_number!(deserialize_i16, visit_i16, i16);
    coerce_number!(deserialize_i32, visit_i32, i32);
    coerce_number!(deserialize_i64, visit_i64, i64);
    coerce_number!(deserialize_i128, visit_i128, i128);
    coerce_number!(deserialize_u8, visit_u8, u8);
    coerce_number!(deserialize_u16, visit_u16, u16);
    coerce_number!(deserialize_u32, visit_u32, u32);
    coerce_number!(deserialize_u64, visit_u64, u64);
    coerce_number!(deserialize_u128, visit_u128, u128);
    coerce_number!(deserialize_f32, visit_f32, f32);
    coerce_number!(deserialize_f64, visit_f64, f64);

    fn deserialize_char<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        match self.0 {
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Number(n) => visitor.visit_string(n.to_string()),
            Value::Bool(b) => visitor.visit_string(b.to_string()),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        match self.0 {
            Value::String(s) => visitor.visit_borrowed_bytes(s.as_bytes()),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'a>>(self, _name: &'static str, visitor: V) -> Result<V::Value, CoerceError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, CoerceError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(CoerceSeq { items: items.iter() }),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'a>>(self, _len: usize, visitor: V) -> Result<V::Value, CoerceError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, CoerceError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(CoerceMap { entries: map.iter(), value: None }),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, CoerceError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, CoerceError> {
        match self.0 {
            Value::String(variant) => visitor.visit_enum(variant.as_str().into_deserializer()),
            Value::Object(map) if map.len() == 1 => {
                let (variant, value) = map.iter().next().ok_or_else(|| de::Error::custom("empty enum object"))?;
                visitor.visit_enum(CoerceEnum { variant, value })
            }
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_identifier<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, CoerceError> {
        visitor.visit_unit()
    }
}

struct CoerceSeq<'a> {
    items: std::slice::Iter<'a, Value>,
}

impl<'a> SeqAccess<'a> for CoerceSeq<'a> {
    type Error = CoerceError;

    fn next_element_seed<T: DeserializeSeed<'a>>(&mut self, seed: T) -> Result<Option<T::Value>, CoerceError> {
        self.items.next().map(|item| seed.deserialize(Coerce(item))).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct CoerceMap<'a> {
    entries: serde_json::map::Iter<'a>,
    value: Option<&'a Value>,
}

impl<'a> MapAccess<'a> for CoerceMap<'a> {
    type Error = CoerceError;

    fn next_key_seed<K: DeserializeSeed<'a>>(&mut self, seed: K) -> Result<Option<K::Value>, CoerceError> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(key.as_str().into_deserializer()).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value, CoerceError> {
        let value = self.value.take().ok_or_else(|| de::Error::custom("value requested before key"))?;
        seed.deserialize(Coerce(value))
    }
}

struct CoerceEnum<'a> {
    variant: &'a String,
    value: &'a Value,
}

impl<'a> de::EnumAccess<'a> for CoerceEnum<'a> {
    type Error = CoerceError;
    type Variant = Coerce<'a>;

    fn variant_seed<V: DeserializeSeed<'a>>(self, seed: V) -> Result<(V::Value, Coerce<'a>), CoerceError> {
        let variant = seed.deserialize(self.variant.as_str().into_deserializer())?;
        Ok((variant, Coerce(self.value)))
    }
}

impl<'a> de::VariantAccess<'a> for Coerce<'a> {
    type Error = CoerceError;

    fn unit_variant(self) -> Result<(), CoerceError> {
        de::Deserialize::deserialize(self)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'a>>(self, seed: T) -> Result<T::Value, CoerceError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'a>>(self, _len: usize, visitor: V) -> Result<V::Value, CoerceError> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'a>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, CoerceError> {
        de::Deserializer::deserialize_map(self, visitor)
    }
}

/// Properties as an untyped map, for providers that take whatever they are given.
pub type PropertyMap = Map<String, Value>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "PascalCase", deny_unknown_fields)]
    struct Props {
        count: u32,
        enabled: bool,
        ratio: Option<f64>,
        name: String,
        tags: Vec<Tag>,
        #[serde(default)]
        mode: Mode,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "PascalCase")]
    struct Tag {
        key: String,
        weight: i64,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    enum Mode {
        #[default]
        Fast,
        Safe,
    }

    fn check(input: Value, expected: Result<Props, &str>) {
        let got = from_properties::<Props>(&input).map_err(|e| e.to_string());
        assert_eq!(got, expected.map_err(str::to_owned), "for {input}");
    }

    #[test]
    fn coercion_table() {
        let tags = json!([{"Key": "a", "Weight": "-3"}]);
        let props = |ratio| Props {
            count: 5,
            enabled: true,
            ratio,
            name: "7".into(),
            tags: vec![Tag { key: "a".into(), weight: -3 }],
            mode: Mode::Safe,
        };
        check(json!({"Count": "5", "Enabled": "true", "Name": "7", "Tags": tags, "Mode": "Safe"}), Ok(props(None)));
        check(
            json!({"Count": 5, "Enabled": true, "Ratio": "0.5", "Name": 7, "Tags": tags, "Mode": "Safe"}),
            Ok(props(Some(0.5))),
        );
        check(json!({"Count": " 5 ", "Enabled": "TRUE", "Name": "7", "Tags": tags, "Mode": "Safe"}), Ok(props(None)));
        check(
            json!({"Count": "five", "Enabled": "true", "Name": "n", "Tags": []}),
            Err("invalid property Count: invalid value: string \"five\", expected u32"),
        );
        check(
            json!({"Count": "-1", "Enabled": "true", "Name": "n", "Tags": []}),
            Err("invalid property Count: invalid value: string \"-1\", expected u32"),
        );
        check(
            json!({"Count": "1", "Enabled": "yes", "Name": "n", "Tags": []}),
            Err("invalid property Enabled: invalid value: string \"yes\", expected \"true\" or \"false\""),
        );
        check(
            json!({"Count": "1", "Enabled": "true", "Name": "n", "Tags": [{"Key": "k", "Weight": "x"}]}),
            Err("invalid property Tags[0].Weight: invalid value: string \"x\", expected i64"),
        );
        check(json!({"Count": "1", "Enabled": "true", "Tags": []}), Err("invalid properties: missing field `Name`"));
        check(
            json!({"Count": "1", "Enabled": "true", "Name": "n", "Tags": [], "Colour": "red"}),
            Err(
                "invalid property Colour: unknown field `Colour`, expected one of `Count`, `Enabled`, `Ratio`, `Name`, `Tags`, `Mode`",
            ),
        );
        check(
            json!({"Count": "1", "Enabled": "true", "Name": "n", "Tags": [], "Mode": "Slow"}),
            Err("invalid property Mode: unknown variant `Slow`, expected `Fast` or `Safe`"),
        );
    }

    #[test]
    fn untyped_maps_pass_through() {
        let input = json!({"A": "1", "B": {"C": ["x"]}});
        let map: PropertyMap = from_properties(&input).expect("map");
        assert_eq!(Value::Object(map), input);
    }
}
