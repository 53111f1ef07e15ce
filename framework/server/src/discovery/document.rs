//! Encoded documents: bytes, ETag and content type computed once at start.
//!
//! Discovery and OpenAPI handlers only pick one of these and answer with it, or with
//! `304 Not Modified` when the client already holds the same bytes.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Serialize;
use sha2::{Digest, Sha512};

/// `Cache-Control` kube-apiserver sends with documents that may change on restart.
pub(crate) fn no_cache() -> HeaderValue {
    HeaderValue::from_static("no-cache, private")
}

/// One representation of a document, ready to send.
#[derive(Clone)]
pub(crate) struct Document {
    body: Bytes,
    hash: String,
    etag: HeaderValue,
    content_type: HeaderValue,
}

impl Document {
    /// Wraps encoded bytes; the ETag is the upper-case hex SHA-512 of the bytes, as
    /// kube-apiserver computes it for discovery and OpenAPI v3.
    pub(crate) fn new(body: Vec<u8>, content_type: &'static str) -> Self {
        let hash = hex_upper(&Sha512::digest(&body));
        let etag = HeaderValue::from_str(&format!("\"{hash}\""))
            .expect("a quoted hex string is a valid header value");
        Self {
            body: Bytes::from(body),
            hash,
            etag,
            content_type: HeaderValue::from_static(content_type),
        }
    }

    /// Encodes `value` as JSON.
    pub(crate) fn json(value: &impl Serialize, content_type: &'static str) -> Self {
        // Serializing the apimachinery types and JSON values used here cannot fail: all map
        // keys are strings and no custom serializer returns an error.
        let body = serde_json::to_vec(value).expect("document serializes to JSON");
        Self::new(body, content_type)
    }

    /// Encodes `value` as YAML.
    pub(crate) fn yaml(value: &impl Serialize) -> Self {
        let body = serde_norway::to_string(value).expect("document serializes to YAML");
        Self::new(body.into_bytes(), "application/yaml")
    }

    /// The unquoted ETag, used as the `hash` of OpenAPI v3 URLs.
    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }

    /// `200` with the document, or `304` when `If-None-Match` names its ETag. Both carry the
    /// ETag, `Vary: Accept` (the representation depends on it) and `cache_control`.
    pub(crate) fn respond(&self, request: &HeaderMap, cache_control: HeaderValue) -> Response {
        let mut response = if self.is_cached_by(request) {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            response
        } else {
            let mut response = Response::new(Body::from(self.body.clone()));
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, self.content_type.clone());
            response
        };
        let headers = response.headers_mut();
        headers.insert(header::ETAG, self.etag.clone());
        headers.insert(header::VARY, HeaderValue::from_static("Accept"));
        headers.insert(header::CACHE_CONTROL, cache_control);
        response
    }

    fn is_cached_by(&self, request: &HeaderMap) -> bool {
        let ours = self.etag.as_bytes();
        request
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .any(|tag| tag == "*" || tag.trim_start_matches("W/").as_bytes() == ours)
    }
}

impl std::fmt::Debug for Document {
    // The bytes can be hundreds of kilobytes (OpenAPI); their hash identifies them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Document")
            .field("content_type", &self.content_type)
            .field("len", &self.body.len())
            .field("etag", &self.etag)
            .finish()
    }
}

fn hex_upper(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02X}");
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(if_none_match: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(if_none_match).unwrap(),
        );
        headers
    }

    #[test]
    fn etag_is_the_quoted_sha512_of_the_bytes() {
        let doc = Document::new(b"{}".to_vec(), "application/json");
        assert_eq!(doc.hash().len(), 128);
        assert!(
            doc.hash()
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())
        );
        assert_eq!(doc.etag.to_str().unwrap(), format!("\"{}\"", doc.hash()));
    }

    #[test]
    fn matching_if_none_match_gets_304_with_headers() {
        let doc = Document::new(b"{}".to_vec(), "application/json");
        let tag = format!("\"other\", W/\"{}\"", doc.hash());
        let response = doc.respond(&request(&tag), no_cache());
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(response.headers()[header::ETAG], doc.etag);
        assert_eq!(response.headers()[header::VARY], "Accept");
        assert!(response.headers().get(header::CONTENT_TYPE).is_none());
    }

    #[test]
    fn other_if_none_match_gets_the_document() {
        let doc = Document::new(b"{}".to_vec(), "application/json");
        let response = doc.respond(&request("\"nope\""), no_cache());
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(
            response.headers()[header::CACHE_CONTROL],
            "no-cache, private"
        );
    }
}
