//! Encoding responses in the negotiated target: objects, lists, tables, metadata-only forms,
//! and the `Warning` headers collected while serving.

use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::codec::to_json_vec;
use crate::endpoints::negotiation::{Encoding, Shape, Target};
use crate::endpoints::params::IncludeObject;
use crate::endpoints::table::{TableConvertor, partial_object_metadata};
use crate::error::{Error, Result};
use crate::registry::rest::{Object, ObjectList, WatchEvent, WatchEventType};
use crate::runtime::ResourceInfo;

/// Serializes `value` in `encoding`.
pub fn encode(encoding: Encoding, value: &Value) -> Result<Vec<u8>> {
    match encoding {
        Encoding::Json => to_json_vec(value).map_err(Error::internal),
        Encoding::Yaml => serde_norway::to_string(value)
            .map(String::into_bytes)
            .map_err(Error::internal),
    }
}

/// A response with `body` in `target`.
pub fn respond(code: StatusCode, target: Target, body: &Value) -> Result<Response> {
    respond_bytes(code, target, encode(target.encoding, body)?)
}

/// A response with one object of [`Shape::Object`] in the target's encoding; JSON bytes
/// already encoded go out as they are.
pub fn respond_object(code: StatusCode, target: Target, object: Object) -> Result<Response> {
    let json = target.encoding == Encoding::Json;
    let bytes = match object {
        Object::Encoded(bytes) if json => bytes,
        Object::Cached(cached) if json => cached.encoded(),
        object => return respond(code, target, &object.into_value()?),
    };
    Ok(sized_response(code, target, axum::body::Body::from(bytes)))
}

/// A response with `body` in the target's content type, its header map made large enough
/// at once for what the filters and the connection add (`Audit-Id`, `Cache-Control`,
/// `X-Content-Type-Options`, `Date`, `Content-Length`): grown one header at a time, it
/// was reallocated once for nearly every get.
fn sized_response(code: StatusCode, target: Target, body: axum::body::Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = code;
    let headers = response.headers_mut();
    headers.reserve(8);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(target.content_type()),
    );
    response
}

/// One object in the target's shape.
pub fn shape_object(
    target: Target,
    object: Value,
    table: &TableConvertor,
    include: IncludeObject,
) -> Value {
    match target.shape {
        Shape::Object | Shape::PartialObjectMetadataList => object,
        Shape::PartialObjectMetadata => partial_object_metadata(&object),
        Shape::Table => {
            let rv = object
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Value::Null);
            table.table(
                std::slice::from_ref(&object),
                json!({"resourceVersion": rv}),
                include,
            )
        }
    }
}

/// A list in the target's shape. Encoded items of a JSON list are copied as they are.
pub fn respond_list(
    code: StatusCode,
    target: Target,
    info: &ResourceInfo,
    list: ObjectList,
    table: &TableConvertor,
    include: IncludeObject,
) -> Result<Response> {
    let metadata = list_metadata(&list);
    let body = match target.shape {
        Shape::Object if target.encoding == Encoding::Json => {
            let mut head = Vec::with_capacity(256);
            head.extend_from_slice(b"{\"apiVersion\":");
            serde_json::to_writer(&mut head, &info.api_version()).map_err(Error::internal)?;
            head.extend_from_slice(b",\"kind\":");
            serde_json::to_writer(&mut head, &info.list_kind()).map_err(Error::internal)?;
            head.extend_from_slice(b",\"metadata\":");
            serde_json::to_writer(&mut head, &metadata).map_err(Error::internal)?;
            head.extend_from_slice(b",\"items\":[");
            if let Some(size) = streamed_size(&head, &list.items) {
                let body = ListBody {
                    head: Some(Bytes::from(head)),
                    items: list.items.into_iter(),
                    wrote_item: false,
                    left: size,
                };
                return Ok(sized_response(code, target, axum::body::Body::new(body)));
            }
            let mut out = head;
            out.reserve(list_size_hint(&list));
            for (i, item) in list.items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                prefetch(list.items.get(i + PREFETCH_AHEAD));
                item.write_json(&mut out)?;
            }
            out.extend_from_slice(b"]}");
            return respond_bytes(code, target, out);
        }
        Shape::Object => {
            let items = values(list.items)?;
            json!({
                "apiVersion": info.api_version(),
                "kind": info.list_kind(),
                "metadata": metadata,
                "items": items,
            })
        }
        Shape::Table => table.table(&values(list.items)?, metadata, include),
        Shape::PartialObjectMetadataList | Shape::PartialObjectMetadata => {
            let items: Vec<Value> = values(list.items)?
                .iter()
                .map(partial_object_metadata)
                .collect();
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items})
        }
    };
    respond(code, target, &body)
}

