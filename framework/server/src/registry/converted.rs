//! A served version that is not the storage version: every verb of the hub's storage, with the
//! objects converted on the way in and out ([`Convertible`]), so one storage (its keys, its
//! watch cache, its revisions) serves every version of a resource.
//!
//! On the way in an object of the served version is decoded, defaulted as that version, and
//! converted to the hub, which the hub's store then prepares, defaults, validates and stores
//! as for its own version; on the way out every object, list item and watch event is converted
//! back. Subresources of another kind (`scale`) are served as they are.

use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::options::{
    DeleteOptions, FieldValidation, FieldView, GetOptions, ListOptions, WriteOptions,
};
use crate::registry::patch::PatchSchema;
use crate::registry::rest::{
    CollectionDeleter, Creater, DeleteOutcome, Getter, GracefulDeleter, Lister, Object, ObjectList,
    RestStorage, UpdateFn, Updater, WatchEventType, WatchStream, Watcher,
};
use crate::registry::store::codec::{decode_typed, encode_typed, set_type_meta, to_json_vec};
use crate::registry::strategy::{Strategy, StrategyContext};
use crate::runtime::{Convertible, Resource};

/// `hub` (a storage of `H`, the storage version) served as `S`: the same verbs, objects
/// converted both ways.
pub fn converted<S, H>(hub: RestStorage) -> RestStorage
where
    S: Convertible<H> + Strategy,
    H: Resource,
{
    const {
        assert!(
            same(S::INFO.group, H::INFO.group)
                && same(S::INFO.kind, H::INFO.kind)
                && same(S::INFO.plural, H::INFO.plural),
            "a version served converted must have its hub's group, kind and plural"
        )
    };
    let wrap = Converter::<S, H>(PhantomData);
    let mut storage = RestStorage::for_resource::<S>();
    storage.storage_version = hub.storage_version;
    storage.patch_schema = Arc::new(PatchSchema::for_type::<S>());
    storage.getter = hub.getter.map(|v| wrap.getter(v));
    storage.lister = hub.lister.map(|v| wrap.lister(v));
    storage.creater = hub.creater.map(|v| wrap.creater(v));
    storage.updater = hub.updater.map(|v| wrap.updater(v));
    storage.deleter = hub.deleter.map(|v| wrap.deleter(v));
    storage.collection_deleter = hub.collection_deleter.map(|v| wrap.collection_deleter(v));
    storage.watcher = hub.watcher.map(|v| wrap.watcher(v));
    storage.convertor = Some(Arc::new(wrap));
    storage
}

pub use crate::codec::VersionConvertor;

impl<S: Convertible<H> + Strategy, H: Resource> VersionConvertor for Converter<S, H> {
    fn to_served(&self, stored: &Value) -> Result<Value> {
        self.outward(stored)
    }

    fn to_storage(&self, served: &Value) -> Result<Value> {
        let typed: S = decode_typed(served, FieldValidation::Ignore, &RequestContext::default())?;
        let hub = typed.into_hub().map_err(conversion_failed::<S>)?;
        encode_typed(&hub)
    }
}

/// `a == b`, at compile time.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The conversions of `S` to and from its hub `H`, as JSON.
struct Converter<S, H>(PhantomData<fn() -> (S, H)>);

impl<S, H> Clone for Converter<S, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S, H> Copy for Converter<S, H> {}

impl<S: Convertible<H> + Strategy, H: Resource> Converter<S, H> {
    /// A stored object (of `H`) as `S`, with `S`'s `apiVersion` and `kind`.
    fn outward(self, hub: &Value) -> Result<Value> {
        let typed = H::deserialize(hub).map_err(|e| undecodable::<H>(e))?;
        let served = <S as Convertible<H>>::from_hub(typed).map_err(conversion_failed::<S>)?;
        encode_typed(&served)
    }

