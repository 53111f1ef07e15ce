//! The unaggregated discovery documents: `APIGroupList` at `/apis`, `APIGroup` at
//! `/apis/{group}` and `APIResourceList` at `/apis/{group}/{version}`, shaped as
//! kube-apiserver's `discovery` package writes them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery,
};
use serde_json::Value;

use crate::registry::served::{ServedGroup, ServedResource, ServedVersion};

/// `APIGroupList` for `/apis`, groups in registration order.
///
/// k8s-openapi writes `kind` and `apiVersion` on every `APIGroup`, also inside the list; Go's
/// `TypeMeta` is empty there and so omitted, and clients compare shapes, so they are removed.
pub(super) fn group_list(groups: &[APIGroup]) -> Value {
    let list = APIGroupList {
        groups: groups.to_vec(),
    };
    let mut value = serde_json::to_value(list).expect("APIGroupList serializes");
    if let Some(items) = value.get_mut("groups").and_then(Value::as_array_mut) {
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            item.remove("kind");
            item.remove("apiVersion");
        }
    }
    value
}

/// `APIGroup` for `/apis/{group}`: its versions, the first one preferred.
pub(super) fn group(group: &ServedGroup) -> APIGroup {
    group_of(
        &group.name,
        group.versions.iter().map(|v| v.version.as_str()),
    )
}

/// `APIGroup` of `name` with `versions`, the first one preferred.
pub(super) fn group_of<'a>(name: &str, versions: impl Iterator<Item = &'a str>) -> APIGroup {
    let versions: Vec<GroupVersionForDiscovery> = versions
        .map(|version| GroupVersionForDiscovery {
            group_version: format!("{name}/{version}"),
            version: version.to_string(),
        })
        .collect();
    APIGroup {
        name: name.to_string(),
        preferred_version: versions.first().cloned(),
        server_address_by_client_cidrs: None,
        versions,
    }
}

/// `APIResourceList` for `/apis/{group}/{version}`: each resource and each of its
/// subresources (`flunders/status`), sorted by name as kube's installer registers them.
pub(super) fn resource_list(group: &str, version: &ServedVersion) -> APIResourceList {
    let mut resources: Vec<APIResource> = version
        .resources
        .iter()
        .flat_map(resource_entries)
        .collect();
    resources.sort_by(|a, b| a.name.cmp(&b.name));
    APIResourceList {
        group_version: format!("{group}/{}", version.version),
        resources,
    }
}

/// `APIResourceList` for `/apis/{group}/{version}` of resources a lister gave (sorted).
pub(super) fn listed_resource_list(
    group: &str,
    version: &str,
    resources: &[APIResource],
) -> APIResourceList {
    APIResourceList {
        group_version: format!("{group}/{version}"),
        resources: resources.to_vec(),
    }
}

fn resource_entries(resource: &ServedResource) -> Vec<APIResource> {
    let info = &resource.info;
    let main = APIResource {
        name: info.plural.to_string(),
        singular_name: info.singular.to_string(),
        namespaced: info.namespaced(),
        kind: info.kind.to_string(),
        verbs: sorted_verbs(&resource.verbs),
        short_names: non_empty(info.short_names),
        categories: non_empty(info.categories),
        // Every served version of a resource names the one it is stored in.
        storage_version_hash: Some(storage_version_hash(
            info.group,
            resource.storage_version,
            info.kind,
        )),
        ..APIResource::default()
    };
    // Subresources report the kind they serve (the parent's for status) and, like kube's
    // status and scale storages, no singular name; group and version only when they differ
    // from the parent's (`autoscaling`/`v1` for scale).
    let subresources = resource.subresources.iter().map(|sub| {
        let foreign = (sub.info.group, sub.info.version) != (info.group, info.version);
        APIResource {
            name: format!("{}/{}", info.plural, sub.name),
            namespaced: info.namespaced(),
            group: foreign.then(|| sub.info.group.to_string()),
            version: foreign.then(|| sub.info.version.to_string()),
            kind: sub.info.kind.to_string(),
            verbs: sorted_verbs(&sub.verbs),
            ..APIResource::default()
        }
    });
    std::iter::once(main).chain(subresources).collect()
}

/// `storageVersionHash` of a resource stored as `group/version, Kind=kind`: base64 of the
/// first 8 bytes of SHA-256 over `group/version/kind`, as kube-apiserver's
/// `discovery.StorageVersionHash` (the storage-version migrator and garbage collector compare
/// it across servers). Subresources carry none.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let digest = sha2::Sha256::digest(format!("{group_version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

/// Verbs sorted, as kube-apiserver lists them (it collects them in a set).
pub(super) fn sorted_verbs(verbs: &[&str]) -> Vec<String> {
    let mut verbs: Vec<String> = verbs.iter().map(|v| v.to_string()).collect();
    verbs.sort();
    verbs.dedup();
    verbs
}

/// `None` for an empty list, so the field is omitted as Go's `omitempty` does.
pub(super) fn non_empty(items: &[&str]) -> Option<Vec<String>> {
    (!items.is_empty()).then(|| items.iter().map(|s| s.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_version_hash_is_kubes() {
        // What kube-apiserver serves for deployments in /apis/apps/v1.
        assert_eq!(
            storage_version_hash("apps", "v1", "Deployment"),
            "8aSe+NMegvE="
        );
        // The core group's version is `v1` alone: sha256("v1/Pod").
        assert_eq!(storage_version_hash("", "v1", "Pod"), "ysOUHjFAK4o=");
    }
}
