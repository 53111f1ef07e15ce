//! A typed object decoded from its JSON, learning on the way which fields its type does not
//! know: what `fieldValidation` warns of or refuses.
//!
//! serde tells a deserializer that a field is unknown only by asking it to skip the field's
//! value (`deserialize_ignored_any`). This module's deserializer walks a [`Value`] as
//! `serde_json`'s own `&Value` deserializer does (the same visits, the same errors) and, at
//! each skipped value, hands its [`Path`] to a callback. The path is a chain of borrowed
//! frames on the stack: the keys are the object's own strings, so a decode that meets no
//! unknown field allocates nothing for them (a wrapper around any deserializer, such as
//! `serde_ignored`, must copy every key it meets, in case its value is skipped).

use std::fmt;

use serde::de::{
    self, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};
use serde::{Deserialize, Deserializer};
use serde_json::{Error, Map, Number, Value};

/// Where a value lies in the decoded JSON: its keys and indexes from the top.
#[derive(Clone, Copy, Debug)]
pub enum Path<'a> {
    /// The whole object.
    Root,
    /// The member `key` of an object.
    Key {
        /// Where the object lies.
        parent: &'a Path<'a>,
        /// The member's name.
        key: &'a str,
    },
    /// The element `index` of an array.
    Index {
        /// Where the array lies.
        parent: &'a Path<'a>,
        /// The element's place, from 0.
        index: usize,
    },
}

impl Path<'_> {
    /// Whether this is the member `key` of the whole object.
    pub fn is_top_level(&self, name: &str) -> bool {
        matches!(self, Path::Key { parent: Path::Root, key } if *key == name)
    }
}

/// The keys and indexes joined with dots (`spec.items.0.name`); the whole object is `.`.
impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn parent(f: &mut fmt::Formatter<'_>, parent: &Path<'_>) -> fmt::Result {
            match parent {
                Path::Root => Ok(()),
                path => write!(f, "{path}."),
            }
        }
        match self {
            Path::Root => f.write_str("."),
            Path::Key { parent: p, key } => {
                parent(f, p)?;
                f.write_str(key)
            }
            Path::Index { parent: p, index } => {
                parent(f, p)?;
                write!(f, "{index}")
            }
        }
    }
}

/// Decodes `value` into `T` as `T::deserialize(value)` does, calling `unknown` with the
/// path of each field `T` skipped.
pub fn from_value_reporting_unknown<'de, T, F>(
    value: &'de Value,
    mut unknown: F,
) -> Result<T, Error>
where
    T: Deserialize<'de>,
    F: FnMut(&Path<'_>),
{
    T::deserialize(Reporting {
        value,
        path: &Path::Root,
        unknown: &mut unknown,
    })
}

/// `value` at `path`, a deserializer that reports what is skipped of it.
struct Reporting<'p, 'de, F> {
    value: &'de Value,
    path: &'p Path<'p>,
    unknown: &'p mut F,
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => number_unexpected(n),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

fn number_unexpected(n: &Number) -> Unexpected<'static> {
    if let Some(u) = n.as_u64() {
        Unexpected::Unsigned(u)
    } else if let Some(i) = n.as_i64() {
        Unexpected::Signed(i)
    } else {
        Unexpected::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

impl<'p, 'de, F: FnMut(&Path<'_>)> Reporting<'p, 'de, F> {
    fn invalid_type<V: Visitor<'de>>(&self, visitor: &V) -> Error {
        de::Error::invalid_type(unexpected(self.value), visitor)
    }

    fn visit_array<V: Visitor<'de>>(
        self,
        array: &'de [Value],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let mut access = Elements {
            iter: array.iter().enumerate(),
            path: self.path,
            unknown: self.unknown,
        };
        let seq = visitor.visit_seq(&mut access)?;
        if access.iter.len() == 0 {
            Ok(seq)
        } else {
            Err(de::Error::invalid_length(
                array.len(),
                &"fewer elements in array",
            ))
        }
    }

    fn visit_object<V: Visitor<'de>>(
        self,
        object: &'de Map<String, Value>,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let mut access = Members {
            iter: object.iter(),
            next: None,
            path: self.path,
            unknown: self.unknown,
        };
        let map = visitor.visit_map(&mut access)?;
        if access.iter.len() == 0 {
            Ok(map)
        } else {
            Err(de::Error::invalid_length(
                object.len(),
                &"fewer elements in map",
            ))
        }
    }
}

/// A number's methods: the number's own (a copy of a `Number` allocates nothing), anything
/// else refused.
macro_rules! number {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                match self.value {
                    Value::Number(n) => n.clone().$method(visitor),
                    _ => Err(self.invalid_type(&visitor)),
                }
            }
        )*
    };
}

