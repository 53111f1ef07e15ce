//! JSON values to CEL values and back: objects become maps with string keys, integers
//! `int`, other numbers `double`, as kube's `UnstructuredToVal` does for a schema without
//! formats.

use cel::Value;

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
            let map: std::collections::HashMap<String, Value> = fields
                .iter()
                .map(|(k, v)| (k.clone(), from_json(v)))
                .collect();
            map.into()
        }
    }
}
