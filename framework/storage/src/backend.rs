//! The storage backend trait: a versioned key-value store.
//!
//! Everything above this trait speaks in objects; everything below it speaks in keys, bytes and
//! revisions. The model is etcd's: one global revision that grows by one with every write, each
//! key remembering the revision that created it and the one that last modified it.

use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

/// A revision of the whole store. The first write is revision 1; 0 means "none" / "latest".
pub type Revision = i64;

/// One key at one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The full key, e.g. `/registry/wardle.example.com/flunders/default/my-flunder`.
    pub key: String,
    /// The stored bytes (JSON for every backend of this crate).
    pub value: Bytes,
    /// The revision of the write that created the key.
    pub create_revision: Revision,
    /// The revision of the last write to the key; this is the object's `resourceVersion`.
    pub mod_revision: Revision,
}

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// The key was created or its value replaced.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change, as seen by a watcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Put or delete.
    pub event_type: EventType,
    /// For a put, the new key-value. For a delete, the last value the key had, with
    /// `mod_revision` set to the revision of the delete.
    pub kv: KeyValue,
    /// The value before this change (absent for a create).
    pub prev_kv: Option<KeyValue>,
}

impl Event {
    /// The revision of the write that made this event.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// A page of a range read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListResult {
    /// The keys in ascending key order.
    pub items: Vec<KeyValue>,
    /// The revision the read was served at.
    pub revision: Revision,
    /// Whether more keys follow the last one returned (only with a limit).
    pub more: bool,
    /// How many keys of the range remain after this page, when the backend knows (and was
    /// asked: see [`ListRequest::skip_count`]).
    pub remaining: Option<i64>,
}

/// A range read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListRequest {
    /// Every key that starts with this prefix. Callers end it with `/`.
    pub prefix: String,
    /// Start strictly after this key (for pagination). `None`: from the start of the prefix.
    pub start_after: Option<String>,
    /// Read at this revision; 0 means the latest.
    pub revision: Revision,
    /// At most this many keys; 0 means no limit.
    pub limit: usize,
    /// Only whether keys follow the page matters, not how many: the backend may answer
    /// `remaining: None` rather than count the rest of the range, which costs a scan of it on
    /// SQL and in memory. Set by readers that walk a range page by page (the watch cache's
    /// fill, a list whose selectors drop what they read); a page of a list answers
    /// `remainingItemCount` with the count.
    pub skip_count: bool,
}

/// A stream of events from a watch, in revision order.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Event, StorageError>> + Send>>;

/// One item of a watch that reports progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchItem {
    /// A change under the watched prefix.
    Event(Event),
    /// Every change under the prefix up to this revision has been delivered: the watcher is
    /// current at this revision even if nothing under its prefix changed (etcd's progress
    /// notification). Never smaller than an earlier item's revision.
    Progress(Revision),
}

/// A stream of events and progress reports, in revision order.
pub type ProgressStream = Pin<Box<dyn Stream<Item = Result<WatchItem, StorageError>> + Send>>;

/// What can go wrong in storage. The registry layer turns these into API errors.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageError {
    /// Create of a key that exists.
    #[error("key exists: {0}")]
    KeyExists(String),
    /// Read, update or delete of a key that does not exist.
    #[error("key not found: {0}")]
    NotFound(String),
    /// A compare-and-swap saw another revision than expected.
    #[error("conflict on {key}: expected revision {expected}, found {actual}")]
    Conflict {
        /// The key.
        key: String,
        /// The revision the caller expected.
        expected: Revision,
        /// The revision the key has.
        actual: Revision,
    },
    /// The revision asked for has been compacted away (→ HTTP 410 Expired).
    #[error("required revision {requested} has been compacted (oldest available {compacted})")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The oldest revision still available.
        compacted: Revision,
    },
    /// The revision asked for is in the future.
    #[error("revision {requested} is newer than the current revision {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },
    /// A value over the backend's size limit: etcd's `--max-request-bytes`, or
    /// [`SizeLimited`](crate::SizeLimited)'s. Nothing was written.
    #[error("request is too large: {size} bytes for {key}, the limit is {limit}")]
    TooLarge {
        /// The key written.
        key: String,
        /// The bytes of the value (0 when the backend does not say).
        size: usize,
        /// The limit (0 when the backend does not say).
        limit: usize,
    },
    /// The backend answered that the operation took too long and stopped it (PostgreSQL's
    /// `statement_timeout`; kube-apiserver's storage `ErrCodeTimeout`) (→ HTTP 504 `Timeout`).
    /// Nothing was written.
    #[error("storage timeout: {0}")]
    Timeout(String),
    /// The backend could not be reached or failed (→ HTTP 503/500).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// Anything else inside the backend.
    #[error("storage error: {0}")]
    Internal(String),
}

