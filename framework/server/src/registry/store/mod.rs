//! The generic `Store<T>`: every REST verb over a storage [`Backend`], with the strategy.
//!
//! Writes are typed: the client's object is decoded into `T` once, the generic strategy and
//! `T`'s [`Strategy`] run on it, and it is encoded once to be stored. Reads (get, list, watch)
//! pass the stored bytes through without decoding them.
//!
//! It owns API semantics (names, uid, timestamps, resourceVersion, generation, finalizers,
//! preconditions, dry run, selectors, pagination, watch) and knows nothing of HTTP. Storage
//! keys follow kube-apiserver: `{prefix}/{group}/{plural}/{namespace}/{name}`.

mod admit;
pub(crate) mod codec;
mod delete;
mod filter;
mod handoff;
mod list;
mod managed;
mod migrate;
mod reader;
mod scale;
mod set;
mod versions;
mod watch;
mod write;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::options::{DeleteOptions, GetOptions, ListOptions, WriteOptions};
use crate::registry::rest::{
    CachedJson, CollectionDeleter, Creater, DeleteOutcome, Getter, GracefulDeleter, Lister, Object,
    ObjectList, RestStorage, UpdateFn, Updater, WatchStream, Watcher,
};
use crate::registry::schema_validation::{SchemaError, SchemaValidator};
use crate::registry::strategy::{Strategy, UpdateTarget};
use crate::runtime::Convertible;
use crate::runtime::{GarbageCollectionPolicy, Resource, ResourceInfo, Scope};
use crate::storage::cacher::EncodeFn;
use crate::storage::{Backend, Cacher, CacherOptions, KeyValue, StorageError};
use versions::StoredVersions;

pub(crate) use crate::registry::stores::SetLink;
pub use crate::registry::stores::StoreSet;
pub use list::ContinueToken;
pub use migrate::{MigrationReport, StorageMigrator};
pub use reader::Reader;
pub(crate) use reader::Source;
pub use scale::ScaleStore;

/// How often a write retries after losing a compare-and-swap race (or a generated name
/// collides) before giving up.
pub(crate) const MAX_ATTEMPTS: usize = 8;

/// The default storage prefix, as kube-apiserver's `--etcd-prefix`.
pub const DEFAULT_PREFIX: &str = "/registry";

/// The generic store of one resource type.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use extension_apiserver::registry::store::Store;
/// # use extension_apiserver::storage::MemoryBackend;
/// # fn f<T: extension_apiserver::Strategy>() {
/// let store = Store::<T>::new(Arc::new(MemoryBackend::new()), "/registry");
/// let storage = store.rest_storage();          // `flunders`
/// let status = store.status_rest_storage();    // `flunders/status`
/// # }
/// ```
pub struct Store<T: Resource> {
    inner: Arc<Inner>,
    _type: PhantomData<fn() -> T>,
}

impl<T: Resource> Clone for Store<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _type: PhantomData,
        }
    }
}

/// What every verb of a store needs; not generic, so most code is compiled once.
#[derive(Clone)]
pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn Backend>,
    /// `{prefix}/{group}/{plural}/`.
    pub(crate) key_root: String,
    pub(crate) info: ResourceInfo,
    /// How often a watch that allows bookmarks gets one.
    pub(crate) bookmark_interval: Duration,
    /// The watch cache of `key_root`, when on.
    pub(crate) cache: Option<Cacher>,
    /// The bytes of this store's writes, left for its watch cache (with the cache).
    pub(crate) handoff: Option<Arc<handoff::Handoff>>,
    /// [`Resource::GARBAGE_COLLECTION_POLICY`] of the stored type.
    pub(crate) gc_policy: GarbageCollectionPolicy,
    /// The storage version, and the older ones objects may still be stored in.
    pub(crate) versions: StoredVersions,
    /// The server's other stores, for the strategies.
    pub(crate) set: SetLink,
    /// The type's schema limits and rules, compiled once; `Ok(None)` when it declares none
    /// (no work per write); an error that the server's start reports.
    pub(crate) schema: SchemaCheck,
}

