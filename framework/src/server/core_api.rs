//! The connection to the cluster's *core* kube-apiserver, which a server in delegated mode asks
//! who a token belongs to (TokenReview), whether a user may act (SubjectAccessReview), reads the
//! `extension-apiserver-authentication` ConfigMap from, and registers its APIServices with.
//!
//! As in `k8s.io/apiserver`, a kubeconfig file selects it (`--kubeconfig`,
//! `--authentication-kubeconfig`, `--authorization-kubeconfig`); without one, a server running in
//! a pod uses the in-cluster configuration; outside a cluster there is none (standalone mode).

use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// How long one call to the core kube-apiserver may take before it counts as failed; the
/// delegating authenticator and authorizer of `k8s.io/apiserver` use 10 s as well.
pub const CORE_API_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no client to the core kube-apiserver could be made.
#[derive(Debug, thiserror::Error)]
pub enum CoreApiError {
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
pub enum CoreApiSource {
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
) -> Result<Option<(kube::Client, CoreApiSource)>, CoreApiError> {
    crate::server::tls::install_crypto_provider();
    let (mut config, source) = match kubeconfig {
        Some(path) => {
            let err = |source| CoreApiError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let file = Kubeconfig::read_from(path).map_err(err)?;
            let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(err)?;
            (config, CoreApiSource::Kubeconfig)
        }
        None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            (kube::Config::incluster()?, CoreApiSource::InCluster)
        }
        None => return Ok(None),
    };
    config.connect_timeout = Some(CORE_API_TIMEOUT);
    let client = kube::Client::try_from(config)?;
    Ok(Some((client, source)))
}
