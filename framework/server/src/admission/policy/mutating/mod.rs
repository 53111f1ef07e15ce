//! `MutatingAdmissionPolicy`: kube-apiserver's plugin of that name (beta in 1.34), for the
//! server's own resources. Policies and bindings (`admissionregistration.k8s.io/v1beta1`,
//! [`types`]) are followed in the core cluster when its discovery serves them; otherwise the
//! plugin is inert (it says so once in the log), as kube's is with its feature gate off. It
//! runs in the mutating step, before the mutating webhooks, as kube orders them.
//!
//! Matching (`matchConstraints`, the binding's `matchResources`), params, `matchConditions`
//! and `variables` are the validating policy's (see [`policy`](super)); then each of
//! `mutations` runs in order, on the object as the ones before left it, in the version the
//! constraints matched:
//!
//! - `ApplyConfiguration`: the expression makes an `Object{…}` (`Object{spec:
//!   Object.spec{replicas: 3}}`), merged into the object as structured-merge-diff merges by
//!   the type's schema (list maps by key, sets by value; a configuration that sets an atomic
//!   list or map is refused, as kube refuses it), without field ownership;
//! - `JSONPatch`: the expression makes a list of `JSONPatch{op:, path:, value:, from:}`,
//!   applied as RFC 6902 (`jsonpatch.escapeKey` escapes a map key for a path); a failed
//!   `test` leaves the object as it was.
//!
//! The mutated object then goes through the rest of admission and the type's strategy and
//! validation, as any write. Errors (an expression that fails, a patch that does not apply,
//! a param that cannot be found) refuse the request with kube's Status (403, reason
//! `Invalid`, `policy 'p' with binding 'b' denied request: …`) under `failurePolicy: Fail`
//! and are ignored under `Ignore`. A policy with `reinvocationPolicy: IfNeeded` runs once
//! more after the mutating webhooks when they changed the object.

mod compiled;
pub mod types;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use extension_apiserver_machinery::cel::Activation;
use extension_apiserver_machinery::cel::convert::from_json;
use extension_apiserver_machinery::patch::PatchSchema;
use k8s_openapi::api::admissionregistration::v1::{MatchResources, ParamRef};
use kube::api::Api;
use kube_core::response::StatusCause;

use self::compiled::CompiledPolicy;
use self::types::{MutatingAdmissionPolicyBinding, MutatingAdmissionPolicyBindingSpec};
use super::dispatch::{BindingView, Dispatched, Dispatcher, RequestState};
use super::params::Params;
use super::{Shared, follow_bindings, follow_policies, read};
use crate::admission::namespace::CoreNamespaces;
use crate::admission::objects::OwnObjects;
use crate::admission::webhook::rules::Invocation;
use crate::admission::{AdmissionPlugin, Attributes, MutatingAdmissionPlugin, Operation, cel};
use crate::core_api::Followed;
use crate::error::{Error, Result};
use crate::lifecycle::ShutdownSignal;

/// The plugin's name.
pub const NAME: &str = "MutatingAdmissionPolicy";

type Compiled = Arc<BTreeMap<String, Arc<CompiledPolicy>>>;
type Policies = Shared<Compiled>;
type Bindings = Shared<Arc<[Binding]>>;

/// A binding as the dispatcher reads it.
#[derive(Clone, Debug)]
struct Binding {
    name: String,
    spec: MutatingAdmissionPolicyBindingSpec,
}

/// Whether the core API serves the policies, as its discovery said.
const DISCOVERING: u8 = 0;
const SERVED: u8 = 1;
const NOT_SERVED: u8 = 2;

impl BindingView for Binding {
    fn policy_name(&self) -> &str {
        &self.spec.policy_name
    }
    fn match_resources(&self) -> Option<&MatchResources> {
        self.spec.match_resources.as_ref()
    }
    fn param_ref(&self) -> Option<&ParamRef> {
        self.spec.param_ref.as_ref()
    }
}

/// The `MutatingAdmissionPolicy` plugin; see the module documentation.
pub struct MutatingAdmissionPolicy {
    authorizer: cel::AdmissionAuthorizer,
    dispatcher: Dispatcher,
    served: Arc<AtomicU8>,
    followed: Arc<
        OnceLock<(
            Followed<types::MutatingAdmissionPolicy>,
            Followed<MutatingAdmissionPolicyBinding>,
        )>,
    >,
    policies: Policies,
    bindings: Bindings,
}

impl MutatingAdmissionPolicy {
    /// Asks the core API behind `client` whether it serves the policies and, when it does,
    /// follows them and their bindings; params of the server's own kinds are read from
    /// `objects`, others in the core cluster; `authorizer` checks asked of `authorizer`.
    pub fn start(
        client: kube::Client,
        namespaces: CoreNamespaces,
        authorizer: cel::AdmissionAuthorizer,
        objects: OwnObjects,
        shutdown: ShutdownSignal,
    ) -> Arc<Self> {
        let plugin = Arc::new(Self {
            authorizer,
            dispatcher: Dispatcher {
                namespaces,
                params: Params::new(client.clone(), objects, shutdown.clone()),
            },
            served: Arc::default(),
            followed: Arc::default(),
            policies: Arc::default(),
            bindings: Arc::default(),
        });
        let starting = plugin.clone();
        tokio::spawn(async move { starting.discover(client, shutdown).await });
        plugin
    }

