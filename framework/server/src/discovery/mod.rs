//! Discovery: `/apis`, `/apis/{group}` and `/apis/{group}/{version}`, plus aggregated discovery
//! (`Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList` on `/apis`).
//!
//! These routes sit beside the resource routes, after the filters. Every document is encoded
//! once in [`DiscoveryDocuments::build`]; a request only negotiates the representation and
//! answers with the stored bytes, or `304 Not Modified` when its `If-None-Match` still matches.
//! Groups whose resources come and go ([`DynamicGroup`]) are asked for their resources on each
//! request, and the documents are encoded again only when the answer changed.

mod aggregated;
pub(crate) mod document;
mod dynamic;
#[cfg(test)]
pub(crate) mod fixtures;
mod legacy;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, HeaderValue};
use serde::Serialize;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

use self::document::{Document, no_cache};
pub use self::dynamic::{APIResourceLister, DynamicGroup};
use crate::error::Error;
use crate::registry::served::ServedGroup;

/// The media types plain discovery documents are available in, for 406 messages.
const PLAIN_TYPES: &str = "application/json, application/yaml";

/// The encoded discovery documents of a server, built once from what it serves.
///
/// ```
/// use extension_apiserver::discovery::DiscoveryDocuments;
/// use extension_apiserver::registry::group::APIGroupInfo;
///
/// let served = vec![APIGroupInfo::new("example.com").served()];
/// let discovery = DiscoveryDocuments::build(&served);
/// let app: axum::Router = axum::Router::new().merge(discovery.router());
/// ```
#[derive(Clone, Debug)]
pub struct DiscoveryDocuments {
    inner: Arc<Discovery>,
}

/// The groups served and their documents as last encoded.
#[derive(Debug)]
struct Discovery {
    groups: Vec<ServedGroup>,
    dynamic: Vec<DynamicGroup>,
    current: Mutex<Arc<Encoded>>,
}

/// The documents, and what the dynamic groups listed when they were encoded.
#[derive(Debug)]
struct Encoded {
    listed: Vec<Vec<Vec<APIResource>>>,
    documents: Arc<Documents>,
}

impl Discovery {
    /// The documents of what is served now: the last ones while no dynamic group's resources
    /// changed, otherwise new ones (new bytes, new ETags).
    fn documents(&self) -> Arc<Documents> {
        let lock = || self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if self.dynamic.is_empty() {
            return lock().documents.clone();
        }
        // Asked outside the lock: a slow lister holds up no other group's requests.
        let listed: Vec<_> = self.dynamic.iter().map(DynamicGroup::listed).collect();
        let mut current = lock();
        if listed != current.listed {
            let documents = Arc::new(Documents::build(&self.groups, &self.dynamic, &listed));
            *current = Arc::new(Encoded { listed, documents });
        }
        current.documents.clone()
    }
}

#[derive(Debug)]
struct Documents {
    root: Plain,
    aggregated_v2: Document,
    aggregated_v2beta1: Document,
    groups: HashMap<String, GroupDocuments>,
}

#[derive(Debug)]
struct GroupDocuments {
    group: Plain,
    versions: HashMap<String, Plain>,
}

/// One document in the two encodings discovery serves without conversion.
#[derive(Debug)]
struct Plain {
    json: Document,
    yaml: Document,
}

impl Plain {
    fn new(value: &impl Serialize) -> Self {
        Self {
            json: Document::json(value, "application/json"),
            yaml: Document::yaml(value),
        }
    }
}

/// What a request's `Accept` header asks discovery for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Representation {
    Json,
    Yaml,
    /// Aggregated discovery, `apidiscovery.k8s.io/v2`.
    AggregatedV2,
    /// Aggregated discovery, `apidiscovery.k8s.io/v2beta1` (same shape, older clients).
    AggregatedV2Beta1,
}

impl DiscoveryDocuments {
    /// Encodes every discovery document for `groups` (versions preferred first).
    pub fn build(groups: &[ServedGroup]) -> Self {
        Self::with_dynamic(groups, Vec::new())
    }

    /// Encodes every discovery document for `groups` and `dynamic` (whose documents follow
    /// what their listers say, encoded again when it changes).
    pub fn with_dynamic(groups: &[ServedGroup], dynamic: Vec<DynamicGroup>) -> Self {
        let listed: Vec<_> = dynamic.iter().map(DynamicGroup::listed).collect();
        let documents = Arc::new(Documents::build(groups, &dynamic, &listed));
        Self {
            inner: Arc::new(Discovery {
                groups: groups.to_vec(),
                dynamic,
                current: Mutex::new(Arc::new(Encoded { listed, documents })),
            }),
        }
    }

    /// Routes `GET /apis`, `/apis/{group}` and `/apis/{group}/{version}` (with or without a
    /// trailing slash, as go-restful serves them), to merge into the server's router.
    pub fn router<S>(&self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new()
            .route("/apis", get(root))
            .route("/apis/", get(root))
            .route("/apis/{group}", get(group))
            .route("/apis/{group}/", get(group))
            .route("/apis/{group}/{version}", get(version))
            .route("/apis/{group}/{version}/", get(version))
            .with_state(self.inner.clone())
    }
}

