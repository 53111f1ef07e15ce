//! Typed objects to and from their JSON (with `apiVersion` and `kind`), and the conversions
//! of a served version to and from its storage version: what the registry stores and
//! admission shows plugins and webhooks.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::runtime::{Resource, ResourceInfo};

/// `T` back to JSON, with `apiVersion` and `kind`.
pub fn encode_typed<T: Resource>(typed: &T) -> Result<Value> {
    let mut value = serde_json::to_value(typed).map_err(Error::internal)?;
    set_type_meta(&T::INFO, &mut value);
    Ok(value)
}

/// An object as `T`. `apiVersion` and `kind` are not fields of `T`: taken out first, so a
/// type that denies unknown fields decodes too.
pub fn from_object<T: Resource>(mut object: Value) -> serde_json::Result<T> {
    if let Some(map) = object.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    serde_json::from_value(object)
}

/// Sets `apiVersion` and `kind`.
pub fn set_type_meta(info: &ResourceInfo, object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), serde_json::json!(info.api_version()));
        map.insert("kind".into(), serde_json::json!(info.kind));
    }
}

/// The conversions of one served version to and from its storage version, as JSON: what
/// admission webhooks need to see an object in the version their rules matched (kube's
/// `ObjectConvertor`). Pure conversions: no defaulting, no strategy.
pub trait VersionConvertor: Send + Sync {
    /// A stored object as this version, with its `apiVersion` and `kind`.
    fn to_served(&self, stored: &Value) -> Result<Value>;
    /// An object of this version as the storage version, with its `apiVersion` and `kind`.
    fn to_storage(&self, served: &Value) -> Result<Value>;
}
