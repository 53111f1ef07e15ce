//! Converts JSON Schema 2020-12 (what schemars and k8s-openapi produce) to the schema dialect
//! of Swagger 2.0 or OpenAPI 3.0, the way kube-openapi publishes Kubernetes types.
//!
//! Runs once per document at start. References arrive already renamed to the final definition
//! names, in the neutral form `#/$defs/{name}`; only their prefix changes here.

use serde_json::{Map, Value, json};

/// The neutral reference prefix used between collection and conversion.
pub(crate) const NEUTRAL_PREFIX: &str = "#/$defs/";

/// The OpenAPI version a schema is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Swagger 2.0 (`/openapi/v2`): no `oneOf`/`anyOf`/`not`, references to `#/definitions/`.
    Swagger2,
    /// OpenAPI 3.0 (`/openapi/v3/...`): references to `#/components/schemas/`, no siblings.
    OpenApi3,
}

impl Dialect {
    /// `{"$ref": ...}` to the definition `name`.
    pub(crate) fn reference(self, name: &str) -> Value {
        // Bodies of no definition: a stream's text, an action's body of any JSON.
        if let Some(type_) = inline_type(name) {
            return json!({ "type": type_ });
        }
        let prefix = match self {
            Dialect::Swagger2 => "#/definitions/",
            Dialect::OpenApi3 => "#/components/schemas/",
        };
        json!({ "$ref": format!("{prefix}{name}") })
    }

    fn keeps(self, keyword: &str) -> bool {
        const COMMON: [&str; 25] = [
            "$ref",
            "type",
            "format",
            "description",
            "default",
            "enum",
            "multipleOf",
            "maximum",
            "exclusiveMaximum",
            "minimum",
            "exclusiveMinimum",
            "maxLength",
            "minLength",
            "pattern",
            "maxItems",
            "minItems",
            "uniqueItems",
            "maxProperties",
            "minProperties",
            "required",
            "properties",
            "additionalProperties",
            "items",
            "allOf",
            "readOnly",
        ];
        const OPENAPI3_ONLY: [&str; 6] = [
            "anyOf",
            "oneOf",
            "not",
            "nullable",
            "deprecated",
            "writeOnly",
        ];
        keyword.starts_with("x-")
            || keyword == "example"
            || COMMON.contains(&keyword)
            || (self == Dialect::OpenApi3 && OPENAPI3_ONLY.contains(&keyword))
    }
}

/// Converts one schema (a definition or an inline subschema) to `dialect`.
pub(crate) fn convert(schema: Value, dialect: Dialect) -> Value {
    match schema {
        Value::Object(map) => Value::Object(convert_object(map, dialect)),
        // `true` (anything) has no boolean form outside `additionalProperties`; `false` only
        // appears for impossible values (e.g. after tuple items), which `{}` does not forbid
        // but no Kubernetes client relies on.
        _ => json!({}),
    }
}

fn convert_object(mut map: Map<String, Value>, dialect: Dialect) -> Map<String, Value> {
    rewrite_keywords(&mut map);
    collapse_nullable(&mut map);
    collapse_enum_union(&mut map);
    map.retain(|key, _| dialect.keeps(key));
    convert_children(&mut map, dialect);
    rewrite_ref(&mut map, dialect);
    map
}

/// 2020-12 spellings that have a 2.0/3.0 equivalent.
fn rewrite_keywords(map: &mut Map<String, Value>) {
    if let Some(title) = map.remove("title") {
        // Kubernetes schemas have no titles; keep the text where `kubectl explain` shows it.
        let text = match map.get("description").and_then(Value::as_str) {
            Some(description) => format!("{}\n\n{description}", title.as_str().unwrap_or_default()),
            None => title.as_str().unwrap_or_default().to_string(),
        };
        map.insert("description".into(), text.into());
    }
    if let Some(value) = map.remove("const") {
        map.insert("enum".into(), json!([value]));
    }
    if let Some(Value::Array(mut examples)) = map.remove("examples") {
        if !examples.is_empty() {
            map.insert("example".into(), examples.swap_remove(0));
        }
    }
    for (exclusive, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if let Some(limit) = map.get(exclusive).filter(|v| v.is_number()).cloned() {
            map.insert(bound.into(), limit);
            map.insert(exclusive.into(), true.into());
        }
    }
    if map.contains_key("prefixItems") && !map.contains_key("items") {
        map.insert("items".into(), json!({}));
    }
    if let Some(format) = map
        .get("format")
        .and_then(Value::as_str)
        .and_then(kube_format)
    {
        map.insert("format".into(), format.into());
    }
}

