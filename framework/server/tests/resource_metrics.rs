//! `metrics.k8s.io` served from a `ResourceMetricsProvider`, read as metrics-server is read:
//! kube-rs against every path, `kubectl top pod` and `kubectl get` (tables), discovery and
//! OpenAPI; values that change between reads; writes refused.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use extension_apiserver::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use extension_apiserver::metrics_apis::{
    ContainerMetrics, NodeMetrics, PodMetrics, ResourceMetricsProvider,
};
use extension_apiserver::prelude::*;
use extension_apiserver_testing::TestServer;
use serde_json::{Value, json};

/// What the provider answers: the test changes it.
#[derive(Clone, Default)]
struct Usage(Arc<Mutex<(Vec<NodeMetrics>, Vec<PodMetrics>)>>);

#[async_trait]
impl ResourceMetricsProvider for Usage {
    async fn node_metrics(&self) -> extension_apiserver::Result<Vec<NodeMetrics>> {
        Ok(self.0.lock().unwrap().0.clone())
    }

    async fn pod_metrics(
        &self,
        namespace: Option<&str>,
    ) -> extension_apiserver::Result<Vec<PodMetrics>> {
        let pods = self.0.lock().unwrap().1.clone();
        Ok(pods
            .into_iter()
            .filter(|p| namespace.is_none() || p.metadata.namespace.as_deref() == namespace)
            .collect())
    }
}

fn usage(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.into())),
        ("memory".to_string(), Quantity(memory.into())),
    ])
}

fn now() -> Time {
    Time("2026-11-26T10:00:00Z".parse().unwrap())
}

fn meta(namespace: Option<&str>, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn node(name: &str, role: &str, cpu: &str, memory: &str) -> NodeMetrics {
    NodeMetrics {
        metadata: meta(None, name, &[("role", role)]),
        timestamp: now(),
        window: Duration::from_millis(20_500),
        usage: usage(cpu, memory),
    }
}

fn pod(namespace: &str, name: &str, app: &str, containers: &[(&str, &str, &str)]) -> PodMetrics {
    PodMetrics {
        metadata: meta(Some(namespace), name, &[("app", app)]),
        timestamp: now(),
        window: Duration::from_secs(15),
        containers: containers
            .iter()
            .map(|(name, cpu, memory)| ContainerMetrics {
                name: name.to_string(),
                usage: usage(cpu, memory),
            })
            .collect(),
    }
}

async fn start() -> (TestServer, Usage) {
    let provider = Usage::default();
    *provider.0.lock().unwrap() = (
        vec![
            node("n1", "worker", "250m", "1Gi"),
            node("n2", "control-plane", "1500m", "2Gi"),
        ],
        vec![
            pod(
                "default",
                "web-1",
                "web",
                &[("app", "100m", "64Mi"), ("proxy", "5m", "16Mi")],
            ),
            pod("default", "web-2", "web", &[("app", "300m", "96Mi")]),
            pod("default", "db-0", "db", &[("db", "50m", "512Mi")]),
            pod("other", "job-1", "job", &[("main", "1", "8Mi")]),
        ],
    );
    let serving = provider.clone();
    let server = TestServer::builder()
        .extend(move |server| server.resource_metrics(serving))
        .start()
        .await;
    (server, provider)
}

/// A GET through kube-rs: the body, or the code and message of the Status of an error.
async fn send(server: &TestServer, method: &str, path: &str) -> Result<Value, (u16, String)> {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", "application/json")
        .body(if method == "GET" {
            vec![]
        } else {
            b"{}".to_vec()
        })
        .unwrap();
    match server.client().request_text(request).await {
        Ok(text) => Ok(serde_json::from_str(&text).unwrap()),
        Err(kube::Error::Api(status)) => Err((status.code, status.message.clone())),
        Err(e) => panic!("{e}"),
    }
}

async fn get(server: &TestServer, path: &str) -> Value {
    send(server, "GET", path).await.unwrap()
}

fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect()
}

const BASE: &str = "/apis/metrics.k8s.io/v1beta1";

