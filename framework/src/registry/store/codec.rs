//! Objects to and from stored bytes, and from JSON to the user's type.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::options::FieldValidation;
use crate::runtime::object::{metadata_mut, set_meta};
use crate::runtime::{Resource, ResourceInfo};
use crate::storage::cacher::CachedObject;
use crate::storage::{KeyValue, StorageError};

/// A stored object, with `metadata.resourceVersion` from the key's modification revision.
pub(crate) fn decode_stored(kv: &KeyValue) -> Result<Value> {
    let mut object: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| Error::internal(format!("stored object {} is corrupt: {e}", kv.key)))?;
    set_meta(
        &mut object,
        "resourceVersion",
        json!(kv.mod_revision.to_string()),
    );
    Ok(object)
}

/// The bytes a client receives for a stored key-value, for the watch cache.
pub(crate) fn encode_for_client(kv: &KeyValue) -> std::result::Result<Bytes, StorageError> {
    let object = decode_stored(kv).map_err(|e| StorageError::Internal(e.message().to_string()))?;
    let mut encoded =
        serde_json::to_vec(&object).map_err(|e| StorageError::Internal(e.to_string()))?;
    // Kept for as long as the object is current: no spare capacity.
    encoded.shrink_to_fit();
    Ok(Bytes::from(encoded))
}

/// A watch-cache object decoded, for selectors and shapes that need the JSON.
pub(crate) fn decode_cached(object: &CachedObject) -> Result<Value> {
    serde_json::from_slice(&object.encoded)
        .map_err(|e| Error::internal(format!("cached object {}: {e}", object.key)))
}

/// The bytes to store: the object without `resourceVersion` (the revision is the version).
pub(crate) fn encode_for_storage(object: &Value) -> Result<Bytes> {
    let mut object = object.clone();
    metadata_mut(&mut object).remove("resourceVersion");
    serde_json::to_vec(&object)
        .map(Bytes::from)
        .map_err(Error::internal)
}

/// Decodes JSON into `T`, reporting unknown fields as `fieldValidation` asks.
pub(crate) fn decode_typed<T: Resource>(
    object: &Value,
    validation: FieldValidation,
    ctx: &RequestContext,
) -> Result<T> {
    let mut unknown = Vec::new();
    let typed: T = serde_ignored::deserialize(object, |path| {
        let path = path.to_string().replace(".?", "");
        if path != "apiVersion" && path != "kind" {
            unknown.push(path);
        }
    })
    .map_err(|e| cannot_handle(&T::INFO, e))?;
    if unknown.is_empty() || validation == FieldValidation::Ignore {
        return Ok(typed);
    }
    let messages: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field {p:?}"))
        .collect();
    if validation == FieldValidation::Strict {
        return Err(Error::bad_request(format!(
            "strict decoding error: {}",
            messages.join(", ")
        )));
    }
    for m in messages {
        ctx.warn(m);
    }
    Ok(typed)
}

fn cannot_handle(info: &ResourceInfo, e: impl std::fmt::Display) -> Error {
    Error::bad_request(format!(
        "{} in version {:?} cannot be handled as a {}: {e}",
        info.kind, info.version, info.kind
    ))
}

/// `T` back to JSON, with `apiVersion` and `kind`.
pub(crate) fn encode_typed<T: Resource>(typed: &T) -> Result<Value> {
    let mut value = serde_json::to_value(typed).map_err(Error::internal)?;
    set_type_meta(&T::INFO, &mut value);
    Ok(value)
}

/// Sets `apiVersion` and `kind`.
pub(crate) fn set_type_meta(info: &ResourceInfo, object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), json!(info.api_version()));
        map.insert("kind".into(), json!(info.kind));
    }
}
