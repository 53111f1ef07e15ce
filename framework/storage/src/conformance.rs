//! The conformance suite every storage [`Backend`] must pass (cargo feature `testing`).
//!
//! Each case is a public async fn given a fresh backend;
//! [`backend_conformance_tests!`](crate::backend_conformance_tests) stamps out one test per
//! case, so a new backend plugs in with one line.
//! Cases compare revisions to the store's revision when they start, so a backend on a shared
//! server (etcd) passes too; only [`fresh_store_is_at_revision_zero`] needs an empty store.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::backend::{
    Backend, Event, EventStream, EventType, KeyValue, ListRequest, ListResult, ProgressStream,
    Revision, StorageError, WatchItem,
};

/// How long one case may run before it fails.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a case waits for an event it expects.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a case watches for an event it does not expect.
const QUIET: Duration = Duration::from_millis(200);

/// A backend under test, and whatever must live as long as it (a temporary directory, say).
pub struct Subject {
    backend: Arc<dyn Backend>,
    _guard: Box<dyn Any + Send>,
}

impl Subject {
    /// A backend that needs nothing kept alive beside it.
    pub fn new(backend: impl Backend) -> Self {
        Self::with_guard(backend, ())
    }

    /// A backend with a value to drop only after the case ends.
    pub fn with_guard(backend: impl Backend, guard: impl Send + 'static) -> Self {
        Self {
            backend: Arc::new(backend),
            _guard: Box::new(guard),
        }
    }

    /// The backend.
    pub fn backend(&self) -> Arc<dyn Backend> {
        Arc::clone(&self.backend)
    }
}

impl<B: Backend> From<B> for Subject {
    fn from(backend: B) -> Self {
        Self::new(backend)
    }
}

/// Runs one case on a backend made by `factory`, on a fresh multi-threaded runtime, within
/// [`CASE_TIMEOUT`]. Panics when the case fails.
pub fn run<F, Fut, S, C, CaseFut>(factory: F, case: C)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = S>,
    S: Into<Subject>,
    C: FnOnce(Arc<dyn Backend>) -> CaseFut,
    CaseFut: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let subject: Subject = factory().await.into();
        tokio::time::timeout(CASE_TIMEOUT, case(subject.backend()))
            .await
            .expect("conformance case timed out");
    });
}

/// Stamps out one `#[test]` per conformance case, each on a backend from `$factory`: a
/// closure returning a future of a [`Backend`] or a
/// [`Subject`].
///
/// ```
/// use extension_apiserver_storage::MemoryBackend;
///
/// extension_apiserver_storage::backend_conformance_tests!(|| async { MemoryBackend::new() });
/// ```
///
/// To run it on two backends in one file, put each call in its own module.
#[macro_export]
macro_rules! backend_conformance_tests {
    ($factory:expr) => {
        $crate::backend_conformance_tests!(@cases $factory; fresh_store_is_at_revision_zero);
        $crate::backend_conformance_tests!(shared $factory);
    };
    // Every case that also holds on a store other tests write to (a shared etcd): all but
    // `fresh_store_is_at_revision_zero`.
    (shared $factory:expr) => {
        $crate::backend_conformance_tests!(@cases $factory;
            create_and_get,
            create_of_existing_key_fails,
            update_checks_revision,
            missing_keys_are_not_found,
            delete_with_and_without_expected_revision,
            revision_grows_by_one_per_write,
            create_and_mod_revisions,
            list_by_prefix,
            large_lists_and_watches,
            list_pagination,
            list_at_old_revision,
            list_at_future_revision_fails,
            watch_replays_then_streams,
            watch_delete_events,
            compaction_limits_reads_and_watches,
            compaction_keeps_current_values,
            concurrent_writers_lose_no_update,
            concurrent_writes_are_each_made_once,
            unread_watcher_does_not_block_writers,
            watch_reports_progress_past_other_writes,
            concurrent_progress_requests_report_past_other_writes,
        );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run($factory, $crate::conformance::$case);
            }
        )*
    };
}

fn bytes(value: &'static str) -> Bytes {
    Bytes::from_static(value.as_bytes())
}

fn request(prefix: &str, revision: Revision) -> ListRequest {
    ListRequest {
        prefix: prefix.to_owned(),
        revision,
        ..ListRequest::default()
    }
}

