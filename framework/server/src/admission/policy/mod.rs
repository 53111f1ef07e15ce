//! `ValidatingAdmissionPolicy`: kube-apiserver's plugin of that name, for the server's own
//! resources. Policies and their bindings (`admissionregistration.k8s.io/v1`) are followed in
//! the core cluster with [`core_api::follow`](crate::core_api::follow()), each policy compiled
//! once per generation; CEL runs in the validating step, after the server's own plugins and
//! the validating webhooks, on a blocking thread, each evaluation (a binding with one param) with
//! a [`Budget::admission`] of its own, as kube gives each its `RuntimeCELCostBudget`; an
//! evaluation that runs out is cut with kube's message, subject to `failurePolicy`.
//!
//! A request goes to a policy whose `matchConstraints` match it (rules, `excludeResourceRules`,
//! `namespaceSelector`, `objectSelector`, `matchPolicy`: the webhooks' matching) and to each of
//! its bindings whose `matchResources` match too; each binding is evaluated once per param its
//! `paramRef` names or selects (of a kind the server serves, read in process; else followed in
//! the core cluster), `matchConditions` first, then
//! `variables` (only those read, in order), `validations`, `auditAnnotations`; `authorizer`
//! asks the server's authorizer (see [`AdmissionAuthorizer`](crate::admission::AdmissionAuthorizer)). A failed
//! validation acts as the binding's `validationActions` say:
//!
//! - `Deny`: kube's Status, `ValidatingAdmissionPolicy 'p' with binding 'b' denied request: …`,
//!   reason the validation's `reason` (`Invalid`, 422, when it has none; `Forbidden` 403,
//!   `Unauthorized` 401, `RequestEntityTooLarge` 413);
//! - `Warn`: a warning, `Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': …`;
//! - `Audit`: the audit annotation `validation.policy.admission.k8s.io/validation_failure`
//!   (kube's JSON list of one failure: the request's first, as kube never overwrites an
//!   annotation). `auditAnnotations` are recorded as `{policy}/{key}`.
//!
//! Errors (an expression that does not compile or fails, a param that cannot be found with
//! `parameterNotFoundAction: Deny`, a binding that cannot be configured) deny the request with
//! `failurePolicy: Fail` (the default) and are ignored with `Ignore`.

mod compiled;
mod dispatch;
mod matching;
pub mod mutating;
mod params;
mod variables;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::Deref;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use async_trait::async_trait;
use extension_apiserver_machinery::cel::Activation;
use extension_apiserver_machinery::cel::cost::Budget;
use k8s_openapi::api::admissionregistration::v1 as registration;
use kube::api::Api;
use kube::runtime::watcher;
use kube_core::response::StatusCause;
use serde::de::DeserializeOwned;

use self::compiled::{CompiledPolicy, Outcome};
use self::dispatch::{BindingView, Dispatched, Dispatcher, PolicyBase, RequestState};
use self::params::Params;
use crate::admission::namespace::CoreNamespaces;
use crate::admission::objects::OwnObjects;
use crate::admission::{AdmissionPlugin, Attributes, Operation, cel};
use crate::core_api::{self, Followed};
use crate::error::{Error, Result};
use crate::lifecycle::ShutdownSignal;

/// The plugin's name.
pub const NAME: &str = "ValidatingAdmissionPolicy";

/// The audit annotation of a failure under the `Audit` action.
const VALIDATION_FAILURE: &str = "validation.policy.admission.k8s.io/validation_failure";

/// What a plugin last saw of the core cluster; `None` until the first list.
type Shared<T> = Arc<RwLock<Option<T>>>;
/// The policies as last seen, compiled, by name.
type Compiled = Arc<BTreeMap<String, Arc<CompiledPolicy>>>;
type Policies = Shared<Compiled>;
type Bindings = Shared<Arc<[Binding]>>;

