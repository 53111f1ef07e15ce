//! `APIGroupInfo`: one API group, its prioritized versions, and the storage of every
//! resource path in every version (the `VersionedResourcesStorageMap`).

use std::collections::BTreeMap;

use crate::registry::rest::RestStorage;
use crate::registry::served::{ServedGroup, ServedResource, ServedSubresource, ServedVersion};

/// Resource path (`flunders`, `flunders/status`) → its storage.
pub type ResourcesStorageMap = BTreeMap<String, RestStorage>;

/// Version → resource path → storage.
pub type VersionedResourcesStorageMap = BTreeMap<String, ResourcesStorageMap>;

/// One API group to install.
#[derive(Clone, Debug)]
pub struct APIGroupInfo {
    /// The group name, e.g. `wardle.example.com`.
    pub name: String,
    /// Versions, the preferred first.
    pub prioritized_versions: Vec<String>,
    /// The storage of each path of each version.
    pub storage: VersionedResourcesStorageMap,
}

impl APIGroupInfo {
    /// An empty group.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            prioritized_versions: Vec::new(),
            storage: BTreeMap::new(),
        }
    }

    /// Adds `storage` at `version`/`path`; the first version added is preferred.
    pub fn add(&mut self, version: &str, path: &str, storage: RestStorage) {
        if !self.prioritized_versions.iter().any(|v| v == version) {
            self.prioritized_versions.push(version.to_string());
        }
        self.storage
            .entry(version.to_string())
            .or_default()
            .insert(path.to_string(), storage);
    }

    /// The description discovery and OpenAPI are built from.
    pub fn served(&self) -> ServedGroup {
        let versions = self
            .prioritized_versions
            .iter()
            .map(|v| ServedVersion {
                version: v.clone(),
                resources: served_resources(self.storage.get(v).cloned().unwrap_or_default()),
            })
            .collect();
        ServedGroup {
            name: self.name.clone(),
            versions,
        }
    }
}

fn served_resources(paths: ResourcesStorageMap) -> Vec<ServedResource> {
    let mut resources: Vec<ServedResource> = Vec::new();
    for (path, storage) in &paths {
        if path.contains('/') {
            continue;
        }
        let prefix = format!("{path}/");
        let subresources = paths
            .iter()
            .filter_map(|(p, s)| {
                let name = p.strip_prefix(&prefix)?;
                Some(ServedSubresource {
                    name: name.to_string(),
                    verbs: s.verbs(),
                    info: s
                        .subresource
                        .as_ref()
                        .map_or(s.info, |sub| sub.served_info(name)),
                    handler: s.subresource.clone(),
                })
            })
            .collect();
        let patch_types = if storage.can_patch() {
            PATCH_TYPES.to_vec()
        } else {
            Vec::new()
        };
        resources.push(ServedResource {
            info: storage.info,
            storage_version: storage.storage_version,
            verbs: storage.verbs(),
            subresources,
            patch_types,
            schema: storage.schema,
        });
    }
    resources
}

/// The patch content types every patchable resource accepts.
pub const PATCH_TYPES: [&str; 3] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
