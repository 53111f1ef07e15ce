//! Custom and external metrics from a scraped Prometheus endpoint, read with the requests the
//! HPA controller's metrics client makes (`k8s.io/kubernetes/pkg/controller/podautoscaler/
//! metrics`): `External` metrics by namespace, name and the metric's selector; `Pods` metrics
//! as `pods/*/{metric}` with the HPA target's pod selector and the metric's selector;
//! `Object` metrics of one pod by name. Values change with the next scrape.

use extension_apiserver_testing::eventually;
use serde_json::Value;

use crate::common::{FakeExporter, Setup, get_raw, get_text, pod};

const PAGE: &str = "\
# HELP queue_messages_ready Messages waiting.
# TYPE queue_messages_ready gauge
queue_messages_ready{queue=\"jobs\"} 30
queue_messages_ready{queue=\"mail\"} 4
queue_messages_ready{namespace=\"other\",queue=\"jobs\"} 99
# TYPE http_requests_per_second gauge
http_requests_per_second{namespace=\"default\",pod=\"web-1\",code=\"200\"} 10
http_requests_per_second{namespace=\"default\",pod=\"web-1\",code=\"500\"} 0.5
http_requests_per_second{namespace=\"default\",pod=\"web-2\",code=\"200\"} 2.25
http_requests_per_second{namespace=\"other\",pod=\"db-1\",code=\"200\"} 7
";

const EXTERNAL: &str = "/apis/external.metrics.k8s.io/v1beta1";
const CUSTOM: &str = "/apis/custom.metrics.k8s.io/v1beta2";

/// `(labels, value)` of each item of an `ExternalMetricValueList`, sorted.
fn external_values(list: &Value) -> Vec<(String, String)> {
    let mut values: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|i| {
            (
                i["metricLabels"].to_string(),
                i["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    values.sort();
    values
}

/// `(pod, value)` of each item of a `MetricValueList`, sorted.
fn pod_values(list: &Value) -> Vec<(String, String)> {
    let mut values: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|i| {
            (
                i["describedObject"]["name"].as_str().unwrap().to_string(),
                i["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    values.sort();
    values
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

async fn setup_with_exporter() -> (Setup, FakeExporter, extension_apiserver_testing::TestServer) {
    let setup = Setup::new().await;
    setup.core.set_namespace("other", "Active");
    setup
        .core
        .set_pod(pod("default", "web-1", &[("app", "web")], "node-a"));
    setup
        .core
        .set_pod(pod("default", "web-2", &[("app", "web")], "node-a"));
    setup
        .core
        .set_pod(pod("other", "db-1", &[("app", "db")], "node-b"));
    let exporter = FakeExporter::start(PAGE).await;
    let server = setup.adapter(setup.options(&[&exporter.url])).await;
    let client = server.client();
    let scraped = eventually(|| async {
        get_raw(
            &client,
            &format!("{EXTERNAL}/namespaces/default/queue_messages_ready"),
        )
        .await
        .0 == 200
    })
    .await;
    assert!(scraped);
    // The pods listed from the core: before, pod-selector queries answer 503.
    let ready = eventually(|| async { get_text(&client, "/readyz").await.0 == 200 }).await;
    assert!(ready, "{:?}", get_text(&client, "/readyz").await);
    (setup, exporter, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn external_metrics_as_the_hpa_reads_them() {
    let (_setup, exporter, server) = setup_with_exporter().await;
    let client = server.client();
    let jobs =
        format!("{EXTERNAL}/namespaces/default/queue_messages_ready?labelSelector=queue%3Djobs");
    let (status, list) = get_raw(&client, &jobs).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["kind"], "ExternalMetricValueList");
    assert_eq!(list["items"][0]["metricName"], "queue_messages_ready");
    assert_eq!(external_values(&list), [pair(r#"{"queue":"jobs"}"#, "30")]);

    // Every series of the name without a selector; a `namespace` label limits a series to
    // that namespace, one without is seen from every namespace.
    let all = get_raw(
        &client,
        &format!("{EXTERNAL}/namespaces/default/queue_messages_ready"),
    )
    .await;
    assert_eq!(
        external_values(&all.1),
        [
            pair(r#"{"queue":"jobs"}"#, "30"),
            pair(r#"{"queue":"mail"}"#, "4")
        ]
    );
    let other = get_raw(
        &client,
        &format!(
            "{EXTERNAL}/namespaces/other/queue_messages_ready?labelSelector=queue+in+%28jobs%29"
        ),
    )
    .await;
    assert_eq!(
        external_values(&other.1),
        [
            pair(r#"{"namespace":"other","queue":"jobs"}"#, "99"),
            pair(r#"{"queue":"jobs"}"#, "30"),
        ]
    );

    // Discovery lists the scraped names.
    let (_, discovery) = get_raw(&client, EXTERNAL).await;
    let mut names: Vec<&str> = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["http_requests_per_second", "queue_messages_ready"]);

    // The next scrape's value.
    exporter.set(&PAGE.replace("{queue=\"jobs\"} 30", "{queue=\"jobs\"} 45.5"));
    let changed = eventually(|| async {
        external_values(&get_raw(&client, &jobs).await.1) == [pair(r#"{"queue":"jobs"}"#, "45500m")]
    })
    .await;
    assert!(changed, "{}", get_raw(&client, &jobs).await.1);

    // Bad input.
    let unknown = get_raw(
        &client,
        &format!("{EXTERNAL}/namespaces/default/no_such_metric"),
    )
    .await;
    assert_eq!(unknown.0, 404, "{}", unknown.1);
    let malformed = get_raw(
        &client,
        &format!("{EXTERNAL}/namespaces/default/queue_messages_ready?labelSelector=queue%3D%3D%3D"),
    )
    .await;
    assert_eq!(malformed.0, 400, "{}", malformed.1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn custom_metrics_of_pods_as_the_hpa_reads_them() {
    let (_setup, exporter, server) = setup_with_exporter().await;
    let client = server.client();
    // A `Pods` metric: the target's pod selector, every series of each pod summed.
    let pods = format!(
        "{CUSTOM}/namespaces/default/pods/%2A/http_requests_per_second?labelSelector=app%3Dweb"
    );
    let (status, list) = get_raw(&client, &pods).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["kind"], "MetricValueList");
    assert_eq!(
        pod_values(&list),
        [pair("web-1", "10500m"), pair("web-2", "2250m")]
    );
    let item = &list["items"][0];
    assert_eq!(item["describedObject"]["kind"], "Pod");
    assert_eq!(item["describedObject"]["namespace"], "default");
    assert_eq!(item["metric"]["name"], "http_requests_per_second");

    // With the metric's own selector (`metricLabelSelector`), reported back in `metric.selector`.
    let ok = format!("{pods}&metricLabelSelector=code%3D200");
    let (_, list) = get_raw(&client, &ok).await;
    assert_eq!(
        pod_values(&list),
        [pair("web-1", "10"), pair("web-2", "2250m")]
    );
    assert_eq!(
        list["items"][0]["metric"]["selector"]["matchLabels"]["code"],
        "200"
    );

    // v1beta1 from the same provider.
    let old = pods.replace("v1beta2", "v1beta1");
    let (status, list) = get_raw(&client, &old).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["items"][0]["metricName"], "http_requests_per_second");
    assert_eq!(
        pod_values(&list),
        [pair("web-1", "10500m"), pair("web-2", "2250m")]
    );

    // An `Object` metric of one pod, by name; a pod without the metric is 404.
    let web_1 = format!("{CUSTOM}/namespaces/default/pods/web-1/http_requests_per_second");
    let (status, one) = get_raw(&client, &web_1).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(pod_values(&one), [pair("web-1", "10500m")]);
    let (status, missing) = get_raw(
        &client,
        &format!("{CUSTOM}/namespaces/default/pods/web-9/http_requests_per_second"),
    )
    .await;
    assert_eq!(status, 404, "{missing}");
    assert_eq!(
        missing["message"],
        "the server could not find the metric http_requests_per_second for pods web-9"
    );

    // Discovery: only series with namespace and pod labels are pod metrics.
    let (_, discovery) = get_raw(&client, CUSTOM).await;
    let names: Vec<&str> = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pods/http_requests_per_second"]);

    // The next scrape's values.
    exporter.set(&PAGE.replace(
        "pod=\"web-2\",code=\"200\"} 2.25",
        "pod=\"web-2\",code=\"200\"} 40",
    ));
    let changed = eventually(|| async {
        pod_values(&get_raw(&client, &pods).await.1)
            == [pair("web-1", "10500m"), pair("web-2", "40")]
    })
    .await;
    assert!(changed, "{}", get_raw(&client, &pods).await.1);
    server.stop().await;
}
