//! Storage version migration: every object of a store that is not in its storage version is
//! rewritten in it, as kube-storage-version-migrator does with a no-op update of each object
//! (which kube-apiserver writes only when the stored bytes change). Safe beside running
//! servers: each rewrite is a compare-and-swap on the object's revision, so a concurrent
//! write wins and the object is read again; they see a MODIFIED event with a new
//! resourceVersion, as after the migrator's update.

use std::sync::Arc;

use super::{Inner, MAX_ATTEMPTS};
use crate::error::{Error, Result};
use crate::storage::{KeyValue, ListRequest, StorageError};

/// How many keys one read of a migration fetches.
const PAGE: usize = 500;

/// Rewrites the objects of one store that are not in its storage version: from
/// [`Store::migrator`](super::Store::migrator), or for every stored resource of a server,
/// its `migrate-storage` subcommand
/// ([`APIServer::migrate_storage`](crate::APIServer::migrate_storage)).
///
/// Resumable: objects already in the storage version are left as they are, so a migration
/// that stopped half way is finished by running it again.
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
/// let books = Store::<Book>::new(Arc::new(MemoryBackend::new()), "/registry");
/// let report = books.migrator().migrate().await?;
/// assert_eq!(report.to_string(), "books.example.com: 0 objects, 0 rewritten");
/// # Ok::<(), extension_apiserver::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct StorageMigrator {
    inner: Arc<Inner>,
}

/// What a migration of one resource did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationReport {
    /// `{plural}.{group}`, e.g. `flunders.wardle.example.com`.
    pub resource: String,
    /// The objects read.
    pub objects: usize,
    /// The objects rewritten in the storage version.
    pub rewritten: usize,
}

impl std::fmt::Display for MigrationReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} objects, {} rewritten",
            self.resource, self.objects, self.rewritten
        )
    }
}

impl StorageMigrator {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    /// `{plural}.{group}` of the store's resource.
    pub fn resource(&self) -> String {
        format!("{}.{}", self.inner.info.plural, self.inner.info.group)
    }

    /// The storage version, e.g. `wardle.example.com/v1beta1`.
    pub fn storage_version(&self) -> String {
        self.inner.info.api_version()
    }

    /// The resource as stored: its storage version's group, version, kind, plural, scope.
    pub fn info(&self) -> &crate::runtime::ResourceInfo {
        &self.inner.info
    }

    /// Reads every key of the store, a page at a time at the latest revision, and rewrites
    /// each object not in the storage version. Fails on the first object that cannot be
    /// read in the storage version (a version the store does not know, a failed
    /// conversion) or written; what was rewritten before stays rewritten.
    pub async fn migrate(&self) -> Result<MigrationReport> {
        let mut report = MigrationReport {
            resource: self.resource(),
            objects: 0,
            rewritten: 0,
        };
        let mut request = ListRequest {
            prefix: self.inner.key_root.clone(),
            limit: PAGE,
            skip_count: true,
            ..ListRequest::default()
        };
        loop {
            let page = self.inner.backend.list(&request).await;
            let page = page.map_err(|e| self.inner.storage_error("", e))?;
            for kv in &page.items {
                report.objects += 1;
                if self.rewrite(kv.clone()).await? {
                    report.rewritten += 1;
                }
            }
            request.start_after = page.items.last().map(|kv| kv.key.clone());
            if !page.more || request.start_after.is_none() {
                return Ok(report);
            }
        }
    }

    /// Rewrites `kv` in the storage version unless it is in it; on a lost compare-and-swap,
    /// the object as it is now. `false` when nothing was written (already in the storage
    /// version, or deleted meanwhile).
    async fn rewrite(&self, mut kv: KeyValue) -> Result<bool> {
        let versions = &self.inner.versions;
        for _ in 0..MAX_ATTEMPTS {
            if versions.is_current(&kv) {
                return Ok(false);
            }
            let converted = versions.in_storage_version(&kv)?.into_owned();
            let written = self
                .inner
                .backend
                .update(&kv.key, converted.value, kv.mod_revision)
                .await;
            match written {
                Ok(_) => return Ok(true),
                Err(StorageError::NotFound(_)) => return Ok(false),
                Err(StorageError::Conflict { .. }) => {}
                Err(e) => return Err(self.inner.storage_error(&kv.key, e)),
            }
            match self.inner.backend.get(&kv.key).await {
                Ok(Some(now)) => kv = now,
                Ok(None) => return Ok(false),
                Err(e) => return Err(self.inner.storage_error(&kv.key, e)),
            }
        }
        Err(Error::internal(format!(
            "{}: the object kept changing while it was migrated",
            kv.key
        )))
    }
}
