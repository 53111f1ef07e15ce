//! Several versions of one resource over one storage: `v2` is stored (the hub), `v1` is
//! served converted (`VersionBuilder::converted`). An object written in either version is read
//! in both, nothing is lost on a round trip, lists and watches of both versions see the same
//! objects at the same revisions, discovery names the one storage version, and a resource with
//! two storage versions is refused at start.

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::runtime::convert::{ConversionError, Convertible, stash, unstash};
use extension_apiserver::server::{APIGroup, APIServer, ServerError};
use extension_apiserver_testing::{KubectlOutput, TestServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The storage version: `size`, and a `color` v1 has no field for.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "versions.example.com",
    version = "v2",
    kind = "Widget",
    namespaced,
    printcolumn(name = "Size", type = "integer", json_path = ".spec.size")
)]
pub struct WidgetV2 {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SpecV2,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecV2 {
    #[serde(default)]
    pub size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
}

/// The older version: `width`, defaulted to 1 as v1 defaults it.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "versions.example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    printcolumn(name = "Width", type = "integer", json_path = ".spec.width"),
    defaults = default_v1
)]
pub struct WidgetV1 {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SpecV1,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecV1 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<i64>,
}

fn default_v1(w: &mut WidgetV1) {
    w.spec.width.get_or_insert(1);
}

const KEPT: &str = "versions.example.com/v2-color";

impl Convertible<WidgetV2> for WidgetV1 {
    fn into_hub(self) -> Result<WidgetV2, ConversionError> {
        let mut metadata = self.metadata;
        let color = unstash(&mut metadata, KEPT)?;
        Ok(WidgetV2 {
            metadata,
            spec: SpecV2 {
                size: self.spec.width.unwrap_or_default(),
                color,
            },
        })
    }

    fn from_hub(hub: WidgetV2) -> Result<Self, ConversionError> {
        let mut metadata = hub.metadata;
        stash(&mut metadata, KEPT, &hub.spec.color)?;
        Ok(WidgetV1 {
            metadata,
            spec: SpecV1 {
                width: Some(hub.spec.size),
            },
        })
    }
}

fn group() -> APIGroup {
    APIGroup::new("versions.example.com")
        .version("v2", |v| v.resource::<WidgetV2>())
        .version("v1", |v| v.converted::<WidgetV1, WidgetV2>())
}

const V1: &str = "/apis/versions.example.com/v1/namespaces/default/widgets";
const V2: &str = "/apis/versions.example.com/v2/namespaces/default/widgets";

fn ok(out: KubectlOutput) -> String {
    assert!(out.success, "kubectl failed: {}", out.stderr);
    out.stdout
}

fn get(server: &TestServer, path: &str) -> Value {
    serde_json::from_str(&ok(server.kubectl(&["get", "--raw", path]))).unwrap()
}

