//! REST storage: the verbs one path of a `VersionedResourcesStorageMap` supports.
//!
//! Each verb is a trait of its own, so a storage states its capabilities in its type; a
//! [`RestStorage`] bundles the ones a path has, and the installer registers exactly those
//! routes and discovery verbs. The generic [`Store`](crate::registry::store::Store) implements
//! all of them; a computed or external resource implements only what it can.

use std::any::TypeId;
use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::options::{DeleteOptions, GetOptions, ListOptions, WriteOptions};
use crate::registry::patch::PatchSchema;
use crate::registry::served::SchemaFn;
use crate::registry::subresource::Subresource;
use crate::runtime::ResourceInfo;
use crate::storage::cacher::{CachedEvent, CachedObject};

/// One object a verb hands to the response writer: decoded JSON, or the JSON bytes of it
/// already encoded (read from storage, or as the watch cache keeps them), which a JSON
/// response copies as they are instead of serializing the object again.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// A decoded object.
    Decoded(Value),
    /// A JSON object, encoded.
    Encoded(Bytes),
    /// A JSON object as the watch cache keeps it: handed out by reference count, so a list
    /// or a watch fan-out that copies the bytes into its own buffer makes no per-item
    /// allocation.
    Cached(CachedJson),
}

/// The JSON of an object as the watch cache keeps it. Opaque: the cache's layout (revision
/// and key beside the JSON, shared buffers) stays the storage layer's own.
#[derive(Clone, Debug)]
pub struct CachedJson {
    object: CachedObject,
    /// The cached event that carried the object to a watcher, whose other encodings (another
    /// version of the object) are made once for every watcher.
    event: Option<Arc<CachedEvent>>,
}

impl PartialEq for CachedJson {
    fn eq(&self, other: &Self) -> bool {
        self.object == other.object
    }
}

impl CachedJson {
    /// An object of the cache.
    pub(crate) fn new(object: CachedObject) -> Self {
        Self {
            object,
            event: None,
        }
    }

    /// The object of a cached event, as a watcher receives it.
    pub(crate) fn of_event(event: Arc<CachedEvent>) -> Self {
        Self {
            object: event.object.clone(),
            event: Some(event),
        }
    }

    /// What a client receives, whole: JSON with `metadata.resourceVersion` (borrowed from the
    /// cache unless the object shares parts with others there; see
    /// [`CachedObject::to_json`]).
    pub fn to_json(&self) -> Cow<'_, [u8]> {
        self.object.to_json()
    }

    /// The length of [`to_json`](Self::to_json).
    pub fn json_len(&self) -> usize {
        self.object.json_len()
    }

    /// Appends [`to_json`](Self::to_json) to `out`, part by part.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.object.write_json(out);
    }

    /// Calls `read` with [`to_json`](Self::to_json), put together in a buffer of the
    /// thread's when the object shares parts ([`CachedObject::with_json`]).
    pub fn with_json<R>(&self, read: impl FnOnce(&[u8]) -> R) -> R {
        self.object.with_json(read)
    }

    /// At least [`json_len`](Self::json_len), known without reading the object's bytes.
    pub fn json_len_bound(&self) -> usize {
        self.object.json_len_bound()
    }

    /// Starts loading the object's bytes into the CPU's cache (see
    /// [`CachedObject::prefetch`]).
    pub fn prefetch(&self) {
        self.object.prefetch();
    }

    /// [`to_json`](Self::to_json) as `Bytes`: sharing the cache's buffer (no copy) unless
    /// the object shares parts with others there.
    pub fn encoded(&self) -> Bytes {
        self.object.encoded()
    }

    /// The object encoded by `make` (e.g. converted to another version): for a watch event,
    /// made once for all watchers asking with the same `V` and kept with the event; else
    /// made now.
    pub fn encoded_as<V: 'static>(
        &self,
        make: impl FnOnce(&[u8]) -> Result<Bytes>,
    ) -> Result<Bytes> {
        match &self.event {
            Some(event) => event.view(TypeId::of::<V>(), |object| make(&object.to_json())),
            None => make(&self.to_json()),
        }
    }
}

impl Object {
    /// The object as JSON, decoding it if needed.
    pub fn to_value(&self) -> Result<Value> {
        match self {
            Self::Decoded(value) => Ok(value.clone()),
            Self::Encoded(bytes) => decode(bytes),
            Self::Cached(object) => object.with_json(decode),
        }
    }

    /// The object as JSON, decoding it if needed.
    pub fn into_value(self) -> Result<Value> {
        match self {
            Self::Decoded(value) => Ok(value),
            Self::Encoded(bytes) => decode(&bytes),
            Self::Cached(object) => object.with_json(decode),
        }
    }

    /// Appends the object's JSON to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) -> Result<()> {
        match self {
            Self::Decoded(value) => serde_json::to_writer(out, value).map_err(Error::internal),
            Self::Encoded(bytes) => {
                out.extend_from_slice(bytes);
                Ok(())
            }
            Self::Cached(object) => {
                object.write_json(out);
                Ok(())
            }
        }
    }
}