async fn list(backend: &dyn Backend, request: ListRequest) -> ListResult {
    backend.list(&request).await.expect("list")
}

/// The keys and values of a list result.
fn pairs(result: &ListResult) -> Vec<(&str, &[u8])> {
    result
        .items
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_ref()))
        .collect()
}

async fn revision(backend: &dyn Backend) -> Revision {
    backend.current_revision().await.expect("current revision")
}

async fn next_event(stream: &mut EventStream) -> Event {
    match tokio::time::timeout(EVENT_TIMEOUT, stream.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(error))) => panic!("watch failed: {error}"),
        Ok(None) => panic!("watch ended"),
        Err(_) => panic!("no event within {EVENT_TIMEOUT:?}"),
    }
}

async fn assert_quiet(stream: &mut EventStream) {
    if let Ok(item) = tokio::time::timeout(QUIET, stream.next()).await {
        panic!("unexpected watch item: {item:?}");
    }
}

/// The (type, key, value, mod_revision) of an event, for compact assertions.
fn summary(event: &Event) -> (EventType, &str, &[u8], Revision) {
    (
        event.event_type,
        event.kv.key.as_str(),
        event.kv.value.as_ref(),
        event.revision(),
    )
}

/// Asserts a watch from `after` fails as compacted: at once, or as its only item.
async fn assert_watch_compacted(backend: &dyn Backend, prefix: &str, after: Revision) {
    let mut stream = match backend.watch(prefix, after).await {
        Err(StorageError::Compacted { .. }) => return,
        Err(error) => panic!("watch from {after}: expected Compacted, got {error}"),
        Ok(stream) => stream,
    };
    let first = tokio::time::timeout(EVENT_TIMEOUT, stream.next()).await;
    assert!(
        matches!(first, Ok(Some(Err(StorageError::Compacted { .. })))),
        "watch from {after}: expected Compacted, got {first:?}"
    );
    let end = tokio::time::timeout(EVENT_TIMEOUT, stream.next()).await;
    assert!(matches!(end, Ok(None)), "watch went on after Compacted");
}

/// An empty store is at revision 0 and its first write is revision 1.
pub async fn fresh_store_is_at_revision_zero(backend: Arc<dyn Backend>) {
    assert_eq!(revision(&*backend).await, 0);
    backend.ready().await.expect("ready");
    let empty = list(&*backend, request("", 0)).await;
    assert!(empty.items.is_empty());
    assert!(!empty.more);
    let kv = backend.create("/t/a", bytes("1")).await.unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision), (1, 1));
    assert_eq!(revision(&*backend).await, 1);
}

/// A created key reads back exactly, empty and non-UTF-8 values included.
pub async fn create_and_get(backend: Arc<dyn Backend>) {
    let base = revision(&*backend).await;
    assert_eq!(backend.get("/t/a").await.unwrap(), None);
    let kv = backend.create("/t/a", bytes("one")).await.unwrap();
    let expected = KeyValue {
        key: "/t/a".into(),
        value: bytes("one"),
        create_revision: base + 1,
        mod_revision: base + 1,
    };
    assert_eq!(kv, expected);
    assert_eq!(backend.get("/t/a").await.unwrap(), Some(expected));
    for (key, value) in [
        ("/t/empty", Bytes::new()),
        ("/t/bin", Bytes::from(vec![0, 255, 7])),
    ] {
        backend.create(key, value.clone()).await.unwrap();
        assert_eq!(backend.get(key).await.unwrap().unwrap().value, value);
    }
    assert_eq!(backend.get("/t/").await.unwrap(), None);
}

/// Creating a key that exists fails with `KeyExists` and changes nothing.
pub async fn create_of_existing_key_fails(backend: Arc<dyn Backend>) {
    let kv = backend.create("/t/a", bytes("1")).await.unwrap();
    let again = backend.create("/t/a", bytes("2")).await;
    assert_eq!(again, Err(StorageError::KeyExists("/t/a".into())));
    assert_eq!(backend.get("/t/a").await.unwrap(), Some(kv.clone()));
    assert_eq!(revision(&*backend).await, kv.mod_revision);
}

