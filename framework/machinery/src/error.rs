//! The one error type of the framework. Every error a client can see is a `meta.k8s.io/v1`
//! `Status` with the code, reason and details kube-apiserver would give.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube_core::response::{Status, StatusCause, StatusDetails, StatusSummary};
use serde::Serialize;

use crate::runtime::{FieldError, ResourceInfo};

/// A result whose error is a client-visible [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An API error: a `Status` with an HTTP code, and optionally a `Retry-After`.
///
/// ```
/// use extension_apiserver_machinery::Error;
/// let e = Error::bad_request("name must not be empty");
/// assert_eq!(e.code(), 400);
/// assert_eq!(e.reason(), "BadRequest");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    // Boxed: errors are rare, and a small `Result` keeps every call site cheap.
    status: Box<Status>,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.status.code, self.status.reason, self.status.message
        )
    }
}

impl std::error::Error for Error {}

/// `Status` as kube-apiserver writes it: with `kind`, `apiVersion` and `metadata`.
#[derive(Serialize)]
struct StatusBody<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: serde_json::Map<String, serde_json::Value>,
    #[serde(flatten)]
    status: &'a Status,
}

impl Error {
    /// A failure `Status` with this code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        let status = Status {
            status: Some(StatusSummary::Failure),
            code,
            message: message.into(),
            metadata: None,
            reason: reason.to_string(),
            details: None,
        };
        Self {
            status: Box::new(status),
        }
    }

    /// The same error with these `details` (name, group, kind, causes).
    pub fn with_details(mut self, details: StatusDetails) -> Self {
        self.status.details = Some(details);
        self
    }

    /// Its details, to add causes to.
    pub fn details_mut(&mut self) -> Option<&mut StatusDetails> {
        self.status.details.as_mut()
    }

    /// The same error with `metadata.continue`: the token a 410 for an expired `continue`
    /// offers to go on with (kube-apiserver's "inconsistent continue").
    pub fn with_continue(mut self, token: String) -> Self {
        self.status.metadata = Some(ListMeta {
            continue_: Some(token),
            ..ListMeta::default()
        });
        self
    }

    /// `metadata.continue`, when the error offers one.
    pub fn continue_token(&self) -> Option<&str> {
        self.status.metadata.as_ref()?.continue_.as_deref()
    }

    fn details_for(info: &ResourceInfo, name: &str) -> StatusDetails {
        StatusDetails {
            name: name.to_string(),
            group: info.group.to_string(),
            kind: info.plural.to_string(),
            ..empty_details()
        }
    }

    /// 404 `NotFound`: `flunders.wardle.example.com "x" not found`.
    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        let message = format!("{} \"{name}\" not found", info.group_resource());
        Self::new(404, "NotFound", message).with_details(Self::details_for(info, name))
    }

    /// 404 `NotFound` for a path nothing is served at.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(empty_details())
    }

    /// 409 `AlreadyExists`.
    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        let message = format!("{} \"{name}\" already exists", info.group_resource());
        Self::new(409, "AlreadyExists", message).with_details(Self::details_for(info, name))
    }

    /// 409 `AlreadyExists` when the object holding the name is being deleted (it waits for
    /// finalizers): kube says so, so that the client knows to wait rather than pick another
    /// name.
    pub fn already_exists_being_deleted(info: &ResourceInfo, name: &str) -> Self {
        let mut error = Self::already_exists(info, name);
        error.status.message = format!("object is being deleted: {}", error.status.message);
        error
    }

    /// 409 `AlreadyExists` when every name generated from `generateName` was taken (kube's
    /// `NewGenerateNameConflict`): the client may retry after a second.
    pub fn generate_name_conflict(info: &ResourceInfo, name: &str) -> Self {
        let message = format!(
            "{} \"{name}\" already exists, the server was not allowed to generate a unique name",
            info.group_resource()
        );
        Self::new(409, "AlreadyExists", message)
            .with_details(Self::details_for(info, name))
            .with_retry_after(1)
    }

    /// 409 `Conflict` for a stale resourceVersion (optimistic concurrency).
    pub fn conflict(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict_because(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 `Conflict` with a reason of our own (failed precondition, ...).
    pub fn conflict_because(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::conflict_in(info.group, info.plural, name, why)
    }

    /// 409 `Conflict` on `{resource}.{group}` as kube's `NewConflict` writes it. kube names
    /// the resource in most conflicts, but the kind in a delete's failed precondition
    /// (`BeforeDelete`), so both are callers' choice.
    pub fn conflict_in(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            qualified(group, resource)
        );
        let details = StatusDetails {
            name: name.to_string(),
            group: group.to_string(),
            kind: resource.to_string(),
            ..empty_details()
        };
        Self::new(409, "Conflict", message).with_details(details)
    }

    /// 422 `Invalid` with one cause per field error.
    pub fn invalid(info: &ResourceInfo, name: &str, errors: &[FieldError]) -> Self {
        Self::invalid_in(info.group, info.kind, name, errors)
    }

    /// 422 `Invalid` of request options (`ListOptions`, `CreateOptions`, ...): the kind in
    /// `meta.k8s.io`, no name, one cause per field error, as kube-apiserver's handlers answer.
    pub fn invalid_options(kind: &str, errors: &[FieldError]) -> Self {
        Self::invalid_in("meta.k8s.io", kind, "", errors)
    }

    /// 422 `Invalid` for `{kind}.{group}` as kube's `NewInvalid` writes it: kube names a
    /// kind here, or a resource where it has none at hand (a missing resourceVersion), or
    /// `DeleteOptions.meta.k8s.io` for bad delete options.
    pub fn invalid_in(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let list = if errors.len() == 1 {
            errors[0].to_string()
        } else {
            let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
            format!("[{}]", all.join(", "))
        };
        let message = format!("{} \"{name}\" is invalid: {list}", qualified(group, kind));
        let causes = errors
            .iter()
            .map(|e| StatusCause {
                reason: e.type_.reason().to_string(),
                message: e.body(),
                field: e.field.clone(),
            })
            .collect();
        let details = StatusDetails {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            causes,
            ..empty_details()
        };
        Self::new(422, "Invalid", message).with_details(details)
    }

    /// 409 `Conflict` of a server-side apply, as kube's `NewApplyConflict`: details carry
    /// only the causes (one `FieldManagerConflict` per contested field).
    pub fn apply_conflict(message: impl Into<String>, causes: Vec<StatusCause>) -> Self {
        let details = StatusDetails {
            causes,
            ..empty_details()
        };
        Self::new(409, "Conflict", message).with_details(details)
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 `Unauthorized`.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 `Forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 403 `Forbidden` of object `name` of `{resource}.{group}`, as kube's `NewForbidden`
    /// writes it (`flunders.wardle.example.com "f" is forbidden: {why}`).
    pub fn forbidden_in(
        group: &str,
        resource: &str,
        name: &str,
        why: impl std::fmt::Display,
    ) -> Self {
        let qualified = qualified(group, resource);
        let message = match (qualified.is_empty(), name.is_empty()) {
            (true, _) => format!("forbidden: {why}"),
            (false, true) => format!("{qualified} is forbidden: {why}"),
            (false, false) => format!("{qualified} \"{name}\" is forbidden: {why}"),
        };
        let details = StatusDetails {
            name: name.to_string(),
            group: group.to_string(),
            kind: resource.to_string(),
            ..empty_details()
        };
        Self::new(403, "Forbidden", message).with_details(details)
    }

    /// 405 `MethodNotAllowed`.
    pub fn method_not_supported(info: &ResourceInfo, verb: &str) -> Self {
        let message = format!(
            "{verb} is not supported on resources of kind {:?}",
            info.group_kind()
        );
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 405 for a method no route accepts.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// 406 `NotAcceptable`.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 410 `Expired` (a resourceVersion or continue token too old).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413 `RequestEntityTooLarge`.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 `UnsupportedMediaType`.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 429 `TooManyRequests` with `Retry-After`.
    pub fn too_many_requests(retry_after_seconds: u32) -> Self {
        Self::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
        .with_retry_after(retry_after_seconds)
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
    }

    /// 503 `ServiceUnavailable`.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// 504 `Timeout`.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// Adds `details.retryAfterSeconds` (and so a `Retry-After` header).
    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        let details = self.status.details.get_or_insert_with(empty_details);
        details.retry_after_seconds = seconds;
        self
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        self.status.code
    }

    /// The `reason`, e.g. `NotFound`.
    pub fn reason(&self) -> &str {
        &self.status.reason
    }

    /// The `reason` as a [`StatusReason`] (`Unknown` for one kube does not define).
    pub fn status_reason(&self) -> StatusReason {
        StatusReason::from_reason(&self.status.reason)
    }

    /// Whether the reason is `reason`, or (as apimachinery's `errors` does for an error with
    /// no reason it knows) the code is `code`.
    fn is(&self, reason: StatusReason, code: u16) -> bool {
        match self.status_reason() {
            StatusReason::Unknown => self.status.code == code,
            known => known == reason,
        }
    }

    /// 404 `NotFound` (apimachinery's `IsNotFound`).
    pub fn is_not_found(&self) -> bool {
        self.is(StatusReason::NotFound, 404)
    }

    /// 409 `AlreadyExists` (`IsAlreadyExists`).
    pub fn is_already_exists(&self) -> bool {
        self.status_reason() == StatusReason::AlreadyExists
    }

    /// 409 `Conflict` (`IsConflict`).
    pub fn is_conflict(&self) -> bool {
        self.is(StatusReason::Conflict, 409)
    }

    /// 422 `Invalid` (`IsInvalid`).
    pub fn is_invalid(&self) -> bool {
        self.is(StatusReason::Invalid, 422)
    }

    /// 400 `BadRequest` (`IsBadRequest`).
    pub fn is_bad_request(&self) -> bool {
        self.is(StatusReason::BadRequest, 400)
    }

    /// 401 `Unauthorized` (`IsUnauthorized`).
    pub fn is_unauthorized(&self) -> bool {
        self.is(StatusReason::Unauthorized, 401)
    }

    /// 403 `Forbidden` (`IsForbidden`).
    pub fn is_forbidden(&self) -> bool {
        self.is(StatusReason::Forbidden, 403)
    }

    /// 410 `Expired` or `Gone` (`IsResourceExpired` / `IsGone`).
    pub fn is_expired(&self) -> bool {
        match self.status_reason() {
            StatusReason::Expired | StatusReason::Gone => true,
            StatusReason::Unknown => self.status.code == 410,
            _ => false,
        }
    }

    /// 429 `TooManyRequests` (`IsTooManyRequests`).
    pub fn is_too_many_requests(&self) -> bool {
        self.is(StatusReason::TooManyRequests, 429)
    }

    /// 500 `InternalError` (`IsInternalError`).
    pub fn is_internal_error(&self) -> bool {
        self.is(StatusReason::InternalError, 500)
    }

    /// 503 `ServiceUnavailable` (`IsServiceUnavailable`).
    pub fn is_service_unavailable(&self) -> bool {
        self.is(StatusReason::ServiceUnavailable, 503)
    }

    /// 504 `Timeout` (`IsTimeout`).
    pub fn is_timeout(&self) -> bool {
        self.is(StatusReason::Timeout, 504)
    }

    /// The human message.
    pub fn message(&self) -> &str {
        &self.status.message
    }

    /// The `Status` object.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// The `Status` as JSON, with `kind` and `apiVersion`.
    pub fn to_json(&self) -> serde_json::Value {
        status_json(&self.status)
    }
}

/// The `reason` of a `Status`, as `k8s.io/apimachinery`'s `metav1.StatusReason` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StatusReason {
    /// A reason kube does not define (or none).
    Unknown,
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 404.
    NotFound,
    /// 409, on create.
    AlreadyExists,
    /// 409, a write that lost a race or failed a precondition.
    Conflict,
    /// 410, a resource (or resourceVersion) that is gone for good.
    Gone,
    /// 410, a resourceVersion or continue token older than what is kept.
    Expired,
    /// 422.
    Invalid,
    /// 504 (also 500 with a server-side timeout).
    ServerTimeout,
    /// 504.
    Timeout,
    /// 429.
    TooManyRequests,
    /// 400.
    BadRequest,
    /// 405.
    MethodNotAllowed,
    /// 406.
    NotAcceptable,
    /// 413.
    RequestEntityTooLarge,
    /// 415.
    UnsupportedMediaType,
    /// 500.
    InternalError,
    /// 500, for a storage read of an object that cannot be decoded.
    StorageReadError,
    /// 503.
    ServiceUnavailable,
}

impl StatusReason {
    /// The reason's name, as written in a `Status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "",
            Self::Unauthorized => "Unauthorized",
            Self::Forbidden => "Forbidden",
            Self::NotFound => "NotFound",
            Self::AlreadyExists => "AlreadyExists",
            Self::Conflict => "Conflict",
            Self::Gone => "Gone",
            Self::Expired => "Expired",
            Self::Invalid => "Invalid",
            Self::ServerTimeout => "ServerTimeout",
            Self::Timeout => "Timeout",
            Self::TooManyRequests => "TooManyRequests",
            Self::BadRequest => "BadRequest",
            Self::MethodNotAllowed => "MethodNotAllowed",
            Self::NotAcceptable => "NotAcceptable",
            Self::RequestEntityTooLarge => "RequestEntityTooLarge",
            Self::UnsupportedMediaType => "UnsupportedMediaType",
            Self::InternalError => "InternalError",
            Self::StorageReadError => "StorageReadError",
            Self::ServiceUnavailable => "ServiceUnavailable",
        }
    }

    /// The reason named `reason`; [`Unknown`](Self::Unknown) for any other string.
    pub fn from_reason(reason: &str) -> Self {
        const ALL: [StatusReason; 19] = [
            StatusReason::Unauthorized,
            StatusReason::Forbidden,
            StatusReason::NotFound,
            StatusReason::AlreadyExists,
            StatusReason::Conflict,
            StatusReason::Gone,
            StatusReason::Expired,
            StatusReason::Invalid,
            StatusReason::ServerTimeout,
            StatusReason::Timeout,
            StatusReason::TooManyRequests,
            StatusReason::BadRequest,
            StatusReason::MethodNotAllowed,
            StatusReason::NotAcceptable,
            StatusReason::RequestEntityTooLarge,
            StatusReason::UnsupportedMediaType,
            StatusReason::InternalError,
            StatusReason::StorageReadError,
            StatusReason::ServiceUnavailable,
        ];
        ALL.into_iter()
            .find(|r| r.as_str() == reason)
            .unwrap_or(Self::Unknown)
    }
}

