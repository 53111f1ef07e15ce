//! `manifests/metrics-adapter.yaml`: every object parses as its Kubernetes type (no unknown
//! field), the Deployment's arguments are the binary's flags, the objects are those that
//! replace metrics-server, and `kubectl create --dry-run=client` accepts the file (against
//! the fake core, which serves the discovery kubectl maps kinds with; `--validate=false`, as
//! the fake has no OpenAPI schema: the typed parsing is the schema check).

use clap::Parser as _;
use extension_apiserver_testing::fake_core::FakeCore;
use extension_apiserver_testing::kubectl;
use extension_apiserver_testing::manifests::{documents, strict};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde_json::Value;

const MANIFESTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/manifests/metrics-adapter.yaml"
);

/// The manifests' documents.
fn manifest_documents() -> Vec<Value> {
    documents(&std::fs::read_to_string(MANIFESTS).unwrap())
}

#[test]
fn manifests_parse_as_the_kubernetes_types_and_the_binarys_flags() {
    let mut apiservices = Vec::new();
    let mut cluster_roles = Vec::new();
    let mut bindings = Vec::new();
    let mut kinds = Vec::new();
    for doc in manifest_documents() {
        let kind = doc["kind"].as_str().unwrap().to_string();
        match kind.as_str() {
            "Namespace" => drop(strict::<Namespace>(&doc)),
            "ServiceAccount" => drop(strict::<ServiceAccount>(&doc)),
            "Service" => drop(strict::<Service>(&doc)),
            "RoleBinding" => drop(strict::<RoleBinding>(&doc)),
            "ClusterRole" => cluster_roles.push(strict::<ClusterRole>(&doc)),
            "ClusterRoleBinding" => bindings.push(strict::<ClusterRoleBinding>(&doc)),
            "APIService" => apiservices.push(strict::<APIService>(&doc)),
            "Deployment" => {
                let deployment: Deployment = strict(&doc);
                let container = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
                let args = container.args.clone().unwrap_or_default();
                let cli = metrics_adapter::Cli::try_parse_from(
                    std::iter::once("metrics-adapter".to_string()).chain(args),
                )
                .unwrap_or_else(|e| panic!("the Deployment's arguments: {e}"));
                assert!(cli.adapter.kubelet_use_node_status_port);
                assert_eq!(cli.adapter.scrape_urls.len(), 1);
            }
            other => panic!("unexpected kind {other}"),
        }
        kinds.push(kind);
    }
    let mut names: Vec<String> = apiservices
        .iter()
        .map(|a| a.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "v1beta1.custom.metrics.k8s.io",
            "v1beta1.external.metrics.k8s.io",
            "v1beta1.metrics.k8s.io",
            "v1beta2.custom.metrics.k8s.io",
        ]
    );
    for apiservice in &apiservices {
        let service = apiservice.spec.as_ref().unwrap().service.as_ref().unwrap();
        assert_eq!(
            (service.namespace.as_deref(), service.name.as_deref()),
            (Some("metrics-adapter"), Some("metrics-adapter"))
        );
    }
    let role = |name: &str| {
        cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("ClusterRole {name}"))
    };
    // Nodes, pods and the kubelets' metrics, as metrics-server's role.
    let reader = role("system:metrics-adapter");
    let resources: Vec<String> = reader
        .rules
        .iter()
        .flatten()
        .flat_map(|r| r.resources.clone().unwrap_or_default())
        .collect();
    assert_eq!(resources, ["nodes/metrics", "pods", "nodes"]);
    role("system:aggregated-metrics-reader");
    // The HPA controller's service account may read custom and external metrics.
    let hpa = bindings
        .iter()
        .find(|b| b.role_ref.name == "metrics-adapter:custom-and-external-metrics-reader")
        .expect("a binding for the HPA controller");
    let subject = &hpa.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (subject.name.as_str(), subject.namespace.as_deref()),
        ("horizontal-pod-autoscaler", Some("kube-system"))
    );
    assert!(
        bindings
            .iter()
            .any(|b| b.role_ref.name == "system:auth-delegator")
    );
    assert!(kinds.contains(&"RoleBinding".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_accepts_the_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let kubeconfig = core.kubeconfig("admin");
    let out = tokio::task::spawn_blocking(move || {
        kubectl(
            &kubeconfig,
            &[
                "create",
                "--dry-run=client",
                "--validate=false",
                "-o",
                "name",
                "-f",
                MANIFESTS,
            ],
            &[],
        )
    })
    .await
    .unwrap();
    assert!(out.success, "{}", out.stderr);
    let created: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(created.len(), manifest_documents().len(), "{}", out.stdout);
    assert!(
        created.contains(&"apiservice.apiregistration.k8s.io/v1beta1.metrics.k8s.io"),
        "{}",
        out.stdout
    );
}

/// The README's HPA example parses as the Kubernetes types, and its External metric is one
/// the adapter serves from a series of the exporter shown beside it.
#[test]
fn the_readme_hpa_parses() {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let yaml: String = readme
        .split("```yaml\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap())
        .collect::<Vec<_>>()
        .join("---\n");
    let docs = documents(&yaml);
    assert_eq!(docs.len(), 2);
    strict::<Deployment>(&docs[0]);
    let hpa: HorizontalPodAutoscaler = strict(&docs[1]);
    let metric = &hpa.spec.unwrap().metrics.unwrap()[0];
    let external = metric.external.as_ref().unwrap();
    assert_eq!(external.metric.name, "queue_messages_ready");
    let page = readme
        .split("```text\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let samples = metrics_adapter::prometheus::parse(page).unwrap();
    assert!(samples.iter().any(|s| s.name == external.metric.name));
}
