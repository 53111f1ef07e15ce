//! Groups whose resources come and go while the server runs (the custom metrics API lists
//! `pods/{metric}` for each metric a provider has now). Their documents are encoded again
//! whenever what their listers say changes, so ETags and `304` stay right.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

/// The resources of one group version as they are now, as kube's discovery
/// `APIResourceLister` gives them: `/apis/{group}/{version}` lists them, and aggregated
/// discovery shows them converted as kube converts a legacy list (`pods/{metric}` becomes the
/// subresource `{metric}` of `pods`).
///
/// ```
/// use extension_apiserver::discovery::APIResourceLister;
/// use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
///
/// struct Queues;
///
/// impl APIResourceLister for Queues {
///     fn list_api_resources(&self) -> Vec<APIResource> {
///         vec![APIResource {
///             name: "jobs".into(),
///             namespaced: true,
///             kind: "QueueLength".into(),
///             verbs: vec!["get".into()],
///             ..APIResource::default()
///         }]
///     }
/// }
/// ```
pub trait APIResourceLister: Send + Sync + 'static {
    /// Every resource of the group version now. Called on each discovery request of the
    /// group (and of `/apis` for aggregated discovery): keep it cheap.
    fn list_api_resources(&self) -> Vec<APIResource>;
}

/// An API group served with resources listed at request time, by version (the preferred
/// first).
#[derive(Clone)]
pub struct DynamicGroup {
    /// e.g. `custom.metrics.k8s.io`.
    pub name: String,
    /// Each version and what lists its resources.
    pub versions: Vec<(String, Arc<dyn APIResourceLister>)>,
}

impl DynamicGroup {
    /// A group with no version yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            versions: Vec::new(),
        }
    }

    /// Adds `version` (after those added before: the first is preferred), listed by `lister`.
    pub fn version(
        mut self,
        version: impl Into<String>,
        lister: Arc<dyn APIResourceLister>,
    ) -> Self {
        self.versions.push((version.into(), lister));
        self
    }

    /// What each version's lister says now, in version order; resources sorted by name, so
    /// the documents do not change with the order a lister happens to give.
    pub(super) fn listed(&self) -> Vec<Vec<APIResource>> {
        self.versions
            .iter()
            .map(|(_, lister)| {
                let mut resources = lister.list_api_resources();
                resources.sort_by(|a, b| a.name.cmp(&b.name));
                resources
            })
            .collect()
    }
}

impl std::fmt::Debug for DynamicGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let versions: Vec<&str> = self.versions.iter().map(|(v, _)| v.as_str()).collect();
        f.debug_struct("DynamicGroup")
            .field("name", &self.name)
            .field("versions", &versions)
            .finish()
    }
}
