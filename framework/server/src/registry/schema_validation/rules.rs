//! `x-kubernetes-validations` rules, compiled at start and evaluated as
//! apiextensions-apiserver's `schema/cel/validation.go` does: `self` is the value, `oldSelf`
//! the old one; a transition rule (one naming `oldSelf`) runs only on update with an old
//! value, unless `optionalOldSelf`; a false rule is a field error worded by its `message`,
//! `messageExpression` or `failed rule: <rule>`, of its `reason`, at its `fieldPath`; an
//! error of an unchanged value is ratcheted into a warning, except a transition rule's.

use std::cell::OnceCell;
use std::sync::{Arc, OnceLock};

use cel::objects::OptionalValue;
use extension_apiserver_machinery::cel::convert::string_map;
use extension_apiserver_machinery::cel::cost::{self, Sizes};
use extension_apiserver_machinery::cel::reads::{Reads, from_json_read};
use extension_apiserver_machinery::cel::{
    self as kcel, Activation, Environment, EvalError, Expression, Value as CelValue,
};
use serde_json::Value;

use super::error::SchemaError;
use super::fast::{Fast, seen_in_metadata};
use super::limits::render;
use super::{Node, Walk, join};
use crate::runtime::{FieldError, FieldErrorType};

/// Estimated cost limit of all rules of one type (kube's `StaticEstimatedCRDCostLimit`).
pub(super) const TOTAL_COST_LIMIT: u64 = kcel::STATIC_ESTIMATED_TOTAL_COST_LIMIT;

/// Longest message a `messageExpression` may give (`MaxEvaluatedMessageExpressionSizeBytes`).
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

const ADVICE: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";

/// The budget of one write's rules (kube's `RuntimeCELCostBudget`, `PerCallLimit`).
pub(super) struct Budget(cost::Budget);

impl Budget {
    pub(super) fn per_write() -> Self {
        Self(cost::Budget::new(
            kcel::PER_CALL_LIMIT,
            kcel::RUNTIME_COST_BUDGET,
        ))
    }
}

/// One compiled rule.
#[derive(Debug)]
pub(super) struct Rule {
    source: String,
    program: Expression,
    message: String,
    message_expression: Option<Expression>,
    reason: FieldErrorType,
    /// The `fieldPath`, as a field path relative to the value (`spec.reference`).
    field_path: String,
    optional_old_self: bool,
    uses_old_self: bool,
    estimated_cost: u64,
    /// What the rule and its message read of `self` and `oldSelf`.
    reads: Reads,
    /// The rule, when it is simple enough to be decided on the JSON (see [`Fast`]), with
    /// what each evaluation costs.
    fast: Option<(Fast, u64)>,
}

/// `self` and `oldSelf`, with kube's libraries.
fn environment() -> &'static Environment {
    static ENV: OnceLock<Environment> = OnceLock::new();
    ENV.get_or_init(|| Environment::new(&["self", "oldSelf"]))
}

impl Rule {
    /// Compiles the `index`th rule of the schema at `path`; `sizes` bound its estimated cost.
    pub(super) fn compile(
        rule: &Value,
        index: usize,
        path: &str,
        sizes: &dyn Sizes,
    ) -> Result<Self, SchemaError> {
        let at = format!("x-kubernetes-validations[{index}]");
        let text = |key: &str| rule.get(key).and_then(Value::as_str).unwrap_or_default();
        let source = text("rule");
        let error = |field: &str, message: String| {
            SchemaError::new(path, format!("{at}.{field}: {message} (rule {source:?})"))
        };
        if source.trim().is_empty() {
            return Err(error("rule", "Required value".into()));
        }
        let program = environment()
            .compile(source)
            .map_err(|e| error("rule", format!("compilation failed: {}", e.message())))?;
        let uses_old_self =
            cel::Program::compile(source).is_ok_and(|p| p.references().has_variable("oldSelf"));
        let optional_old_self = rule.get("optionalOldSelf").and_then(Value::as_bool) == Some(true);
        if optional_old_self && !uses_old_self {
            return Err(error(
                "optionalOldSelf",
                "may not be set if oldSelf is not used in rule".into(),
            ));
        }
        let message_expression = match text("messageExpression") {
            "" => None,
            m => Some(environment().compile(m).map_err(|e| {
                error(
                    "messageExpression",
                    format!("messageExpression compilation failed: {}", e.message()),
                )
            })?),
        };
        let reason = match text("reason") {
            "" | "FieldValueInvalid" => FieldErrorType::Invalid,
            "FieldValueForbidden" => FieldErrorType::Forbidden,
            "FieldValueRequired" => FieldErrorType::Required,
            "FieldValueDuplicate" => FieldErrorType::Duplicate,
            other => {
                return Err(error(
                    "reason",
                    format!(
                        "Unsupported value: {other:?}: supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
                    ),
                ));
            }
        };
        let field_path =
            normalize_field_path(text("fieldPath")).map_err(|m| error("fieldPath", m))?;
        let estimated_cost = program.estimated_cost(sizes).max;
        if estimated_cost > kcel::STATIC_ESTIMATED_COST_LIMIT {
            return Err(error(
                "rule",
                format!(
                    "Forbidden: estimated rule cost exceeds budget by factor of {} {ADVICE}",
                    factor(estimated_cost, kcel::STATIC_ESTIMATED_COST_LIMIT)
                ),
            ));
        }
        let mut reads = Reads::Nothing;
        for expression in std::iter::once(&program).chain(&message_expression) {
            reads.merge(Reads::of(expression, "self"));
            reads.merge(Reads::of(expression, "oldSelf"));
        }
        let fast = match (uses_old_self, program.constant_cost()) {
            (false, Some(cost)) => Fast::of(program.ided()).map(|fast| (fast, cost)),
            _ => None,
        };
        Ok(Self {
            reads,
            fast,
            source: source.to_string(),
            program,
            message: text("message").trim().to_string(),
            message_expression,
            reason,
            field_path,
            optional_old_self,
            uses_old_self,
            estimated_cost,
        })
    }

