//! Objects over the stored-object limit (`--max-object-size-bytes`, etcd's 1.5 MiB by
//! default) are refused on every backend and by every write verb, as kube-apiserver on etcd
//! refuses them, and nothing stored changes. A whole server over TLS, with a kube-rs client.

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::APIGroup;
use extension_apiserver_testing::TestServer;
use http_body_util::BodyExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "size.example.com",
    version = "v1",
    kind = "Blob",
    namespaced,
    status = "BlobStatus"
)]
pub struct Blob {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: BlobSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<BlobStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct BlobSpec {
    #[serde(default)]
    pub data: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct BlobStatus {
    #[serde(default)]
    pub data: String,
}

const BLOBS: &str = "/apis/size.example.com/v1/namespaces/default/blobs";

fn group() -> APIGroup {
    APIGroup::new("size.example.com").version("v1", |v| v.resource::<Blob>())
}

const MIB: usize = 1 << 20;

fn blob(name: &str, bytes: usize) -> Value {
    json!({
        "apiVersion": "size.example.com/v1", "kind": "Blob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"data": "d".repeat(bytes)},
    })
}

/// One request: (status code, the body as JSON).
async fn send(
    server: &TestServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body.to_string().into_bytes())
        .unwrap();
    let response = server.client().send(request.map(Into::into)).await.unwrap();
    let code = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (code, body)
}

async fn get(server: &TestServer, name: &str) -> (u16, Value) {
    send(server, "GET", &format!("{BLOBS}/{name}"), "", &Value::Null).await
}

/// What kube-apiserver answers when etcd refuses a write as too large.
fn assert_too_large((code, status): (u16, Value), what: &str) {
    assert_eq!(code, 500, "{what}: {status}");
    assert_eq!(status["kind"], "Status", "{what}");
    assert_eq!(status["code"], 500, "{what}");
    assert_eq!(
        status["message"], "etcdserver: request is too large",
        "{what}"
    );
    assert!(
        status["reason"].as_str().unwrap_or_default().is_empty(),
        "{what}: {status}"
    );
}

/// Every write verb refuses a 2 MiB object and leaves what is stored as it was; 1 MiB is
/// stored.
async fn refuses_large_objects(server: &TestServer) {
    let big = 2 * MIB;
    let refused = send(server, "POST", BLOBS, "application/json", &blob("big", big)).await;
    assert_too_large(refused, "create");
    assert_eq!(get(server, "big").await.0, 404, "nothing stored");

    let (code, small) = send(
        server,
        "POST",
        BLOBS,
        "application/json",
        &blob("small", 10),
    )
    .await;
    assert_eq!(code, 201, "{small}");
    let path = format!("{BLOBS}/small");

    let mut replaced = blob("small", big);
    replaced["metadata"]["resourceVersion"] = small["metadata"]["resourceVersion"].clone();
    let refused = send(server, "PUT", &path, "application/json", &replaced).await;
    assert_too_large(refused, "update");

    let patch = json!({"spec": {"data": "p".repeat(big)}});
    let merge = "application/merge-patch+json";
    assert_too_large(
        send(server, "PATCH", &path, merge, &patch).await,
        "merge patch",
    );

    let apply_path = format!("{path}?fieldManager=test&force=true");
    let apply = "application/apply-patch+yaml";
    let refused = send(server, "PATCH", &apply_path, apply, &blob("small", big)).await;
    assert_too_large(refused, "apply");

    let mut status = small.clone();
    status["status"] = json!({"data": "s".repeat(big)});
    let status_path = format!("{path}/status");
    let refused = send(server, "PUT", &status_path, "application/json", &status).await;
    assert_too_large(refused, "status update");

    let (code, stored) = get(server, "small").await;
    assert_eq!(code, 200);
    assert_eq!(
        stored["metadata"]["resourceVersion"], small["metadata"]["resourceVersion"],
        "nothing changed"
    );
    assert_eq!(stored["spec"]["data"], "d".repeat(10));

    // Below etcd's 1.5 MiB: stored.
    let patch = json!({"spec": {"data": "p".repeat(MIB)}});
    let (code, body) = send(server, "PATCH", &path, merge, &patch).await;
    assert_eq!(code, 200, "{}", body["message"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_refuses_objects_over_the_limit() {
    let server = TestServer::builder().group(group()).memory().start().await;
    refuses_large_objects(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_objects_over_the_limit() {
    let server = TestServer::builder().group(group()).sqlite().start().await;
    refuses_large_objects(&server).await;
    server.stop().await;
}

/// A server on the etcd of the tests (127.0.0.1:23790), under a prefix of its own, with
/// this `--max-object-size-bytes`.
#[cfg(feature = "etcd")]
async fn etcd_server(max_object_size_bytes: usize) -> TestServer {
    use std::time::{SystemTime, UNIX_EPOCH};
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let prefix = format!("/object-size-{}-{}", std::process::id(), now.as_nanos());
    TestServer::builder()
        .group(group())
        .options(move |o| {
            o.storage_backend = extension_apiserver::server::StorageBackendKind::Etcd3;
            o.etcd_servers = vec!["http://127.0.0.1:23790".into()];
            o.storage_prefix = prefix;
            o.max_object_size_bytes = max_object_size_bytes;
        })
        .start()
        .await
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_refuses_objects_over_the_limit() {
    let server = etcd_server(extension_apiserver::storage::DEFAULT_MAX_OBJECT_BYTES).await;
    refuses_large_objects(&server).await;
    server.stop().await;
}

/// Without a limit of the server's, etcd's own (its default `--max-request-bytes`) gives the
/// same answer.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_own_refusal_is_answered_alike() {
    let server = etcd_server(0).await;
    let refused = send(
        &server,
        "POST",
        BLOBS,
        "application/json",
        &blob("big", 2 * MIB),
    )
    .await;
    assert_too_large(refused, "create refused by etcd");
    assert_eq!(get(&server, "big").await.0, 404, "nothing stored");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_a_flag() {
    let server = TestServer::builder()
        .group(group())
        .options(|o| o.max_object_size_bytes = 64 * 1024)
        .start()
        .await;
    let refused = send(
        &server,
        "POST",
        BLOBS,
        "application/json",
        &blob("b", 100_000),
    )
    .await;
    assert_too_large(refused, "create over a 64 KiB limit");
    let (code, body) = send(
        &server,
        "POST",
        BLOBS,
        "application/json",
        &blob("b", 60_000),
    )
    .await;
    assert_eq!(code, 201, "{}", body["message"]);
    server.stop().await;

    let unlimited = TestServer::builder()
        .group(group())
        .options(|o| o.max_object_size_bytes = 0)
        .start()
        .await;
    let (code, body) = send(
        &unlimited,
        "POST",
        BLOBS,
        "application/json",
        &blob("b", 2 * MIB),
    )
    .await;
    assert_eq!(code, 201, "{}", body["message"]);
    unlimited.stop().await;
}