    /// [`outward`](Self::outward) from and to JSON text: the hub's bytes decoded straight
    /// into `H`, the served object encoded straight to bytes, no JSON tree in between.
    fn outward_bytes(self, hub: &[u8]) -> Result<Bytes> {
        let typed: H = serde_json::from_slice(hub).map_err(|e| undecodable::<H>(e))?;
        let served = <S as Convertible<H>>::from_hub(typed).map_err(conversion_failed::<S>)?;
        let typed = WithTypeMeta {
            api_version: S::INFO.api_version(),
            kind: S::INFO.kind,
            object: &served,
        };
        to_json_vec(&typed)
            .map(Bytes::from)
            .map_err(Error::internal)
    }

    /// An object of the hub's storage as `S`: a watch-cache event's is converted once for all
    /// watchers of this version.
    fn outward_object(self, hub: Object) -> Result<Object> {
        match hub {
            Object::Decoded(value) => self.outward(&value).map(Object::Decoded),
            Object::Encoded(bytes) => self.outward_bytes(&bytes).map(Object::Encoded),
            Object::Cached(cached) => cached
                .encoded_as::<S>(|json| self.outward_bytes(json))
                .map(Object::Encoded),
        }
    }

    /// The hub's bookmark as `S`'s: only `metadata` (its resourceVersion, and the
    /// initial-events-end annotation) means anything, so nothing is converted, but it is an
    /// object of the version watched, as kube-apiserver's watch encoder sends the cacher's
    /// empty bookmark object converted to the requested version.
    fn bookmark(self, hub: Object) -> Result<Object> {
        let mut object = hub.into_value()?;
        set_type_meta(&S::INFO, &mut object);
        Ok(Object::Decoded(object))
    }

    /// How field selectors of `S` see a stored object: converted to `S`.
    fn field_view(self) -> FieldView {
        FieldView::new(S::INFO.selectable_fields, move |hub| self.outward(hub))
    }

    /// `options` with field selectors evaluated on objects as `S` shows them.
    fn list_options(self, options: &ListOptions) -> ListOptions {
        ListOptions {
            field_view: Some(self.field_view()),
            ..options.clone()
        }
    }

    /// An object of `S` from a client, defaulted, prepared, validated, warned about and
    /// canonicalized by `S`'s strategy (against `old`, the current object as `S`, on update),
    /// as `H` for the hub's store, which then runs the hub's strategy too: as kube-apiserver
    /// defaults each version and validates the one internal version, both sets of rules hold.
    fn inward(
        self,
        served: &Value,
        old: Option<&Value>,
        options: &WriteOptions,
        ctx: &RequestContext,
    ) -> Result<Value> {
        let mut typed: S = decode_typed(served, options.field_validation, ctx)?;
        typed.default_fields();
        let strategy = StrategyContext::new(ctx, options);
        let old: Option<S> = old
            .map(|old| decode_typed(old, FieldValidation::Ignore, ctx))
            .transpose()?;
        // The served version's own strategy, in kube's order (prepare, validate, warnings,
        // canonicalize), before the hub's runs in its store.
        match &old {
            Some(old) => typed.prepare_for_update(old, &strategy),
            None => typed.prepare_for_create(&strategy),
        }
        let errors = match &old {
            Some(old) => typed.validate_update(old, &strategy),
            None => typed.validate(&strategy),
        };
        if !errors.is_empty() {
            let name = crate::runtime::object::name(served).unwrap_or_default();
            return Err(Error::invalid(&S::INFO, name, &errors));
        }
        let warnings = match &old {
            Some(old) => typed.warnings_on_update(old, &strategy),
            None => typed.warnings_on_create(&strategy),
        };
        warnings.into_iter().for_each(|w| strategy.warn(w));
        typed.canonicalize();
        let hub = typed.into_hub().map_err(conversion_failed::<S>)?;
        encode_typed(&hub)
    }

    fn outward_list(self, mut list: ObjectList) -> Result<ObjectList> {
        list.items = list
            .items
            .into_iter()
            .map(|item| self.outward_object(item))
            .collect::<Result<_>>()?;
        Ok(list)
    }

    fn getter(self, inner: Arc<dyn Getter>) -> Arc<dyn Getter> {
        Arc::new(Verb { inner, conv: self })
    }

