//! A change of storage version on a real SQLite file: objects written while `v1` was stored
//! are read, listed and watched in both versions after the restart that makes `v2` the
//! storage version, nothing lost; an update stores `v2`; `migrate-storage` rewrites the
//! rest (a running server's watch sees MODIFIED), and a second run rewrites nothing. An
//! object in a version the server does not know is a 500.

use std::path::Path;
use std::sync::Arc;

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::runtime::convert::{ConversionError, Convertible};
use extension_apiserver::server::{APIGroup, APIServer, ServerError};
use extension_apiserver::storage::{Backend, ListRequest};
use extension_apiserver_testing::{KubectlOutput, TestServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The first storage version: `width`.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "migrate.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    printcolumn(name = "Width", type = "integer", json_path = ".spec.width")
)]
pub struct GadgetV1 {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SpecV1,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecV1 {
    #[serde(default)]
    pub width: i64,
}

/// The next storage version: `size`.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "migrate.example.com",
    version = "v2",
    kind = "Gadget",
    namespaced,
    printcolumn(name = "Size", type = "integer", json_path = ".spec.size")
)]
pub struct GadgetV2 {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SpecV2,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecV2 {
    #[serde(default)]
    pub size: i64,
}

/// Both ways, as each is the hub in turn.
impl Convertible<GadgetV2> for GadgetV1 {
    fn into_hub(self) -> Result<GadgetV2, ConversionError> {
        Ok(GadgetV2 {
            metadata: self.metadata,
            spec: SpecV2 {
                size: self.spec.width,
            },
        })
    }

    fn from_hub(hub: GadgetV2) -> Result<Self, ConversionError> {
        Ok(GadgetV1 {
            metadata: hub.metadata,
            spec: SpecV1 {
                width: hub.spec.size,
            },
        })
    }
}

impl Convertible<GadgetV1> for GadgetV2 {
    fn into_hub(self) -> Result<GadgetV1, ConversionError> {
        GadgetV1::from_hub(self)
    }

    fn from_hub(hub: GadgetV1) -> Result<Self, ConversionError> {
        hub.into_hub()
    }
}

/// Before: v1 stored, v2 converted.
fn stored_as_v1() -> APIGroup {
    APIGroup::new("migrate.example.com")
        .version("v1", |v| v.resource::<GadgetV1>())
        .version("v2", |v| v.converted::<GadgetV2, GadgetV1>())
}

/// After: v2 stored, v1 converted.
fn stored_as_v2() -> APIGroup {
    APIGroup::new("migrate.example.com")
        .version("v2", |v| v.resource::<GadgetV2>())
        .version("v1", |v| v.converted::<GadgetV1, GadgetV2>())
}

/// After, with v1 served no more.
fn stored_as_v2_only() -> APIGroup {
    APIGroup::new("migrate.example.com")
        .version("v2", |v| v.resource::<GadgetV2>())
        .formerly_stored::<GadgetV1, GadgetV2>()
}

const V1: &str = "/apis/migrate.example.com/v1/namespaces/default/gadgets";
const V2: &str = "/apis/migrate.example.com/v2/namespaces/default/gadgets";
const KEYS: &str = "/registry/migrate.example.com/gadgets/";

fn ok(out: KubectlOutput) -> String {
    assert!(out.success, "kubectl failed: {}", out.stderr);
    out.stdout
}

fn get(server: &TestServer, path: &str) -> Value {
    serde_json::from_str(&ok(server.kubectl(&["get", "--raw", path]))).unwrap()
}

fn create(server: &TestServer, version: &str, name: &str, spec: Value) {
    let object = json!({"apiVersion": format!("migrate.example.com/{version}"), "kind": "Gadget",
                        "metadata": {"name": name, "namespace": "default"}, "spec": spec});
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), object.to_string()).unwrap();
    ok(server.kubectl(&["create", "-f", &file.path().display().to_string()]));
}

async fn start(dir: &Path, group: APIGroup) -> TestServer {
    TestServer::builder()
        .sqlite()
        .dir(dir)
        .group(group)
        .start()
        .await
}

