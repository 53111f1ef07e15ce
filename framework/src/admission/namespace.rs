//! `NamespaceLifecycle`, as `k8s.io/apiserver`'s plugin of that name: a namespaced object may
//! only be created in a namespace that exists in the core cluster and is not being
//! terminated.
//!
//! The namespaces are followed with a list and watch on the core kube-apiserver; a name the
//! cache does not know is looked up live (it may have been created a moment ago). Refusals
//! are the `Status` objects kube-apiserver sends:
//!
//! - no such namespace: 404 `NotFound`, `namespaces "x" not found`;
//! - terminating: 403 `Forbidden`, `flunders.wardle.example.com "f" is forbidden: unable to
//!   create new content in namespace x because it is being terminated`, with a
//!   `NamespaceTerminating` cause on `metadata.namespace` (`namespace x is being terminated`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube_core::response::{StatusCause, StatusDetails};

use crate::admission::{AdmissionPlugin, AdmissionRequest, Operation};
use crate::error::{Error, Result};
use crate::server::serve::ShutdownSignal;

/// The plugin's name.
pub const NAME: &str = "NamespaceLifecycle";

/// Server-side timeout of one watch request on the namespaces.
const WATCH_TIMEOUT_SECONDS: u32 = 290;
/// Pause before listing again after the watch failed.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Cache {
    synced: bool,
    /// Name → `status.phase`.
    phases: HashMap<String, String>,
}

/// The plugin; see the module documentation.
pub struct NamespaceLifecycle {
    api: Api<Namespace>,
    cache: Arc<RwLock<Cache>>,
}

impl NamespaceLifecycle {
    /// Starts following the namespaces of the core API behind `client` until `shutdown`.
    pub fn start(client: kube::Client, shutdown: ShutdownSignal) -> Arc<Self> {
        let plugin = Arc::new(Self {
            api: Api::all(client),
            cache: Arc::new(RwLock::new(Cache::default())),
        });
        let api = plugin.api.clone();
        let cache = plugin.cache.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = follow(api, cache) => {}
                _ = shutdown.cancelled() => {}
            }
        });
        plugin
    }

    /// The phase of `namespace` from the cache, then from the core API; `None` if it does not
    /// exist.
    async fn phase(&self, namespace: &str) -> Result<Option<String>> {
        if let Some(phase) = read(&self.cache).phases.get(namespace) {
            return Ok(Some(phase.clone()));
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
        read(&self.cache).synced
    }
}

fn read(cache: &RwLock<Cache>) -> std::sync::RwLockReadGuard<'_, Cache> {
    cache.read().unwrap_or_else(|e| e.into_inner())
}

fn write(cache: &RwLock<Cache>) -> std::sync::RwLockWriteGuard<'_, Cache> {
    cache.write().unwrap_or_else(|e| e.into_inner())
}

fn phase_of(ns: &Namespace) -> String {
    ns.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Active".into())
}

/// List, then watch from the list's resourceVersion; list again when the watch ends badly.
/// Ends only when the task is dropped (at shutdown).
async fn follow(api: Api<Namespace>, cache: Arc<RwLock<Cache>>) {
    loop {
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!("listing namespaces for NamespaceLifecycle: {e}");
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        let mut version = list.metadata.resource_version.clone().unwrap_or_default();
        {
            let mut cache = write(&cache);
            cache.phases = list
                .items
                .iter()
                .filter_map(|ns| Some((ns.metadata.name.clone()?, phase_of(ns))))
                .collect();
            cache.synced = true;
        }
        // Watch until it fails; a clean end (the server's timeout) watches again from where
        // it stopped.
        'watch: loop {
            let params = WatchParams::default().timeout(WATCH_TIMEOUT_SECONDS);
            let stream = match api.watch(&params, &version).await {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::debug!("watching namespaces: {e}");
                    break 'watch;
                }
            };
            let mut stream = stream.boxed();
            loop {
                match stream.try_next().await {
                    Ok(Some(event)) => match event {
                        WatchEvent::Added(ns) | WatchEvent::Modified(ns) => {
                            version = ns.metadata.resource_version.clone().unwrap_or(version);
                            if let Some(name) = ns.metadata.name.clone() {
                                write(&cache).phases.insert(name, phase_of(&ns));
                            }
                        }
                        WatchEvent::Deleted(ns) => {
                            version = ns.metadata.resource_version.clone().unwrap_or(version);
                            if let Some(name) = &ns.metadata.name {
                                write(&cache).phases.remove(name);
                            }
                        }
                        WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                        WatchEvent::Error(e) => {
                            tracing::debug!("namespace watch error: {}", e.message);
                            break 'watch;
                        }
                    },
                    Ok(None) => continue 'watch,
                    Err(e) => {
                        tracing::debug!("namespace watch stream: {e}");
                        break 'watch;
                    }
                }
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

#[async_trait]
impl AdmissionPlugin for NamespaceLifecycle {
    fn name(&self) -> &str {
        NAME
    }

    async fn admit(&self, request: &AdmissionRequest<'_>) -> Result<()> {
        if request.operation != Operation::Create || request.namespace.is_empty() {
            return Ok(());
        }
        match self.phase(request.namespace).await? {
            None => Err(namespace_not_found(request.namespace)),
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
pub fn namespace_terminating(request: &AdmissionRequest<'_>) -> Error {
    let why = format!(
        "unable to create new content in namespace {} because it is being terminated",
        request.namespace
    );
    let resource = if request.group.is_empty() {
        request.resource.to_string()
    } else {
        format!("{}.{}", request.resource, request.group)
    };
    let message = if request.name.is_empty() {
        format!("{resource} is forbidden: {why}")
    } else {
        format!("{resource} \"{}\" is forbidden: {why}", request.name)
    };
    Error::new(403, "Forbidden", message).with_details(StatusDetails {
        name: request.name.to_string(),
        group: request.group.to_string(),
        kind: request.resource.to_string(),
        causes: vec![StatusCause {
            reason: "NamespaceTerminating".into(),
            message: format!("namespace {} is being terminated", request.namespace),
            field: "metadata.namespace".into(),
        }],
        uid: String::new(),
        retry_after_seconds: 0,
    })
}
