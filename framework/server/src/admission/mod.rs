//! Admission: what a write must pass after it is decoded and before it is stored, as the
//! admission chain of `k8s.io/apiserver`.
//!
//! A plugin ([`AdmissionPlugin`]) validates ([`validate`](AdmissionPlugin::validate)); one
//! whose type is a [`MutatingAdmissionPlugin`] mutates too
//! ([`admit`](MutatingAdmissionPlugin::admit)). The [`Admission`] chain runs every
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
//! and after the server's own plugins [`MutatingAdmissionPolicy`], which applies the
//! cluster's MutatingAdmissionPolicies when its API serves them ([`policy::mutating`]),
//! [`MutatingAdmissionWebhook`] and [`ValidatingAdmissionWebhook`], which call the cluster's
//! admission webhooks ([`webhook`]), then [`ValidatingAdmissionPolicy`], which evaluates the
//! cluster's ValidatingAdmissionPolicies in CEL ([`policy`]). Plugins of your own are added with
//! [`APIServer::admission_plugin`](crate::server::APIServer::admission_plugin); all of them
//! are named, and `--enable-admission-plugins` / `--disable-admission-plugins` take the names
//! ([`AdmissionOptions`]).

pub(crate) mod attributes;
pub(crate) mod cel;
pub(crate) mod namespace;
pub(crate) mod objects;
pub(crate) mod options;
pub mod policy;
pub mod webhook;

use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;

use crate::error::Result;

// Each part's public items, under this module's name (the parts themselves are private).
pub use attributes::*;
pub use attributes::{AdmissionContext, Attributes, EquivalentResource, Operation};
pub use cel::AdmissionAuthorizer;
pub use namespace::*;
pub use namespace::{CoreNamespaces, NamespaceLifecycle};
pub use objects::{ObjectReader, OwnObjects};
pub use options::{AdmissionOptions, AdmissionOptionsError};
pub use policy::ValidatingAdmissionPolicy;
pub use policy::mutating::MutatingAdmissionPolicy;
pub use webhook::{MutatingAdmissionWebhook, ValidatingAdmissionWebhook};

/// The plugins built into the framework, as the admission flags name them.
pub const BUILT_IN_PLUGINS: &[&str] = &[
    namespace::NAME,
    policy::mutating::NAME,
    webhook::MUTATING,
    webhook::VALIDATING,
    policy::NAME,
];

/// One admission plugin, as kube's `admission.Interface` with its `ValidationInterface`: it
/// looks at the requests it [`handles`](Self::handles) and may refuse them in
/// [`validate`](Self::validate). A plugin that also changes the object implements
/// [`MutatingAdmissionPlugin`] as well: whether a plugin mutates is stated by its type, and
/// the chain knows it from the [`Plugin`] it was added as.
///
/// ```
/// use extension_apiserver::admission::{AdmissionPlugin, Attributes, Operation, Plugin};
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
///     async fn validate(&self, attributes: &Attributes) -> extension_apiserver::Result<()> {
///         if attributes.name.starts_with("tmp-") {
///             return Err(attributes.forbidden("temporary names are not allowed"));
///         }
///         Ok(())
///     }
/// }
///
/// let plugin = Plugin::validating(NoTemporaryNames);
/// assert!(!plugin.mutates());
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

    /// Judges the request, object as it will be stored (kube's `Validate`); `Err` refuses it.
    async fn validate(&self, attributes: &Attributes) -> Result<()> {
        let _ = attributes;
        Ok(())
    }
}

/// A plugin that changes the object under admission (kube's `MutationInterface`), added to
/// the chain with [`Plugin::mutating`]: the chain runs [`admit`](Self::admit) of these
/// plugins, in order, before any plugin's [`validate`](AdmissionPlugin::validate), and skips
/// the mutating step's work (the object encoded for the plugins) when none handles the
/// request.
#[async_trait]
pub trait MutatingAdmissionPlugin: AdmissionPlugin {
    /// Mutates the request's object (kube's `Admit`); `Err` refuses the request.
    async fn admit(&self, attributes: &mut Attributes) -> Result<()>;

    /// Whether [`reinvoke`](Self::reinvoke) may do anything (the chain then keeps what this
    /// plugin left, to compare); by default not.
    fn reinvocable(&self) -> bool {
        false
    }

    /// Called once after the whole mutating step when a later plugin changed the object this
    /// plugin left (kube's reinvocation, which MutatingAdmissionPolicy's `reinvocationPolicy:
    /// IfNeeded` asks for); by default nothing is done again.
    async fn reinvoke(&self, attributes: &mut Attributes) -> Result<()> {
        let _ = attributes;
        Ok(())
    }
}

/// A plugin as the chain holds it: what its type implements, validating only
/// ([`Plugin::validating`]) or mutating too ([`Plugin::mutating`]).
#[derive(Clone)]
pub struct Plugin {
    plugin: Arc<dyn AdmissionPlugin>,
    mutating: Option<Arc<dyn MutatingAdmissionPlugin>>,
}

impl Plugin {
    /// A plugin that only validates.
    pub fn validating(plugin: impl AdmissionPlugin + 'static) -> Self {
        Self::shared_validating(Arc::new(plugin))
    }

    /// A plugin that mutates, and validates as its [`AdmissionPlugin`] says.
    pub fn mutating(plugin: impl MutatingAdmissionPlugin + 'static) -> Self {
        Self::shared_mutating(Arc::new(plugin))
    }

