//! What the storage of a server shares ([`StorageConfig`]), and the backend the options
//! name ([`open_backend`]).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::error::ServerError;
use crate::lifecycle::ShutdownSignal;
use crate::registry::rest::RestStorage;
use crate::registry::store::{Reader, StorageMigrator, Store, StoreSet};
use crate::runtime::{Convertible, Resource};
use crate::server::options::{ServerOptions, StorageBackendKind};
use crate::storage::{Backend, CacherOptions, MemoryBackend, SqliteBackend};

pub(super) type StorageFactory =
    Box<dyn Fn(&StorageConfig) -> Vec<(String, RestStorage)> + Send + Sync>;

/// Tells the [`StorageConfig`] which versions a store may find in its keys, before any store
/// is made (so that its watch cache reads them from the start).
pub(super) type Declaration = Box<dyn Fn(&StorageConfig) + Send + Sync>;

/// What a store of `T` must know when it is made: a `fn(&Store<T>)`, as `Any`.
pub(super) type PendingSetup = Box<dyn Any + Send + Sync>;

/// A computed kind's reader, and its `get`, `list` and `watch` (of its mirror).
pub(super) type Computed<T> = (Reader<T>, RestStorage);

/// Makes the reader of a served kind for admission (see `own_objects`).
pub(super) type MakeObjectReader =
    Arc<dyn Fn(&StorageConfig) -> Arc<dyn crate::admission::ObjectReader> + Send + Sync>;

/// Makes a computed kind's storage on a server's [`StorageConfig`].
pub(super) type MakeComputed<T> = Arc<dyn Fn(&StorageConfig) -> Computed<T> + Send + Sync>;

/// A computed kind of one server, made the first time anything asks for it (the factory of
/// its version, of a version served converted from it, a reader elsewhere), so that one
/// mirror serves every version and every reader.
pub(super) struct ComputedKind<T: Resource> {
    pub(super) make: MakeComputed<T>,
    pub(super) made: OnceLock<Computed<T>>,
}

/// What the storage of a server shares: the backend the options opened, the key prefix, the
/// watch cache setting, and the stores made so far. Storage of your own gets it through
/// [`VersionBuilder::storage_with`](crate::server::VersionBuilder::storage_with) and [`VersionBuilder::computed_with`](crate::server::VersionBuilder::computed_with), to read stored
/// resources of the same server ([`reader`](Self::reader)) without copying how the server
/// opens its backend.
pub struct StorageConfig {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) prefix: String,
    pub(super) watch_cache: bool,
    /// The sizes of each store's watch cache.
    pub(super) cacher_options: CacherOptions,
    pub(super) shutdown: ShutdownSignal,
    /// One store per type, so that everything reading `T` shares its watch cache.
    pub(super) stores: StoreSet,
    /// `{plural}.{group}` → the version of the type whose store owns its keys, so that a
    /// second type over the same keys (two storage versions) is found.
    pub(super) owners: Mutex<HashMap<String, (TypeId, &'static str)>>,
    /// What [`store`](Self::store) found wrong, reported by the group's build.
    pub(super) conflicts: Mutex<Vec<String>>,
    /// Versions a store not made yet may find in its keys ([`decodes`](Self::decodes)).
    pub(super) pending: Mutex<HashMap<TypeId, Vec<PendingSetup>>>,
    /// One per store made, in the order they were made: what `migrate-storage` runs.
    pub(super) migrators: Mutex<Vec<StorageMigrator>>,
    /// An `Arc<ComputedKind<T>>` per computed kind `T`.
    pub(super) computed: Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>,
    /// The kinds the groups serve, by `(apiVersion, kind)`, for admission.
    pub(super) kinds: Mutex<HashMap<(String, String), MakeObjectReader>>,
}

impl std::fmt::Debug for StorageConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageConfig")
            .field("prefix", &self.prefix)
            .field("watch_cache", &self.watch_cache)
            .finish_non_exhaustive()
    }
}

