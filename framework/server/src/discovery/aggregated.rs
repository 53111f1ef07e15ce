//! Aggregated discovery (`apidiscovery.k8s.io/v2` and `v2beta1` `APIGroupDiscoveryList`): every
//! group, version and resource in one document at `/apis`, which kubectl and client-go ask for
//! first and which the aggregator merges into the cluster's own.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, ObjectMeta};
use kube_core::discovery::v2::{
    APIGroupDiscovery, APIGroupDiscoveryList, APIResourceDiscovery, APISubresourceDiscovery,
    APIVersionDiscovery, GroupVersionKind,
};
use serde_json::{Map, Value};

use super::legacy::{non_empty, sorted_verbs};
use crate::registry::served::{ServedGroup, ServedResource, ServedVersion};
use crate::runtime::ResourceInfo;

/// The API group of the aggregated discovery types.
pub(super) const GROUP: &str = "apidiscovery.k8s.io";
/// The kind a client names in `Accept` (`as=APIGroupDiscoveryList`).
pub(super) const KIND: &str = "APIGroupDiscoveryList";
/// `Content-Type` of the `v2` document; clients check it to tell it from `APIGroupList`.
pub(super) const V2_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// `Content-Type` of the `v2beta1` document.
pub(super) const V2BETA1_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// The document for `apidiscovery.k8s.io/{version}` (`v2` or `v2beta1`, same shape), of
/// `items` (from [`group`] and [`listed_group`]).
pub(super) fn document(mut items: Vec<APIGroupDiscovery>, version: &str) -> Value {
    // All our groups share kube's default priority, so, like kube, they are sorted by name.
    items.sort_by(|a, b| group_name(a).cmp(group_name(b)));
    let list = APIGroupDiscoveryList {
        metadata: Some(Default::default()),
        items,
    };
    let mut value = serde_json::to_value(list).expect("APIGroupDiscoveryList serializes");
    omit_empty_lists(&mut value);
    if let Value::Object(map) = &mut value {
        map.insert("kind".into(), KIND.into());
        map.insert("apiVersion".into(), format!("{GROUP}/{version}").into());
    }
    value
}

fn group_name(group: &APIGroupDiscovery) -> &str {
    group
        .metadata
        .as_ref()
        .and_then(|m| m.name.as_deref())
        .unwrap_or_default()
}

/// The entry of a group served from its resources.
pub(super) fn group(group: &ServedGroup) -> APIGroupDiscovery {
    APIGroupDiscovery {
        metadata: Some(ObjectMeta {
            name: Some(group.name.clone()),
            ..ObjectMeta::default()
        }),
        versions: group.versions.iter().map(version).collect(),
    }
}

fn version(version: &ServedVersion) -> APIVersionDiscovery {
    let mut resources: Vec<APIResourceDiscovery> = version.resources.iter().map(resource).collect();
    resources.sort_by(|a, b| a.resource.cmp(&b.resource));
    APIVersionDiscovery {
        version: Some(version.version.clone()),
        resources,
        freshness: Some("Current".into()),
    }
}

fn resource(resource: &ServedResource) -> APIResourceDiscovery {
    let info = &resource.info;
    let mut subresources: Vec<APISubresourceDiscovery> = resource
        .subresources
        .iter()
        .map(|sub| APISubresourceDiscovery {
            subresource: Some(sub.name.clone()),
            // The kind the subresource serves: the parent's (status), or `autoscaling/v1`
            // `Scale`.
            response_kind: Some(gvk(&sub.info)),
            accepted_types: Vec::new(),
            verbs: sorted_verbs(&sub.verbs),
        })
        .collect();
    subresources.sort_by(|a, b| a.subresource.cmp(&b.subresource));
    APIResourceDiscovery {
        resource: Some(info.plural.to_string()),
        response_kind: Some(gvk(info)),
        scope: Some(
            if info.namespaced() {
                "Namespaced"
            } else {
                "Cluster"
            }
            .into(),
        ),
        singular_resource: Some(info.singular.to_string()),
        verbs: sorted_verbs(&resource.verbs),
        short_names: non_empty(info.short_names).unwrap_or_default(),
        categories: non_empty(info.categories).unwrap_or_default(),
        subresources,
    }
}

