//! Headers kube-apiserver puts on every response, errors and health included: `Audit-Id`
//! (the client's own `Audit-ID`, or a new UUID; `WithAuditInit`),
//! `Cache-Control: no-cache, private` unless the handler chose another (`WithCacheControl`:
//! every answer is behind authentication, so no shared cache may keep it), and
//! `X-Content-Type-Options: nosniff` (its response writers set it on every object they write).

use axum::extract::Request;
use axum::response::Response;
use http::{HeaderName, HeaderValue, header};

/// `Audit-Id`, as kube-apiserver spells it on responses (`Audit-ID` in requests).
pub static AUDIT_ID: HeaderName = HeaderName::from_static("audit-id");

const NO_CACHE_PRIVATE: HeaderValue = HeaderValue::from_static("no-cache, private");
const NOSNIFF: HeaderValue = HeaderValue::from_static("nosniff");

/// The request's audit ID: the one the client (or the aggregator in front) sent, else new.
pub fn audit_id(request: &Request) -> HeaderValue {
    match request.headers().get(&AUDIT_ID) {
        Some(id) if !id.is_empty() => id.clone(),
        _ => {
            // A version 4 UUID from the thread's RNG: `Uuid::new_v4` asks the OS for the
            // bytes, a system call on every request.
            let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
            let mut buf = uuid::Uuid::encode_buffer();
            HeaderValue::from_str(id.hyphenated().encode_lower(&mut buf))
                .unwrap_or(HeaderValue::from_static("unknown"))
        }
    }
}

/// Adds `Audit-Id`, `Cache-Control` and `X-Content-Type-Options` where the response has none.
///
/// The `Audit-Id` is new with every request, so HTTP/2 sends it as a literal never indexed
/// (marked sensitive): entered in the connection's HPACK table, each one would only push out
/// the headers that repeat (`Content-Type`, `Cache-Control`, ...), and the encoder would
/// compare every later value with it. The client reads the same header either way.
pub fn finish(response: &mut Response, mut audit_id: HeaderValue) {
    audit_id.set_sensitive(true);
    let headers = response.headers_mut();
    headers.entry(&AUDIT_ID).or_insert(audit_id);
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(NO_CACHE_PRIVATE);
    headers
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(NOSNIFF);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_audit_id_is_a_random_v4_uuid_and_a_given_one_is_kept() {
        let request = Request::new(axum::body::Body::empty());
        let (a, b) = (audit_id(&request), audit_id(&request));
        assert_ne!(a, b);
        let parsed = uuid::Uuid::parse_str(a.to_str().unwrap()).unwrap();
        assert_eq!(parsed.get_version(), Some(uuid::Version::Random));
        let mut request = Request::new(axum::body::Body::empty());
        request
            .headers_mut()
            .insert(&AUDIT_ID, HeaderValue::from_static("from-the-aggregator"));
        assert_eq!(audit_id(&request), "from-the-aggregator");
    }

    #[test]
    fn the_audit_id_is_never_indexed_by_hpack() {
        let mut response = Response::new(axum::body::Body::empty());
        finish(&mut response, HeaderValue::from_static("an-id"));
        let id = &response.headers()[&AUDIT_ID];
        assert_eq!(id, "an-id");
        assert!(id.is_sensitive(), "sent as a literal never indexed");
        assert!(!response.headers()[header::CACHE_CONTROL].is_sensitive());
    }
}
