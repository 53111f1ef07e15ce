//! JSON values to CEL values and back: objects become maps with string keys, integers
//! `int`, other numbers `double`, as kube's `UnstructuredToVal` does for a schema without
//! formats; and back (a `messageExpression`'s result, a variable, an audit annotation),
//! integers staying integers.

use base64::Engine as _;
use cel::Value;
use cel::objects::{Key, OptionalValue};

/// The CEL value of a JSON value.
pub fn from_json(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => match n.as_u64() {
                Some(u) => Value::UInt(u),
                None => Value::Float(n.as_f64().unwrap_or_default()),
            },
        },
        serde_json::Value::String(s) => Value::String(s.clone().into()),
        serde_json::Value::Array(items) => {
            Value::List(items.iter().map(from_json).collect::<Vec<_>>().into())
        }
        serde_json::Value::Object(fields) => {
            string_map(fields.iter().map(|(k, v)| (k.clone(), from_json(v))))
        }
    }
}

/// A CEL map of string keys, built as cel-rust holds it: collecting a `HashMap<String, _>`
/// and converting it (`From<HashMap>`) would hash every key twice, into two tables.
pub fn string_map(members: impl Iterator<Item = (String, Value)>) -> Value {
    let map: std::collections::HashMap<Key, Value> = members
        .map(|(key, value)| (Key::String(key.into()), value))
        .collect();
    Value::Map(cel::objects::Map {
        map: std::sync::Arc::new(map),
    })
}

/// A CEL value JSON cannot hold: a function, a type, a NaN or infinite double, or an
/// opaque value (URL, IP, quantity, …) other than an optional.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot convert {0} to JSON")]
pub struct ToJsonError(String);

/// The JSON value of a CEL value, as cel-go's `ConvertToNative` to JSON writes it: bytes in
/// base64, durations in seconds (`"1.5s"`), timestamps in RFC 3339, map keys as strings,
/// an optional as its value or `null`.
pub fn to_json(value: &Value) -> Result<serde_json::Value, ToJsonError> {
    Ok(match value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => (*i).into(),
        Value::UInt(u) => (*u).into(),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| ToJsonError(format!("double {f}")))?,
        Value::String(s) => serde_json::Value::String(s.to_string()),
        Value::Bytes(b) => {
            serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(&**b))
        }
        Value::List(items) => {
            serde_json::Value::Array(items.iter().map(to_json).collect::<Result<Vec<_>, _>>()?)
        }
        Value::Map(map) => {
            let mut object = serde_json::Map::new();
            for (key, value) in map.map.iter() {
                let key = match key {
                    Key::String(s) => s.to_string(),
                    Key::Int(i) => i.to_string(),
                    Key::Uint(u) => u.to_string(),
                    Key::Bool(b) => b.to_string(),
                };
                object.insert(key, to_json(value)?);
            }
            serde_json::Value::Object(object)
        }
        Value::Duration(d) => serde_json::Value::String(duration_json(
            d.num_nanoseconds()
                .map_or(i128::from(d.num_seconds()) * 1_000_000_000, i128::from),
        )),
        Value::Timestamp(t) => serde_json::Value::String(t.to_rfc3339()),
        Value::Opaque(o) => match o.downcast_ref::<OptionalValue>() {
            Some(optional) => match optional.value() {
                Some(v) => to_json(v)?,
                None => serde_json::Value::Null,
            },
            None => return Err(ToJsonError(o.runtime_type_name().to_string())),
        },
        Value::Function(name, _) => return Err(ToJsonError(format!("function {name}"))),
        Value::Struct(_) => return Err(ToJsonError("a message".to_string())),
    })
}

/// A duration as protobuf's JSON writes it: seconds, with as many fractional digits as
/// needed (`"1.500s"` is written `"1.5s"`).
fn duration_json(nanos: i128) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let nanos = nanos.unsigned_abs();
    let (seconds, fraction) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    if fraction == 0 {
        return format!("{sign}{seconds}s");
    }
    let digits = format!("{fraction:09}");
    format!("{sign}{seconds}.{}s", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_round_trips_with_integers_kept() {
        let original = json!({
            "name": "x",
            "replicas": 3,
            "ratio": 0.5,
            "big": 18446744073709551615u64,
            "tags": ["a", "b"],
            "nested": {"on": true, "none": null},
        });
        assert_eq!(to_json(&from_json(&original)), Ok(original));
    }

    #[test]
    fn cel_only_values_are_written_as_cel_go_writes_them() {
        assert_eq!(
            to_json(&Value::Bytes(b"hi".to_vec().into())),
            Ok(json!("aGk="))
        );
        let env = crate::cel::Environment::new(&[]);
        let duration = env
            .compile("duration('1500ms')")
            .unwrap()
            .evaluate(
                &crate::cel::Activation::new(),
                &mut crate::cel::Budget::admission(),
            )
            .unwrap();
        assert_eq!(to_json(&duration), Ok(json!("1.5s")));
        let none = Value::Opaque(std::sync::Arc::new(OptionalValue::none()));
        assert_eq!(to_json(&none), Ok(serde_json::Value::Null));
        let some = Value::Opaque(std::sync::Arc::new(OptionalValue::of(Value::Int(2))));
        assert_eq!(to_json(&some), Ok(json!(2)));
        assert!(to_json(&Value::Float(f64::NAN)).is_err());
    }
}