/// A binding as the dispatcher reads it.
#[derive(Clone, Debug)]
struct Binding {
    name: String,
    policy: String,
    spec: registration::ValidatingAdmissionPolicyBindingSpec,
    deny: bool,
    warn: bool,
    audit: bool,
}

impl Binding {
    fn new(binding: &registration::ValidatingAdmissionPolicyBinding) -> Self {
        let spec = binding.spec.clone().unwrap_or_default();
        let actions = spec.validation_actions.clone().unwrap_or_default();
        let has = |action: &str| actions.iter().any(|a| a == action);
        Self {
            name: binding.metadata.name.clone().unwrap_or_default(),
            policy: spec.policy_name.clone().unwrap_or_default(),
            deny: has("Deny"),
            warn: has("Warn"),
            audit: has("Audit"),
            spec,
        }
    }

    fn actions(&self) -> Vec<&'static str> {
        let all = [
            (self.deny, "Deny"),
            (self.warn, "Warn"),
            (self.audit, "Audit"),
        ];
        all.into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, a)| a)
            .collect()
    }
}

impl BindingView for Binding {
    fn policy_name(&self) -> &str {
        &self.policy
    }
    fn match_resources(&self) -> Option<&registration::MatchResources> {
        self.spec.match_resources.as_ref()
    }
    fn param_ref(&self) -> Option<&registration::ParamRef> {
        self.spec.param_ref.as_ref()
    }
}

fn read<T: Clone>(lock: &RwLock<Option<T>>) -> Option<T> {
    lock.read().unwrap_or_else(|e| e.into_inner()).clone()
}

fn write<T>(lock: &RwLock<Option<T>>, value: T) {
    *lock.write().unwrap_or_else(|e| e.into_inner()) = Some(value);
}

/// Follows the policies of `api` in the core cluster into `policies`, by name, each compiled
/// (with `compile`) again only when its generation changed.
fn follow_policies<P, C>(
    api: Api<P>,
    what: &str,
    shutdown: ShutdownSignal,
    policies: Shared<Arc<BTreeMap<String, Arc<C>>>>,
    compile: fn(&P) -> C,
) -> Followed<P>
where
    P: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync,
    C: Deref<Target = PolicyBase> + Send + Sync + 'static,
{
    core_api::follow(
        api,
        watcher::Config::default(),
        what.into(),
        shutdown,
        move |store| {
            let previous = read(&policies).unwrap_or_default();
            let fresh = store
                .state()
                .iter()
                .map(|policy| {
                    let name = policy.meta().name.clone().unwrap_or_default();
                    let generation = policy.meta().generation.unwrap_or_default();
                    let compiled = match previous.get(&name) {
                        Some(known) if known.generation == generation && generation != 0 => {
                            known.clone()
                        }
                        _ => Arc::new(compile(policy)),
                    };
                    (name, compiled)
                })
                .collect();
            write(&policies, Arc::new(fresh));
        },
    )
}

/// Follows the bindings of `api` in the core cluster into `bindings`, in name order, as
/// `view` reads them.
fn follow_bindings<B, T>(
    api: Api<B>,
    what: &str,
    shutdown: ShutdownSignal,
    bindings: Shared<Arc<[T]>>,
    view: fn(&B) -> T,
) -> Followed<B>
where
    B: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync,
    T: Send + Sync + 'static,
{
    core_api::follow(
        api,
        watcher::Config::default(),
        what.into(),
        shutdown,
        move |store| {
            let mut seen = store.state();
            seen.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
            let seen: Vec<T> = seen.iter().map(|b| view(b)).collect();
            write(&bindings, seen.into());
        },
    )
}

/// The `ValidatingAdmissionPolicy` plugin; see the module documentation.
pub struct ValidatingAdmissionPolicy {
    authorizer: cel::AdmissionAuthorizer,
    dispatcher: Dispatcher,
    followed: (
        Followed<registration::ValidatingAdmissionPolicy>,
        Followed<registration::ValidatingAdmissionPolicyBinding>,
    ),
    policies: Policies,
    bindings: Bindings,
}

