//! CEL in admission, as kube's `admission/plugin/cel` and `plugin/webhook/matchconditions`:
//! the environment ValidatingAdmissionPolicy and webhooks' `matchConditions` compile in, the
//! variables of a request (`object`, `oldObject`, `request`, `params`, `namespaceObject`,
//! `variables`, `authorizer`, `authorizer.requestResource`), and `matchConditions` themselves.
//!
//! `authorizer` asks the server's own authorizer for the requester (always-allowed groups,
//! then SubjectAccessReview when delegated); CEL is synchronous, so expressions that may call it
//! are evaluated on a blocking thread ([`evaluate_blocking`]), which waits for the answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use extension_apiserver_machinery::cel::authz::{self, Authorize, Check, Decision};

use extension_apiserver_machinery::cel::cost::Budget;
use extension_apiserver_machinery::cel::{
    Activation, CompileError, Environment, EvalError, Expression, PER_CALL_LIMIT, Value,
};
use k8s_openapi::api::admissionregistration::v1::MatchCondition as MatchConditionSpec;
use serde_json::json;

use crate::admission::Attributes;
use crate::admission::attributes::{GroupVersionKind, GroupVersionResource};

/// The variables admission CEL declares (kube's `plugin/cel` composition environment).
pub(crate) const VARIABLES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
    "authorizer",
];

/// kube's limit of `matchConditions` per webhook or policy.
pub(crate) const MAX_MATCH_CONDITIONS: usize = 64;

/// The environment of admission CEL, built once.
pub(crate) fn environment() -> &'static Environment {
    static ENVIRONMENT: OnceLock<Environment> = OnceLock::new();
    ENVIRONMENT.get_or_init(|| Environment::with_libraries(VARIABLES, authz::install))
}

/// The `request` variable: kube's `CreateAdmissionRequest`, an `admission.k8s.io/v1`
/// `AdmissionRequest` without uid and objects, of the version the rules matched.
pub(crate) fn request(
    attributes: &Attributes,
    resource: &GroupVersionResource,
    kind: &GroupVersionKind,
) -> serde_json::Value {
    let request_kind = &attributes.request_kind;
    let request_resource = &attributes.request_resource;
    let mut request = json!({
        "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
        "resource": {"group": resource.group, "version": resource.version, "resource": resource.resource},
        "requestKind": {"group": request_kind.group, "version": request_kind.version, "kind": request_kind.kind},
        "requestResource": {"group": request_resource.group, "version": request_resource.version, "resource": request_resource.resource},
        "operation": attributes.operation.as_str(),
        "userInfo": attributes.user,
        "dryRun": attributes.dry_run,
        "options": attributes.options,
    });
    // Go's `omitempty` on these.
    let optional = [
        ("subResource", &attributes.subresource),
        ("requestSubResource", &attributes.subresource),
        ("name", &attributes.name),
        ("namespace", &attributes.namespace),
    ];
    for (key, value) in optional {
        if !value.is_empty() {
            request[key] = json!(value);
        }
    }
    request
}

/// The variables every admission expression sees: `object` and `oldObject` (null when the
/// operation has none) and `request`; `params` and `namespaceObject` null until bound.
pub(crate) fn activation(
    object: Option<&serde_json::Value>,
    old_object: Option<&serde_json::Value>,
    request: &serde_json::Value,
) -> Activation {
    let null = serde_json::Value::Null;
    Activation::new()
        .with_json("object", object.unwrap_or(&null))
        .with_json("oldObject", old_object.unwrap_or(&null))
        .with_json("request", request)
        .with("params", Value::Null)
        .with("namespaceObject", Value::Null)
        .with(
            "variables",
            std::collections::HashMap::<String, Value>::new().into(),
        )
}

/// How admission CEL's `authorizer` asks the server's authorizer whether a user may do what
/// a check says (kube hands admission its authorizer the same way): the builder makes one of
/// the server's authorizer.
pub type AdmissionAuthorizer = Arc<
    dyn Fn(crate::user::UserInfo, Check) -> futures::future::BoxFuture<'static, Decision>
        + Send
        + Sync,
>;

