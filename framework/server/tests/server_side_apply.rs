//! Server-side apply and managedFields over TLS with real clients: kube-rs `Patch::Apply`
//! and `kubectl apply --server-side` as two managers, conflicts and `--force-conflicts`,
//! fields removed by omission, list maps merged by key, sets, atomic maps, apply-create,
//! dry run, `kubectl diff --server-side`, and the managedFields every verb leaves.

use std::collections::BTreeMap;

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::APIGroup;
use extension_apiserver_testing::{KubectlOutput, TestServer};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "ssa.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus",
    scale(
        spec_replicas_path = ".spec.size",
        status_replicas_path = ".status.replicas"
    )
)]
pub struct Gadget {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: GadgetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<GadgetStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GadgetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub ports: Vec<Port>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub selector: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Port {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct GadgetStatus {
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

fn group() -> APIGroup {
    APIGroup::new("ssa.example.com").version("v1", |v| v.resource::<Gadget>())
}

fn config(spec: Value) -> Value {
    json!({"apiVersion": "ssa.example.com/v1", "kind": "Gadget",
           "metadata": {"name": "g", "namespace": "default"}, "spec": spec})
}

async fn apply(
    api: &Api<DynamicObject>,
    manager: &str,
    spec: Value,
    force: bool,
) -> kube::Result<Value> {
    let mut params = PatchParams::apply(manager);
    params.force = force;
    api.patch("g", &params, &Patch::Apply(config(spec)))
        .await
        .map(v)
}

/// A dynamic object as the JSON the server sent.
fn v(object: DynamicObject) -> Value {
    serde_json::to_value(object).unwrap()
}

/// `manager → fieldsV1` of an object's managedFields, with each entry's operation.
fn managers(object: &Value) -> BTreeMap<String, (String, Value)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let name = e["manager"].as_str().unwrap_or("<none>").to_string();
            let sub = e["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            let operation = e["operation"].as_str().unwrap_or("<none>").to_string();
            (name + &sub, (operation, e["fieldsV1"].clone()))
        })
        .collect()
}

fn api(server: &TestServer) -> Api<DynamicObject> {
    let resource = kube::api::ApiResource {
        group: "ssa.example.com".into(),
        version: "v1".into(),
        api_version: "ssa.example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    Api::namespaced_with(server.client(), "default", &resource)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_managers_conflict_force_and_remove_by_omission() {
    let server = TestServer::builder().group(group()).start().await;
    let api = api(&server);

    // Apply creates (201 through kube-rs is an Ok) and records an Apply entry.
    let created = apply(
        &api,
        "alice",
        json!({"color": "red", "ports": [{"name": "http", "port": 80}]}),
        false,
    )
    .await
    .unwrap();
    let owned = managers(&created);
    assert_eq!(owned["alice"].0, "Apply");
    assert_eq!(
        owned["alice"].1,
        json!({"f:spec": {"f:color": {}, "f:ports": {"k:{\"name\":\"http\"}": {".": {}, "f:name": {}, "f:port": {}}}}})
    );

    // Bob applies another port (merged by key) and the same color: shared, no conflict.
    let merged = apply(
        &api,
        "bob",
        json!({"color": "red", "ports": [{"name": "https", "port": 443}]}),
        false,
    )
    .await
    .unwrap();
    let ports: Vec<&str> = merged["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(ports, ["http", "https"]);

    // Bob wants another color: 409 naming alice's field, unless forced.
    let refused = apply(&api, "bob", json!({"color": "blue"}), false)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("{refused}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.color"
    );
    let forced = apply(&api, "bob", json!({"color": "blue"}), true)
        .await
        .unwrap();
    assert_eq!(forced["spec"]["color"], "blue");
    // Bob stopped applying his port: removed, as nobody else owns it; alice lost the color.
    let ports: Vec<&str> = forced["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(ports, ["http"]);
    let owned = managers(&forced);
    assert_eq!(owned["bob"].1, json!({"f:spec": {"f:color": {}}}));
    assert!(owned["alice"].1["f:spec"].get("f:color").is_none());

    // Alice omits her port: it goes.
    let pruned = apply(&api, "alice", json!({}), false).await.unwrap();
    assert!(pruned["spec"].get("ports").is_none(), "{pruned}");

    // Without fieldManager an apply is kube's 422.
    let request = http::Request::patch("/apis/ssa.example.com/v1/namespaces/default/gadgets/g")
        .header("content-type", "application/apply-patch+yaml")
        .body(b"apiVersion: ssa.example.com/v1\nkind: Gadget\nmetadata: {name: g}\n".to_vec())
        .unwrap();
    let response = server.client().send(request.map(Into::into)).await.unwrap();
    assert_eq!(response.status(), 422);
    let body = axum_body(response).await;
    assert_eq!(
        body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    server.stop().await;
}

async fn axum_body(response: http::Response<kube::client::Body>) -> Value {
    use http_body_util::BodyExt;
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_atomic_maps_dry_run_and_every_verb_records_its_manager() {
    let server = TestServer::builder().group(group()).start().await;
    let api = api(&server);
    let gadgets: Api<Gadget> = Api::namespaced(server.client(), "default");

    // Create with a field manager: an Update entry with "." on new parents.
    let mut gadget = Gadget::default();
    gadget.metadata.name = Some("g".into());
    gadget.spec.size = Some(1);
    let post = PostParams {
        field_manager: Some("creator".into()),
        ..PostParams::default()
    };
    let created = gadgets.create(&post, &gadget).await.unwrap();
    let created = serde_json::to_value(created).unwrap();
    let owned = managers(&created);
    assert_eq!(owned["creator"].0, "Update");
    assert_eq!(
        owned["creator"].1,
        json!({"f:spec": {".": {}, "f:size": {}}})
    );

    // Sets: each value owned; atomic maps: owned and replaced whole.
    apply(
        &api,
        "a",
        json!({"tags": ["x", "y"], "selector": {"app": "one", "tier": "web"}}),
        false,
    )
    .await
    .unwrap();
    let both = apply(&api, "b", json!({"tags": ["z"]}), false)
        .await
        .unwrap();
    assert_eq!(both["spec"]["tags"], json!(["x", "y", "z"]));
    assert_eq!(
        managers(&both)["b"].1,
        json!({"f:spec": {"f:tags": {"v:\"z\"": {}}}})
    );
    assert_eq!(managers(&both)["a"].1["f:spec"]["f:selector"], json!({}));
    let refused = apply(&api, "b", json!({"selector": {"app": "two"}}), false)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains(".spec.selector"), "{refused}");
    let replaced = apply(&api, "b", json!({"selector": {"app": "two"}}), true)
        .await
        .unwrap();
    assert_eq!(replaced["spec"]["selector"], json!({"app": "two"}));

    // Dry run: answered, nothing changes.
    let mut params = PatchParams::apply("dry").dry_run();
    params.force = true;
    let answered = v(api
        .patch("g", &params, &Patch::Apply(config(json!({"size": 9}))))
        .await
        .unwrap());
    assert_eq!(answered["spec"]["size"], 9);
    let stored = v(api.get("g").await.unwrap());
    assert_eq!(stored["spec"]["size"], 1);
    assert!(!managers(&stored).contains_key("dry"));

    // A merge patch without fieldManager: the manager is the User-Agent's first word.
    let patched = v(api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"color": "green"}})),
        )
        .await
        .unwrap());
    let agent_manager = managers(&patched)
        .keys()
        .find(|k| !["creator", "a", "b"].contains(&k.as_str()))
        .cloned()
        .unwrap();
    assert_eq!(
        managers(&patched)[&agent_manager].1,
        json!({"f:spec": {"f:color": {}}})
    );

