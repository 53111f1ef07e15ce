//! A computed kind read in process, as the book shows: an admission plugin, a strategy and a
//! post-start hook read the provider's objects through `reader::<T>()`; and a computed kind
//! served in two versions, the second converted from the first, answers in both.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use extension_apiserver::prelude::*;
use extension_apiserver::runtime::convert::{ConversionError, Convertible};
use extension_apiserver::server::PluginContext;
use extension_apiserver_testing::TestServer;
use futures::StreamExt;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

const GROUP: &str = "quotas.example.com";

/// A quota: how many of something an order may ask for. Computed, never stored.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(group = "quotas.example.com", version = "v1", kind = "Quota")]
pub struct Quota {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub max: i64,
}

/// The same quota in v2: `max` is called `limit`. Served converted from v1.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(group = "quotas.example.com", version = "v2", kind = "Quota")]
pub struct QuotaV2 {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub limit: i64,
}

impl Convertible<Quota> for QuotaV2 {
    fn into_hub(self) -> Result<Quota, ConversionError> {
        Ok(Quota {
            metadata: self.metadata,
            max: self.limit,
        })
    }

    fn from_hub(hub: Quota) -> Result<Self, ConversionError> {
        Ok(QuotaV2 {
            metadata: hub.metadata,
            limit: hub.max,
        })
    }
}

/// An order of `count` under the quota named `quota`. Stored; its strategy refuses a count
/// over the quota's max.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "quotas.example.com",
    version = "v1",
    kind = "Order",
    namespaced,
    custom_strategy
)]
pub struct Order {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub quota: String,
    #[serde(default)]
    pub count: i64,
}

impl Strategy for Order {
    /// As the book's strategy reads another resource: the watch cache, without waiting.
    fn validate(&self, ctx: &StrategyContext<'_>) -> Vec<FieldError> {
        let quota = ctx
            .reader::<Quota>()
            .and_then(|quotas| quotas.get_cached(None, &self.quota));
        match quota {
            Some(Ok(Some(quota))) if self.count > quota.max => {
                vec![FieldError::invalid("count", self.count, "over the quota")]
            }
            _ => Vec::new(),
        }
    }
}

/// The quotas now, as the test sets them.
#[derive(Clone, Default)]
struct Quotas(Arc<Mutex<Vec<Quota>>>);

impl Quotas {
    fn set(&self, quotas: &[(&str, i64)]) {
        *self.0.lock().unwrap() = quotas
            .iter()
            .map(|(name, max)| Quota {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    ..ObjectMeta::default()
                },
                max: *max,
            })
            .collect();
    }
}

#[async_trait]
impl Provider for Quotas {
    type Object = Quota;

    async fn list(&self, _namespace: Option<&str>) -> extension_apiserver::Result<Vec<Quota>> {
        Ok(self.0.lock().unwrap().clone())
    }
}

/// Refuses an order whose quota does not exist, reading quotas as the book's plugin reads
/// fischers: the watch cache when it can, else a consistent list.
struct QuotaExists {
    quotas: Reader<Quota>,
}

#[async_trait]
impl AdmissionPlugin for QuotaExists {
    fn name(&self) -> &str {
        "QuotaExists"
    }

    fn handles(&self, operation: Operation) -> bool {
        operation == Operation::Create
    }
    async fn validate(&self, attributes: &Attributes) -> extension_apiserver::Result<()> {
        let Some(order) = attributes
            .object_as::<Order>()?
            .filter(|_| attributes.is::<Order>())
        else {
            return Ok(());
        };
        let quotas = match self.quotas.list_cached(None) {
            Some(cached) => cached?,
            None => self.quotas.list(None).await?,
        };
        if quotas
            .iter()
            .any(|q| q.metadata.name.as_deref() == Some(&order.quota))
        {
            return Ok(());
        }
        Err(attributes.forbidden(format!("there is no quota {:?}", order.quota)))
    }
}

fn group(quotas: &Quotas) -> APIGroup {
    let quotas = quotas.clone();
    let options = ComputedOptions::default().relist_interval(Duration::from_millis(100));
    APIGroup::new(GROUP)
        .version("v1", |v| {
            v.resource::<Order>()
                .computed_with(options, move |_| quotas.clone())
        })
        .version("v2", |v| v.converted::<QuotaV2, Quota>())
}

fn api(server: &TestServer, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    match kind {
        "Order" => Api::namespaced_with(server.client(), "default", &resource),
        _ => Api::all_with(server.client(), &resource),
    }
}

fn order(name: &str, quota: &str, count: i64) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Order",
        "metadata": {"name": name, "namespace": "default"},
        "quota": quota, "count": count,
    }))
    .unwrap()
}

