//! Encoding responses in the negotiated target: objects, lists, tables, metadata-only forms,
//! and the `Warning` headers collected while serving.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Map, Value};

use crate::endpoints::negotiation::{Encoding, Shape, Target};
use crate::endpoints::params::IncludeObject;
use crate::endpoints::table::{partial_object_metadata, TableConvertor};
use crate::error::{Error, Result};
use crate::registry::rest::ObjectList;
use crate::runtime::ResourceInfo;

/// Serializes `value` in `encoding`.
pub fn encode(encoding: Encoding, value: &Value) -> Result<Vec<u8>> {
    match encoding {
        Encoding::Json => serde_json::to_vec(value).map_err(Error::internal),
        Encoding::Yaml => serde_yaml::to_string(value)
            .map(String::into_bytes)
            .map_err(Error::internal),
    }
}

/// A response with `body` in `target`.
pub fn respond(code: StatusCode, target: Target, body: &Value) -> Result<Response> {
    let bytes = encode(target.encoding, body)?;
    let mut response = (code, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(target.content_type()),
    );
    Ok(response)
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

/// A list in the target's shape.
pub fn shape_list(
    target: Target,
    info: &ResourceInfo,
    list: ObjectList,
    table: &TableConvertor,
    include: IncludeObject,
) -> Value {
    let metadata = list_metadata(&list);
    match target.shape {
        Shape::Table => table.table(&list.items, metadata, include),
        Shape::PartialObjectMetadataList | Shape::PartialObjectMetadata => {
            let items: Vec<Value> = list.items.iter().map(partial_object_metadata).collect();
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items})
        }
        Shape::Object => json!({
            "apiVersion": info.api_version(),
            "kind": info.list_kind(),
            "metadata": metadata,
            "items": list.items,
        }),
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