/// The requester's `authorizer`: the server's authorizer for the requester (or the service
/// account a check names), each check asked once per request (kube's caching authorizer).
pub(crate) struct RequestAuthorizer {
    ask: AdmissionAuthorizer,
    user: crate::user::UserInfo,
    runtime: tokio::runtime::Handle,
    answers: Mutex<HashMap<String, Decision>>,
}

impl RequestAuthorizer {
    /// An authorizer for `user`; it must be called on a blocking thread of this runtime.
    pub(crate) fn new(ask: &AdmissionAuthorizer, user: &crate::user::UserInfo) -> Arc<Self> {
        Arc::new(Self {
            ask: ask.clone(),
            user: user.clone(),
            runtime: tokio::runtime::Handle::current(),
            answers: Mutex::default(),
        })
    }

    /// Who is asked about: the requester, or `serviceAccount(namespace, name)` as kube names it.
    fn user(&self, check: &Check) -> crate::user::UserInfo {
        match &check.service_account {
            Some((namespace, name)) => crate::user::UserInfo {
                name: format!("system:serviceaccount:{namespace}:{name}"),
                groups: vec![
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".to_string(),
                ],
                ..Default::default()
            },
            None => self.user.clone(),
        }
    }
}

impl Authorize for RequestAuthorizer {
    fn authorize(&self, check: &Check) -> Decision {
        let key = format!("{check:?}");
        let answers = || self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = answers().get(&key) {
            return known.clone();
        }
        let decision = self
            .runtime
            .block_on((self.ask)(self.user(check), check.clone()));
        answers().insert(key, decision.clone());
        decision
    }
}

/// Binds `authorizer` in `activation` to `authorize`, and `authorizer.requestResource` to a
/// check of the request's resource (kube's `activation.go`: group and resource of the
/// request's resource, its subresource, namespace and name).
pub(crate) fn with_authorizer(
    activation: Activation,
    authorize: Arc<dyn Authorize>,
    attributes: &Attributes,
) -> Activation {
    let check = Check {
        group: attributes.resource.group.clone(),
        resource: attributes.resource.resource.clone(),
        subresource: attributes.subresource.clone(),
        namespace: attributes.namespace.clone(),
        name: attributes.name.clone(),
        ..Check::default()
    };
    activation
        .with("authorizer", authz::authorizer(authorize.clone()))
        .with(REQUEST_RESOURCE, authz::request_resource(authorize, check))
}

/// kube's `RequestResourceAuthorizerVarName`: a variable whose name CEL resolves as the
/// qualified `authorizer.requestResource`.
const REQUEST_RESOURCE: &str = "authorizer.requestResource";

/// Runs `work` (CEL that may call the authorizer) on a blocking thread.
pub(crate) async fn evaluate_blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> crate::error::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| crate::error::Error::internal(format!("evaluating admission CEL: {e}")))
}

/// kube's words when an evaluation's budget runs out: the evaluation stops there.
pub(crate) const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// An expression as compiled, or why it did not compile.
#[derive(Clone, Debug)]
pub(crate) struct Compiled {
    pub(crate) source: String,
    pub(crate) expression: Result<Expression, CompileError>,
}

impl Compiled {
    pub(crate) fn new(source: &str) -> Self {
        Self {
            source: source.to_string(),
            expression: environment().compile(source),
        }
    }

    /// A MutatingAdmissionPolicy's mutation: compiled in the admission environment with the
    /// struct types it constructs (`Object{…}`, `JSONPatch{…}`) and `jsonpatch.escapeKey`.
    pub(crate) fn mutation(source: &str) -> Self {
        let environment = Environment::for_mutation(VARIABLES, source, authz::install);
        Self {
            source: source.to_string(),
            expression: environment.compile(source),
        }
    }

    /// Evaluates it, in kube's words for failures (`compilation error: …`,
    /// `expression '…' resulted in error: …`).
    pub(crate) fn evaluate(
        &self,
        activation: &Activation,
        budget: &mut Budget,
    ) -> Result<Value, String> {
        let expression = self
            .expression
            .as_ref()
            .map_err(|e| format!("compilation error: {}", e.message()))?;
        expression
            .evaluate(activation, budget)
            .map_err(|e| match e {
                // With more than a call's limit left, the call's own limit cut it (cel-go's
                // cancellation, an error of this expression); else the evaluation's budget ran
                // out (kube's activation.go).
                EvalError::CostExceeded if budget.remaining() >= PER_CALL_LIMIT => format!(
                    "expression '{}' resulted in error: {}",
                    self.source,
                    EvalError::CostExceeded
                ),
                EvalError::CostExceeded => OUT_OF_BUDGET.to_string(),
                EvalError::Runtime(why) => {
                    format!("expression '{}' resulted in error: {why}", self.source)
                }
            })
    }

