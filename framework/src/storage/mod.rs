//! Storage: keys, bytes, revisions and watches. Nothing here knows HTTP or API semantics.

mod arena;
pub mod backend;
pub(crate) mod cacher;
pub(crate) mod compactor;
#[cfg(any(test, doc, feature = "testing"))]
pub mod conformance;
#[cfg(feature = "etcd")]
pub mod etcd3;
pub mod instrumented;
pub mod memory;
mod mvcc;
mod notify;
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
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
pub use size_limit::{SizeLimited, DEFAULT_MAX_OBJECT_BYTES};
pub use sqlite::SqliteBackend;