    pub(super) fn estimated_cost(&self) -> u64 {
        self.estimated_cost
    }

    /// What the rule reads of `self` and `oldSelf`.
    pub(super) fn reads(&self) -> &Reads {
        &self.reads
    }

    /// kube's `ruleErrorString`: the message, else the rule.
    fn error_string(&self) -> &str {
        if self.message.is_empty() {
            self.source.trim()
        } else {
            &self.message
        }
    }

    /// kube's `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.source.trim())
        } else {
            self.message.clone()
        }
    }
}

/// kube's words when the rules of a type together cost too much.
pub(super) fn total_cost_message(total: u64) -> String {
    format!(
        "Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of {} {ADVICE}",
        factor(total, TOTAL_COST_LIMIT)
    )
}

fn factor(cost: u64, limit: u64) -> String {
    format!("{:.6}x", cost as f64 / limit as f64)
        .trim_end_matches('0')
        .replace(".x", "x")
}

/// `.spec.reference`, `.spec['a.b']` → `spec.reference`, `spec.a.b`.
fn normalize_field_path(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Ok(String::new());
    }
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").ok_or("unexpected end of JSON path")?;
            out.push(r[..end].to_string());
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err("Invalid value: does not refer to a valid field".into());
            }
            out.push(r[..end].to_string());
            rest = &r[end..];
        } else {
            return Err(format!("expected [ or . but got: {rest}"));
        }
    }
    Ok(out.join("."))
}

/// `value` as the rules of a node see it: of what they read (`reads`), converted to CEL
/// once for all of them, and only that. At the resource's root kube keeps of `metadata`
/// only `name` and `generateName` (apiextensions-apiserver's `WithTypeAndObjectMeta`,
/// `pkg/apiserver/schema/cel/model/schemas.go`): the rest (labels, managedFields) is no
/// rule's to read, so it is not converted for one either.
fn cel_view(value: &Value, reads: &Reads, root: bool) -> CelValue {
    let Some(map) = value.as_object().filter(|_| root) else {
        return from_json_read(value, reads);
    };
    let members = map.iter().filter_map(|(key, value)| {
        let reads = reads.field(key)?;
        let value = match (key.as_str(), value) {
            ("metadata", Value::Object(meta)) => {
                string_map(meta.iter().filter_map(|(key, value)| {
                    let reads = reads.field(key)?;
                    seen_in_metadata(key).then(|| (key.clone(), from_json_read(value, reads)))
                }))
            }
            _ => from_json_read(value, reads),
        };
        Some((key.clone(), value))
    });
    string_map(members)
}