impl StorageConfig {
    /// The configuration of `backend`, keys under `prefix` (`--etcd-prefix`), with or
    /// without watch caches (`--watch-cache`), background work ending with `shutdown`.
    pub fn new(
        backend: Arc<dyn Backend>,
        prefix: &str,
        watch_cache: bool,
        shutdown: ShutdownSignal,
    ) -> Self {
        Self {
            backend,
            prefix: prefix.to_string(),
            watch_cache,
            cacher_options: CacherOptions::default(),
            shutdown,
            stores: StoreSet::default(),
            owners: Mutex::default(),
            conflicts: Mutex::default(),
            pending: Mutex::default(),
            migrators: Mutex::default(),
            computed: Mutex::default(),
            kinds: Mutex::default(),
        }
    }

    /// The storage backend (`--storage-backend`, or the one given to [`APIServer::backend`](crate::server::APIServer::backend)).
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The key prefix (`--etcd-prefix`, default `/registry`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether stores have a watch cache (`--watch-cache`).
    pub fn watch_cache(&self) -> bool {
        self.watch_cache
    }

    /// Gives the stores' watch caches these sizes (`--watch-cache-window-bytes`) instead of
    /// the defaults.
    pub fn with_watch_cache_options(mut self, options: CacherOptions) -> Self {
        self.cacher_options = options;
        self
    }

    /// The stores made so far, by type.
    pub fn stores(&self) -> StoreSet {
        self.stores.clone()
    }

    /// Fires when the server shuts down: background work of your storage stops on it.
    pub fn shutdown(&self) -> &ShutdownSignal {
        &self.shutdown
    }

    /// The generic store of `T` on the server's backend: the one that serves `T` when `T` is
    /// served with [`VersionBuilder::resource`](crate::server::VersionBuilder::resource) (one per type, its watch cache shared).
    ///
    /// # Panics
    ///
    /// When `T` is served with [`VersionBuilder::computed`](crate::server::VersionBuilder::computed): it has no store, and one on the
    /// server's backend would be empty; [`reader`](Self::reader) reads it.
    pub fn store<T: Resource>(&self) -> Store<T> {
        if self.is_computed::<T>() {
            panic!(
                "StorageConfig::store::<{kind}>(): {resource} is computed (served with \
                 `computed`), it has no store; read it with `reader::<{kind}>()`",
                kind = T::INFO.kind,
                resource = T::INFO.group_resource()
            );
        }
        self.claim_keys::<T>();
        self.stores.get_or_make(|link| {
            let mut store = Store::<T>::new(self.backend.clone(), &self.prefix).in_set(link);
            if let Some(e) = store.schema_error() {
                // A rule that does not compile: the server does not start with it.
                self.conflicts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(e.to_string());
            }
            // Before the watch cache loads, so it reads objects of older versions too.
            self.apply_pending(&store);
            if self.watch_cache {
                store = store.with_watch_cache_options(self.cacher_options);
            }
            self.migrators
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(store.migrator());
            store
        })
    }

    /// Objects stored as `Old` in the keys of `H`'s store are read converted to `H`
    /// ([`Store::decodes`]); the store need not exist yet. [`VersionBuilder::converted`](crate::server::VersionBuilder::converted) and
    /// [`APIGroup::formerly_stored`](crate::server::APIGroup::formerly_stored) declare theirs through it.
    pub fn decodes<Old: Convertible<H>, H: Resource>(&self) {
        if self.stores.contains::<H>() {
            self.store::<H>().decodes::<Old>();
            return;
        }
        let setup: fn(&Store<H>) = |store| {
            store.decodes::<Old>();
        };
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending
            .entry(TypeId::of::<H>())
            .or_default()
            .push(Box::new(setup));
    }

    /// What was declared for `T`'s store before it was made.
    pub(super) fn apply_pending<T: Resource>(&self, store: &Store<T>) {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&TypeId::of::<T>())
            .unwrap_or_default();
        for setup in pending {
            if let Some(setup) = setup.downcast_ref::<fn(&Store<T>)>() {
                setup(store);
            }
        }
    }