    fn lister(self, inner: Arc<dyn Lister>) -> Arc<dyn Lister> {
        Arc::new(Verb { inner, conv: self })
    }

    fn creater(self, inner: Arc<dyn Creater>) -> Arc<dyn Creater> {
        Arc::new(Verb { inner, conv: self })
    }

    fn updater(self, inner: Arc<dyn Updater>) -> Arc<dyn Updater> {
        Arc::new(Verb { inner, conv: self })
    }

    fn deleter(self, inner: Arc<dyn GracefulDeleter>) -> Arc<dyn GracefulDeleter> {
        Arc::new(Verb { inner, conv: self })
    }

    fn collection_deleter(self, inner: Arc<dyn CollectionDeleter>) -> Arc<dyn CollectionDeleter> {
        Arc::new(Verb { inner, conv: self })
    }

    fn watcher(self, inner: Arc<dyn Watcher>) -> Arc<dyn Watcher> {
        Arc::new(Verb { inner, conv: self })
    }
}

/// A stored object `H` cannot decode: the server's fault, as a corrupt stored object.
fn undecodable<H: Resource>(e: serde_json::Error) -> Error {
    Error::internal(format!("decoding a stored {}: {e}", H::INFO.group_kind()))
}

/// An object with its `apiVersion` and `kind` first, encoded without a JSON tree.
#[derive(serde::Serialize)]
struct WithTypeMeta<'a, T> {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: &'static str,
    #[serde(flatten)]
    object: &'a T,
}

/// A failed conversion is the server's fault: 500, as kube-apiserver answers.
fn conversion_failed<S: Resource>(e: crate::runtime::ConversionError) -> Error {
    Error::internal(format!(
        "converting {} to or from its storage version: {e}",
        S::INFO.group_kind()
    ))
}

/// One verb of the hub, converted.
struct Verb<V: ?Sized, S, H> {
    inner: Arc<V>,
    conv: Converter<S, H>,
}

#[async_trait]
impl<S: Convertible<H> + Strategy, H: Resource> Getter for Verb<dyn Getter, S, H> {
    async fn get(&self, ctx: &RequestContext, name: &str, options: &GetOptions) -> Result<Value> {
        let hub = self.inner.get(ctx, name, options).await?;
        self.conv.outward(&hub)
    }
}

#[async_trait]
impl<S: Convertible<H> + Strategy, H: Resource> Lister for Verb<dyn Lister, S, H> {
    async fn list(&self, ctx: &RequestContext, options: &ListOptions) -> Result<ObjectList> {
        let options = self.conv.list_options(options);
        let list = self.inner.list(ctx, &options).await?;
        self.conv.outward_list(list)
    }
}

#[async_trait]
impl<S: Convertible<H> + Strategy, H: Resource> Creater for Verb<dyn Creater, S, H> {
    async fn create(
        &self,
        ctx: &RequestContext,
        object: Value,
        options: &WriteOptions,
    ) -> Result<Object> {
        let hub = self.conv.inward(&object, None, options, ctx)?;
        let created = self.inner.create(ctx, hub, options).await?.into_value()?;
        self.conv.outward(&created).map(Object::Decoded)
    }
}

#[async_trait]
impl<S: Convertible<H> + Strategy, H: Resource> Updater for Verb<dyn Updater, S, H> {
    async fn update(
        &self,
        ctx: &RequestContext,
        name: &str,
        update: UpdateFn,
        options: &WriteOptions,
    ) -> Result<(Value, bool)> {
        let conv = self.conv;
        let write = options.clone();
        let request = ctx.clone();
        let in_hub: UpdateFn = Arc::new(move |current: Option<&Value>| {
            let served = current.map(|hub| conv.outward(hub)).transpose()?;
            let new = update(served.as_ref())?;
            conv.inward(&new, served.as_ref(), &write, &request)
        });
        let (stored, created) = self.inner.update(ctx, name, in_hub, options).await?;
        Ok((self.conv.outward(&stored)?, created))
    }
}