/// Runs the rules of `node` on `value` (and `old`), adding what fails to `walk`.
pub(super) fn evaluate(
    walk: &mut Walk,
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    unchanged: bool,
    path: &str,
) {
    let root = path.is_empty();
    // One activation for the node's rules, so that each value is converted for cel-rust
    // once (a rule with an optional `oldSelf` gets a copy binding it as an optional, which
    // shares the converted `self`); made only when a rule is not decided on the JSON.
    let previous = OnceCell::new();
    let previous = || previous.get_or_init(|| old.map(|old| cel_view(old, &node.reads, root)));
    let activation = OnceCell::new();
    let activation = || {
        activation.get_or_init(|| {
            let mut activation = Activation::new().with("self", cel_view(value, &node.reads, root));
            if let Some(previous) = previous() {
                activation.set("oldSelf", previous.clone());
            }
            activation
        })
    };
    for rule in &node.rules {
        if rule.uses_old_self && old.is_none() && !rule.optional_old_self {
            continue; // a transition rule needs an old value
        }
        let type_ = node.type_;
        let invalid = |detail: String| FieldError {
            type_: FieldErrorType::Invalid,
            field: path.to_string(),
            value: Some(format!("{type_:?}")),
            detail,
        };
        let outcome = match &rule.fast {
            Some((fast, cost)) => match fast.decide(value, root) {
                Some(answer) => walk.budget.0.charge(*cost).map(|()| CelValue::Bool(answer)),
                None => rule.program.evaluate(activation(), &mut walk.budget.0),
            },
            None if rule.optional_old_self => {
                let optional = match previous() {
                    Some(p) => OptionalValue::of(p.clone()),
                    None => OptionalValue::none(),
                };
                let mut with_optional = activation().clone();
                with_optional.set("oldSelf", CelValue::Opaque(Arc::new(optional)));
                rule.program.evaluate(&with_optional, &mut walk.budget.0)
            }
            None => rule.program.evaluate(activation(), &mut walk.budget.0),
        };
        match outcome {
            Ok(CelValue::Bool(true)) => continue,
            Ok(CelValue::Bool(false)) => {}
            Ok(other) => {
                let m = format!("no such overload: rule gave {:?}", other.type_of());
                walk.rule_errors.push(invalid(format!(
                    "'{m}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                    rule.error_string()
                )));
                continue;
            }
            Err(EvalError::CostExceeded) => {
                walk.rule_errors.push(invalid(format!(
                    "'{}': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                    EvalError::CostExceeded,
                    rule.error_string()
                )));
                walk.stopped = true;
                return;
            }
            Err(EvalError::Runtime(m)) if m.starts_with("no such overload") => {
                walk.rule_errors.push(invalid(format!(
                    "'{m}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                    rule.error_string()
                )));
                continue;
            }
            Err(EvalError::Runtime(m)) => {
                walk.rule_errors.push(invalid(format!(
                    "{m} evaluating rule: {}",
                    rule.error_string()
                )));
                continue;
            }
        }
        let field = match rule.field_path.as_str() {
            "" => path.to_string(),
            child => join(path, child),
        };
        let detail = match &rule.message_expression {
            Some(expression) => match message(expression, activation(), &mut walk.budget) {
                Ok(Some(m)) => m,
                Ok(None) => rule.message_or_default(),
                Err(m) => {
                    walk.rule_errors.push(FieldError {
                        field,
                        ..invalid(m)
                    });
                    walk.stopped = true;
                    return;
                }
            },
            None => rule.message_or_default(),
        };
        let error = error_for_reason(rule.reason, field, value, type_, detail);
        if !rule.uses_old_self && unchanged {
            walk.findings.warnings.push(error.to_string());
        } else {
            walk.rule_errors.push(error);
        }
    }
}

/// kube's `evalMessageExpression`: the message, `None` when the expression fails in a way
/// that falls back to the rule's message, an error when the budget ran out.
fn message(
    expression: &Expression,
    activation: &Activation,
    budget: &mut Budget,
) -> Result<Option<String>, String> {
    match expression.evaluate(activation, &mut budget.0) {
        Ok(CelValue::String(s)) => {
            let ok = !s.trim().is_empty() && s.len() <= MAX_MESSAGE_BYTES && !s.contains(['\n', '\r']);
            Ok(ok.then(|| s.to_string()))
        }
        Ok(_) | Err(EvalError::Runtime(_)) => Ok(None),
        Err(EvalError::CostExceeded) => Err(
            "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run"
                .into(),
        ),
    }
}

/// kube's `fieldErrorForReason`; the value of an object or array is left out.
fn error_for_reason(
    reason: FieldErrorType,
    field: String,
    value: &Value,
    type_: &str,
    detail: String,
) -> FieldError {
    let shown = (type_ != "object" && type_ != "array" && !value.is_object() && !value.is_array())
        .then(|| render(value));
    match reason {
        FieldErrorType::Forbidden | FieldErrorType::Required => FieldError {
            type_: reason,
            field,
            value: None,
            detail,
        },
        FieldErrorType::Duplicate => FieldError {
            type_: reason,
            field,
            value: shown,
            detail: String::new(),
        },
        _ => FieldError {
            type_: FieldErrorType::Invalid,
            field,
            value: shown,
            detail,
        },
    }
}