/// A type's compiled schema validation, or why it cannot be compiled.
pub(crate) type SchemaCheck = std::result::Result<Option<Arc<SchemaValidator>>, Arc<SchemaError>>;

impl Inner {
    /// Stores `stored` at `key` with `store` (a create or an update of the backend), leaving
    /// the bytes for the watch cache first ([`handoff`]).
    pub(crate) async fn store_written<F, R>(
        &self,
        key: &str,
        stored: &Arc<codec::StoredJson>,
        store: F,
    ) -> std::result::Result<R, StorageError>
    where
        F: Future<Output = std::result::Result<R, StorageError>>,
    {
        if let Some(handoff) = &self.handoff {
            handoff.offer(key, stored);
        }
        let result = store.await;
        if let (Err(_), Some(handoff)) = (&result, &self.handoff) {
            handoff.withdraw(key, stored);
        }
        result
    }

    /// The key of one object.
    pub(crate) fn key(&self, ctx: &RequestContext, name: &str) -> Result<String> {
        // Joined by hand: every request makes one, and `format!` costs several times this.
        let namespace = match (self.info.scope, &ctx.namespace) {
            (Scope::Cluster, _) => None,
            (Scope::Namespaced, Some(ns)) => Some(ns.as_str()),
            (Scope::Namespaced, None) => {
                return Err(Error::bad_request(
                    "a namespace is required for this resource",
                ));
            }
        };
        let length = self.key_root.len() + namespace.map_or(0, |ns| ns.len() + 1) + name.len();
        let mut key = String::with_capacity(length);
        key.push_str(&self.key_root);
        if let Some(ns) = namespace {
            key.push_str(ns);
            key.push('/');
        }
        key.push_str(name);
        Ok(key)
    }

    /// The prefix a list or watch reads: one namespace, or all of them.
    pub(crate) fn list_prefix(&self, ctx: &RequestContext) -> String {
        match (&self.info.scope, &ctx.namespace) {
            (Scope::Namespaced, Some(ns)) => format!("{}{ns}/", self.key_root),
            _ => self.key_root.clone(),
        }
    }

    /// The current key-value of object `name` at `key`, storage errors mapped to API errors.
    pub(crate) async fn current(&self, key: &str, name: &str) -> Result<Option<KeyValue>> {
        self.backend
            .get(key)
            .await
            .map_err(|e| self.storage_error(name, e))
    }

    /// A stored object in the storage version, `resourceVersion` set (see
    /// [`codec::decode_stored`]).
    pub(crate) fn decode(&self, kv: &KeyValue) -> Result<Value> {
        codec::decode_stored(&*self.versions.in_storage_version(kv)?)
    }

    /// The bytes a client receives for a stored object, in the storage version (see
    /// [`codec::encode_stored`]).
    pub(crate) fn encode(&self, kv: &KeyValue) -> Result<Bytes> {
        codec::encode_stored(&*self.versions.in_storage_version(kv)?)
    }

    /// Maps a storage error of an operation on object `name` to the API error.
    pub(crate) fn storage_error(&self, name: &str, err: StorageError) -> Error {
        match err {
            StorageError::NotFound(_) => Error::not_found(&self.info, name),
            StorageError::KeyExists(_) => Error::already_exists(&self.info, name),
            StorageError::Conflict { .. } => Error::conflict(&self.info, name),
            StorageError::Compacted {
                requested,
                compacted,
            } => Error::expired(format!(
                "too old resource version: {requested} ({compacted})"
            )),
            StorageError::FutureRevision { requested, current } => Error::timeout(format!(
                "Too large resource version: {requested}, current: {current}"
            )),
            // What kube-apiserver answers when etcd refuses the write: etcd's error is no
            // Status, so it is a 500 without a reason carrying etcd's words.
            StorageError::TooLarge { .. } => {
                Error::new(500, "", "etcdserver: request is too large")
            }
            StorageError::Unavailable(m) => Error::service_unavailable(m),
            // As kube-apiserver's storage timeout (`storage.NewTimeoutError` →
            // `errors.NewTimeoutError`): 504 `Timeout`.
            StorageError::Timeout(m) => Error::timeout(format!("Timeout: {m}")),
            StorageError::Internal(m) => Error::internal(m),
            // A failure of a kind this version does not know (the enum is open to backends).
            other => Error::internal(other),
        }
    }
}

