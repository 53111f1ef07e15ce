//! What the stores of one server ([`StoreSet`]) do with the stores and readers they hold, and
//! how a strategy reads them ([`StrategyContext::reader`]).

use std::any::TypeId;
use std::sync::PoisonError;

use super::{Reader, Store};
use crate::registry::stores::{SetLink, StoreSet};
use crate::registry::strategy::StrategyContext;
use crate::runtime::Resource;

impl<'a> StrategyContext<'a> {
    /// The same context with the server's stores, which [`reader`](Self::reader) reads.
    pub fn with_stores(mut self, stores: Option<&'a StoreSet>) -> Self {
        self.stores = stores;
        self
    }

    /// A reader of another resource `U` the server stores or computes (`None` when it has
    /// none, or the store runs outside a server): strategies are synchronous, so they read
    /// with [`Reader::list_cached`] and [`Reader::get_cached`], from the watch cache, as
    /// kube's strategies read listers.
    pub fn reader<U: Resource>(&self) -> Option<Reader<U>> {
        self.stores?.reader::<U>()
    }
}

impl StoreSet {
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
        let link = self.link();
        stores
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(make(link)))
            .downcast_ref::<Store<T>>()
            .expect("stores are keyed by their type")
            .clone()
    }
}