#[tokio::test]
async fn node_and_pod_metrics_have_metrics_servers_shapes() {
    let (server, _) = start().await;
    let nodes = get(&server, &format!("{BASE}/nodes")).await;
    assert_eq!(nodes["kind"], "NodeMetricsList");
    assert_eq!(nodes["apiVersion"], "metrics.k8s.io/v1beta1");
    assert_eq!(names(&nodes), ["n1", "n2"]);
    let n1 = get(&server, &format!("{BASE}/nodes/n1")).await;
    assert_eq!(n1["kind"], "NodeMetrics");
    assert_eq!(n1["timestamp"], "2026-11-26T10:00:00Z");
    assert_eq!(n1["window"], "20.5s", "a metav1.Duration, as Go writes it");
    assert_eq!(n1["usage"], json!({"cpu": "250m", "memory": "1Gi"}));
    assert_eq!(n1["metadata"]["labels"], json!({"role": "worker"}));
    assert_eq!(
        n1["metadata"]["creationTimestamp"], "2026-11-26T10:00:00Z",
        "created when measured"
    );

    let pods = get(&server, &format!("{BASE}/namespaces/default/pods")).await;
    assert_eq!(pods["kind"], "PodMetricsList");
    assert_eq!(names(&pods), ["db-0", "web-1", "web-2"]);
    let web1 = get(&server, &format!("{BASE}/namespaces/default/pods/web-1")).await;
    assert_eq!(web1["kind"], "PodMetrics");
    assert_eq!(web1["window"], "15s");
    assert_eq!(
        web1["containers"],
        json!([
            {"name": "app", "usage": {"cpu": "100m", "memory": "64Mi"}},
            {"name": "proxy", "usage": {"cpu": "5m", "memory": "16Mi"}},
        ])
    );
    let all = get(&server, &format!("{BASE}/pods")).await;
    assert_eq!(names(&all).len(), 4, "pods of every namespace: {all}");
    server.stop().await;
}