impl<T: Resource> Store<T> {
    /// A store of `T` on `backend`, with keys under `prefix` (usually `/registry`).
    pub fn new(backend: Arc<dyn Backend>, prefix: &str) -> Self {
        let info = T::INFO;
        let key_root = format!(
            "{}/{}/{}/",
            prefix.trim_end_matches('/'),
            info.group,
            info.plural
        );
        let inner = Arc::new(Inner {
            backend,
            key_root,
            info,
            bookmark_interval: watch::BOOKMARK_INTERVAL,
            cache: None,
            handoff: None,
            gc_policy: T::GARBAGE_COLLECTION_POLICY,
            versions: StoredVersions::new(info),
            set: SetLink::default(),
            schema: SchemaValidator::for_type::<T>().map_err(Arc::new),
        });
        Self {
            inner,
            _type: PhantomData,
        }
    }

    /// Sends watch bookmarks every `interval` instead of kube-apiserver's minute: for tests,
    /// and for clients that want their resume point refreshed more often.
    pub fn with_bookmark_interval(mut self, interval: Duration) -> Self {
        // Only stores already cloned share `Inner`; they keep the interval they had.
        // A zero interval would make tokio's ticker panic.
        let interval = interval.max(Duration::from_millis(1));
        Arc::make_mut(&mut self.inner).bookmark_interval = interval;
        self
    }

    /// Puts a watch cache in front of the backend: watches, and lists that allow it, are
    /// served from memory (see [`Cacher`]). Must be called within a tokio runtime.
    pub fn with_watch_cache(self) -> Self {
        self.with_watch_cache_options(CacherOptions::default())
    }

    /// [`with_watch_cache`](Store::with_watch_cache) with sizes of your own.
    pub fn with_watch_cache_options(mut self, options: CacherOptions) -> Self {
        let versions = self.inner.versions.clone();
        let handoff = Arc::new(handoff::Handoff::default());
        let written = handoff.clone();
        let encode: EncodeFn = Arc::new(move |kv| {
            // This store's own write: the places its writing found.
            let encoded = written
                .take(kv)
                .and_then(|stored| codec::encode_written(&stored, kv.mod_revision));
            if let Some(encoded) = encoded {
                return Ok(encoded);
            }
            let kv = versions
                .in_storage_version(kv)
                .map_err(|e| StorageError::Internal(e.message().to_string()))?;
            codec::encode_for_client(&kv)
        });
        let cache = Cacher::new(
            self.inner.backend.clone(),
            &self.inner.key_root,
            encode,
            options,
        );
        let inner = Arc::make_mut(&mut self.inner);
        inner.cache = Some(cache);
        inner.handoff = Some(handoff);
        self
    }

    /// Makes this store one of `set`'s, whose other stores its strategies read.
    pub(crate) fn in_set(mut self, set: SetLink) -> Self {
        Arc::make_mut(&mut self.inner).set = set;
        self
    }

    /// Whether a watch cache serves this store.
    pub fn has_watch_cache(&self) -> bool {
        self.inner.cache.is_some()
    }

    /// `{prefix}/{group}/{plural}/`: every key of this store starts with it.
    pub(crate) fn key_root(&self) -> &str {
        &self.inner.key_root
    }

    /// The static description of `T`.
    pub fn info(&self) -> &ResourceInfo {
        &self.inner.info
    }

    /// `T`'s schema limits and `x-kubernetes-validations` rules, compiled when the store
    /// was made: `None` when its schema declares none, and then its writes do no schema
    /// work at all.
    pub fn schema_validator(&self) -> Option<&Arc<SchemaValidator>> {
        self.inner.schema.as_ref().ok().and_then(Option::as_ref)
    }

