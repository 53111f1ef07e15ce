//! `NamespaceLifecycle`, as `k8s.io/apiserver`'s plugin of that name: a namespaced object may
//! only be created in a namespace that exists in the core cluster and is not being
//! terminated.
//!
//! The namespaces are followed with [`core_api::follow`] (list, watch, list again when the
//! watch's resourceVersion expires); a name the cache does not know is looked up live (it may
//! have been created a moment ago). Refusals are the `Status` objects kube-apiserver sends:
//!
//! - no such namespace: 404 `NotFound`, `namespaces "x" not found`;
//! - terminating: 403 `Forbidden`, `flunders.wardle.example.com "f" is forbidden: unable to
//!   create new content in namespace x because it is being terminated`, with a
//!   `NamespaceTerminating` cause on `metadata.namespace` (`namespace x is being terminated`).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube_core::response::{StatusCause, StatusDetails};

use crate::admission::{AdmissionPlugin, Attributes, Operation};
use crate::core_api::{self, Followed};
use crate::error::{Error, Result};
use crate::lifecycle::ShutdownSignal;

/// The plugin's name.
pub const NAME: &str = "NamespaceLifecycle";

/// The plugin; see the module documentation.
pub struct NamespaceLifecycle {
    api: Api<Namespace>,
    namespaces: Followed<Namespace>,
}

/// The core cluster's namespaces, followed once for every plugin that reads them (as kube's
/// plugins share one informer), with the API to look up one the cache does not know yet.
#[derive(Clone)]
pub struct CoreNamespaces {
    /// The namespaces' API.
    pub api: Api<Namespace>,
    /// The cache.
    pub followed: Followed<Namespace>,
}

impl CoreNamespaces {
    /// Starts following the namespaces of the core API behind `client` until `shutdown`.
    pub fn follow(client: kube::Client, shutdown: ShutdownSignal) -> Self {
        let api = Api::all(client);
        let followed = core_api::follow(
            api.clone(),
            watcher::Config::default(),
            "namespaces".into(),
            shutdown,
            |_| {},
        );
        Self { api, followed }
    }
}

impl NamespaceLifecycle {
    /// Starts following the namespaces of the core API behind `client` until `shutdown`.
    pub fn start(client: kube::Client, shutdown: ShutdownSignal) -> Arc<Self> {
        Self::new(CoreNamespaces::follow(client, shutdown))
    }

    /// The plugin over namespaces already followed.
    pub fn new(namespaces: CoreNamespaces) -> Arc<Self> {
        Arc::new(Self {
            api: namespaces.api,
            namespaces: namespaces.followed,
        })
    }

    /// The phase of `namespace` from the cache, then from the core API; `None` if it does not
    /// exist.
    async fn phase(&self, namespace: &str) -> Result<Option<String>> {
        let cached = self.namespaces.store().get(&ObjectRef::new(namespace));
        if let Some(ns) = cached {
            return Ok(Some(phase_of(&ns)));
        }
        match self.api.get_opt(namespace).await {
            Ok(found) => Ok(found.map(|ns| phase_of(&ns))),
            Err(e) => Err(Error::internal(format!(
                "looking up namespace {namespace:?} for admission: {e}"
            ))),
        }
    }

    /// Whether the first list of namespaces arrived.
    pub fn synced(&self) -> bool {
        self.namespaces.synced()
    }
}

fn phase_of(ns: &Namespace) -> String {
    ns.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Active".into())
}

#[async_trait]
impl AdmissionPlugin for NamespaceLifecycle {
    fn name(&self) -> &str {
        NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        operation == Operation::Create
    }

    async fn validate(&self, request: &Attributes) -> Result<()> {
        if request.namespace.is_empty() {
            return Ok(());
        }
        match self.phase(&request.namespace).await? {
            None => Err(namespace_not_found(&request.namespace)),
            Some(phase) if phase == "Terminating" => Err(namespace_terminating(request)),
            Some(_) => Ok(()),
        }
    }
}

/// 404 `namespaces "x" not found`, as `errors.NewNotFound(v1.Resource("namespaces"), x)`.
pub fn namespace_not_found(namespace: &str) -> Error {
    Error::new(
        404,
        "NotFound",
        format!("namespaces \"{namespace}\" not found"),
    )
    .with_details(StatusDetails {
        name: namespace.to_string(),
        group: String::new(),
        kind: "namespaces".into(),
        uid: String::new(),
        causes: Vec::new(),
        retry_after_seconds: 0,
    })
}

/// 403 as `errors.NewForbidden` with the `NamespaceTerminating` cause.
pub fn namespace_terminating(request: &Attributes) -> Error {
    let why = format!(
        "unable to create new content in namespace {} because it is being terminated",
        request.namespace
    );
    let mut error = request.forbidden(why);
    if let Some(details) = error.details_mut() {
        details.causes = vec![StatusCause {
            reason: "NamespaceTerminating".into(),
            message: format!("namespace {} is being terminated", request.namespace),
            field: "metadata.namespace".into(),
        }];
    }
    error
}
