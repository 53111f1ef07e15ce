//! The admission webhooks of the core cluster: kube-apiserver's `MutatingAdmissionWebhook`
//! and `ValidatingAdmissionWebhook` plugins, for the server's own resources.
//!
//! Both follow their `admissionregistration.k8s.io/v1` configurations in the core API with
//! [`core_api::follow`](crate::core_api::follow()) (so one added while the server runs takes
//! effect within a watch event) and the core cluster's namespaces (for `namespaceSelector`).
//! A request goes to the webhooks whose `rules` match it (on the resource as the client named
//! it, or with `matchPolicy: Equivalent` the same resource in another version the server
//! serves, the object converted to that version), whose `namespaceSelector` matches its
//! namespace's labels and whose `objectSelector` matches the object's or the old object's
//! labels. Each is sent an `admission.k8s.io/v1` `AdmissionReview` over HTTPS, trusted
//! through its `caBundle`, within its `timeoutSeconds`.
//!
//! Mutating webhooks run one after the other in the `admit` step (configurations by name,
//! webhooks in order), their JSON patches applied in turn; one with `reinvocationPolicy:
//! IfNeeded` is called once more when a later webhook changed the object. Validating webhooks
//! run concurrently in the `validate` step. Answers become what kube-apiserver answers: a
//! refusal is the webhook's `status` (at least 400) with `admission webhook "NAME" denied the
//! request: …`; a failed call (no answer in time, a transport error, an answer that is not a
//! v1 AdmissionReview for the request's uid) is 500 `failed calling webhook "NAME": …` with
//! `failurePolicy: Fail`, and is logged and skipped with `Ignore`; a dry run that would reach a
//! webhook with side effects is 400 `admission webhook "NAME" does not support dry run`.
//! Warnings reach the client; audit annotations are recorded as `NAME/key`.

mod client;
mod hook;
mod review;
pub(crate) mod rules;
pub(crate) mod selectors;

use std::sync::{Arc, RwLock};
use std::time::Instant;

use async_trait::async_trait;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::Api;
use kube::runtime::watcher;
use kube_core::response::{StatusCause, StatusDetails};
use serde_json::{Value, json};

use self::client::Clients;
use self::hook::Hook;
use self::review::Answer;
use self::rules::Invocation;
use crate::admission::cel::{self, Matched};
use crate::admission::namespace::CoreNamespaces;
use crate::admission::{AdmissionPlugin, Attributes, MutatingAdmissionPlugin, Operation};
use crate::core_api::{self, Followed};
use crate::error::{Error, Result};
use crate::lifecycle::ShutdownSignal;

/// The mutating plugin's name.
pub const MUTATING: &str = "MutatingAdmissionWebhook";
/// The validating plugin's name.
pub const VALIDATING: &str = "ValidatingAdmissionWebhook";

/// What both plugins share: the core cluster's namespaces, the authorizer of
/// `matchConditions`' `authorizer`, and the webhook clients.
pub struct WebhookContext {
    namespaces: CoreNamespaces,
    authorizer: cel::AdmissionAuthorizer,
    clients: Clients,
}

impl WebhookContext {
    /// A context reading `namespaces` (followed by the caller, shared with other plugins) and
    /// asking `authorizer` for `authorizer` checks.
    pub fn new(namespaces: CoreNamespaces, authorizer: cel::AdmissionAuthorizer) -> Arc<Self> {
        Arc::new(Self {
            namespaces,
            authorizer,
            clients: Clients::default(),
        })
    }
}

/// The webhooks of the configurations as last seen, in calling order; `None` until the
/// first list arrived.
type Hooks = Arc<RwLock<Option<Arc<[Hook]>>>>;

fn current(hooks: &Hooks) -> Option<Arc<[Hook]>> {
    hooks.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Whether there may be webhooks to call: true until the first list arrived.
fn may_call(hooks: &Hooks) -> bool {
    current(hooks).is_none_or(|h| !h.is_empty())
}

/// Follows configurations of `K` in the core API, keeping `hooks` in calling order.
fn follow_hooks<K>(
    client: kube::Client,
    shutdown: ShutdownSignal,
    what: &str,
    to_hooks: fn(Vec<K>) -> Vec<Hook>,
) -> (Followed<K>, Hooks)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let hooks: Hooks = Arc::new(RwLock::new(None));
    let writer = hooks.clone();
    let followed = core_api::follow(
        Api::<K>::all(client),
        watcher::Config::default(),
        what.into(),
        shutdown,
        move |store| {
            let configurations = store.state().iter().map(|c| K::clone(c)).collect();
            let fresh: Arc<[Hook]> = to_hooks(configurations).into();
            *writer.write().unwrap_or_else(|e| e.into_inner()) = Some(fresh);
        },
    );
    (followed, hooks)
}

