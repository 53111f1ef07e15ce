//! The in-memory backend: for tests and demos, gone when the process ends.
//!
//! It keeps every key's versions (for reads at old revisions) and a log of events (for
//! watches) until compaction, behind one mutex that no caller holds across an await.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;

use super::backend::{
    Backend, Event, EventType, KeyValue, ListRequest, ListResult, ProgressStream, Revision,
    StorageError,
};
use super::mvcc::{self, Write};
use super::notify::{EventBatch, EventSource, Notifier, SCAN_WINDOW};

/// A [`Backend`] that keeps everything in memory.
///
/// ```
/// use extension_apiserver_storage::{Backend, MemoryBackend};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = MemoryBackend::new();
/// let kv = store.create("/a/x", "1".into()).await.unwrap();
/// assert_eq!(kv.mod_revision, 1);
/// # });
/// ```
#[derive(Debug)]
pub struct MemoryBackend {
    store: Arc<Store>,
    notifier: Notifier,
}

impl MemoryBackend {
    /// An empty store at revision 0.
    pub fn new() -> Self {
        Self {
            store: Arc::new(Store::default()),
            notifier: Notifier::new(0),
        }
    }

    /// An empty store at `revision`: its first write is `revision + 1`, and reads and watches
    /// at older revisions get [`StorageError::Compacted`], as if their history had been
    /// compacted away. For a store that replaces an earlier one of the same keys (rebuilt
    /// when the process restarts, say): starting above every revision the earlier one gave
    /// out, a client resuming from one of those is told to start over instead of missing
    /// the changes a reused revision would hide.
    pub fn starting_at(revision: Revision) -> Self {
        let state = State {
            revision,
            compacted: revision,
            ..State::default()
        };
        Self {
            store: Arc::new(Store(Mutex::new(state))),
            notifier: Notifier::new(revision),
        }
    }

    fn write(&self, key: &str, write: Write) -> Result<KeyValue, StorageError> {
        let mut state = self.store.lock();
        let revision = state.revision + 1;
        let event = write.apply(key, state.latest(key).cloned(), revision)?;
        let kv = event.kv.clone();
        state.record(event);
        // Published under the lock: a watcher woken by it must find the event in the log.
        self.notifier.publish(revision);
        Ok(kv)
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        Ok(self.store.lock().latest(key).cloned())
    }

    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        self.store.lock().list(request)
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StorageError> {
        self.write(key, Write::Create(value))
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        self.write(key, Write::Update(value, expected))
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<KeyValue, StorageError> {
        self.write(key, Write::Delete(expected))
    }

    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
    ) -> Result<ProgressStream, StorageError> {
        self.notifier.watch(self.store.clone(), prefix, after).await
    }

    async fn current_revision(&self) -> Result<Revision, StorageError> {
        Ok(self.store.lock().revision)
    }

    fn local_revision(&self) -> Option<Revision> {
        Some(self.store.lock().revision)
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        self.store.lock().compact(revision)
    }
}

/// The state behind the lock; shared with watchers as their [`EventSource`].
#[derive(Debug, Default)]
struct Store(Mutex<State>);

impl Store {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path leaves the state half-changed on panic, so a poisoned lock is usable.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl EventSource for Store {
    fn events_after(
        self: Arc<Self>,
        prefix: String,
        after: Revision,
        limit: usize,
    ) -> BoxFuture<'static, Result<EventBatch, StorageError>> {
        let batch = self.lock().events_after(&prefix, after, limit);
        Box::pin(std::future::ready(batch))
    }
}

/// One value of a key from `revision` on; `None` when the write was a delete.
#[derive(Debug)]
struct Version {
    revision: Revision,
    kv: Option<KeyValue>,
}

#[derive(Debug, Default)]
struct State {
    revision: Revision,
    compacted: Revision,
    /// Every key's versions, oldest first, back to the newest one before `compacted`.
    keys: BTreeMap<String, Vec<Version>>,
    /// One event per revision, without gaps, from `compacted` (or 1) to `revision`.
    log: VecDeque<Event>,
}

impl State {
    fn latest(&self, key: &str) -> Option<&KeyValue> {
        self.keys.get(key)?.last()?.kv.as_ref()
    }

    fn record(&mut self, event: Event) {
        let revision = event.revision();
        let kv = (event.event_type == EventType::Put).then(|| event.kv.clone());
        let versions = self.keys.entry(event.kv.key.clone()).or_default();
        versions.push(Version { revision, kv });
        self.log.push_back(event);
        self.revision = revision;
    }

    fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        let revision = mvcc::read_revision(request.revision, self.revision, self.compacted)?;
        let prefix = request.prefix.as_str();
        let start = match request.start_after.as_deref() {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let mut visible = self
            .keys
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .filter_map(|(_, versions)| value_at(versions, revision));
        let limit = if request.limit == 0 {
            usize::MAX
        } else {
            request.limit
        };
        let items: Vec<KeyValue> = visible.by_ref().take(limit).cloned().collect();
        if request.skip_count {
            return Ok(ListResult {
                items,
                revision,
                more: visible.next().is_some(),
                remaining: None,
            });
        }
        let remaining = visible.count();
        Ok(ListResult {
            items,
            revision,
            more: remaining > 0,
            remaining: Some(remaining as i64),
        })
    }

    fn events_after(
        &self,
        prefix: &str,
        after: Revision,
        limit: usize,
    ) -> Result<EventBatch, StorageError> {
        mvcc::check_watch_start(after, self.compacted)?;
        let first = self.log.front().map_or(self.revision + 1, Event::revision);
        let skip = usize::try_from(after + 1 - first).unwrap_or(0);
        let window_end = self.revision.min(after.saturating_add(SCAN_WINDOW));
        let mut batch = EventBatch {
            events: Vec::new(),
            scanned_to: window_end.max(after),
        };
        for event in self.log.iter().skip(skip) {
            if event.revision() > window_end {
                break;
            }
            if event.kv.key.starts_with(prefix) {
                batch.events.push(event.clone());
                if batch.events.len() == limit {
                    batch.scanned_to = event.revision();
                    break;
                }
            }
        }
        Ok(batch)
    }

    fn compact(&mut self, revision: Revision) -> Result<(), StorageError> {
        if !mvcc::compaction_needed(revision, self.revision, self.compacted)? {
            return Ok(());
        }
        while self.log.front().is_some_and(|e| e.revision() < revision) {
            self.log.pop_front();
        }
        self.keys
            .retain(|_, versions| compact_versions(versions, revision));
        self.compacted = revision;
        Ok(())
    }
}

/// The key's value at `revision`, if it existed then.
fn value_at(versions: &[Version], revision: Revision) -> Option<&KeyValue> {
    let newer = versions.partition_point(|v| v.revision <= revision);
    versions[..newer].last()?.kv.as_ref()
}

/// Drops the versions no read at or after `revision` can see; false when none is left.
fn compact_versions(versions: &mut Vec<Version>, revision: Revision) -> bool {
    let visible_at = versions.partition_point(|v| v.revision <= revision);
    versions.drain(..visible_at.saturating_sub(1));
    if versions
        .first()
        .is_some_and(|v| v.kv.is_none() && v.revision <= revision)
    {
        versions.remove(0);
    }
    !versions.is_empty()
}

#[cfg(test)]
mod tests {
    use super::MemoryBackend;
    use crate::notify::tests;

    #[tokio::test]
    async fn lagging_watcher_is_compacted() {
        tests::lagging_watcher_is_compacted(&MemoryBackend::new()).await;
    }

    #[tokio::test]
    async fn a_store_starting_at_a_revision_has_no_history_before_it() {
        use crate::{Backend, ListRequest, StorageError};
        let store = MemoryBackend::starting_at(1000);
        assert_eq!(store.current_revision().await.unwrap(), 1000);
        let kv = store.create("/a/x", "1".into()).await.unwrap();
        assert_eq!(kv.mod_revision, 1001);
        let at = |revision| ListRequest {
            prefix: "/a/".into(),
            revision,
            ..ListRequest::default()
        };
        assert_eq!(store.list(&at(1001)).await.unwrap().items.len(), 1);
        assert_eq!(store.list(&at(1000)).await.unwrap().items.len(), 0);
        let too_old = store.list(&at(7)).await.unwrap_err();
        assert!(
            matches!(too_old, StorageError::Compacted { .. }),
            "{too_old:?}"
        );
        let watch = store.watch("/a/", 7).await;
        let failed = match watch {
            Err(e) => e,
            Ok(mut events) => futures::StreamExt::next(&mut events)
                .await
                .unwrap()
                .unwrap_err(),
        };
        assert!(
            matches!(failed, StorageError::Compacted { .. }),
            "{failed:?}"
        );
        let mut events = store.watch("/a/", 1000).await.unwrap();
        let event = futures::StreamExt::next(&mut events)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(event.revision(), 1001);
    }

    #[tokio::test]
    async fn quiet_prefix_crosses_scan_windows() {
        tests::quiet_prefix_crosses_scan_windows(&MemoryBackend::new()).await;
    }
}
