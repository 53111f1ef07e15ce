//! `metrics.k8s.io` end to end: fake kubelets over TLS, Nodes and Pods in the fake core
//! followed by the adapter's reflectors, read with kube-rs (get, list, label selectors,
//! values that change) and with `kubectl top` through the fake core as aggregator.

use extension_apiserver::metrics_apis::{NodeMetrics, PodMetrics};
use extension_apiserver_testing::{eventually, kubectl};
use kube::api::{Api, ListParams};

use crate::common::{FakeKubelet, Setup, node, pod};

const MI: u64 = 1 << 20;

/// Two nodes with their kubelets, pods on them (one the core API does not have).
async fn cluster(setup: &Setup) -> (FakeKubelet, FakeKubelet) {
    let (a, b) = (
        FakeKubelet::start(&setup.ca).await,
        FakeKubelet::start(&setup.ca).await,
    );
    a.set_node(1.5, 2048 * MI);
    a.set_container("default", "web-1", "app", 0.5, 64 * MI);
    a.set_container("default", "web-1", "sidecar", 0.125, 16 * MI);
    a.set_container("default", "web-2", "app", 0.25, 32 * MI);
    b.set_node(0.5, 1024 * MI);
    b.set_container("other", "db-1", "db", 1.0, 256 * MI);
    // Not in the core API: metrics-server does not report it, nor do we.
    b.set_container("default", "ghost", "app", 0.5, MI);
    let core = &setup.core;
    core.set_node(node("node-a", &[("role", "web"), ("zone", "a")], &a));
    core.set_node(node("node-b", &[("role", "db")], &b));
    core.set_namespace("other", "Active");
    core.set_pod(pod("default", "web-1", &[("app", "web")], "node-a"));
    core.set_pod(pod(
        "default",
        "web-2",
        &[("app", "web"), ("tier", "canary")],
        "node-a",
    ));
    core.set_pod(pod("other", "db-1", &[("app", "db")], "node-b"));
    (a, b)
}

fn usage(
    m: &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> (String, String) {
    (m["cpu"].0.clone(), m["memory"].0.clone())
}

fn names<T: kube::Resource>(items: &[T]) -> Vec<String> {
    let mut names: Vec<String> = items
        .iter()
        .map(|i| i.meta().name.clone().unwrap())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_and_pod_metrics_follow_the_kubelets() {
    let setup = Setup::new().await;
    let (a, _b) = cluster(&setup).await;
    let server = setup.adapter(setup.options(&[])).await;
    let nodes: Api<NodeMetrics> = Api::all(server.client());
    // CPU is a rate: it takes two scrapes.
    let both = eventually(|| async {
        nodes
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.len() == 2)
    })
    .await;
    assert!(both, "{:?}", nodes.list(&ListParams::default()).await);

    let node_a = nodes.get("node-a").await.unwrap();
    assert_eq!(usage(&node_a.usage), ("1500m".into(), "2Gi".into()));
    assert_eq!(node_a.window, crate::common::KUBELET_STEP);
    assert_eq!(
        node_a.metadata.labels.as_ref().unwrap()["zone"],
        "a",
        "the node's labels"
    );
    let web = nodes
        .list(&ListParams::default().labels("role=web"))
        .await
        .unwrap();
    assert_eq!(names(&web.items), ["node-a"]);
    assert_eq!(
        usage(&nodes.get("node-b").await.unwrap().usage),
        ("500m".into(), "1Gi".into())
    );

    let pods: Api<PodMetrics> = Api::namespaced(server.client(), "default");
    let listed = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        names(&listed.items),
        ["web-1", "web-2"],
        "ghost is not in the core API"
    );
    let web_1 = pods.get("web-1").await.unwrap();
    let containers: Vec<(String, (String, String))> = web_1
        .containers
        .iter()
        .map(|c| (c.name.clone(), usage(&c.usage)))
        .collect();
    assert_eq!(
        containers,
        [
            ("app".to_string(), ("500m".to_string(), "64Mi".to_string())),
            (
                "sidecar".to_string(),
                ("125m".to_string(), "16Mi".to_string())
            ),
        ]
    );
    let canary = pods
        .list(&ListParams::default().labels("tier=canary"))
        .await
        .unwrap();
    assert_eq!(names(&canary.items), ["web-2"]);
    let all: Api<PodMetrics> = Api::all(server.client());
    let everywhere = all
        .list(&ListParams::default().labels("app"))
        .await
        .unwrap();
    assert_eq!(names(&everywhere.items), ["db-1", "web-1", "web-2"]);
    let db = everywhere
        .items
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("db-1"));
    assert_eq!(usage(&db.unwrap().containers[0].usage).0, "1");

    // The next scrapes bring the new usage.
    a.set_container("default", "web-1", "app", 0.75, 96 * MI);
    let changed = eventually(|| async {
        pods.get("web-1")
            .await
            .is_ok_and(|p| usage(&p.containers[0].usage) == ("750m".into(), "96Mi".into()))
    })
    .await;
    assert!(changed, "{:?}", pods.get("web-1").await);

    // A pod gone from the core API is gone from the metrics.
    setup.core.delete_pod("default", "web-2");
    let gone = eventually(|| async { pods.get("web-2").await.is_err() }).await;
    assert!(gone);
    server.stop().await;
}

/// kubectl's table, cell by cell.
fn cells(stdout: &str) -> Vec<Vec<&str>> {
    stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_top_node_and_pod() {
    let setup = Setup::new().await;
    let (_a, _b) = cluster(&setup).await;
    let server = setup.adapter(setup.options(&[])).await;
    let pods: Api<PodMetrics> = Api::namespaced(server.client(), "default");
    let ready = eventually(|| async {
        pods.list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.len() == 2)
    })
    .await;
    assert!(ready);
    // kubectl talks to the fake core, which serves the Nodes and passes metrics.k8s.io to the
    // adapter, as kube-apiserver's aggregator does.
    let kubeconfig = setup.aggregated_kubeconfig(&server);
    let run = |args: &'static [&'static str]| {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || kubectl(&kubeconfig, args, &[]))
    };

    let out = run(&["top", "node", "--no-headers"]).await.unwrap();
    assert!(out.success, "{}", out.stderr);
    let rows = cells(&out.stdout);
    assert_eq!(
        rows,
        [
            ["node-a", "1500m", "37%", "2048Mi", "25%"],
            ["node-b", "500m", "12%", "1024Mi", "12%"],
        ],
        "{}",
        out.stdout
    );
    let out = run(&["top", "node", "-l", "role=db", "--no-headers"])
        .await
        .unwrap();
    assert!(out.success, "{}", out.stderr);
    assert!(out.stdout.starts_with("node-b"), "{}", out.stdout);
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);

    let out = run(&[
        "top",
        "pod",
        "-n",
        "default",
        "-l",
        "app=web",
        "--containers",
        "--sort-by=cpu",
        "--no-headers",
    ])
    .await
    .unwrap();
    assert!(out.success, "{}", out.stderr);
    let rows = cells(&out.stdout);
    assert_eq!(
        rows,
        [
            ["web-1", "app", "500m", "64Mi"],
            ["web-1", "sidecar", "125m", "16Mi"],
            ["web-2", "app", "250m", "32Mi"],
        ],
        "{}",
        out.stdout
    );
    let out = run(&["top", "pod", "-A", "--sort-by=memory", "--no-headers"])
        .await
        .unwrap();
    assert!(out.success, "{}", out.stderr);
    let first: Vec<&str> = out
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(first, ["other", "db-1", "1000m", "256Mi"], "{}", out.stdout);
    server.stop().await;
}
