//! A `MutatingAdmissionPolicy` compiled once per generation, and its mutations applied to one
//! object for one binding and param: kube's `mutating/compilation.go` and `patch/`
//! (`json_patch.go`, `smd.go`).

use extension_apiserver_machinery::cel::convert::{from_json, to_json};
use extension_apiserver_machinery::cel::cost::Budget;
use extension_apiserver_machinery::cel::{Activation, Value};
use extension_apiserver_machinery::fieldmanager::merge_apply_configuration;
use extension_apiserver_machinery::patch::{JsonPatch, PatchSchema};

use super::types::MutatingAdmissionPolicy;
use crate::admission::cel::{Compiled, Matched};
use crate::admission::policy::dispatch::{BaseSpec, PolicyBase};

/// How a mutation's result changes the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PatchType {
    ApplyConfiguration,
    JsonPatch,
}

/// One of `mutations`.
#[derive(Debug)]
struct CompiledMutation {
    patch_type: Result<PatchType, String>,
    expression: Compiled,
}

/// A policy, ready to match and mutate.
#[derive(Debug)]
pub(crate) struct CompiledPolicy {
    pub(crate) base: PolicyBase,
    /// `reinvocationPolicy: IfNeeded`.
    pub(crate) reinvoke_if_needed: bool,
    mutations: Vec<CompiledMutation>,
}

impl std::ops::Deref for CompiledPolicy {
    type Target = PolicyBase;
    fn deref(&self) -> &PolicyBase {
        &self.base
    }
}

/// What one invocation (a binding with one param) did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// The object after the mutations that succeeded; `None` when none changed it.
    pub(crate) object: Option<serde_json::Value>,
    /// The errors, in kube's words, subject to `failurePolicy`.
    pub(crate) errors: Vec<String>,
}