/// schemars names every Rust integer width; Kubernetes knows `int32` and `int64`.
fn kube_format(format: &str) -> Option<&'static str> {
    match format {
        "int8" | "int16" | "uint8" | "uint16" => Some("int32"),
        "uint32" | "uint64" | "uint" | "int" => Some("int64"),
        _ => None,
    }
}

/// `Option<T>` comes out as `type: [T, "null"]` or `anyOf: [T, {type: null}]`. Kubernetes
/// expresses optional fields by leaving them out of `required`, so the null part is dropped.
fn collapse_nullable(map: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        match types.len() {
            1 => {
                let single = types.remove(0);
                map.insert("type".into(), single);
            }
            // Neither dialect has type unions.
            _ => {
                map.remove("type");
            }
        }
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = map.get_mut(key) else {
            continue;
        };
        branches.retain(|branch| !is_null_schema(branch));
        if branches.len() == 1 {
            let Some(Value::Object(only)) =
                map.remove(key).and_then(|b| b.as_array()?.first().cloned())
            else {
                continue;
            };
            // The property's own description wins over the referenced type's.
            for (k, v) in only {
                map.entry(k).or_insert(v);
            }
        }
    }
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type").is_some_and(|t| t == "null")
        || schema.get("const").is_some_and(Value::is_null)
        || schema.get("enum").is_some_and(|e| e == &json!([null]))
}

/// An enum with documented variants comes out as `oneOf: [{const, description}, ...]`; like
/// Kubernetes `+enum` types it becomes `enum` with the variants listed in the description.
fn collapse_enum_union(map: &mut Map<String, Value>) {
    let Some(branches) = map
        .get("oneOf")
        .or_else(|| map.get("anyOf"))
        .and_then(Value::as_array)
    else {
        return;
    };
    let Some(variants) = branches.iter().map(enum_branch).collect::<Option<Vec<_>>>() else {
        return;
    };
    let mut values = Vec::new();
    let mut lines = Vec::new();
    let mut types: Vec<&Value> = Vec::new();
    for (branch_values, doc, type_) in &variants {
        values.extend(branch_values.iter().cloned());
        types.extend(type_);
        if let (Some(doc), [value]) = (doc, branch_values.as_slice()) {
            lines.push(format!(" - `{value}` {doc}"));
        }
    }
    let single_type = types
        .first()
        .filter(|first| types.iter().all(|t| t == *first))
        .cloned()
        .cloned();
    map.remove("oneOf");
    map.remove("anyOf");
    map.insert("enum".into(), values.into());
    if let Some(type_) = single_type {
        map.entry("type").or_insert(type_);
    }
    if !lines.is_empty() {
        append_description(map, &format!("Possible enum values:\n{}", lines.join("\n")));
    }
}

type EnumBranch<'a> = (Vec<Value>, Option<&'a str>, Option<&'a Value>);

fn enum_branch(branch: &Value) -> Option<EnumBranch<'_>> {
    let map = branch.as_object()?;
    let allowed = ["const", "enum", "type", "description", "title"];
    if !map.keys().all(|k| allowed.contains(&k.as_str())) {
        return None;
    }
    let values = match (map.get("const"), map.get("enum")) {
        (Some(value), _) => vec![value.clone()],
        (None, Some(Value::Array(values))) => values.clone(),
        _ => return None,
    };
    let doc = map
        .get("description")
        .or_else(|| map.get("title"))
        .and_then(Value::as_str);
    Some((values, doc, map.get("type")))
}

fn append_description(map: &mut Map<String, Value>, text: &str) {
    let description = match map.get("description").and_then(Value::as_str) {
        Some(existing) => format!("{existing}\n\n{text}"),
        None => text.to_string(),
    };
    map.insert("description".into(), description.into());
}

