//! The server's own objects, read in process by kind: what a `ValidatingAdmissionPolicy`
//! whose `paramKind` is a kind of this server reads its params from (kube's plugin reads them
//! from an informer of the kind; here the kind's [`Reader`](crate::registry::store::Reader),
//! through its watch cache, without HTTP). The server fills an [`OwnObjects`] from every kind
//! it serves; admission sees only this interface.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use extension_apiserver_machinery::selector::LabelSelector;
use serde_json::Value;

use crate::error::Result;

/// The objects of one kind the server serves, as JSON (`apiVersion` and `kind` need not be
/// set).
#[async_trait]
pub trait ObjectReader: Send + Sync {
    /// Whether the kind is namespaced.
    fn namespaced(&self) -> bool;
    /// Object `name` of `namespace` (`None` for a cluster-scoped kind), if it exists.
    async fn get(&self, namespace: Option<&str>, name: &str) -> Result<Option<Value>>;
    /// The objects of `namespace` (or all) whose labels `selector` matches.
    async fn list(&self, namespace: Option<&str>, selector: &LabelSelector) -> Result<Vec<Value>>;
}

/// The server's kinds by `(apiVersion, kind)` (`group/version` or `v1`), each with its reader.
#[derive(Clone, Default)]
pub struct OwnObjects {
    kinds: Arc<HashMap<(String, String), Arc<dyn ObjectReader>>>,
}

impl OwnObjects {
    /// Readers of the kinds in `kinds`.
    pub fn new(kinds: HashMap<(String, String), Arc<dyn ObjectReader>>) -> Self {
        Self {
            kinds: Arc::new(kinds),
        }
    }

    /// The reader of `kind` of `api_version`, when the server serves it.
    pub fn reader(&self, api_version: &str, kind: &str) -> Option<Arc<dyn ObjectReader>> {
        let key = (api_version.to_string(), kind.to_string());
        self.kinds.get(&key).cloned()
    }
}

impl std::fmt::Debug for OwnObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kinds: Vec<_> = self.kinds.keys().collect();
        kinds.sort();
        f.debug_struct("OwnObjects").field("kinds", &kinds).finish()
    }
}
