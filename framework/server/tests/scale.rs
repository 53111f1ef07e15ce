//! The scale subresource (`#[resource(scale(...))]`) of a whole server over TLS, driven by
//! kubectl: `kubectl scale`, `kubectl patch --subresource=scale`, the `autoscaling/v1` `Scale`
//! it reads and writes, its errors, discovery and OpenAPI, as kube-apiserver serves a CRD's
//! `subresources.scale`.

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::APIGroup;
use extension_apiserver_testing::{KubectlOutput, TestServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "scale.example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    )
)]
pub struct Widget {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WidgetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WidgetStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct WidgetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub color: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct WidgetStatus {
    #[serde(default)]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
}

const WIDGETS: &str = "/apis/scale.example.com/v1/namespaces/default/widgets";

fn group() -> APIGroup {
    APIGroup::new("scale.example.com").version("v1", |v| v.resource::<Widget>())
}

fn ok(out: KubectlOutput) -> String {
    assert!(out.success, "kubectl failed: {}", out.stderr);
    out.stdout
}

fn json_of(out: KubectlOutput) -> Value {
    serde_json::from_str(&ok(out)).unwrap()
}

fn write_file(dir: &std::path::Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_reads_and_writes_the_replicas_through_a_scale() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), vec![group()]).await;
    let widget = json!({
        "apiVersion": "scale.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"replicas": 1, "color": "red"},
    });
    let file = write_file(dir.path(), "w.json", &widget);
    ok(server.kubectl(&["create", "-f", &file]));
    // The status subresource sets what the scale reports as observed.
    let status = json!({
        "apiVersion": "scale.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "status": {"replicas": 1, "selector": "app=w"},
    });
    let file = write_file(dir.path(), "status.json", &status);
    ok(server.kubectl(&["replace", "--subresource=status", "-f", &file]));

    let scale = json_of(server.kubectl(&["get", "--raw", &format!("{WIDGETS}/w/scale")]));
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["metadata"]["name"], "w");
    assert_eq!(scale["metadata"]["namespace"], "default");
    assert_eq!(scale["spec"], json!({"replicas": 1}));
    assert_eq!(scale["status"], json!({"replicas": 1, "selector": "app=w"}));

    let out = ok(server.kubectl(&["scale", "widgets/w", "--replicas=3"]));
    assert_eq!(out.trim(), "widget.scale.example.com/w scaled");
    let stored = json_of(server.kubectl(&["get", "widgets/w", "-o", "json"]));
    assert_eq!(stored["spec"]["replicas"], 3);
    assert_eq!(
        stored["spec"]["color"], "red",
        "the rest of the object is kept"
    );
    assert_eq!(
        stored["status"]["replicas"], 1,
        "status is not the scale's to change"
    );
    assert_eq!(
        stored["metadata"]["generation"], 2,
        "a spec change bumps generation"
    );

    // kubectl's precondition: the current replicas must be what the caller says.
    let refused = server.kubectl(&["scale", "widgets/w", "--current-replicas=2", "--replicas=4"]);
    assert!(!refused.success);
    let stored = json_of(server.kubectl(&["get", "widgets/w", "-o", "json"]));
    assert_eq!(stored["spec"]["replicas"], 3);

    let patch = r#"{"spec":{"replicas":5}}"#;
    ok(server.kubectl(&[
        "patch",
        "widgets/w",
        "--subresource=scale",
        "--type=merge",
        "-p",
        patch,
    ]));
    let scale = json_of(server.kubectl(&["get", "--raw", &format!("{WIDGETS}/w/scale")]));
    assert_eq!(scale["spec"]["replicas"], 5);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_scales_get_kubes_statuses_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), vec![group()]).await;
    let widget = json!({
        "apiVersion": "scale.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"replicas": 2},
    });
    let file = write_file(dir.path(), "w.json", &widget);
    ok(server.kubectl(&["create", "-f", &file]));
    let scale = json_of(server.kubectl(&["get", "--raw", &format!("{WIDGETS}/w/scale")]));
    let rv = scale["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // Negative replicas: 422 for autoscaling's Scale, as ValidateScale.
    let mut negative = scale.clone();
    negative["spec"]["replicas"] = json!(-1);
    let file = write_file(dir.path(), "negative.json", &negative);
    let out = server.kubectl(&[
        "replace",
        "--raw",
        &format!("{WIDGETS}/w/scale"),
        "-f",
        &file,
    ]);
    assert!(!out.success);
    assert!(
        // kubectl renders kube's Invalid Status (details.kind Scale) so.
        out.stderr.contains(
            "The Scale \"w\" is invalid: spec.replicas: Invalid value: -1: must be greater \
             than or equal to 0"
        ),
        "{}",
        out.stderr
    );

    // A scale read before another write: 409, as the object's own update.
    ok(server.kubectl(&["scale", "widgets/w", "--replicas=3"]));
    let mut stale = scale.clone();
    stale["spec"]["replicas"] = json!(7);
    let file = write_file(dir.path(), "stale.json", &stale);
    let out = server.kubectl(&[
        "replace",
        "--raw",
        &format!("{WIDGETS}/w/scale"),
        "-f",
        &file,
    ]);
    assert!(!out.success);
    assert!(
        out.stderr.contains("the object has been modified"),
        "{}",
        out.stderr
    );

    // Not a Scale at all.
    let mut wrong = scale.clone();
    wrong["kind"] = json!("Widget");
    wrong["apiVersion"] = json!("scale.example.com/v1");
    let file = write_file(dir.path(), "wrong.json", &wrong);
    let out = server.kubectl(&[
        "replace",
        "--raw",
        &format!("{WIDGETS}/w/scale"),
        "-f",
        &file,
    ]);
    assert!(!out.success, "{}", out.stdout);

    // The scale of a missing object: the object's 404.
    let out = server.kubectl(&["get", "--raw", &format!("{WIDGETS}/nothing/scale")]);
    assert!(!out.success);
    assert!(
        out.stderr
            .contains("widgets.scale.example.com \"nothing\" not found"),
        "{}",
        out.stderr
    );

    let stored = json_of(server.kubectl(&["get", "widgets/w", "-o", "json"]));
    assert_eq!(
        stored["spec"]["replicas"], 3,
        "only the good write changed it"
    );
    assert_ne!(stored["metadata"]["resourceVersion"], json!(rv));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_openapi_describe_the_scale_subresource() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), vec![group()]).await;
    let list = json_of(server.kubectl(&["get", "--raw", "/apis/scale.example.com/v1"]));
    let scale = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "widgets/scale")
        .expect("widgets/scale in discovery")
        .clone();
    assert_eq!(
        scale,
        json!({"name": "widgets/scale", "singularName": "", "namespaced": true,
               "group": "autoscaling", "version": "v1", "kind": "Scale",
               "verbs": ["get", "patch", "update"]})
    );
    let status = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "widgets/status")
        .unwrap();
    assert_eq!(status["kind"], "Widget");
    assert!(status.get("group").is_none());

    let v3 = json_of(server.kubectl(&["get", "--raw", "/openapi/v3/apis/scale.example.com/v1"]));
    let path =
        &v3["paths"]["/apis/scale.example.com/v1/namespaces/{namespace}/widgets/{name}/scale"];
    let schema = &path["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    assert_eq!(
        schema["$ref"],
        "#/components/schemas/io.k8s.api.autoscaling.v1.Scale"
    );
    assert_eq!(
        path["put"]["x-kubernetes-group-version-kind"],
        json!({"group": "autoscaling", "kind": "Scale", "version": "v1"})
    );
    let definition = &v3["components"]["schemas"]["io.k8s.api.autoscaling.v1.Scale"];
    assert_eq!(
        definition["x-kubernetes-group-version-kind"],
        json!([{"group": "autoscaling", "kind": "Scale", "version": "v1"}])
    );
    // kubectl explain reads the same document.
    let explained = ok(server.kubectl(&["explain", "widgets.spec.replicas"]));
    assert!(explained.contains("replicas"), "{explained}");
    server.stop().await;
}
