//! The computed storage against a provider the tests change: what a client sees through the
//! REST verbs.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::*;
use crate::registry::rest::{WatchEvent, WatchEventType};
use crate::registry::selector::{FieldSelector, LabelSelector};
use crate::runtime::{ResourceInfo, Scope};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
struct Thing {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    size: i64,
}

impl Resource for Thing {
    const INFO: ResourceInfo = ResourceInfo {
        group: "example.com",
        version: "v1",
        kind: "Thing",
        plural: "things",
        singular: "thing",
        scope: Scope::Namespaced,
        short_names: &[],
        categories: &[],
        status: false,
        scale: None,
        printer_columns: &[],
        selectable_fields: &[],
    };
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn thing(ns: &str, name: &str, size: i64) -> Thing {
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("big".to_string(), (size > 10).to_string());
    Thing {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        size,
    }
}

/// A provider whose objects the test sets, with an optional change stream.
#[derive(Default)]
struct Things {
    now: Mutex<Vec<Thing>>,
    changes: Mutex<Option<mpsc::UnboundedReceiver<Change<Thing>>>>,
    /// How many lists were asked for.
    lists: AtomicUsize,
    /// How long a list takes.
    delay: Duration,
}

impl Things {
    fn set(&self, things: Vec<Thing>) {
        *self.now.lock().unwrap() = things;
    }
}

#[async_trait]
impl Provider for Things {
    type Object = Thing;

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<Thing>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        let now = self.now.lock().unwrap().clone();
        Ok(now
            .into_iter()
            .filter(|t| {
                let ns = t.metadata.namespace.as_deref();
                // A thing without a namespace is in every namespace asked for.
                namespace.is_none() || ns.is_none() || ns == namespace
            })
            .collect())
    }

    fn changes(&self) -> Option<ChangeStream<Thing>> {
        let rx = self.changes.lock().unwrap().take()?;
        Some(Box::pin(
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
        ))
    }
}

fn storage(provider: &Arc<Things>, options: ComputedOptions) -> ComputedStorage<Things> {
    ComputedStorage::shared(provider.clone(), options)
}

