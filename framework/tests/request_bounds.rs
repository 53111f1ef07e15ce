//! What one request may cost, over TLS against a real server: numbers from the query are
//! bounds, never sizes (`limit`, `timeoutSeconds`). Each answer is the one kube-apiserver
//! gives; every wait is bounded and nothing asserts on time.

use std::time::Duration;

use apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use apiserver::server::APIGroup;
use apiserver::testing::TestServer;
use apiserver::Resource;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(60);

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "bounds.example.com",
    version = "v1",
    kind = "Thing",
    namespaced
)]
pub struct Thing {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ThingSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ThingSpec {
    #[serde(default)]
    pub color: String,
}

const THINGS: &str = "/apis/bounds.example.com/v1/namespaces/default/things";

async fn start() -> TestServer {
    let group = APIGroup::new("bounds.example.com").version("v1", |v| v.resource::<Thing>());
    TestServer::builder().group(group).start().await
}

/// One answer: status, body.
#[derive(Debug)]
struct Answer {
    code: StatusCode,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Answer {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body)
        .unwrap();
    let response = timeout(WAIT, client.send(request.map(Into::into)))
        .await
        .expect("answered")
        .unwrap();
    let code = response.status();
    let body = timeout(WAIT, response.into_body().collect())
        .await
        .expect("whole body")
        .unwrap()
        .to_bytes();
    Answer { code, body }
}

async fn get(client: &kube::Client, path: &str) -> Answer {
    send(client, "GET", path, "application/json", Vec::new()).await
}

async fn create(client: &kube::Client, name: &str) {
    let thing = json!({"metadata": {"name": name}, "spec": {"color": "red"}});
    let answer = send(
        client,
        "POST",
        THINGS,
        "application/json",
        thing.to_string().into(),
    )
    .await;
    assert_eq!(answer.code, StatusCode::CREATED, "{answer:?}");
}

async fn names(client: &kube::Client) -> Vec<String> {
    let list = get(client, THINGS).await;
    assert_eq!(list.code, StatusCode::OK, "{list:?}");
    list.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------
// 1. Numbers from the query
// ---------------------------------------------------------------------------------------

/// `limit=10^12` made the watch cache reserve 48 TB (the process aborted, the memory store
/// lost everything) and `limit=i64::MAX` panicked; `timeoutSeconds=i64::MAX` panicked the
/// watch task. kube-apiserver answers 200 to each: a limit is "no more than", a timeout
/// "no later than".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_numbers_are_bounds_not_sizes() {
    let server = start().await;
    let client = server.client();
    for name in ["a", "b", "c"] {
        create(&client, name).await;
    }
    for limit in ["1000000000000", "9223372036854775807"] {
        for rv in ["", "&resourceVersion=0"] {
            let answer = get(&client, &format!("{THINGS}?limit={limit}{rv}")).await;
            assert_eq!(answer.code, StatusCode::OK, "limit={limit}{rv}: {answer:?}");
            let list = answer.json();
            assert_eq!(list["items"].as_array().unwrap().len(), 3, "{list}");
            assert!(list["metadata"].get("continue").is_none(), "{list}");
        }
    }

    // A watch that may run "forever": its first event comes, then the client leaves.
    let path = format!("{THINGS}?watch=1&timeoutSeconds=9223372036854775807");
    let request = Request::get(path).body(Vec::new()).unwrap();
    let response = timeout(WAIT, client.send(request.map(Into::into)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let first = timeout(WAIT, body.frame()).await.unwrap().unwrap().unwrap();
    let first = String::from_utf8_lossy(first.data_ref().unwrap()).into_owned();
    assert!(first.contains(r#""type":"ADDED""#), "{first}");
    drop(body);

    // A negative timeout is already past: the watch ends (kube's negative Go duration).
    let ended = get(&client, &format!("{THINGS}?watch=1&timeoutSeconds=-1")).await;
    assert_eq!(ended.code, StatusCode::OK, "{ended:?}");

    // Still serving, nothing lost.
    assert_eq!(names(&client).await, ["a", "b", "c"]);
    assert_eq!(get(&client, "/readyz").await.code, StatusCode::OK);
    server.stop().await;
}
