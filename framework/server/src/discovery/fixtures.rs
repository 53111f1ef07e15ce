//! Hand-built served groups for the discovery and OpenAPI tests, and a request helper.

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::Serialize;
use tower::ServiceExt;

use crate::registry::served::{
    ServedGroup, ServedResource, ServedSubresource, ServedVersion, schema_of,
};
use crate::runtime::{ResourceInfo, Scope};

/// A Flunder is an example type with spec and status.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Flunder {
    metadata: ObjectMeta,
    /// The desired state of the flunder.
    spec: FlunderSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<FlunderStatus>,
}

/// FlunderSpec is the specification of a Flunder.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct FlunderSpec {
    /// A name of another flunder or fischer.
    reference: Option<String>,
    /// What the reference points at.
    reference_type: Option<ReferenceType>,
    /// How many copies to keep.
    replicas: u32,
    /// Free-form tags.
    #[serde(default)]
    tags: Vec<String>,
    /// Arbitrary settings.
    #[serde(default)]
    settings: BTreeMap<String, String>,
    /// An owner, maybe.
    owner: Option<Box<Flunder>>,
    /// Anything at all.
    extra: Option<serde_json::Value>,
}

/// The kind of object a reference names.
#[derive(Serialize, JsonSchema)]
#[allow(dead_code)] // only its schema is used
enum ReferenceType {
    /// Another Flunder.
    Flunder,
    /// A Fischer.
    Fischer,
}

/// FlunderStatus is the observed state of a Flunder.
#[derive(Serialize, JsonSchema)]
struct FlunderStatus {
    /// Copies running.
    ready: Option<i64>,
}

/// A Fischer is cluster-scoped and has no status.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Fischer {
    metadata: ObjectMeta,
    /// Names of disallowed flunders.
    #[serde(default)]
    disallowed_flunders: Vec<String>,
}

pub(crate) const GROUP: &str = "wardle.example.com";

const FLUNDER: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1alpha1",
    kind: "Flunder",
    plural: "flunders",
    singular: "flunder",
    scope: Scope::Namespaced,
    short_names: &["fl"],
    categories: &["all"],
    status: true,
    scale: None,
    printer_columns: &[],
    selectable_fields: &[],
};

const FISCHER: ResourceInfo = ResourceInfo {
    kind: "Fischer",
    plural: "fischers",
    singular: "fischer",
    scope: Scope::Cluster,
    short_names: &[],
    categories: &[],
    status: false,
    scale: None,
    ..FLUNDER
};

/// Every verb of a generic store, in discovery order.
pub(crate) const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub(crate) const PATCH_TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

fn flunders(version: &'static str) -> ServedResource {
    ServedResource {
        info: ResourceInfo { version, ..FLUNDER },
        storage_version: version,
        // Deliberately out of order: discovery sorts verbs as kube does.
        verbs: vec![
            "watch",
            "update",
            "patch",
            "list",
            "get",
            "deletecollection",
            "delete",
            "create",
        ],
        subresources: vec![ServedSubresource {
            name: "status".into(),
            verbs: vec!["get", "patch", "update"],
            info: ResourceInfo { version, ..FLUNDER },
            handler: None,
        }],
        patch_types: PATCH_TYPES.to_vec(),
        schema: schema_of::<Flunder>,
    }
}

fn fischers(version: &'static str) -> ServedResource {
    ServedResource {
        info: ResourceInfo { version, ..FISCHER },
        storage_version: version,
        verbs: ALL_VERBS.to_vec(),
        subresources: Vec::new(),
        patch_types: PATCH_TYPES[..2].to_vec(),
        schema: schema_of::<Fischer>,
    }
}

/// `wardle.example.com` with `v1beta1` (preferred) and `v1alpha1`, and a read-only
/// `aaa.example.com` registered after it (aggregated discovery sorts groups by name).
pub(crate) fn groups() -> Vec<ServedGroup> {
    let wardle = ServedGroup {
        name: GROUP.into(),
        versions: vec![
            ServedVersion {
                version: "v1beta1".into(),
                resources: vec![flunders("v1beta1")],
            },
            ServedVersion {
                version: "v1alpha1".into(),
                resources: vec![flunders("v1alpha1"), fischers("v1alpha1")],
            },
        ],
    };
    let read_only = ServedResource {
        info: ResourceInfo {
            group: "aaa.example.com",
            version: "v1",
            ..FISCHER
        },
        storage_version: "v1",
        verbs: vec!["get", "list"],
        subresources: Vec::new(),
        patch_types: Vec::new(),
        schema: schema_of::<Fischer>,
    };
    let aaa = ServedGroup {
        name: "aaa.example.com".into(),
        versions: vec![ServedVersion {
            version: "v1".into(),
            resources: vec![read_only],
        }],
    };
    vec![wardle, aaa]
}

/// A response, read completely.
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }

    /// A header as a string, `""` when absent.
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", |v| v.to_str().unwrap())
    }
}

/// Sends `GET uri` with `headers` through `router`.
pub(crate) async fn get(router: &Router, uri: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = Request::get(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}