/// The entry of a group whose versions' resources a lister gave (legacy `APIResource`s),
/// converted as kube's `ConvertGroupVersionIntoToDiscovery` converts them. A version whose
/// list does not convert (a subresource whose scope differs from its parent's) is left out,
/// as kube leaves it out.
pub(super) fn listed_group(name: &str, versions: &[(&str, &[APIResource])]) -> APIGroupDiscovery {
    let versions = versions
        .iter()
        .filter_map(|(version, resources)| {
            let converted = convert_listed(name, version, resources);
            if converted.is_none() {
                tracing::warn!(group = name, version, "a subresource's scope differs from its parent's: the version is left out of aggregated discovery");
            }
            Some(APIVersionDiscovery {
                version: Some(version.to_string()),
                resources: converted?,
                freshness: Some("Current".into()),
            })
        })
        .collect();
    APIGroupDiscovery {
        metadata: Some(ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        }),
        versions,
    }
}

/// kube's `ConvertGroupVersionIntoToDiscovery`: resources first, then each `parent/sub` as a
/// subresource of its parent (a parent with an empty kind made when none is listed, which
/// clients skip); `None` when a subresource's scope differs from its parent's. A kind with no
/// group and version is of `group/version`.
fn convert_listed(
    group: &str,
    version: &str,
    list: &[APIResource],
) -> Option<Vec<APIResourceDiscovery>> {
    let scope = |namespaced: bool| if namespaced { "Namespaced" } else { "Cluster" };
    let kind = |r: &APIResource| GroupVersionKind {
        group: Some(r.group.clone().unwrap_or_else(|| group.to_string())),
        version: Some(r.version.clone().unwrap_or_else(|| version.to_string())),
        kind: Some(r.kind.clone()),
    };
    let empty_kind = || GroupVersionKind {
        group: Some(String::new()),
        version: Some(String::new()),
        kind: Some(String::new()),
    };
    let mut out: Vec<APIResourceDiscovery> = list
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| APIResourceDiscovery {
            resource: Some(r.name.clone()),
            response_kind: Some(kind(r)),
            scope: Some(scope(r.namespaced).into()),
            singular_resource: Some(r.singular_name.clone()),
            verbs: r.verbs.clone(),
            short_names: r.short_names.clone().unwrap_or_default(),
            categories: r.categories.clone().unwrap_or_default(),
            subresources: Vec::new(),
        })
        .collect();
    for r in list {
        let Some((parent, sub)) = r.name.split_once('/') else {
            continue;
        };
        let index = match out
            .iter()
            .position(|p| p.resource.as_deref() == Some(parent))
        {
            Some(index) => index,
            None => {
                out.push(APIResourceDiscovery {
                    resource: Some(parent.to_string()),
                    response_kind: Some(empty_kind()),
                    scope: Some(scope(r.namespaced).into()),
                    singular_resource: Some(String::new()),
                    verbs: Vec::new(),
                    short_names: Vec::new(),
                    categories: Vec::new(),
                    subresources: Vec::new(),
                });
                out.len() - 1
            }
        };
        if out[index].scope.as_deref() != Some(scope(r.namespaced)) {
            return None;
        }
        out[index].subresources.push(APISubresourceDiscovery {
            subresource: Some(sub.to_string()),
            response_kind: Some(if r.kind.is_empty() {
                empty_kind()
            } else {
                kind(r)
            }),
            accepted_types: Vec::new(),
            verbs: r.verbs.clone(),
        });
    }
    out.sort_by(|a, b| a.resource.cmp(&b.resource));
    Some(out)
}

fn gvk(info: &ResourceInfo) -> GroupVersionKind {
    GroupVersionKind {
        group: Some(info.group.to_string()),
        version: Some(info.version.to_string()),
        kind: Some(info.kind.to_string()),
    }
}

/// Drops empty `shortNames`, `categories`, `subresources` and `acceptedTypes`: kube-core always
/// writes these lists, Go omits them when empty (`omitempty`).
fn omit_empty_lists(value: &mut Value) {
    const OMIT_EMPTY: [&str; 4] = ["shortNames", "categories", "subresources", "acceptedTypes"];
    match value {
        Value::Object(map) => {
            drop_empty(map, &OMIT_EMPTY);
            map.values_mut().for_each(omit_empty_lists);
        }
        Value::Array(items) => items.iter_mut().for_each(omit_empty_lists),
        _ => {}
    }
}

fn drop_empty(map: &mut Map<String, Value>, keys: &[&str]) {
    for key in keys {
        if map
            .get(*key)
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
        {
            map.remove(*key);
        }
    }
}