    /// A [`StorageMigrator`] of every store made so far (every stored resource once the
    /// groups are built), in the order they were made.
    pub fn migrators(&self) -> Vec<StorageMigrator> {
        self.migrators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records that `T`'s store owns the keys of its resource; a second type over the same
    /// keys would read and write the same objects without converting them (two storage
    /// versions of one resource), which the group's build refuses.
    pub(super) fn claim_keys<T: Resource>(&self) {
        let resource = format!("{}.{}", T::INFO.plural, T::INFO.group);
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        let (owner, version) = *owners
            .entry(resource.clone())
            .or_insert((TypeId::of::<T>(), T::INFO.version));
        if owner != TypeId::of::<T>() {
            let conflict = format!(
                "{resource} would have two storage versions: {version} and {}; serve one \
                 version with `resource` and the others with `converted`, which convert to \
                 and from it",
                T::INFO.version
            );
            self.conflicts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conflict);
        }
    }

    /// The first conflict [`store`](Self::store) found, if any.
    pub(super) fn conflict(&self) -> Option<String> {
        let conflicts = self
            .conflicts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        conflicts.first().cloned()
    }

    /// Reads the objects of `T` (typed, without HTTP): for a computed resource made from
    /// another resource, an admission plugin, or admission-like checks in storage of your own.
    /// For a kind served with [`VersionBuilder::computed`](crate::server::VersionBuilder::computed), the provider's objects (see
    /// [`ComputedStorage::reader`](crate::registry::computed::ComputedStorage::reader)); for any other, its [`store`](Self::store)'s.
    pub fn reader<T: Resource>(&self) -> Reader<T> {
        match self.computed::<T>() {
            Some((reader, _)) => reader,
            None => self.store::<T>().reader(),
        }
    }

    /// Declares `T` computed, made by `make` when first asked for. Declared again by each
    /// build of its group; by another `computed` call, it would be served by two providers.
    pub(super) fn declare_computed<T: Resource>(&self, make: &MakeComputed<T>) {
        let mut computed = self.computed.lock().unwrap_or_else(PoisonError::into_inner);
        let kind = computed.entry(TypeId::of::<T>()).or_insert_with(|| {
            Box::new(Arc::new(ComputedKind {
                make: make.clone(),
                made: OnceLock::new(),
            }))
        });
        let declared = kind.downcast_ref::<Arc<ComputedKind<T>>>();
        let again = declared.is_some_and(|kind| Arc::ptr_eq(&kind.make, make));
        if !again || self.stores.contains::<T>() {
            let conflict = format!(
                "{} is served by two sources (two `computed`, or a store too); serve one \
                 version with `computed` and the others with `converted`",
                T::INFO.group_resource()
            );
            let conflicts = self.conflicts.lock();
            conflicts
                .unwrap_or_else(PoisonError::into_inner)
                .push(conflict);
        }
    }

    pub(super) fn is_computed<T: Resource>(&self) -> bool {
        let computed = self.computed.lock().unwrap_or_else(PoisonError::into_inner);
        computed.contains_key(&TypeId::of::<T>())
    }

    /// The computed kind `T`, made the first time; `None` when `T` is not computed.
    pub(super) fn computed<T: Resource>(&self) -> Option<Computed<T>> {
        let kind = {
            let computed = self.computed.lock().unwrap_or_else(PoisonError::into_inner);
            let kind = computed.get(&TypeId::of::<T>())?;
            kind.downcast_ref::<Arc<ComputedKind<T>>>()?.clone()
        };
        let made = kind.made.get_or_init(|| {
            let made = (kind.make)(self);
            self.stores.add_computed(made.0.clone());
            made
        });
        Some(made.clone())
    }
}

/// The backend `options` name (`--storage-backend`, `--etcd-servers`, `--sqlite-path`), opened:
/// what a server stores in unless [`APIServer::backend`](crate::server::APIServer::backend) gave it another.
pub async fn open_backend(options: &ServerOptions) -> Result<Arc<dyn Backend>, ServerError> {
    Ok(match options.storage_backend {
        StorageBackendKind::Memory => Arc::new(MemoryBackend::new()),
        StorageBackendKind::Sqlite => {
            if let Some(dir) = options
                .sqlite_path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
            {
                std::fs::create_dir_all(dir)?;
            }
            Arc::new(SqliteBackend::open(&options.sqlite_path)?)
        }
        StorageBackendKind::Etcd3 => open_etcd3(options).await?,
        StorageBackendKind::Postgres => open_postgres(options).await?,
    })
}

