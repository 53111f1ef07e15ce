//! The stores of one server, by type: how a strategy (or anything holding one store) reaches
//! the others, in process.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::{Reader, Store};
use crate::registry::strategy::StrategyContext;
use crate::runtime::Resource;

/// Something per type: a `Store<T>`, or a `Reader<T>`.
type ByType = Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>;

/// One store per type. Every store made through the set knows it (weakly), so its
/// strategies can read the others ([`StrategyContext::reader`](crate::StrategyContext::reader)),
/// and the readers of computed resources, which have no store of their own.
#[derive(Clone, Default)]
pub struct StoreSet {
    stores: Arc<ByType>,
    /// A `Reader<T>` per computed kind `T`.
    computed: Arc<ByType>,
}

/// A store's link back to its set, which does not keep the set alive.
#[derive(Clone, Default)]
pub(crate) struct SetLink(Weak<ByType>, Weak<ByType>);

impl SetLink {
    pub(crate) fn set(&self) -> Option<StoreSet> {
        let (stores, computed) = (self.0.upgrade()?, self.1.upgrade()?);
        Some(StoreSet { stores, computed })
    }
}

impl std::fmt::Debug for StoreSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.lock().len();
        f.debug_struct("StoreSet").field("stores", &count).finish()
    }
}

impl<'a> StrategyContext<'a> {
    /// The same context with the server's stores, which [`reader`](Self::reader) reads.
    pub fn with_stores(mut self, stores: Option<&'a StoreSet>) -> Self {
        self.stores = stores.map(|s| s as &(dyn Any + Send + Sync));
        self
    }

    /// A reader of another resource `U` the server stores or computes (`None` when it has
    /// none, or the store runs outside a server): strategies are synchronous, so they read
    /// with [`Reader::list_cached`] and [`Reader::get_cached`], from the watch cache, as
    /// kube's strategies read listers.
    pub fn reader<U: Resource>(&self) -> Option<Reader<U>> {
        // Only `with_stores` sets it, always to a `StoreSet`.
        self.stores?.downcast_ref::<StoreSet>()?.reader::<U>()
    }
}

impl StoreSet {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TypeId, Box<dyn Any + Send + Sync>>> {
        self.stores.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store of `T`, if the set has one.
    pub fn get<T: Resource>(&self) -> Option<Store<T>> {
        self.lock()
            .get(&TypeId::of::<T>())
            .and_then(|store| store.downcast_ref::<Store<T>>())
            .cloned()
    }

    /// A reader of `T`'s store, or of the computed resource `T`, if the set has one.
    pub fn reader<T: Resource>(&self) -> Option<Reader<T>> {
        let computed = self.computed.lock().unwrap_or_else(PoisonError::into_inner);
        let computed = computed.get(&TypeId::of::<T>());
        match computed.and_then(|reader| reader.downcast_ref::<Reader<T>>()) {
            Some(reader) => Some(reader.clone()),
            None => self.get::<T>().map(|store| store.reader()),
        }
    }

    /// Adds the reader of the computed resource `T`.
    pub(crate) fn add_computed<T: Resource>(&self, reader: Reader<T>) {
        let mut computed = self.computed.lock().unwrap_or_else(PoisonError::into_inner);
        computed.insert(TypeId::of::<T>(), Box::new(reader));
    }

    /// Whether the set has a store of `T`.
    pub fn contains<T: Resource>(&self) -> bool {
        self.lock().contains_key(&TypeId::of::<T>())
    }

    /// The store of `T`, made by `make` (given the link the store keeps) the first time.
    pub(crate) fn get_or_make<T: Resource>(
        &self,
        make: impl FnOnce(SetLink) -> Store<T>,
    ) -> Store<T> {
        let mut stores = self.lock();
        let link = SetLink(Arc::downgrade(&self.stores), Arc::downgrade(&self.computed));
        stores
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(make(link)))
            .downcast_ref::<Store<T>>()
            .expect("stores are keyed by their type")
            .clone()
    }
}
