//! `custom.metrics.k8s.io` and `external.metrics.k8s.io` served from providers, on a real
//! server over TLS with kube-rs: every path shape of both custom versions and the external
//! API, the selectors and described objects the provider receives, 404/400/405 answers,
//! discovery following the providers' metrics (plain and aggregated, ETags), OpenAPI v2 and
//! v3, APIService registration, and the SubjectAccessReviews of delegated authorization.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use extension_apiserver::aggregator::AggregatorOptions;
use extension_apiserver::k8s_openapi::api::core::v1::ObjectReference;
use extension_apiserver::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use extension_apiserver::metrics_apis::{
    CustomMetricInfo, CustomMetricsProvider, DescribedObjects, ExternalMetricInfo,
    ExternalMetricValue, ExternalMetricsProvider, GroupResource, MetricValue,
};
use extension_apiserver::registry::selector::LabelSelector;
use extension_apiserver::server::{APIServer, ServerOptions, StorageBackendKind};
use extension_apiserver::{APIGroup, Resource};
use extension_apiserver_testing::TestServer;
use extension_apiserver_testing::fake_core::{AuthenticationConfig, FakeCore, Rule, TokenUser};
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const CUSTOM: &str = "/apis/custom.metrics.k8s.io";
const EXTERNAL: &str = "/apis/external.metrics.k8s.io/v1beta1";
const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V2BETA1: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// What a provider was asked: the metric, the objects (`ns/name`, or `ns/*?selector`) and the
/// metric label selector, as strings.
type Asked = Vec<(String, String, String)>;

/// Pods `p1` (app=web) and `p2` (app=db) of every namespace; metrics the test can change.
#[derive(Clone)]
struct Metrics {
    custom: Arc<Mutex<Vec<CustomMetricInfo>>>,
    external: Arc<Mutex<Vec<ExternalMetricInfo>>>,
    asked: Arc<Mutex<Asked>>,
}

fn info(group: &str, resource: &str, namespaced: bool, metric: &str) -> CustomMetricInfo {
    CustomMetricInfo {
        group_resource: GroupResource::new(group, resource),
        namespaced,
        metric: metric.into(),
    }
}