/// An update with the key's revision succeeds; with a stale one it is a `Conflict`.
pub async fn update_checks_revision(backend: Arc<dyn Backend>) {
    let created = backend.create("/t/a", bytes("1")).await.unwrap();
    let updated = backend
        .update("/t/a", bytes("2"), created.mod_revision)
        .await
        .unwrap();
    assert_eq!(updated.mod_revision, created.mod_revision + 1);
    assert_eq!(updated.create_revision, created.create_revision);
    assert_eq!(updated.value, bytes("2"));
    let stale = backend
        .update("/t/a", bytes("3"), created.mod_revision)
        .await;
    let conflict = StorageError::Conflict {
        key: "/t/a".into(),
        expected: created.mod_revision,
        actual: updated.mod_revision,
    };
    assert_eq!(stale, Err(conflict));
    assert_eq!(backend.get("/t/a").await.unwrap(), Some(updated.clone()));
    assert_eq!(revision(&*backend).await, updated.mod_revision);
}

/// Update and delete of a missing key fail with `NotFound` and write nothing.
pub async fn missing_keys_are_not_found(backend: Arc<dyn Backend>) {
    backend.create("/t/other", bytes("1")).await.unwrap();
    let before = revision(&*backend).await;
    let not_found = Err(StorageError::NotFound("/t/none".into()));
    assert_eq!(
        backend.update("/t/none", bytes("1"), before).await,
        not_found
    );
    assert_eq!(backend.delete("/t/none", None).await, not_found);
    assert_eq!(backend.delete("/t/none", Some(before)).await, not_found);
    assert_eq!(backend.get("/t/none").await.unwrap(), None);
    assert_eq!(revision(&*backend).await, before);
}

/// A delete checks the expected revision when given one, and returns the last value.
pub async fn delete_with_and_without_expected_revision(backend: Arc<dyn Backend>) {
    let created = backend.create("/t/a", bytes("1")).await.unwrap();
    let updated = backend
        .update("/t/a", bytes("2"), created.mod_revision)
        .await
        .unwrap();
    let stale = backend.delete("/t/a", Some(created.mod_revision)).await;
    let conflict = StorageError::Conflict {
        key: "/t/a".into(),
        expected: created.mod_revision,
        actual: updated.mod_revision,
    };
    assert_eq!(stale, Err(conflict));
    let deleted = backend
        .delete("/t/a", Some(updated.mod_revision))
        .await
        .unwrap();
    let expected = KeyValue {
        mod_revision: updated.mod_revision + 1,
        ..updated.clone()
    };
    assert_eq!(deleted, expected);
    assert_eq!(backend.get("/t/a").await.unwrap(), None);

    backend.create("/t/b", bytes("b")).await.unwrap();
    let deleted = backend.delete("/t/b", None).await.unwrap();
    assert_eq!(deleted.value, bytes("b"));
    assert_eq!(backend.get("/t/b").await.unwrap(), None);

    let recreated = backend.create("/t/a", bytes("3")).await.unwrap();
    assert_eq!(recreated.create_revision, recreated.mod_revision);
    assert_eq!(recreated.mod_revision, deleted.mod_revision + 1);
}

/// Every successful write, whatever its key, moves the global revision by exactly one.
pub async fn revision_grows_by_one_per_write(backend: Arc<dyn Backend>) {
    let base = revision(&*backend).await;
    let a = backend.create("/t/a", bytes("1")).await.unwrap();
    let b = backend.create("/u/b", bytes("1")).await.unwrap();
    let a2 = backend
        .update("/t/a", bytes("2"), a.mod_revision)
        .await
        .unwrap();
    let _ = backend.create("/t/a", bytes("x")).await.unwrap_err();
    let _ = backend
        .update("/t/a", bytes("x"), a.mod_revision)
        .await
        .unwrap_err();
    let b2 = backend.delete("/u/b", None).await.unwrap();
    let c = backend.create("/v/c", bytes("1")).await.unwrap();
    let revisions = [a, b, a2, b2, c].map(|kv| kv.mod_revision);
    assert_eq!(revisions, [1, 2, 3, 4, 5].map(|i| base + i));
    assert_eq!(revision(&*backend).await, base + 5);
}

/// `create_revision` stays with the key; `mod_revision` follows each write.
pub async fn create_and_mod_revisions(backend: Arc<dyn Backend>) {
    let created = backend.create("/t/a", bytes("1")).await.unwrap();
    backend.create("/t/b", bytes("1")).await.unwrap();
    let mut current = created.clone();
    for value in ["2", "3"] {
        current = backend
            .update("/t/a", bytes(value), current.mod_revision)
            .await
            .unwrap();
        assert_eq!(current.create_revision, created.create_revision);
    }
    assert_eq!(current.mod_revision, created.mod_revision + 3);
    let listed = list(&*backend, request("/t/", 0)).await;
    assert_eq!(listed.items[0], current);
    assert_eq!(listed.items[1].create_revision, created.create_revision + 1);
}