impl<'de, F: FnMut(&Path<'_>)> Deserializer<'de> for Reporting<'_, 'de, F> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => n.clone().deserialize_any(visitor),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(array) => self.visit_array(array, visitor),
            Value::Object(object) => self.visit_object(object, visitor),
        }
    }

    number!(deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64);

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let (variant, value) = match self.value {
            Value::String(variant) => (variant, None),
            Value::Object(object) => {
                let mut members = object.iter();
                match (members.next(), members.next()) {
                    (Some((variant, value)), None) => (variant, Some(value)),
                    _ => {
                        return Err(de::Error::invalid_value(
                            Unexpected::Map,
                            &"map with a single key",
                        ));
                    }
                }
            }
            other => return Err(de::Error::invalid_type(unexpected(other), &"string or map")),
        };
        visitor.visit_enum(Variant {
            variant,
            value,
            path: self.path,
            unknown: self.unknown,
        })
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Bool(b) => visitor.visit_bool(*b),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::String(s) => visitor.visit_borrowed_str(s),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(array) => self.visit_array(array, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Array(array) => self.visit_array(array, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Object(object) => self.visit_object(object, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.value {
            Value::Array(array) => self.visit_array(array, visitor),
            Value::Object(object) => self.visit_object(object, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    /// The one place a field is known to be unknown: its value is skipped.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        (self.unknown)(self.path);
        visitor.visit_unit()
    }
}

/// The elements of an array, each at its index.
struct Elements<'p, 'de, F> {
    iter: std::iter::Enumerate<std::slice::Iter<'de, Value>>,
    path: &'p Path<'p>,
    unknown: &'p mut F,
}

impl<'de, F: FnMut(&Path<'_>)> SeqAccess<'de> for Elements<'_, 'de, F> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some((index, value)) = self.iter.next() else {
            return Ok(None);
        };
        let path = Path::Index {
            parent: self.path,
            index,
        };
        seed.deserialize(Reporting {
            value,
            path: &path,
            unknown: &mut *self.unknown,
        })
        .map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// The members of an object, each value at its key.
struct Members<'p, 'de, F> {
    iter: serde_json::map::Iter<'de>,
    /// The member whose key was handed out and whose value is next.
    next: Option<(&'de str, &'de Value)>,
    path: &'p Path<'p>,
    unknown: &'p mut F,
}

impl<'de, F: FnMut(&Path<'_>)> MapAccess<'de> for Members<'_, 'de, F> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.iter.next() else {
            return Ok(None);
        };
        self.next = Some((key, value));
        seed.deserialize(Key(key)).map(Some)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Error> {
        let Some((key, value)) = self.next.take() else {
            return Err(de::Error::custom("value is missing"));
        };
        let path = Path::Key {
            parent: self.path,
            key,
        };
        seed.deserialize(Reporting {
            value,
            path: &path,
            unknown: &mut *self.unknown,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// A member's key: a borrowed string, or a number or `true`/`false` written as one, as
/// `serde_json` reads the keys of a map whose key type is a number or a bool.
struct Key<'de>(&'de str);

macro_rules! numeric_key {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                // A number from its first byte to its last: `serde_json` takes no blank
                // around a numeric key.
                let bytes = self.0.as_bytes();
                if !matches!(bytes.first(), Some(b'0'..=b'9' | b'-'))
                    || matches!(bytes.last(), Some(b' ' | b'\t' | b'\n' | b'\r'))
                {
                    return Err(not_numeric());
                }
                let mut json = serde_json::Deserializer::from_str(self.0);
                let number = json.$method(visitor)?;
                json.end().map_err(|_| not_numeric())?;
                Ok(number)
            }
        )*
    };
}

/// `serde_json`'s words for a key that is not the number its map's key type is.
fn not_numeric() -> Error {
    de::Error::custom("invalid value: expected key to be a number in quotes")
}

impl<'de> Deserializer<'de> for Key<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_borrowed_str(self.0)
    }

    numeric_key!(deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64);

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            "true" => visitor.visit_bool(true),
            "false" => visitor.visit_bool(false),
            other => Err(de::Error::invalid_type(Unexpected::Str(other), &visitor)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        IntoDeserializer::<Error>::into_deserializer(self.0)
            .deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        char str string bytes byte_buf unit unit_struct seq tuple tuple_struct
        map struct identifier ignored_any
    }
}

/// An enum written as its variant's name, or as an object of one member: the variant's name
/// and its content, at the enum's own path.
struct Variant<'p, 'de, F> {
    variant: &'de str,
    value: Option<&'de Value>,
    path: &'p Path<'p>,
    unknown: &'p mut F,
}

impl<'p, 'de, F: FnMut(&Path<'_>)> EnumAccess<'de> for Variant<'p, 'de, F> {
    type Error = Error;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), Error> {
        let variant = seed.deserialize(Key(self.variant))?;
        Ok((variant, self))
    }
}

impl<'p, 'de, F: FnMut(&Path<'_>)> Variant<'p, 'de, F> {
    fn content(self, value: &'de Value) -> Reporting<'p, 'de, F> {
        Reporting {
            value,
            path: self.path,
            unknown: self.unknown,
        }
    }
}

