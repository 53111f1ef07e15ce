//! Path elements of managed fields (structured-merge-diff's `fieldpath.PathElement`): how
//! they order, print in conflict messages, and read and write in `FieldsV1` keys.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

/// One step from a value to one of its parts.
#[derive(Clone, Debug)]
pub enum PathElement {
    /// A struct field or a map key: `f:name`.
    Field(String),
    /// A list-map item by its key members, sorted by name: `k:{"name":"x"}`.
    Key(Vec<(String, Value)>),
    /// A set item by its value: `v:"x"`.
    Value(Value),
    /// A list item by position: `i:0` (lists apply treats as atomic never use it).
    Index(usize),
}

impl PathElement {
    /// The `FieldsV1` key of this element (`f:…`, `k:…`, `v:…`, `i:…`).
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            // The common case, without the formatting machinery.
            Self::Field(name) => {
                let mut key = String::with_capacity(name.len() + 2);
                key.push_str("f:");
                key.push_str(name);
                key
            }
            Self::Key(fields) => format!("k:{}", key_json(fields)),
            Self::Value(v) => format!("v:{v}"),
            Self::Index(i) => format!("i:{i}"),
        }
    }

    /// Reads a `FieldsV1` key; `None` for anything else (including the `.` marker).
    pub fn from_fields_v1_key(key: &str) -> Option<Self> {
        let (kind, rest) = key.split_once(':')?;
        match kind {
            "f" => Some(Self::Field(rest.to_owned())),
            "v" => serde_json::from_str(rest).ok().map(Self::Value),
            "i" => rest.parse().ok().map(Self::Index),
            "k" => {
                let Value::Object(map) = serde_json::from_str(rest).ok()? else {
                    return None;
                };
                Some(Self::key(map.into_iter().collect()))
            }
            _ => None,
        }
    }

    /// A key element, its members sorted by name as SMD keeps them.
    pub fn key(mut fields: Vec<(String, Value)>) -> Self {
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        Self::Key(fields)
    }
}

/// `{"a":1,"b":"x"}`: the key members as compact JSON, in name order.
fn key_json(fields: &[(String, Value)]) -> String {
    let members: Vec<String> = fields
        .iter()
        .map(|(name, value)| format!("{}:{value}", Value::from(name.as_str())))
        .collect();
    format!("{{{}}}", members.join(","))
}

/// SMD's total order of values: numbers, strings, booleans, lists, maps, null.
pub(crate) fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => compare_lists(x, y),
        (Value::Object(x), Value::Object(y)) => {
            let x: Vec<(&String, &Value)> = x.iter().collect();
            let y: Vec<(&String, &Value)> = y.iter().collect();
            compare_fields(&x, &y)
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

fn compare_lists(x: &[Value], y: &[Value]) -> Ordering {
    for (a, b) in x.iter().zip(y) {
        match compare_values(a, b) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    x.len().cmp(&y.len())
}

/// Lexical order of sorted (name, value) lists, as SMD's `FieldList.Compare`.
fn compare_fields<S: AsRef<str>, V: std::borrow::Borrow<Value>>(
    x: &[(S, V)],
    y: &[(S, V)],
) -> Ordering {
    for ((xn, xv), (yn, yv)) in x.iter().zip(y) {
        let by_name = xn.as_ref().cmp(yn.as_ref());
        match by_name.then_with(|| compare_values(xv.borrow(), yv.borrow())) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    x.len().cmp(&y.len())
}

impl Ord for PathElement {
    /// SMD's order: fields, then keys, then values, then indexes.
    fn cmp(&self, other: &Self) -> Ordering {
        fn rank(e: &PathElement) -> u8 {
            match e {
                PathElement::Field(_) => 0,
                PathElement::Key(_) => 1,
                PathElement::Value(_) => 2,
                PathElement::Index(_) => 3,
            }
        }
        match (self, other) {
            (Self::Field(a), Self::Field(b)) => a.cmp(b),
            (Self::Key(a), Self::Key(b)) => compare_fields(a, b),
            (Self::Value(a), Self::Value(b)) => compare_values(a, b),
            (Self::Index(a), Self::Index(b)) => a.cmp(b),
            _ => rank(self).cmp(&rank(other)),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

/// SMD's `value.ToString`: strings quoted, lists `[a,b]`, maps `{k=v}`.
fn value_to_string(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(value_to_string).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}={}", value_to_string(v)))
                .collect();
            format!("{{{}}}", items.join(","))
        }
        other => other.to_string(),
    }
}

impl fmt::Display for PathElement {
    /// As kube prints paths in conflicts: `.spec`, `[name="http"]`, `[="x"]`, `[0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Field(name) => write!(f, ".{name}"),
            Self::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(n, v)| format!("{n}={}", value_to_string(v)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            Self::Value(v) => write!(f, "[={}]", value_to_string(v)),
            Self::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object's root, printed as kube prints it (`.spec.ports[name="http"].port`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Path(pub Vec<PathElement>);

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|e| write!(f, "{e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_keys_round_trip() {
        for key in [
            "f:spec",
            r#"k:{"name":"nginx"}"#,
            r#"k:{"port":80,"protocol":"TCP"}"#,
            r#"v:"example.com/finalizer""#,
            "v:3",
            "i:0",
        ] {
            let element = PathElement::from_fields_v1_key(key).unwrap();
            assert_eq!(element.to_fields_v1_key(), key);
        }
        assert_eq!(PathElement::from_fields_v1_key("."), None);
        assert_eq!(PathElement::from_fields_v1_key("x:y"), None);
    }

    #[test]
    fn keys_are_sorted_by_member_name() {
        let e = PathElement::key(vec![
            ("protocol".into(), json!("TCP")),
            ("port".into(), json!(80)),
        ]);
        assert_eq!(e.to_fields_v1_key(), r#"k:{"port":80,"protocol":"TCP"}"#);
    }

    #[test]
    fn orders_as_smd() {
        let mut elements = [
            PathElement::Index(0),
            PathElement::Value(json!("a")),
            PathElement::Value(json!(1)),
            PathElement::key(vec![("port".into(), json!(8080))]),
            PathElement::key(vec![("port".into(), json!(80))]),
            PathElement::Field("b".into()),
            PathElement::Field("a".into()),
        ];
        elements.sort();
        let keys: Vec<String> = elements.iter().map(PathElement::to_fields_v1_key).collect();
        assert_eq!(
            keys,
            [
                "f:a",
                "f:b",
                r#"k:{"port":80}"#,
                r#"k:{"port":8080}"#,
                "v:1",
                r#"v:"a""#,
                "i:0"
            ]
        );
    }

    #[test]
    fn prints_paths_as_kube() {
        let path = Path(vec![
            PathElement::Field("spec".into()),
            PathElement::Field("ports".into()),
            PathElement::key(vec![("name".into(), json!("http"))]),
            PathElement::Field("port".into()),
        ]);
        assert_eq!(path.to_string(), r#".spec.ports[name="http"].port"#);
        let two = PathElement::key(vec![
            ("port".into(), json!(80)),
            ("protocol".into(), json!("TCP")),
        ]);
        assert_eq!(two.to_string(), r#"[port=80,protocol="TCP"]"#);
        assert_eq!(PathElement::Value(json!("x")).to_string(), r#"[="x"]"#);
        assert_eq!(PathElement::Index(2).to_string(), "[2]");
    }
}
