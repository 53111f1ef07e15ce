//! What the watch cache changes for storage: lists and watches are served from memory through
//! one backend watch, a watcher that stops reading is ended without holding up the others,
//! and what the cache cannot serve is read from storage.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::registry::context::{RequestContext, WatchInitialization};
use extension_apiserver::registry::options::{ListOptions, WriteOptions};
use extension_apiserver::registry::rest::{
    Creater, Lister, Object, WatchEventType, WatchStream, Watcher,
};
use extension_apiserver::registry::store::Store;
use extension_apiserver::storage::{
    Backend, CacherOptions, KeyValue, ListRequest, ListResult, MemoryBackend, ProgressStream,
    Revision, StorageError,
};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "test.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced
)]
pub struct Gadget {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
}

const WAIT: Duration = Duration::from_secs(10);

/// A memory backend that counts the reads and watches that reach it.
#[derive(Default)]
struct Counting {
    inner: MemoryBackend,
    lists: AtomicUsize,
    watches: AtomicUsize,
}

#[async_trait]
impl Backend for Counting {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        self.inner.get(key).await
    }
    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list(request).await
    }
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StorageError> {
        self.inner.create(key, value).await
    }
    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        self.inner.update(key, value, expected).await
    }
    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<KeyValue, StorageError> {
        self.inner.delete(key, expected).await
    }
    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
    ) -> Result<ProgressStream, StorageError> {
        self.watches.fetch_add(1, Ordering::SeqCst);
        self.inner.watch_with_progress(prefix, after).await
    }
    async fn current_revision(&self) -> Result<Revision, StorageError> {
        self.inner.current_revision().await
    }
    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        self.inner.compact(revision).await
    }
}

fn ns() -> RequestContext {
    RequestContext::namespaced("default")
}

fn setup(options: CacherOptions) -> (Store<Gadget>, Arc<Counting>) {
    let backend = Arc::new(Counting::default());
    let store = Store::new(backend.clone(), "/registry").with_watch_cache_options(options);
    (store, backend)
}

async fn create(store: &Store<Gadget>, name: &str) -> Value {
    let object = json!({
        "apiVersion": "test.example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": name},
        "spec": {"n": name},
    });
    store
        .create(&ns(), object, &WriteOptions::default())
        .await
        .expect("create")
        .into_value()
        .expect("the created object decodes")
}

