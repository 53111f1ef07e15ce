//! The installer: turns the `VersionedResourcesStorageMap` of every group into one lookup
//! table from (group, version, resource path) to its storage, built once at start.

use std::collections::HashMap;
use std::sync::Arc;

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
