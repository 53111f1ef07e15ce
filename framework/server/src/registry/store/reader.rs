//! A typed, read-only view of a store: how a computed resource's provider, or storage of
//! your own, reads the objects of another resource of the same server, without HTTP. A
//! computed resource's reader reads the store of its mirror, asking its provider first as a
//! request does.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::Store;
use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::options::{GetOptions, ListOptions};
use crate::registry::rest::{Getter, Lister};
use crate::runtime::Resource;

/// Reads stored objects of `T` as `T`.
///
/// Get one from [`StorageConfig::reader`](crate::server::StorageConfig::reader) (the
/// server's backend), or from any [`Store`] with [`Store::reader`]:
///
/// ```
/// # use std::sync::Arc;
/// # use extension_apiserver::prelude::*;
/// # use extension_apiserver::registry::store::Store;
/// # use extension_apiserver::storage::MemoryBackend;
/// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// # #[resource(group = "example.com", version = "v1", kind = "Book", namespaced)]
/// # struct Book { #[serde(default)] metadata: ObjectMeta }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let books = Store::<Book>::new(Arc::new(MemoryBackend::new()), "/registry").reader();
/// assert!(books.list(Some("default")).await?.is_empty());
/// assert!(books.get(Some("default"), "dune").await?.is_none());
/// # Ok::<(), extension_apiserver::Error>(())
/// # }).unwrap();
/// ```
///
/// A computed resource's reader ([`ComputedStorage::reader`](crate::registry::computed::ComputedStorage::reader),
/// or `reader` of the server's storage for a kind served with `computed`) gives the
/// provider's objects, with the same semantics.
pub struct Reader<T: Resource> {
    store: Store<T>,
    /// Where the objects of `store` come from when it is a computed resource's mirror.
    source: Option<Arc<dyn Source>>,
}

/// The source of a store that mirrors objects it does not own (a computed resource's
/// provider): a read asks it first, as a request does, and reads of the watch cache need the
/// mirror kept current, as an informer keeps its cache.
#[async_trait]
pub(crate) trait Source: Send + Sync {
    /// Makes the mirror's objects of `namespace` (or all) what the source says they are.
    async fn sync_list(&self, namespace: Option<&str>) -> Result<()>;
    /// Makes the mirror's object `name` what the source says it is.
    async fn sync_get(&self, namespace: Option<&str>, name: &str) -> Result<()>;
    /// Keeps the mirror current from now on; whether it holds every object yet.
    fn follow(&self) -> bool;
}

impl<T: Resource> Clone for Reader<T> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            source: self.source.clone(),
        }
    }
}

impl<T: Resource> Store<T> {
    /// A typed, read-only view of this store.
    pub fn reader(&self) -> Reader<T> {
        Reader {
            store: self.clone(),
            source: None,
        }
    }
}

impl<T: Resource> Reader<T> {
    /// A reader of `mirror`, whose objects come from `source`.
    pub(crate) fn of_mirror(mirror: Store<T>, source: Arc<dyn Source>) -> Self {
        Self {
            store: mirror,
            source: Some(source),
        }
    }

    /// Object `name` of `namespace` (`None` for a cluster-scoped kind), if it exists.
    pub async fn get(&self, namespace: Option<&str>, name: &str) -> Result<Option<T>> {
        if let Some(source) = &self.source {
            source.sync_get(namespace, name).await?;
        }
        let got = self
            .store
            .get_object(&context(namespace), name, &GetOptions::default())
            .await;
        match got {
            Ok(object) => decode(object.into_value()?).map(Some),
            Err(e) if e.code() == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every object of `namespace`, or of all namespaces (`None`), in name order (by
    /// namespace first).
    pub async fn list(&self, namespace: Option<&str>) -> Result<Vec<T>> {
        self.list_with(namespace, &ListOptions::default()).await
    }

    /// The objects of `namespace` (or all) that `options` select (label and field
    /// selectors; a `limit` gives only the first page).
    pub async fn list_with(
        &self,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Vec<T>> {
        // A later page is read at its first page's revision, as a computed resource's list.
        if let (Some(source), None) = (&self.source, &options.continue_token) {
            source.sync_list(namespace).await?;
        }
        let list = self.store.list(&context(namespace), options).await?;
        list.items
            .into_iter()
            .map(|object| decode(object.into_value()?))
            .collect()
    }
}

impl<T: Resource> Reader<T> {
    /// Every object of `namespace` (or all), as the watch cache holds them now, without
    /// waiting: what a client-go lister gives, a moment behind the latest writes. For code
    /// that cannot wait (a strategy). `None` when the store has no watch cache, or it has not
    /// loaded yet.
    ///
    /// Of a computed resource: the mirror's cache, which the first cached read starts keeping
    /// current for as long as the reader lives (the provider's pushed changes, a re-list at
    /// its interval), as an informer keeps a Go plugin's; `None` until its first full list is
    /// in.
    pub fn list_cached(&self, namespace: Option<&str>) -> Option<Result<Vec<T>>> {
        let inner = &self.store.inner;
        let cache = inner.cache.as_ref()?;
        if !self.followed() {
            return None;
        }
        let prefix = inner.list_prefix(&context(namespace));
        let (objects, _) = cache.snapshot(&prefix)?;
        let decoded = objects
            .iter()
            .map(|object| object.with_json(decode_json::<T>))
            .collect();
        Some(decoded)
    }

    /// Object `name` of `namespace`, as the watch cache holds it now (see
    /// [`list_cached`](Self::list_cached)); `Some(Ok(None))` when it has none.
    pub fn get_cached(&self, namespace: Option<&str>, name: &str) -> Option<Result<Option<T>>> {
        let inner = &self.store.inner;
        let cache = inner.cache.as_ref()?;
        if !self.followed() {
            return None;
        }
        let key = match inner.key(&context(namespace), name) {
            Ok(key) => key,
            Err(e) => return Some(Err(e)),
        };
        let found = cache.get_at_least(&key, 0)?;
        Some(
            found
                .map(|object| object.with_json(decode_json::<T>))
                .transpose(),
        )
    }
}

impl<T: Resource> Reader<T> {
    /// Whether the cache holds every object: always for a stored resource, whose watch
    /// cache follows its storage from the start.
    fn followed(&self) -> bool {
        self.source.as_ref().is_none_or(|source| source.follow())
    }
}

fn decode_json<T: Resource>(json: &[u8]) -> Result<T> {
    let value = serde_json::from_slice(json)
        .map_err(|e| Error::internal(format!("cached {} is corrupt: {e}", T::INFO.kind)))?;
    decode(value)
}

fn context(namespace: Option<&str>) -> RequestContext {
    match namespace {
        Some(ns) => RequestContext::namespaced(ns),
        None => RequestContext::cluster(),
    }
}

/// A stored object as `T` (see `codec::from_object`).
fn decode<T: Resource>(object: Value) -> Result<T> {
    super::codec::from_object(object)
        .map_err(|e| Error::internal(format!("stored {} does not decode: {e}", T::INFO.kind)))
}
