//! What each served version has of its own over one storage: field selectors in its own field
//! names (evaluated on the object as that version shows it, pages and revisions still the
//! store's), pages that go on from one version in another, its own strategy beside the
//! storage version's, and watch events converted once per version, not once per watcher.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::registry::strategy::{Strategy, StrategyContext};
use extension_apiserver::runtime::convert::{ConversionError, Convertible};
use extension_apiserver::server::APIGroup;
use extension_apiserver_testing::TestServer;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The storage version: `size`, selectable.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "perversion.example.com",
    version = "v2",
    kind = "Gadget",
    namespaced,
    selectable_field = ".spec.size"
)]
pub struct GadgetV2 {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SpecV2,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecV2 {
    #[serde(default)]
    pub size: i64,
}

/// The older version calls it `width`, selectable under that name; its own strategy warns
/// that it is old and rounds widths to even numbers.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "perversion.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    selectable_field = ".spec.width",
    custom_strategy
)]
pub struct GadgetV1 {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SpecV1,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecV1 {
    #[serde(default)]
    pub width: i64,
}

impl Strategy for GadgetV1 {
    fn warnings_on_create(&self, _: &StrategyContext<'_>) -> Vec<String> {
        vec!["perversion.example.com/v1 Gadget is old; use v2".into()]
    }

    fn canonicalize(&mut self) {
        self.spec.width += self.spec.width % 2;
    }
}

/// How many objects named `counted-…` were converted from the hub to v1 (tests of this file
/// run at once: only one of them uses the name).
static TO_V1: AtomicUsize = AtomicUsize::new(0);

impl Convertible<GadgetV2> for GadgetV1 {
    fn into_hub(self) -> Result<GadgetV2, ConversionError> {
        Ok(GadgetV2 {
            metadata: self.metadata,
            spec: SpecV2 {
                size: self.spec.width,
            },
        })
    }

    fn from_hub(hub: GadgetV2) -> Result<Self, ConversionError> {
        if hub
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .starts_with("counted-")
        {
            TO_V1.fetch_add(1, Ordering::SeqCst);
        }
        Ok(GadgetV1 {
            metadata: hub.metadata,
            spec: SpecV1 {
                width: hub.spec.size,
            },
        })
    }
}

fn group() -> APIGroup {
    APIGroup::new("perversion.example.com")
        .version("v2", |v| v.resource::<GadgetV2>())
        .version("v1", |v| v.converted::<GadgetV1, GadgetV2>())
}

fn gadget(name: &str, size: i64) -> GadgetV2 {
    GadgetV2 {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: SpecV2 { size },
    }
}

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items
        .iter()
        .map(|o| o.meta().name.clone().unwrap())
        .collect()
}

