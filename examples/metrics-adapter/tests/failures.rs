//! Bad input from the scraped endpoints: a kubelet or an exporter that fails or answers
//! garbage. The last good values stay a while, then age out; the server stays up, and
//! `/readyz` says which scrape failed and why while no good data is left.

use std::time::Duration;

use extension_apiserver::metrics_apis::NodeMetrics;
use extension_apiserver_testing::eventually;
use kube::api::Api;

use crate::common::{Breakage, FakeExporter, FakeKubelet, Setup, get_raw, get_text, node};

const READYZ: &str = "/readyz/metrics-scrapes";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_garbled_kubelet_keeps_its_last_values_then_ages_out() {
    let setup = Setup::new().await;
    let kubelet = FakeKubelet::start(&setup.ca).await;
    kubelet.set_node(0.5, 1 << 30);
    setup.core.set_node(node("node-a", &[], &kubelet));
    // Scrapes every second: values age out after three (STALE_AFTER) without a good one.
    let options = metrics_adapter::AdapterOptions {
        metric_resolution: Duration::from_secs(1),
        ..setup.options(&[])
    };
    let server = setup.adapter(options).await;
    let client = server.client();
    let nodes: Api<NodeMetrics> = Api::all(client.clone());
    assert!(eventually(|| async { nodes.get("node-a").await.is_ok() }).await);
    assert_eq!(get_text(&client, READYZ).await, (200, "ok".into()));

    kubelet.break_with(Some(Breakage::Garbage("<html>oops</html>\n".into())));
    let seen = kubelet.scrapes();
    assert!(eventually(|| async { kubelet.scrapes() > seen }).await);
    // Just after the bad scrape, the last good values still stand.
    let kept = nodes
        .get("node-a")
        .await
        .expect("the last good values are kept");
    assert_eq!(kept.usage["cpu"].0, "500m");

    // Then they age out; the server stays up and /readyz says why.
    assert!(eventually(|| async { nodes.get("node-a").await.is_err() }).await);
    let (status, body) = get_text(&client, READYZ).await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("node node-a's kubelet")
            && body.contains("/metrics/resource")
            && body.contains("not the text format: line 1"),
        "{body}"
    );
    assert_eq!(get_text(&client, "/livez").await.0, 200);

    // A kubelet answering 503 is named too.
    kubelet.break_with(Some(Breakage::Status(503)));
    let says_503 =
        eventually(|| async { get_text(&client, READYZ).await.1.contains("HTTP 503") }).await;
    assert!(says_503, "{:?}", get_text(&client, READYZ).await);

    // Good again: two scrapes bring a rate back, and readiness.
    kubelet.break_with(None);
    assert!(eventually(|| async { nodes.get("node-a").await.is_ok() }).await);
    assert_eq!(get_text(&client, READYZ).await, (200, "ok".into()));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_exporter_is_named_in_readyz_and_the_server_stays_up() {
    let setup = Setup::new().await;
    let exporter = FakeExporter::start("queue_depth{queue=\"jobs\"} 7\n").await;
    let server = setup.adapter(setup.options(&[&exporter.url])).await;
    let client = server.client();
    // Ready once the core's Nodes and Pods are listed and the page scraped.
    let ready =
        eventually(|| async { get_text(&client, READYZ).await == (200, "ok".into()) }).await;
    assert!(ready, "{:?}", get_text(&client, READYZ).await);

    exporter.break_with(Breakage::Garbage("queue_depth{queue=\"jobs\" 7\n".into()));
    let unready = eventually(|| async { get_text(&client, READYZ).await.0 == 500 }).await;
    assert!(unready);
    let (_, body) = get_text(&client, READYZ).await;
    assert!(
        body.contains(&exporter.url) && body.contains("line 1: expected ',' or '}'"),
        "{body}"
    );
    exporter.break_with(Breakage::Status(500));
    let says_500 =
        eventually(|| async { get_text(&client, READYZ).await.1.contains("HTTP 500") }).await;
    assert!(says_500, "{:?}", get_text(&client, READYZ).await);
    assert_eq!(get_text(&client, "/livez").await.0, 200);

    exporter.set("queue_depth{queue=\"jobs\"} 8\n");
    let ready = eventually(|| async { get_text(&client, READYZ).await.0 == 200 }).await;
    assert!(ready);
    server.stop().await;
}

