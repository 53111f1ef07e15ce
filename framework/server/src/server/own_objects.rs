//! The server's kinds as admission reads them by `(apiVersion, kind)` ([`OwnObjects`]): each
//! kind a group serves, read through its [`Reader`] (the watch cache, or a computed kind's
//! provider), a converted version read from its hub's and converted.

use std::marker::PhantomData;
use std::sync::{Arc, PoisonError};

use async_trait::async_trait;
use extension_apiserver_machinery::selector::LabelSelector;
use serde_json::Value;

use super::storage_config::{MakeObjectReader, StorageConfig};
use crate::admission::{ObjectReader, OwnObjects};
use crate::error::{Error, Result};
use crate::registry::options::ListOptions;
use crate::registry::store::Reader;
use crate::runtime::{Convertible, Resource, Scope};

/// Reads `S` from the objects of `H`, converting each (`S` = `H`: as they are).
struct Converting<S, H: Resource> {
    hub: Reader<H>,
    convert: fn(H) -> Result<S>,
    _served: PhantomData<fn() -> S>,
}

fn as_json<S: Resource>(object: S) -> Result<Value> {
    serde_json::to_value(object).map_err(|e| Error::internal(e.to_string()))
}

#[async_trait]
impl<S: Resource, H: Resource> ObjectReader for Converting<S, H> {
    fn namespaced(&self) -> bool {
        S::INFO.scope == Scope::Namespaced
    }

    async fn get(&self, namespace: Option<&str>, name: &str) -> Result<Option<Value>> {
        match self.hub.get(namespace, name).await? {
            Some(object) => as_json((self.convert)(object)?).map(Some),
            None => Ok(None),
        }
    }

    async fn list(&self, namespace: Option<&str>, selector: &LabelSelector) -> Result<Vec<Value>> {
        let options = ListOptions {
            label_selector: Some(selector.clone()),
            ..ListOptions::default()
        };
        let objects = self.hub.list_with(namespace, &options).await?;
        objects
            .into_iter()
            .map(|object| as_json((self.convert)(object)?))
            .collect()
    }
}

fn key<T: Resource>() -> (String, String) {
    (T::INFO.api_version(), T::INFO.kind.to_string())
}

impl StorageConfig {
    /// Declares that the server serves `T` from its own store or provider.
    pub(super) fn serves_kind<T: Resource>(&self) {
        let make: MakeObjectReader = Arc::new(|config: &StorageConfig| {
            Arc::new(Converting::<T, T> {
                hub: config.reader::<T>(),
                convert: Ok,
                _served: PhantomData,
            }) as Arc<dyn ObjectReader>
        });
        self.declare_kind(key::<T>(), make);
    }

    /// Declares that the server serves `S` converted from `H`.
    pub(super) fn serves_converted<S: Convertible<H> + Resource, H: Resource>(&self) {
        let make: MakeObjectReader = Arc::new(|config: &StorageConfig| {
            Arc::new(Converting::<S, H> {
                hub: config.reader::<H>(),
                convert: |hub| S::from_hub(hub).map_err(|e| Error::internal(e.to_string())),
                _served: PhantomData,
            }) as Arc<dyn ObjectReader>
        });
        self.declare_kind(key::<S>(), make);
    }

    fn declare_kind(&self, key: (String, String), make: MakeObjectReader) {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        kinds.insert(key, make);
    }

    /// The kinds the server's groups serve, for admission (a policy's params).
    pub(crate) fn own_objects(&self) -> OwnObjects {
        let makers: Vec<_> = {
            let kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
            kinds.iter().map(|(k, m)| (k.clone(), m.clone())).collect()
        };
        let readers = makers.into_iter().map(|(key, make)| (key, make(self)));
        OwnObjects::new(readers.collect())
    }
}