#[tokio::test]
async fn selectors_pages_and_not_found_as_kube_answers_them() {
    let (server, _) = start().await;
    let workers = get(
        &server,
        &format!("{BASE}/nodes?labelSelector=role%3Dworker"),
    )
    .await;
    assert_eq!(names(&workers), ["n1"]);
    let web = get(
        &server,
        &format!("{BASE}/namespaces/default/pods?labelSelector=app%3Dweb"),
    )
    .await;
    assert_eq!(names(&web), ["web-1", "web-2"]);
    let by_name = get(
        &server,
        &format!("{BASE}/pods?fieldSelector=metadata.name%3Djob-1"),
    )
    .await;
    assert_eq!(names(&by_name), ["job-1"]);

    let first = get(&server, &format!("{BASE}/namespaces/default/pods?limit=2")).await;
    assert_eq!(names(&first), ["db-0", "web-1"]);
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let rest = get(
        &server,
        &format!("{BASE}/namespaces/default/pods?limit=2&continue={token}"),
    )
    .await;
    assert_eq!(names(&rest), ["web-2"]);

    let missing = send(&server, "GET", &format!("{BASE}/nodes/n9")).await;
    assert_eq!(
        missing,
        Err((404, r#"nodes.metrics.k8s.io "n9" not found"#.into()))
    );
    let bad = send(
        &server,
        "GET",
        &format!("{BASE}/nodes?labelSelector=%3D%3D%3D"),
    )
    .await;
    assert_eq!(bad.unwrap_err().0, 400);
    server.stop().await;
}

#[tokio::test]
async fn values_follow_the_provider_and_writes_are_refused() {
    let (server, provider) = start().await;
    let path = format!("{BASE}/nodes/n1");
    assert_eq!(get(&server, &path).await["usage"]["cpu"], "250m");
    provider.0.lock().unwrap().0[0] = node("n1", "worker", "900m", "1Gi");
    assert_eq!(get(&server, &path).await["usage"]["cpu"], "900m");
    // A node the provider stopped measuring is gone.
    provider.0.lock().unwrap().0.remove(1);
    assert_eq!(names(&get(&server, &format!("{BASE}/nodes")).await), ["n1"]);

    for (method, path) in [
        ("POST", format!("{BASE}/nodes")),
        ("PUT", format!("{BASE}/nodes/n1")),
        ("DELETE", format!("{BASE}/nodes/n1")),
        ("POST", format!("{BASE}/namespaces/default/pods")),
    ] {
        let refused = send(&server, method, &path).await;
        assert_eq!(refused.unwrap_err().0, 405, "{method} {path}");
    }
    assert_eq!(get(&server, &path).await["usage"]["cpu"], "900m");
    server.stop().await;
}

#[tokio::test]
async fn discovery_and_openapi_publish_the_group() {
    let (server, _) = start().await;
    let resources = get(&server, BASE).await;
    let by_name = |name: &str| {
        resources["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_name("nodes")["kind"], "NodeMetrics");
    assert_eq!(by_name("nodes")["namespaced"], false);
    assert_eq!(by_name("pods")["kind"], "PodMetrics");
    assert_eq!(by_name("pods")["namespaced"], true);
    assert_eq!(by_name("pods")["verbs"], json!(["get", "list", "watch"]));

    let v2 = get(&server, "/openapi/v2").await;
    for path in [
        "/apis/metrics.k8s.io/v1beta1/nodes",
        "/apis/metrics.k8s.io/v1beta1/nodes/{name}",
        "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods",
        "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{name}",
    ] {
        assert!(v2["paths"].get(path).is_some(), "{path} in /openapi/v2");
    }
    let v3 = get(&server, "/openapi/v3/apis/metrics.k8s.io/v1beta1").await;
    assert!(
        v3["paths"]
            .get("/apis/metrics.k8s.io/v1beta1/pods")
            .is_some()
    );
    server.stop().await;
}

// kubectl blocks its thread: the server runs on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_pod_and_get_read_the_metrics() {
    let (server, _) = start().await;
    let top = server.kubectl(&["top", "pod", "-n", "default", "--sort-by=cpu"]);
    assert!(top.success, "{}", top.stderr);
    let lines: Vec<&str> = top.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{}", top.stdout);
    let first: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(first, ["web-2", "300m", "96Mi"], "{}", top.stdout);
    assert_eq!(lines.len(), 4, "{}", top.stdout);

    let selected = server.kubectl(&[
        "top",
        "pod",
        "-n",
        "default",
        "-l",
        "app=web",
        "--containers",
    ]);
    assert!(selected.success, "{}", selected.stderr);
    let rows: Vec<Vec<&str>> = selected
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["web-1", "app", "100m", "64Mi"],
            vec!["web-1", "proxy", "5m", "16Mi"],
            vec!["web-2", "app", "300m", "96Mi"],
        ],
        "{}",
        selected.stdout
    );

    let table = server.kubectl(&["get", "nodes.metrics.k8s.io"]);
    assert!(table.success, "{}", table.stderr);
    let header: Vec<&str> = table
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "CPU", "MEMORY", "WINDOW", "AGE"],
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("1500m"), "{}", table.stdout);
    server.stop().await;
}

#[tokio::test]
async fn a_watch_sees_new_usage() {
    use futures::StreamExt;
    use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};
    use kube::core::{ApiResource, GroupVersionKind};

    let (server, provider) = start().await;
    let gvk = GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "pods");
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &resource);
    let list = api.list(&Default::default()).await.unwrap();
    let version = list.metadata.resource_version.unwrap();
    let mut events = api
        .watch(
            &WatchParams::default().labels("app=db").timeout(60),
            &version,
        )
        .await
        .unwrap()
        .boxed();
    provider.0.lock().unwrap().1[2] = pod("default", "db-0", "db", &[("db", "700m", "512Mi")]);
    // The provider has no change stream: the mirror re-lists it while anyone watches.
    let event = tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("an event within the re-list interval")
        .unwrap()
        .unwrap();
    let WatchEvent::Modified(object) = event else {
        panic!("{event:?}")
    };
    assert_eq!(object.data["containers"][0]["usage"]["cpu"], "700m");
    server.stop().await;
}