impl Documents {
    /// Every document of `groups` and of `dynamic`, whose versions' resources are `listed`.
    fn build(
        groups: &[ServedGroup],
        dynamic: &[DynamicGroup],
        listed: &[Vec<Vec<APIResource>>],
    ) -> Self {
        let mut discovered: Vec<_> = groups.iter().map(aggregated::group).collect();
        let mut api_groups: Vec<_> = groups.iter().map(legacy::group).collect();
        let mut group_documents: HashMap<String, GroupDocuments> = groups
            .iter()
            .map(|g| (g.name.clone(), GroupDocuments::new(g)))
            .collect();
        for (group, listed) in dynamic.iter().zip(listed) {
            let versions: Vec<(&str, &[APIResource])> = group
                .versions
                .iter()
                .zip(listed)
                .map(|((version, _), resources)| (version.as_str(), resources.as_slice()))
                .collect();
            discovered.push(aggregated::listed_group(&group.name, &versions));
            let api_group = legacy::group_of(&group.name, versions.iter().map(|(v, _)| *v));
            group_documents.insert(
                group.name.clone(),
                GroupDocuments::listed(&api_group, &versions),
            );
            api_groups.push(api_group);
        }
        let aggregated = |version, content_type| {
            Document::json(
                &aggregated::document(discovered.clone(), version),
                content_type,
            )
        };
        Self {
            root: Plain::new(&legacy::group_list(&api_groups)),
            aggregated_v2: aggregated("v2", aggregated::V2_CONTENT_TYPE),
            aggregated_v2beta1: aggregated("v2beta1", aggregated::V2BETA1_CONTENT_TYPE),
            groups: group_documents,
        }
    }
}

impl GroupDocuments {
    /// The documents of a group whose versions' resources a lister gave.
    fn listed(
        group: &k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup,
        versions: &[(&str, &[APIResource])],
    ) -> Self {
        let versions = versions
            .iter()
            .map(|(version, resources)| {
                let list = legacy::listed_resource_list(&group.name, version, resources);
                (version.to_string(), Plain::new(&list))
            })
            .collect();
        Self {
            group: Plain::new(group),
            versions,
        }
    }

    fn new(group: &ServedGroup) -> Self {
        let versions = group
            .versions
            .iter()
            .map(|v| {
                (
                    v.version.clone(),
                    Plain::new(&legacy::resource_list(&group.name, v)),
                )
            })
            .collect();
        Self {
            group: Plain::new(&legacy::group(group)),
            versions,
        }
    }
}

async fn root(State(discovery): State<Arc<Discovery>>, headers: HeaderMap) -> Response {
    let docs = discovery.documents();
    match negotiate(&headers, true) {
        // kube-apiserver lets shared caches keep aggregated discovery (it has an ETag).
        Some(Representation::AggregatedV2) => docs.aggregated_v2.respond(&headers, public()),
        Some(Representation::AggregatedV2Beta1) => {
            docs.aggregated_v2beta1.respond(&headers, public())
        }
        wanted => respond_plain(&docs.root, wanted, &headers),
    }
}

async fn group(
    State(discovery): State<Arc<Discovery>>,
    Path(group): Path<String>,
    headers: HeaderMap,
) -> Response {
    let docs = discovery.documents();
    match docs.groups.get(&group) {
        Some(found) => respond_plain(&found.group, negotiate(&headers, false), &headers),
        None => Error::path_not_found().into_response(),
    }
}

async fn version(
    State(discovery): State<Arc<Discovery>>,
    Path((group, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let docs = discovery.documents();
    match docs
        .groups
        .get(&group)
        .and_then(|g| g.versions.get(&version))
    {
        Some(found) => respond_plain(found, negotiate(&headers, false), &headers),
        None => Error::path_not_found().into_response(),
    }
}

fn public() -> HeaderValue {
    HeaderValue::from_static("public")
}

fn respond_plain(doc: &Plain, wanted: Option<Representation>, headers: &HeaderMap) -> Response {
    match wanted {
        Some(Representation::Json) => doc.json.respond(headers, no_cache()),
        Some(Representation::Yaml) => doc.yaml.respond(headers, no_cache()),
        _ => not_acceptable(PLAIN_TYPES),
    }
}

/// 406 `NotAcceptable` with kube-apiserver's message.
pub(crate) fn not_acceptable(types: &str) -> Response {
    let message = format!("only the following media types are accepted: {types}");
    Error::not_acceptable(message).into_response()
}

/// The first representation the client accepts. Clauses asking for a conversion (`as=Table`,
/// ...) are skipped unless they ask for aggregated discovery where it is `allowed`.
fn negotiate(headers: &HeaderMap, aggregated_allowed: bool) -> Option<Representation> {
    crate::endpoints::accept::media_ranges(headers)
        .iter()
        .find_map(|range| {
            if range.is_qualified() {
                return if aggregated_allowed {
                    aggregated_version(range)
                } else {
                    None
                };
            }
            if range.matches("application", "json") {
                Some(Representation::Json)
            } else if range.matches("application", "yaml") {
                Some(Representation::Yaml)
            } else {
                None
            }
        })
}

fn aggregated_version(range: &crate::endpoints::accept::MediaRange<'_>) -> Option<Representation> {
    let is_list = range.matches("application", "json")
        && range.param("g") == Some(aggregated::GROUP)
        && range.param("as") == Some(aggregated::KIND)
        && range.param("stream").is_none();
    match range.param("v") {
        Some("v2") if is_list => Some(Representation::AggregatedV2),
        Some("v2beta1") if is_list => Some(Representation::AggregatedV2Beta1),
        _ => None,
    }
}
