//! A description of what the server serves, for discovery and OpenAPI.
//!
//! The builder produces one [`ServedGroup`] per API group from the installed storages; the
//! `discovery` and `openapi` modules turn them into documents once, at start.

use crate::runtime::ResourceInfo;

pub use super::schema::{SchemaFn, schema_of};

/// One subresource of a resource, e.g. `status`.
#[derive(Clone, Debug)]
pub struct ServedSubresource {
    /// The path segment after the object's name, e.g. `status`.
    pub name: String,
    /// The verbs the subresource supports, e.g. `["get", "patch", "update"]`.
    pub verbs: Vec<&'static str>,
    /// What it serves: the parent's kind (`status`), or another (`scale`: `autoscaling/v1`
    /// `Scale`; an action's or a view's answer; a connection's options,
    /// `{Kind}{Subresource}Options` as `pods/attach` lists `PodAttachOptions`).
    pub info: ResourceInfo,
    /// The action, view, stream or connection serving it, if it is one.
    pub handler: Option<crate::registry::subresource::Subresource>,
}

/// One resource of one group version.
#[derive(Clone, Debug)]
pub struct ServedResource {
    /// Names, kind, scope, columns.
    pub info: ResourceInfo,
    /// The version its objects are stored in (its own unless served converted).
    pub storage_version: &'static str,
    /// The verbs the main resource supports, in discovery's order, e.g.
    /// `["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]`.
    pub verbs: Vec<&'static str>,
    /// Subresources, e.g. `status`.
    pub subresources: Vec<ServedSubresource>,
    /// The patch content types accepted by `patch`, e.g. `application/merge-patch+json`.
    pub patch_types: Vec<&'static str>,
    /// The JSON schema of the stored type (without `apiVersion` and `kind`, which OpenAPI adds).
    pub schema: SchemaFn,
}

/// One version of a group.
#[derive(Clone, Debug)]
pub struct ServedVersion {
    /// e.g. `v1alpha1`.
    pub version: String,
    /// Its resources, in registration order.
    pub resources: Vec<ServedResource>,
}

/// One API group and its versions, highest priority first.
#[derive(Clone, Debug)]
pub struct ServedGroup {
    /// e.g. `wardle.example.com`.
    pub name: String,
    /// Versions, the preferred one first.
    pub versions: Vec<ServedVersion>,
}