impl std::fmt::Display for StatusReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `Status` kube-apiserver answers a delete that removed the object with.
pub fn deleted_status(info: &ResourceInfo, name: &str, uid: &str) -> serde_json::Value {
    let status = Status {
        status: Some(StatusSummary::Success),
        details: Some(StatusDetails {
            uid: uid.to_string(),
            ..Error::details_for(info, name)
        }),
        ..Status::default()
    };
    status_json(&status)
}

/// `{name}.{group}`, or `{name}` for the core group, as `schema.GroupResource.String()`.
fn qualified(group: &str, name: &str) -> String {
    if group.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{group}")
    }
}

fn empty_details() -> StatusDetails {
    StatusDetails {
        name: String::new(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: Vec::new(),
        retry_after_seconds: 0,
    }
}

/// A `Status` as JSON, with `kind: Status`, `apiVersion: v1` and empty `metadata`.
pub fn status_json(status: &Status) -> serde_json::Value {
    // The status's own list metadata (a continue token) is the body's `metadata`.
    let metadata = status
        .metadata
        .as_ref()
        .and_then(|m| serde_json::to_value(m).ok())
        .and_then(|m| m.as_object().cloned())
        .unwrap_or_default();
    let body = StatusBody {
        kind: "Status",
        api_version: "v1",
        metadata,
        status,
    };
    serde_json::to_value(body).unwrap_or(serde_json::Value::Null)
}

/// The `Status` as a response: its code, the JSON body, and `Retry-After` when it says so.
#[cfg(feature = "axum")]
impl axum::response::IntoResponse for Error {
    fn into_response(self) -> axum::response::Response {
        use http::{HeaderValue, StatusCode, header};
        let code =
            StatusCode::from_u16(self.status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.to_json()).unwrap_or_default();
        let mut response = (code, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let retry = self
            .status
            .details
            .as_ref()
            .map_or(0, |d| d.retry_after_seconds);
        if retry > 0 {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(retry));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: ResourceInfo = crate::runtime::resource::TEST_INFO;

    #[test]
    fn reasons_are_typed_as_apimachinerys_errors_package_reads_them() {
        assert!(Error::not_found(&INFO, "x").is_not_found());
        assert!(!Error::not_found(&INFO, "x").is_conflict());
        assert!(Error::already_exists(&INFO, "x").is_already_exists());
        assert!(!Error::already_exists(&INFO, "x").is_conflict());
        assert!(Error::conflict(&INFO, "x").is_conflict());
        assert!(Error::bad_request("no").is_bad_request());
        assert!(Error::timeout("slow").is_timeout());
        // A reason kube does not define: the code decides, as in apimachinery.
        assert!(Error::new(404, "Whatever", "gone").is_not_found());
        assert!(Error::new(410, "", "old").is_expired());
        // A known reason wins over the code.
        assert!(!Error::new(404, "Conflict", "odd").is_not_found());
        for reason in [
            "NotFound",
            "Expired",
            "StorageReadError",
            "RequestEntityTooLarge",
        ] {
            assert_eq!(StatusReason::from_reason(reason).as_str(), reason);
        }
        assert_eq!(StatusReason::from_reason("Nope"), StatusReason::Unknown);
    }

    #[test]
    fn not_found_matches_kube() {
        let json = Error::not_found(&INFO, "x").to_json();
        assert_eq!(json["kind"], "Status");
        assert_eq!(json["apiVersion"], "v1");
        assert_eq!(json["status"], "Failure");
        assert_eq!(
            json["message"],
            "flunders.wardle.example.com \"x\" not found"
        );
        assert_eq!(json["reason"], "NotFound");
        assert_eq!(json["details"]["kind"], "flunders");
        assert_eq!(json["code"], 404);
    }

    #[test]
    fn invalid_lists_every_cause() {
        let errors = [
            FieldError::required("spec.reference", ""),
            FieldError::invalid("metadata.name", "A", "must be lower case"),
        ];
        let json = Error::invalid(&INFO, "x", &errors).to_json();
        assert_eq!(json["code"], 422);
        assert_eq!(json["details"]["kind"], "Flunder");
        assert_eq!(json["details"]["causes"].as_array().unwrap().len(), 2);
        assert_eq!(json["details"]["causes"][1]["field"], "metadata.name");
        assert_eq!(
            json["message"],
            "Flunder.wardle.example.com \"x\" is invalid: [spec.reference: Required value, metadata.name: Invalid value: \"A\": must be lower case]"
        );
    }
}