async fn names(
    storage: &ComputedStorage<Things>,
    ctx: &RequestContext,
    options: &ListOptions,
) -> (Vec<String>, ObjectList) {
    let list = storage.list(ctx, options).await.unwrap();
    let names = list
        .items
        .iter()
        .map(|o| {
            o.to_value().unwrap()["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    (names, list)
}

#[tokio::test]
async fn only_get_list_and_watch_are_served() {
    let storage = storage(&Arc::default(), ComputedOptions::default());
    assert_eq!(storage.rest_storage().verbs(), ["get", "list", "watch"]);
}

#[tokio::test]
async fn lists_carry_type_meta_selectors_and_a_version_that_moves_only_with_a_change() {
    let provider = Arc::new(Things::default());
    provider.set(vec![
        thing("a", "x", 1),
        thing("a", "y", 20),
        thing("b", "z", 30),
    ]);
    let storage = storage(&provider, ComputedOptions::default());
    let all = RequestContext::cluster();
    let (all_names, first) = names(&storage, &all, &ListOptions::default()).await;
    assert_eq!(all_names, ["x", "y", "z"]);
    let x = first.items[0].to_value().unwrap();
    assert_eq!(x["apiVersion"], "example.com/v1");
    assert_eq!(x["kind"], "Thing");
    assert!(x["metadata"]["uid"].is_string());
    assert!(x["metadata"]["creationTimestamp"].is_string());

    let (again, second) = names(&storage, &all, &ListOptions::default()).await;
    assert_eq!(again, all_names);
    assert_eq!(
        second.resource_version, first.resource_version,
        "nothing changed"
    );
    assert_eq!(second.items[0].to_value().unwrap(), x);

    let big = ListOptions {
        label_selector: Some(LabelSelector::parse("big=true").unwrap()),
        ..ListOptions::default()
    };
    assert_eq!(names(&storage, &all, &big).await.0, ["y", "z"]);
    let named = ListOptions {
        field_selector: Some(FieldSelector::parse("metadata.name=y").unwrap()),
        ..ListOptions::default()
    };
    assert_eq!(names(&storage, &all, &named).await.0, ["y"]);
    let in_a = RequestContext::namespaced("a");
    assert_eq!(
        names(&storage, &in_a, &ListOptions::default()).await.0,
        ["x", "y"]
    );

    provider.set(vec![
        thing("a", "x", 2),
        thing("a", "y", 20),
        thing("b", "z", 30),
    ]);
    let (_, third) = names(&storage, &all, &ListOptions::default()).await;
    assert!(
        third.resource_version.parse::<i64>().unwrap()
            > second.resource_version.parse::<i64>().unwrap()
    );
    let x2 = third.items[0].to_value().unwrap();
    assert_eq!(x2["size"], 2);
    assert_eq!(x2["metadata"]["uid"], x["metadata"]["uid"], "the uid stays");
    assert_ne!(
        x2["metadata"]["resourceVersion"],
        x["metadata"]["resourceVersion"]
    );
    let y = &third.items[1].to_value().unwrap();
    assert_eq!(
        y["metadata"]["resourceVersion"],
        second.items[1].to_value().unwrap()["metadata"]["resourceVersion"],
        "y did not change"
    );
}

#[tokio::test]
async fn pages_follow_continue_and_an_expired_token_is_410() {
    let provider = Arc::new(Things::default());
    provider.set((0..5).map(|i| thing("a", &format!("t{i}"), i)).collect());
    let storage = storage(&provider, ComputedOptions::default());
    let ctx = RequestContext::namespaced("a");
    let mut seen = Vec::new();
    let mut options = ListOptions {
        limit: 2,
        ..ListOptions::default()
    };
    let mut first_token = None;
    for _ in 0..5 {
        let (page, list) = names(&storage, &ctx, &options).await;
        seen.extend(page);
        first_token.get_or_insert(list.continue_token.clone());
        match list.continue_token {
            Some(token) => options.continue_token = Some(token),
            None => break,
        }
    }
    assert_eq!(seen, ["t0", "t1", "t2", "t3", "t4"]);

    // A change, then the history of the first page's revision is forgotten.
    provider.set(vec![thing("a", "t0", 9)]);
    names(&storage, &ctx, &ListOptions::default()).await;
    let backend = &storage.mirror.backend;
    backend
        .compact(backend.current_revision().await.unwrap())
        .await
        .unwrap();
    let expired = ListOptions {
        limit: 2,
        continue_token: first_token.flatten(),
        ..ListOptions::default()
    };
    let error = storage.list(&ctx, &expired).await.unwrap_err();
    assert_eq!(error.code(), 410, "{error:?}");
}

#[tokio::test]
async fn get_is_fresh_and_404_when_the_provider_has_none() {
    let provider = Arc::new(Things::default());
    provider.set(vec![thing("a", "x", 1)]);
    let storage = storage(&provider, ComputedOptions::default());
    let ctx = RequestContext::namespaced("a");
    let x = storage
        .get(&ctx, "x", &GetOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (x["kind"].as_str(), x["size"].as_i64()),
        (Some("Thing"), Some(1))
    );
    provider.set(vec![]);
    let error = storage
        .get(&ctx, "x", &GetOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), 404);
    assert_eq!(error.to_json()["reason"], "NotFound");
    let elsewhere = RequestContext::namespaced("b");
    assert_eq!(
        storage
            .get(&elsewhere, "x", &GetOptions::default())
            .await
            .unwrap_err()
            .code(),
        404
    );
}

#[tokio::test]
async fn a_provider_breaking_the_rules_is_a_500_that_names_it() {
    let provider = Arc::new(Things::default());
    let mut nameless = thing("a", "x", 1);
    nameless.metadata.name = None;
    provider.set(vec![nameless]);
    let storage = storage(&provider, ComputedOptions::default());
    let error = storage
        .list(&RequestContext::namespaced("a"), &ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), 500);
    assert!(
        error.message().contains("provider of things.example.com"),
        "{}",
        error.message()
    );
}

async fn next_event(events: &mut WatchStream) -> (WatchEventType, Value) {
    loop {
        let event: WatchEvent = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event within 10 s")
            .expect("the watch goes on");
        if event.type_ != WatchEventType::Bookmark {
            return (event.type_, event.object.to_value().unwrap());
        }
    }
}

#[tokio::test]
async fn a_relist_shows_watchers_what_changed() {
    let provider = Arc::new(Things::default());
    provider.set(vec![thing("a", "x", 1)]);
    let options = ComputedOptions::default().relist_interval(Duration::from_millis(20));
    let storage = storage(&provider, options);
    let ctx = RequestContext::cluster();
    let mut events = storage.watch(&ctx, &ListOptions::default()).await.unwrap();
    let (type_, x) = next_event(&mut events).await;
    assert_eq!(
        (type_, x["metadata"]["name"].as_str()),
        (WatchEventType::Added, Some("x"))
    );

    provider.set(vec![thing("a", "x", 2), thing("b", "y", 3)]);
    let mut changes = [next_event(&mut events).await, next_event(&mut events).await];
    changes.sort_by_key(|(_, o)| o["metadata"]["name"].as_str().unwrap().to_string());
    assert_eq!(
        (changes[0].0, changes[0].1["size"].as_i64()),
        (WatchEventType::Modified, Some(2))
    );
    assert_eq!(changes[1].0, WatchEventType::Added);
    provider.set(vec![thing("b", "y", 3)]);
    let (type_, gone) = next_event(&mut events).await;
    assert_eq!(
        (type_, gone["metadata"]["name"].as_str()),
        (WatchEventType::Deleted, Some("x"))
    );

    assert_eq!(*storage.watchers.borrow(), 1);
    drop(events);
    // The watcher count drops when the stream's task notices (bounded wait).
    let gone = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while *storage.watchers.borrow() != 0 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    assert!(gone.await.is_ok(), "the watcher is still counted");
}

#[tokio::test]
async fn pushed_changes_reach_watchers_without_a_relist() {
    let provider = Arc::new(Things::default());
    let (tx, rx) = mpsc::unbounded_channel();
    *provider.changes.lock().unwrap() = Some(rx);
    let storage = storage(&provider, ComputedOptions::default());
    let ctx = RequestContext::namespaced("a");
    let mut events = storage.watch(&ctx, &ListOptions::default()).await.unwrap();
    let start = storage.mirror.backend.current_revision().await.unwrap();
    tx.send(Change::Applied(thing("a", "x", 1))).unwrap();
    let (type_, x) = next_event(&mut events).await;
    assert_eq!(
        (type_, x["size"].as_i64()),
        (WatchEventType::Added, Some(1))
    );
    // Another namespace's object is not this watcher's.
    tx.send(Change::Applied(thing("b", "y", 1))).unwrap();
    tx.send(Change::Applied(thing("a", "x", 5))).unwrap();
    let (type_, x) = next_event(&mut events).await;
    assert_eq!(
        (type_, x["size"].as_i64()),
        (WatchEventType::Modified, Some(5))
    );
    tx.send(Change::Deleted {
        namespace: Some("a".into()),
        name: "x".into(),
    })
    .unwrap();
    let (type_, _) = next_event(&mut events).await;
    assert_eq!(type_, WatchEventType::Deleted);
    let now = storage.mirror.backend.current_revision().await.unwrap();
    assert_eq!(
        now - start,
        4,
        "three changes and the other namespace's object"
    );
}

#[tokio::test]
async fn concurrent_reads_share_a_provider_call_and_later_ones_ask_again() {
    let provider = Arc::new(Things {
        delay: Duration::from_millis(50),
        ..Things::default()
    });
    provider.set(vec![thing("a", "x", 1)]);
    let storage = storage(&provider, ComputedOptions::default());
    let ctx = RequestContext::namespaced("a");
    let options = ListOptions::default();
    let reads = (0..10).map(|_| storage.list(&ctx, &options));
    for list in futures::future::join_all(reads).await {
        assert_eq!(list.unwrap().items.len(), 1);
    }
    // The first read's call, and one that began after all the others had arrived.
    assert_eq!(provider.lists.load(Ordering::SeqCst), 2);
    provider.set(vec![]);
    assert!(
        storage
            .list(&ctx, &ListOptions::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let get = storage.get(&ctx, "x", &GetOptions::default()).await;
    assert_eq!(get.unwrap_err().code(), 404);
    assert_eq!(provider.lists.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn an_object_answered_for_a_namespace_is_in_it() {
    let provider = Arc::new(Things::default());
    let mut homeless = thing("a", "x", 1);
    homeless.metadata.namespace = None;
    provider.set(vec![homeless]);
    let storage = storage(&provider, ComputedOptions::default());
    let (in_a, options) = (RequestContext::namespaced("a"), ListOptions::default());
    let x = storage.list(&in_a, &options).await.unwrap().items[0]
        .to_value()
        .unwrap();
    assert_eq!(x["metadata"]["namespace"], "a");
    // Across namespaces it has none: the provider's mistake.
    let all = storage.list(&RequestContext::cluster(), &options).await;
    assert_eq!(all.unwrap_err().code(), 500);
}

#[tokio::test]
async fn after_a_restart_versions_go_on_rising_and_an_old_one_is_expired() {
    let provider = Arc::new(Things::default());
    provider.set(vec![thing("a", "x", 1)]);
    let ctx = RequestContext::cluster();
    let options = ListOptions::default();
    let before = storage(&provider, ComputedOptions::default());
    let old = before.list(&ctx, &options).await.unwrap().resource_version;
    drop(before);
    tokio::time::sleep(Duration::from_millis(2)).await;
    // The server restarted: a new mirror of the same provider.
    let after = storage(&provider, ComputedOptions::default());
    let new = after.list(&ctx, &options).await.unwrap().resource_version;
    assert!(
        new.parse::<i64>().unwrap() > old.parse::<i64>().unwrap(),
        "{new} after {old}"
    );
    let resume = ListOptions {
        resource_version: Some(old),
        ..ListOptions::default()
    };
    let mut events = after.watch(&ctx, &resume).await.unwrap();
    let (type_, status) = next_event(&mut events).await;
    assert_eq!(
        (type_, status["code"].as_i64()),
        (WatchEventType::Error, Some(410))
    );
}

/// Waits (at most 10 s) until `cached` answers, and gives its answer.
async fn once_cached<T>(mut cached: impl FnMut() -> Option<Result<T>>) -> T {
    for _ in 0..200 {
        if let Some(answer) = cached() {
            return answer.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the reader's cache did not load within 10 s");
}

fn names_of(things: &[Thing]) -> Vec<&str> {
    things
        .iter()
        .map(|t| t.metadata.name.as_deref().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_reads_the_providers_objects_fresh_and_from_the_cache() {
    let provider = Arc::new(Things::default());
    provider.set(vec![thing("a", "x", 1), thing("b", "y", 2)]);
    let options = ComputedOptions::default().relist_interval(Duration::from_millis(50));
    let storage = storage(&provider, options);
    let reader = storage.reader();

    // get and list ask the provider first, as a request does.
    assert_eq!(names_of(&reader.list(None).await.unwrap()), ["x", "y"]);
    assert_eq!(names_of(&reader.list(Some("a")).await.unwrap()), ["x"]);
    let x = reader.get(Some("a"), "x").await.unwrap().unwrap();
    assert_eq!((x.size, x.metadata.resource_version.is_some()), (1, true));
    assert!(reader.get(Some("a"), "y").await.unwrap().is_none());
    provider.set(vec![thing("a", "x", 5), thing("b", "y", 2)]);
    assert_eq!(reader.get(Some("a"), "x").await.unwrap().unwrap().size, 5);

    // The cache: the provider's objects, then what they become, within a re-list or two.
    let cached = once_cached(|| reader.list_cached(None)).await;
    assert_eq!(names_of(&cached), ["x", "y"]);
    // The first full list may predate the change to 5: a re-list brings it.
    let mut size = None;
    for _ in 0..200 {
        size = once_cached(|| reader.get_cached(Some("a"), "x"))
            .await
            .map(|x| x.size);
        if size == Some(5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(size, Some(5));
    provider.set(vec![thing("a", "x", 5), thing("b", "z", 3)]);
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen = names_of(&reader.list_cached(None).unwrap().unwrap())
            .into_iter()
            .map(str::to_string)
            .collect();
        if seen == ["x", "z"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, ["x", "z"], "the cache follows the provider");
    assert_eq!(
        names_of(&reader.list_cached(Some("b")).unwrap().unwrap()),
        ["z"]
    );
    assert!(
        reader
            .get_cached(Some("b"), "y")
            .unwrap()
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_cache_is_none_until_a_full_list_and_without_a_watch_cache() {
    let provider = Arc::new(Things {
        delay: Duration::from_millis(300),
        ..Things::default()
    });
    provider.set(vec![thing("a", "x", 1)]);
    // A re-list far away: only the reader's own first list can fill the cache.
    let options = ComputedOptions::default().relist_interval(Duration::from_secs(3600));
    let reader = storage(&provider, options.clone()).reader();
    assert!(reader.list_cached(None).is_none(), "nothing is listed yet");
    assert!(reader.get_cached(Some("a"), "x").is_none());
    let cached = once_cached(|| reader.list_cached(None)).await;
    assert_eq!(names_of(&cached), ["x"]);

    // A computed resource without a watch cache: never, as a stored one without.
    let uncached = storage(&provider, options.watch_cache(false)).reader();
    uncached.list(None).await.unwrap();
    assert!(uncached.list_cached(None).is_none());
    assert!(uncached.get_cached(Some("a"), "x").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_of_the_cache_counts_as_a_watch_while_it_lives() {
    let provider = Arc::new(Things::default());
    let options = ComputedOptions::default().relist_interval(Duration::from_millis(20));
    let storage = storage(&provider, options);
    let reader = storage.reader();
    reader.list(None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = provider.lists.load(Ordering::SeqCst);
    assert_eq!(before, 1, "no re-list while nobody reads the cache");
    let _ = reader.list_cached(None);
    let follower = reader.clone();
    drop(reader);
    let mut relisted = false;
    for _ in 0..500 {
        if provider.lists.load(Ordering::SeqCst) >= before + 3 {
            relisted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(relisted, "re-lists while a reader reads the cache");
    drop(follower);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopped = provider.lists.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        provider.lists.load(Ordering::SeqCst) <= stopped + 1,
        "no re-lists once the last reader is dropped"
    );
}
