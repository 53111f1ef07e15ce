//! A type's JSON schema enforced on every write, as kube-apiserver enforces a CRD's
//! structural schema: value limits (`minimum`, `maxLength`, `pattern`, `enum`, `format`,
//! `maxItems`, `uniqueItems`, `maxProperties`, …) in kube-openapi's words, and
//! `x-kubernetes-validations` CEL rules in apiextensions-apiserver's
//! (`pkg/apiserver/schema/cel/validation.go`), with ratcheting on update.
//!
//! The schema (schemars', plus the type's [`Resource::VALIDATIONS`]) is compiled once per
//! type into a [`SchemaValidator`]: a tree holding only the nodes that have something to
//! check, regexes and CEL programs compiled. A type that declares no limit and no rule has
//! no validator, and its writes do no work here.
//!
//! - `compile`: the schema to the tree (and `error`: why it may not compile);
//! - `limits`: the value limits and `format`s;
//! - `rules`: the CEL rules.

mod compile;
mod error;
mod fast;
mod formats;
mod limits;
mod rules;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::runtime::{FieldError, FieldErrorType, Resource};
use extension_apiserver_machinery::cel::reads::Reads;
use limits::Limits;
use rules::{Budget, Rule};

pub use error::SchemaError;

/// The compiled value validation of one type.
///
/// ```
/// use extension_apiserver::registry::schema_validation::SchemaValidator;
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
///     "x-kubernetes-validations": [{"rule": "self.size <= 10", "message": "too big"}],
///     "properties": {"size": {"type": "integer", "minimum": 0}}}}});
/// let validator = SchemaValidator::compile(&schema).unwrap().expect("it checks something");
/// let found = validator.validate(&json!({"spec": {"size": -1}}), None);
/// let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
/// assert_eq!(errors, [
///     "spec.size: Invalid value: -1: spec.size in body should be greater than or equal to 0",
/// ]);
/// let found = validator.validate(&json!({"spec": {"size": 11}}), None);
/// assert_eq!(found.errors[0].to_string(), "spec: Invalid value: too big");
/// ```
#[derive(Debug)]
pub struct SchemaValidator {
    root: Node,
    /// Whether any node has rules (kube's CRD has a CEL validator).
    has_rules: bool,
}

/// One node of the schema with something to check at it or below.
#[derive(Debug, Default)]
struct Node {
    /// The schema's `type` (`object`, `string`, …), for the wording of rule errors.
    type_: &'static str,
    limits: Limits,
    rules: Vec<Rule>,
    /// What the rules read of the value (and of the old one).
    reads: Reads,
    properties: Vec<(String, Node)>,
    additional: Option<Box<Node>>,
    items: Option<Box<Node>>,
}

impl Node {
    fn has_rules(&self) -> bool {
        !self.rules.is_empty()
            || self.properties.iter().any(|(_, n)| n.has_rules())
            || self.additional.as_ref().is_some_and(|n| n.has_rules())
            || self.items.as_ref().is_some_and(|n| n.has_rules())
    }

    fn is_empty(&self) -> bool {
        self.limits.is_empty()
            && self.rules.is_empty()
            && self.properties.is_empty()
            && self.additional.is_none()
            && self.items.is_none()
    }
}

/// What one validation found: errors, and the warnings of rule errors ratcheted away.
#[derive(Debug, Default)]
pub struct Findings {
    /// The field errors (422 Invalid).
    pub errors: Vec<FieldError>,
    /// Errors of unchanged values, allowed by ratcheting and returned as warnings.
    pub warnings: Vec<String>,
}

impl SchemaValidator {
    /// The validator of `T`'s schema, or `None` when the schema declares nothing to check.
    /// A rule that does not compile, or whose estimated cost is over kube's limit, is an
    /// error naming the type and the rule.
    pub fn for_type<T: Resource>() -> Result<Option<Arc<Self>>, SchemaError> {
        let schema = resource_root_schema::<T>();
        Self::compile(&schema).map_err(|e| e.for_kind(T::INFO.kind))
    }

    /// The validator of a JSON schema (`$ref`s resolved within it).
    pub fn compile(schema: &Value) -> Result<Option<Arc<Self>>, SchemaError> {
        let root = compile::compile(schema)?;
        let has_rules = root.has_rules();
        Ok((!root.is_empty()).then(|| Arc::new(Self { root, has_rules })))
    }

