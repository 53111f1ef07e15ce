//! Field errors for a body that is JSON but does not decode into its type: a string where the
//! type has an integer, a value outside an enum, a missing required field.
//!
//! kube-apiserver checks a custom resource against its structural schema and answers such a
//! body with 422 `Invalid`, one cause per field, in kube-openapi's words
//! (`spec.size: Invalid value: "string": spec.size in body must be of type integer:
//! "string"`). This module does the same with the JSON schema `#[derive(JsonSchema)]` gives
//! the type; it runs only after decoding failed, so a valid body costs nothing.

use serde_json::{Map, Value};

use crate::runtime::{FieldError, FieldErrorType};

/// Deepest nesting of `$ref`s and values followed; the limit stops a schema that refers to
/// itself from looping.
const MAX_DEPTH: usize = 64;

/// Every field of `object` the schema of `T` refuses, in document order.
pub fn schema_errors<T: schemars::JsonSchema>(object: &Value) -> Vec<FieldError> {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    check_against(schema.as_value(), object)
}

/// Every field of `object` the JSON schema `schema` refuses (`$ref`s resolved in `schema`).
pub fn check_against(schema: &Value, object: &Value) -> Vec<FieldError> {
    let mut checker = Checker {
        document: schema,
        errors: Vec::new(),
    };
    checker.check(schema, object, "", 0);
    checker.errors
}

struct Checker<'a> {
    document: &'a Value,
    errors: Vec<FieldError>,
}

impl<'a> Checker<'a> {
    fn check(&mut self, schema: &'a Value, value: &Value, path: &str, depth: usize) {
        let Some(schema) = schema.as_object() else {
            return; // `true`, `{}`-like: anything goes
        };
        if depth > MAX_DEPTH {
            return;
        }
        if let Some(target) = self.reference(schema) {
            self.check(target, value, path, depth + 1);
        }
        for branch in schema
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.check(branch, value, path, depth + 1);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                self.check_alternatives(branches, value, path, depth);
            }
        }
        if !self.check_type(schema, value, path) || !self.check_enum(schema, value, path) {
            return;
        }
        match value {
            Value::Object(map) => self.check_members(schema, map, path, depth),
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.check(item_schema, item, &format!("{path}[{i}]"), depth + 1);
                    }
                }
            }
            _ => {}
        }
    }

    /// The schema a `$ref` names, when it points into this document.
    fn reference(&self, schema: &Map<String, Value>) -> Option<&'a Value> {
        let pointer = schema.get("$ref")?.as_str()?.strip_prefix('#')?;
        self.document.pointer(pointer)
    }

    /// `anyOf` / `oneOf`: fine when one branch takes the value; otherwise a `oneOf` of
    /// constants is an enum, and anything else reports what the first non-null branch says
    /// (schemars writes `Option<T>` as `anyOf: [T, null]`).
    fn check_alternatives(
        &mut self,
        branches: &'a [Value],
        value: &Value,
        path: &str,
        depth: usize,
    ) {
        let mut first = None;
        for branch in branches {
            let errors = self.trial(branch, value, path, depth + 1);
            if errors.is_empty() {
                return;
            }
            if first.is_none() && !self.only_null(branch) {
                first = Some(errors);
            }
        }
        let constants: Option<Vec<&Value>> = branches
            .iter()
            .filter(|b| !self.only_null(b))
            .map(|b| self.resolve(b).get("const"))
            .collect();
        match constants {
            Some(allowed) if !allowed.is_empty() => self.not_supported(path, value, &allowed),
            _ => self.errors.extend(first.unwrap_or_default()),
        }
    }

    fn trial(&self, schema: &'a Value, value: &Value, path: &str, depth: usize) -> Vec<FieldError> {
        let mut trial = Checker {
            document: self.document,
            errors: Vec::new(),
        };
        trial.check(schema, value, path, depth);
        trial.errors
    }

    fn resolve(&self, schema: &'a Value) -> &'a Value {
        let mut schema = schema;
        for _ in 0..MAX_DEPTH {
            match schema.as_object().and_then(|s| self.reference(s)) {
                Some(target) => schema = target,
                None => break,
            }
        }
        schema
    }

    fn only_null(&self, schema: &'a Value) -> bool {
        self.resolve(schema).get("type").and_then(Value::as_str) == Some("null")
    }

    /// kube-openapi's type check; `false` when it failed (nothing below is checked then).
    fn check_type(&mut self, schema: &Map<String, Value>, value: &Value, path: &str) -> bool {
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => return true,
        };
        if types.iter().any(|t| type_matches(t, value)) {
            return true;
        }
        let expected: Vec<&str> = types.into_iter().filter(|t| *t != "null").collect();
        let actual = type_name(value);
        self.errors.push(FieldError {
            type_: FieldErrorType::TypeInvalid,
            field: path.to_string(),
            value: Some(format!("{actual:?}")),
            detail: format!(
                "{path} in body must be of type {}: {actual:?}",
                expected.join(",")
            ),
        });
        false
    }

    /// `enum` and `const`; `false` when the value is not among them.
    fn check_enum(&mut self, schema: &Map<String, Value>, value: &Value, path: &str) -> bool {
        let allowed: Vec<&Value> = match (schema.get("enum"), schema.get("const")) {
            (Some(Value::Array(values)), _) => values.iter().collect(),
            (_, Some(constant)) => vec![constant],
            _ => return true,
        };
        if value.is_null() || allowed.contains(&value) {
            return true;
        }
        self.not_supported(path, value, &allowed);
        false
    }

    fn not_supported(&mut self, path: &str, value: &Value, allowed: &[&Value]) {
        let quoted: Vec<String> = allowed
            .iter()
            .map(|v| match v {
                Value::String(s) => format!("{s:?}"),
                other => format!("{:?}", other.to_string()),
            })
            .collect();
        self.errors.push(FieldError {
            type_: FieldErrorType::NotSupported,
            field: path.to_string(),
            value: Some(render(value)),
            detail: format!("supported values: {}", quoted.join(", ")),
        });
    }

    /// `required`, `properties` and `additionalProperties` of an object.
    fn check_members(
        &mut self,
        schema: &'a Map<String, Value>,
        map: &Map<String, Value>,
        path: &str,
        depth: usize,
    ) {
        let child = |key: &str| {
            if path.is_empty() {
                key.to_string()
            } else {
                format!("{path}.{key}")
            }
        };
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = name.as_str().filter(|n| !map.contains_key(*n)) {
                self.errors.push(FieldError::required(&child(name), ""));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties").filter(|a| a.is_object());
        for (key, member) in map {
            let member_schema = properties.and_then(|p| p.get(key)).or(additional);
            if let Some(member_schema) = member_schema {
                self.check(member_schema, member, &child(key), depth + 1);
            }
        }
    }
}