/// The kubelet's serving certificate is checked against `--kubelet-certificate-authority`
/// (a kubelet signed by another CA fails, and `/readyz` says so), and not at all with
/// `--kubelet-insecure-tls`; `--kubelet-port` addresses every kubelet at one port.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubelet_certificates_are_checked_unless_insecure() {
    let setup = Setup::new().await;
    let stranger = extension_apiserver_testing::pki::TestCa::new("another-ca");
    let kubelet = FakeKubelet::start(&stranger).await;
    kubelet.set_node(0.25, 1 << 30);
    setup.core.set_node(node("node-a", &[], &kubelet));

    let checked = setup.adapter(setup.options(&[])).await;
    let client = checked.client();
    let refused = eventually(|| async {
        let (status, body) = get_text(&client, READYZ).await;
        status == 500 && body.contains("node node-a's kubelet") && body.contains("TLS")
    })
    .await;
    assert!(refused, "{:?}", get_text(&client, READYZ).await);
    let nodes: Api<NodeMetrics> = Api::all(client.clone());
    assert!(nodes.get("node-a").await.is_err());
    checked.stop().await;

    let options = metrics_adapter::AdapterOptions {
        kubelet_insecure_tls: true,
        kubelet_certificate_authority: None,
        kubelet_use_node_status_port: false,
        kubelet_port: kubelet.addr.port(),
        ..setup.options(&[])
    };
    let insecure = setup.adapter(options).await;
    let nodes: Api<NodeMetrics> = Api::all(insecure.client());
    let served = eventually(|| async {
        nodes
            .get("node-a")
            .await
            .is_ok_and(|n| n.usage["cpu"].0 == "250m")
    })
    .await;
    assert!(served, "{:?}", nodes.get("node-a").await);
    insecure.stop().await;
}

/// Before the first lists of Nodes and Pods arrive (here: the core API refuses the adapter's
/// token), an empty cache means "not known yet": `/readyz` says so, and the pod-selector and
/// resource metrics answer 503, not an empty list an HPA would read as "no pod has it".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_answered_from_core_caches_not_yet_listed() {
    let setup = Setup::new().await;
    let exporter = FakeExporter::start("requests{namespace=\"default\",pod=\"web-1\"} 3\n").await;
    let kubeconfig = setup
        .core
        .kubeconfig("system:serviceaccount:kube-system:metrics-adapter");
    let refused = std::fs::read_to_string(&kubeconfig).unwrap();
    let token = refused
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("a token in the kubeconfig")
        .to_string();
    let stranger = setup.dir.path().join("stranger.kubeconfig");
    std::fs::write(&stranger, refused.replace(&token, "caller-nobody")).unwrap();
    let server = setup
        .adapter_with_core(setup.options(&[&exporter.url]), &stranger)
        .await;
    // kube-rs retries a 503 for minutes by default; this client takes the first answer.
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let options = kube::config::KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let (status, body) = get_text(&client, READYZ).await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("nodes and pods are not listed yet"), "{body}");

    // What needs no core object is served: the series itself, once scraped. (Before the first
    // scrape the metric is not known at all, a 404 whatever the caches hold.)
    let external = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/requests";
    let served = eventually(|| async { get_raw(&client, external).await.0 == 200 }).await;
    assert!(served, "{:?}", get_raw(&client, external).await);
    let pods = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/%2A/requests?labelSelector=app%3Dweb";
    let (status, answer) = get_raw(&client, pods).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["reason"], "ServiceUnavailable", "{answer}");
    let (status, answer) = get_raw(&client, "/apis/metrics.k8s.io/v1beta1/nodes").await;
    assert_eq!(status, 503, "{answer}");
    server.stop().await;
}
