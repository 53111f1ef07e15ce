//! Why a server could not start ([`ServerError`]).

use crate::auth::delegating;

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The configuration is inconsistent (e.g. a resource registered under the wrong version).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Delegated authentication or authorization could not be set up.
    #[error(transparent)]
    Auth(#[from] delegating::AuthSetupError),
    /// The admission flags name plugins that do not exist.
    #[error(transparent)]
    Admission(#[from] crate::admission::AdmissionOptionsError),
    /// The audit policy or a backend could not be set up.
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    /// Reaching the core kube-apiserver or registering the APIServices failed.
    #[error(transparent)]
    Aggregator(#[from] crate::aggregator::WireError),
    /// The task serving requests panicked or was cancelled.
    #[error("the server task ended abnormally: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// Certificates or keys could not be loaded or created.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// `--etcd-cafile`, `--etcd-certfile` or `--etcd-keyfile` could not be used.
    #[error("etcd TLS: {0}")]
    EtcdTls(#[source] crate::tls::TlsError),
    /// `--postgres-cafile`, `--postgres-certfile` or `--postgres-keyfile` could not be used.
    #[error("postgres TLS: {0}")]
    PostgresTls(#[source] crate::tls::TlsError),
    /// The storage backend could not be opened.
    #[error("storage: {0}")]
    Storage(#[from] crate::storage::StorageError),
    /// `migrate-storage` could not rewrite an object (or was asked for a resource the server
    /// does not store).
    #[error("migrate-storage: {0}")]
    Migration(String),
    /// Listening or serving failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A post-start hook ([`APIServer::post_start_hook`](crate::server::APIServer::post_start_hook)) failed, which stopped the server.
    #[error("PostStartHook {name:?} failed: {message}")]
    PostStartHook {
        /// The hook's name.
        name: String,
        /// Its error.
        message: String,
    },
}