fn apply(server: &TestServer, object: Value) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), object.to_string()).unwrap();
    ok(server.kubectl(&["apply", "-f", &file.path().display().to_string()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_version_reads_what_the_other_wrote_and_nothing_is_lost() {
    let server = TestServer::builder().group(group()).start().await;
    // Written in v1: stored as v2, defaulted as v1 first.
    apply(
        &server,
        json!({"apiVersion": "versions.example.com/v1", "kind": "Widget",
               "metadata": {"name": "old", "namespace": "default"}, "spec": {}}),
    );
    let in_v2 = get(&server, &format!("{V2}/old"));
    assert_eq!(in_v2["apiVersion"], "versions.example.com/v2");
    assert_eq!(in_v2["spec"], json!({"size": 1}));
    let in_v1 = get(&server, &format!("{V1}/old"));
    assert_eq!(in_v1["apiVersion"], "versions.example.com/v1");
    assert_eq!(in_v1["spec"], json!({"width": 1}));
    assert_eq!(
        in_v1["metadata"]["resourceVersion"],
        in_v2["metadata"]["resourceVersion"]
    );

    // Written in v2 with a field v1 lacks: v1 carries it in an annotation, and a v1 update
    // keeps it.
    apply(
        &server,
        json!({"apiVersion": "versions.example.com/v2", "kind": "Widget",
               "metadata": {"name": "new", "namespace": "default"},
               "spec": {"size": 5, "color": "red"}}),
    );
    let in_v1 = get(&server, &format!("{V1}/new"));
    assert_eq!(in_v1["spec"], json!({"width": 5}));
    assert_eq!(in_v1["metadata"]["annotations"][KEPT], "\"red\"");
    ok(server.kubectl(&[
        "patch",
        "widgets.v1.versions.example.com",
        "new",
        "--type=merge",
        "-p",
        r#"{"spec":{"width":7}}"#,
    ]));
    let in_v2 = get(&server, &format!("{V2}/new"));
    assert_eq!(in_v2["spec"], json!({"size": 7, "color": "red"}));
    assert!(
        in_v2["metadata"]["annotations"].get(KEPT).is_none(),
        "the annotation is v1's only: {in_v2}"
    );

    // kubectl in either version, with that version's columns.
    let table = ok(server.kubectl(&["get", "widgets.v1.versions.example.com"]));
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("WIDTH"), "{table}");
    let table = ok(server.kubectl(&["get", "widgets.v2.versions.example.com"]));
    assert!(table.contains("SIZE"), "{table}");

    // Lists of both versions: the same objects at the same revision.
    let list_v1 = get(&server, V1);
    let list_v2 = get(&server, V2);
    assert_eq!(
        list_v1["metadata"]["resourceVersion"],
        list_v2["metadata"]["resourceVersion"]
    );
    assert_eq!(list_v1["items"].as_array().unwrap().len(), 2);
    // Sorted by name: "new" first.
    assert_eq!(list_v1["items"][0]["spec"], json!({"width": 7}));
    assert_eq!(
        list_v2["items"][0]["spec"],
        json!({"size": 7, "color": "red"})
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_in_one_version_sees_writes_in_the_other_in_order() {
    let server = TestServer::builder().group(group()).start().await;
    let watch = server.kubectl_watch(&[
        "get",
        "widgets.v1.versions.example.com",
        "-w",
        "--output-watch-events",
        "--no-headers",
    ]);
    for size in [2, 3] {
        apply(
            &server,
            json!({"apiVersion": "versions.example.com/v2", "kind": "Widget",
                   "metadata": {"name": "w", "namespace": "default"}, "spec": {"size": size}}),
        );
    }
    watch.expect_line(&["ADDED", "w", "2"]);
    watch.expect_line(&["MODIFIED", "w", "3"]);
    ok(server.kubectl(&["delete", "widgets.v2.versions.example.com", "w"]));
    watch.expect_line(&["DELETED", "w", "3"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_names_one_storage_version_for_both() {
    let server = TestServer::builder().group(group()).start().await;
    let hash = |version: &str| {
        let list = get(&server, &format!("/apis/versions.example.com/{version}"));
        list["resources"][0]["storageVersionHash"].clone()
    };
    assert_eq!(hash("v1"), hash("v2"));
    let group_doc = get(&server, "/apis/versions.example.com");
    assert_eq!(group_doc["preferredVersion"]["version"], "v2");
    server.stop().await;
}

#[tokio::test]
async fn two_storage_versions_of_one_resource_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mixed = APIGroup::new("versions.example.com")
        .version("v2", |v| v.resource::<WidgetV2>())
        .version("v1", |v| v.resource::<WidgetV1>());
    let result = APIServer::new(TestServer::options(dir.path()))
        .group(mixed)
        .start()
        .await;
    let Err(ServerError::Config(message)) = result else {
        panic!("two storage versions must be refused");
    };
    assert!(
        message.contains("widgets.versions.example.com would have two storage versions: v2"),
        "{message}"
    );
}