fn decode(bytes: &[u8]) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|e| Error::internal(format!("encoded object: {e}")))
}

impl From<Value> for Object {
    fn from(value: Value) -> Self {
        Self::Decoded(value)
    }
}

/// A page of objects, as a `{Kind}List` without its `apiVersion` and `kind`.
#[derive(Clone, Debug, Default)]
pub struct ObjectList {
    /// The objects, each with `apiVersion`, `kind` and `metadata.resourceVersion`.
    pub items: Vec<Object>,
    /// `metadata.resourceVersion` of the list.
    pub resource_version: String,
    /// `metadata.continue`, when more pages follow.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`, when known.
    pub remaining_item_count: Option<i64>,
}

/// The type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
    /// `BOOKMARK`: only `metadata.resourceVersion` is meaningful.
    Bookmark,
    /// `ERROR`: the object is a `Status`.
    Error,
}

impl WatchEventType {
    /// The wire name, e.g. `ADDED`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
            Self::Bookmark => "BOOKMARK",
            Self::Error => "ERROR",
        }
    }
}

/// One event of a watch.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchEvent {
    /// What happened.
    pub type_: WatchEventType,
    /// The object (a `Status` for errors).
    pub object: Object,
}

/// A stream of watch events; it ends when the watch ends.
pub type WatchStream = Pin<Box<dyn Stream<Item = WatchEvent> + Send>>;

/// Produces the new object of an update from the current one (`None` when it does not exist).
/// Called again when a concurrent write forces a retry.
pub type UpdateFn = Arc<dyn Fn(Option<&Value>) -> Result<Value> + Send + Sync>;

/// `get`.
#[async_trait]
pub trait Getter: Send + Sync {
    /// Reads one object.
    async fn get(&self, ctx: &RequestContext, name: &str, options: &GetOptions) -> Result<Value>;

    /// Reads one object for a response that takes it as it is: a storage that has the
    /// object's JSON bytes at hand returns them ([`Object::Encoded`]) so that a JSON response
    /// copies them instead of decoding and encoding the object. The default calls
    /// [`get`](Getter::get).
    async fn get_object(
        &self,
        ctx: &RequestContext,
        name: &str,
        options: &GetOptions,
    ) -> Result<Object> {
        self.get(ctx, name, options).await.map(Object::Decoded)
    }
}

/// `list`.
#[async_trait]
pub trait Lister: Send + Sync {
    /// Reads a page of objects.
    async fn list(&self, ctx: &RequestContext, options: &ListOptions) -> Result<ObjectList>;
}

/// `create`.
#[async_trait]
pub trait Creater: Send + Sync {
    /// Creates an object from a decoded body. Returns the object as created: the generic
    /// store answers with the bytes it stored (and the resourceVersion they were stored at),
    /// not encoded a second time.
    async fn create(
        &self,
        ctx: &RequestContext,
        object: Value,
        options: &WriteOptions,
    ) -> Result<Object>;
}

/// `update` and `patch`: both are a function of the current object.
#[async_trait]
pub trait Updater: Send + Sync {
    /// Replaces object `name` with what `update` makes of it. Returns the stored object and
    /// whether it was created.
    async fn update(
        &self,
        ctx: &RequestContext,
        name: &str,
        update: UpdateFn,
        options: &WriteOptions,
    ) -> Result<(Value, bool)>;

    /// [`update`](Self::update), for an answer to a client: the stored object as it is best
    /// sent. The generic store answers with the bytes it stored (and the resourceVersion
    /// they were stored at), not encoded a second time; by default, `update`'s object.
    async fn update_object(
        &self,
        ctx: &RequestContext,
        name: &str,
        update: UpdateFn,
        options: &WriteOptions,
    ) -> Result<(Object, bool)> {
        let (object, created) = self.update(ctx, name, update, options).await?;
        Ok((Object::Decoded(object), created))
    }
}

/// What a delete did.
#[derive(Clone, Debug)]
pub enum DeleteOutcome {
    /// The object is gone; this was its last state.
    Deleted(Value),
    /// The object has finalizers: it now has a `deletionTimestamp` and stays until they are
    /// removed.
    Pending(Value),
}