#[cfg(test)]
mod fast_tests {
    use cel::Value as Cel;
    use extension_apiserver_machinery::cel::cost::Unbounded;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// Rules the fast path takes (each is checked to be taken): wardle's two, and others
    /// of the shape. (A comparison with a literal other than `''` costs by the sizes of the
    /// values, so cel-rust keeps those.)
    const RULES: &[&str] = &[
        "!has(self.spec.referenceType) || (has(self.spec.reference) && self.spec.reference != '')",
        "!has(self.spec.reference) || self.spec.reference == '' || has(self.spec.referenceType)",
        "has(self.a)",
        "!has(self.a.b)",
        "self.a != ''",
        "self.a == ''",
        "!self.b",
        "!self.b || self.c == ''",
        "has(self.spec) && !has(self.spec.reference)",
        "!has(self.x.y) || self.x.y != ''",
        "has(self.metadata.labels)",
        "has(self.metadata.name) && self.metadata.name != ''",
        "self.metadata.generateName == '' || has(self.metadata.labels)",
        "!(self.b && self.n != '')",
    ];

    fn rule(source: &str) -> Rule {
        Rule::compile(&json!({"rule": source}), 0, "", &Unbounded).unwrap()
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!("")),
            Just(json!("x")),
            Just(json!("q")),
            Just(json!("g-")),
            Just(json!(true)),
            Just(json!(false)),
            Just(json!(3)),
            Just(json!(-1)),
            Just(json!(1)),
            Just(json!(1.5)),
            Just(json!(3.0)),
            Just(json!(u64::MAX)),
            Just(json!(null)),
            Just(json!(["x"])),
            Just(json!({"y": "q"})),
            Just(json!({"b": 1})),
        ]
    }

    /// An object with some of the fields the rules read, each any leaf.
    fn object() -> impl Strategy<Value = Value> {
        const NAMES: &[&str] = &[
            "a",
            "b",
            "c",
            "n",
            "x",
            "y",
            "spec",
            "metadata",
            "name",
            "reference",
            "referenceType",
            "labels",
            "generateName",
        ];
        let field = (proptest::sample::select(NAMES), leaf());
        let inner = proptest::collection::vec(field, 0..5).prop_map(|fields| {
            Value::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            )
        });
        let member = prop_oneof![leaf(), inner];
        proptest::collection::vec((proptest::sample::select(NAMES), member), 0..7).prop_map(
            |fields| {
                Value::Object(
                    fields
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                )
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Where the fast path decides, cel-rust on `cel_view`'s value says the same.
        #[test]
        fn decides_as_cel_rust(value in object(), root in any::<bool>(), index in 0..RULES.len()) {
            let rule = rule(RULES[index]);
            let (fast, cost) = rule.fast.as_ref().expect("a fast rule");
            let Some(answer) = fast.decide(&value, root) else {
                return Ok(());
            };
            let activation = Activation::new().with("self", cel_view(&value, &rule.reads, root));
            let mut budget = cost::Budget::new(u64::MAX, u64::MAX);
            let slow = rule.program.evaluate(&activation, &mut budget);
            prop_assert!(matches!(slow, Ok(Cel::Bool(b)) if b == answer), "{} on {value} (root {root}): fast {answer}, cel-rust {slow:?}", RULES[index]);
            prop_assert_eq!(u64::MAX - budget.remaining(), *cost);
        }
    }

    /// The rules the fast path takes, and that it decides the common cases.
    #[test]
    fn takes_wardles_rules() {
        let flunder = json!({"metadata": {"name": "f"}, "spec": {"reference": "r", "referenceType": "Flunder"}});
        for source in &RULES[..2] {
            let rule = rule(source);
            let (fast, _) = rule.fast.as_ref().expect("a fast rule");
            assert_eq!(fast.decide(&flunder, true), Some(true), "{source}");
        }
        let missing = json!({"spec": {"referenceType": "Flunder"}});
        let (fast, _) = rule(RULES[0]).fast.expect("a fast rule");
        assert_eq!(fast.decide(&missing, true), Some(false));
        // A field of metadata a rule does not see at the root, and does elsewhere.
        let labelled = json!({"metadata": {"labels": "x"}});
        let (fast, _) = rule("has(self.metadata.labels)").fast.expect("a fast rule");
        assert_eq!(fast.decide(&labelled, true), Some(false));
        assert_eq!(fast.decide(&labelled, false), Some(true));
        // Outside the shape: transition rules, functions, costs that depend on the values.
        assert!(rule("self.a == oldSelf.a").fast.is_none());
        assert!(rule("size(self.a) > 1").fast.is_none());
        assert!(rule("self.a == 'x'").fast.is_none());
    }
}
