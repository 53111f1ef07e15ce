//! Admission: checks a write passes after decoding and before storage, as the admission
//! chain of `k8s.io/apiserver`. [`Admission`] runs its [`AdmissionPlugin`]s in order; the
//! first refusal is the answer (a `Status`).
//!
//! Built in: [`NamespaceLifecycle`], on whenever the server has
//! a core kube-apiserver (turn it off with `--disable-admission-plugins=NamespaceLifecycle`).
//! [`build`] assembles the chain from the flags ([`AdmissionOptions`]).

pub mod namespace;
pub mod options;

use std::sync::Arc;
use tracing::Instrument;

use async_trait::async_trait;

use crate::error::Result;

pub use namespace::NamespaceLifecycle;
pub use options::{AdmissionOptions, AdmissionOptionsError};

/// The plugins built into the framework, as the admission flags name them.
pub const BUILT_IN_PLUGINS: &[&str] = &[namespace::NAME];

/// The server's admission chain from its flags: NamespaceLifecycle (on by default) when the
/// server has a core API to follow namespaces in.
pub fn build(
    options: &AdmissionOptions,
    core: Option<&kube::Client>,
    shutdown: &crate::lifecycle::ShutdownSignal,
) -> std::result::Result<Admission, AdmissionOptionsError> {
    options.validate(BUILT_IN_PLUGINS)?;
    let mut admission = Admission::new();
    if let Some(client) = core {
        if options.enabled(namespace::NAME, true) {
            admission = admission.with(NamespaceLifecycle::start(client.clone(), shutdown.clone()));
        }
    }
    Ok(admission)
}

/// The verb being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A create (POST).
    Create,
    /// An update or patch.
    Update,
    /// A delete.
    Delete,
}

/// What a plugin sees of a request.
#[derive(Clone, Debug)]
pub struct AdmissionRequest<'a> {
    /// The operation.
    pub operation: Operation,
    /// The API group of the resource.
    pub group: &'a str,
    /// The resource (plural), e.g. `flunders`.
    pub resource: &'a str,
    /// The subresource, empty for the main resource.
    pub subresource: &'a str,
    /// The namespace; empty for cluster-scoped resources.
    pub namespace: &'a str,
    /// The object's name (empty on a create with `generateName`).
    pub name: &'a str,
    /// Annotations a plugin adds to the request's audit events (kube's
    /// `AddAuditAnnotation`), e.g. `mutation.example.com/reason`.
    pub audit: crate::audit::AuditAnnotations,
}

/// One admission check.
#[async_trait]
pub trait AdmissionPlugin: Send + Sync {
    /// Its name, as `--disable-admission-plugins` takes it.
    fn name(&self) -> &str;

    /// `Ok` to let the request through, or the `Status` to refuse it with.
    async fn admit(&self, request: &AdmissionRequest<'_>) -> Result<()>;
}

/// The admission chain of a server.
#[derive(Clone, Default)]
pub struct Admission {
    plugins: Vec<Arc<dyn AdmissionPlugin>>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.plugins.iter().map(|p| p.name()).collect();
        f.debug_struct("Admission")
            .field("plugins", &names)
            .finish()
    }
}

impl Admission {
    /// No plugins: everything is admitted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a plugin at the end of the chain.
    pub fn with(mut self, plugin: Arc<dyn AdmissionPlugin>) -> Self {
        self.plugins.push(plugin);
        self
    }

    /// Whether the chain has no plugins.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// Runs every plugin; the first refusal wins.
    pub async fn admit(&self, request: &AdmissionRequest<'_>) -> Result<()> {
        let started = std::time::Instant::now();
        let verdict = async {
            for plugin in &self.plugins {
                plugin.admit(request).await?;
            }
            Ok(())
        }
        .instrument(tracing::debug_span!("admission"))
        .await;
        // kube's `apiserver_admission_step_admission_duration_seconds` of the validating step.
        let operation = match request.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        };
        let rejected = if verdict.is_err() { "true" } else { "false" };
        crate::metrics::global()
            .admission_duration
            .with_label_values(&["validate", operation, rejected])
            .observe(started.elapsed().as_secs_f64());
        verdict
    }
}
