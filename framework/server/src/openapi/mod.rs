//! OpenAPI: `/openapi/v2` (Swagger 2.0) and `/openapi/v3` (an index of OpenAPI 3.0 documents,
//! one per group version, at `/openapi/v3/apis/{group}/{version}?hash=...`).
//!
//! These routes sit beside discovery, after the filters. kubectl reads them for `explain`, to
//! choose strategic merge patch and to check `fieldValidation`; the aggregator downloads them.
//! Everything is built and encoded once in [`OpenAPIDocuments::build`].

mod definitions;
mod extra;
pub(crate) mod operations;
pub(crate) mod params;
mod render_v2;
mod render_v3;
mod schema;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use self::definitions::Catalog;
pub(crate) use self::definitions::neutral_definitions;
pub(crate) use self::extra::ExtraPaths;
use self::operations::PathItem;
use self::schema::Dialect;
use crate::discovery::document::{Document, no_cache};
use crate::discovery::not_acceptable;
use crate::endpoints::accept::media_ranges;
use crate::error::Error;
use crate::registry::served::ServedGroup;

/// The `info` object of the documents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenAPIInfo {
    /// e.g. `Wardle` (sample-apiserver's title).
    pub title: String,
    /// The server's version, e.g. `0.1`.
    pub version: String,
}

impl Default for OpenAPIInfo {
    /// kube-apiserver's defaults for a generic API server.
    fn default() -> Self {
        Self {
            title: "Generic API Server".into(),
            version: "unversioned".into(),
        }
    }
}

/// The encoded OpenAPI documents of a server, built once from what it serves.
///
/// ```
/// use extension_apiserver::openapi::{OpenAPIDocuments, OpenAPIInfo};
/// use extension_apiserver::registry::group::APIGroupInfo;
///
/// let served = vec![APIGroupInfo::new("example.com").served()];
/// let openapi = OpenAPIDocuments::build(&served, &OpenAPIInfo::default());
/// let app: axum::Router = axum::Router::new().merge(openapi.router());
/// ```
#[derive(Clone, Debug)]
pub struct OpenAPIDocuments {
    inner: Arc<Documents>,
}

#[derive(Debug)]
struct Documents {
    v2: Document,
    v3_index: Document,
    /// By index path: `apis`, `apis/{group}`, `apis/{group}/{version}`.
    v3: HashMap<String, Document>,
}

impl OpenAPIDocuments {
    /// Builds and encodes the v2 document, every v3 document and the v3 index.
    pub fn build(groups: &[ServedGroup], info: &OpenAPIInfo) -> Self {
        Self::build_with(groups, Vec::new(), info)
    }

    /// [`build`](Self::build) with paths served beside the resources (`extra`), each in the
    /// v3 document of its group version and in the v2 document, with its definitions.
    pub(crate) fn build_with(
        groups: &[ServedGroup],
        extra: Vec<ExtraPaths>,
        info: &OpenAPIInfo,
    ) -> Self {
        let mut catalog = Catalog::build(groups);
        let mut v3_items = v3_path_items(groups);
        for paths in extra {
            catalog.extend(paths.definitions);
            let group = format!("apis/{}", paths.group);
            v3_items
                .entry(group)
                .or_insert_with(|| vec![operations::group_item(&paths.group)]);
            let version = format!("apis/{}/{}", paths.group, paths.version);
            v3_items
                .entry(version)
                .or_insert_with(|| vec![operations::version_item(&paths.group, &paths.version)])
                .extend(paths.items);
        }
        // The v2 document is the union of the v3 ones.
        let all: Vec<&PathItem> = v3_items.values().flatten().collect();
        let v2 = document(info, &catalog, &all, Dialect::Swagger2);
        let v3: HashMap<String, Document> = v3_items
            .iter()
            .map(|(path, items)| {
                let items: Vec<&PathItem> = items.iter().collect();
                (
                    path.clone(),
                    document(info, &catalog, &items, Dialect::OpenApi3),
                )
            })
            .collect();
        let v3_index = Document::json(&index(&v3), "application/json");
        Self {
            inner: Arc::new(Documents { v2, v3_index, v3 }),
        }
    }