    // A status write records its subresource; the main resource's managers keep theirs.
    let status = PatchParams {
        field_manager: Some("controller".into()),
        ..PatchParams::default()
    };
    let with_status = v(api
        .patch_status(
            "g",
            &status,
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap());
    let owned = managers(&with_status);
    assert_eq!(
        owned["controller/status"].1,
        json!({"f:status": {".": {}, "f:ready": {}}})
    );
    assert!(owned.contains_key("creator") && owned.contains_key("a") && owned.contains_key("b"));

    // A status apply owns only the status; a PUT records its manager's change.
    let status_config = json!({"apiVersion": "ssa.example.com/v1", "kind": "Gadget",
                               "metadata": {"name": "g", "namespace": "default"},
                               "status": {"replicas": 2}});
    let applied = v(api
        .patch_status(
            "g",
            &PatchParams::apply("ctl"),
            &Patch::Apply(status_config),
        )
        .await
        .unwrap());
    assert_eq!(
        managers(&applied)["ctl/status"],
        ("Apply".to_string(), json!({"f:status": {"f:replicas": {}}}))
    );
    let mut current: Gadget = serde_json::from_value(applied).unwrap();
    current.spec.color = Some("violet".into());
    let put = PostParams {
        field_manager: Some("replacer".into()),
        ..PostParams::default()
    };
    let replaced =
        serde_json::to_value(gadgets.replace("g", &put, &current).await.unwrap()).unwrap();
    assert_eq!(
        managers(&replaced)["replacer"],
        ("Update".to_string(), json!({"f:spec": {"f:color": {}}}))
    );

    // The scale subresource takes an apply of a Scale; the replicas' owner moves to it.
    let scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                       "metadata": {"name": "g", "namespace": "default"}, "spec": {"replicas": 4}});
    let scaled = gadgets
        .patch_scale(
            "g",
            &PatchParams::apply("autoscaler").force(),
            &Patch::Apply(scale),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(4));
    let object = v(api.get("g").await.unwrap());
    assert_eq!(object["spec"]["size"], 4);
    let owned = managers(&object);
    assert_eq!(
        owned["autoscaler/scale"].1,
        json!({"f:spec": {"f:size": {}}}),
        "{owned:?}"
    );
    assert!(
        owned["creator"].1["f:spec"].get("f:size").is_none(),
        "{owned:?}"
    );

    // A client may reset managedFields with an empty list.
    let reset = v(api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"managedFields": [{}]}})),
        )
        .await
        .unwrap());
    let after = managers(&reset);
    assert!(
        after.len() <= 1 && !after.contains_key("<none>"),
        "{:#}",
        reset["metadata"]
    );
    server.stop().await;
}

