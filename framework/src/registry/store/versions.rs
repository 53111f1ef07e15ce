//! The versions a store's keys may hold. A store writes its type's version (the storage
//! version); objects written while another version was the storage version stay in that
//! version until rewritten, so each read converts them, as kube-apiserver's storage codec
//! decodes any version it knows and converts it to the one it serves.

use std::borrow::Cow;
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::Value;

use super::codec::{encode_for_storage, encode_typed, stored_api_version};
use crate::error::{Error, Result};
use crate::runtime::{Convertible, Resource, ResourceInfo};
use crate::storage::KeyValue;

/// An object of an older storage version (its stored JSON) as the storage version's JSON.
pub(crate) type ToStorageVersion = fn(Value) -> Result<Value>;

/// The storage version of a store and how to read the other versions found in its keys.
/// Shared by every clone of a store and by its watch cache's encoder, so a version declared
/// after the store was made is read everywhere.
#[derive(Clone)]
pub(crate) struct StoredVersions {
    /// `apiVersion` of the storage version, e.g. `wardle.example.com/v1beta1`.
    current: Arc<str>,
    info: ResourceInfo,
    others: Arc<RwLock<Vec<(String, ToStorageVersion)>>>,
}

impl StoredVersions {
    pub(crate) fn new(info: ResourceInfo) -> Self {
        Self {
            current: info.api_version().into(),
            info,
            others: Arc::default(),
        }
    }

    /// Objects stored as `Old` are read converted to `T` (the storage version).
    pub(crate) fn add<Old: Convertible<T>, T: Resource>(&self) {
        let api_version = Old::INFO.api_version();
        if *api_version == *self.current {
            return;
        }
        let mut others = self.others.write().unwrap_or_else(PoisonError::into_inner);
        others.retain(|(known, _)| *known != api_version);
        others.push((api_version, to_storage_version::<Old, T>));
    }

    /// Whether `kv` is stored in the storage version: its `apiVersion` is the storage
    /// version's, or it has none (objects are read as the store's type then).
    pub(crate) fn is_current(&self, kv: &KeyValue) -> bool {
        stored_api_version(&kv.value).is_none_or(|v| v == self.current.as_bytes())
    }

    /// `kv` with its value in the storage version: as it is when it already is (the cost of
    /// finding its `apiVersion`, the first member of what this crate stores), else decoded,
    /// converted and encoded again. A version the store does not know is a 500.
    pub(crate) fn in_storage_version<'a>(&self, kv: &'a KeyValue) -> Result<Cow<'a, KeyValue>> {
        let Some(stored) = stored_api_version(&kv.value) else {
            return Ok(Cow::Borrowed(kv));
        };
        if stored == self.current.as_bytes() {
            return Ok(Cow::Borrowed(kv));
        }
        let stored = String::from_utf8_lossy(stored);
        let convert = self
            .converter(&stored)
            .ok_or_else(|| self.unknown(kv, &stored))?;
        let object: Value = serde_json::from_slice(&kv.value)
            .map_err(|e| Error::internal(format!("stored object {} is corrupt: {e}", kv.key)))?;
        let converted = convert(object).map_err(|e| {
            Error::internal(format!(
                "stored object {} in {stored}: converting it to {}: {}",
                kv.key,
                self.current,
                e.message()
            ))
        })?;
        Ok(Cow::Owned(KeyValue {
            value: encode_for_storage(&converted)?,
            ..kv.clone()
        }))
    }

    fn converter(&self, api_version: &str) -> Option<ToStorageVersion> {
        let others = self.others.read().unwrap_or_else(PoisonError::into_inner);
        others
            .iter()
            .find(|(known, _)| known == api_version)
            .map(|(_, convert)| *convert)
    }

    /// The 500 of an object in a version this store cannot read: it is not served as if it
    /// were the storage version.
    fn unknown(&self, kv: &KeyValue, stored: &str) -> Error {
        Error::internal(format!(
            "stored object {} is in {stored}, which the storage of {}.{} cannot read: its \
             storage version is {}; serve {stored} converted, or declare it with \
             APIGroup::formerly_stored, to read such objects",
            kv.key, self.info.plural, self.info.group, self.current
        ))
    }
}

/// Stored JSON of `Old` as JSON of `T`.
fn to_storage_version<Old: Convertible<T>, T: Resource>(mut object: Value) -> Result<Value> {
    // Not fields of the type: a type that denies unknown fields decodes too.
    if let Some(map) = object.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    let old: Old = serde_json::from_value(object).map_err(|e| {
        Error::internal(format!(
            "it does not decode as {}: {e}",
            Old::INFO.api_version()
        ))
    })?;
    let converted = old.into_hub().map_err(|e| Error::internal(e.to_string()))?;
    encode_typed(&converted)
}