    /// Why `T`'s schema cannot be enforced (a rule that does not compile, a `pattern` that
    /// is no regex): the server refuses to start with it; a store used alone answers every
    /// write with a 500 naming it.
    pub fn schema_error(&self) -> Option<&SchemaError> {
        self.inner.schema.as_ref().err().map(|e| &**e)
    }

    /// Objects stored as `Old` (written while `Old` was the storage version) are read
    /// converted to `T`, by every verb, list, watch and the watch cache; writes store `T`.
    /// Every clone of this store, and its watch cache, learns it: declare versions before
    /// the cache loads ([`StorageConfig`](crate::server::StorageConfig) does, for the
    /// versions served with [`converted`](crate::server::VersionBuilder::converted) and those
    /// declared with [`formerly_stored`](crate::server::APIGroup::formerly_stored)).
    /// [`migrator`](Self::migrator) rewrites such objects as `T`.
    ///
    /// An object in a version the store was not told of is a 500, never served as `T`.
    pub fn decodes<Old: Convertible<T>>(&self) -> &Self {
        self.inner.versions.add::<Old, T>();
        self
    }

    /// Rewrites the objects of this store that are not stored as `T` (see
    /// [`StorageMigrator`]).
    pub fn migrator(&self) -> StorageMigrator {
        StorageMigrator::new(self.inner.clone())
    }
}

/// The writable paths, which run `T`'s [`Strategy`].
impl<T: Strategy> Store<T> {
    /// Every verb of the main resource (`flunders`).
    pub fn rest_storage(&self) -> RestStorage {
        let me = Arc::new(self.clone());
        RestStorage::for_resource::<T>()
            .with_getter(me.clone())
            .with_lister(me.clone())
            .with_creater(me.clone())
            .with_updater(me.clone())
            .with_deleter(me.clone())
            .with_collection_deleter(me.clone())
            .with_watcher(me)
    }

    /// `get`, `update` and `patch` of the scale subresource (`flunders/scale`), an
    /// `autoscaling/v1` `Scale`, when `T` declares `scale(...)`.
    pub fn scale_rest_storage(&self) -> Option<RestStorage> {
        let paths = T::INFO.scale?;
        let scale = Arc::new(ScaleStore::new(self.clone(), paths));
        let info = scale::scale_info(&T::INFO);
        let storage = RestStorage::new::<k8s_openapi::api::autoscaling::v1::Scale>(info)
            .with_getter(scale.clone())
            .with_updater(scale);
        Some(storage)
    }

    /// `get`, `update` and `patch` of the status subresource (`flunders/status`).
    pub fn status_rest_storage(&self) -> RestStorage {
        let status = Arc::new(StatusStore(self.clone()));
        RestStorage::for_resource::<T>()
            .with_getter(status.clone())
            .with_updater(status)
    }
}

#[async_trait]
impl<T: Resource> Getter for Store<T> {
    async fn get(&self, ctx: &RequestContext, name: &str, _: &GetOptions) -> Result<Value> {
        let key = self.inner.key(ctx, name)?;
        match self.inner.current(&key, name).await? {
            Some(kv) => self.inner.decode(&kv),
            None => Err(Error::not_found(&self.inner.info, name)),
        }
    }

    async fn get_object(&self, ctx: &RequestContext, name: &str, _: &GetOptions) -> Result<Object> {
        let key = self.inner.key(ctx, name)?;
        if let Some(cache) = &self.inner.cache {
            if let Some(found) = list::get_from_cache(&self.inner, cache, &key).await {
                return found
                    .map(|object| Object::Cached(CachedJson::new(object)))
                    .ok_or_else(|| Error::not_found(&self.inner.info, name));
            }
        }
        match self.inner.current(&key, name).await? {
            Some(kv) => self.inner.encode(&kv).map(Object::Encoded),
            None => Err(Error::not_found(&self.inner.info, name)),
        }
    }
}