/// `MutatingAdmissionWebhook`; see the module documentation.
pub struct MutatingAdmissionWebhook {
    context: Arc<WebhookContext>,
    configurations: Followed<MutatingWebhookConfiguration>,
    hooks: Hooks,
}

impl MutatingAdmissionWebhook {
    /// Starts following the `MutatingWebhookConfiguration`s behind `client`.
    pub fn start(
        client: kube::Client,
        context: Arc<WebhookContext>,
        shutdown: ShutdownSignal,
    ) -> Arc<Self> {
        let (configurations, hooks) = follow_hooks(
            client,
            shutdown,
            "mutatingwebhookconfigurations",
            hook::mutating_hooks,
        );
        Arc::new(Self {
            context,
            configurations,
            hooks,
        })
    }

    /// Whether the first list of configurations arrived.
    pub fn synced(&self) -> bool {
        self.configurations.synced() && current(&self.hooks).is_some()
    }
}

/// `ValidatingAdmissionWebhook`; see the module documentation.
pub struct ValidatingAdmissionWebhook {
    context: Arc<WebhookContext>,
    configurations: Followed<ValidatingWebhookConfiguration>,
    hooks: Hooks,
}

impl ValidatingAdmissionWebhook {
    /// Starts following the `ValidatingWebhookConfiguration`s behind `client`.
    pub fn start(
        client: kube::Client,
        context: Arc<WebhookContext>,
        shutdown: ShutdownSignal,
    ) -> Arc<Self> {
        let (configurations, hooks) = follow_hooks(
            client,
            shutdown,
            "validatingwebhookconfigurations",
            hook::validating_hooks,
        );
        Arc::new(Self {
            context,
            configurations,
            hooks,
        })
    }

    /// Whether the first list of configurations arrived.
    pub fn synced(&self) -> bool {
        self.configurations.synced() && current(&self.hooks).is_some()
    }
}

#[async_trait]
impl AdmissionPlugin for MutatingAdmissionWebhook {
    fn name(&self) -> &str {
        MUTATING
    }

    fn handles(&self, _: Operation) -> bool {
        may_call(&self.hooks)
    }
}