impl Metrics {
    fn new() -> Self {
        Self {
            custom: Arc::new(Mutex::new(vec![
                info("", "pods", true, "hits"),
                info("", "nodes", false, "load"),
                info("", "namespaces", false, "quota"),
                info("apps", "deployments", true, "wanted"),
            ])),
            external: Arc::new(Mutex::new(vec![ExternalMetricInfo {
                metric: "queue_length".into(),
            }])),
            asked: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn asked(&self) -> Asked {
        std::mem::take(&mut *self.asked.lock().unwrap())
    }
}

fn time() -> Time {
    Time(jiff::Timestamp::from_second(1_700_000_000).unwrap())
}

fn value(kind: &str, namespace: Option<&str>, name: &str, metric: &str) -> MetricValue {
    MetricValue {
        described_object: ObjectReference {
            kind: Some(kind.into()),
            namespace: namespace.map(str::to_string),
            name: Some(name.into()),
            api_version: Some("v1".into()),
            ..ObjectReference::default()
        },
        metric: metric.into(),
        selector: None,
        timestamp: time(),
        window: Some(Duration::from_secs(30)),
        value: Quantity(format!("{}", name.len() * 100)),
    }
}

#[extension_apiserver::async_trait]
impl CustomMetricsProvider for Metrics {
    fn list_metrics(&self) -> Vec<CustomMetricInfo> {
        self.custom.lock().unwrap().clone()
    }

    async fn metric_values(
        &self,
        info: &CustomMetricInfo,
        objects: DescribedObjects<'_>,
        metric_selector: &LabelSelector,
    ) -> extension_apiserver::Result<Vec<MetricValue>> {
        let kind = match info.group_resource.resource.as_str() {
            "pods" => "Pod",
            "nodes" => "Node",
            "namespaces" => "Namespace",
            _ => "Deployment",
        };
        let (described, values) = match objects {
            DescribedObjects::Named { namespace, name } => {
                let described = format!("{}/{name}", namespace.unwrap_or("-"));
                if name == "missing" {
                    (described, Vec::new())
                } else {
                    (described, vec![value(kind, namespace, name, &info.metric)])
                }
            }
            DescribedObjects::Selected {
                namespace,
                selector,
            } => {
                let described = format!("{}/*?{selector}", namespace.unwrap_or("-"));
                let pods = [("p1", "web"), ("p2", "db")];
                let values = pods
                    .iter()
                    .filter(|(_, app)| selector.matches(&[("app".into(), app.to_string())].into()))
                    .map(|(name, _)| value(kind, namespace, name, &info.metric))
                    .collect();
                (described, values)
            }
        };
        let asked = (info.metric.clone(), described, metric_selector.to_string());
        self.asked.lock().unwrap().push(asked);
        Ok(values)
    }
}

#[extension_apiserver::async_trait]
impl ExternalMetricsProvider for Metrics {
    fn list_metrics(&self) -> Vec<ExternalMetricInfo> {
        self.external.lock().unwrap().clone()
    }

    async fn metric_values(
        &self,
        namespace: &str,
        metric: &str,
        selector: &LabelSelector,
    ) -> extension_apiserver::Result<Vec<ExternalMetricValue>> {
        let asked = (
            metric.to_string(),
            namespace.to_string(),
            selector.to_string(),
        );
        self.asked.lock().unwrap().push(asked);
        let series = [("queue", "jobs", "7"), ("queue", "mail", "3")];
        Ok(series
            .iter()
            .map(|(key, queue, value)| ExternalMetricValue {
                metric_name: metric.into(),
                metric_labels: BTreeMap::from([(key.to_string(), queue.to_string())]),
                timestamp: time(),
                window_seconds: Some(60),
                value: Quantity(value.to_string()),
            })
            .filter(|v| selector.matches(&v.metric_labels))
            .collect())
    }
}

/// A server of both metrics APIs and nothing else.
async fn start(metrics: &Metrics) -> TestServer {
    let (custom, external) = (metrics.clone(), metrics.clone());
    TestServer::builder()
        .memory()
        .extend(move |server| server.custom_metrics(custom).external_metrics(external))
        .start()
        .await
}

/// An answer: code, headers and JSON body (`Null` when empty or not JSON).
struct Reply {
    code: u16,
    headers: http::HeaderMap,
    body: Value,
}

async fn send(client: &kube::Client, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = if matches!(method, "POST" | "PUT" | "PATCH") {
        b"{}".to_vec()
    } else {
        Vec::new()
    };
    let request = request
        .header("content-type", "application/merge-patch+json")
        .body(body)
        .unwrap();
    let response = client.send(request.map(Into::into)).await.unwrap();
    let code = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply {
        code,
        headers,
        body,
    }
}

async fn get(server: &TestServer, path: &str) -> Reply {
    send(&server.client(), "GET", path, &[]).await
}

/// GET that must answer 200, its JSON body.
async fn ok(server: &TestServer, path: &str) -> Value {
    let reply = get(server, path).await;
    assert_eq!(reply.code, 200, "{path}: {}", reply.body);
    reply.body
}

fn names(items: &Value, field: &str) -> Vec<String> {
    let items = items.as_array().expect("an array");
    items
        .iter()
        .map(|i| i[field].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_metrics_answer_every_path_shape_in_both_versions() {
    let metrics = Metrics::new();
    let server = start(&metrics).await;

    // Pods selected by label, v1beta2: metric identifier, windowSeconds.
    let path = format!(
        "{CUSTOM}/v1beta2/namespaces/ns/pods/*/hits?labelSelector=app%3Dweb&metricLabelSelector=verb%20in%20(GET,PUT)&limit=3"
    );
    let list = ok(&server, &path).await;
    assert_eq!(list["kind"], "MetricValueList");
    assert_eq!(list["apiVersion"], "custom.metrics.k8s.io/v1beta2");
    assert_eq!(list["metadata"], json!({}));
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    let item = &list["items"][0];
    assert_eq!(
        item["describedObject"],
        json!({"kind": "Pod", "namespace": "ns", "name": "p1", "apiVersion": "v1"})
    );
    assert_eq!(item["metric"], json!({"name": "hits", "selector": null}));
    assert_eq!(item["timestamp"], "2023-11-14T22:13:20Z");
    assert_eq!(item["windowSeconds"], 30);
    assert_eq!(item["value"], "200");
    assert_eq!(
        metrics.asked(),
        [(
            "hits".into(),
            "ns/*?app=web".into(),
            "verb in (GET,PUT)".into()
        )]
    );

    // The same in v1beta1: metricName, window, selector.
    let path = format!("{CUSTOM}/v1beta1/namespaces/ns/pods/*/hits");
    let list = ok(&server, &path).await;
    assert_eq!(list["apiVersion"], "custom.metrics.k8s.io/v1beta1");
    assert_eq!(names(&list["items"], "metricName"), ["hits", "hits"]);
    let item = &list["items"][0];
    assert_eq!(
        (item["window"].clone(), item["selector"].clone()),
        (json!(30), Value::Null)
    );
    assert!(item.get("metric").is_none() && item.get("windowSeconds").is_none());
    assert_eq!(
        metrics.asked(),
        [("hits".into(), "ns/*?".into(), "".into())]
    );

    // One pod by name; a group-qualified resource; a cluster-scoped object; a namespace.
    let cases = [
        ("v1beta2/namespaces/ns/pods/p2/hits", "hits", "ns/p2", "Pod"),
        (
            "v1beta2/namespaces/ns/deployments.apps/web/wanted",
            "wanted",
            "ns/web",
            "Deployment",
        ),
        ("v1beta1/nodes/n1/load", "load", "-/n1", "Node"),
        (
            "v1beta2/namespaces/team-a/metrics/quota",
            "quota",
            "-/team-a",
            "Namespace",
        ),
    ];
    for (path, metric, described, kind) in cases {
        let list = ok(&server, &format!("{CUSTOM}/{path}")).await;
        assert_eq!(list["items"][0]["describedObject"]["kind"], kind, "{path}");
        assert_eq!(
            metrics.asked(),
            [(metric.to_string(), described.to_string(), String::new())],
            "{path}"
        );
    }

    // HEAD is answered as GET, without a body.
    let reply = send(
        &server.client(),
        "HEAD",
        &format!("{CUSTOM}/v1beta2/nodes/n1/load"),
        &[],
    )
    .await;
    assert_eq!((reply.code, reply.body), (200, Value::Null));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_metrics_select_series_by_their_labels() {
    let metrics = Metrics::new();
    let server = start(&metrics).await;
    let list = ok(
        &server,
        &format!("{EXTERNAL}/namespaces/ns/queue_length?labelSelector=queue%3Djobs"),
    )
    .await;
    assert_eq!(list["kind"], "ExternalMetricValueList");
    assert_eq!(list["apiVersion"], "external.metrics.k8s.io/v1beta1");
    assert_eq!(list["metadata"], json!({}));
    assert_eq!(
        list["items"],
        json!([{"metricName": "queue_length", "metricLabels": {"queue": "jobs"},
                "timestamp": "2023-11-14T22:13:20Z", "window": 60, "value": "7"}])
    );
    assert_eq!(
        metrics.asked(),
        [("queue_length".into(), "ns".into(), "queue=jobs".into())]
    );
    let all = ok(
        &server,
        &format!("{EXTERNAL}/namespaces/other/queue_length"),
    )
    .await;
    assert_eq!(all["items"].as_array().unwrap().len(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_metrics_bad_selectors_and_writes_are_refused_as_kube_refuses_them() {
    let metrics = Metrics::new();
    let server = start(&metrics).await;
    let not_found = [
        (
            format!("{CUSTOM}/v1beta2/namespaces/ns/pods/*/nope"),
            "the server could not find the metric nope for pods",
        ),
        // A known metric under the wrong scope, or of another resource.
        (
            format!("{CUSTOM}/v1beta2/pods/p1/hits"),
            "the server could not find the metric hits for pods",
        ),
        (
            format!("{CUSTOM}/v1beta1/namespaces/ns/deployments.extensions/web/wanted"),
            "the server could not find the metric wanted for deployments.extensions",
        ),
        // The provider has no value for the object.
        (
            format!("{CUSTOM}/v1beta2/namespaces/ns/pods/missing/hits"),
            "the server could not find the metric hits for pods missing",
        ),
        (
            format!("{EXTERNAL}/namespaces/ns/nope"),
            "the server could not find the metric nope for namespaces",
        ),
    ];
    for (path, message) in not_found {
        let reply = get(&server, &path).await;
        assert_eq!(reply.code, 404, "{path}: {}", reply.body);
        assert_eq!(reply.body["kind"], "Status");
        assert_eq!(reply.body["reason"], "NotFound");
        assert_eq!(reply.body["message"], message);
    }
    for path in [
        format!("{CUSTOM}/v1alpha1/nodes/n1/load"),
        format!("{CUSTOM}/v1beta2/nodes/n1"),
        format!("{EXTERNAL}/queue_length"),
    ] {
        assert_eq!(get(&server, &path).await.code, 404, "{path}");
    }
    metrics.asked();
    let bad = get(&server, &format!("{CUSTOM}/v1beta2/namespaces/ns/pods")).await;
    assert_eq!(
        (bad.code, bad.body["message"].clone()),
        (400, json!("invalid request path"))
    );

    let malformed = [
        format!("{CUSTOM}/v1beta2/namespaces/ns/pods/*/hits?labelSelector=app%3D%3D%3Dweb"),
        format!("{CUSTOM}/v1beta1/namespaces/ns/pods/*/hits?metricLabelSelector=verb%20in%20(GET"),
        format!("{EXTERNAL}/namespaces/ns/queue_length?labelSelector=queue%20notin"),
    ];
    for path in malformed {
        let reply = get(&server, &path).await;
        assert_eq!(reply.code, 400, "{path}: {}", reply.body);
        assert_eq!(reply.body["reason"], "BadRequest");
    }
    assert!(
        metrics.asked().is_empty(),
        "no provider call for a refused request"
    );

    let client = server.client();
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        for path in [
            format!("{CUSTOM}/v1beta2/namespaces/ns/pods/*/hits"),
            format!("{EXTERNAL}/namespaces/ns/queue_length"),
        ] {
            let reply = send(&client, method, &path, &[]).await;
            assert_eq!(reply.code, 405, "{method} {path}: {}", reply.body);
            assert_eq!(reply.body["reason"], "MethodNotAllowed");
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_follows_the_providers_metrics() {
    let metrics = Metrics::new();
    let server = start(&metrics).await;
    let groups = ok(&server, "/apis").await;
    assert_eq!(
        names(&groups["groups"], "name"),
        ["custom.metrics.k8s.io", "external.metrics.k8s.io"]
    );
    let custom = ok(&server, CUSTOM).await;
    assert_eq!(custom["preferredVersion"]["version"], "v1beta2");
    assert_eq!(
        names(&custom["versions"], "version"),
        ["v1beta2", "v1beta1"]
    );

    for version in ["v1beta2", "v1beta1"] {
        let list = ok(&server, &format!("{CUSTOM}/{version}")).await;
        assert_eq!(
            list["groupVersion"],
            format!("custom.metrics.k8s.io/{version}")
        );
        assert_eq!(
            names(&list["resources"], "name"),
            [
                "deployments.apps/wanted",
                "namespaces/quota",
                "nodes/load",
                "pods/hits"
            ]
        );
        let pods = &list["resources"][3];
        assert_eq!(pods["namespaced"], true);
        assert_eq!(pods["kind"], "MetricValueList");
        assert_eq!(pods["verbs"], json!(["get"]));
        assert_eq!(list["resources"][2]["namespaced"], false);
    }
    // The aggregator's availability check: no Accept header, with or without the slash.
    for path in [format!("{CUSTOM}/v1beta1/"), format!("{EXTERNAL}/")] {
        let reply = get(&server, &path).await;
        assert_eq!(reply.code, 200, "{path}");
        assert_eq!(reply.body["kind"], "APIResourceList", "{path}");
    }
    let external = ok(&server, EXTERNAL).await;
    assert_eq!(
        external["resources"],
        json!([{"name": "queue_length", "singularName": "", "namespaced": true,
                "kind": "ExternalMetricValueList", "verbs": ["get"]}])
    );

    // A new metric appears: the documents change, and with them their ETags.
    let client = server.client();
    let before = send(&client, "GET", &format!("{CUSTOM}/v1beta2"), &[]).await;
    let etag = before.headers["etag"].to_str().unwrap().to_string();
    let same = send(
        &client,
        "GET",
        &format!("{CUSTOM}/v1beta2"),
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!(same.code, 304);
    let aggregated = send(&client, "GET", "/apis", &[("accept", V2)]).await;
    let aggregated_etag = aggregated.headers["etag"].to_str().unwrap().to_string();
    metrics
        .custom
        .lock()
        .unwrap()
        .push(info("", "pods", true, "errors"));
    metrics.external.lock().unwrap().push(ExternalMetricInfo {
        metric: "backlog".into(),
    });

    let after = send(
        &client,
        "GET",
        &format!("{CUSTOM}/v1beta2"),
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!(after.code, 200);
    assert_ne!(after.headers["etag"].to_str().unwrap(), etag);
    assert!(names(&after.body["resources"], "name").contains(&"pods/errors".to_string()));
    let fresh = after.headers["etag"].to_str().unwrap().to_string();
    let again = send(
        &client,
        "GET",
        &format!("{CUSTOM}/v1beta2"),
        &[("if-none-match", &fresh)],
    )
    .await;
    assert_eq!(again.code, 304, "unchanged metrics keep the new ETag");
    let external = ok(&server, EXTERNAL).await;
    assert_eq!(
        names(&external["resources"], "name"),
        ["backlog", "queue_length"]
    );

    // Aggregated discovery, v2 and v2beta1: `pods/{metric}` as subresources of `pods`.
    for accept in [V2, V2BETA1] {
        let reply = send(
            &client,
            "GET",
            "/apis",
            &[("accept", accept), ("if-none-match", &aggregated_etag)],
        )
        .await;
        assert_eq!(reply.code, 200, "{accept}");
        let items = &reply.body["items"];
        assert_eq!(names(items, "metadata").len(), 2);
        let custom = &items[0];
        assert_eq!(custom["metadata"]["name"], "custom.metrics.k8s.io");
        assert_eq!(
            names(&custom["versions"], "version"),
            ["v1beta2", "v1beta1"]
        );
        let resources = &custom["versions"][0]["resources"];
        assert_eq!(
            names(resources, "resource"),
            ["deployments.apps", "namespaces", "nodes", "pods"]
        );
        let pods = &resources[3];
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(
            pods["responseKind"],
            json!({"group": "", "version": "", "kind": ""})
        );
        assert_eq!(
            names(&pods["subresources"], "subresource"),
            ["errors", "hits"]
        );
        assert_eq!(
            pods["subresources"][1],
            json!({"subresource": "hits", "verbs": ["get"],
                   "responseKind": {"group": "custom.metrics.k8s.io", "version": "v1beta2", "kind": "MetricValueList"}})
        );
        assert_eq!(resources[1]["scope"], "Cluster");
        let external = &items[1]["versions"][0]["resources"];
        assert_eq!(names(external, "resource"), ["backlog", "queue_length"]);
        assert_eq!(
            external[1]["responseKind"],
            json!({"group": "external.metrics.k8s.io", "version": "v1beta1", "kind": "ExternalMetricValueList"})
        );
    }
    server.stop().await;
}

/// Every `$ref` in `value` names one of `definitions` (with `prefix`).
fn assert_refs_resolve(value: &Value, definitions: &Value, prefix: &str) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref") {
                let name = r
                    .strip_prefix(prefix)
                    .unwrap_or_else(|| panic!("{r} is not under {prefix}"));
                assert!(definitions.get(name).is_some(), "{r} has no definition");
            }
            map.values()
                .for_each(|v| assert_refs_resolve(v, definitions, prefix));
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| assert_refs_resolve(v, definitions, prefix)),
        _ => {}
    }
}

fn param_names(params: &Value) -> Vec<String> {
    names(params, "name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_v2_and_v3_describe_the_metric_paths_and_types() {
    let metrics = Metrics::new();
    let server = start(&metrics).await;
    let index = ok(&server, "/openapi/v3").await;
    let paths = index["paths"].as_object().unwrap();
    for key in [
        "apis/custom.metrics.k8s.io",
        "apis/custom.metrics.k8s.io/v1beta2",
        "apis/custom.metrics.k8s.io/v1beta1",
        "apis/external.metrics.k8s.io",
        "apis/external.metrics.k8s.io/v1beta1",
    ] {
        assert!(paths.contains_key(key), "{key} in {index}");
    }

    let url = index["paths"]["apis/custom.metrics.k8s.io/v1beta2"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    let v3 = ok(&server, url).await;
    assert!(v3["openapi"].as_str().unwrap().starts_with("3."));
    let schemas = &v3["components"]["schemas"];
    assert_refs_resolve(&v3, schemas, "#/components/schemas/");
    let namespaced = &v3["paths"]["/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/{resource}/{name}/{metric}"];
    assert_eq!(
        param_names(&namespaced["parameters"]),
        [
            "metric",
            "name",
            "namespace",
            "resource",
            "labelSelector",
            "metricLabelSelector",
            "pretty"
        ]
    );
    let get = &namespaced["get"];
    assert_eq!(
        get["operationId"],
        "listCustomMetricsV1beta2NamespacedMetricValue"
    );
    assert_eq!(
        get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.metrics.pkg.apis.custom_metrics.v1beta2.MetricValueList"
    );
    assert!(namespaced.get("post").is_none());
    for path in [
        "/apis/custom.metrics.k8s.io/v1beta2/{resource}/{name}/{metric}",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/metrics/{metric}",
        "/apis/custom.metrics.k8s.io/v1beta2/",
    ] {
        assert!(v3["paths"][path]["get"].is_object(), "{path}");
    }
    let value = &schemas["io.k8s.metrics.pkg.apis.custom_metrics.v1beta2.MetricValue"];
    assert!(
        value["properties"]["metric"]["$ref"]
            .as_str()
            .unwrap()
            .ends_with("v1beta2.MetricIdentifier")
    );
    assert_eq!(
        schemas["io.k8s.metrics.pkg.apis.custom_metrics.v1beta2.MetricValueList"]["x-kubernetes-group-version-kind"],
        json!([{"group": "custom.metrics.k8s.io", "kind": "MetricValueList", "version": "v1beta2"}])
    );
    assert!(schemas["io.k8s.api.core.v1.ObjectReference"].is_object());

    let url = index["paths"]["apis/external.metrics.k8s.io/v1beta1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    let v3 = ok(&server, url).await;
    let external =
        &v3["paths"]["/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}"];
    assert_eq!(
        param_names(&external["parameters"]),
        ["metric", "namespace", "labelSelector", "pretty"]
    );
    assert!(v3["components"]["schemas"]["io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValueList"].is_object());

    let v2 = ok(&server, "/openapi/v2").await;
    assert_eq!(v2["swagger"], "2.0");
    assert_refs_resolve(&v2, &v2["definitions"], "#/definitions/");
    for path in [
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/{namespace}/{resource}/{name}/{metric}",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}",
    ] {
        assert!(v2["paths"][path]["get"].is_object(), "{path}");
    }
    let v1beta1 = &v2["definitions"]["io.k8s.metrics.pkg.apis.custom_metrics.v1beta1.MetricValue"];
    assert_eq!(v1beta1["properties"]["window"]["type"], "integer");
    assert!(v1beta1["properties"]["metricName"].is_object());
    server.stop().await;
}

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[resource(
    group = "things.example.com",
    version = "v1",
    kind = "Thing",
    namespaced
)]
struct Thing {
    #[serde(default)]
    metadata: ObjectMeta,
}

const CALLER: &str = "system:serviceaccount:metrics:adapter";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_resources_delegated_requests_are_authorized_on_the_metric_and_apiservices_registered()
 {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    core.set_authentication_config(&AuthenticationConfig::default());
    let mut options = ServerOptions {
        storage_backend: StorageBackendKind::Memory,
        ..TestServer::options(dir.path())
    };
    options.auth.authentication_kubeconfig = Some(core.kubeconfig(CALLER));
    options.auth.authorization_kubeconfig = Some(core.kubeconfig(CALLER));
    let aggregator = AggregatorOptions {
        kubeconfig: Some(core.kubeconfig(CALLER)),
        register_apiservice: true,
        service_namespace: Some("metrics".into()),
        service_name: Some("adapter".into()),
        ..AggregatorOptions::default()
    };
    let metrics = Metrics::new();
    let (custom, external) = (metrics.clone(), metrics.clone());
    let server = TestServer::start_configured(options, move |server: APIServer| {
        server
            .aggregator_options(aggregator)
            .group(APIGroup::new("things.example.com").version("v1", |v| v.resource::<Thing>()))
            .custom_metrics(custom)
            .external_metrics(external)
    })
    .await;

    // The APIServices, with custom-metrics-apiserver's priorities.
    for (name, group_priority, version_priority) in [
        ("v1beta2.custom.metrics.k8s.io", 100, 200),
        ("v1beta1.custom.metrics.k8s.io", 100, 100),
        ("v1beta1.external.metrics.k8s.io", 100, 100),
    ] {
        let apiservice = core
            .apiservice(name)
            .unwrap_or_else(|| panic!("{name} registered"));
        assert_eq!(
            apiservice["spec"]["groupPriorityMinimum"], group_priority,
            "{name}"
        );
        assert_eq!(
            apiservice["spec"]["versionPriority"], version_priority,
            "{name}"
        );
    }

    // The HPA controller's identity, by token, allowed as its bootstrap role allows it.
    core.add_token(
        "hpa-token",
        TokenUser {
            username: "system:serviceaccount:kube-system:horizontal-pod-autoscaler".into(),
            groups: vec!["system:serviceaccounts".into()],
            ..TokenUser::default()
        },
    );
    let hpa = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
    core.allow(Rule::user(
        hpa,
        &["get", "list"],
        "custom.metrics.k8s.io",
        &["*"],
    ));
    core.allow(Rule::user(
        hpa,
        &["list"],
        "external.metrics.k8s.io",
        &["*"],
    ));
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let options = kube::config::KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    config.auth_info = Default::default();
    config.auth_info.token = Some("hpa-token".to_string().into());
    let client = kube::Client::try_from(config).unwrap();

    let cases = [
        (
            format!("{CUSTOM}/v1beta2/namespaces/ns/pods/*/hits?labelSelector=app%3Dweb"),
            json!({"namespace": "ns", "verb": "get", "group": "custom.metrics.k8s.io", "version": "v1beta2", "resource": "pods", "subresource": "hits", "name": "*"}),
        ),
        (
            format!("{CUSTOM}/v1beta1/nodes/n1/load"),
            json!({"verb": "get", "group": "custom.metrics.k8s.io", "version": "v1beta1", "resource": "nodes", "subresource": "load", "name": "n1"}),
        ),
        (
            format!("{CUSTOM}/v1beta2/namespaces/team-a/metrics/quota"),
            json!({"namespace": "team-a", "verb": "get", "group": "custom.metrics.k8s.io", "version": "v1beta2", "resource": "metrics", "name": "quota"}),
        ),
        // No name: kube's request info makes it a `list` of the metric, which the HPA
        // controller's role grants on external.metrics.k8s.io.
        (
            format!("{EXTERNAL}/namespaces/ns/queue_length"),
            json!({"namespace": "ns", "verb": "list", "group": "external.metrics.k8s.io", "version": "v1beta1", "resource": "queue_length"}),
        ),
    ];
    for (path, attributes) in cases {
        let reply = send(&client, "GET", &path, &[]).await;
        assert_eq!(reply.code, 200, "{path}: {}", reply.body);
        let review = core
            .access_reviews()
            .into_iter()
            .rev()
            .find(|r| r["user"] == hpa)
            .expect("a SubjectAccessReview of the HPA controller");
        let got = &review["resourceAttributes"];
        for (key, want) in attributes.as_object().unwrap() {
            assert_eq!(&got[key], want, "{key} of {path}: {review}");
        }
    }
    // Denied when the role does not cover the group.
    core.clear_rules();
    let reply = send(
        &client,
        "GET",
        &format!("{CUSTOM}/v1beta2/namespaces/other/pods/*/hits"),
        &[],
    )
    .await;
    assert_eq!(reply.code, 403, "{}", reply.body);

    // The ordinary resources are served beside the metrics.
    core.allow(Rule::user(
        hpa,
        &["list"],
        "things.example.com",
        &["things"],
    ));
    core.allow(Rule {
        users: vec![hpa.into()],
        verbs: vec!["get".into()],
        non_resource_urls: vec!["/apis".into()],
        ..Rule::default()
    });
    let things = send(
        &client,
        "GET",
        "/apis/things.example.com/v1/namespaces/ns/things",
        &[],
    )
    .await;
    assert_eq!(things.code, 200, "{}", things.body);
    let groups = send(&client, "GET", "/apis", &[]).await.body;
    assert_eq!(
        names(&groups["groups"], "name"),
        [
            "things.example.com",
            "custom.metrics.k8s.io",
            "external.metrics.k8s.io"
        ]
    );
    server.stop().await;
}

#[tokio::test]
async fn a_group_of_resources_may_not_take_a_metrics_group() {
    let dir = tempfile::tempdir().unwrap();
    let result = APIServer::new(TestServer::options(dir.path()))
        .group(APIGroup::new("external.metrics.k8s.io").version("v1beta1", |v| v))
        .external_metrics(Metrics::new())
        .build()
        .await;
    let error = result.expect_err("refused").to_string();
    assert!(
        error.contains("external.metrics.k8s.io is served by a metrics provider"),
        "{error}"
    );
}
