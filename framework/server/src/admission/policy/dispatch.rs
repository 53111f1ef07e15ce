//! The part of kube's `generic.PolicyDispatcher` both policy plugins share: whether a
//! policy's `matchConstraints` match the request, the variables its expressions see, and
//! which of its bindings (by their `matchResources`) apply with which params. Validating and
//! mutating policies then evaluate what this hands them, each their own way.

use std::sync::Arc;

use extension_apiserver_machinery::cel::Activation;
use k8s_openapi::api::admissionregistration::v1::{MatchResources, ParamKind, ParamRef};
use serde_json::Value;

use super::matching;
use super::params::Params;
use crate::admission::namespace::CoreNamespaces;
use crate::admission::webhook::rules::Invocation;
use crate::admission::{Attributes, cel};
use crate::error::Result;

/// What the dispatch needs of a policy, whichever its kind.
pub(crate) struct PolicyRef<'a> {
    pub(crate) constraints: Option<&'a MatchResources>,
    pub(crate) param_kind: Option<&'a ParamKind>,
}

/// What the dispatch needs of a binding, whichever its kind.
pub(crate) struct BindingRef<'a> {
    pub(crate) match_resources: Option<&'a MatchResources>,
    pub(crate) param_ref: Option<&'a ParamRef>,
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
    /// Matches `policy` and its `bindings` against the request, as `object` and
    /// `old_object` (in the storage version) are now; `namespace_object` is fetched once per
    /// request. Configuration errors go to `errors`.
    pub(crate) async fn dispatch(
        &self,
        (policy, bindings): (PolicyRef<'_>, &[BindingRef<'_>]),
        attributes: &Attributes,
        namespace_object: &mut Option<Value>,
        authorizer: &Arc<cel::RequestAuthorizer>,
        errors: &mut Vec<ConfigError>,
    ) -> Result<Option<Matched>> {
        let configure = |binding: Option<usize>, what: &str, why: String| ConfigError {
            binding,
            message: format!("failed to configure {what}: {why}"),
        };
        let Some(constraints) = policy.constraints else {
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
        if namespace_object.is_none() && !attributes.namespace.is_empty() {
            let namespace = self.namespaces.get(&attributes.namespace).await?;
            *namespace_object = Some(serde_json::to_value(namespace).unwrap_or_default());
        }
        let request = cel::request(attributes, &invocation.resource, &invocation.kind);
        let base = cel::activation(object.as_ref(), old_object.as_ref(), &request).with_json(
            "namespaceObject",
            namespace_object.as_ref().unwrap_or(&Value::Null),
        );
        let base = cel::with_authorizer(base, authorizer.clone(), attributes);
        let mut applying = Vec::new();
        for (index, binding) in bindings.iter().enumerate() {
            if let Some(resources) = binding.match_resources {
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
                .collect(policy.param_kind, binding.param_ref, &attributes.namespace)
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