/// Every stored object as the backend holds it: name → JSON.
async fn raw(backend: &Arc<dyn Backend>) -> Vec<(String, Value)> {
    let request = ListRequest {
        prefix: KEYS.into(),
        ..ListRequest::default()
    };
    let page = backend.list(&request).await.unwrap();
    page.items
        .iter()
        .map(|kv| {
            let name = kv.key.rsplit('/').next().unwrap().to_string();
            (name, serde_json::from_slice(&kv.value).unwrap())
        })
        .collect()
}

fn versions(stored: &[(String, Value)]) -> Vec<(String, String)> {
    stored
        .iter()
        .map(|(name, o)| (name.clone(), o["apiVersion"].as_str().unwrap().to_string()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn rv(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_version_change_then_migrate_storage() {
    let dir = tempfile::tempdir().unwrap();
    let before = start(dir.path(), stored_as_v1()).await;
    create(&before, "v1", "a", json!({"width": 1}));
    create(&before, "v2", "b", json!({"size": 2}));
    create(&before, "v1", "c", json!({"width": 3}));
    let old_rv: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| rv(&get(&before, &format!("{V1}/{n}"))))
        .collect();
    let stored = raw(before.backend()).await;
    let v1 = "migrate.example.com/v1";
    let v2 = "migrate.example.com/v2";
    assert_eq!(versions(&stored), pairs(&[("a", v1), ("b", v1), ("c", v1)]));
    before.stop().await;

    // The restart makes v2 the storage version; nothing is rewritten by reading.
    let after = start(dir.path(), stored_as_v2()).await;
    let watch = after.kubectl_watch(&[
        "get",
        "gadgets.v2.migrate.example.com",
        "-w",
        "--output-watch-events",
        "--no-headers",
    ]);
    for (line, size) in ["a", "b", "c"].iter().zip(1..) {
        watch.expect_line(&["ADDED", line, &size.to_string()]);
    }
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let in_v2 = get(&after, &format!("{V2}/{name}"));
        assert_eq!(in_v2["apiVersion"], v2);
        assert_eq!(in_v2["spec"], json!({"size": i + 1}));
        assert_eq!(rv(&in_v2), old_rv[i], "read, not rewritten");
        let in_v1 = get(&after, &format!("{V1}/{name}"));
        assert_eq!(in_v1["apiVersion"], v1);
        assert_eq!(in_v1["spec"], json!({"width": i + 1}));
    }
    // Lists from storage and from the watch cache, in both versions.
    for path in [V1, V2] {
        for query in ["", "?resourceVersion=0", "?limit=2"] {
            let list = get(&after, &format!("{path}{query}"));
            let items = list["items"].as_array().unwrap();
            assert_eq!(items.len(), if query == "?limit=2" { 2 } else { 3 });
            let field = if path == V1 { "width" } else { "size" };
            assert_eq!(items[1]["spec"][field], 2, "{path}{query}: {list}");
        }
    }
    let table = ok(after.kubectl(&["get", "gadgets.v1.migrate.example.com"]));
    assert!(table.contains("WIDTH"), "{table}");

    // An update stores v2.
    ok(after.kubectl(&[
        "patch",
        "gadgets.v1.migrate.example.com",
        "a",
        "--type=merge",
        "-p",
        r#"{"spec":{"width":10}}"#,
    ]));
    watch.expect_line(&["MODIFIED", "a", "10"]);
    let stored = raw(after.backend()).await;
    assert_eq!(versions(&stored), pairs(&[("a", v2), ("b", v1), ("c", v1)]));
    assert_eq!(stored[0].1["spec"], json!({"size": 10}));

    // migrate-storage beside the running server: b and c rewritten, seen as MODIFIED.
    let migration = APIServer::new(TestServer::options(dir.path()))
        .backend(after.backend().clone())
        .group(stored_as_v2());
    let reports = migration.migrate_storage(&[]).await.unwrap();
    let lines: Vec<String> = reports.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        ["gadgets.migrate.example.com: 3 objects, 2 rewritten"]
    );
    watch.expect_line(&["MODIFIED", "b", "2"]);
    watch.expect_line(&["MODIFIED", "c", "3"]);
    let stored = raw(after.backend()).await;
    assert_eq!(versions(&stored), pairs(&[("a", v2), ("b", v2), ("c", v2)]));
    assert_eq!(stored[2].1["spec"], json!({"size": 3}));
    let again = migration.migrate_storage(&[]).await.unwrap();
    assert_eq!(
        again[0].to_string(),
        "gadgets.migrate.example.com: 3 objects, 0 rewritten"
    );
    let migrated = get(&after, &format!("{V1}/c"));
    assert_eq!(migrated["spec"], json!({"width": 3}));
    assert_ne!(rv(&migrated), old_rv[2], "rewritten at a new revision");
    after.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_served_no_more_is_read_when_declared_formerly_stored() {
    let dir = tempfile::tempdir().unwrap();
    let before = start(dir.path(), stored_as_v1()).await;
    create(&before, "v1", "a", json!({"width": 4}));
    create(&before, "v1", "gone", json!({"width": 5}));
    before.stop().await;

    let after = start(dir.path(), stored_as_v2_only()).await;
    // A delete reads the old object (preconditions, finalizers) converted too.
    let request = http::Request::delete(format!("{V2}/gone"))
        .body(Vec::new())
        .unwrap();
    send(&after, request).await.unwrap();
    let request = http::Request::get(format!("{V2}/gone"))
        .body(Vec::new())
        .unwrap();
    assert_eq!(send(&after, request).await.unwrap_err().0, 404);
    let got = get(&after, &format!("{V2}/a"));
    assert_eq!(got["spec"], json!({"size": 4}));
    // A no-op update (kube-storage-version-migrator's way) writes it in v2.
    let body = serde_json::to_vec(&got).unwrap();
    let request = http::Request::put(format!("{V2}/a"))
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let updated = send(&after, request).await.unwrap();
    assert_ne!(rv(&updated), rv(&got), "written again");
    let stored = raw(after.backend()).await;
    assert_eq!(versions(&stored), pairs(&[("a", "migrate.example.com/v2")]));
    assert_eq!(stored[0].1["spec"], json!({"size": 4}));
    after.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_in_a_version_the_server_does_not_know_is_a_500() {
    let dir = tempfile::tempdir().unwrap();
    let before = start(dir.path(), stored_as_v1()).await;
    create(&before, "v1", "a", json!({"width": 4}));
    before.stop().await;

    // v1 is neither served nor declared: its objects are not served as v2.
    let after = start(
        dir.path(),
        APIGroup::new("migrate.example.com").version("v2", |v| v.resource::<GadgetV2>()),
    )
    .await;
    for path in [format!("{V2}/a"), V2.to_string()] {
        let out = after.kubectl(&["get", "--raw", &path]);
        assert!(!out.success, "{path}: {}", out.stdout);
        assert!(
            out.stderr.contains("InternalError")
                || out.stderr.contains("Internal error")
                || out.stderr.contains("migrate.example.com/v1"),
            "{path}: {}",
            out.stderr
        );
    }
    let request = http::Request::get(format!("{V2}/a"))
        .body(Vec::new())
        .unwrap();
    let (code, message) = send(&after, request).await.unwrap_err();
    assert_eq!(code, 500, "{message}");
    assert!(
        message.contains("is in migrate.example.com/v1")
            && message.contains("storage version is migrate.example.com/v2"),
        "{message}"
    );
    // migrate-storage fails too, and says why.
    let migration = APIServer::new(TestServer::options(dir.path()))
        .backend(after.backend().clone())
        .group(APIGroup::new("migrate.example.com").version("v2", |v| v.resource::<GadgetV2>()));
    let Err(ServerError::Migration(why)) = migration.migrate_storage(&[]).await else {
        panic!("an unknown version must fail the migration");
    };
    assert!(why.contains("gadgets.migrate.example.com"), "{why}");
    let unknown = migration
        .migrate_storage(&["nothings.migrate.example.com".into()])
        .await;
    assert!(matches!(unknown, Err(ServerError::Migration(_))));
    after.stop().await;
}

/// A request through kube-rs: the body, or the code and message of the Status of an error.
async fn send(
    server: &TestServer,
    request: http::Request<Vec<u8>>,
) -> Result<Value, (u16, String)> {
    match server.client().request_text(request).await {
        Ok(text) => Ok(serde_json::from_str(&text).unwrap()),
        Err(kube::Error::Api(status)) => Err((status.code, status.message.clone())),
        Err(e) => panic!("{e}"),
    }
}