/// A list returns exactly the keys under the prefix, in key order, at the latest revision.
pub async fn list_by_prefix(backend: Arc<dyn Backend>) {
    for key in ["/a/2", "/ab/x", "/a/1", "/a/3/deep", "/b/1", "/a", "/a/"] {
        backend.create(key, bytes(key)).await.unwrap();
    }
    let listed = list(&*backend, request("/a/", 0)).await;
    let keys: Vec<_> = listed.items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/a/", "/a/1", "/a/2", "/a/3/deep"]);
    assert_eq!(pairs(&listed)[1], ("/a/1", b"/a/1".as_slice()));
    assert_eq!(listed.revision, revision(&*backend).await);
    assert!(!listed.more);
    let all = list(&*backend, request("", 0)).await;
    let keys: Vec<_> = all.items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(
        keys,
        ["/a", "/a/", "/a/1", "/a/2", "/a/3/deep", "/ab/x", "/b/1"]
    );
    assert!(list(&*backend, request("/c/", 0)).await.items.is_empty());
}

fn page(prefix: &str, revision: Revision, limit: usize, after: Option<&str>) -> ListRequest {
    ListRequest {
        prefix: prefix.to_owned(),
        start_after: after.map(str::to_owned),
        revision,
        limit,
        skip_count: false,
    }
}

fn page_keys(result: &ListResult) -> Vec<&str> {
    result.items.iter().map(|kv| kv.key.as_str()).collect()
}

fn assert_no_more(result: &ListResult) {
    assert!(!result.more, "more after the last page");
    assert!(matches!(result.remaining, None | Some(0)));
}

/// `limit` and `start_after` page through a prefix consistently at the first page's revision.
pub async fn list_pagination(backend: Arc<dyn Backend>) {
    let keys: Vec<String> = (0..10).map(|i| format!("/p/k{i:02}")).collect();
    for key in &keys {
        backend.create(key, bytes("old")).await.unwrap();
    }
    backend.create("/q/x", bytes("outside")).await.unwrap();
    let first = list(&*backend, page("/p/", 0, 4, None)).await;
    assert_eq!(page_keys(&first), ["/p/k00", "/p/k01", "/p/k02", "/p/k03"]);
    assert!(first.more);
    assert_eq!(first.remaining, Some(6));
    let at = first.revision;

    // Writes between pages must not show in later pages read at the first page's revision.
    backend.create("/p/k045", bytes("new")).await.unwrap();
    let k08 = backend.get("/p/k08").await.unwrap().unwrap();
    backend
        .update("/p/k08", bytes("new"), k08.mod_revision)
        .await
        .unwrap();
    backend.delete("/p/k09", None).await.unwrap();

    let second = list(&*backend, page("/p/", at, 4, Some("/p/k03"))).await;
    assert_eq!(page_keys(&second), ["/p/k04", "/p/k05", "/p/k06", "/p/k07"]);
    assert_eq!(
        (second.revision, second.more, second.remaining),
        (at, true, Some(2))
    );
    let third = list(&*backend, page("/p/", at, 4, Some("/p/k07"))).await;
    assert_eq!(
        pairs(&third),
        [("/p/k08", b"old".as_slice()), ("/p/k09", b"old")]
    );
    assert_no_more(&third);

    // Without the count, `more` says the same (and a count, if any, is right).
    for (after, limit, more, count) in [
        (None, 4, true, 6),
        (Some("/p/k03"), 4, true, 2),
        (Some("/p/k07"), 4, false, 0),
        (Some("/p/k07"), 2, false, 0),
    ] {
        let uncounted = ListRequest {
            skip_count: true,
            ..page("/p/", at, limit, after)
        };
        let result = list(&*backend, uncounted).await;
        assert_eq!(result.revision, at);
        assert_eq!(
            result.more, more,
            "more after {after:?} (limit {limit}) without a count"
        );
        assert!(result.remaining.is_none_or(|c| c == count));
        let counted = list(&*backend, page("/p/", at, limit, after)).await;
        assert_eq!(result.items, counted.items);
    }

    let exact = list(&*backend, page("/p/", at, 2, Some("/p/k07"))).await;
    assert_eq!(page_keys(&exact), ["/p/k08", "/p/k09"]);
    assert_no_more(&exact);
    let between = list(&*backend, page("/p/", 0, 2, Some("/p/k035"))).await;
    assert_eq!(page_keys(&between), ["/p/k04", "/p/k045"]);
    let before_prefix = list(&*backend, page("/p/", 0, 1, Some("/a"))).await;
    assert_eq!(page_keys(&before_prefix), ["/p/k00"]);
    let latest = list(&*backend, page("/p/", 0, 0, None)).await;
    assert_eq!(latest.items.len(), 10);
    assert_no_more(&latest);
}

