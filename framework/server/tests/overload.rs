//! Overload protection over TLS, bounded: a server with few seats
//! (`--max-requests-inflight=4`, `--max-mutating-requests-inflight=2`) flooded by one user
//! refuses the excess with kube's 429 and `Retry-After`, while another user's requests,
//! the admin's (`system:masters`) and health still succeed, and no acknowledged write is lost
//! nor any refused one stored.

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine;
use extension_apiserver::Resource;
use extension_apiserver::async_trait;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::registry::computed::{ComputedOptions, Provider};
use extension_apiserver::server::APIGroup;
use extension_apiserver_testing::TestServer;
use extension_apiserver_testing::pki::{TestCa, TestCert};
use http::{Request, StatusCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Listed slowly (a computed resource without a cache), so requests overlap.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(group = "overload.example.com", version = "v1", kind = "Sleeper")]
pub struct Sleeper {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

/// Stored.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "overload.example.com",
    version = "v1",
    kind = "Ticket",
    namespaced
)]
pub struct Ticket {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

struct Slow;

#[async_trait]
impl Provider for Slow {
    type Object = Sleeper;

    async fn list(&self, _: Option<&str>) -> extension_apiserver::Result<Vec<Sleeper>> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(Vec::new())
    }
}

pub(crate) const SLEEPERS: &str = "/apis/overload.example.com/v1/sleepers";
pub(crate) const TICKETS: &str = "/apis/overload.example.com/v1/namespaces/default/tickets";

/// Tickets, stored, and sleepers, listed slowly.
pub(crate) fn group() -> APIGroup {
    APIGroup::new("overload.example.com").version("v1", |v| {
        v.resource::<Ticket>()
            .computed_with(ComputedOptions::default().watch_cache(false), |_| Slow)
    })
}

/// The server, the CA of its users, and the directory of the CA's file.
async fn start() -> (TestServer, TestCa, tempfile::TempDir) {
    let users = TestCa::new("users");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("users.crt");
    std::fs::write(&ca_file, &users.cert_pem).unwrap();
    let server = TestServer::builder()
        .group(group())
        .options(move |o| {
            o.max_requests_inflight = 4;
            o.max_mutating_requests_inflight = 2;
            o.auth.client_ca_file = Some(ca_file);
        })
        .start()
        .await;
    (server, users, dir)
}

/// A kube-rs client of `server` with `cert` as its client certificate, which does not retry
/// (kube-rs retries 429s by default, after `Retry-After`: what a real client does, and why a
/// flood degrades gracefully, but here each answer is counted).
pub(crate) async fn client_as(server: &TestServer, cert: &TestCert) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let options = kube::config::KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    // The admin's certificate may be named by path: this user's replaces it either way.
    config.auth_info.client_certificate = None;
    config.auth_info.client_key = None;
    config.auth_info.client_certificate_data = Some(b64(&cert.cert_pem));
    config.auth_info.client_key_data = Some(b64(&cert.key_pem).into());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// One request's status, `Retry-After` and body.
pub(crate) async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Answer {
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let response = client.send(request.map(Into::into)).await.unwrap();
    let code = response.status();
    let headers = response.headers().clone();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    Answer {
        code,
        headers,
        retry_after,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) code: StatusCode,
    pub(crate) headers: http::HeaderMap,
    pub(crate) retry_after: Option<String>,
    pub(crate) body: Value,
    /// The body as text (a refusal's is not JSON).
    pub(crate) text: String,
}

/// A refusal is kube's 429 with `Retry-After: 1` (`Retry-After` given) and the plain-text body
/// of its `tooManyRequests`, not a `Status`.
pub(crate) fn assert_refusal(answer: &Answer) {
    assert_eq!(answer.retry_after.as_deref(), Some("1"), "{answer:?}");
    assert_plain_refusal(answer);
}