/// Whether `value` is of JSON schema type `t`. An integral number is an integer, as
/// kube-openapi takes `1.0`.
fn type_matches(t: &str, value: &Value) -> bool {
    match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "number" => value.is_number(),
        "integer" => is_integer(value),
        _ => true,
    }
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

/// The name kube-openapi gives a value's type in its messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::Number(_) if is_integer(value) => "integer",
        Value::Number(_) => "number",
    }
}

/// A value as Go's field errors print it: strings quoted, numbers and booleans bare.
fn render(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[allow(dead_code)]
    #[derive(schemars::JsonSchema, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        reference: String,
        size: Option<i32>,
        kind: Option<Kind>,
        tags: Vec<String>,
        inner: Option<Inner>,
        labels: std::collections::BTreeMap<String, String>,
    }

    #[allow(dead_code)]
    #[derive(schemars::JsonSchema, serde::Deserialize)]
    enum Kind {
        Flunder,
        Fischer,
    }

    /// With doc comments schemars writes an enum as a `oneOf` of constants.
    #[allow(dead_code)]
    #[derive(schemars::JsonSchema, serde::Deserialize)]
    enum Documented {
        /// One.
        One,
        /// Two.
        Two,
    }

    #[allow(dead_code)]
    #[derive(schemars::JsonSchema, serde::Deserialize)]
    struct Inner {
        count: u8,
        documented: Option<Documented>,
    }

    #[allow(dead_code)]
    #[derive(schemars::JsonSchema, serde::Deserialize)]
    struct Object {
        spec: Spec,
    }

    fn messages(object: Value) -> Vec<String> {
        schema_errors::<Object>(&object)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn type_mismatches_read_as_kube_openapi() {
        let got = messages(json!({"spec": {
            "reference": 5, "size": "big", "tags": ["a", true], "labels": {"a": 1},
            "inner": {"count": "x"},
        }}));
        assert_eq!(
            got,
            [
                r#"spec.inner.count: Invalid value: "string": spec.inner.count in body must be of type integer: "string""#,
                r#"spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer""#,
                r#"spec.reference: Invalid value: "integer": spec.reference in body must be of type string: "integer""#,
                r#"spec.size: Invalid value: "string": spec.size in body must be of type integer: "string""#,
                r#"spec.tags[1]: Invalid value: "boolean": spec.tags[1] in body must be of type string: "boolean""#,
            ]
        );
    }

    #[test]
    fn enums_and_required_fields() {
        let got = messages(
            json!({"spec": {"kind": "Bogus", "inner": {"count": 1, "documented": "Three"}}}),
        );
        assert_eq!(
            got,
            [
                "spec.reference: Required value",
                "spec.tags: Required value",
                "spec.labels: Required value",
                r#"spec.inner.documented: Unsupported value: "Three": supported values: "One", "Two""#,
                r#"spec.kind: Unsupported value: "Bogus": supported values: "Flunder", "Fischer""#,
            ]
        );
    }

    #[test]
    fn a_valid_object_has_no_errors() {
        let ok = json!({"spec": {"reference": "r", "size": 2.0, "kind": "Fischer", "tags": [],
            "labels": {}, "inner": null}});
        assert_eq!(messages(ok), Vec::<String>::new());
    }
}
