//! Admission: what a write must pass after it is decoded and before it is stored, as the
//! admission chain of `k8s.io/apiserver`.
//!
//! A plugin ([`AdmissionPlugin`]) may mutate ([`admit`](AdmissionPlugin::admit)) and may
//! validate ([`validate`](AdmissionPlugin::validate)). The [`Admission`] chain runs every
//! plugin's `admit` in order, then every plugin's `validate`; the first refusal is the answer
//! (a `Status`). The generic store runs the chain on every write verb — create, update, patch
//! (on the patched object), delete, deletecollection (per object), status and scale writes —
//! inside its retry loop, so plugins judge exactly the object being written:
//!
//! | operation | `object` | `old_object` | mutating runs | validating runs |
//! |---|---|---|---|---|
//! | CREATE | the new object, defaulted | – | before the type's strategy | after it, on the object as stored (name generated, uid set) |
//! | UPDATE (update, patch, status, scale) | the new object | the stored one | on each attempt, before the strategy | after it |
//! | DELETE | – | – for mutating; the stored object for validating | once | on each attempt, per object of a deletecollection |
//!
//! Objects are JSON in the storage version (the scale subresource's are `autoscaling/v1`
//! `Scale`s); a plugin of one resource reads them typed with
//! [`Attributes::object_as`] and writes them back with [`Attributes::set_object`].
//!
//! Built in, on whenever the server has a core kube-apiserver: [`NamespaceLifecycle`] first,
//! and after the server's own plugins [`MutatingAdmissionWebhook`] and
//! [`ValidatingAdmissionWebhook`], which call the cluster's admission webhooks
//! ([`webhook`]). Plugins of your own are added with
//! [`APIServer::admission_plugin`](crate::server::APIServer::admission_plugin); all of them
//! are named, and `--enable-admission-plugins` / `--disable-admission-plugins` take the names
//! ([`AdmissionOptions`]).

pub mod attributes;
pub mod namespace;
pub mod options;
pub mod webhook;

use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;

use crate::error::Result;

pub use attributes::{AdmissionContext, Attributes, EquivalentResource, Operation};
pub use namespace::{CoreNamespaces, NamespaceLifecycle};
pub use options::{AdmissionOptions, AdmissionOptionsError};
pub use webhook::{MutatingAdmissionWebhook, ValidatingAdmissionWebhook};

/// The plugins built into the framework, as the admission flags name them.
pub const BUILT_IN_PLUGINS: &[&str] = &[namespace::NAME, webhook::MUTATING, webhook::VALIDATING];

/// One admission plugin, as kube's `admission.Interface` with its optional
/// `MutationInterface` and `ValidationInterface`: every method but [`name`](Self::name) has a
/// default that does nothing.
///
/// ```
/// use extension_apiserver::admission::{AdmissionPlugin, Attributes, Operation};
/// use extension_apiserver::async_trait;
///
/// /// Refuses names that start with "tmp-".
/// struct NoTemporaryNames;
///
/// #[async_trait]
/// impl AdmissionPlugin for NoTemporaryNames {
///     fn name(&self) -> &str {
///         "NoTemporaryNames"
///     }
///     fn handles(&self, operation: Operation) -> bool {
///         operation == Operation::Create
///     }
///     fn mutates(&self) -> bool {
///         false
///     }
///     async fn validate(&self, attributes: &Attributes) -> extension_apiserver::Result<()> {
///         if attributes.name.starts_with("tmp-") {
///             return Err(attributes.forbidden("temporary names are not allowed"));
///         }
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait AdmissionPlugin: Send + Sync {
    /// Its name, as `--disable-admission-plugins` takes it.
    fn name(&self) -> &str;

    /// Whether it looks at requests of `operation` at all (kube's `Handles`).
    fn handles(&self, operation: Operation) -> bool {
        let _ = operation;
        true
    }

    /// Whether it mutates: `false` for a plugin that only validates (kube's plugins that
    /// implement no `MutationInterface`), so that the store skips the mutating step's work
    /// (the object encoded for the plugins) when no plugin mutates.
    fn mutates(&self) -> bool {
        true
    }

    /// Mutates the request's object (kube's `Admit`); `Err` refuses the request.
    async fn admit(&self, attributes: &mut Attributes) -> Result<()> {
        let _ = attributes;
        Ok(())
    }

    /// Judges the request, object as it will be stored (kube's `Validate`); `Err` refuses it.
    async fn validate(&self, attributes: &Attributes) -> Result<()> {
        let _ = attributes;
        Ok(())
    }
}

/// The admission chain of a server: its plugins, in order.
#[derive(Clone, Default)]
pub struct Admission {
    plugins: Arc<[Arc<dyn AdmissionPlugin>]>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("plugins", &self.names())
            .finish()
    }
}

impl Admission {
    /// No plugins: everything is admitted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a plugin at the end of the chain.
    pub fn with(self, plugin: Arc<dyn AdmissionPlugin>) -> Self {
        let mut plugins = self.plugins.to_vec();
        plugins.push(plugin);
        Self {
            plugins: plugins.into(),
        }
    }