    /// Reads the core API's discovery of `admissionregistration.k8s.io/v1beta1` until it
    /// answers (or the server stops), then follows the policies or stays inert.
    async fn discover(&self, client: kube::Client, shutdown: ShutdownSignal) {
        let served = loop {
            match client.list_api_group_resources(types::API_VERSION).await {
                Ok(list) => {
                    break list
                        .resources
                        .iter()
                        .any(|r| r.name == "mutatingadmissionpolicies");
                }
                Err(kube::Error::Api(status)) if status.code == 404 => break false,
                Err(e) => {
                    tracing::debug!("discovery of {}: {e}", types::API_VERSION);
                    if shutdown.is_shutting_down() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        if !served {
            tracing::info!(
                "the core API does not serve {}/mutatingadmissionpolicies: {NAME} is inert",
                types::API_VERSION
            );
            self.served.store(NOT_SERVED, Ordering::Release);
            return;
        }
        self.follow(client, shutdown);
        self.served.store(SERVED, Ordering::Release);
    }

    fn follow(&self, client: kube::Client, shutdown: ShutdownSignal) {
        let policies = follow_policies(
            Api::all(client.clone()),
            "mutatingadmissionpolicies",
            shutdown.clone(),
            self.policies.clone(),
            CompiledPolicy::compile,
        );
        let bindings = follow_bindings(
            Api::all(client),
            "mutatingadmissionpolicybindings",
            shutdown,
            self.bindings.clone(),
            |b: &MutatingAdmissionPolicyBinding| Binding {
                name: b.metadata.name.clone().unwrap_or_default(),
                spec: b.spec.clone().unwrap_or_default(),
            },
        );
        self.followed.set((policies, bindings)).ok();
    }

    /// Whether the plugin knows what to do: the core API does not serve the policies, or
    /// their first lists arrived.
    pub fn synced(&self) -> bool {
        match self.served.load(Ordering::Acquire) {
            DISCOVERING => false,
            NOT_SERVED => true,
            _ => {
                self.followed
                    .get()
                    .is_some_and(|(p, b)| p.synced() && b.synced())
                    && self.current().is_some()
            }
        }
    }

    fn current(&self) -> Option<(Compiled, Arc<[Binding]>)> {
        Some((read(&self.policies)?, read(&self.bindings)?))
    }

    /// Waits for discovery and the first lists, as kube's plugin waits for its informers
    /// (kube's 403 `not yet ready to handle request` when in vain); `None`: inert.
    async fn wait_until_ready(
        &self,
        attributes: &Attributes,
    ) -> Result<Option<(Compiled, Arc<[Binding]>)>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.served.load(Ordering::Acquire) == NOT_SERVED {
                return Ok(None);
            }
            if let Some(current) = self.current() {
                return Ok(Some(current));
            }
            if Instant::now() >= deadline {
                return Err(attributes.forbidden("not yet ready to handle request"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An error of a policy, subject to its `failurePolicy` (kube's `PolicyError`).
struct PolicyError {
    policy: String,
    binding: Option<String>,
    message: String,
    /// kube's `PolicyError.Reason`: `Invalid` for an error of `matchConditions` or a
    /// mutation; none (the refusal stays `Forbidden`) for a policy or binding that could not
    /// be configured.
    invalid: bool,
}

impl PolicyError {
    /// kube's `PolicyError.Error()`.
    fn text(&self) -> String {
        match &self.binding {
            Some(binding) => format!(
                "policy '{}' with binding '{binding}' denied request: {}",
                self.policy, self.message
            ),
            None => format!("policy {:?} denied request: {}", self.policy, self.message),
        }
    }
}

#[async_trait]
impl AdmissionPlugin for MutatingAdmissionPolicy {
    fn name(&self) -> &str {
        NAME
    }

    /// kube's handler: CREATE, UPDATE and CONNECT, when some binding names a policy.
    fn handles(&self, operation: Operation) -> bool {
        if operation == Operation::Delete {
            return false;
        }
        match self.served.load(Ordering::Acquire) {
            NOT_SERVED => false,
            SERVED => match self.current() {
                None => true,
                Some((policies, bindings)) => bindings
                    .iter()
                    .any(|b| policies.contains_key(&b.spec.policy_name)),
            },
            _ => true,
        }
    }
}

#[async_trait]
impl MutatingAdmissionPlugin for MutatingAdmissionPolicy {
    async fn admit(&self, attributes: &mut Attributes) -> Result<()> {
        self.run(attributes, false).await
    }

    fn reinvocable(&self) -> bool {
        self.current()
            .is_some_and(|(policies, _)| policies.values().any(|p| p.reinvoke_if_needed))
    }

    /// kube's reinvocation: the policies with `reinvocationPolicy: IfNeeded`, once more,
    /// after a later plugin (a mutating webhook) changed the object.
    async fn reinvoke(&self, attributes: &mut Attributes) -> Result<()> {
        self.run(attributes, true).await
    }
}

impl MutatingAdmissionPolicy {
    /// Every policy (or, when `reinvoking`, those with `reinvocationPolicy: IfNeeded`) whose
    /// constraints and bindings match, in name order.
    async fn run(&self, attributes: &mut Attributes, reinvoking: bool) -> Result<()> {
        let Some((policies, bindings)) = self.wait_until_ready(attributes).await? else {
            return Ok(());
        };
        if attributes.object.is_none() {
            return Ok(());
        }
        let mut errors = Vec::new();
        let mut request = RequestState::new(attributes, &self.authorizer);
        let chosen = policies
            .values()
            .filter(|p| !reinvoking || p.reinvoke_if_needed);
        for policy in chosen {
            let dispatched = self
                .dispatcher
                .dispatch(&policy.base, &bindings, attributes, &mut request)
                .await?;
            let Some(Dispatched {
                bound,
                errors: config_errors,
                matched,
            }) = dispatched
            else {
                continue;
            };
            let fail = |binding: Option<usize>, message: String, invalid: bool| PolicyError {
                policy: policy.name.clone(),
                binding: binding.map(|i| bound[i].name.clone()),
                message,
                invalid,
            };
            if policy.fail_closed {
                errors.extend(
                    config_errors
                        .into_iter()
                        .map(|e| fail(e.binding, e.message, false)),
                );
            }
            let Some(matched) = matched else {
                continue;
            };
            let schema = schema_for(attributes, &matched.invocation);
            for (index, activations) in matched.bindings {
                for activation in activations {
                    let failed =
                        invoke(policy, &matched.invocation, &schema, activation, attributes)
                            .await?;
                    if policy.fail_closed {
                        errors.extend(failed.into_iter().map(|e| fail(Some(index), e, true)));
                    }
                }
            }
        }
        match errors.is_empty() {
            true => Ok(()),
            false => Err(denied(attributes, &errors)),
        }
    }
}

/// The schema `invocation`'s object merges by: the request's (of the requested version and
/// the main resource); another version's object, or a `Scale`, merges without list
/// semantics.
fn schema_for(attributes: &Attributes, invocation: &Invocation) -> Arc<PatchSchema> {
    match attributes.patch_schema() {
        Some(schema)
            if invocation.resource.version == attributes.request_resource.version
                && attributes.subresource.is_empty() =>
        {
            schema.clone()
        }
        _ => Arc::new(PatchSchema::empty()),
    }
}

/// One invocation (a binding with one param): `policy`'s mutations on the object as it is
/// now, in `invocation`'s version, on a blocking thread; the object is replaced when they
/// changed it. The errors, in kube's words.
async fn invoke(
    policy: &Arc<CompiledPolicy>,
    invocation: &Invocation,
    schema: &Arc<PatchSchema>,
    mut activation: Activation,
    attributes: &mut Attributes,
) -> Result<Vec<String>> {
    let Some(object) = attributes.object.clone() else {
        return Ok(Vec::new());
    };
    let versioned = match &invocation.convertor {
        Some(c) => c.to_served(&object)?,
        None => object,
    };
    activation.set("object", from_json(&versioned));
    let (policy, schema) = (policy.clone(), schema.clone());
    let outcome =
        cel::evaluate_blocking(move || policy.mutate(activation, &versioned, &schema)).await?;
    if let Some(mutated) = outcome.object {
        attributes.object = Some(match &invocation.convertor {
            Some(c) => c.to_storage(&mutated)?,
            None => mutated,
        });
    }
    Ok(outcome.errors)
}

/// kube's refusal (`generic.PolicyDispatcher`): `NewForbidden`'s Status, its message the
/// first error's, its reason the first error's (`Invalid`) when it has one, every error a
/// cause.
fn denied(attributes: &Attributes, errors: &[PolicyError]) -> Error {
    let forbidden = attributes.forbidden("admission request denied by policy");
    let messages: Vec<String> = errors.iter().map(PolicyError::text).collect();
    let reason = if errors[0].invalid {
        "Invalid"
    } else {
        "Forbidden"
    };
    let mut error = Error::new(403, reason, &messages[0]);
    if let Some(details) = forbidden.status().details.clone() {
        error = error.with_details(details);
    }
    if let Some(details) = error.details_mut() {
        details
            .causes
            .extend(messages.into_iter().map(|message| StatusCause {
                reason: String::new(),
                message,
                field: String::new(),
            }));
    }
    error
}