/// One line of a watch stream: `{"type":...,"object":...}` and a newline. An encoded object
/// of a JSON watch is copied as it is.
pub fn watch_line(
    target: Target,
    event: WatchEvent,
    table: &TableConvertor,
    include: IncludeObject,
) -> Result<Vec<u8>> {
    let object = match (event.type_, event.object) {
        (WatchEventType::Error | WatchEventType::Bookmark, object) => object,
        (_, object) if target.shape == Shape::Object => object,
        (_, object) => Object::Decoded(shape_object(target, object.into_value()?, table, include)),
    };
    let mut line = Vec::with_capacity(64 + encoded_len(&object));
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(event.type_.as_str().as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    object.write_json(&mut line)?;
    line.extend_from_slice(b"}\n");
    Ok(line)
}

fn values(items: Vec<Object>) -> Result<Vec<Value>> {
    items.into_iter().map(Object::into_value).collect()
}

fn encoded_len(object: &Object) -> usize {
    match object {
        Object::Encoded(bytes) => bytes.len(),
        Object::Cached(object) => object.json_len(),
        Object::Decoded(_) => 512,
    }
}

/// At least [`encoded_len`], known without reading a cached object's bytes: a list's
/// walk to size itself that loaded each object's header from memory cost 7% of its CPU
/// (10,000 objects), the copy then loading them again.
fn encoded_len_bound(object: &Object) -> usize {
    match object {
        Object::Cached(object) => object.json_len_bound(),
        other => encoded_len(other),
    }
}

/// Room for a JSON list of `list`'s items: at least their size, or a guess for decoded ones.
fn list_size_hint(list: &ObjectList) -> usize {
    256 + list
        .items
        .iter()
        .map(|o| encoded_len_bound(o) + 1)
        .sum::<usize>()
}

/// How many items ahead of the one it copies a list's encoding starts loading
/// ([`prefetch`]): far enough for the loads to arrive, near enough to stay in the cache.
const PREFETCH_AHEAD: usize = 4;

/// Starts loading a cached item's bytes, which a list copies a few items later.
fn prefetch(item: Option<&Object>) {
    if let Some(Object::Cached(object)) = item {
        object.prefetch();
    }
}

/// A response of JSON or YAML bytes already encoded in the target's encoding.
fn respond_bytes(code: StatusCode, target: Target, bytes: Vec<u8>) -> Result<Response> {
    Ok(sized_response(code, target, axum::body::Body::from(bytes)))
}

/// A JSON list larger than this is written piece by piece as it is sent ([`ListBody`]); a
/// smaller one is encoded into one buffer, which the connection sends fastest.
const LIST_STREAMED_ABOVE: usize = 8 << 20;

/// The size of a streamed list's pieces: what it encodes ahead of what the connection has
/// sent. Large, because hyper asks for the next piece only once the connection has sent
/// most of the last (a round trip between two tasks each time: pieces of 64 KiB made a list
/// of 10,000 objects 2–6 ms slower), and small beside the lists it is for (a million
/// objects: 500 MiB).
const LIST_PIECE: usize = 2 << 20;

/// The body of a JSON list whose items are all encoded already (from the watch cache or the
/// store), when it is larger than [`LIST_STREAMED_ABOVE`]: copied into pieces of
/// [`LIST_PIECE`] as the connection takes them, so a list of a million objects never holds
/// a second copy of all of them (kube-apiserver encodes lists item by item onto the
/// connection too, its `StreamingCollectionEncodingToJSON`). Its length is known:
/// `Content-Length` is sent.
struct ListBody {
    /// Everything before the first item, until it is sent.
    head: Option<Bytes>,
    items: std::vec::IntoIter<Object>,
    /// Whether an item was written (the next one needs a comma).
    wrote_item: bool,
    /// The bytes not sent yet.
    left: u64,
}

/// The exact size of a JSON list of `head`, `items` and its end, when it is to be a
/// [`ListBody`]: every item encoded already, and the whole over [`LIST_STREAMED_ABOVE`].
fn streamed_size(head: &[u8], items: &[Object]) -> Option<u64> {
    if items.iter().any(|item| matches!(item, Object::Decoded(_))) {
        return None;
    }
    let commas = items.len().saturating_sub(1);
    // The bound first: most lists are smaller, and it reads no object.
    let bound = head.len() + items.iter().map(encoded_len_bound).sum::<usize>() + commas + 2;
    if bound <= LIST_STREAMED_ABOVE {
        return None;
    }
    let size = head.len() + items.iter().map(encoded_len).sum::<usize>() + commas + 2;
    (size > LIST_STREAMED_ABOVE).then_some(size as u64)
}

impl hyper::body::Body for ListBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::result::Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let mut piece = Vec::with_capacity((this.left as usize).min(LIST_PIECE + 64 * 1024));
        if let Some(head) = this.head.take() {
            piece.extend_from_slice(&head);
        }
        while piece.len() < LIST_PIECE {
            let Some(item) = this.items.next() else {
                piece.extend_from_slice(b"]}");
                break;
            };
            if std::mem::replace(&mut this.wrote_item, true) {
                piece.push(b',');
            }
            prefetch(this.items.as_slice().get(PREFETCH_AHEAD));
            // Never `Decoded` ([`streamed_size`]); writing encoded bytes cannot fail.
            let _ = item.write_json(&mut piece);
        }
        this.left = this.left.saturating_sub(piece.len() as u64);
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from(piece)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.left)
    }
}

fn list_metadata(list: &ObjectList) -> Value {
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), json!(list.resource_version));
    if let Some(c) = &list.continue_token {
        meta.insert("continue".into(), json!(c));
    }
    if let Some(n) = list.remaining_item_count {
        meta.insert("remainingItemCount".into(), json!(n));
    }
    Value::Object(meta)
}

/// Adds `Warning: 299 - "..."` headers, as kube-apiserver sends them.
pub fn add_warnings(response: &mut Response, warnings: &[String]) {
    for w in warnings {
        let text = format!("299 - {}", serde_json::to_string(w).unwrap_or_default());
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
}
