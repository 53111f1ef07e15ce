//! The mirror: the provider's objects kept in an in-memory backend of their own, so that the
//! generic [`Store`] serves them (its keys, revisions, selectors, pages, watch cache). Each
//! sync asks the provider and writes the diff; one sync at a time, so that an older answer
//! never overwrites a newer one, and a read that waited for another's sync to finish takes
//! its answer when that sync began after the read arrived (many concurrent reads, one
//! provider call).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::Mutex;

use super::diff::{MirrorWrite, Mirrored, diff, reconcile};
use super::provider::{Change, Provider};
use crate::error::{Error, Result};
use crate::registry::store::Store;
use crate::registry::store::codec::{encode_for_storage, set_type_meta};
use crate::runtime::object::{self, set_meta};
use crate::runtime::{Resource, Scope};
use crate::storage::{Backend, ListRequest, StorageError};

pub(crate) struct Mirror<P: Provider> {
    provider: Arc<P>,
    pub(crate) backend: Arc<dyn Backend>,
    /// The store that serves the mirror (a watch cache in front when on).
    pub(crate) store: Store<P::Object>,
    /// Held for the whole of a sync (the provider's answer and the writes of its diff), with
    /// when the latest syncs began.
    syncing: Mutex<Synced>,
    /// Whether a list of every object has been mirrored (since then the mirror holds them
    /// all, as fresh as its upkeep keeps them).
    listed_all: AtomicBool,
}

impl<P: Provider> Mirror<P> {
    /// A mirror in `backend` (the store's, which only the mirror writes) of `provider`.
    pub(crate) fn new(
        provider: Arc<P>,
        backend: Arc<dyn Backend>,
        store: Store<P::Object>,
    ) -> Self {
        Self {
            provider,
            backend,
            store,
            syncing: Mutex::default(),
            listed_all: AtomicBool::new(false),
        }
    }

    /// Whether every object of the provider has been mirrored once.
    pub(crate) fn listed_all(&self) -> bool {
        self.listed_all.load(Ordering::Acquire)
    }

    /// Lists `namespace` (or everything) at the provider and makes the mirror equal to it.
    pub(crate) async fn sync_list(&self, namespace: Option<&str>) -> Result<()> {
        let arrived = Instant::now();
        let namespace = self.scoped(namespace);
        let mut synced = self.syncing.lock().await;
        if synced.covers(namespace, arrived) {
            return Ok(());
        }
        let began = Instant::now();
        self.sync_list_locked(namespace).await?;
        synced.record(namespace, began);
        Ok(())
    }