/// The message of a refused request.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected a Status, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selectors_speak_each_versions_own_fields() {
    let server = TestServer::builder().group(group()).start().await;
    let client = server.client();
    let v2: Api<GadgetV2> = Api::namespaced(client.clone(), "default");
    let v1: Api<GadgetV1> = Api::namespaced(client.clone(), "default");
    for (name, size) in [("a", 1), ("b", 3), ("c", 3), ("d", 3), ("e", 5)] {
        v2.create(&PostParams::default(), &gadget(name, size))
            .await
            .unwrap();
    }
    let wide = ListParams::default().fields("spec.width=3");
    assert_eq!(names(&v1.list(&wide).await.unwrap().items), ["b", "c", "d"]);
    let big = ListParams::default().fields("spec.size=3");
    assert_eq!(names(&v2.list(&big).await.unwrap().items), ["b", "c", "d"]);

    // Pages count selected objects only, and the next page resumes after the last one.
    let first = v1.list(&wide.clone().limit(2)).await.unwrap();
    assert_eq!(names(&first.items), ["b", "c"]);
    let token = first.metadata.continue_.clone().unwrap();
    let rest = v1.list(&wide.clone().limit(2).continue_token(&token)).await;
    assert_eq!(names(&rest.unwrap().items), ["d"]);

    // A page started in one version goes on in the other, at the same revision.
    let first = v2.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first.items), ["a", "b"]);
    let token = first.metadata.continue_.clone().unwrap();
    let params = ListParams::default().limit(10).continue_token(&token);
    let rest = v1.list(&params).await.unwrap();
    assert_eq!(names(&rest.items), ["c", "d", "e"]);
    assert_eq!(rest.items[2].spec.width, 5);
    assert_eq!(
        rest.metadata.resource_version,
        first.metadata.resource_version
    );

    // A field of the other version is not selectable here, as kube-apiserver answers.
    let (code, message) = refusal(v1.list(&big).await);
    assert_eq!(code, 400);
    assert!(message.contains("spec.size"), "{message}");
    let (code, _) = refusal(v2.list(&wide).await);
    assert_eq!(code, 400);

    // A watch in v1 with a v1 field selector: an object moving in is ADDED, out DELETED.
    let params = WatchParams::default().fields("spec.width=7").timeout(10);
    let rv = v1.list(&ListParams::default()).await.unwrap().metadata;
    let mut events = v1
        .watch(&params, rv.resource_version.as_deref().unwrap())
        .await
        .unwrap()
        .boxed();
    let patch = |size: i64| serde_json::json!({"spec": {"size": size}});
    let merge = kube::api::PatchParams::default();
    v2.patch("a", &merge, &kube::api::Patch::Merge(patch(7)))
        .await
        .unwrap();
    v2.patch("a", &merge, &kube::api::Patch::Merge(patch(8)))
        .await
        .unwrap();
    let seen: Vec<(String, i64)> = tokio::time::timeout(Duration::from_secs(10), async {
        let mut seen = Vec::new();
        while seen.len() < 2 {
            match events.try_next().await.unwrap().unwrap() {
                WatchEvent::Added(g) => seen.push(("ADDED".into(), g.spec.width)),
                WatchEvent::Deleted(g) => seen.push(("DELETED".into(), g.spec.width)),
                other => panic!("unexpected {other:?}"),
            }
        }
        seen
    })
    .await
    .unwrap();
    assert_eq!(seen, [("ADDED".into(), 7), ("DELETED".into(), 7)]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_version_runs_its_own_strategy_too() {
    let server = TestServer::builder().group(group()).start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.yaml");
    let yaml = "apiVersion: perversion.example.com/v1\nkind: Gadget\nmetadata:\n  name: odd\n  namespace: default\nspec:\n  width: 3\n";
    std::fs::write(&file, yaml).unwrap();
    let out = server.kubectl(&["create", "-f", &file.display().to_string()]);
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("Warning: perversion.example.com/v1 Gadget is old; use v2"),
        "{}",
        out.stderr
    );
    let v2: Api<GadgetV2> = Api::namespaced(server.client(), "default");
    assert_eq!(
        v2.get("odd").await.unwrap().spec.size,
        4,
        "canonicalized as v1"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_event_is_converted_once_for_all_watchers_of_a_version() {
    const WATCHERS: usize = 6;
    const WRITES: usize = 4;
    let server = TestServer::builder().group(group()).start().await;
    let client = server.client();
    let v2: Api<GadgetV2> = Api::namespaced(client.clone(), "default");
    let v1: Api<GadgetV1> = Api::namespaced(client.clone(), "default");
    let rv = v2.list(&ListParams::default()).await.unwrap().metadata;
    let rv = rv.resource_version.unwrap();
    let mut watches = Vec::new();
    for _ in 0..WATCHERS {
        let params = WatchParams::default().timeout(20);
        watches.push(v1.watch(&params, &rv).await.unwrap().boxed());
    }
    let before = TO_V1.load(Ordering::SeqCst);
    for i in 0..WRITES {
        let name = format!("counted-{i}");
        v2.create(&PostParams::default(), &gadget(&name, i as i64))
            .await
            .unwrap();
    }
    for events in &mut watches {
        let widths: Vec<i64> = tokio::time::timeout(Duration::from_secs(10), async {
            let mut widths = Vec::new();
            while widths.len() < WRITES {
                match events.try_next().await.unwrap().unwrap() {
                    WatchEvent::Added(g) => widths.push(g.spec.width),
                    WatchEvent::Bookmark(_) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            widths
        })
        .await
        .unwrap();
        assert_eq!(widths, [0, 1, 2, 3]);
    }
    let conversions = TO_V1.load(Ordering::SeqCst) - before;
    assert_eq!(
        conversions, WRITES,
        "{WATCHERS} watchers of v1 saw {WRITES} events: each converted once"
    );
    server.stop().await;
}
