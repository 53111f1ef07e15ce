//! The per-request context handed to storage: the namespace of the URL and a sink for
//! warnings (sent back as `Warning` headers, as `k8s.io/apiserver/pkg/warning` does).

use std::sync::{Arc, Mutex};

/// What storage needs to know about the request besides its options.
#[derive(Clone, Debug, Default)]
pub struct RequestContext {
    /// The namespace from the URL; `None` for cluster-scoped requests and all-namespace lists.
    pub namespace: Option<String>,
    warnings: Arc<Mutex<Vec<String>>>,
}

impl RequestContext {
    /// A context for `namespace`.
    pub fn namespaced(namespace: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            ..Self::default()
        }
    }

    /// A context for a cluster-scoped request or an all-namespaces list.
    pub fn cluster() -> Self {
        Self::default()
    }

    /// Adds a warning for the client (duplicates are dropped).
    pub fn warn(&self, message: impl Into<String>) {
        let message = message.into();
        let mut warnings = self.warnings.lock().unwrap_or_else(|e| e.into_inner());
        if !warnings.contains(&message) {
            warnings.push(message);
        }
    }

    /// The warnings added so far.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