#[async_trait]
impl MutatingAdmissionPlugin for MutatingAdmissionWebhook {
    async fn admit(&self, attributes: &mut Attributes) -> Result<()> {
        let hooks = wait_for_hooks(&self.hooks, attributes).await?;
        // kube's reinvocation: a change by a webhook makes the reinvocable webhooks called
        // before it due for a second call, once, after the first round.
        let mut invoked_reinvocable = Vec::new();
        let mut due = std::collections::BTreeSet::new();
        for (i, hook) in hooks.iter().enumerate() {
            let Some(invocation) = self.context.should_call(hook, attributes).await? else {
                continue;
            };
            let at = Position::mutating(0, i);
            if self
                .context
                .mutate(hook, &invocation, attributes, at)
                .await?
            {
                due.extend(invoked_reinvocable.drain(..));
            }
            if hook.reinvoke_if_needed {
                invoked_reinvocable.push(i);
            }
        }
        for i in due {
            let hook = &hooks[i];
            if let Some(invocation) = self.context.should_call(hook, attributes).await? {
                let at = Position::mutating(1, i);
                self.context
                    .mutate(hook, &invocation, attributes, at)
                    .await?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl AdmissionPlugin for ValidatingAdmissionWebhook {
    fn name(&self) -> &str {
        VALIDATING
    }

    fn handles(&self, _: Operation) -> bool {
        may_call(&self.hooks)
    }

    /// Every matching webhook at once, as kube; the first refusal in calling order wins.
    async fn validate(&self, attributes: &Attributes) -> Result<()> {
        let hooks = wait_for_hooks(&self.hooks, attributes).await?;
        let mut calls = Vec::new();
        for (i, hook) in hooks.iter().enumerate() {
            if let Some(invocation) = self.context.should_call(hook, attributes).await? {
                let at = Position::validating(i);
                calls.push(self.context.validate(hook, invocation, attributes, at));
            }
        }
        futures::future::join_all(calls)
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()
            .map(|_| ())
    }
}

/// How long a request waits for the first list of configurations, as kube's webhook
/// plugins wait for their informers before they admit anything.
const SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits for the first list of configurations; a request that arrives before it and waits in
/// vain is refused with kube's 403 `not yet ready to handle request`, since admitting it
/// could skip a webhook that should have seen it.
async fn wait_for_hooks(hooks: &Hooks, attributes: &Attributes) -> Result<Arc<[Hook]>> {
    let deadline = Instant::now() + SYNC_WAIT;
    loop {
        if let Some(hooks) = current(hooks) {
            return Ok(hooks);
        }
        if Instant::now() >= deadline {
            return Err(attributes.forbidden("not yet ready to handle request"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Where a call stands, for kube's audit annotations:
/// `mutation.webhook.admission.k8s.io/round_0_index_2` (whether a mutating webhook changed
/// the object), `failed-open.mutation.webhook.admission.k8s.io/round_0_index_2` and
/// `failed-open.validating.webhook.admission.k8s.io/round_0_index_1` (a failure an `Ignore`
/// policy let through; the value is the webhook's name).
#[derive(Clone, Copy)]
struct Position {
    /// `mutation` or `validating`.
    step: &'static str,
    round: usize,
    index: usize,
}

impl Position {
    fn mutating(round: usize, index: usize) -> Self {
        Self {
            step: "mutation",
            round,
            index,
        }
    }

    fn validating(index: usize) -> Self {
        Self {
            step: "validating",
            round: 0,
            index,
        }
    }

    /// The key of the annotation of this call, `failed_open` or not.
    fn key(self, failed_open: bool) -> String {
        let failed = if failed_open { "failed-open." } else { "" };
        let (step, round, index) = (self.step, self.round, self.index);
        format!("{failed}{step}.webhook.admission.k8s.io/round_{round}_index_{index}")
    }
}

/// Why a call did not give an answer to act on: kube's `ErrCallingWebhook` (subject to the
/// failure policy) or an error returned as it is.
enum CallError {
    Calling(String),
    Other(Error),
}

impl WebhookContext {
    /// kube's `ShouldCallHook`. The rules are checked first (kube checks the selectors
    /// first, with the same outcome) so no namespace is looked up for a webhook that does not
    /// want the request; a selector that could not be evaluated is an error only when the
    /// other selector does not already rule the webhook out.
    async fn should_call(
        &self,
        hook: &Hook,
        attributes: &Attributes,
    ) -> Result<Option<Invocation>> {
        let Some(invocation) = rules::invocation(hook, attributes) else {
            return Ok(None);
        };
        let namespace = self
            .namespaces
            .matches(&hook.namespace_selector, attributes)
            .await;
        if namespace == Ok(false) {
            return Ok(None);
        }
        let object = selectors::object_matches(&hook.object_selector, attributes);
        if object == Ok(false) {
            return Ok(None);
        }
        namespace?;
        object?;
        if !hook.match_conditions.is_empty()
            && !self.conditions_match(hook, &invocation, attributes).await?
        {
            return Ok(None);
        }
        Ok(Some(invocation))
    }

    /// kube's `matchConditions` of a webhook, on the objects in the version its rules matched:
    /// all true calls it, one false skips it; an error skips it with `failurePolicy: Ignore`
    /// and is kube's 403 (`NewForbidden` of the matcher's error) with `Fail`.
    async fn conditions_match(
        &self,
        hook: &Hook,
        invocation: &Invocation,
        attributes: &Attributes,
    ) -> Result<bool> {
        let convert = |object: &Option<Value>| -> Result<Option<Value>> {
            match (object, &invocation.convertor) {
                (Some(o), Some(c)) => c.to_served(o).map(Some),
                (object, _) => Ok(object.clone()),
            }
        };
        let object = convert(&attributes.object)?;
        let old_object = convert(&attributes.old_object)?;
        let request = cel::request(attributes, &invocation.resource, &invocation.kind);
        let activation = cel::activation(object.as_ref(), old_object.as_ref(), &request);
        let authorizer = cel::RequestAuthorizer::new(&self.authorizer, &attributes.user);
        let activation = cel::with_authorizer(activation, authorizer, attributes);
        let conditions = hook.match_conditions.clone();
        let matched = cel::evaluate_blocking(move || {
            let mut budget = extension_apiserver_machinery::cel::cost::Budget::admission();
            conditions.evaluate(&activation, &mut budget)
        })
        .await?;
        match matched {
            Matched::Yes => Ok(true),
            Matched::No(_) => Ok(false),
            Matched::Error(_) if hook.ignore_failures => Ok(false),
            Matched::Error(why) => {
                tracing::warn!(webhook = %hook.name, "failed evaluating match conditions, failing closed: {why}");
                Err(attributes.forbidden(why))
            }
        }
    }

    /// One mutating webhook; `Ok(true)` when it changed the object.
    async fn mutate(
        &self,
        hook: &Hook,
        invocation: &Invocation,
        attributes: &mut Attributes,
        at: Position,
    ) -> Result<bool> {
        let started = Instant::now();
        let outcome = self.call_and_patch(hook, invocation, attributes).await;
        observe(hook, "admit", attributes.operation, &outcome, started);
        let mutated = matches!(outcome, Ok(true));
        // In the field order of kube's `MutationAuditAnnotation`.
        let annotation = format!(
            r#"{{"configuration":{},"webhook":{},"mutated":{mutated}}}"#,
            json!(hook.configuration),
            json!(hook.name)
        );
        attributes.add_audit_annotation(&at.key(false), &annotation);
        settle(hook, outcome, attributes, at)
    }

    async fn call_and_patch(
        &self,
        hook: &Hook,
        invocation: &Invocation,
        attributes: &mut Attributes,
    ) -> std::result::Result<bool, CallError> {
        let (object, answer) = self.call(hook, invocation, attributes, true).await?;
        let Some(patch) = answer.patch.filter(|p| !is_empty_patch(p)) else {
            return Ok(false);
        };
        if answer.patch_type.as_deref() != Some("JSONPatch") {
            let kind = answer.patch_type.unwrap_or_default();
            return Err(CallError::Calling(format!(
                "unsupported patch type {kind:?}"
            )));
        }
        let Some(object) = object else {
            return Err(CallError::Other(internal(format!(
                "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                hook.name
            ))));
        };
        let patched = extension_apiserver_machinery::patch::apply_json_patch(&object, &patch)
            .map_err(|e| CallError::Other(internal(patch_error_text(e))))?;
        if patched == object {
            return Ok(false);
        }
        let stored = match &invocation.convertor {
            Some(convertor) => convertor
                .to_storage(&patched)
                .map_err(|e| CallError::Other(internal(e.message())))?,
            None => patched,
        };
        attributes.object = Some(stored);
        Ok(true)
    }

    /// One validating webhook.
    async fn validate(
        &self,
        hook: &Hook,
        invocation: Invocation,
        attributes: &Attributes,
        at: Position,
    ) -> Result<()> {
        let started = Instant::now();
        let outcome = self
            .call(hook, &invocation, attributes, false)
            .await
            .map(|_| false);
        observe(hook, "validating", attributes.operation, &outcome, started);
        settle(hook, outcome, attributes, at).map(|_| ())
    }

    /// Sends the review and reads the answer: its warnings and audit annotations are kept,
    /// a refusal is the webhook's Status. Returns the object as the webhook saw it.
    async fn call(
        &self,
        hook: &Hook,
        invocation: &Invocation,
        attributes: &Attributes,
        mutating: bool,
    ) -> std::result::Result<(Option<Value>, Answer), CallError> {
        if attributes.dry_run && !hook.dry_run_safe() {
            return Err(CallError::Other(Error::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                hook.name
            ))));
        }
        if !hook
            .review_versions
            .iter()
            .any(|v| v == review::REVIEW_VERSION)
        {
            return Err(CallError::Calling(
                "could not create admission objects: webhook does not accept known AdmissionReview versions".into(),
            ));
        }
        let convert = |object: &Option<Value>| -> std::result::Result<Option<Value>, CallError> {
            match (object, &invocation.convertor) {
                (Some(o), Some(c)) => c.to_served(o).map(Some).map_err(CallError::Other),
                (object, _) => Ok(object.clone()),
            }
        };
        let object = convert(&attributes.object)?;
        let old_object = convert(&attributes.old_object)?;
        let uid = uuid::Uuid::new_v4().to_string();
        let review = review::review(
            &uid,
            attributes,
            invocation,
            object.as_ref(),
            old_object.as_ref(),
        );
        let answer = self
            .clients
            .call(hook, &review)
            .await
            .map_err(CallError::Calling)?;
        let answer = review::verify(&uid, mutating, &answer)
            .map_err(|e| CallError::Calling(format!("received invalid webhook response: {e}")))?;
        for (key, value) in &answer.audit_annotations {
            attributes.add_audit_annotation(&format!("{}/{key}", hook.name), value);
        }
        for warning in &answer.warnings {
            attributes.warn(warning.clone());
        }
        if !answer.allowed {
            return Err(CallError::Other(denied(&hook.name, answer.result.as_ref())));
        }
        Ok((object, answer))
    }
}

/// The failure policy: a failed call is 500 with `Fail`, logged and skipped with `Ignore`.
fn settle(
    hook: &Hook,
    outcome: std::result::Result<bool, CallError>,
    attributes: &Attributes,
    at: Position,
) -> Result<bool> {
    match outcome {
        Ok(changed) => Ok(changed),
        Err(CallError::Other(e)) => Err(e),
        Err(CallError::Calling(reason)) => {
            let message = format!("failed calling webhook {:?}: {reason}", hook.name);
            if hook.ignore_failures {
                attributes.add_audit_annotation(&at.key(true), &hook.name);
                tracing::warn!(webhook = %hook.name, configuration = %hook.configuration, "failing open: {message}");
                return Ok(false);
            }
            tracing::warn!(webhook = %hook.name, configuration = %hook.configuration, "failing closed: {message}");
            Err(internal(message))
        }
    }
}

/// kube's `ToStatusErr`: the webhook's Status, its code at least 400, its message prefixed.
fn denied(name: &str, result: Option<&Value>) -> Error {
    let empty = Value::Null;
    let result = result.unwrap_or(&empty);
    let code = result["code"]
        .as_u64()
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400) as u16;
    let denied_by = format!("admission webhook {name:?} denied the request");
    let message = result["message"].as_str().filter(|m| !m.is_empty());
    let reason = result["reason"].as_str().unwrap_or_default();
    let message = match (message, reason) {
        (Some(message), _) => format!("{denied_by}: {message}"),
        (None, reason) if !reason.is_empty() => format!("{denied_by}: {reason}"),
        _ => format!("{denied_by} without explanation"),
    };
    let error = Error::new(code, reason, message);
    match serde_json::from_value::<StatusDetails>(result["details"].clone()) {
        Ok(details) => error.with_details(details),
        Err(_) => error,
    }
}

/// kube's `NewInternalError`: 500 with the message as the one cause.
fn internal(message: impl Into<String>) -> Error {
    let message = message.into();
    Error::internal(&message).with_details(StatusDetails {
        name: String::new(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: vec![StatusCause {
            reason: String::new(),
            message,
            field: String::new(),
        }],
        retry_after_seconds: 0,
    })
}

fn patch_error_text(e: extension_apiserver_machinery::patch::PatchError) -> String {
    use extension_apiserver_machinery::patch::PatchError;
    match e {
        PatchError::Malformed(s) | PatchError::Invalid(s) | PatchError::Failed(s) => s,
        other => other.to_string(),
    }
}

/// `[]` or nothing: no change, as kube skips an empty patch.
fn is_empty_patch(patch: &[u8]) -> bool {
    serde_json::from_slice::<Vec<Value>>(patch).is_ok_and(|ops| ops.is_empty())
}

/// kube's `apiserver_admission_webhook_admission_duration_seconds`.
fn observe<T>(
    hook: &Hook,
    step: &str,
    operation: Operation,
    outcome: &std::result::Result<T, CallError>,
    started: Instant,
) {
    let rejected = match outcome {
        Ok(_) => false,
        Err(CallError::Calling(_)) => !hook.ignore_failures,
        Err(CallError::Other(_)) => true,
    };
    crate::metrics::global()
        .webhook_duration
        .with_label_values(&[
            hook.name.as_str(),
            step,
            operation.as_str(),
            if rejected { "true" } else { "false" },
        ])
        .observe(started.elapsed().as_secs_f64());
}