    /// Routes `GET /openapi/v2`, `/openapi/v3` and `/openapi/v3/{path}`, to merge into the
    /// server's router.
    pub fn router<S>(&self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new()
            .route("/openapi/v2", get(v2))
            .route("/openapi/v3", get(v3_index))
            .route("/openapi/v3/{*path}", get(v3_document))
            .with_state(self.inner.clone())
    }
}

/// The v3 documents' paths by index key, as kube-apiserver splits them.
fn v3_path_items(groups: &[ServedGroup]) -> BTreeMap<String, Vec<PathItem>> {
    let mut documents = BTreeMap::new();
    documents.insert("apis".to_string(), vec![operations::root_item()]);
    for group in groups {
        documents.insert(
            format!("apis/{}", group.name),
            vec![operations::group_item(&group.name)],
        );
        for version in &group.versions {
            let key = format!("apis/{}/{}", group.name, version.version);
            documents.insert(key, operations::version_items(&group.name, version));
        }
    }
    documents
}

fn document(
    info: &OpenAPIInfo,
    catalog: &Catalog,
    items: &[&PathItem],
    dialect: Dialect,
) -> Document {
    let definitions = catalog.closure(operations::referenced(items), dialect);
    match dialect {
        Dialect::Swagger2 => {
            let value = render_v2::swagger(info, items, definitions);
            Document::json(&value, "application/json")
        }
        Dialect::OpenApi3 => {
            let value = render_v3::openapi3(info, items, definitions);
            Document::json(&value, "application/json")
        }
    }
}

/// `{"paths": {"apis/{group}/{version}": {"serverRelativeURL": "...?hash=..."}}}`.
fn index(documents: &HashMap<String, Document>) -> Value {
    let paths: serde_json::Map<String, Value> = documents
        .iter()
        .map(|(key, doc)| {
            (
                key.clone(),
                json!({"serverRelativeURL": relative_url(key, doc)}),
            )
        })
        .collect();
    json!({ "paths": paths })
}

fn relative_url(key: &str, doc: &Document) -> String {
    format!("/openapi/v3/{key}?hash={}", doc.hash())
}

/// Whether the client takes plain JSON; the protobuf encodings kube-openapi also offers are
/// not served, so a client asking only for them gets a 406.
fn accepts_json(headers: &HeaderMap) -> bool {
    media_ranges(headers)
        .iter()
        .any(|range| !range.is_qualified() && range.matches("application", "json"))
}

async fn v2(State(docs): State<Arc<Documents>>, headers: HeaderMap) -> Response {
    if !accepts_json(&headers) {
        return not_acceptable("application/json");
    }
    docs.v2.respond(&headers, no_cache())
}

async fn v3_index(State(docs): State<Arc<Documents>>, headers: HeaderMap) -> Response {
    docs.v3_index.respond(&headers, no_cache())
}

async fn v3_document(
    State(docs): State<Arc<Documents>>,
    Path(path): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let Some(doc) = docs.v3.get(path.trim_end_matches('/')) else {
        return Error::path_not_found().into_response();
    };
    if !accepts_json(&headers) {
        return not_acceptable("application/json");
    }
    match requested_hash(query.as_deref()) {
        // The URL names these exact bytes forever: any cache may keep them.
        Some(hash) if hash == doc.hash() => doc.respond(
            &headers,
            HeaderValue::from_static("public, immutable, max-age=31536000"),
        ),
        // An outdated link (the server restarted with other types): send the client to the
        // current one, as kube-openapi does.
        Some(_) => redirect(&relative_url(path.trim_end_matches('/'), doc)),
        None => doc.respond(&headers, no_cache()),
    }
}

fn requested_hash(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("hash="))
}

fn redirect(location: &str) -> Response {
    let mut response = StatusCode::MOVED_PERMANENTLY.into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, location);
    }
    headers.insert(header::CACHE_CONTROL, no_cache());
    response
}