    /// Checks `object`, and on update its `old` version: every error on a value that did
    /// not change is dropped (kube's CRDValidationRatcheting), except those of transition
    /// rules.
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> Findings {
        let mut walk = Walk {
            findings: Findings::default(),
            rule_errors: Vec::new(),
            budget: Budget::per_write(),
            stopped: false,
        };
        let unchanged = old.is_some_and(|o| o == object);
        walk.node(&self.root, object, old, unchanged, String::new());
        if self.has_rules && walk.findings.errors.iter().any(blocks_rules) {
            // kube runs no rule of an object the schema already refuses this way
            // (`hasBlockingErr` in apiextensions' customresource strategy), and says so.
            walk.findings.warnings.clear();
            walk.findings.errors.push(rules_not_checked());
        } else {
            walk.findings.errors.append(&mut walk.rule_errors);
        }
        walk.findings
    }
}

/// Whether a schema error stops the rules from running: a value of the wrong type, missing,
/// not among the supported, too long or too many.
pub(crate) fn blocks_rules(error: &FieldError) -> bool {
    matches!(
        error.type_,
        FieldErrorType::NotSupported
            | FieldErrorType::Required
            | FieldErrorType::TooLong
            | FieldErrorType::TooMany
            | FieldErrorType::TypeInvalid
    )
}

/// kube's error when rules were skipped: `<nil>: Invalid value: null: some validation rules
/// were not checked because the object was invalid; correct the existing errors to complete
/// validation`.
pub(crate) fn rules_not_checked() -> FieldError {
    FieldError {
        type_: FieldErrorType::Invalid,
        field: "<nil>".into(),
        value: Some("null".into()),
        detail: "some validation rules were not checked because the object was invalid; \
                 correct the existing errors to complete validation"
            .into(),
    }
}

/// The root schema of `T` with its type-level rules, as published and as validated.
pub fn resource_root_schema<T: Resource>() -> Value {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    let mut schema = schema.to_value();
    add_type_rules(&mut schema, T::VALIDATIONS);
    schema
}

/// Appends `rules` to the `x-kubernetes-validations` of the schema `node`.
pub(crate) fn add_type_rules(node: &mut Value, rules: &[crate::runtime::ValidationRule]) {
    if rules.is_empty() {
        return;
    }
    let Some(node) = node.as_object_mut() else {
        return;
    };
    let list = node
        .entry("x-kubernetes-validations")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = list.as_array_mut() {
        list.extend(rules.iter().map(|r| r.to_json()));
    }
}

/// One validation's walk of the tree.
struct Walk {
    findings: Findings,
    /// The rules' errors: reported after every value limit's, as kube runs the CEL
    /// validation after the schema's.
    rule_errors: Vec<FieldError>,
    budget: Budget,
    /// A rule ran out of budget: no further rules run (kube's `remainingBudget < 0`).
    stopped: bool,
}

impl Walk {
    fn node(
        &mut self,
        node: &Node,
        value: &Value,
        old: Option<&Value>,
        unchanged: bool,
        path: String,
    ) {
        if value.is_null() {
            return; // kube validates only non-null values
        }
        // kube's ratcheting drops the schema's errors of an unchanged value silently
        // (`validation/ratcheting.go`); only rules' errors become warnings.
        if !unchanged {
            node.limits.check(value, &path, &mut self.findings.errors);
        }
        if !node.rules.is_empty() && !self.stopped {
            rules::evaluate(self, node, value, old, unchanged, &path);
        }
        match value {
            Value::Object(map) => self.members(node, map, old, &path),
            Value::Array(items) => {
                if let Some(item) = &node.items {
                    // Only map-lists correlate items with old ones: here none do, so an item
                    // ratchets when its whole list is unchanged, and has no oldSelf.
                    for (i, v) in items.iter().enumerate() {
                        self.node(item, v, None, unchanged, format!("{path}[{i}]"));
                    }
                }
            }
            _ => {}
        }
    }

    fn members(&mut self, node: &Node, map: &Map<String, Value>, old: Option<&Value>, path: &str) {
        let child_path = |key: &str| {
            if path.is_empty() {
                key.to_string()
            } else {
                format!("{path}.{key}")
            }
        };
        for (key, child) in &node.properties {
            if let Some(v) = map.get(key) {
                let old_v = old.and_then(|o| o.get(key));
                self.node(child, v, old_v, old_v == Some(v), child_path(key));
            }
        }
        if let Some(additional) = &node.additional {
            for (key, v) in map {
                if node.properties.iter().any(|(k, _)| k == key) {
                    continue;
                }
                let old_v = old.and_then(|o| o.get(key));
                self.node(additional, v, old_v, old_v == Some(v), child_path(key));
            }
        }
    }
}

/// `key` under `path` (`spec` + `replicas` = `spec.replicas`).
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}