/// A list at an older revision sees the store as it was then.
pub async fn list_at_old_revision(backend: Arc<dyn Backend>) {
    let a = backend.create("/t/a", bytes("a1")).await.unwrap();
    let old = backend
        .create("/t/b", bytes("b1"))
        .await
        .unwrap()
        .mod_revision;
    backend
        .update("/t/a", bytes("a2"), a.mod_revision)
        .await
        .unwrap();
    backend.delete("/t/b", None).await.unwrap();
    backend.create("/t/c", bytes("c1")).await.unwrap();

    let then = list(&*backend, request("/t/", old)).await;
    assert_eq!(then.revision, old);
    assert_eq!(pairs(&then), [("/t/a", b"a1".as_slice()), ("/t/b", b"b1")]);
    assert_eq!(then.items[0], a);
    let now = list(&*backend, request("/t/", 0)).await;
    assert_eq!(pairs(&now), [("/t/a", b"a2".as_slice()), ("/t/c", b"c1")]);
    let paged = list(&*backend, page("/t/", old, 1, None)).await;
    assert_eq!(page_keys(&paged), ["/t/a"]);
    assert_eq!((paged.more, paged.remaining), (true, Some(1)));
}

/// A list at a revision not yet written is `FutureRevision`.
pub async fn list_at_future_revision_fails(backend: Arc<dyn Backend>) {
    backend.create("/t/a", bytes("1")).await.unwrap();
    let current = revision(&*backend).await;
    for requested in [current + 1, current + 100] {
        let result = backend.list(&request("/t/", requested)).await;
        let expected = StorageError::FutureRevision { requested, current };
        assert_eq!(result, Err(expected));
    }
}

/// A watch replays the history after its revision, then streams live writes, in order and
/// only under its prefix.
/// Lists and watch replays larger than a transport's default message size (gRPC's 4 MiB):
/// the watch cache loads pages of 10,000 objects, several MiB of a collection of small ones.
/// Six values of 1 MiB each, under etcd's default 1.5 MiB request limit.
pub async fn large_lists_and_watches(backend: Arc<dyn Backend>) {
    let value = Bytes::from(vec![b'x'; 1 << 20]);
    let before = revision(&*backend).await;
    for i in 0..6 {
        let key = format!("/large/{i}");
        backend.create(&key, value.clone()).await.unwrap();
    }
    let listed = list(&*backend, request("/large/", 0)).await;
    assert_eq!(listed.items.len(), 6);
    assert!(listed.items.iter().all(|kv| kv.value == value));
    let mut replay = backend.watch("/large/", before).await.unwrap();
    for i in 0..6 {
        let event = next_event(&mut replay).await;
        assert_eq!(event.kv.key, format!("/large/{i}"));
        assert_eq!(event.kv.value.len(), value.len());
    }
}