    /// Evaluates it as a boolean.
    pub(crate) fn evaluate_bool(
        &self,
        activation: &Activation,
        budget: &mut Budget,
    ) -> Result<bool, String> {
        match self.evaluate(activation, budget)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "expression '{}' resulted in error: must evaluate to bool but got {:?}",
                self.source,
                other.type_of()
            )),
        }
    }
}

/// How a request fared with `matchConditions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Matched {
    /// All true (or none).
    Yes,
    /// One was false (its name).
    No(String),
    /// None false, but some failed: their errors, as Go's aggregate error words them.
    Error(String),
}

/// A webhook's or policy's `matchConditions`, compiled.
#[derive(Clone, Debug, Default)]
pub(crate) struct MatchConditions {
    conditions: Vec<(String, Compiled)>,
}

impl MatchConditions {
    /// Compiles `conditions` (at most [`MAX_MATCH_CONDITIONS`] are kept, as the API refuses more).
    pub(crate) fn compile(conditions: &[MatchConditionSpec]) -> Self {
        let conditions = conditions
            .iter()
            .take(MAX_MATCH_CONDITIONS)
            .map(|c| (c.name.clone(), Compiled::new(&c.expression)))
            .collect();
        Self { conditions }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// kube's `matcher.Match`: any false is no match, whatever else failed; otherwise
    /// errors are an error; otherwise a match.
    pub(crate) fn evaluate(&self, activation: &Activation, budget: &mut Budget) -> Matched {
        let mut errors = Vec::new();
        for (name, condition) in &self.conditions {
            match condition.evaluate_bool(activation, budget) {
                Ok(true) => {}
                Ok(false) => return Matched::No(name.clone()),
                Err(e) => errors.push(e),
            }
        }
        match errors.len() {
            0 => Matched::Yes,
            1 => Matched::Error(errors.remove(0)),
            _ => Matched::Error(format!("[{}]", errors.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conditions(list: &[(&str, &str)]) -> MatchConditions {
        let specs: Vec<MatchConditionSpec> = list
            .iter()
            .map(|(name, expression)| MatchConditionSpec {
                name: name.to_string(),
                expression: expression.to_string(),
            })
            .collect();
        MatchConditions::compile(&specs)
    }

    fn input() -> Activation {
        activation(
            Some(&json!({"metadata": {"name": "a", "labels": {"team": "x"}}})),
            None,
            &json!({"operation": "CREATE"}),
        )
    }

    #[test]
    fn all_true_is_a_match_any_false_is_not() {
        let mut budget = Budget::admission();
        let yes = conditions(&[
            ("create", "request.operation == 'CREATE'"),
            ("team", "object.metadata.labels.team == 'x'"),
        ]);
        assert_eq!(yes.evaluate(&input(), &mut budget), Matched::Yes);
        let no = conditions(&[
            ("broken", "object.nothing.here == 1"),
            ("old", "oldObject != null"),
        ]);
        assert_eq!(
            no.evaluate(&input(), &mut budget),
            Matched::No("old".into())
        );
    }

    #[test]
    fn errors_without_a_false_are_errors() {
        let mut budget = Budget::admission();
        let broken = conditions(&[("broken", "object.nothing.here == 1"), ("t", "true")]);
        let Matched::Error(message) = broken.evaluate(&input(), &mut budget) else {
            panic!("an error")
        };
        assert!(
            message.starts_with("expression 'object.nothing.here == 1' resulted in error: "),
            "{message}"
        );
        let uncompiled = conditions(&[("bad", "object.")]);
        let Matched::Error(message) = uncompiled.evaluate(&input(), &mut budget) else {
            panic!("an error")
        };
        assert!(message.starts_with("compilation error: "), "{message}");
        let not_bool = conditions(&[("n", "1")]);
        assert!(matches!(
            not_bool.evaluate(&input(), &mut budget),
            Matched::Error(_)
        ));
    }
}
