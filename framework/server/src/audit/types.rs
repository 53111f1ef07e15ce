//! `audit.k8s.io/v1` as kube-apiserver writes and reads it: [`Event`], [`EventList`] and the
//! [`Policy`] file, with kube's JSON field names (k8s-openapi has no audit types).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `audit.k8s.io/v1`.
pub const API_VERSION: &str = "audit.k8s.io/v1";

/// How much of a request an event records; each level includes the ones before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Level {
    /// No event.
    #[default]
    None,
    /// User, timestamps, resource, verb... but no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata, the request body and the response body.
    RequestResponse,
}

/// When in a request's life an event is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stage {
    /// As soon as the request is received, before it is handled further.
    RequestReceived,
    /// Once the response headers are sent, before the body (long-running requests only).
    ResponseStarted,
    /// When the response is complete.
    ResponseComplete,
    /// When the handler panicked.
    Panic,
}

/// `authentication.k8s.io/v1` `UserInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UserInfo {
    /// The user's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// The user's UID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The user's groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes from the authenticator.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a request is about.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// The resource (plural).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// The namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The object's UID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The API group (empty for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// The API version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// The object's resourceVersion.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// The subresource.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// The bounded fields of a `meta.k8s.io/v1` `Status` an event keeps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResponseStatus {
    /// Always `{}`, as kube-apiserver writes it.
    #[serde(default)]
    pub metadata: BTreeMap<String, Value>,
    /// `Success` or `Failure`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// What happened.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Why, machine-readable.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Details of the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// The HTTP status code.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: u16,
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

/// One audit event: what one request did, at one stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `Event`.
    pub kind: String,
    /// `audit.k8s.io/v1`.
    pub api_version: String,
    /// The level the policy chose.
    pub level: Level,
    /// The request's `Audit-Id`.
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// The stage this event was written at.
    pub stage: Stage,
    /// The request's path and query.
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    /// The verb (`create`, `get`... or a non-resource request's lower-cased method).
    pub verb: String,
    /// Who sent the request.
    pub user: UserInfo,
    /// Whom the user impersonated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    /// `X-Forwarded-For`, `X-Real-Ip`, then the connection's remote address.
    #[serde(rename = "sourceIPs", default, skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    /// The client's `User-Agent`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// The object the request is about (resource requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    /// The response's status (not at RequestReceived).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    /// The request body (Request level and above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    /// The response body (RequestResponse level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    /// When the request arrived (microseconds).
    pub request_received_timestamp: String,
    /// When this stage was reached (microseconds).
    pub stage_timestamp: String,
    /// What the authorizer, admission and other stages noted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// What a webhook backend POSTs: a batch of events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventList {
    /// `EventList`.
    pub kind: String,
    /// `audit.k8s.io/v1`.
    pub api_version: String,
    /// Always `{}`.
    #[serde(default)]
    pub metadata: BTreeMap<String, Value>,
    /// The events.
    pub items: Vec<Event>,
}

impl EventList {
    /// A list of `items`.
    pub fn new(items: Vec<Event>) -> Self {
        Self {
            kind: "EventList".into(),
            api_version: API_VERSION.into(),
            metadata: BTreeMap::new(),
            items,
        }
    }
}

/// The audit policy file (`--audit-policy-file`): the first rule that matches a request sets
/// its level.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    /// `Policy`.
    #[serde(default)]
    pub kind: String,
    /// `audit.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// The rules, in order.
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    /// Stages no event is written for, whatever the rule.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from request and response objects.
    #[serde(default)]
    pub omit_managed_fields: bool,
}

/// One rule: every non-empty list must match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// The level of requests that match.
    pub level: Level,
    /// User names; empty matches every user.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups, any of which the user must be in; empty matches every user.
    #[serde(default)]
    pub user_groups: Vec<String>,
    /// Verbs; empty matches every verb.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// Resources; empty matches every resource request. A rule with resources or namespaces
    /// never matches a non-resource request.
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    /// Namespaces (`""` for cluster-scoped resources); empty matches every namespace.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Non-resource paths, `*` as a trailing wildcard; a rule with them never matches a
    /// resource request.
    #[serde(rename = "nonResourceURLs", default)]
    pub non_resource_urls: Vec<String>,
    /// Stages no event is written for under this rule (beside the policy's).
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Overrides the policy's `omitManagedFields` when set.
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

/// Resources of one API group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    /// The group (`""` for the core group).
    #[serde(default)]
    pub group: String,
    /// Resources (`pods`, `pods/log`, `pods/*`, `*/scale`, `*`); empty matches all of the
    /// group.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names; empty matches every name.
    #[serde(default)]
    pub resource_names: Vec<String>,
}
