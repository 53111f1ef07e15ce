//! An error `Status` in the encoding the client asked for: kube-apiserver negotiates errors
//! like any object (`ErrorNegotiated`), so `Accept: application/yaml` gets a YAML `Status`.
//! Errors are built as JSON everywhere; the few clients asking for YAML pay the re-encoding.

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, header};
use serde_json::Value;

use crate::endpoints::negotiation::{Encoding, Endpoint, negotiate};

/// The largest error body re-encoded (a `Status` is small).
const MAX_STATUS_BYTES: usize = 1 << 20;

/// Whether an error to `request` is to be YAML: its `Accept` picks YAML for a plain object.
pub fn wants_yaml(request: &Request) -> bool {
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok());
    // Only when YAML is asked for: the cheap test first.
    accept.is_some_and(|a| a.contains("yaml"))
        && negotiate(accept, Endpoint::Plain).is_ok_and(|t| t.encoding == Encoding::Yaml)
}

/// `response` with its JSON `Status` body, if it is an error with one, in YAML.
pub async fn as_yaml(response: Response) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|c| c == "application/json");
    if !(response.status().is_client_error() || response.status().is_server_error()) || !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_STATUS_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let yaml = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(|status| status["kind"] == "Status")
        .and_then(|status| serde_norway::to_string(&status).ok());
    let Some(yaml) = yaml else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(yaml))
}