impl CompiledPolicy {
    pub(crate) fn compile(policy: &MutatingAdmissionPolicy) -> Self {
        let spec = policy.spec.clone().unwrap_or_default();
        let mutations = spec
            .mutations
            .iter()
            .flatten()
            .map(|m| {
                let (patch_type, expression) = match m.patch_type.as_str() {
                    "ApplyConfiguration" => (
                        Ok(PatchType::ApplyConfiguration),
                        m.apply_configuration.as_ref(),
                    ),
                    "JSONPatch" => (Ok(PatchType::JsonPatch), m.json_patch.as_ref()),
                    other => (Err(format!("unsupported patch type: {other:?}")), None),
                };
                let source = expression.map(|e| e.expression.as_str()).unwrap_or("");
                CompiledMutation {
                    patch_type,
                    expression: Compiled::mutation(source),
                }
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
            reinvoke_if_needed: spec.reinvocation_policy.as_deref() == Some("IfNeeded"),
            mutations,
        }
    }

    /// kube's dispatcher for one invocation: `matchConditions` on the object as it is, then
    /// each mutation in order on the object as the ones before left it, each with a budget
    /// of its own (kube hands each `Patch` `RuntimeCELCostBudget`). A mutation that fails is
    /// an error and the next one runs. `object` is in the version `activation` shows it in;
    /// `schema` is that version's.
    pub(crate) fn mutate(
        &self,
        mut activation: Activation,
        object: &serde_json::Value,
        schema: &PatchSchema,
    ) -> Outcome {
        let mut outcome = Outcome::default();
        match self
            .match_conditions
            .evaluate(&activation, &mut Budget::admission())
        {
            Matched::Yes => {}
            Matched::No(_) => return outcome,
            Matched::Error(message) => {
                outcome.errors.push(message);
                return outcome;
            }
        }
        let mut current = object.clone();
        for mutation in &self.mutations {
            let mut budget = Budget::admission();
            let readers = std::iter::once(mutation.expression.source.as_str());
            let bound = self.variables.bind(&activation, readers, &mut budget);
            let patched = bound
                .evaluate(&mutation.expression, &mut budget)
                .and_then(|value| mutation.apply(&value, &current, schema));
            match patched {
                Ok(patched) => {
                    if patched != current {
                        activation.set("object", from_json(&patched));
                        current = patched;
                    }
                }
                Err(e) => outcome.errors.push(e),
            }
        }
        if current != *object {
            outcome.object = Some(current);
        }
        outcome
    }
}

impl CompiledMutation {
    /// The object with the expression's result applied.
    fn apply(
        &self,
        value: &Value,
        object: &serde_json::Value,
        schema: &PatchSchema,
    ) -> Result<serde_json::Value, String> {
        match self.patch_type.clone()? {
            PatchType::ApplyConfiguration => apply_configuration(value, object, schema),
            PatchType::JsonPatch => json_patch(value, object),
        }
    }
}

/// kube's `patch/smd.go`: the `Object{…}` merged into the object by its schema.
fn apply_configuration(
    value: &Value,
    object: &serde_json::Value,
    schema: &PatchSchema,
) -> Result<serde_json::Value, String> {
    let Value::Map(_) = value else {
        return Err(format!(
            "unsupported return type from ApplyConfiguration expression: {:?}",
            value.type_of()
        ));
    };
    let config = to_json(value).map_err(|e| format!("type mismatch: {e}"))?;
    merge_apply_configuration(schema, object, &config)
        .map_err(|e| format!("error applying patch: {e}"))
}

/// kube's `patch/json_patch.go`: the list of `JSONPatch{…}` applied as RFC 6902 operations;
/// a failed `test` leaves the object as it was.
fn json_patch(value: &Value, object: &serde_json::Value) -> Result<serde_json::Value, String> {
    let Value::List(items) = value else {
        return Err("type mismatch: JSONPatchType.expression should evaluate to array".to_string());
    };
    let mut operations = Vec::with_capacity(items.len());
    for item in items.iter() {
        let Value::Map(_) = item else {
            return Err(format!(
                "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch, got element of {:?}",
                item.type_of()
            ));
        };
        let fields = to_json(item).map_err(|e| {
            format!(
                "JSONPath valueExpression evaluated to a type that could not marshal to JSON: {e}"
            )
        })?;
        let text = |key: &str| fields.get(key).and_then(|v| v.as_str()).unwrap_or("");
        let mut operation = serde_json::json!({"op": text("op"), "path": text("path")});
        if !text("from").is_empty() {
            operation["from"] = text("from").into();
        }
        if let Some(value) = fields.get("value") {
            operation["value"] = value.clone();
        }
        operations.push(operation);
    }
    let patch = JsonPatch(
        operations
            .into_iter()
            .filter_map(|op| match op {
                serde_json::Value::Object(op) => Some(op),
                _ => None,
            })
            .collect(),
    );
    match patch.apply(object) {
        Ok(patched) => Ok(patched),
        // kube (`errors.Is(err, jsonpatch.ErrTestFailed)`): a patch whose `test` fails is not
        // applied, and that is no error.
        Err(e) if e.is_test_failed() => Ok(object.clone()),
        Err(e) => Err(format!("JSON Patch: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(spec: serde_json::Value) -> CompiledPolicy {
        let policy: MutatingAdmissionPolicy = serde_json::from_value(
            json!({"metadata": {"name": "p", "generation": 1}, "spec": spec}),
        )
        .unwrap();
        CompiledPolicy::compile(&policy)
    }

    fn mutate(policy: &CompiledPolicy, object: &serde_json::Value) -> Outcome {
        let activation =
            crate::admission::cel::activation(Some(object), None, &json!({"operation": "CREATE"}))
                .with_json("params", &serde_json::Value::Null);
        policy.mutate(activation, object, &PatchSchema::empty())
    }

    #[test]
    fn mutations_apply_in_order_each_seeing_the_last() {
        let p = policy(json!({"mutations": [
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{metadata: Object.metadata{labels: {'a': 'x'}}}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('b/c'), value: object.metadata.labels['a'] + 'y'}]"}},
        ]}));
        let object = json!({"metadata": {"name": "f", "labels": {"z": "1"}}});
        let outcome = mutate(&p, &object);
        assert!(outcome.errors.is_empty(), "{outcome:?}");
        assert_eq!(
            outcome.object.unwrap()["metadata"]["labels"],
            json!({"z": "1", "a": "x", "b/c": "xy"})
        );
    }

    #[test]
    fn errors_in_kubes_words_and_a_failed_test_is_no_error() {
        let p = policy(json!({"mutations": [
            {"patchType": "JSONPatch", "jsonPatch": {"expression": "object.missing.field"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression": "'text'"}},
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "[1]"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'test', path: '/metadata/name', value: 'other'}, JSONPatch{op: 'remove', path: '/metadata/name'}]"}},
        ]}));
        let object = json!({"metadata": {"name": "f"}});
        let outcome = mutate(&p, &object);
        assert!(outcome.object.is_none(), "{outcome:?}");
        assert_eq!(outcome.errors.len(), 3, "{outcome:?}");
        assert!(
            outcome.errors[0].starts_with("expression 'object.missing.field' resulted in error: "),
            "{outcome:?}"
        );
        assert_eq!(
            outcome.errors[1],
            "type mismatch: JSONPatchType.expression should evaluate to array"
        );
        assert!(
            outcome.errors[2].starts_with("unsupported return type from ApplyConfiguration"),
            "{outcome:?}"
        );
    }
}