/// A versioned key-value store with a global revision, compare-and-swap writes, range reads at
/// a revision and watches from a revision.
///
/// Implementations: [`memory`](crate::memory), [`sqlite`](crate::sqlite),
/// `etcd3` with the `etcd` cargo feature and `postgres` with the `postgres` one.
/// Every implementation must pass [`conformance`](crate::conformance).
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Reads one key at the latest revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError>;

    /// Reads keys under a prefix, in key order, at one revision.
    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError>;

    /// Creates a key that must not exist. Returns the new key-value.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StorageError>;

    /// Replaces the value of a key whose `mod_revision` must equal `expected`.
    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError>;

    /// Deletes a key; when `expected` is given its `mod_revision` must equal it. Returns the
    /// deleted value, with `mod_revision` set to the revision of the delete.
    async fn delete(&self, key: &str, expected: Option<Revision>)
    -> Result<KeyValue, StorageError>;

    /// Streams every change under `prefix` made after revision `after` (exclusive), in
    /// revision order, forever. `after` older than the compacted revision yields
    /// [`StorageError::Compacted`] (at once, or as the stream's first item).
    async fn watch(&self, prefix: &str, after: Revision) -> Result<EventStream, StorageError> {
        use futures::StreamExt;
        let items = self.watch_with_progress(prefix, after).await?;
        Ok(Box::pin(items.filter_map(|item| async move {
            match item {
                Ok(WatchItem::Event(event)) => Some(Ok(event)),
                Ok(WatchItem::Progress(_)) => None,
                Err(error) => Some(Err(error)),
            }
        })))
    }

    /// As [`watch`](Backend::watch), with [`WatchItem::Progress`] reports between the events:
    /// what lets a watch cache know it has caught up with the store's current revision when
    /// the latest writes were to other prefixes. A backend reports progress on its own or
    /// when [`request_progress`](Backend::request_progress) asks; one that never does is
    /// correct, only slower to serve consistent reads from a cache.
    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
    ) -> Result<ProgressStream, StorageError>;

    /// Asks every open [`watch_with_progress`](Backend::watch_with_progress) stream to report
    /// its progress soon (etcd's `WatchProgressRequest`). Backends that report progress on
    /// their own need not do anything.
    async fn request_progress(&self) {}

    /// The revision of the latest write (0 for an empty store).
    async fn current_revision(&self) -> Result<Revision, StorageError>;

    /// The revision of the latest write when the backend knows it without I/O (an embedded
    /// store that sees every write); `None` when it takes a request (etcd). A consistent read
    /// may then be served by the watch cache for the price of this call.
    fn local_revision(&self) -> Option<Revision> {
        None
    }

    /// Forgets history before `revision`: reads and watches from older revisions fail with
    /// [`StorageError::Compacted`] afterwards. Current values are kept.
    async fn compact(&self, revision: Revision) -> Result<(), StorageError>;

    /// Whether the backend can serve requests (for `/readyz`).
    async fn ready(&self) -> Result<(), StorageError> {
        self.current_revision().await.map(|_| ())
    }
}