fn ok(out: KubectlOutput) -> String {
    assert!(
        out.success,
        "kubectl failed:\n{}\n{}",
        out.stdout, out.stderr
    );
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_server_side_diffs_and_forces() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder().group(group()).start().await;
    let file = dir.path().join("g.yaml");
    let write = |color: &str| {
        let yaml = format!(
            "apiVersion: ssa.example.com/v1\nkind: Gadget\nmetadata:\n  name: g\n  namespace: default\nspec:\n  color: {color}\n  ports:\n  - name: http\n    port: 80\n"
        );
        std::fs::write(&file, yaml).unwrap();
        file.display().to_string()
    };
    let path = write("red");
    let out = ok(server.kubectl(&["apply", "--server-side", "-f", &path]));
    assert!(
        out.contains("gadget.ssa.example.com/g serverside-applied"),
        "{out}"
    );
    // kubectl hides managedFields unless asked.
    let plain = ok(server.kubectl(&["get", "gadget", "g", "-o", "yaml"]));
    assert!(!plain.contains("managedFields"), "{plain}");
    let shown = ok(server.kubectl(&["get", "gadget", "g", "-o", "json", "--show-managed-fields"]));
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(managers(&shown)["kubectl"].0, "Apply");

    // Another manager takes the color with a merge patch; kubectl's apply then conflicts.
    ok(server.kubectl(&[
        "patch",
        "gadget",
        "g",
        "--type=merge",
        "-p",
        r#"{"spec":{"color":"blue"}}"#,
        "--field-manager=editor",
    ]));
    let out = server.kubectl(&["apply", "--server-side", "-f", &path]);
    assert!(!out.success, "{out:?}");
    assert!(
        out.stderr
            .contains("conflict with \"editor\" using ssa.example.com/v1"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(".spec.color"), "{}", out.stderr);

    // kubectl diff --server-side shows what an apply would change, changing nothing.
    let path = write("green");
    let diff = server.kubectl(&["diff", "--server-side", "--force-conflicts", "-f", &path]);
    assert!(diff.stdout.contains("+  color: green"), "{diff:?}");
    let color = ok(server.kubectl(&["get", "gadget", "g", "-o", "jsonpath={.spec.color}"]));
    assert_eq!(color, "blue");
    let out = ok(server.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", &path]));
    assert!(out.contains("serverside-applied"), "{out}");
    let color = ok(server.kubectl(&["get", "gadget", "g", "-o", "jsonpath={.spec.color}"]));
    assert_eq!(color, "green");
    server.stop().await;
}

/// An object last written by client-side `kubectl apply` is then applied server-side by the
/// same user without conflicts, and kubectl stays the only manager of its fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_side_apply_moves_to_server_side_without_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder().group(group()).start().await;
    let file = dir.path().join("h.yaml");
    let write = |color: &str| {
        let yaml = format!(
            "apiVersion: ssa.example.com/v1\nkind: Gadget\nmetadata:\n  name: h\n  namespace: default\nspec:\n  color: {color}\n  tags: [a]\n"
        );
        std::fs::write(&file, yaml).unwrap();
        file.display().to_string()
    };
    ok(server.kubectl(&["apply", "-f", &write("red")]));
    ok(server.kubectl(&["apply", "-f", &write("amber")]));
    let out = ok(server.kubectl(&["apply", "--server-side", "-f", &write("blue")]));
    assert!(out.contains("serverside-applied"), "{out}");
    let json = ok(server.kubectl(&["get", "gadget", "h", "-o", "json", "--show-managed-fields"]));
    let object: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(object["spec"]["color"], "blue");
    let owned = managers(&object);
    assert_eq!(owned["kubectl"].0, "Apply");
    assert!(
        owned["kubectl"].1["f:spec"].get("f:color").is_some(),
        "{owned:?}"
    );
    let others_own_color = owned
        .iter()
        .any(|(m, (_, f))| m != "kubectl" && f["f:spec"].get("f:color").is_some());
    assert!(!others_own_color, "{owned:?}");
    server.stop().await;
}
