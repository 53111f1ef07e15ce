//! # extension-apiserver-storage
//!
//! Storage of [extension-apiserver](https://docs.rs/extension-apiserver): keys, bytes,
//! revisions and watches, as `k8s.io/apiserver/pkg/storage` keeps them. Nothing here knows HTTP
//! or API semantics.
//!
//! - [`Backend`]: the trait a store implements (get, list, create, update, delete, watch,
//!   compaction), with [`MemoryBackend`], [`SqliteBackend`], (feature `etcd`) the etcd3
//!   backend and (feature `postgres`) the PostgreSQL backend;
//! - [`Cacher`]: the watch cache in front of a backend;
//! - [`conformance`]: the suite every backend passes; a new backend is a crate of its own
//!   beside this one that runs [`backend_conformance_tests!`] in its tests.

mod arena;
pub mod backend;
pub mod cacher;
pub mod compactor;
pub mod conformance;
#[cfg(feature = "etcd")]
pub mod etcd3;
pub mod instrumented;
mod keyset;
pub mod memory;
mod mvcc;
mod notify;
#[cfg(feature = "postgres")]
pub mod postgres;
mod repeated;
#[cfg_attr(not(any(feature = "etcd", feature = "postgres")), allow(dead_code))]
mod shared_read;
pub mod size_limit;
pub mod sqlite;

pub use backend::{
    Backend, Event, EventStream, EventType, KeyValue, ListRequest, ListResult, ProgressStream,
    Revision, StorageError, WatchItem,
};
pub use cacher::{Cacher, CacherOptions};
#[cfg(feature = "etcd")]
pub use etcd3::{Etcd3Backend, Etcd3Options, Etcd3Tls};
pub use memory::MemoryBackend;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresBackend, PostgresOptions, PostgresTls};
pub use size_limit::{DEFAULT_MAX_OBJECT_BYTES, SizeLimited};
pub use sqlite::SqliteBackend;

// The machinery's modules this crate stands on, under the names the code uses.
#[cfg(any(feature = "etcd", feature = "postgres"))]
use extension_apiserver_machinery::tls;
use extension_apiserver_machinery::{lifecycle, metrics, spans};
