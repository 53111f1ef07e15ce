//! The installer: turns the `VersionedResourcesStorageMap` of every group into one lookup
//! table from (group, version, resource path) to its storage, built once at start.

use std::collections::HashMap;
use std::sync::Arc;

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

/// Every installed resource path, keyed by `(group, version, "flunders" | "flunders/status")`.
#[derive(Debug, Default)]
pub struct InstalledResources {
    map: HashMap<(String, String, String), Arc<InstalledResource>>,
}

impl InstalledResources {
    /// Installs every group.
    pub fn new(groups: &[APIGroupInfo]) -> Self {
        let mut map = HashMap::new();
        for group in groups {
            for (version, resources) in &group.storage {
                for (path, storage) in resources {
                    let installed = InstalledResource {
                        table: TableConvertor::new(&storage.info),
                        equivalents: equivalents(group, version, path),
                        storage: storage.clone(),
                    };
                    map.insert(
                        (group.name.clone(), version.clone(), path.clone()),
                        Arc::new(installed),
                    );
                }
            }
        }
        Self { map }
    }

    /// The storage at `group/version/path`.
    pub fn get(&self, group: &str, version: &str, path: &str) -> Option<Arc<InstalledResource>> {
        self.map
            .get(&(group.to_string(), version.to_string(), path.to_string()))
            .cloned()
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
