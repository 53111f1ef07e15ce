//! The one error type of the framework. Every error a client can see is a `meta.k8s.io/v1`
//! `Status` with the code, reason and details kube-apiserver would give.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use kube_core::response::{Status, StatusCause, StatusDetails, StatusSummary};
use serde::Serialize;

use crate::runtime::{FieldError, ResourceInfo};

/// A result whose error is a client-visible [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An API error: a `Status` with an HTTP code, and optionally a `Retry-After`.
///
/// ```
/// use apiserver::Error;
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
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            info.group_resource()
        );
        Self::new(409, "Conflict", message).with_details(Self::details_for(info, name))
    }

    /// 422 `Invalid` with one cause per field error.
    pub fn invalid(info: &ResourceInfo, name: &str, errors: &[FieldError]) -> Self {
        let details = StatusDetails {
            kind: info.kind.to_string(),
            ..Self::details_for(info, name)
        };
        Self::invalid_with(&info.group_kind(), details, errors)
    }

    /// 422 `Invalid` of request options (`ListOptions`, `CreateOptions`, ...): the kind in
    /// `meta.k8s.io`, no name, one cause per field error, as kube-apiserver's handlers answer.
    pub fn invalid_options(kind: &str, errors: &[FieldError]) -> Self {
        let details = StatusDetails {
            group: "meta.k8s.io".into(),
            kind: kind.to_string(),
            ..empty_details()
        };
        Self::invalid_with(&format!("{kind}.meta.k8s.io"), details, errors)
    }

    fn invalid_with(group_kind: &str, details: StatusDetails, errors: &[FieldError]) -> Self {
        let list = if errors.len() == 1 {
            errors[0].to_string()
        } else {
            let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
            format!("[{}]", all.join(", "))
        };
        let message = format!("{group_kind} {:?} is invalid: {list}", details.name);
        let causes = errors
            .iter()
            .map(|e| StatusCause {
                reason: e.type_.reason().to_string(),
                message: e.body(),
                field: e.field.clone(),
            })
            .collect();
        Self::new(422, "Invalid", message).with_details(StatusDetails { causes, ..details })
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
    let body = StatusBody {
        kind: "Status",
        api_version: "v1",
        metadata: serde_json::Map::new(),
        status,
    };
    serde_json::to_value(body).unwrap_or(serde_json::Value::Null)
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
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
