//! `/metrics` over TLS: kube-apiserver's metric names and labels after real requests made with
//! kubectl, read back with a real Prometheus text-format parser.

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::APIGroup;
use extension_apiserver_testing::{KubectlOutput, TestServer};
use prometheus_parse::{Sample, Scrape, Value};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "metrics.example.com",
    version = "v1",
    kind = "Meter",
    namespaced
)]
pub struct Meter {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

const GROUP: &str = "metrics.example.com";
const RESOURCE: &str = "meters.metrics.example.com";

fn ok(out: KubectlOutput) -> String {
    assert!(out.success, "kubectl failed: {}", out.stderr);
    out.stdout
}

fn scrape(server: &TestServer) -> Scrape {
    let text = ok(server.kubectl(&["get", "--raw", "/metrics"]));
    let lines = text.lines().map(|l| Ok(l.to_string()));
    Scrape::parse(lines).expect("Prometheus text format")
}

/// The samples called `name` whose labels include every pair of `labels`.
fn samples<'a>(scrape: &'a Scrape, name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect()
}

fn number(sample: &Sample) -> f64 {
    match &sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
        Value::Summary(_) => panic!("no summaries here"),
    }
}

fn total(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(scrape, name, labels).into_iter().map(number).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_have_kube_apiservers_names_and_labels() {
    let group = APIGroup::new(GROUP).version("v1", |v| v.resource::<Meter>());
    let server = TestServer::builder().group(group).start().await;
    let dir = tempfile::tempdir().unwrap();
    for name in ["a", "b", "c"] {
        let file = dir.path().join(format!("{name}.yaml"));
        let yaml = format!(
            "apiVersion: {GROUP}/v1\nkind: Meter\nmetadata:\n  name: {name}\n  namespace: default\n"
        );
        std::fs::write(&file, yaml).unwrap();
        ok(server.kubectl(&["create", "-f", &file.display().to_string()]));
    }
    ok(server.kubectl(&["get", "meters", "a", "-o", "name"]));
    ok(server.kubectl(&["get", "meters", "-o", "name"]));
    let watch = format!("/apis/{GROUP}/v1/namespaces/default/meters?watch=1&timeoutSeconds=1");
    let events = ok(server.kubectl(&["get", "--raw", &watch]));
    assert_eq!(events.lines().count(), 3, "{events}");
    let missing = server.kubectl(&["get", "meters", "nope"]);
    assert!(!missing.success);

    let scrape = scrape(&server);
    let ours = [("group", GROUP), ("version", "v1"), ("resource", "meters")];
    let with = |more: &[(&'static str, &'static str)]| -> Vec<(&str, &str)> {
        ours.iter().chain(more).copied().collect()
    };
    let count = |labels: &[(&str, &str)]| total(&scrape, "apiserver_request_total", labels);
    let created = with(&[("verb", "CREATE"), ("scope", "resource"), ("code", "201")]);
    assert_eq!(count(&created), 3.0);
    let component = with(&[
        ("verb", "CREATE"),
        ("component", "apiserver"),
        ("dry_run", ""),
    ]);
    assert_eq!(count(&component), 3.0);
    assert!(count(&with(&[("verb", "GET"), ("code", "200")])) >= 1.0);
    assert!(count(&with(&[("verb", "GET"), ("code", "404")])) >= 1.0);
    let listed = with(&[("verb", "LIST"), ("scope", "namespace"), ("code", "200")]);
    assert!(count(&listed) >= 1.0);
    // A watch is counted when it ends.
    assert!(count(&with(&[("verb", "WATCH"), ("code", "200")])) >= 1.0);

    let durations = "apiserver_request_duration_seconds";
    assert!(total(&scrape, durations, &with(&[("verb", "LIST")])) >= 1.0);
    assert!(
        total(
            &scrape,
            "apiserver_response_sizes",
            &with(&[("verb", "LIST")])
        ) >= 1.0
    );
    let sent = total(&scrape, "apiserver_watch_events_total", &ours);
    assert!(sent >= 3.0, "three ADDED events: {sent}");
    // The watch has ended: nobody watches or runs long any more.
    let watchers = [("group", GROUP), ("kind", "Meter")];
    assert_eq!(
        total(&scrape, "apiserver_registered_watchers", &watchers),
        0.0
    );
    assert_eq!(total(&scrape, "apiserver_longrunning_requests", &ours), 0.0);

    // Storage: every backend request timed by operation and group-resource, and the objects
    // counted by the watch cache.
    let storage = "etcd_request_duration_seconds";
    assert!(
        total(
            &scrape,
            storage,
            &[("operation", "create"), ("type", RESOURCE)]
        ) >= 3.0
    );
    let objects = total(
        &scrape,
        "apiserver_storage_objects",
        &[("resource", RESOURCE)],
    );
    assert_eq!(objects, 3.0);
    let received = "apiserver_watch_cache_events_received_total";
    assert!(total(&scrape, received, &[("resource", RESOURCE)]) >= 3.0);

    let authenticated = "authentication_duration_seconds";
    assert!(total(&scrape, authenticated, &[("result", "success")]) >= 1.0);
    assert!(
        total(
            &scrape,
            "authorization_duration_seconds",
            &[("result", "allowed")]
        ) >= 1.0
    );
    let resident = total(&scrape, "process_resident_memory_bytes", &[]);
    assert!(resident > 1e6, "resident memory {resident}");
    assert_eq!(samples(&scrape, "process_cpu_seconds_total", &[]).len(), 1);
    server.stop().await;
}

/// A kind of its own, so that the other tests' counts of meters stay theirs.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "stages.example.com",
    version = "v1",
    kind = "Stage",
    namespaced
)]
pub struct Stage {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

/// Every stage of a create, a merge patch and a server-side apply made with kubectl is timed
/// in `apiserver_write_stage_duration_seconds`, by verb and stage (counts at least: the
/// registry is the process's, shared with the other tests of this binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_stages_are_timed_by_verb() {
    let group = APIGroup::new("stages.example.com").version("v1", |v| v.resource::<Stage>());
    let server = TestServer::builder().group(group).start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("staged.yaml");
    let yaml = "apiVersion: stages.example.com/v1\nkind: Stage\nmetadata:\n  name: staged\n  namespace: default\n";
    std::fs::write(&file, yaml).unwrap();
    let file = file.display().to_string();
    ok(server.kubectl(&["create", "-f", &file]));
    let patch = r#"{"metadata":{"labels":{"stage":"patched"}}}"#;
    let merge = ["patch", "stages", "staged", "--type=merge", "-p", patch];
    ok(server.kubectl(&merge));
    ok(server.kubectl(&["apply", "--server-side", "-f", &file]));

    let metric = "apiserver_write_stage_duration_seconds";
    let timed = |scrape: &Scrape, verb: &str, stage: &str| {
        total(scrape, metric, &[("verb", verb), ("stage", stage)])
    };
    // The watch cache takes the writes' events after the writes answered: a bounded wait.
    let mut scraped = scrape(&server);
    for _ in 0..50 {
        if timed(&scraped, "update", "watch_cache") >= 2.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        scraped = scrape(&server);
    }
    for stage in ["decode", "field_manager", "strategy", "encode", "store"] {
        assert!(timed(&scraped, "create", stage) >= 1.0, "create {stage}");
        assert!(timed(&scraped, "patch", stage) >= 1.0, "patch {stage}");
        assert!(timed(&scraped, "apply", stage) >= 1.0, "apply {stage}");
    }
    assert!(timed(&scraped, "patch", "patch") >= 1.0);
    // The watch cache tells a new key from a changed one.
    assert!(timed(&scraped, "create", "watch_cache") >= 1.0);
    assert!(timed(&scraped, "update", "watch_cache") >= 2.0);
    server.stop().await;
}
