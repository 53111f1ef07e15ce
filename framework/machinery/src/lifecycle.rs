//! The server's life as every stage sees it: the shutdown signal long-running work watches,
//! and the readiness checks components report through `/readyz`. Below every stage, so the
//! storage compactor, watch handlers, authenticators and admission plugins can stop with the
//! server without importing it.

use std::sync::Arc;

use tokio::sync::watch;

/// Shutdown notice shared by the server and its long-running handlers.
///
/// The server puts a clone in every request's extensions; a watch handler ends its stream
/// when [`cancelled`](Self::cancelled) resolves, so that in-flight requests can finish
/// within the grace period. Triggering it also stops the server.
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for ShutdownSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl ShutdownSignal {
    /// A signal not yet triggered.
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::channel(false).0),
        }
    }

    /// Starts shutdown; idempotent.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Whether shutdown has started.
    pub fn is_shutting_down(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once shutdown has started (at once if it already has).
    pub async fn cancelled(&self) {
        let mut rx = self.tx.subscribe();
        // Err only if the sender is gone, impossible while `self` holds it.
        let _ = rx.wait_for(|shutting_down| *shutting_down).await;
    }
}

/// Why a readiness check fails: a reason for people (a deployment mistake and its fix, shown
/// by `/readyz?verbose`), and the error behind it when there is one.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}")]
pub struct NotReady {
    reason: String,
    #[source]
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl NotReady {
    /// Not ready, for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            source: None,
        }
    }

    /// Not ready because of `error`, which is also the reason shown.
    pub fn from_error(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            reason: error.to_string(),
            source: Some(Arc::new(error)),
        }
    }

    /// The reason shown.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Two verdicts are the same when they give the same reason (a check that fails again for
/// the same reason is not news).
impl PartialEq for NotReady {
    fn eq(&self, other: &Self) -> bool {
        self.reason == other.reason
    }
}

/// A readiness check of a component: `/readyz` fails while it fails. Unlike the built-in
/// checks, its reason is shown in `/readyz?verbose` too (it names a deployment mistake and
/// its fix, never a secret), and at `/readyz/{name}`.
pub trait ReadyzCheck: Send + Sync {
    /// The check's name (`/readyz/{name}`, `?exclude={name}`).
    fn name(&self) -> &str;
    /// `Ok`, or why not.
    fn check(&self) -> Result<(), NotReady>;
}

/// A named check of `/healthz`, `/livez` or `/readyz`, `k8s.io/apiserver`'s
/// `healthz.HealthChecker`: the endpoint fails while the check does. Added with
/// `APIServer::health_check`, `readyz_check` or `livez_check` (extension-apiserver); each post-start hook has one too
/// (`poststarthook/{name}`). As kube-apiserver, the endpoint's root withholds the reason
/// (`[-]{name} failed: reason withheld`), `/{endpoint}/{name}` shows it.
#[async_trait::async_trait]
pub trait HealthCheck: Send + Sync {
    /// The check's name (`/readyz/{name}`, `?exclude={name}`).
    fn name(&self) -> &str;
    /// `Ok`, or why not; run on every request to the endpoint, so keep it cheap.
    async fn check(&self) -> Result<(), NotReady>;
}
