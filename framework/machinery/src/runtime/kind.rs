//! What names the kind of a typed object a server answers with: every [`Resource`], and the
//! `meta.k8s.io/v1` `Status` that actions such as `pods/eviction` answer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use schemars::JsonSchema;
use serde::Serialize;

use super::Resource;

/// A typed object that an answer carries, with its `apiVersion` and `kind`: a subresource's
/// answer may be of another kind than its parent (kube's `pods/eviction` answers `Status`).
///
/// ```
/// use extension_apiserver_machinery::runtime::ObjectKind;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
/// assert_eq!(Status::api_version(), "v1");
/// assert_eq!(Status::kind(), "Status");
/// ```
pub trait ObjectKind: Serialize + JsonSchema + Send + Sync + 'static {
    /// `{group}/{version}`, or `{version}` for the core group.
    fn api_version() -> String;
    /// The kind, e.g. `Flunder`.
    fn kind() -> &'static str;
    /// Its group (empty for the core group and `meta.k8s.io`'s `Status`, as kube writes it).
    fn group() -> &'static str {
        ""
    }
    /// Its version.
    fn version() -> &'static str;
}

impl<T: Resource> ObjectKind for T {
    fn api_version() -> String {
        T::INFO.api_version()
    }
    fn kind() -> &'static str {
        T::INFO.kind
    }
    fn group() -> &'static str {
        T::INFO.group
    }
    fn version() -> &'static str {
        T::INFO.version
    }
}

/// kube-apiserver writes `Status` as `apiVersion: v1` whatever the group.
impl ObjectKind for Status {
    fn api_version() -> String {
        "v1".into()
    }
    fn kind() -> &'static str {
        "Status"
    }
    fn version() -> &'static str {
        "v1"
    }
}