#[async_trait]
impl<S: Convertible<H> + Strategy, H: Resource> GracefulDeleter
    for Verb<dyn GracefulDeleter, S, H>
{
    async fn delete(
        &self,
        ctx: &RequestContext,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<DeleteOutcome> {
        Ok(match self.inner.delete(ctx, name, options).await? {
            DeleteOutcome::Deleted(hub) => DeleteOutcome::Deleted(self.conv.outward(&hub)?),
            DeleteOutcome::Pending(hub) => DeleteOutcome::Pending(self.conv.outward(&hub)?),
        })
    }
}

#[async_trait]
impl<S: Convertible<H> + Strategy, H: Resource> CollectionDeleter
    for Verb<dyn CollectionDeleter, S, H>
{
    async fn delete_collection(
        &self,
        ctx: &RequestContext,
        delete: &DeleteOptions,
        list: &ListOptions,
    ) -> Result<ObjectList> {
        let list = self.conv.list_options(list);
        let deleted = self.inner.delete_collection(ctx, delete, &list).await?;
        self.conv.outward_list(deleted)
    }
}

#[async_trait]
impl<S: Convertible<H> + Strategy, H: Resource> Watcher for Verb<dyn Watcher, S, H> {
    async fn watch(&self, ctx: &RequestContext, options: &ListOptions) -> Result<WatchStream> {
        let options = self.conv.list_options(options);
        let events = self.inner.watch(ctx, &options).await?;
        let conv = self.conv;
        let converted = events.map(move |mut event| {
            let object = std::mem::replace(&mut event.object, Object::Decoded(Value::Null));
            let shown = match event.type_ {
                // A Status: of no version of the resource.
                WatchEventType::Error => Ok(object),
                WatchEventType::Bookmark => conv.bookmark(object),
                _ => conv.outward_object(object),
            };
            event.object = match shown {
                Ok(object) => object,
                Err(e) => {
                    event.type_ = WatchEventType::Error;
                    Object::Decoded(crate::error::status_json(e.status()))
                }
            };
            event
        });
        Ok(Box::pin(converted))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::registry::store::Store;
    use crate::storage::MemoryBackend;
    use crate::test_kinds::{New, Old};

    impl Strategy for Old {}
    impl Strategy for New {}

    #[tokio::test]
    async fn bookmarks_are_objects_of_the_version_watched() {
        // Stored as v1beta1, served as v1alpha1.
        let store = Store::<New>::new(Arc::new(MemoryBackend::new()), "/registry")
            .with_bookmark_interval(Duration::from_millis(50));
        let ctx = RequestContext::namespaced("ns");
        let hub = json!({"metadata": {"name": "a", "namespace": "ns"}, "size": 3});
        store
            .create(&ctx, hub, &WriteOptions::default())
            .await
            .unwrap();
        let served = converted::<Old, New>(store.rest_storage());
        let options = ListOptions {
            send_initial_events: Some(true),
            allow_watch_bookmarks: true,
            timeout_seconds: Some(10),
            ..ListOptions::default()
        };
        let mut events = served.watcher.unwrap().watch(&ctx, &options).await.unwrap();
        let added = events.next().await.unwrap();
        assert_eq!(added.type_, WatchEventType::Added);
        assert_eq!(added.object.into_value().unwrap()["width"], 3);
        // The end of the initial events, then a periodic bookmark.
        for initial_events_end in [true, false] {
            let bookmark = events.next().await.unwrap();
            assert_eq!(bookmark.type_, WatchEventType::Bookmark);
            let object = bookmark.object.into_value().unwrap();
            assert_eq!(
                object["apiVersion"], "wardle.example.com/v1alpha1",
                "{object}"
            );
            assert_eq!(object["kind"], "Flunder", "{object}");
            let meta = &object["metadata"];
            assert!(meta["resourceVersion"].is_string(), "{object}");
            let annotation = &meta["annotations"]["k8s.io/initial-events-end"];
            assert_eq!(annotation.as_str() == Some("true"), initial_events_end);
            // Nothing of the hub's object: an empty object with its metadata.
            assert!(object.get("width").is_none() && object.get("size").is_none());
        }
    }
}