    async fn sync_list_locked(&self, namespace: Option<&str>) -> Result<()> {
        let namespace = self.scoped(namespace);
        let objects = self.provider.list(namespace).await?;
        let mut desired = BTreeMap::new();
        for object in objects {
            let (key, value) = self.keyed(object, namespace)?;
            desired.insert(key, value);
        }
        let current = self.mirrored(&self.prefix(namespace)).await?;
        self.write(diff(&current, desired, &object::now_timestamp()))
            .await?;
        if namespace.is_none() {
            self.listed_all.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Asks the provider for one object and makes the mirror's copy equal to it.
    pub(crate) async fn sync_get(&self, namespace: Option<&str>, name: &str) -> Result<()> {
        let arrived = Instant::now();
        let namespace = self.scoped(namespace);
        let synced = self.syncing.lock().await;
        if synced.covers(namespace, arrived) {
            return Ok(());
        }
        let key = self.key(namespace, name);
        let desired = match self.provider.get(namespace, name).await? {
            None => None,
            Some(object) => {
                let (got, value) = self.keyed(object, namespace)?;
                if got != key {
                    let message = format!("answered {got:?} for a get of {key:?}");
                    return Err(self.provider_error(message));
                }
                Some(value)
            }
        };
        self.reconcile_one(key, desired).await
    }

    /// Applies one change the provider pushed.
    pub(crate) async fn apply(&self, change: Change<P::Object>) -> Result<()> {
        let mut synced = self.syncing.lock().await;
        match change {
            Change::Relist => {
                let began = Instant::now();
                self.sync_list_locked(None).await?;
                synced.record(None, began);
                Ok(())
            }
            Change::Applied(object) => {
                let (key, value) = self.keyed(object, None)?;
                self.reconcile_one(key, Some(value)).await
            }
            Change::Deleted { namespace, name } => {
                let namespace = self.namespace_of(&name, namespace, None)?;
                let key = self.key(namespace.as_deref(), &name);
                self.reconcile_one(key, None).await
            }
        }
    }

    async fn reconcile_one(&self, key: String, desired: Option<Value>) -> Result<()> {
        let current = self.backend.get(&key).await.map_err(internal)?;
        let current = current.map(|kv| mirrored(&kv)).transpose()?;
        let now = object::now_timestamp();
        let write = reconcile(key, desired, current.as_ref(), &now);
        self.write(write.into_iter().collect()).await
    }

    async fn write(&self, writes: Vec<MirrorWrite>) -> Result<()> {
        for write in writes {
            let done = match write {
                MirrorWrite::Create(key, value) => {
                    let bytes = encode_for_storage(&value)?;
                    self.backend.create(&key, bytes).await
                }
                MirrorWrite::Update(key, value, revision) => {
                    let bytes = encode_for_storage(&value)?;
                    self.backend.update(&key, bytes, revision).await
                }
                MirrorWrite::Delete(key, revision) => {
                    self.backend.delete(&key, Some(revision)).await
                }
            };
            done.map_err(internal)?;
        }
        Ok(())
    }

    /// Every mirrored object under `prefix`.
    async fn mirrored(&self, prefix: &str) -> Result<BTreeMap<String, Mirrored>> {
        let request = ListRequest {
            prefix: prefix.to_string(),
            ..ListRequest::default()
        };
        let page = self.backend.list(&request).await.map_err(internal)?;
        page.items
            .iter()
            .map(|kv| Ok((kv.key.clone(), mirrored(kv)?)))
            .collect()
    }

    /// The object as JSON with `apiVersion` and `kind`, and its key; a namespaced object
    /// without a namespace is in the one listed.
    fn keyed(&self, object: P::Object, listed: Option<&str>) -> Result<(String, Value)> {
        let mut value = serde_json::to_value(&object).map_err(Error::internal)?;
        set_type_meta(&info::<P>(), &mut value);
        let name = match object::name(&value) {
            Some(name) if !name.contains('/') => name.to_string(),
            _ => return Err(self.provider_error("answered an object without a valid name")),
        };
        let given = object::namespace(&value).map(str::to_string);
        let namespace = self.namespace_of(&name, given, listed)?;
        if let (Some(ns), None) = (&namespace, object::namespace(&value)) {
            let ns = serde_json::json!(ns);
            set_meta(&mut value, "namespace", ns);
        }
        Ok((self.key(namespace.as_deref(), &name), value))
    }

    /// The namespace of object `name` that says it is in `given`, answered for a list of
    /// `listed`: an error when the kind's scope or the list rules it out.
    fn namespace_of(
        &self,
        name: &str,
        given: Option<String>,
        listed: Option<&str>,
    ) -> Result<Option<String>> {
        let message = match (info::<P>().scope, given, listed) {
            (Scope::Cluster, None, _) => return Ok(None),
            (Scope::Namespaced, Some(ns), Some(listed)) if ns != listed => {
                format!("answered {ns}/{name} for namespace {listed:?}")
            }
            (Scope::Namespaced, Some(ns), _) if !ns.contains('/') => return Ok(Some(ns)),
            (Scope::Namespaced, None, Some(listed)) => return Ok(Some(listed.to_string())),
            (Scope::Cluster, Some(ns), _) => {
                format!("answered {name:?} in namespace {ns:?} for a cluster-scoped kind")
            }
            (Scope::Namespaced, ns, _) => format!("answered {name:?} in namespace {ns:?}"),
        };
        Err(self.provider_error(message))
    }

    /// The namespace a request reads: none for a cluster-scoped kind.
    fn scoped<'a>(&self, namespace: Option<&'a str>) -> Option<&'a str> {
        namespace.filter(|_| info::<P>().namespaced())
    }

    fn key(&self, namespace: Option<&str>, name: &str) -> String {
        format!("{}{name}", self.prefix(namespace))
    }

    fn prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) => format!("{}{ns}/", self.store.key_root()),
            None => self.store.key_root().to_string(),
        }
    }

    /// A provider that breaks the rules is a server error, named so that its author finds it.
    fn provider_error(&self, message: impl std::fmt::Display) -> Error {
        Error::internal(format!(
            "the provider of {}: {message}",
            info::<P>().group_resource()
        ))
    }
}

/// When the latest completed list syncs began: of everything, and of single namespaces.
#[derive(Debug, Default)]
struct Synced {
    all: Option<Instant>,
    namespaces: HashMap<String, Instant>,
}

impl Synced {
    /// Whether a completed sync of `namespace` (or of everything) began at or after `arrived`:
    /// its answer is as fresh as one asked for now.
    fn covers(&self, namespace: Option<&str>, arrived: Instant) -> bool {
        let fresh = |began: Option<&Instant>| began.is_some_and(|began| *began >= arrived);
        fresh(self.all.as_ref()) || fresh(namespace.and_then(|ns| self.namespaces.get(ns)))
    }

    fn record(&mut self, namespace: Option<&str>, began: Instant) {
        match namespace {
            Some(ns) => {
                self.namespaces.insert(ns.to_string(), began);
            }
            None => {
                // A sync of everything covers every namespace: the map never outgrows them.
                self.all = Some(began);
                self.namespaces.clear();
            }
        }
    }
}

fn info<P: Provider>() -> crate::runtime::ResourceInfo {
    <P::Object as Resource>::INFO
}

fn mirrored(kv: &crate::storage::KeyValue) -> Result<Mirrored> {
    let value = serde_json::from_slice(&kv.value).map_err(Error::internal)?;
    Ok(Mirrored {
        value,
        revision: kv.mod_revision,
    })
}

/// Only this module writes the mirror, one sync at a time: any storage error is a bug.
fn internal(e: StorageError) -> Error {
    Error::internal(format!("computed resource mirror: {e}"))
}
