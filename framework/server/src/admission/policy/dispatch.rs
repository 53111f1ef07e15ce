//! The part of kube's `generic.PolicyDispatcher` both policy plugins share: whether a
//! policy's `matchConstraints` match the request, the variables its expressions see, and
//! which of its bindings (by their `matchResources`) apply with which params. Validating and
//! mutating policies then evaluate what this hands them, each their own way.

use std::sync::Arc;

use extension_apiserver_machinery::cel::Activation;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, ParamKind, ParamRef, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::matching;
use super::params::Params;
use super::variables::Variables;
use crate::admission::cel::MatchConditions;
use crate::admission::namespace::CoreNamespaces;
use crate::admission::webhook::rules::Invocation;
use crate::admission::{Attributes, cel};
use crate::error::Result;

/// What the dispatch needs of a policy, whichever its kind.
pub(crate) trait PolicyView {
    fn name(&self) -> &str;
    fn constraints(&self) -> Option<&MatchResources>;
    fn param_kind(&self) -> Option<&ParamKind>;
}

/// What both kinds of policy hold, compiled once per generation: the spec fields the
/// dispatch reads, `matchConditions` and `variables`.
#[derive(Debug)]
pub(crate) struct PolicyBase {
    pub(crate) name: String,
    pub(crate) generation: i64,
    /// `failurePolicy` `Fail` (the default) rather than `Ignore`.
    pub(crate) fail_closed: bool,
    pub(crate) constraints: Option<MatchResources>,
    pub(crate) param_kind: Option<ParamKind>,
    pub(crate) match_conditions: MatchConditions,
    pub(crate) variables: Variables,
}

/// The fields of a policy's spec [`PolicyBase`] compiles.
pub(crate) struct BaseSpec<'a> {
    pub(crate) failure_policy: Option<&'a str>,
    pub(crate) match_constraints: Option<&'a MatchResources>,
    pub(crate) param_kind: Option<&'a ParamKind>,
    pub(crate) match_conditions: Option<&'a [MatchCondition]>,
    pub(crate) variables: Option<&'a [Variable]>,
}

impl PolicyBase {
    pub(crate) fn compile(metadata: &ObjectMeta, spec: BaseSpec<'_>) -> Self {
        Self {
            name: metadata.name.clone().unwrap_or_default(),
            generation: metadata.generation.unwrap_or_default(),
            fail_closed: spec.failure_policy != Some("Ignore"),
            constraints: spec.match_constraints.cloned(),
            param_kind: spec.param_kind.cloned(),
            match_conditions: MatchConditions::compile(spec.match_conditions.unwrap_or_default()),
            variables: Variables::compile(
                spec.variables
                    .unwrap_or_default()
                    .iter()
                    .map(|v| (v.name.as_str(), v.expression.as_str())),
            ),
        }
    }
}

impl PolicyView for PolicyBase {
    fn name(&self) -> &str {
        &self.name
    }
    fn constraints(&self) -> Option<&MatchResources> {
        self.constraints.as_ref()
    }
    fn param_kind(&self) -> Option<&ParamKind> {
        self.param_kind.as_ref()
    }
}

/// What the dispatch needs of a binding, whichever its kind.
pub(crate) trait BindingView {
    fn policy_name(&self) -> &str;
    fn match_resources(&self) -> Option<&MatchResources>;
    fn param_ref(&self) -> Option<&ParamRef>;
}

/// What one request's dispatch keeps from policy to policy.
pub(crate) struct RequestState {
    /// Fetched once, when a policy first needs it.
    namespace_object: Option<Value>,
    authorizer: Arc<cel::RequestAuthorizer>,
}

impl RequestState {
    pub(crate) fn new(attributes: &Attributes, authorizer: &cel::AdmissionAuthorizer) -> Self {
        Self {
            namespace_object: None,
            authorizer: cel::RequestAuthorizer::new(authorizer, &attributes.user),
        }
    }
}

/// What the dispatch of one policy found.
pub(crate) struct Dispatched<'b, B> {
    /// The policy's bindings, in order; [`ConfigError::binding`] and [`Matched::bindings`]
    /// index them.
    pub(crate) bound: Vec<&'b B>,
    pub(crate) errors: Vec<ConfigError>,
    /// `None` when the policy does not match the request.
    pub(crate) matched: Option<Matched>,
}

/// A policy or binding that could not be configured for the request (kube's
/// `failed to configure policy: …` / `failed to configure binding: …`), subject to the
/// policy's `failurePolicy`.
pub(crate) struct ConfigError {
    /// The index of the binding among those given; `None` for the policy itself.
    pub(crate) binding: Option<usize>,
    pub(crate) message: String,
}