    /// [`validating`](Self::validating), of a plugin already shared.
    pub fn shared_validating<P: AdmissionPlugin + 'static>(plugin: Arc<P>) -> Self {
        Self {
            plugin,
            mutating: None,
        }
    }

    /// [`mutating`](Self::mutating), of a plugin already shared.
    pub fn shared_mutating<P: MutatingAdmissionPlugin + 'static>(plugin: Arc<P>) -> Self {
        Self {
            plugin: plugin.clone(),
            mutating: Some(plugin),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.plugin.name()
    }

    /// Whether it was added as a mutating plugin.
    pub fn mutates(&self) -> bool {
        self.mutating.is_some()
    }
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name())
            .field("mutates", &self.mutates())
            .finish()
    }
}

/// The admission chain of a server: its plugins, in order.
#[derive(Clone, Default)]
pub struct Admission {
    plugins: Arc<[Plugin]>,
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
    pub fn with(self, plugin: Plugin) -> Self {
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
        self.plugins.iter().map(Plugin::name).collect()
    }

    /// Whether a plugin looks at `operation`.
    pub fn handles(&self, operation: Operation) -> bool {
        self.plugins.iter().any(|p| p.plugin.handles(operation))
    }

    /// Whether a plugin that mutates looks at `operation`.
    pub fn mutates(&self, operation: Operation) -> bool {
        self.plugins
            .iter()
            .any(|p| p.mutates() && p.plugin.handles(operation))
    }

    /// Runs every mutating plugin's [`admit`](MutatingAdmissionPlugin::admit) in order; the
    /// first refusal wins.
    pub async fn admit(&self, attributes: &mut Attributes) -> Result<()> {
        let operation = attributes.operation;
        let started = std::time::Instant::now();
        let verdict = async {
            let mutating: Vec<_> = self
                .plugins
                .iter()
                .filter_map(|p| p.mutating.as_ref())
                .filter(|p| p.handles(operation))
                .collect();
            // What each plugin left, to know whom a later plugin's change concerns.
            let mut left = Vec::with_capacity(mutating.len());
            for plugin in &mutating {
                plugin.admit(attributes).await?;
                left.push(plugin.reinvocable().then(|| attributes.object.clone()));
            }
            // kube's reinvocation: once, in order, each plugin whose output a later one
            // changed.
            for (plugin, left) in mutating.iter().zip(left) {
                if left.is_some_and(|left| left != attributes.object) {
                    plugin.reinvoke(attributes).await?;
                }
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
            for plugin in self.plugins.iter().filter(|p| p.plugin.handles(operation)) {
                plugin.plugin.validate(attributes).await?;
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
/// the order they were added, then, with a core API, MutatingAdmissionPolicy,
/// MutatingAdmissionWebhook, ValidatingAdmissionWebhook and ValidatingAdmissionPolicy (so
/// webhooks and policies run
/// after the in-process plugins of their step, as kube orders its validating plugins), each
/// on unless disabled. CEL's `authorizer` asks `authorizer` (the server's: always-allowed
/// groups, then SubjectAccessReview when delegated). A policy's params of a kind the server serves are
/// read from `objects`, in process.
pub fn build(
    options: &AdmissionOptions,
    core: Option<&kube::Client>,
    shutdown: &crate::lifecycle::ShutdownSignal,
    own: Vec<Plugin>,
    authorizer: AdmissionAuthorizer,
    objects: OwnObjects,
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
    let wanted = BUILT_IN_PLUGINS;
    // One follower of the core cluster's namespaces for every plugin that reads them.
    let namespaces = core
        .filter(|_| wanted.iter().any(|name| options.enabled(name, true)))
        .map(|client| CoreNamespaces::follow(client.clone(), shutdown.clone()));
    if let Some(namespaces) = &namespaces {
        if options.enabled(namespace::NAME, true) {
            let plugin = NamespaceLifecycle::new(namespaces.clone());
            admission = admission.with(Plugin::shared_validating(plugin));
        }
    }
    for plugin in own {
        if options.enabled(plugin.name(), true) {
            admission = admission.with(plugin);
        }
    }
    if let (Some(client), Some(namespaces)) = (core, namespaces) {
        // kube's RecommendedPluginOrder: MutatingAdmissionPolicy, then the webhooks.
        if options.enabled(policy::mutating::NAME, true) {
            let plugin = MutatingAdmissionPolicy::start(
                client.clone(),
                namespaces.clone(),
                authorizer.clone(),
                objects.clone(),
                shutdown.clone(),
            );
            admission = admission.with(Plugin::shared_mutating(plugin));
        }
        let core = (client, &namespaces, authorizer.clone());
        admission = with_webhooks(admission, options, core, shutdown);
        if options.enabled(policy::NAME, true) {
            let plugin = ValidatingAdmissionPolicy::start(
                client.clone(),
                namespaces.clone(),
                authorizer,
                objects,
                shutdown.clone(),
            );
            admission = admission.with(Plugin::shared_validating(plugin));
        }
    }
    Ok(admission)
}

/// The webhook plugins that are not disabled, following their configurations in the core API.
fn with_webhooks(
    mut admission: Admission,
    options: &AdmissionOptions,
    (client, namespaces, authorizer): (&kube::Client, &CoreNamespaces, AdmissionAuthorizer),
    shutdown: &crate::lifecycle::ShutdownSignal,
) -> Admission {
    let mutating = options.enabled(webhook::MUTATING, true);
    let validating = options.enabled(webhook::VALIDATING, true);
    if !mutating && !validating {
        return admission;
    }
    let context = webhook::WebhookContext::new(namespaces.clone(), authorizer);
    if mutating {
        let plugin =
            MutatingAdmissionWebhook::start(client.clone(), context.clone(), shutdown.clone());
        admission = admission.with(Plugin::shared_mutating(plugin));
    }
    if validating {
        let plugin = ValidatingAdmissionWebhook::start(client.clone(), context, shutdown.clone());
        admission = admission.with(Plugin::shared_validating(plugin));
    }
    admission
}