pub async fn watch_replays_then_streams(backend: Arc<dyn Backend>) {
    let a = backend.create("/w/a", bytes("a1")).await.unwrap();
    backend.create("/x/other", bytes("x")).await.unwrap();
    let a2 = backend
        .update("/w/a", bytes("a2"), a.mod_revision)
        .await
        .unwrap();
    let b = backend.create("/w/b", bytes("b1")).await.unwrap();
    backend.create("/wx", bytes("not under /w/")).await.unwrap();

    let mut stream = backend.watch("/w/", a.mod_revision).await.unwrap();
    let update = next_event(&mut stream).await;
    assert_eq!(
        summary(&update),
        (EventType::Put, "/w/a", b"a2".as_slice(), a2.mod_revision)
    );
    assert_eq!(update.kv, a2);
    assert_eq!(update.prev_kv, Some(a.clone()));
    let create = next_event(&mut stream).await;
    assert_eq!((create.kv.clone(), create.prev_kv), (b.clone(), None));
    assert_quiet(&mut stream).await;

    backend.create("/x/other2", bytes("x")).await.unwrap();
    let b2 = backend
        .update("/w/b", bytes("b2"), b.mod_revision)
        .await
        .unwrap();
    let live = next_event(&mut stream).await;
    assert_eq!((live.kv, live.prev_kv), (b2.clone(), Some(b)));
    assert_quiet(&mut stream).await;

    let mut from_start = backend.watch("/w/", a.mod_revision - 1).await.unwrap();
    let revisions = [
        a.mod_revision,
        a2.mod_revision,
        create.kv.mod_revision,
        b2.mod_revision,
    ];
    for expected in revisions {
        assert_eq!(next_event(&mut from_start).await.revision(), expected);
    }
    let mut from_now = backend
        .watch("/w/", revision(&*backend).await)
        .await
        .unwrap();
    assert_quiet(&mut from_now).await;
    let c = backend.create("/w/c", bytes("c")).await.unwrap();
    assert_eq!(next_event(&mut from_now).await.kv, c);
}

/// A delete event carries the last value, the delete's revision and the previous key-value,
/// whether seen live or replayed.
pub async fn watch_delete_events(backend: Arc<dyn Backend>) {
    let created = backend.create("/d/a", bytes("v1")).await.unwrap();
    let updated = backend
        .update("/d/a", bytes("v2"), created.mod_revision)
        .await
        .unwrap();
    let mut live = backend.watch("/d/", updated.mod_revision).await.unwrap();
    let deleted = backend.delete("/d/a", None).await.unwrap();
    let expected = Event {
        event_type: EventType::Delete,
        kv: KeyValue {
            mod_revision: updated.mod_revision + 1,
            ..updated.clone()
        },
        prev_kv: Some(updated.clone()),
    };
    assert_eq!(deleted, expected.kv);
    assert_eq!(next_event(&mut live).await, expected);
    let mut replay = backend.watch("/d/", created.mod_revision).await.unwrap();
    next_event(&mut replay).await;
    assert_eq!(next_event(&mut replay).await, expected);
}

/// After `compact(R)`, reads below R and watches from before R - 1 are `Compacted`; reads at
/// R and watches from R - 1 still work.
pub async fn compaction_limits_reads_and_watches(backend: Arc<dyn Backend>) {
    let a1 = backend.create("/t/a", bytes("a1")).await.unwrap();
    let a2 = backend
        .update("/t/a", bytes("a2"), a1.mod_revision)
        .await
        .unwrap();
    backend.create("/t/b", bytes("b1")).await.unwrap();
    let gone = backend.delete("/t/b", None).await.unwrap().mod_revision;
    let c = backend.create("/t/c", bytes("c1")).await.unwrap();
    let compacted = c.mod_revision;
    let a3 = backend
        .update("/t/a", bytes("a3"), a2.mod_revision)
        .await
        .unwrap();
    backend.compact(compacted).await.unwrap();

    let too_old = backend.list(&request("/t/", gone)).await;
    let expected = StorageError::Compacted {
        requested: gone,
        compacted,
    };
    assert_eq!(too_old, Err(expected));
    let at = list(&*backend, request("/t/", compacted)).await;
    assert_eq!(pairs(&at), [("/t/a", b"a2".as_slice()), ("/t/c", b"c1")]);
    assert_eq!(at.items[0], a2);
    assert_watch_compacted(&*backend, "/t/", compacted - 2).await;
    assert_watch_compacted(&*backend, "/t/", 0).await;

    let mut stream = backend.watch("/t/", compacted - 1).await.unwrap();
    assert_eq!(next_event(&mut stream).await.kv, c);
    let update = next_event(&mut stream).await;
    assert_eq!((update.kv, update.prev_kv), (a3, Some(a2)));

    backend.compact(compacted).await.expect("compacting again");
    backend
        .compact(compacted - 1)
        .await
        .expect("compacting less");
    let current = revision(&*backend).await;
    let future = backend.compact(current + 1).await;
    let expected = StorageError::FutureRevision {
        requested: current + 1,
        current,
    };
    assert_eq!(future, Err(expected));
}