/// A policy that matches the request.
pub(crate) struct Matched {
    /// The version its constraints matched, and how to convert the object to it.
    pub(crate) invocation: Invocation,
    /// Each binding that applies (its index among those given), with one activation per
    /// param (`params` null without a `paramKind`).
    pub(crate) bindings: Vec<(usize, Vec<Activation>)>,
}

/// What both plugins hold to dispatch: the core cluster's namespaces and the params.
pub(crate) struct Dispatcher {
    pub(crate) namespaces: CoreNamespaces,
    pub(crate) params: Params,
}

impl Dispatcher {
    /// Matches `policy` and those of `bindings` that bind it against the request, as
    /// `attributes`' objects (in the storage version) are now; `None` when no binding
    /// binds it.
    pub(crate) async fn dispatch<'b, B: BindingView>(
        &self,
        policy: &impl PolicyView,
        bindings: &'b [B],
        attributes: &Attributes,
        state: &mut RequestState,
    ) -> Result<Option<Dispatched<'b, B>>> {
        let bound: Vec<&B> = bindings
            .iter()
            .filter(|b| b.policy_name() == policy.name())
            .collect();
        if bound.is_empty() {
            return Ok(None);
        }
        let mut errors = Vec::new();
        let matched = self
            .matches(policy, &bound, attributes, state, &mut errors)
            .await?;
        Ok(Some(Dispatched {
            bound,
            errors,
            matched,
        }))
    }

    async fn matches<B: BindingView>(
        &self,
        policy: &impl PolicyView,
        bindings: &[&B],
        attributes: &Attributes,
        state: &mut RequestState,
        errors: &mut Vec<ConfigError>,
    ) -> Result<Option<Matched>> {
        let configure = |binding: Option<usize>, what: &str, why: String| ConfigError {
            binding,
            message: format!("failed to configure {what}: {why}"),
        };
        let Some(constraints) = policy.constraints() else {
            return Ok(None);
        };
        let invocation = match matching::matches(constraints, &self.namespaces, attributes).await {
            Ok(Some(invocation)) => invocation,
            Ok(None) => return Ok(None),
            Err(e) => {
                errors.push(configure(None, "policy", e.message().to_string()));
                return Ok(None);
            }
        };
        let convert = |object: &Option<Value>| -> Result<Option<Value>> {
            match (object, &invocation.convertor) {
                (Some(o), Some(c)) => c.to_served(o).map(Some),
                (object, _) => Ok(object.clone()),
            }
        };
        let (object, old_object) =
            match (convert(&attributes.object), convert(&attributes.old_object)) {
                (Ok(object), Ok(old_object)) => (object, old_object),
                (Err(e), _) | (_, Err(e)) => {
                    let why = format!("failed to convert object version: {}", e.message());
                    errors.push(configure(None, "policy", why));
                    return Ok(None);
                }
            };
        if state.namespace_object.is_none() && !attributes.namespace.is_empty() {
            let namespace = self.namespaces.get(&attributes.namespace).await?;
            state.namespace_object = Some(serde_json::to_value(namespace).unwrap_or_default());
        }
        let request = cel::request(attributes, &invocation.resource, &invocation.kind);
        let base = cel::activation(object.as_ref(), old_object.as_ref(), &request).with_json(
            "namespaceObject",
            state.namespace_object.as_ref().unwrap_or(&Value::Null),
        );
        let base = cel::with_authorizer(base, state.authorizer.clone(), attributes);
        let mut applying = Vec::new();
        for (index, binding) in bindings.iter().enumerate() {
            if let Some(resources) = binding.match_resources() {
                match matching::matches(resources, &self.namespaces, attributes).await {
                    Ok(Some(_)) => {}
                    Ok(None) => continue,
                    Err(e) => {
                        errors.push(configure(Some(index), "binding", e.message().to_string()));
                        continue;
                    }
                }
            }
            let params = self
                .params
                .collect(
                    policy.param_kind(),
                    binding.param_ref(),
                    &attributes.namespace,
                )
                .await;
            match params {
                Ok(params) => {
                    let activations = params
                        .iter()
                        .map(|p| base.clone().with_json("params", p))
                        .collect();
                    applying.push((index, activations));
                }
                Err(why) => errors.push(configure(Some(index), "binding", why)),
            }
        }
        Ok(Some(Matched {
            invocation,
            bindings: applying,
        }))
    }
}
