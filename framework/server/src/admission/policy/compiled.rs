//! A `ValidatingAdmissionPolicy` compiled once per generation, and its evaluation for one
//! request, binding and param: kube's `validating/validator.go`.

use extension_apiserver_machinery::cel::cost::Budget;
use extension_apiserver_machinery::cel::{Activation, Value};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;

use super::dispatch::{BaseSpec, PolicyBase};
use crate::admission::cel::{Compiled, Matched, OUT_OF_BUDGET};

/// kube's `MaxEvaluatedMessageExpressionSizeBytes`.
const MAX_MESSAGE_LENGTH: usize = 5 * 1024;

/// One of `validations`.
#[derive(Debug)]
pub(crate) struct Validation {
    pub(crate) expression: Compiled,
    pub(crate) message: Option<String>,
    pub(crate) message_expression: Option<Compiled>,
    pub(crate) reason: Option<String>,
}

impl std::ops::Deref for CompiledPolicy {
    type Target = PolicyBase;
    fn deref(&self) -> &PolicyBase {
        &self.base
    }
}

/// A policy, ready to match and evaluate.
#[derive(Debug)]
pub(crate) struct CompiledPolicy {
    pub(crate) base: PolicyBase,
    pub(crate) validations: Vec<Validation>,
    pub(crate) audit_annotations: Vec<(String, Compiled)>,
}

impl CompiledPolicy {
    pub(crate) fn compile(policy: &ValidatingAdmissionPolicy) -> Self {
        let spec = policy.spec.clone().unwrap_or_default();
        let validations = spec
            .validations
            .iter()
            .flatten()
            .map(|v| Validation {
                expression: Compiled::new(&v.expression),
                message: v.message.clone(),
                message_expression: v.message_expression.as_deref().map(Compiled::new),
                reason: v.reason.clone(),
            })
            .collect();
        Self {
            base: PolicyBase::compile(
                &policy.metadata,
                BaseSpec {
                    failure_policy: spec.failure_policy.as_deref(),
                    match_constraints: spec.match_constraints.as_ref(),
                    param_kind: spec.param_kind.as_ref(),
                    match_conditions: spec.match_conditions.as_deref(),
                    variables: spec.variables.as_deref(),
                },
            ),
            validations,
            audit_annotations: spec
                .audit_annotations
                .iter()
                .flatten()
                .map(|a| (a.key.clone(), Compiled::new(&a.value_expression)))
                .collect(),
        }
    }

    /// The sources that may read `variables`: everything but the match conditions.
    fn readers(&self) -> impl Iterator<Item = &str> + Clone {
        let validations = self.validations.iter().flat_map(|v| {
            std::iter::once(v.expression.source.as_str())
                .chain(v.message_expression.as_ref().map(|m| m.source.as_str()))
        });
        let audit = self
            .audit_annotations
            .iter()
            .map(|(_, a)| a.source.as_str());
        validations.chain(audit)
    }
}

/// A failed validation (or a failure subject to `failurePolicy: Fail`).
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// The index of the validation, for the audit annotation.
    pub(crate) index: usize,
    pub(crate) message: String,
    /// Empty: `Invalid`.
    pub(crate) reason: String,
}

/// What one evaluation found.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Failures subject to the binding's `validationActions`.
    pub(crate) failures: Vec<Failure>,
    /// Failures that deny whatever the actions (an `auditAnnotations` error under `Fail`).
    pub(crate) errors: Vec<String>,
    /// `auditAnnotations` values, by key.
    pub(crate) audit: Vec<(String, String)>,
}