/// Compaction keeps every current value, and writes go on from the same revision.
pub async fn compaction_keeps_current_values(backend: Arc<dyn Backend>) {
    for i in 0..5 {
        let key = format!("/t/{i}");
        let mut kv = backend.create(&key, bytes("0")).await.unwrap();
        for value in ["1", "2"].into_iter().take(i % 3) {
            kv = backend
                .update(&key, bytes(value), kv.mod_revision)
                .await
                .unwrap();
        }
    }
    backend.delete("/t/4", None).await.unwrap();
    let before = list(&*backend, request("/t/", 0)).await;
    backend.compact(before.revision).await.unwrap();

    assert_eq!(list(&*backend, request("/t/", 0)).await, before);
    assert_eq!(
        list(&*backend, request("/t/", before.revision)).await,
        before
    );
    for kv in &before.items {
        assert_eq!(backend.get(&kv.key).await.unwrap().as_ref(), Some(kv));
    }
    assert_eq!(backend.get("/t/4").await.unwrap(), None);
    let first = &before.items[0];
    let next = backend
        .update(&first.key, bytes("3"), first.mod_revision)
        .await
        .unwrap();
    assert_eq!(next.mod_revision, before.revision + 1);
    assert_eq!(next.create_revision, first.create_revision);
}

const WRITERS: usize = 8;
const UPDATES_PER_WRITER: usize = 50;

/// Adds one to the counter at `key`, retrying on `Conflict`.
async fn increment(backend: &dyn Backend, key: &str) {
    loop {
        let kv = backend.get(key).await.unwrap().expect("counter exists");
        let count: u64 = std::str::from_utf8(&kv.value).unwrap().parse().unwrap();
        let value = Bytes::from((count + 1).to_string());
        match backend.update(key, value, kv.mod_revision).await {
            Ok(_) => return,
            Err(StorageError::Conflict { .. }) => tokio::task::yield_now().await,
            Err(error) => panic!("update failed: {error}"),
        }
    }
}

/// Concurrent read-modify-write loops that retry on `Conflict` lose no update, and a watcher
/// sees every one of them in order.
pub async fn concurrent_writers_lose_no_update(backend: Arc<dyn Backend>) {
    let created = backend.create("/t/counter", bytes("0")).await.unwrap();
    let mut stream = backend.watch("/t/", created.mod_revision).await.unwrap();
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move {
                for _ in 0..UPDATES_PER_WRITER {
                    increment(&*backend, "/t/counter").await;
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer task");
    }
    let total = (WRITERS * UPDATES_PER_WRITER) as u64;
    let kv = backend.get("/t/counter").await.unwrap().unwrap();
    assert_eq!(kv.value, Bytes::from(total.to_string()));
    assert_eq!(kv.mod_revision, created.mod_revision + total as Revision);
    for count in 1..=total {
        let event = next_event(&mut stream).await;
        assert_eq!(event.kv.value, Bytes::from(count.to_string()));
        assert_eq!(event.revision(), created.mod_revision + count as Revision);
    }
}

/// Writes made at once (which a backend may commit together) are each made once, at
/// revisions of their own, and a watcher sees them in revision order; of creates of one key
/// exactly one wins and the others find it there.
pub async fn concurrent_writes_are_each_made_once(backend: Arc<dyn Backend>) {
    let start = revision(&*backend).await;
    let calls: Vec<_> = (0..64)
        .map(|i| {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move {
                let key = if i % 8 == 0 {
                    "/c/one".to_owned()
                } else {
                    format!("/c/{i:02}")
                };
                backend.create(&key, Bytes::from(i.to_string())).await
            })
        })
        .collect();
    let mut made = Vec::new();
    let mut refused = Vec::new();
    for call in calls {
        match call.await.expect("create task") {
            Ok(kv) => made.push(kv),
            Err(error) => refused.push(error),
        }
    }
    assert_eq!(made.len(), 57, "refused: {refused:?}");
    assert!(
        refused
            .iter()
            .all(|error| matches!(error, StorageError::KeyExists(key) if key == "/c/one")),
        "{refused:?}"
    );
    made.sort_by_key(|kv| kv.mod_revision);
    assert!(
        made.windows(2)
            .all(|w| w[0].mod_revision < w[1].mod_revision)
    );
    assert!(made[0].mod_revision > start);
    let mut stream = backend.watch("/c/", start).await.unwrap();
    for kv in &made {
        let event = next_event(&mut stream).await;
        assert_eq!(
            (event.event_type, &event.kv, event.prev_kv),
            (EventType::Put, kv, None)
        );
    }
    let one = backend
        .get("/c/one")
        .await
        .unwrap()
        .expect("one create won");
    assert!(made.contains(&one));
}