impl ValidatingAdmissionPolicy {
    /// Starts following the policies and bindings behind `client`; params of the server's own
    /// kinds are read from `objects`, others in the core cluster; `authorizer` checks asked
    /// of `authorizer`.
    pub fn start(
        client: kube::Client,
        namespaces: CoreNamespaces,
        authorizer: cel::AdmissionAuthorizer,
        objects: OwnObjects,
        shutdown: ShutdownSignal,
    ) -> Arc<Self> {
        let policies: Policies = Arc::default();
        let followed_policies = follow_policies(
            Api::all(client.clone()),
            "validatingadmissionpolicies",
            shutdown.clone(),
            policies.clone(),
            CompiledPolicy::compile,
        );
        let bindings: Bindings = Arc::default();
        let followed_bindings = follow_bindings(
            Api::all(client.clone()),
            "validatingadmissionpolicybindings",
            shutdown.clone(),
            bindings.clone(),
            Binding::new,
        );
        Arc::new(Self {
            authorizer,
            dispatcher: Dispatcher {
                namespaces,
                params: Params::new(client, objects, shutdown),
            },
            followed: (followed_policies, followed_bindings),
            policies,
            bindings,
        })
    }

    /// Whether the first lists of policies and bindings arrived.
    pub fn synced(&self) -> bool {
        self.followed.0.synced()
            && self.followed.1.synced()
            && read(&self.policies).is_some()
            && read(&self.bindings).is_some()
    }

    fn current(&self) -> Option<(Compiled, Arc<[Binding]>)> {
        Some((read(&self.policies)?, read(&self.bindings)?))
    }