impl CompiledPolicy {
    /// kube's `validator.Validate` for one param (`activation` has `params` bound).
    pub(crate) fn validate(&self, activation: &Activation, budget: &mut Budget) -> Outcome {
        let mut outcome = Outcome::default();
        match self.match_conditions.evaluate(activation, budget) {
            Matched::Yes => {}
            Matched::No(_) => return outcome,
            Matched::Error(message) => {
                if self.fail_closed {
                    outcome.failures.push(Failure {
                        index: 0,
                        message,
                        reason: String::new(),
                    });
                }
                return outcome;
            }
        }
        let bound = self.variables.bind(activation, self.readers(), budget);
        let evaluate = |compiled: &Compiled, budget: &mut Budget| bound.evaluate(compiled, budget);
        for (index, validation) in self.validations.iter().enumerate() {
            let verdict = match evaluate(&validation.expression, budget) {
                Ok(Value::Bool(b)) => Ok(b),
                Ok(other) => Err(format!(
                    "expression '{}' resulted in error: must evaluate to bool but got {:?}",
                    validation.expression.source,
                    other.type_of()
                )),
                Err(e) => Err(e),
            };
            match verdict {
                // kube's validator: the one decision of this evaluation, by failurePolicy.
                Err(message) if message == OUT_OF_BUDGET => {
                    outcome.failures.clear();
                    if self.fail_closed {
                        outcome.failures.push(Failure {
                            index,
                            message,
                            reason: String::new(),
                        });
                    }
                    return outcome;
                }
                Ok(true) => {}
                Ok(false) => {
                    let message = self.message(validation, &evaluate, budget);
                    let reason = validation.reason.clone().unwrap_or_default();
                    outcome.failures.push(Failure {
                        index,
                        message,
                        reason,
                    });
                }
                Err(message) if self.fail_closed => outcome.failures.push(Failure {
                    index,
                    message,
                    reason: String::new(),
                }),
                Err(_) => {}
            }
        }
        for (key, compiled) in &self.audit_annotations {
            match evaluate(compiled, budget) {
                Ok(Value::String(value)) => {
                    let mut value = value.to_string();
                    truncate(&mut value, 10 * 1024);
                    outcome.audit.push((key.clone(), value));
                }
                Ok(Value::Null) => {}
                Ok(other) => {
                    if self.fail_closed {
                        outcome.errors.push(format!(
                            "valueExpression '{}' resulted in unsupported return type: {:?}. Return type must be either string or null.",
                            compiled.source,
                            other.type_of()
                        ));
                    }
                }
                Err(e) if self.fail_closed => outcome.errors.push(e),
                Err(_) => {}
            }
        }
        outcome
    }

    /// The message of a failed validation: its `messageExpression`'s string when that is a
    /// usable one, else `message`, else `failed expression: …` (kube's order).
    fn message(
        &self,
        validation: &Validation,
        evaluate: &dyn Fn(&Compiled, &mut Budget) -> Result<Value, String>,
        budget: &mut Budget,
    ) -> String {
        let evaluated =
            validation
                .message_expression
                .as_ref()
                .and_then(|m| match evaluate(m, budget) {
                    Ok(Value::String(s)) => {
                        let s = s.trim().to_string();
                        let usable =
                            !s.is_empty() && !s.contains('\n') && s.len() <= MAX_MESSAGE_LENGTH;
                        usable.then_some(s)
                    }
                    Ok(_) => None,
                    Err(e) => {
                        tracing::warn!(policy = %self.name, "failed messageExpression: {e}");
                        None
                    }
                });
        if let Some(message) = evaluated {
            return message;
        }
        match validation.message.as_deref().map(str::trim) {
            Some(message) if !message.is_empty() => message.to_string(),
            _ => format!("failed expression: {}", validation.expression.source.trim()),
        }
    }
}

