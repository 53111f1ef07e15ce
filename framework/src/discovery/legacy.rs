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
pub(super) fn group_list(groups: &[ServedGroup]) -> Value {
    let list = APIGroupList {
        groups: groups.iter().map(group).collect(),
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
    let versions: Vec<GroupVersionForDiscovery> = group
        .versions
        .iter()
        .map(|v| GroupVersionForDiscovery {
            group_version: format!("{}/{}", group.name, v.version),
            version: v.version.clone(),
        })
        .collect();
    APIGroup {
        name: group.name.clone(),
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
        ..APIResource::default()
    };
    // Subresources report the parent's kind and, like kube's status storages, no singular name.
    let subresources = resource.subresources.iter().map(|sub| APIResource {
        name: format!("{}/{}", info.plural, sub.name),
        namespaced: info.namespaced(),
        kind: info.kind.to_string(),
        verbs: sorted_verbs(&sub.verbs),
        ..APIResource::default()
    });
    std::iter::once(main).chain(subresources).collect()
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