/// How many writes the unread watcher sees go by; more than one read batch of any backend
/// of this crate.
const UNREAD_WRITES: usize = 600;

/// A watcher that does not read does not hold up writers, and later gets every event.
pub async fn unread_watcher_does_not_block_writers(backend: Arc<dyn Backend>) {
    let base = revision(&*backend).await;
    let mut unread = backend.watch("/s/", base).await.unwrap();
    let mut kv = backend.create("/s/a", bytes("0")).await.unwrap();
    for i in 1..UNREAD_WRITES {
        let value = Bytes::from(i.to_string());
        kv = backend
            .update("/s/a", value, kv.mod_revision)
            .await
            .unwrap();
    }
    for i in 0..UNREAD_WRITES {
        let event = next_event(&mut unread).await;
        assert_eq!(event.revision(), base + 1 + i as Revision);
        assert_eq!(event.kv.value, Bytes::from(i.to_string()));
    }
    assert_quiet(&mut unread).await;
}

/// As [`watch_reports_progress_past_other_writes`], with many callers of `request_progress`
/// at once (the consistent gets of one revision read, when the cache is behind): every caller
/// returns, and the progress reported passes each write made before they asked, round after
/// round (a backend that shares one request among concurrent callers sends it after they all
/// asked).
pub async fn concurrent_progress_requests_report_past_other_writes(backend: Arc<dyn Backend>) {
    let (start, mut stream) = quiet_watch(&*backend, "/progress-many-quiet/").await;
    for round in 0..3 {
        let elsewhere = backend
            .create(&format!("/progress-many-noise/{round}"), bytes("n"))
            .await
            .unwrap();
        let ask = || async {
            let mut callers = tokio::task::JoinSet::new();
            for _ in 0..16 {
                let backend = backend.clone();
                callers.spawn(async move { backend.request_progress().await });
            }
            tokio::time::timeout(EVENT_TIMEOUT, callers.join_all())
                .await
                .expect("every request_progress caller returns");
        };
        progress_past(&mut stream, start, elsewhere.mod_revision, ask).await;
    }
}

/// A progress-reporting watch of a quiet prefix says, on its own or when asked with
/// `request_progress`, that it is current at least up to a write made under another prefix;
/// and it never shows that write as an event.
pub async fn watch_reports_progress_past_other_writes(backend: Arc<dyn Backend>) {
    let (start, mut stream) = quiet_watch(&*backend, "/progress-quiet/").await;
    let elsewhere = backend
        .create("/progress-noise/a", bytes("n"))
        .await
        .unwrap();
    let ask = || backend.request_progress();
    progress_past(&mut stream, start, elsewhere.mod_revision, ask).await;
}

/// The current revision, and a progress-reporting watch of `prefix` from there.
async fn quiet_watch(backend: &dyn Backend, prefix: &str) -> (Revision, ProgressStream) {
    let start = revision(backend).await;
    let stream = backend.watch_with_progress(prefix, start).await.unwrap();
    (start, stream)
}

/// Asks for progress with `ask` and reads `stream` (a watch from `start` of a quiet prefix)
/// until it reports progress at or past `target`, within [`EVENT_TIMEOUT`].
async fn progress_past<F, Fut>(
    stream: &mut ProgressStream,
    start: Revision,
    target: Revision,
    ask: F,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    loop {
        ask().await;
        match tokio::time::timeout(Duration::from_millis(200), stream.next()).await {
            Ok(Some(Ok(WatchItem::Progress(at)))) if at >= target => return,
            Ok(Some(Ok(WatchItem::Progress(at)))) => assert!(at >= start, "progress went back"),
            Ok(Some(Ok(WatchItem::Event(event)))) => panic!("event of another prefix: {event:?}"),
            Ok(Some(Err(error))) => panic!("watch failed: {error}"),
            Ok(None) => panic!("watch ended"),
            Err(_) => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no progress past {target} within {EVENT_TIMEOUT:?}"
        );
    }
}