/// The HTTP status of a refused create.
fn refused(result: kube::Result<DynamicObject>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_a_strategy_and_a_hook_read_the_providers_objects() {
    let quotas = Quotas::default();
    quotas.set(&[("gold", 10), ("silver", 2)]);
    let seen_by_hook = Arc::new(Mutex::new(None));
    let hook_saw = seen_by_hook.clone();
    let server = TestServer::builder()
        .group(group(&quotas))
        .extend(move |server| {
            server
                .admission_plugin(|ctx: &PluginContext<'_>| {
                    Plugin::validating(QuotaExists {
                        quotas: ctx.storage.reader::<Quota>(),
                    })
                })
                .post_start_hook("read-quotas", move |ctx| async move {
                    let quotas = ctx.reader::<Quota>().list(None).await?;
                    let names: Vec<_> =
                        quotas.into_iter().filter_map(|q| q.metadata.name).collect();
                    *hook_saw.lock().unwrap() = Some(names);
                    Ok(())
                })
        })
        .start()
        .await;
    let orders = api(&server, "v1", "Order", "orders");
    let create = PostParams::default();

    // The plugin finds the provider's quotas.
    orders
        .create(&create, &order("first", "gold", 1))
        .await
        .unwrap();
    let missing = orders.create(&create, &order("lost", "bronze", 1)).await;
    assert_eq!(refused(missing), 403);

    // As the provider changes, so does what the plugin reads (within a re-list or two).
    quotas.set(&[("gold", 10), ("silver", 2), ("bronze", 1)]);
    let mut admitted = false;
    for attempt in 0..100 {
        let name = format!("bronze-{attempt}");
        if orders
            .create(&create, &order(&name, "bronze", 1))
            .await
            .is_ok()
        {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        admitted,
        "a new quota must be seen by the plugin within 10 s"
    );

    // The strategy reads the quota's max from the cache: over it is 422 once the cache has it.
    let mut invalid = false;
    for attempt in 0..100 {
        let name = format!("big-{attempt}");
        match orders.create(&create, &order(&name, "silver", 3)).await {
            Err(kube::Error::Api(status)) if status.code == 422 => {
                assert!(status.message.contains("over the quota"), "{status:?}");
                invalid = true;
                break;
            }
            Err(e) => panic!("{e}"),
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(
        invalid,
        "the strategy must see silver's max of 2 within 10 s"
    );

    let hook_saw = seen_by_hook.lock().unwrap().clone();
    assert_eq!(
        hook_saw,
        Some(vec!["gold".to_string(), "silver".to_string()])
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computed_kind_answers_in_both_its_versions() {
    let quotas = Quotas::default();
    quotas.set(&[("gold", 10), ("silver", 2)]);
    let server = TestServer::builder().group(group(&quotas)).start().await;
    let v1 = api(&server, "v1", "Quota", "quotas");
    let v2 = api(&server, "v2", "Quota", "quotas");

    let listed = v2.list(&ListParams::default()).await.unwrap();
    let items: Vec<_> = listed
        .items
        .iter()
        .map(|q| (q.metadata.name.clone().unwrap(), q.data["limit"].clone()))
        .collect();
    assert_eq!(
        items,
        [
            ("gold".to_string(), json!(10)),
            ("silver".to_string(), json!(2))
        ]
    );
    let gold_v2 = v2.get("gold").await.unwrap();
    let gold_v1 = v1.get("gold").await.unwrap();
    let types = |o: &DynamicObject| o.types.as_ref().map(|t| t.api_version.clone());
    assert_eq!(types(&gold_v2).as_deref(), Some("quotas.example.com/v2"));
    assert_eq!(types(&gold_v1).as_deref(), Some("quotas.example.com/v1"));
    assert_eq!(
        (&gold_v2.data["limit"], &gold_v1.data["max"]),
        (&json!(10), &json!(10))
    );
    assert!(gold_v2.data.get("max").is_none(), "{:?}", gold_v2.data);
    // One mirror: the same resourceVersion in both.
    assert_eq!(
        gold_v2.metadata.resource_version,
        gold_v1.metadata.resource_version
    );
    assert_eq!(refused(v2.get("bronze").await), 404);

    // A watch of v2: the objects, the initial-events-end bookmark, then a change, all in v2.
    let params = WatchParams::default().initial_events().timeout(10);
    let mut events = v2.watch(&params, "0").await.unwrap().boxed();
    let mut added = Vec::new();
    let bookmark = loop {
        match tokio::time::timeout(Duration::from_secs(10), events.next()).await {
            Ok(Some(Ok(WatchEvent::Added(o)))) => {
                assert_eq!(types(&o).as_deref(), Some("quotas.example.com/v2"));
                added.push(o.metadata.name.unwrap());
            }
            Ok(Some(Ok(WatchEvent::Bookmark(b)))) => break b,
            other => panic!("expected ADDED events then a BOOKMARK, got {other:?}"),
        }
    };
    added.sort();
    assert_eq!(added, ["gold", "silver"]);
    assert_eq!(bookmark.types.api_version, "quotas.example.com/v2");
    assert_eq!(
        bookmark
            .metadata
            .annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
    quotas.set(&[("gold", 20), ("silver", 2)]);
    let changed = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
    match changed {
        Ok(Some(Ok(WatchEvent::Modified(o)))) => {
            assert_eq!(types(&o).as_deref(), Some("quotas.example.com/v2"));
            assert_eq!(o.data["limit"], json!(20));
        }
        other => panic!("expected MODIFIED gold in v2, got {other:?}"),
    }

    // Read-only in both versions.
    let write: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v2"), "kind": "Quota",
        "metadata": {"name": "new"}, "limit": 1,
    }))
    .unwrap();
    assert_eq!(
        refused(v2.create(&PostParams::default(), &write).await),
        405
    );
    let discovery: Value = server
        .client()
        .request(
            http::Request::get(format!("/apis/{GROUP}/v2"))
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let quota = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "quotas")
        .cloned();
    assert_eq!(
        quota.map(|q| q["verbs"].clone()),
        Some(json!(["get", "list", "watch"]))
    );
    server.stop().await;
}