impl<'de, F: FnMut(&Path<'_>)> VariantAccess<'de> for Variant<'_, 'de, F> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.value {
            Some(value) => <()>::deserialize(value),
            None => Ok(()),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        match self.value {
            Some(value) => seed.deserialize(self.content(value)),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"newtype variant",
            )),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Some(Value::Array(array)) if array.is_empty() => visitor.visit_unit(),
            Some(value @ Value::Array(array)) => self.content(value).visit_array(array, visitor),
            Some(other) => Err(de::Error::invalid_type(unexpected(other), &"tuple variant")),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"tuple variant",
            )),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.value {
            Some(value @ Value::Object(object)) => {
                self.content(value).visit_object(object, visitor)
            }
            Some(other) => Err(de::Error::invalid_type(
                unexpected(other),
                &"struct variant",
            )),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"struct variant",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Object {
        metadata: Metadata,
        #[serde(default)]
        spec: Option<Spec>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Metadata {
        name: String,
        #[serde(default)]
        labels: BTreeMap<String, String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        #[serde(default)]
        items: Vec<Item>,
        #[serde(default)]
        counts: BTreeMap<u16, bool>,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default)]
        wrapped: Option<Wrapped>,
        #[serde(default)]
        big: Option<i128>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Item {
        name: String,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Wrapped(Item);

    #[derive(Debug, Deserialize, PartialEq)]
    enum Mode {
        Off,
        Limit(u32),
        Range(u32, u32),
        Named { name: String },
    }

    fn decode(value: &Value) -> (Result<Object, String>, Vec<String>) {
        let mut unknown = Vec::new();
        let decoded =
            from_value_reporting_unknown::<Object, _>(value, |path| unknown.push(path.to_string()));
        (decoded.map_err(|e| e.to_string()), unknown)
    }

    /// The same value, the same error text as `serde_json`'s own `&Value` deserializer, and
    /// every unknown field at its path.
    #[test]
    fn decodes_as_serde_json_and_reports_unknown_fields() {
        let value = json!({
            "apiVersion": "v1",
            "metadata": {"name": "a", "labels": {"x": "y"}, "extra": {"deep": [1]}},
            "spec": {
                "items": [{"name": "one"}, {"name": "two", "colour": "red"}],
                "counts": {"7": true, "0": false},
                "mode": {"Named": {"name": "n", "size": 3}},
                "wrapped": {"name": "w", "more": null},
                "big": i64::MIN,
                "other": 1.5,
            },
        });
        let (decoded, unknown) = decode(&value);
        assert_eq!(decoded, Ok(Object::deserialize(&value).unwrap()));
        assert_eq!(
            unknown,
            [
                "apiVersion",
                "metadata.extra",
                "spec.items.1.colour",
                "spec.mode.size",
                "spec.other",
                "spec.wrapped.more",
            ]
        );

        for mode in [json!("Off"), json!({"Limit": 3}), json!({"Range": [1, 2]})] {
            let value = json!({"metadata": {"name": "a"}, "spec": {"mode": mode}});
            assert_eq!(
                decode(&value),
                (Ok(Object::deserialize(&value).unwrap()), vec![])
            );
        }
    }

    #[test]
    fn errors_read_as_serde_jsons() {
        for bad in [
            json!({"metadata": {"name": 5}}),
            json!({"metadata": {"name": "a", "labels": []}}),
            json!({"metadata": {"name": "a"}, "spec": {"items": [{"name": true}]}}),
            json!({"metadata": {"name": "a"}, "spec": {"counts": {"x": true}}}),
            json!({"metadata": {"name": "a"}, "spec": {"counts": {"70000": true}}}),
            json!({"metadata": {"name": "a"}, "spec": {"counts": {"7 ": true}}}),
            json!({"metadata": {"name": "a"}, "spec": {"mode": {"Limit": -1}}}),
            json!({"metadata": {"name": "a"}, "spec": {"mode": {"Off": 1, "Limit": 2}}}),
            json!({"metadata": {"name": "a"}, "spec": {"mode": 4}}),
            json!({"metadata": {"name": "a"}, "spec": {"big": 1.5}}),
            json!({"metadata": {"name": "a"}, "spec": {"big": "1"}}),
            json!({"metadata": {"name": "a"}, "spec": {"mode": "Limit"}}),
            json!({"metadata": {"name": "a"}, "spec": {"mode": {"Range": {}}}}),
            json!({"metadata": {}}),
            json!([{"name": "a"}, 5]),
            json!([{"name": "a"}, null, 3]),
            json!("text"),
        ] {
            let expected = Object::deserialize(&bad).unwrap_err().to_string();
            assert_eq!(decode(&bad).0, Err(expected), "{bad}");
        }
    }

    #[test]
    fn paths_display_and_name_the_top_level() {
        let root = Path::Root;
        let kind = Path::Key {
            parent: &root,
            key: "kind",
        };
        let items = Path::Key {
            parent: &kind,
            key: "items",
        };
        let first = Path::Index {
            parent: &items,
            index: 0,
        };
        assert_eq!(root.to_string(), ".");
        assert_eq!(first.to_string(), "kind.items.0");
        assert!(kind.is_top_level("kind"));
        assert!(!items.is_top_level("items"));
    }
}