fn rv(object: &Value) -> Revision {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn list(store: &Store<Gadget>, options: ListOptions) -> Vec<Value> {
    let list = store.list(&ns(), &options).await.expect("list");
    list.items
        .into_iter()
        .map(|o| o.into_value().unwrap())
        .collect()
}

async fn next(stream: &mut WatchStream) -> Option<(WatchEventType, Value)> {
    let event = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("a watch item in time")?;
    Some((event.type_, event.object.into_value().unwrap()))
}

fn from(rv: Revision) -> ListOptions {
    ListOptions {
        resource_version: Some(rv.to_string()),
        ..ListOptions::default()
    }
}

/// Waits (bounded) until a consistent list is answered without a backend list.
async fn cache_serving(store: &Store<Gadget>, backend: &Counting) {
    for _ in 0..100 {
        let before = backend.lists.load(Ordering::SeqCst);
        list(store, ListOptions::default()).await;
        if backend.lists.load(Ordering::SeqCst) == before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the watch cache never served a list");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_are_served_from_memory_as_encoded_objects() {
    let (store, backend) = setup(CacherOptions::default());
    for name in ["a", "b", "c"] {
        create(&store, name).await;
    }
    cache_serving(&store, &backend).await;
    let lists = backend.lists.load(Ordering::SeqCst);
    let page = store.list(&ns(), &ListOptions::default()).await.unwrap();
    assert!(page.items.iter().all(|o| matches!(o, Object::Cached(_))));
    let zero = list(&store, from(0)).await;
    assert_eq!(zero.len(), 3);
    let d = create(&store, "d").await;
    // Not older than the create just made, and consistent: both see it, from memory.
    assert_eq!(list(&store, from(rv(&d))).await.len(), 4);
    let names: Vec<_> = list(&store, ListOptions::default())
        .await
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    assert_eq!(backend.lists.load(Ordering::SeqCst), lists);

    // A first page comes from memory; the next is read from storage at the same revision.
    let first = store
        .list(
            &ns(),
            &ListOptions {
                limit: 3,
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(first.remaining_item_count, Some(1));
    assert_eq!(backend.lists.load(Ordering::SeqCst), lists);
    create(&store, "e").await;
    let second = store
        .list(
            &ns(),
            &ListOptions {
                limit: 3,
                continue_token: first.continue_token.clone(),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    let second: Vec<_> = second
        .items
        .into_iter()
        .map(|o| o.into_value().unwrap())
        .collect();
    assert_eq!(second.len(), 1, "the page is at the first page's revision");
    assert_eq!(second[0]["metadata"]["name"], "d");
    assert_eq!(second[0]["metadata"]["resourceVersion"], rv(&d).to_string());
}

/// Objects written by one manager in one go share their `managedFields` and their
/// beginning in the cache (`storage/repeated.rs`); lists, gets and watch events still
/// carry every object's JSON byte for byte as it was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_that_share_parts_in_the_cache_read_back_byte_for_byte() {
    let (store, backend) = setup(CacherOptions::default());
    let options = WriteOptions::default();
    let write = |name: String| {
        let object = json!({
            "apiVersion": "test.example.com/v1",
            "kind": "Gadget",
            "metadata": {
                "name": name,
                "labels": {"app": "bulk"},
                // What the field manager of a request writes (this store is called directly).
                "managedFields": [{
                    "apiVersion": "test.example.com/v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {}},
                    "manager": "bulk", "operation": "Update", "time": "2026-11-28T13:00:00Z",
                }],
            },
            "spec": {"n": name},
        });
        let (store, options) = (&store, &options);
        async move {
            let created = store.create(&ns(), object, options).await.expect("create");
            serde_json::to_vec(&created.into_value().unwrap()).unwrap()
        }
    };
    let mut written = Vec::new();
    for i in 0..20 {
        written.push(write(format!("g-{i:02}")).await);
    }
    cache_serving(&store, &backend).await;
    let mut stream = store
        .watch(
            &ns(),
            &from(rv(&serde_json::from_slice(&written[19]).unwrap())),
        )
        .await
        .unwrap();
    written.push(write("g-20".into()).await);

    let page = store.list(&ns(), &ListOptions::default()).await.unwrap();
    let mut listed = Vec::new();
    for item in &page.items {
        let Object::Cached(cached) = item else {
            panic!("not from the cache: {item:?}")
        };
        let mut json = Vec::new();
        cached.write_json(&mut json);
        assert_eq!(json, *cached.to_json());
        assert_eq!(json, cached.encoded());
        assert_eq!(json.len(), cached.json_len());
        assert!(cached.json_len_bound() >= json.len());
        cached.with_json(|whole| assert_eq!(whole, json));
        listed.push(json);
    }
    assert_eq!(listed, written);
    let text = String::from_utf8(listed[5].clone()).unwrap();
    assert!(text.contains(r#""managedFields":[{"apiVersion":"test.example.com/v1""#));
    assert!(text.contains(r#""manager":"bulk""#), "{text}");

    let event = tokio::time::timeout(WAIT, stream.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(event.type_, WatchEventType::Added);
    let Object::Cached(cached) = &event.object else {
        panic!("not from the cache: {:?}", event.object)
    };
    assert_eq!(cached.encoded(), written[20]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watchers_share_one_backend_watch() {
    let (store, backend) = setup(CacherOptions::default());
    let a = create(&store, "a").await;
    cache_serving(&store, &backend).await;
    let watches = backend.watches.load(Ordering::SeqCst);
    let mut streams = Vec::new();
    for _ in 0..1000 {
        streams.push(store.watch(&ns(), &from(rv(&a))).await.unwrap());
    }
    let b = create(&store, "b").await;
    for stream in &mut streams {
        let (type_, object) = next(stream).await.expect("an event");
        assert_eq!(type_, WatchEventType::Added);
        assert_eq!(object, b);
    }
    assert_eq!(backend.watches.load(Ordering::SeqCst), watches);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_stops_reading_is_ended_and_the_others_go_on() {
    let options = CacherOptions {
        window: 64,
        watcher_lag: 16,
        ..CacherOptions::default()
    };
    let (store, backend) = setup(options);
    cache_serving(&store, &backend).await;
    let start = from(backend.current_revision().await.unwrap());
    let mut slow = store.watch(&ns(), &start).await.unwrap();
    let mut fast = store.watch(&ns(), &start).await.unwrap();
    // More than the watcher's own buffer and the cache's lag allowance together.
    let writes = 600;
    for i in 0..writes {
        create(&store, &format!("g{i:04}")).await;
        let (_, object) = next(&mut fast).await.expect("the fast watcher goes on");
        assert_eq!(object["metadata"]["name"], format!("g{i:04}"));
    }
    let mut seen = 0;
    while next(&mut slow).await.is_some() {
        seen += 1;
    }
    assert!(
        seen < writes,
        "the slow watcher was ended, after {seen} events"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_older_than_the_window_are_read_to_served() {
    let options = CacherOptions {
        window: 4,
        watcher_lag: 64,
        ..CacherOptions::default()
    };
    let (store, backend) = setup(options);
    let first = create(&store, "a").await;
    for i in 0..10 {
        create(&store, &format!("b{i}")).await;
    }
    cache_serving(&store, &backend).await;
    let watches = backend.watches.load(Ordering::SeqCst);
    let mut stream = store.watch(&ns(), &from(rv(&first))).await.unwrap();
    for i in 0..10 {
        let (_, object) = next(&mut stream).await.unwrap();
        assert_eq!(object["metadata"]["name"], format!("b{i}"));
    }
    assert_eq!(backend.watches.load(Ordering::SeqCst), watches + 1);
    backend
        .compact(backend.current_revision().await.unwrap())
        .await
        .unwrap();
    let mut stream = store.watch(&ns(), &from(rv(&first))).await.unwrap();
    let (type_, status) = next(&mut stream).await.unwrap();
    assert_eq!(type_, WatchEventType::Error);
    assert_eq!(status["code"], 410);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_carry_the_revision_of_writes_elsewhere() {
    let (store, backend) = setup(CacherOptions::default());
    let store = store.with_bookmark_interval(Duration::from_millis(100));
    let a = create(&store, "a").await;
    cache_serving(&store, &backend).await;
    let mut stream = store
        .watch(
            &ns(),
            &ListOptions {
                allow_watch_bookmarks: true,
                ..from(rv(&a))
            },
        )
        .await
        .unwrap();
    let other = backend
        .create("/registry/elsewhere/x", Bytes::from("{}"))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (type_, object) = next(&mut stream).await.unwrap();
        assert_eq!(type_, WatchEventType::Bookmark);
        if rv(&object) == other.mod_revision {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no bookmark at {}",
            other.mod_revision
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_tells_priority_and_fairness_once_its_initial_events_are_queued() {
    let (store, backend) = setup(CacherOptions::default());
    // More initial events than a watcher's buffer holds.
    let objects = 300;
    for i in 0..objects {
        create(&store, &format!("g{i:04}")).await;
    }
    cache_serving(&store, &backend).await;
    let (signal, mut initialized) = WatchInitialization::new();
    let ctx = ns().with_watch_initialization(signal);
    let mut watch = store.watch(&ctx, &ListOptions::default()).await.unwrap();
    // What the endpoint does once answered: nothing, the storage took the signal.
    ctx.watch_initialized();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        initialized.try_recv().is_err(),
        "not while the initial events wait for room"
    );
    for _ in 0..objects {
        let (type_, _) = next(&mut watch).await.expect("an initial event");
        assert_eq!(type_, WatchEventType::Added);
    }
    let told = tokio::time::timeout(WAIT, initialized).await;
    assert!(matches!(told, Ok(Ok(()))), "{told:?}");
}
