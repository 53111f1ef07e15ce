//! The watch loop shared by the backends that keep their own history log (memory, sqlite,
//! postgres).
//!
//! Writers only bump a revision in a `tokio::sync::watch` channel; each watcher reads its next
//! events from the backend's history log in bounded batches. So a watcher holds no lock while
//! it waits, and a watcher that never reads costs writers nothing.

use std::collections::VecDeque;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::backend::{Event, ProgressStream, Revision, StorageError, WatchItem};

/// At most this many events are read from the log per batch.
pub(crate) const BATCH_EVENTS: usize = 256;

/// At most this many revisions of the log are scanned per batch, so that a watcher of a quiet
/// prefix does not rescan a busy store's whole history in one go. Unit tests use a small
/// window so that crossing several costs few (fsynced) writes.
pub(crate) const SCAN_WINDOW: Revision = if cfg!(test) { 64 } else { 4096 };

/// The events a backend found after a revision.
#[derive(Debug, Default)]
pub(crate) struct EventBatch {
    /// The matching events, in revision order.
    pub(crate) events: Vec<Event>,
    /// Every event up to this revision has been looked at; the next batch starts after it.
    pub(crate) scanned_to: Revision,
}

/// A backend's history log, as the watch loop reads it.
pub(crate) trait EventSource: Send + Sync + 'static {
    /// Events under `prefix` with a revision after `after`: at most `limit` of them and from at
    /// most [`SCAN_WINDOW`] revisions. Fails with `Compacted` when some are gone.
    fn events_after(
        self: Arc<Self>,
        prefix: String,
        after: Revision,
        limit: usize,
    ) -> BoxFuture<'static, Result<EventBatch, StorageError>>;
}

/// The writers' side: publishes the latest revision to every watcher.
#[derive(Clone, Debug)]
pub(crate) struct Notifier(watch::Sender<Revision>);

impl Notifier {
    /// A notifier whose store is at `revision`.
    pub(crate) fn new(revision: Revision) -> Self {
        Self(watch::Sender::new(revision))
    }

    /// The latest revision published.
    pub(crate) fn latest(&self) -> Revision {
        *self.0.borrow()
    }

    /// Tells watchers the store has reached `revision`. Never waits.
    pub(crate) fn publish(&self, revision: Revision) {
        // Writers may publish out of order; the value must never go back.
        self.0.send_if_modified(|latest| {
            let newer = revision > *latest;
            if newer {
                *latest = revision;
            }
            newer
        });
    }

    /// Opens a watch on `source` from `after`. The first batch is read at once, so a compacted
    /// start fails here rather than in the stream. Every batch that looked further than its
    /// last event ends with a progress report.
    pub(crate) async fn watch<S: EventSource>(
        &self,
        source: Arc<S>,
        prefix: &str,
        after: Revision,
    ) -> Result<ProgressStream, StorageError> {
        // Subscribe before the first read so no write between the two goes unnoticed.
        let latest = self.0.subscribe();
        let first = Arc::clone(&source)
            .events_after(prefix.to_owned(), after, BATCH_EVENTS)
            .await?;
        let mut cursor = Cursor {
            source,
            latest,
            prefix: prefix.to_owned(),
            after,
            buffered: VecDeque::new(),
            failed: false,
        };
        cursor.take(first);
        Ok(Box::pin(futures::stream::unfold(
            cursor,
            |mut cursor| async move { cursor.next().await.map(|item| (item, cursor)) },
        )))
    }
}

/// One watcher's position in the log.
struct Cursor<S> {
    source: Arc<S>,
    latest: watch::Receiver<Revision>,
    prefix: String,
    after: Revision,
    buffered: VecDeque<WatchItem>,
    failed: bool,
}

impl<S: EventSource> Cursor<S> {
    /// The next item; `None` once the stream failed or the backend is gone.
    async fn next(&mut self) -> Option<Result<WatchItem, StorageError>> {
        loop {
            if let Some(item) = self.buffered.pop_front() {
                return Some(Ok(item));
            }
            if self.failed {
                return None;
            }
            let latest = *self.latest.borrow_and_update();
            if latest <= self.after {
                // Err: every sender (the backend) is gone, nothing more will be written.
                self.latest.changed().await.ok()?;
                continue;
            }
            let source = Arc::clone(&self.source);
            match source
                .events_after(self.prefix.clone(), self.after, BATCH_EVENTS)
                .await
            {
                Ok(batch) if batch.scanned_to <= self.after && batch.events.is_empty() => {
                    // The log is behind the published revision; never spin, wait for a write.
                    self.latest.changed().await.ok()?;
                }
                Ok(batch) => self.take(batch),
                Err(error) => {
                    self.failed = true;
                    return Some(Err(error));
                }
            }
        }
    }