/// Connects to `--postgres-url` (or the PG* environment) and creates or migrates the tables
/// in `--postgres-schema`. Keys are not prefixed here: the stores already put `--etcd-prefix`
/// in front of theirs.
///
/// A database that does not answer yet is waited for: `/readyz` fails and requests get 503
/// until it does. Unreadable `--postgres-cafile`/`--postgres-certfile`/`--postgres-keyfile` are an error
/// here, at start.
#[cfg(feature = "postgres")]
async fn open_postgres(options: &ServerOptions) -> Result<Arc<dyn Backend>, ServerError> {
    use crate::storage::{PostgresBackend, PostgresOptions, PostgresTls};
    use std::time::Duration;
    let tls = match &options.postgres_cafile {
        Some(ca) => Some(
            PostgresTls::from_files(
                ca,
                options.postgres_certfile.as_deref(),
                options.postgres_keyfile.as_deref(),
            )
            .map_err(ServerError::PostgresTls)?,
        ),
        None => None,
    };
    // A storage call cannot usefully outlive the request that made it (kube-apiserver's
    // etcd calls run under the request's deadline); nor may its statement, unless told.
    let defaults = PostgresOptions::default();
    let request_timeout = defaults
        .request_timeout
        .min(Duration::from_secs(options.request_timeout_seconds.max(1)));
    let statement_timeout = options
        .postgres_statement_timeout_seconds
        .map_or(request_timeout, Duration::from_secs);
    let postgres_options = PostgresOptions {
        url: options.postgres_url.clone(),
        schema: options.postgres_schema.clone(),
        pool_size: options.postgres_pool_size,
        tls,
        request_timeout,
        statement_timeout,
        // A list reads under the request's deadline, as kube-apiserver's do, unless the
        // operator limited every statement.
        list_timeout: match options.postgres_statement_timeout_seconds {
            Some(_) => None,
            None => Some(Duration::from_secs(options.request_timeout_seconds.max(1))),
        },
        ..defaults
    };
    Ok(Arc::new(PostgresBackend::connect(postgres_options).await?))
}

/// Without the feature there is no PostgreSQL driver, so say so instead of panicking.
#[cfg(not(feature = "postgres"))]
async fn open_postgres(_options: &ServerOptions) -> Result<Arc<dyn Backend>, ServerError> {
    let message = "--storage-backend=postgres: apiserver was built without the postgres feature";
    Err(crate::storage::StorageError::Unavailable(message.into()).into())
}

/// Connects to `--etcd-servers`. Keys are not prefixed here: the stores already put
/// `--etcd-prefix` in front of theirs.
///
/// etcd need not answer yet: the client connects in the background, `/readyz` fails and
/// requests get 503 until it does. Unreadable `--etcd-cafile`/`--etcd-certfile`/
/// `--etcd-keyfile` are an error here, at start.
#[cfg(feature = "etcd")]
async fn open_etcd3(options: &ServerOptions) -> Result<Arc<dyn Backend>, ServerError> {
    use crate::storage::{Etcd3Backend, Etcd3Options, Etcd3Tls};
    let files = [
        &options.etcd_cafile,
        &options.etcd_certfile,
        &options.etcd_keyfile,
    ];
    let tls = if files.iter().any(|f| f.is_some()) {
        let tls = Etcd3Tls::from_files(
            options.etcd_cafile.as_deref(),
            options.etcd_certfile.as_deref(),
            options.etcd_keyfile.as_deref(),
        );
        Some(tls.map_err(ServerError::EtcdTls)?)
    } else {
        None
    };
    let etcd_options = Etcd3Options {
        tls,
        // A list reads under the request's deadline, as kube-apiserver's do.
        list_timeout: std::time::Duration::from_secs(options.request_timeout_seconds.max(1)),
        ..Etcd3Options::default()
    };
    let backend = Etcd3Backend::connect(&options.etcd_servers, etcd_options).await?;
    Ok(Arc::new(backend))
}

/// Without the feature there is no etcd client to open, so say so instead of panicking.
#[cfg(not(feature = "etcd"))]
async fn open_etcd3(_options: &ServerOptions) -> Result<Arc<dyn Backend>, ServerError> {
    let message = "--storage-backend=etcd3: apiserver was built without the etcd feature";
    Err(crate::storage::StorageError::Unavailable(message.into()).into())
}