    /// Waits for the first lists, as kube's plugin waits for its informers; a request that
    /// waits in vain is kube's 403 `not yet ready to handle request`.
    async fn wait_until_ready(
        &self,
        attributes: &Attributes,
    ) -> Result<(Compiled, Arc<[Binding]>)> {
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(current) = self.current() {
                return Ok(current);
            }
            if Instant::now() >= deadline {
                return Err(attributes.forbidden("not yet ready to handle request"));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// One binding (with its params) to evaluate.
struct Work {
    policy: Arc<CompiledPolicy>,
    binding: Binding,
    activations: Vec<Activation>,
}

/// A refusal on its way to becoming a Status.
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: String,
}

#[async_trait]
impl AdmissionPlugin for ValidatingAdmissionPolicy {
    fn name(&self) -> &str {
        NAME
    }

    fn handles(&self, _: Operation) -> bool {
        match self.current() {
            None => true,
            Some((policies, bindings)) => bindings.iter().any(|b| policies.contains_key(&b.policy)),
        }
    }

    async fn validate(&self, attributes: &Attributes) -> Result<()> {
        let (policies, bindings) = self.wait_until_ready(attributes).await?;
        let mut denials = Vec::new();
        let mut work = Vec::new();
        let mut request = RequestState::new(attributes, &self.authorizer);
        for policy in policies.values() {
            let dispatched = self
                .dispatcher
                .dispatch(&policy.base, &bindings, attributes, &mut request)
                .await?;
            let Some(Dispatched {
                bound,
                errors,
                matched,
            }) = dispatched
            else {
                continue;
            };
            if policy.fail_closed {
                denials.extend(errors.into_iter().map(|e| Denial {
                    policy: policy.name.clone(),
                    binding: e.binding.map(|i| bound[i].name.clone()),
                    message: e.message,
                    reason: String::new(),
                }));
            }
            for (index, activations) in matched.map(|m| m.bindings).unwrap_or_default() {
                work.push(Work {
                    policy: policy.clone(),
                    binding: bound[index].clone(),
                    activations,
                });
            }
        }
        let evaluated = evaluate(work).await?;
        publish(evaluated, attributes, &mut denials);
        match denials.into_iter().next() {
            Some(denial) => Err(denied(attributes, denial)),
            None => Ok(()),
        }
    }
}

/// Runs the CEL of every binding on a blocking thread, each evaluation (a binding with one
/// param) with a budget of its own, as kube's dispatcher gives each `Validate` call
/// `RuntimeCELCostBudget`.
async fn evaluate(work: Vec<Work>) -> Result<Vec<(Work, Vec<Outcome>)>> {
    if work.is_empty() {
        return Ok(Vec::new());
    }
    cel::evaluate_blocking(move || {
        work.into_iter()
            .map(|w| {
                let outcomes = w
                    .activations
                    .iter()
                    .map(|a| w.policy.validate(a, &mut Budget::admission()))
                    .collect();
                (w, outcomes)
            })
            .collect()
    })
    .await
}

/// kube's `ValidationFailureValue`, its fields in kube's order (the annotation is its JSON).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ValidationFailure<'a> {
    message: &'a str,
    policy: &'a str,
    binding: &'a str,
    expression_index: usize,
    validation_actions: Vec<&'static str>,
}

/// Acts on what the evaluations found, as kube's dispatcher: failures by the binding's
/// actions, audit annotations of each policy (distinct values of a key joined), errors of
/// audit annotations as refusals.
fn publish(
    evaluated: Vec<(Work, Vec<Outcome>)>,
    attributes: &Attributes,
    denials: &mut Vec<Denial>,
) {
    let mut annotations: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (work, outcomes) in evaluated {
        let (policy, binding) = (&work.policy.name, &work.binding);
        for outcome in outcomes {
            for failure in &outcome.failures {
                if binding.deny {
                    denials.push(Denial {
                        policy: policy.clone(),
                        binding: Some(binding.name.clone()),
                        message: failure.message.clone(),
                        reason: failure.reason.clone(),
                    });
                }
                if binding.warn {
                    attributes.warn(format!(
                        "Validation failed for ValidatingAdmissionPolicy '{policy}' with binding '{}': {}",
                        binding.name, failure.message
                    ));
                }
                // kube publishes each failure as a list of one, and an admission annotation
                // is never overwritten: the request's first failure stays (dispatcher.go's
                // publishValidationFailureAnnotation, attributes.go's AddAnnotation).
                if binding.audit {
                    let value = [ValidationFailure {
                        message: &failure.message,
                        policy: &binding.policy,
                        binding: &binding.name,
                        expression_index: failure.index,
                        validation_actions: binding.actions(),
                    }];
                    let value = serde_json::to_string(&value).unwrap_or_default();
                    attributes.add_audit_annotation(VALIDATION_FAILURE, &value);
                }
            }
            for error in outcome.errors {
                denials.push(Denial {
                    policy: policy.clone(),
                    binding: Some(binding.name.clone()),
                    message: error,
                    reason: String::new(),
                });
            }
            for (key, value) in outcome.audit {
                let values = annotations.entry((policy.clone(), key)).or_default();
                if !values.contains(&value) {
                    values.push(value);
                }
            }
        }
    }
    for ((policy, key), values) in annotations {
        attributes.add_audit_annotation(&format!("{policy}/{key}"), &values.join(", "));
    }
}

/// kube's refusal: `NewForbidden`'s Status with the policy's wording, its reason (`Invalid`
/// when none) and that reason's code, and the message as a cause.
fn denied(attributes: &Attributes, denial: Denial) -> Error {
    let message = match &denial.binding {
        Some(binding) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{binding}' denied request: {}",
            denial.policy, denial.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            denial.policy, denial.message
        ),
    };
    let forbidden = attributes.forbidden(&message);
    let reason = match denial.reason.as_str() {
        "" => "Invalid",
        reason => reason,
    };
    let code = match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    };
    let mut error = Error::new(code, reason, forbidden.message());
    if let Some(details) = forbidden.status().details.clone() {
        error = error.with_details(details);
    }
    if let Some(details) = error.details_mut() {
        details.causes.push(StatusCause {
            reason: String::new(),
            message,
            field: String::new(),
        });
    }
    error
}