#[async_trait]
impl<T: Resource> Lister for Store<T> {
    async fn list(&self, ctx: &RequestContext, options: &ListOptions) -> Result<ObjectList> {
        list::list(&self.inner, ctx, options).await
    }
}

#[async_trait]
impl<T: Strategy> Creater for Store<T> {
    async fn create(
        &self,
        ctx: &RequestContext,
        object: Value,
        options: &WriteOptions,
    ) -> Result<Object> {
        write::create::<T>(&self.inner, ctx, object, options).await
    }
}

#[async_trait]
impl<T: Strategy> Updater for Store<T> {
    async fn update(
        &self,
        ctx: &RequestContext,
        name: &str,
        update: UpdateFn,
        options: &WriteOptions,
    ) -> Result<(Value, bool)> {
        let write = (ctx, name, update, options);
        let (written, created) = self.write(write, UpdateTarget::Main).await?;
        Ok((written.object, created))
    }

    async fn update_object(
        &self,
        ctx: &RequestContext,
        name: &str,
        update: UpdateFn,
        options: &WriteOptions,
    ) -> Result<(Object, bool)> {
        let write = (ctx, name, update, options);
        let (written, created) = self.write(write, UpdateTarget::Main).await?;
        Ok((written.into_object(), created))
    }
}

impl<T: Strategy> Store<T> {
    /// An update of the object (`Main`) or of its status alone.
    async fn write(
        &self,
        (ctx, name, update, options): (&RequestContext, &str, UpdateFn, &WriteOptions),
        target: UpdateTarget,
    ) -> Result<(write::Written, bool)> {
        write::update::<T>(&self.inner, ctx, name, update, options, (target, None)).await
    }
}

#[async_trait]
impl<T: Resource> GracefulDeleter for Store<T> {
    async fn delete(
        &self,
        ctx: &RequestContext,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<DeleteOutcome> {
        delete::delete(&self.inner, ctx, name, options).await
    }
}

#[async_trait]
impl<T: Resource> CollectionDeleter for Store<T> {
    async fn delete_collection(
        &self,
        ctx: &RequestContext,
        delete: &DeleteOptions,
        list: &ListOptions,
    ) -> Result<ObjectList> {
        delete::delete_collection(&self.inner, ctx, delete, list).await
    }
}

#[async_trait]
impl<T: Resource> Watcher for Store<T> {
    async fn watch(&self, ctx: &RequestContext, options: &ListOptions) -> Result<WatchStream> {
        watch::watch(self.inner.clone(), ctx, options).await
    }
}

/// The `status` subresource of a [`Store`]: reads the object, writes only its status.
pub struct StatusStore<T: Resource>(Store<T>);

#[async_trait]
impl<T: Resource> Getter for StatusStore<T> {
    async fn get(&self, ctx: &RequestContext, name: &str, options: &GetOptions) -> Result<Value> {
        self.0.get(ctx, name, options).await
    }

    async fn get_object(
        &self,
        ctx: &RequestContext,
        name: &str,
        options: &GetOptions,
    ) -> Result<Object> {
        self.0.get_object(ctx, name, options).await
    }
}

#[async_trait]
impl<T: Strategy> Updater for StatusStore<T> {
    async fn update(
        &self,
        ctx: &RequestContext,
        name: &str,
        update: UpdateFn,
        options: &WriteOptions,
    ) -> Result<(Value, bool)> {
        let write = (ctx, name, update, options);
        let (written, created) = self.0.write(write, UpdateTarget::Status).await?;
        Ok((written.object, created))
    }

    async fn update_object(
        &self,
        ctx: &RequestContext,
        name: &str,
        update: UpdateFn,
        options: &WriteOptions,
    ) -> Result<(Object, bool)> {
        let write = (ctx, name, update, options);
        let (written, created) = self.0.write(write, UpdateTarget::Status).await?;
        Ok((written.into_object(), created))
    }
}