fn convert_children(map: &mut Map<String, Value>, dialect: Dialect) {
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        for value in properties.values_mut() {
            *value = convert(value.take(), dialect);
        }
    }
    for key in ["items", "not"] {
        if let Some(value) = map.get_mut(key) {
            *value = convert(value.take(), dialect);
        }
    }
    if let Some(value) = map
        .get_mut("additionalProperties")
        .filter(|v| v.is_object())
    {
        *value = convert(value.take(), dialect);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = map.get_mut(key) {
            for branch in branches.iter_mut() {
                *branch = convert(branch.take(), dialect);
            }
        }
    }
}

/// Points a neutral reference at the dialect's definitions. OpenAPI 3.0 ignores siblings of
/// `$ref`, so, like kube-openapi, a reference with a description is wrapped in `allOf`.
fn rewrite_ref(map: &mut Map<String, Value>, dialect: Dialect) {
    let Some(name) = map
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix(NEUTRAL_PREFIX))
    else {
        return;
    };
    let reference = dialect.reference(name);
    map.remove("$ref");
    if dialect == Dialect::OpenApi3 && !map.is_empty() {
        map.insert("allOf".into(), json!([reference]));
    } else if let Value::Object(reference) = reference {
        map.extend(reference);
    }
}

/// The names that stand for an inline schema of that type, not a definition.
pub(crate) fn inline_type(name: &str) -> Option<&'static str> {
    match name {
        "string" => Some("string"),
        "object" => Some("object"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(schema: Value) -> (Value, Value) {
        (
            convert(schema.clone(), Dialect::Swagger2),
            convert(schema, Dialect::OpenApi3),
        )
    }

    #[test]
    fn nullable_type_arrays_collapse() {
        let (v2, v3) = both(json!({"type": ["string", "null"], "description": "d"}));
        assert_eq!(v2, json!({"type": "string", "description": "d"}));
        assert_eq!(v3, v2);
    }

    #[test]
    fn nullable_reference_keeps_the_property_description() {
        let schema = json!({
            "description": "the spec",
            "anyOf": [{"$ref": "#/$defs/a.B"}, {"type": "null"}],
        });
        let (v2, v3) = both(schema);
        assert_eq!(
            v2,
            json!({"$ref": "#/definitions/a.B", "description": "the spec"})
        );
        assert_eq!(
            v3,
            json!({"allOf": [{"$ref": "#/components/schemas/a.B"}], "description": "the spec"})
        );
    }

    #[test]
    fn documented_enum_variants_become_an_enum() {
        let schema = json!({
            "description": "Kind of thing.",
            "oneOf": [
                {"type": "string", "const": "A", "description": "The first."},
                {"type": "string", "const": "B", "description": "The second."},
            ],
        });
        let (v2, v3) = both(schema);
        assert_eq!(v2["enum"], json!(["A", "B"]));
        assert_eq!(v2["type"], "string");
        assert_eq!(
            v2["description"],
            "Kind of thing.\n\nPossible enum values:\n - `\"A\"` The first.\n - `\"B\"` The second."
        );
        assert!(v2.get("oneOf").is_none());
        assert_eq!(v3, v2);
    }

    #[test]
    fn swagger2_drops_what_it_cannot_say() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Thing",
            "oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                      {"type": "object", "properties": {"b": {"type": "string"}}}],
            "const": 3,
            "examples": [1, 2],
            "exclusiveMinimum": 0,
            "format": "uint32",
            "unevaluatedProperties": false,
        });
        let (v2, v3) = both(schema);
        assert_eq!(
            v2,
            json!({"description": "Thing", "enum": [3], "example": 1, "minimum": 0,
                   "exclusiveMinimum": true, "format": "int64"})
        );
        assert_eq!(v3["oneOf"].as_array().unwrap().len(), 2);
        assert!(v3.get("$schema").is_none());
    }

    #[test]
    fn converts_nested_schemas() {
        let schema = json!({
            "type": "object",
            "properties": {
                "list": {"type": "array", "items": {"$ref": "#/$defs/x.Y"}},
                "map": {"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
                "any": true,
            },
            "additionalProperties": false,
        });
        let (v2, _) = both(schema);
        assert_eq!(
            v2["properties"]["list"]["items"],
            json!({"$ref": "#/definitions/x.Y"})
        );
        assert_eq!(
            v2["properties"]["map"]["additionalProperties"],
            json!({"type": "integer"})
        );
        assert_eq!(v2["properties"]["any"], json!({}));
        assert_eq!(v2["additionalProperties"], json!(false));
    }
}