/// `delete`.
#[async_trait]
pub trait GracefulDeleter: Send + Sync {
    /// Deletes one object, or marks it for deletion when it has finalizers.
    async fn delete(
        &self,
        ctx: &RequestContext,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<DeleteOutcome>;
}

/// `deletecollection`.
#[async_trait]
pub trait CollectionDeleter: Send + Sync {
    /// Deletes every object the list options select; returns them.
    async fn delete_collection(
        &self,
        ctx: &RequestContext,
        delete: &DeleteOptions,
        list: &ListOptions,
    ) -> Result<ObjectList>;
}

/// `watch`.
#[async_trait]
pub trait Watcher: Send + Sync {
    /// Starts a watch. Errors found before the stream starts are returned; later ones
    /// (an expired resourceVersion, for one) are `ERROR` events.
    async fn watch(&self, ctx: &RequestContext, options: &ListOptions) -> Result<WatchStream>;
}

/// The verbs one path (`flunders`, `flunders/status`) supports, with what describes its type.
#[derive(Clone)]
pub struct RestStorage {
    /// The kind served at this path.
    pub info: ResourceInfo,
    /// The version its objects are stored in: its own, unless it is served converted from
    /// another ([`converted`](crate::registry::converted::converted)).
    pub storage_version: &'static str,
    /// Its JSON schema, for OpenAPI.
    pub schema: SchemaFn,
    /// Merge keys for strategic merge patch, from the schema.
    pub patch_schema: Arc<PatchSchema>,
    /// `get`.
    pub getter: Option<Arc<dyn Getter>>,
    /// `list`.
    pub lister: Option<Arc<dyn Lister>>,
    /// `create`.
    pub creater: Option<Arc<dyn Creater>>,
    /// `update`, and `patch` when there is also a getter.
    pub updater: Option<Arc<dyn Updater>>,
    /// `delete`.
    pub deleter: Option<Arc<dyn GracefulDeleter>>,
    /// `deletecollection`.
    pub collection_deleter: Option<Arc<dyn CollectionDeleter>>,
    /// `watch`.
    pub watcher: Option<Arc<dyn Watcher>>,
    /// Its objects to and from the storage version, when it is served converted (`None`:
    /// stored as served).
    pub convertor: Option<Arc<dyn crate::codec::VersionConvertor>>,
    /// An action, view, stream or connection served at this path instead of the verbs
    /// above ([`subresource`](crate::registry::subresource)).
    pub subresource: Option<Subresource>,
}

impl std::fmt::Debug for RestStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestStorage")
            .field("kind", &self.info.kind)
            .field("verbs", &self.verbs())
            .finish()
    }
}

impl RestStorage {
    /// A storage with no verbs yet, for `info` and the schema of `T`.
    pub fn new<T: schemars::JsonSchema>(info: ResourceInfo) -> Self {
        Self {
            info,
            storage_version: info.version,
            schema: crate::registry::served::schema_of::<T>,
            patch_schema: Arc::new(PatchSchema::for_type::<T>()),
            getter: None,
            lister: None,
            creater: None,
            updater: None,
            deleter: None,
            collection_deleter: None,
            watcher: None,
            convertor: None,
            subresource: None,
        }
    }

    /// A storage with no verbs yet for the resource `T`: its schema carries the type's own
    /// `x-kubernetes-validations` ([`Resource::VALIDATIONS`](crate::runtime::Resource::VALIDATIONS)).
    pub fn for_resource<T: crate::runtime::Resource>() -> Self {
        Self {
            schema: crate::registry::schema::resource_schema_of::<T>,
            ..Self::new::<T>(T::INFO)
        }
    }

    /// The storage of a subresource of `T` served by `subresource`.
    pub fn for_subresource<T: crate::runtime::Resource>(subresource: Subresource) -> Self {
        Self {
            subresource: Some(subresource),
            ..Self::new::<T>(T::INFO)
        }
    }

    /// Adds `get`.
    pub fn with_getter(mut self, getter: Arc<dyn Getter>) -> Self {
        self.getter = Some(getter);
        self
    }

    /// Adds `list`.
    pub fn with_lister(mut self, lister: Arc<dyn Lister>) -> Self {
        self.lister = Some(lister);
        self
    }

    /// Adds `create`.
    pub fn with_creater(mut self, creater: Arc<dyn Creater>) -> Self {
        self.creater = Some(creater);
        self
    }

    /// Adds `update` (and `patch`, with a getter).
    pub fn with_updater(mut self, updater: Arc<dyn Updater>) -> Self {
        self.updater = Some(updater);
        self
    }

    /// Adds `delete`.
    pub fn with_deleter(mut self, deleter: Arc<dyn GracefulDeleter>) -> Self {
        self.deleter = Some(deleter);
        self
    }

    /// Adds `deletecollection`.
    pub fn with_collection_deleter(mut self, deleter: Arc<dyn CollectionDeleter>) -> Self {
        self.collection_deleter = Some(deleter);
        self
    }

    /// Adds `watch`.
    pub fn with_watcher(mut self, watcher: Arc<dyn Watcher>) -> Self {
        self.watcher = Some(watcher);
        self
    }

    /// Whether `patch` is served: it needs both `get` and `update`.
    pub fn can_patch(&self) -> bool {
        self.getter.is_some() && self.updater.is_some()
    }

    /// The discovery verbs, in kube-apiserver's (alphabetical) order.
    pub fn verbs(&self) -> Vec<&'static str> {
        if let Some(subresource) = &self.subresource {
            return subresource.verbs();
        }
        let mut verbs = Vec::new();
        let has = [
            ("create", self.creater.is_some()),
            ("delete", self.deleter.is_some()),
            ("deletecollection", self.collection_deleter.is_some()),
            ("get", self.getter.is_some()),
            ("list", self.lister.is_some()),
            ("patch", self.can_patch()),
            ("update", self.updater.is_some()),
            ("watch", self.watcher.is_some()),
        ];
        for (verb, present) in has {
            if present {
                verbs.push(verb);
            }
        }
        verbs
    }
}
