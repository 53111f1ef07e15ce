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
pub(crate) type ToStorageVersion = fn(Value) -> std::result::Result<Value, String>;

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
                "stored object {} in {stored}: converting it to {}: {e}",
                kv.key, self.current
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
fn to_storage_version<Old: Convertible<T>, T: Resource>(
    mut object: Value,
) -> std::result::Result<Value, String> {
    // Not fields of the type: a type that denies unknown fields decodes too.
    if let Some(map) = object.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    let old: Old = serde_json::from_value(object)
        .map_err(|e| format!("it does not decode as {}: {e}", Old::INFO.api_version()))?;
    let converted = old.into_hub().map_err(|e| e.to_string())?;
    encode_typed(&converted).map_err(|e| e.message().to_string())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures::StreamExt;
    use serde_json::json;

    use super::super::Store;
    use crate::registry::context::RequestContext;
    use crate::registry::options::{GetOptions, ListOptions};
    use crate::registry::rest::{Getter, WatchEventType, Watcher};
    use crate::storage::{Backend, MemoryBackend};
    use crate::test_kinds::{New, Old};

    const KEYS: &str = "/registry/wardle.example.com/flunders/ns/";

    /// A stored object: `width` in v1alpha1, `size` in any other version.
    fn stored(version: &str, name: &str, number: i64) -> Bytes {
        let field = if version == "v1alpha1" {
            "width"
        } else {
            "size"
        };
        let object = json!({"apiVersion": format!("wardle.example.com/{version}"),
                            "kind": "Flunder", "metadata": {"name": name, "namespace": "ns"},
                            field: number});
        Bytes::from(serde_json::to_vec(&object).unwrap())
    }

    async fn store_with(objects: &[(&str, &str)]) -> (Store<New>, std::sync::Arc<MemoryBackend>) {
        let backend = std::sync::Arc::new(MemoryBackend::new());
        for (i, (version, name)) in objects.iter().enumerate() {
            let key = format!("{KEYS}{name}");
            backend
                .create(&key, stored(version, name, i as i64 + 1))
                .await
                .unwrap();
        }
        let store = Store::<New>::new(backend.clone(), "/registry");
        store.decodes::<Old>();
        (store, backend)
    }

    #[tokio::test]
    async fn older_objects_are_read_converted_and_unknown_ones_are_a_500() {
        let (store, _) = store_with(&[("v1alpha1", "a"), ("v9", "b")]).await;
        let ctx = RequestContext::namespaced("ns");
        let a = store.get(&ctx, "a", &GetOptions::default()).await.unwrap();
        assert_eq!(a["apiVersion"], "wardle.example.com/v1beta1");
        assert_eq!(a["size"], 1);
        assert!(a.get("width").is_none(), "{a}");
        let b = store.get(&ctx, "b", &GetOptions::default()).await;
        let e = b.unwrap_err();
        assert_eq!(e.code(), 500);
        assert!(
            e.message().contains("is in wardle.example.com/v9"),
            "{}",
            e.message()
        );
    }

    #[tokio::test]
    async fn a_watch_of_the_backend_ends_with_an_error_at_an_unknown_version() {
        let (store, backend) = store_with(&[("v1alpha1", "a")]).await;
        let ctx = RequestContext::namespaced("ns");
        let options = ListOptions {
            timeout_seconds: Some(10),
            ..ListOptions::default()
        };
        let mut events = store.watch(&ctx, &options).await.unwrap();
        let first = events.next().await.unwrap();
        assert_eq!(first.type_, WatchEventType::Added);
        assert_eq!(first.object.into_value().unwrap()["size"], 1);
        let key = format!("{KEYS}z");
        backend.create(&key, stored("v9", "z", 1)).await.unwrap();
        let error = events.next().await.unwrap();
        assert_eq!(error.type_, WatchEventType::Error);
        let status = error.object.into_value().unwrap();
        assert_eq!(status["code"], 500, "{status}");
    }

    #[tokio::test]
    async fn the_migrator_rewrites_older_objects_once() {
        let (store, backend) = store_with(&[("v1alpha1", "a"), ("v1beta1", "b")]).await;
        let report = store.migrator().migrate().await.unwrap();
        assert_eq!(
            report.to_string(),
            "flunders.wardle.example.com: 2 objects, 1 rewritten"
        );
        let a = backend.get(&format!("{KEYS}a")).await.unwrap().unwrap();
        let a: serde_json::Value = serde_json::from_slice(&a.value).unwrap();
        assert_eq!(a["apiVersion"], "wardle.example.com/v1beta1");
        assert_eq!(a["size"], 1);
        let again = store.migrator().migrate().await.unwrap();
        assert_eq!(again.rewritten, 0);
        backend
            .create(&format!("{KEYS}c"), stored("v9", "c", 1))
            .await
            .unwrap();
        let e = store.migrator().migrate().await.unwrap_err();
        assert!(e.message().contains("v9"), "{}", e.message());
    }
}