fn truncate(value: &mut String, max: usize) {
    if value.len() > max {
        let mut at = max;
        while !value.is_char_boundary(at) {
            at -= 1;
        }
        value.truncate(at);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(spec: serde_json::Value) -> CompiledPolicy {
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(
            json!({"metadata": {"name": "p", "generation": 1}, "spec": spec}),
        )
        .unwrap();
        CompiledPolicy::compile(&policy)
    }

    /// A create of an object with `spec`.
    fn create(spec: serde_json::Value) -> Activation {
        crate::admission::cel::activation(
            Some(&json!({"spec": spec})),
            None,
            &json!({"operation": "CREATE"}),
        )
    }

    fn input(replicas: i64) -> Activation {
        create(json!({"replicas": replicas}))
    }

    #[test]
    fn messages_in_kubes_order() {
        let p = policy(json!({"validations": [
            {"expression": "object.spec.replicas < 5"},
            {"expression": "object.spec.replicas < 4", "message": " too many "},
            {"expression": "object.spec.replicas < 3", "message": "m",
             "messageExpression": "'replicas: ' + string(object.spec.replicas)", "reason": "Forbidden"},
        ]}));
        let outcome = p.validate(&input(9), &mut Budget::admission());
        let messages: Vec<&str> = outcome
            .failures
            .iter()
            .map(|f| f.message.as_str())
            .collect();
        assert_eq!(
            messages,
            [
                "failed expression: object.spec.replicas < 5",
                "too many",
                "replicas: 9"
            ]
        );
        assert_eq!(outcome.failures[2].reason, "Forbidden");
        assert!(
            p.validate(&input(1), &mut Budget::admission())
                .failures
                .is_empty()
        );
    }

    #[test]
    fn variables_in_order_and_errors_by_failure_policy() {
        let p = policy(json!({
            "variables": [{"name": "r", "expression": "object.spec.replicas"},
                          {"name": "double", "expression": "variables.r * 2"},
                          {"name": "unused", "expression": "object.nothing"}],
            "validations": [{"expression": "variables.double < 10"},
                            {"expression": "object.missing == 1"}],
            "auditAnnotations": [{"key": "replicas", "valueExpression": "string(variables.r)"}],
        }));
        let outcome = p.validate(&input(6), &mut Budget::admission());
        assert_eq!(outcome.failures.len(), 2, "{outcome:?}");
        assert!(
            outcome.failures[1]
                .message
                .starts_with("expression 'object.missing == 1' resulted in error: "),
            "{outcome:?}"
        );
        assert_eq!(outcome.audit, [("replicas".to_string(), "6".to_string())]);
        let mut ignoring = p;
        ignoring.base.fail_closed = false;
        let outcome = ignoring.validate(&input(1), &mut Budget::admission());
        assert!(outcome.failures.is_empty(), "{outcome:?}");
    }

    /// An object whose `items` are `n` numbers.
    fn items(n: i64) -> Activation {
        let items: Vec<i64> = (0..n).collect();
        create(json!({"items": items}))
    }

    #[test]
    fn cost_cuts_each_call_and_then_the_evaluation() {
        let nested = "object.spec.items.all(x, object.spec.items.all(y, x + y >= 0))";
        // One call beyond the per-call limit: an error of that expression, the others run.
        let p = policy(json!({"validations": [
            {"expression": format!("object.spec.items.all(z, {nested})")},
            {"expression": "false", "message": "runs"},
        ]}));
        let started = std::time::Instant::now();
        let outcome = p.validate(&items(300), &mut Budget::admission());
        let messages: Vec<&str> = outcome
            .failures
            .iter()
            .map(|f| f.message.as_str())
            .collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(
            messages[0]
                .ends_with("resulted in error: operation cancelled: actual cost limit exceeded"),
            "{messages:?}"
        );
        assert_eq!(messages[1], "runs");
        // Many calls within the limit that together exceed the budget: kube's one decision.
        let many: Vec<serde_json::Value> =
            (0..200).map(|_| json!({"expression": nested})).collect();
        let mut spec = json!({"validations": many});
        let p = policy(spec.clone());
        let outcome = p.validate(&items(300), &mut Budget::admission());
        let messages: Vec<&str> = outcome
            .failures
            .iter()
            .map(|f| f.message.as_str())
            .collect();
        assert_eq!(messages, [OUT_OF_BUDGET]);
        spec["failurePolicy"] = json!("Ignore");
        let outcome = policy(spec).validate(&items(300), &mut Budget::admission());
        assert!(outcome.failures.is_empty(), "{outcome:?}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "not stalled"
        );
    }
}
