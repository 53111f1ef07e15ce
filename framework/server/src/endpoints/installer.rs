//! The installer: turns the `VersionedResourcesStorageMap` of every group into one lookup
//! table from (group, version, resource path) to its storage, built once at start.

use std::sync::Arc;

// Maps keyed by names the server installed, looked up three times per request: only the
// server inserts keys.
use extension_apiserver_machinery::hash::ByName;

use crate::admission::EquivalentResource;
use crate::admission::attributes::GroupVersionResource;
use crate::endpoints::table::TableConvertor;
use crate::registry::group::APIGroupInfo;
use crate::registry::rest::RestStorage;

/// One installed path: its storage and its table convertor.
#[derive(Debug)]
pub struct InstalledResource {
    /// The verbs.
    pub storage: RestStorage,
    /// Its `Table` columns.
    pub table: TableConvertor,
    /// The same path in every version of the group served over the same storage, for
    /// admission webhooks' `matchPolicy: Equivalent`.
    pub equivalents: Arc<[EquivalentResource]>,
}

/// Every installed resource path, by group, version, resource and subresource
/// (`"flunders"`, `"flunders/status"`). Nested so that a request's parts find their storage
/// without being copied into a key.
#[derive(Debug, Default)]
pub struct InstalledResources {
    map: ByName<ByName<ByName<Paths>>>,
}

/// One resource's paths: the resource itself and its subresources.
#[derive(Debug, Default)]
struct Paths {
    main: Option<Arc<InstalledResource>>,
    subresources: ByName<Arc<InstalledResource>>,
}

impl InstalledResources {
    /// Installs every group.
    pub fn new(groups: &[APIGroupInfo]) -> Self {
        let mut map: ByName<ByName<ByName<Paths>>> = ByName::default();
        for group in groups {
            for (version, resources) in &group.storage {
                for (path, storage) in resources {
                    let installed = Arc::new(InstalledResource {
                        table: TableConvertor::new(&storage.info),
                        equivalents: equivalents(group, version, path),
                        storage: storage.clone(),
                    });
                    let (resource, subresource) = match path.split_once('/') {
                        Some((resource, subresource)) => (resource, Some(subresource)),
                        None => (path.as_str(), None),
                    };
                    let versions = map.entry(group.name.clone()).or_default();
                    let resources = versions.entry(version.clone()).or_default();
                    let paths = resources.entry(resource.to_string()).or_default();
                    match subresource {
                        Some(sub) => {
                            paths.subresources.insert(sub.to_string(), installed);
                        }
                        None => paths.main = Some(installed),
                    }
                }
            }
        }
        Self { map }
    }

    /// The storage at `group/version/path`.
    pub fn get(&self, group: &str, version: &str, path: &str) -> Option<Arc<InstalledResource>> {
        let (resource, subresource) = path.split_once('/').unwrap_or((path, ""));
        self.find(group, version, resource, subresource)
    }

    /// The storage of `resource` (with `subresource`, unless empty) in `group/version`.
    pub(crate) fn find(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        subresource: &str,
    ) -> Option<Arc<InstalledResource>> {
        let paths = self.map.get(group)?.get(version)?.get(resource)?;
        let found = if subresource.is_empty() {
            paths.main.as_ref()
        } else {
            paths.subresources.get(subresource)
        };
        found.cloned()
    }
}

/// `path` in each version of `group` whose resource shares the storage of `version`'s: the
/// versions a webhook with `matchPolicy: Equivalent` may see an object in.
fn equivalents(group: &APIGroupInfo, version: &str, path: &str) -> Arc<[EquivalentResource]> {
    let resource = path.split('/').next().unwrap_or(path);
    let storage_version = |v: &str| {
        let paths = group.storage.get(v)?;
        Some(paths.get(resource)?.storage_version)
    };
    let ours = storage_version(version);
    group
        .prioritized_versions
        .iter()
        .filter(|v| storage_version(v).is_some() && storage_version(v) == ours)
        .filter_map(|v| {
            let storage = group.storage.get(v)?.get(path)?;
            Some(EquivalentResource {
                resource: GroupVersionResource::gvr(&group.name, v, resource),
                kind: storage.info.gvk(),
                convertor: storage.convertor.clone(),
            })
        })
        .collect()
}
