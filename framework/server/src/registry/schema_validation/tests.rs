use serde_json::{Value, json};

use super::SchemaValidator;

fn validator(schema: Value) -> std::sync::Arc<SchemaValidator> {
    SchemaValidator::compile(&schema)
        .expect("compiles")
        .expect("has checks")
}

fn errors(schema: Value, object: Value, old: Option<Value>) -> Vec<String> {
    let found = validator(schema).validate(&object, old.as_ref());
    found.errors.iter().map(ToString::to_string).collect()
}

#[test]
fn no_limits_no_validator() {
    let schema = json!({"type": "object", "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}},
        "spec": {"type": "object", "properties": {"a": {"type": "string", "format": "date-time"},
            "kind": {"$ref": "#/$defs/Kind"}}}},
        "$defs": {"Kind": {"type": "string", "enum": ["A", "B"]}}});
    let compiled = SchemaValidator::compile(&schema).unwrap();
    assert!(compiled.is_none(), "{compiled:#?}");
}

#[test]
fn limits_read_as_kube_openapi() {
    let schema = json!({"type": "object", "properties": {"spec": {"$ref": "#/$defs/Spec"}},
        "$defs": {"Spec": {"type": "object", "properties": {
            "replicas": {"type": "integer", "minimum": 0, "maximum": 16384},
            "ratio": {"type": "number", "exclusiveMaximum": 1.5, "multipleOf": 0.5},
            "name": {"type": ["string", "null"], "maxLength": 3, "pattern": "^[a-z]+$"},
            "short": {"type": "string", "minLength": 2},
            "mode": {"type": "string", "enum": ["On", "Off"]},
            "ip": {"type": "string", "format": "ipv4"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 2},
                "maxItems": 2, "uniqueItems": true},
            "labels": {"type": "object", "additionalProperties": {"type": "string"},
                "maxProperties": 1}}}}});
    let mut got = errors(
        schema,
        json!({"spec": {"replicas": 20000, "ratio": 1.5, "name": "Abcd", "short": "x",
            "mode": "Up", "ip": "1.2.3", "tags": ["a", "a", "bcd"], "labels": {"a": "", "b": ""}}}),
        None,
    );
    got.sort();
    assert_eq!(
        got,
        [
            r#"spec.ip: Invalid value: "1.2.3": spec.ip in body must be of type ipv4: "1.2.3""#,
            "spec.labels: Too many: 2: must have at most 1 items",
            r#"spec.mode: Unsupported value: "Up": supported values: "On", "Off""#,
            r#"spec.name: Invalid value: "Abcd": spec.name in body should match '^[a-z]+$'"#,
            "spec.name: Too long: may not be more than 3 bytes",
            "spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than 1.5",
            "spec.replicas: Invalid value: 20000: spec.replicas in body should be less than or equal to 16384",
            r#"spec.short: Invalid value: "x": spec.short in body should be at least 2 chars long"#,
            r#"spec.tags: Invalid value: "": spec.tags in body shouldn't contain duplicates"#,
            "spec.tags: Too many: 3: must have at most 2 items",
            "spec.tags[2]: Too long: may not be more than 2 bytes",
        ]
    );
}

fn rule_schema(rules: Value) -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": rules,
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}}})
}

#[test]
fn rules_read_as_a_crd_s() {
    let schema = rule_schema(json!([
        {"rule": "self.a < 10"},
        {"rule": "self.b != 'x'", "message": "b must not be x", "fieldPath": ".b",
         "reason": "FieldValueForbidden"},
        {"rule": "self.a != 5", "messageExpression": "'a is ' + string(self.a)"},
    ]));
    assert_eq!(
        errors(schema.clone(), json!({"spec": {"a": 5, "b": "x"}}), None),
        [
            "spec.b: Forbidden: b must not be x",
            "spec: Invalid value: a is 5",
        ]
    );
    assert_eq!(
        errors(schema, json!({"spec": {"a": 11, "b": "y"}}), None),
        ["spec: Invalid value: failed rule: self.a < 10"]
    );
}

#[test]
fn transition_rules_need_an_old_value_unless_optional() {
    let schema = rule_schema(json!([
        {"rule": "self.a >= oldSelf.a", "message": "a may not decrease"},
        {"rule": "oldSelf.hasValue() || self.a == 1", "optionalOldSelf": true,
         "message": "a starts at 1"},
    ]));
    assert_eq!(
        errors(schema.clone(), json!({"spec": {"a": 3}}), None),
        ["spec: Invalid value: a starts at 1"]
    );
    assert_eq!(
        errors(
            schema.clone(),
            json!({"spec": {"a": 1}}),
            Some(json!({"spec": {"a": 2}}))
        ),
        ["spec: Invalid value: a may not decrease"]
    );
    assert!(
        errors(
            schema,
            json!({"spec": {"a": 3}}),
            Some(json!({"spec": {"a": 2}}))
        )
        .is_empty()
    );
}

#[test]
fn unchanged_values_ratchet() {
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self.a < 10"}],
            "properties": {"a": {"type": "integer", "maximum": 5}, "b": {"type": "string"}}}}});
    let old = json!({"spec": {"a": 20, "b": "x"}});
    // Unchanged: allowed, with warnings.
    let found =
        validator(schema.clone()).validate(&json!({"spec": {"a": 20, "b": "x"}}), Some(&old));
    assert!(found.errors.is_empty(), "{:?}", found.errors);
    assert_eq!(
        found.warnings,
        ["spec: Invalid value: failed rule: self.a < 10"]
    );
    // `b` changed, so the rule on spec runs against a changed value; `a` is unchanged.
    assert_eq!(
        errors(
            schema.clone(),
            json!({"spec": {"a": 20, "b": "y"}}),
            Some(old.clone())
        ),
        ["spec: Invalid value: failed rule: self.a < 10"]
    );
    assert_eq!(
        errors(schema, json!({"spec": {"a": 21, "b": "x"}}), Some(old)),
        [
            "spec.a: Invalid value: 21: spec.a in body should be less than or equal to 5",
            "spec: Invalid value: failed rule: self.a < 10",
        ]
    );
}

#[test]
fn bad_rules_are_refused_at_start() {
    let e = SchemaValidator::compile(&rule_schema(json!([{"rule": "self.a <"}]))).unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with("spec: x-kubernetes-validations[0].rule: compilation failed: ERROR:"),
        "{text}"
    );
    assert!(text.ends_with("(rule \"self.a <\")"), "{text}");
    let e = SchemaValidator::compile(&rule_schema(
        json!([{"rule": "self.a > 1", "optionalOldSelf": true}]),
    ))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("may not be set if oldSelf is not used in rule"),
        "{e}"
    );
    let e = SchemaValidator::compile(&rule_schema(json!([{"rule": "true", "reason": "Nope"}])))
        .unwrap_err();
    assert!(e.to_string().contains("Unsupported value: \"Nope\""), "{e}");
}