    fn take(&mut self, batch: EventBatch) {
        let last_event = batch.events.last().map(Event::revision);
        self.buffered
            .extend(batch.events.into_iter().map(WatchItem::Event));
        if batch.scanned_to > self.after && Some(batch.scanned_to) != last_event {
            self.buffered
                .push_back(WatchItem::Progress(batch.scanned_to));
        }
        self.after = self.after.max(batch.scanned_to);
    }
}

/// Cases for the watch loop that depend on its batch sizes, run by each embedded backend.
#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use futures::StreamExt;

    use super::{BATCH_EVENTS, SCAN_WINDOW};
    use crate::{Backend, EventStream, Revision, StorageError};

    const WAIT: Duration = Duration::from_secs(30);

    async fn next(stream: &mut EventStream) -> Option<Result<crate::Event, StorageError>> {
        tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("watch item in time")
    }

    /// A write whose caller stopped waiting while the backend's writes were held up (by
    /// whatever the caller holds until `release` is awaited) is never made; the writes
    /// around it are.
    pub(crate) async fn a_write_given_up_before_its_turn_is_not_made<B: Backend + 'static>(
        backend: std::sync::Arc<B>,
        release: impl std::future::Future<Output = ()>,
    ) {
        let create = |key: &'static str| {
            let backend = std::sync::Arc::clone(&backend);
            tokio::spawn(async move { backend.create(key, Bytes::from_static(b"1")).await })
        };
        let first = create("/first");
        // The first write now waits for the hold; the second waits behind it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let second = create("/second");
        tokio::time::sleep(Duration::from_millis(100)).await;
        second.abort();
        assert!(second.await.unwrap_err().is_cancelled());
        release.await;
        let made = first.await.unwrap().unwrap();
        let third = backend
            .create("/third", Bytes::from_static(b"3"))
            .await
            .unwrap();
        assert_eq!(third.mod_revision, made.mod_revision + 1);
        assert_eq!(backend.get("/second").await.unwrap(), None);
    }

    /// A watcher lagging more than a batch behind when its position is compacted away gets
    /// the events it had buffered, then `Compacted`, then the end of the stream.
    pub(crate) async fn lagging_watcher_is_compacted(backend: &dyn Backend) {
        let base = backend.current_revision().await.unwrap();
        let mut kv = backend.create("/l/a", Bytes::from("0")).await.unwrap();
        for i in 1..2 * BATCH_EVENTS + 10 {
            let value = Bytes::from(i.to_string());
            kv = backend
                .update("/l/a", value, kv.mod_revision)
                .await
                .unwrap();
        }
        let mut stream = backend.watch("/l/", base).await.unwrap();
        let first = next(&mut stream).await.unwrap().unwrap();
        assert_eq!(first.revision(), base + 1);
        backend.compact(kv.mod_revision).await.unwrap();
        let mut expected: Revision = base + 2;
        loop {
            match next(&mut stream).await {
                Some(Ok(event)) => assert_eq!(event.revision(), expected),
                Some(Err(StorageError::Compacted { compacted, .. })) => {
                    assert_eq!(compacted, kv.mod_revision);
                    break;
                }
                other => panic!("expected an event or Compacted, got {other:?}"),
            }
            expected += 1;
        }
        assert!(expected < kv.mod_revision, "the watcher was not lagging");
        assert!(
            next(&mut stream).await.is_none(),
            "stream went on after Compacted"
        );
    }

    /// A watch on a quiet prefix sees its event after more writes elsewhere than one scan
    /// window holds, both live and replayed.
    pub(crate) async fn quiet_prefix_crosses_scan_windows(backend: &dyn Backend) {
        let base = backend.current_revision().await.unwrap();
        let mut live = backend.watch("/quiet/", base).await.unwrap();
        let mut kv = backend.create("/noise/a", Bytes::from("0")).await.unwrap();
        for _ in 0..SCAN_WINDOW + 10 {
            let value = Bytes::from("1");
            kv = backend
                .update("/noise/a", value, kv.mod_revision)
                .await
                .unwrap();
        }
        let quiet = backend.create("/quiet/a", Bytes::from("q")).await.unwrap();
        assert_eq!(next(&mut live).await.unwrap().unwrap().kv, quiet);
        let mut replay = backend.watch("/quiet/", base).await.unwrap();
        assert_eq!(next(&mut replay).await.unwrap().unwrap().kv, quiet);
    }
}
