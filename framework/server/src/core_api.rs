//! The connection to the cluster's *core* kube-apiserver, which a server in delegated mode asks
//! who a token belongs to (TokenReview), whether a user may act (SubjectAccessReview), reads the
//! `extension-apiserver-authentication` ConfigMap from, and registers its APIServices with.
//!
//! As in `k8s.io/apiserver`, a kubeconfig file selects it (`--kubeconfig`,
//! `--authentication-kubeconfig`, `--authorization-kubeconfig`); without one, a server running in
//! a pod uses the in-cluster configuration; outside a cluster there is none (standalone mode).
//!
//! Objects of the core API the server keeps up with (the authentication ConfigMap, the
//! namespaces) are followed with [`follow`], a kube-rs reflector: what client-go's informers do.

use std::fmt::Debug;
use std::hash::Hash;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::de::DeserializeOwned;

use crate::lifecycle::ShutdownSignal;

/// How long one call to the core kube-apiserver may take before it counts as failed; the
/// delegating authenticator and authorizer of `k8s.io/apiserver` use 10 s as well.
pub const CORE_API_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no client to the core kube-apiserver could be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreAPIError {
    /// The kubeconfig file could not be read or parsed.
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// The cause.
        source: kube::config::KubeconfigError,
    },
    /// The in-cluster configuration (service account token, CA) is unusable.
    #[error("in-cluster configuration: {0}")]
    InCluster(#[from] kube::config::InClusterError),
    /// The client could not be built from the configuration.
    #[error("building the core API client: {0}")]
    Client(#[from] kube::Error),
}

/// Where a client of the core kube-apiserver comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreAPISource {
    /// A kubeconfig file given on the command line.
    Kubeconfig,
    /// The pod's service account (`KUBERNETES_SERVICE_HOST` is set).
    InCluster,
}

/// A client of the core kube-apiserver from `kubeconfig`, or from the in-cluster configuration
/// when none is given and the process runs in a pod; `Ok(None)` outside a cluster without a
/// kubeconfig (standalone mode).
pub async fn core_client(
    kubeconfig: Option<&Path>,
) -> Result<Option<(kube::Client, CoreAPISource)>, CoreAPIError> {
    crate::tls::install_crypto_provider();
    let (mut config, source) = match kubeconfig {
        Some(path) => {
            let err = |source| CoreAPIError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let file = Kubeconfig::read_from(path).map_err(err)?;
            let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(err)?;
            (config, CoreAPISource::Kubeconfig)
        }
        None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            (kube::Config::incluster()?, CoreAPISource::InCluster)
        }
        None => return Ok(None),
    };
    config.connect_timeout = Some(CORE_API_TIMEOUT);
    let client = kube::Client::try_from(config)?;
    Ok(Some((client, source)))
}

/// Core-API objects a server follows (see [`follow`]): a cache that a background task keeps
/// current until shutdown.
pub struct Followed<K: kube::Resource + 'static>
where
    K::DynamicType: Eq + Hash,
{
    store: Store<K>,
    synced: Arc<AtomicBool>,
}

// By hand: a derive would ask `K: Clone` of the handle, which only shares the cache.
impl<K: kube::Resource + 'static> Clone for Followed<K>
where
    K::DynamicType: Eq + Hash,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K> Followed<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// The objects as last seen.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Whether the first list arrived.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

/// Follows the objects of `api` that `config` selects, as a client-go reflector does: list,
/// watch from the list's resourceVersion (with bookmarks, so a quiet watch keeps a recent one),
/// list again when kube-apiserver answers 410 `Expired` (the resourceVersion fell out of its
/// watch cache's window), and back off exponentially (0.8 s doubling to 30 s, as client-go) on
/// errors. `on_change` runs with the cache after every change that reached it: an object
/// applied or deleted, a (re)list complete. Ends at `shutdown`.
///
/// An expired resourceVersion followed by a good list is routine and logged at debug level;
/// other failures warn, at most once per backoff step.
pub fn follow<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    what: String,
    shutdown: ShutdownSignal,
    on_change: impl FnMut(&Store<K>) + Send + 'static,
) -> Followed<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    follow_dynamic(api, Default::default(), config, what, shutdown, on_change)
}

/// [`follow`] of a kind known at run time (`dyntype`: a [`DynamicObject`](kube::api::DynamicObject)'s
/// [`ApiResource`](kube::api::ApiResource)).
pub fn follow_dynamic<K>(
    api: kube::Api<K>,
    dyntype: K::DynamicType,
    config: watcher::Config,
    what: String,
    shutdown: ShutdownSignal,
    mut on_change: impl FnMut(&Store<K>) + Send + 'static,
) -> Followed<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::new(dyntype);
    let store = writer.as_reader();
    let synced = Arc::new(AtomicBool::new(false));
    let followed = Followed {
        store: store.clone(),
        synced: synced.clone(),
    };
    let events = watcher(api, config).default_backoff().reflect(writer);
    let run = async move {
        let mut events = std::pin::pin!(events);
        let mut failing = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => {
                    synced.store(true, Ordering::Release);
                    if std::mem::take(&mut failing) {
                        tracing::info!("following {what} again");
                    }
                    on_change(&store);
                }
                Err(e) if expired(&e) => {
                    tracing::debug!("following {what}: {e}; listing again");
                }
                Err(e) => {
                    failing = true;
                    tracing::warn!(error = %e, "following {what}; retrying with backoff");
                }
            }
        }
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = run => {}
            _ = shutdown.cancelled() => {}
        }
    });
    followed
}

/// Whether the watch ended only because its resourceVersion is older than kube-apiserver's
/// window: kube-apiserver answers such a watch with an `ERROR` event holding a 410 `Expired`
/// Status, on which the watcher lists again; nothing is wrong.
fn expired(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchError(status) if status.code == 410)
}