    /// Whether the chain has no plugins.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// The plugins' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// Whether a plugin looks at `operation`.
    pub fn handles(&self, operation: Operation) -> bool {
        self.plugins.iter().any(|p| p.handles(operation))
    }

    /// Whether a plugin that mutates looks at `operation`.
    pub fn mutates(&self, operation: Operation) -> bool {
        self.plugins
            .iter()
            .any(|p| p.mutates() && p.handles(operation))
    }

    /// Runs every plugin's [`admit`](AdmissionPlugin::admit) in order; the first refusal wins.
    pub async fn admit(&self, attributes: &mut Attributes) -> Result<()> {
        let operation = attributes.operation;
        let started = std::time::Instant::now();
        let verdict = async {
            let mutating = self.plugins.iter().filter(|p| p.mutates());
            for plugin in mutating.filter(|p| p.handles(operation)) {
                plugin.admit(attributes).await?;
            }
            Ok(())
        }
        .instrument(crate::spans::child_span!("admission", step = "admit"))
        .await;
        observe("admit", operation, &verdict, started);
        verdict
    }

    /// Runs every plugin's [`validate`](AdmissionPlugin::validate); the first refusal wins.
    pub async fn validate(&self, attributes: &Attributes) -> Result<()> {
        let operation = attributes.operation;
        let started = std::time::Instant::now();
        let verdict = async {
            for plugin in self.plugins.iter().filter(|p| p.handles(operation)) {
                plugin.validate(attributes).await?;
            }
            Ok(())
        }
        .instrument(crate::spans::child_span!("admission", step = "validate"))
        .await;
        observe("validate", operation, &verdict, started);
        verdict
    }
}

/// kube's `apiserver_admission_step_admission_duration_seconds`.
fn observe(step: &str, operation: Operation, verdict: &Result<()>, started: std::time::Instant) {
    let rejected = if verdict.is_err() { "true" } else { "false" };
    crate::metrics::global()
        .admission_duration
        .with_label_values(&[step, operation.as_str(), rejected])
        .observe(started.elapsed().as_secs_f64());
}

/// The server's admission chain from its flags: NamespaceLifecycle (on by default) when the
/// server has a core API to follow namespaces in, then the server's own plugins (`own`) in
/// the order they were added, then, with a core API, MutatingAdmissionWebhook and
/// ValidatingAdmissionWebhook (so webhooks run after the in-process plugins of their step),
/// each on unless disabled.
pub fn build(
    options: &AdmissionOptions,
    core: Option<&kube::Client>,
    shutdown: &crate::lifecycle::ShutdownSignal,
    own: Vec<Arc<dyn AdmissionPlugin>>,
) -> std::result::Result<Admission, AdmissionOptionsError> {
    let mut known: Vec<&str> = BUILT_IN_PLUGINS.to_vec();
    for plugin in &own {
        if known.contains(&plugin.name()) {
            return Err(AdmissionOptionsError::Duplicate(plugin.name().into()));
        }
        known.push(plugin.name());
    }
    options.validate(&known)?;
    let mut admission = Admission::new();
    let wanted = [namespace::NAME, webhook::MUTATING, webhook::VALIDATING];
    // One follower of the core cluster's namespaces for every plugin that reads them.
    let namespaces = core
        .filter(|_| wanted.iter().any(|name| options.enabled(name, true)))
        .map(|client| CoreNamespaces::follow(client.clone(), shutdown.clone()));
    if let Some(namespaces) = &namespaces {
        if options.enabled(namespace::NAME, true) {
            admission = admission.with(NamespaceLifecycle::new(namespaces.clone()));
        }
    }
    for plugin in own {
        if options.enabled(plugin.name(), true) {
            admission = admission.with(plugin);
        }
    }
    if let (Some(client), Some(namespaces)) = (core, namespaces) {
        admission = with_webhooks(admission, options, client, namespaces, shutdown);
    }
    Ok(admission)
}

/// The webhook plugins that are not disabled, following their configurations in the core API.
fn with_webhooks(
    mut admission: Admission,
    options: &AdmissionOptions,
    client: &kube::Client,
    namespaces: CoreNamespaces,
    shutdown: &crate::lifecycle::ShutdownSignal,
) -> Admission {
    let mutating = options.enabled(webhook::MUTATING, true);
    let validating = options.enabled(webhook::VALIDATING, true);
    if !mutating && !validating {
        return admission;
    }
    let context = webhook::WebhookContext::new(namespaces);
    if mutating {
        let plugin =
            MutatingAdmissionWebhook::start(client.clone(), context.clone(), shutdown.clone());
        admission = admission.with(plugin);
    }
    if validating {
        let plugin = ValidatingAdmissionWebhook::start(client.clone(), context, shutdown.clone());
        admission = admission.with(plugin);
    }
    admission
}
