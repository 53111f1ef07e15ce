//! Audit, as kube-apiserver's: a [`Policy`] (`--audit-policy-file`) sets the [`Level`] of
//! each request, and `audit.k8s.io/v1` [`Event`]s are written at each [`Stage`] to the
//! backends: a log file with rotation ([`log`], `--audit-log-path`) and a webhook fed from a
//! bounded buffer in batches ([`webhook`], `--audit-webhook-config-file`).
//!
//! The filter step that records a request (`filters::audit`) keeps a [`RequestAudit`] in the
//! request's extensions; later stages add annotations to its events through
//! [`AuditAnnotations`] (the authorizer's decision, admission plugins). Below every stage but
//! the filters: it knows nothing of HTTP routing, endpoints or the registry.

pub mod log;
pub(crate) mod options;
pub(crate) mod policy;
pub(crate) mod types;
pub mod webhook;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

// Each part's public items, under this module's name (the parts themselves are private).
pub use options::AuditOptions;
pub use policy::*;
pub use policy::{Attributes, RequestAuditConfig};
pub use types::*;
pub use types::{
    Event, EventList, GroupResources, Level, ObjectReference, Policy, PolicyRule, ResponseStatus,
    Stage, UserInfo,
};

/// Why audit could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The policy file is unreadable or invalid.
    #[error("audit policy {path}: {reason}")]
    Policy {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The log file cannot be opened.
    #[error("audit log {path}: {reason}")]
    Log {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The webhook's kubeconfig is unreadable or invalid.
    #[error("audit webhook config {path}: {reason}")]
    Webhook {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// An option has a value this server does not support.
    #[error("{0}")]
    Unsupported(String),
}

/// Where events go. `process` must not block for long: it runs on the request's path.
pub trait AuditBackend: Send + Sync {
    /// The plugin name (`log`, `webhook`), as in `apiserver_audit_error_total{plugin}`.
    fn name(&self) -> &'static str;

    /// Takes one event.
    fn process(&self, event: &Event);

    /// The task that ends once what the backend buffered is sent (after shutdown), if any.
    fn flushed(&self) -> Option<tokio::task::JoinHandle<()>> {
        None
    }
}

/// kube's `HandlePluginError`: counts `impacted` events lost by `plugin` and logs why.
pub(crate) fn plugin_error(plugin: &str, error: &dyn std::fmt::Display, impacted: usize) {
    tracing::error!(plugin, impacted, error = %error, "audit events lost");
    crate::metrics::global()
        .audit_errors
        .with_label_values(&[plugin])
        .inc_by(impacted as u64);
}

/// The policy and the backends of a server.
pub struct Auditor {
    policy: Policy,
    backends: Vec<Arc<dyn AuditBackend>>,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.backends.iter().map(|b| b.name()).collect();
        f.debug_struct("Auditor")
            .field("rules", &self.policy.rules.len())
            .field("backends", &names)
            .finish()
    }
}

impl Auditor {
    /// Events of requests `policy` selects, to `backends`.
    pub fn new(policy: Policy, backends: Vec<Arc<dyn AuditBackend>>) -> Self {
        Self { policy, backends }
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Hands `event` to every backend (`apiserver_audit_event_total`).
    pub fn process(&self, event: &Event) {
        crate::metrics::global()
            .audit_events
            .with_label_values::<&str>(&[])
            .inc();
        for backend in &self.backends {
            backend.process(event);
        }
    }

    /// Waits until buffering backends have sent what they hold (they stop on shutdown).
    pub async fn flushed(&self) {
        for backend in &self.backends {
            if let Some(task) = backend.flushed() {
                let _ = task.await;
            }
        }
    }
}

/// The time as events carry it: RFC 3339 with microseconds (`metav1.MicroTime`).
pub fn micro_time(time: jiff::Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// One request's audit: its event, filled in as the request goes, and what the policy chose.
pub struct RequestAudit {
    auditor: Arc<Auditor>,
    state: Mutex<RequestState>,
}

struct RequestState {
    event: Event,
    config: Option<RequestAuditConfig>,
}

impl std::fmt::Debug for RequestAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestAudit").finish_non_exhaustive()
    }
}

impl RequestAudit {
    /// A request's audit starting from `event` (level and stage are set later).
    pub fn new(auditor: Arc<Auditor>, event: Event) -> Arc<Self> {
        Arc::new(Self {
            auditor,
            state: Mutex::new(RequestState {
                event,
                config: None,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, RequestState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the policy about the request; its level.
    pub fn evaluate(&self, attributes: &Attributes<'_>) -> Level {
        let config = self.auditor.policy.evaluate(attributes);
        let level = config.level;
        let mut state = self.state();
        state.event.level = level;
        state.config = Some(config);
        level
    }

    /// The level the policy chose, `None` before [`evaluate`](Self::evaluate).
    pub fn level(&self) -> Option<Level> {
        self.state().config.as_ref().map(|c| c.level)
    }

    /// Changes the event.
    pub fn update(&self, change: impl FnOnce(&mut Event)) {
        change(&mut self.state().event);
    }

    /// Adds an annotation to the events still to come; the first value of a key stays, as
    /// kube's `AddAuditAnnotation` keeps it.
    pub fn annotate(&self, key: &str, value: &str) {
        let mut state = self.state();
        if let Some(existing) = state.event.annotations.get(key) {
            if existing != value {
                tracing::warn!(key, existing, value, "audit annotation already set");
            }
            return;
        }
        state.event.annotations.insert(key.into(), value.into());
    }

    /// Writes the event at `stage`, unless the level is `None` or the stage is omitted.
    pub fn emit(&self, stage: Stage) {
        let event = {
            let mut state = self.state();
            let Some(config) = &state.config else { return };
            if config.level == Level::None || config.omit_stages.contains(&stage) {
                return;
            }
            let omit_managed_fields = config.omit_managed_fields;
            state.event.stage = stage;
            // As kube: RequestReceived is stamped with the time the request arrived.
            state.event.stage_timestamp = match stage {
                Stage::RequestReceived => state.event.request_received_timestamp.clone(),
                _ => micro_time(jiff::Timestamp::now()),
            };
            let mut event = state.event.clone();
            if omit_managed_fields {
                for object in [&mut event.request_object, &mut event.response_object]
                    .into_iter()
                    .flatten()
                {
                    remove_managed_fields(object);
                }
            }
            event
        };
        self.auditor.process(&event);
    }
}

/// Drops `metadata.managedFields` of an object, or of each item of a list.
fn remove_managed_fields(object: &mut serde_json::Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
    if let Some(items) = object.get_mut("items").and_then(|i| i.as_array_mut()) {
        items.iter_mut().for_each(remove_managed_fields);
    }
}

/// Adds annotations to the audit events of the request whose extensions it came from (a
/// no-op when the request is not audited). Admission plugins get one in their request.
#[derive(Clone, Debug, Default)]
pub struct AuditAnnotations(Option<Arc<RequestAudit>>);

impl AuditAnnotations {
    /// The annotations of the request with these extensions.
    pub fn of(extensions: &http::Extensions) -> Self {
        Self(extensions.get::<Arc<RequestAudit>>().cloned())
    }

    /// Adds `key: value` to the events still to come (the first value of a key stays).
    pub fn add(&self, key: &str, value: &str) {
        if let Some(audit) = &self.0 {
            audit.annotate(key, value);
        }
    }
}

/// An event as the request starts: nothing decided yet.
pub fn new_event(audit_id: &str, request_uri: &str, verb: &str) -> Event {
    let now = micro_time(jiff::Timestamp::now());
    Event {
        kind: "Event".into(),
        api_version: types::API_VERSION.into(),
        level: Level::None,
        audit_id: audit_id.into(),
        stage: Stage::RequestReceived,
        request_uri: request_uri.into(),
        verb: verb.into(),
        user: UserInfo::default(),
        impersonated_user: None,
        source_ips: Vec::new(),
        user_agent: String::new(),
        object_ref: None,
        response_status: None,
        request_object: None,
        response_object: None,
        request_received_timestamp: now.clone(),
        stage_timestamp: now,
        annotations: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Mutex<Vec<Event>>);

    impl AuditBackend for Collect {
        fn name(&self) -> &'static str {
            "collect"
        }
        fn process(&self, event: &Event) {
            self.0.lock().unwrap().push(event.clone());
        }
    }

    #[test]
    fn events_follow_level_stages_and_annotations() {
        let policy: Policy = serde_norway::from_str(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitManagedFields: true\n\
             rules: [{level: RequestResponse, omitStages: [RequestReceived]}]",
        )
        .unwrap();
        let collect = Arc::new(Collect(Mutex::new(Vec::new())));
        let auditor = Arc::new(Auditor::new(policy, vec![collect.clone()]));
        let audit = RequestAudit::new(auditor, new_event("id", "/x", "get"));
        // Nothing is written before the policy is asked.
        audit.emit(Stage::ResponseComplete);
        assert_eq!(
            audit.evaluate(&Attributes::default()),
            Level::RequestResponse
        );
        audit.emit(Stage::RequestReceived);
        AuditAnnotations::of(&http::Extensions::new()).add("ignored", "x");
        let mut extensions = http::Extensions::new();
        extensions.insert(audit.clone());
        AuditAnnotations::of(&extensions).add("a", "1");
        AuditAnnotations::of(&extensions).add("a", "2");
        audit.update(|e| {
            e.response_object = Some(serde_json::json!({
                "metadata": {"name": "n", "managedFields": []}
            }))
        });
        audit.emit(Stage::ResponseComplete);
        let events = collect.0.lock().unwrap();
        assert_eq!(events.len(), 1);
        let json = serde_json::to_value(&events[0]).unwrap();
        assert_eq!(json["stage"], "ResponseComplete");
        assert_eq!(json["level"], "RequestResponse");
        assert_eq!(json["auditID"], "id");
        assert_eq!(json["annotations"], serde_json::json!({"a": "1"}));
        assert_eq!(
            json["responseObject"],
            serde_json::json!({"metadata": {"name": "n"}})
        );
        // kube's MicroTime: 2026-11-24T03:30:00.123456Z
        let stamp = json["stageTimestamp"].as_str().unwrap();
        assert_eq!(stamp.len(), "2026-11-24T03:30:00.123456Z".len(), "{stamp}");
    }
}