/// kube's `tooManyRequests` body: Go's `http.Error`, plain text.
pub(crate) fn assert_plain_refusal(answer: &Answer) {
    assert_eq!(answer.code, StatusCode::TOO_MANY_REQUESTS, "{answer:?}");
    assert_eq!(answer.text, "Too many requests, please try again later.\n");
    let content_type = answer
        .headers
        .get("content-type")
        .map(|v| v.to_str().unwrap());
    assert_eq!(content_type, Some("text/plain; charset=utf-8"));
    let sniff = answer
        .headers
        .get("x-content-type-options")
        .map(|v| v.to_str().unwrap());
    assert_eq!(sniff, Some("nosniff"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_reads_is_refused_while_others_are_served() {
    let (server, users, _dir) = start().await;
    let flooder = client_as(&server, &users.client("flooder", &[])).await;
    let patient = client_as(&server, &users.client("patient", &[])).await;
    let admin = server.client();

    let flood = tokio::spawn(async move {
        let requests = (0..30).map(|_| send(&flooder, "GET", SLEEPERS, None));
        futures::future::join_all(requests).await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..3 {
        let answer = send(&patient, "GET", SLEEPERS, None).await;
        assert_eq!(
            answer.code,
            StatusCode::OK,
            "another user is served: {answer:?}"
        );
    }
    let answer = send(&admin, "GET", SLEEPERS, None).await;
    assert_eq!(answer.code, StatusCode::OK, "system:masters is exempt");
    let answer = send(&patient, "GET", "/readyz", None).await;
    assert_eq!(answer.code, StatusCode::OK, "health is exempt");

    let answers = flood.await.unwrap();
    let served = answers.iter().filter(|a| a.code == StatusCode::OK).count();
    let refused: Vec<_> = answers
        .iter()
        .filter(|a| a.code == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(
        served + refused.len(),
        30,
        "only 200s and 429s: {answers:?}"
    );
    assert!(served >= 2, "the flooder is served too, within its share");
    assert!(
        refused.len() >= 10,
        "the excess is refused: {served} served"
    );
    refused.iter().for_each(|a| assert_refusal(a));

    let metrics = send(&admin, "GET", "/metrics", None).await;
    assert_eq!(metrics.code, StatusCode::OK);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_write_is_lost_and_no_refused_write_is_stored() {
    let (server, users, _dir) = start().await;
    let flooder = client_as(&server, &users.client("flooder", &[])).await;
    let patient = client_as(&server, &users.client("patient", &[])).await;
    let ticket = |name: &str| {
        json!({"apiVersion": "overload.example.com/v1", "kind": "Ticket",
               "metadata": {"name": name}})
    };
    let flood = {
        let flooder = flooder.clone();
        let tickets: Vec<Value> = (0..60).map(|i| ticket(&format!("f{i}"))).collect();
        tokio::spawn(async move {
            let requests = tickets
                .into_iter()
                .map(|t| send(&flooder, "POST", TICKETS, Some(t)));
            futures::future::join_all(requests).await
        })
    };
    let mut created = BTreeSet::new();
    for i in 0..5 {
        let name = format!("p{i}");
        let answer = send(&patient, "POST", TICKETS, Some(ticket(&name))).await;
        match answer.code {
            StatusCode::CREATED => created.insert(name),
            StatusCode::TOO_MANY_REQUESTS => {
                assert_refusal(&answer);
                false
            }
            other => panic!("{other}: {answer:?}"),
        };
    }
    let answers = flood.await.unwrap();
    for (i, answer) in answers.iter().enumerate() {
        match answer.code {
            StatusCode::CREATED => {
                created.insert(format!("f{i}"));
            }
            StatusCode::TOO_MANY_REQUESTS => assert_refusal(answer),
            other => panic!("{other}: {answer:?}"),
        }
    }
    let list = send(&patient, "GET", TICKETS, None).await;
    assert_eq!(list.code, StatusCode::OK);
    let stored: BTreeSet<String> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        stored, created,
        "exactly the acknowledged writes are stored"
    );
    assert!(!created.is_empty());
    server.stop().await;
}
