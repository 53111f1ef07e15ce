//! Headers kube-apiserver puts on every response, errors and health included: `Audit-Id`
//! (the client's own `Audit-ID`, or a new UUID; `WithAuditInit`),
//! `Cache-Control: no-cache, private` unless the handler chose another (`WithCacheControl`:
//! every answer is behind authentication, so no shared cache may keep it), and
//! `X-Content-Type-Options: nosniff` (its response writers set it on every object they write).

use axum::extract::Request;
use axum::response::Response;
use http::{header, HeaderName, HeaderValue};

/// `Audit-Id`, as kube-apiserver spells it on responses (`Audit-ID` in requests).
pub static AUDIT_ID: HeaderName = HeaderName::from_static("audit-id");

const NO_CACHE_PRIVATE: HeaderValue = HeaderValue::from_static("no-cache, private");
const NOSNIFF: HeaderValue = HeaderValue::from_static("nosniff");

/// The request's audit ID: the one the client (or the aggregator in front) sent, else new.
pub fn audit_id(request: &Request) -> HeaderValue {
    match request.headers().get(&AUDIT_ID) {
        Some(id) if !id.is_empty() => id.clone(),
        _ => {
            let id = uuid::Uuid::new_v4();
            let mut buf = uuid::Uuid::encode_buffer();
            HeaderValue::from_str(id.hyphenated().encode_lower(&mut buf))
                .unwrap_or(HeaderValue::from_static("unknown"))
        }
    }
}

/// Adds `Audit-Id`, `Cache-Control` and `X-Content-Type-Options` where the response has none.
pub fn finish(response: &mut Response, audit_id: HeaderValue) {
    let headers = response.headers_mut();
    headers.entry(&AUDIT_ID).or_insert(audit_id);
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(NO_CACHE_PRIVATE);
    headers
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(NOSNIFF);
}
