//! The stores of one server, by type: how a strategy (or anything holding one store) reaches
//! the others, in process. The set itself, below both the store and the strategies, so a
//! [`StrategyContext`](crate::registry::strategy::StrategyContext) holds it typed; what it does
//! with stores and readers is the store module's (`store/set.rs`).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Something per type: a `Store<T>`, or a `Reader<T>`.
type ByType = Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>;

/// One store per type. Every store made through the set knows it (weakly), so its
/// strategies can read the others ([`StrategyContext::reader`](crate::StrategyContext::reader)),
/// and the readers of computed resources, which have no store of their own.
#[derive(Clone, Default)]
pub struct StoreSet {
    stores: Arc<ByType>,
    /// A `Reader<T>` per computed kind `T`.
    pub(crate) computed: Arc<ByType>,
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

impl StoreSet {
    /// The stores, by type.
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<TypeId, Box<dyn Any + Send + Sync>>> {
        self.stores.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The link a store made in this set keeps.
    pub(crate) fn link(&self) -> SetLink {
        SetLink(Arc::downgrade(&self.stores), Arc::downgrade(&self.computed))
    }
}
