//! Admission webhooks of the core cluster: Mutating- and ValidatingWebhookConfigurations held
//! by the fake core kube-apiserver, webhooks served over TLS by the test (trusted through
//! their `caBundle`), a server with a resource stored as `v1alpha1` and served converted as
//! `v1beta1`. Only loopback addresses.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use base64::Engine as _;
use extension_apiserver::aggregator::AggregatorOptions;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::runtime::convert::{ConversionError, Convertible};
use extension_apiserver::server::serve::{ServeOptions, serve_tls_with};
use extension_apiserver::tls::certs::CertKey;
use extension_apiserver::{APIGroup, Resource};
use extension_apiserver_testing::TestServer;
use extension_apiserver_testing::fake_core::FakeCore;
use extension_apiserver_testing::pki::TestCa;
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The storage version: `spec.reference`.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[resource(
    group = "wardle.example.com",
    version = "v1alpha1",
    kind = "Flunder",
    namespaced,
    status = "FlunderStatus"
)]
struct Flunder {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Spec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<FlunderStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Spec {
    #[serde(default)]
    reference: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct FlunderStatus {
    #[serde(default)]
    phase: String,
}

/// Served converted: the same field is `spec.flunderReference`.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[resource(
    group = "wardle.example.com",
    version = "v1beta1",
    kind = "Flunder",
    namespaced,
    status = "FlunderStatus"
)]
struct FlunderV1beta1 {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: SpecV1beta1,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<FlunderStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SpecV1beta1 {
    #[serde(default)]
    flunder_reference: String,
}

impl Convertible<Flunder> for FlunderV1beta1 {
    fn into_hub(self) -> Result<Flunder, ConversionError> {
        Ok(Flunder {
            metadata: self.metadata,
            spec: Spec {
                reference: self.spec.flunder_reference,
            },
            status: self.status,
        })
    }

    fn from_hub(hub: Flunder) -> Result<Self, ConversionError> {
        Ok(FlunderV1beta1 {
            metadata: hub.metadata,
            spec: SpecV1beta1 {
                flunder_reference: hub.spec.reference,
            },
            status: hub.status,
        })
    }
}

fn group() -> APIGroup {
    APIGroup::new("wardle.example.com")
        .version("v1alpha1", |v| v.resource::<Flunder>())
        .version("v1beta1", |v| v.converted::<FlunderV1beta1, Flunder>())
}

const V1ALPHA1: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";
const V1BETA1: &str = "/apis/wardle.example.com/v1beta1/namespaces/default/flunders";

// ---------------------------------------------------------------------------------------
// The webhook server
// ---------------------------------------------------------------------------------------

/// The reviews received, by path.
type Received = Arc<Mutex<Vec<(String, Value)>>>;

pub(crate) struct Webhooks {
    url: String,
    ca_pem: String,
    received: Received,
}

impl Webhooks {
    pub(crate) async fn start() -> Self {
        extension_apiserver::tls::install_crypto_provider();
        let ca = TestCa::new("webhook-ca");
        let serving = ca.serving(&["127.0.0.1"]);
        let certs =
            CertKey::from_pem(serving.cert_pem.as_bytes(), serving.key_pem.as_bytes()).unwrap();
        let tls = extension_apiserver::server::tls::server_config(&certs, None).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Received = Arc::default();
        let router = axum::Router::new()
            .fallback(answer)
            .with_state(received.clone());
        tokio::spawn(async move {
            let options = ServeOptions::default();
            let _ = serve_tls_with(listener, tls, router, std::future::pending(), options).await;
        });
        Self {
            url: format!("https://{addr}"),
            ca_pem: ca.cert_pem.clone(),
            received,
        }
    }

    /// The reviews `path` received so far.
    pub(crate) fn reviews(&self, path: &str) -> Vec<Value> {
        let received = self.received.lock().unwrap();
        received
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// A webhook at `path` with `rules` and the other fields in `extra`.
    pub(crate) fn hook(&self, name: &str, path: &str, rules: Value, extra: Value) -> Value {
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let mut hook = json!({
            "name": name,
            "clientConfig": {"url": format!("{}{path}", self.url), "caBundle": ca_bundle},
            "rules": rules,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        });
        for (k, v) in extra.as_object().unwrap() {
            hook[k] = v.clone();
        }
        hook
    }
}

pub(crate) fn rules(operations: &[&str], versions: &[&str], resources: &[&str]) -> Value {
    json!([{
        "operations": operations,
        "apiGroups": ["wardle.example.com"],
        "apiVersions": versions,
        "resources": resources,
    }])
}

pub(crate) fn configuration(name: &str, hooks: Vec<Value>) -> Value {
    json!({"metadata": {"name": name}, "webhooks": hooks})
}

/// The webhooks' answers, by path.
async fn answer(
    State(received): State<Received>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let path = request.uri().path().to_string();
    let bytes = request.into_body().collect().await.unwrap().to_bytes();
    let review: Value = serde_json::from_slice(&bytes).unwrap();
    received
        .lock()
        .unwrap()
        .push((path.clone(), review.clone()));
    let uid = review["request"]["uid"].clone();
    let mut response = json!({"uid": uid, "allowed": true});
    let patch = |ops: Value| base64::engine::general_purpose::STANDARD.encode(ops.to_string());
    match path.as_str() {
        "/allow" => {
            response["warnings"] = json!(["looked at by the test webhook"]);
            response["auditAnnotations"] = json!({"checked": "yes"});
        }
        "/deny" => {
            response["allowed"] = json!(false);
            response["status"] = json!({"code": 403, "reason": "Forbidden",
                                        "message": "no flunders today"});
        }
        "/deny-bare" => response["allowed"] = json!(false),
        "/mutate" => {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch(json!([
                {"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}},
            ])));
        }
        "/mutate-v1beta1" => {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch(json!([
                {"op": "replace", "path": "/spec/flunderReference", "value": "set-in-v1beta1"},
            ])));
        }
        "/break" => {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch(
                json!([{"op": "replace", "path": "/spec", "value": 7}])
            ));
        }
        "/bad-patch" => {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch(json!([{"op": "remove", "path": "/nothing/here"}])));
        }
        "/slow" => tokio::time::sleep(Duration::from_secs(3)).await,
        "/wrong-uid" => response["uid"] = json!("not-the-request"),
        "/garbage" => return (http::StatusCode::OK, "this is not JSON").into_response(),
        _ => {}
    }
    axum::Json(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": response}),
    )
    .into_response()
}

// ---------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------

/// The server with `group()`, delegating to `core`, with its options as `configure` leaves them
/// (shared with the ValidatingAdmissionPolicy tests).
pub(crate) async fn start(
    dir: &std::path::Path,
    core: &FakeCore,
    configure: impl FnOnce(&mut extension_apiserver::server::ServerOptions),
) -> TestServer {
    let aggregator = AggregatorOptions {
        kubeconfig: Some(core.kubeconfig("system:serviceaccount:wardle:apiserver")),
        ..AggregatorOptions::default()
    };
    let mut options = TestServer::options(dir);
    configure(&mut options);
    TestServer::start_configured(options, move |server| {
        server.aggregator_options(aggregator).group(group())
    })
    .await
}

/// `(code, body, warnings)` of a request as the admin.
pub(crate) async fn request(
    server: &TestServer,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value, Vec<String>) {
    let content_type = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    let builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type);
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let response = server
        .client()
        .send(builder.body(body.into()).unwrap())
        .await
        .unwrap();
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        code,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        warnings,
    )
}

fn flunder(name: &str) -> Value {
    json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
           "metadata": {"name": name}, "spec": {"reference": "r"}})
}

async fn create(server: &TestServer, name: &str) -> (u16, Value, Vec<String>) {
    request(server, "POST", V1ALPHA1, Some(flunder(name))).await
}

async fn get(server: &TestServer, name: &str) -> (u16, Value) {
    let (code, body, _) = request(server, "GET", &format!("{V1ALPHA1}/{name}"), None).await;
    (code, body)
}

struct Setup {
    _dir: tempfile::TempDir,
    core: FakeCore,
    webhooks: Webhooks,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    let webhooks = Webhooks::start().await;
    Setup {
        _dir: dir,
        core,
        webhooks,
    }
}

impl Setup {
    async fn server(&self) -> TestServer {
        start(&self._dir.path().join("server"), &self.core, |_| {}).await
    }
}

fn internal_error(message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("Internal error occurred: {message}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    })
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn an_allowing_webhook_sees_the_full_request_and_its_warnings_reach_the_client() {
    let s = setup().await;
    let hook = s.webhooks.hook(
        "allow.example.com",
        "/allow",
        rules(&["*"], &["*"], &["*"]),
        json!({}),
    );
    s.core
        .set_validating_webhook_configuration(configuration("allow", vec![hook]));
    let server = s.server().await;

    let (code, body, warnings) = create(&server, "a").await;
    assert_eq!(code, 201, "{body}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("looked at by the test webhook")),
        "{warnings:?}"
    );
    let reviews = s.webhooks.reviews("/allow");
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    let review = &reviews[0];
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    let req = &review["request"];
    assert!(!req["uid"].as_str().unwrap().is_empty());
    let flunders =
        json!({"group": "wardle.example.com", "version": "v1alpha1", "resource": "flunders"});
    let kind = json!({"group": "wardle.example.com", "version": "v1alpha1", "kind": "Flunder"});
    assert_eq!(req["kind"], kind);
    assert_eq!(req["resource"], flunders);
    assert_eq!(req["requestKind"], kind);
    assert_eq!(req["requestResource"], flunders);
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(req["name"], "a");
    assert_eq!(req["namespace"], "default");
    assert_eq!(req["dryRun"], false);
    assert_eq!(req["options"]["kind"], "CreateOptions");
    assert_eq!(req["object"]["metadata"]["name"], "a");
    assert!(
        req["object"]["metadata"]["uid"].is_string(),
        "validated as stored"
    );
    assert_eq!(req["oldObject"], Value::Null);
    assert!(req["userInfo"]["username"].is_string(), "{req}");
    assert!(req.get("subResource").is_none());

    // An update carries the old object; a delete only the old one.
    let (code, _, _) = request_patch(&server, "a", json!({"spec": {"reference": "s"}})).await;
    assert_eq!(code, 200);
    let (code, _, _) = request(&server, "DELETE", &format!("{V1ALPHA1}/a"), None).await;
    assert_eq!(code, 200);
    let reviews = s.webhooks.reviews("/allow");
    assert_eq!(reviews.len(), 3);
    let update = &reviews[1]["request"];
    assert_eq!(update["operation"], "UPDATE");
    assert_eq!(update["options"]["kind"], "PatchOptions");
    assert_eq!(update["object"]["spec"]["reference"], "s");
    assert_eq!(update["oldObject"]["spec"]["reference"], "r");
    let delete = &reviews[2]["request"];
    assert_eq!(delete["operation"], "DELETE");
    assert_eq!(delete["object"], Value::Null);
    assert_eq!(delete["oldObject"]["metadata"]["name"], "a");
    assert_eq!(delete["options"]["kind"], "DeleteOptions");
}

async fn request_patch(server: &TestServer, name: &str, patch: Value) -> (u16, Value, Vec<String>) {
    request(server, "PATCH", &format!("{V1ALPHA1}/{name}"), Some(patch)).await
}

// Several threads: kubectl blocks the test's thread while the server answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_the_webhooks_status_and_nothing_is_stored() {
    let s = setup().await;
    let deny = s.webhooks.hook(
        "deny.example.com",
        "/deny",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({}),
    );
    let bare = s.webhooks.hook(
        "bare.example.com",
        "/deny-bare",
        rules(&["UPDATE"], &["*"], &["flunders"]),
        json!({}),
    );
    s.core
        .set_validating_webhook_configuration(configuration("deny", vec![deny, bare]));
    let server = s.server().await;

    let (code, status, _) = create(&server, "a").await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "admission webhook \"deny.example.com\" denied the request: no flunders today",
            "reason": "Forbidden", "code": 403,
        })
    );
    assert_eq!(get(&server, "a").await.0, 404);

    // Through kubectl, as a user sees it.
    let file = s._dir.path().join("flunder.json");
    std::fs::write(&file, flunder("k").to_string()).unwrap();
    let out = server.kubectl(&["create", "-f", file.to_str().unwrap()]);
    assert!(!out.success);
    assert!(
        out.stderr.contains(
            "admission webhook \"deny.example.com\" denied the request: no flunders today"
        ),
        "{}",
        out.stderr
    );
    s.core.delete_validating_webhook_configuration("deny");
    let allow_create = s.webhooks.hook(
        "bare.example.com",
        "/deny-bare",
        rules(&["UPDATE"], &["*"], &["flunders"]),
        json!({}),
    );
    s.core
        .set_validating_webhook_configuration(configuration("bare", vec![allow_create]));
    let mut code = 0;
    for _ in 0..100 {
        code = create(&server, "b").await.0;
        if code == 201 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code, 201);
    // No status in the answer: 400 "without explanation", as kube's ToStatusErr.
    let (code, status, _) = request_patch(&server, "b", json!({"spec": {"reference": "x"}})).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "admission webhook \"bare.example.com\" denied the request without explanation"
    );
    assert_eq!(get(&server, "b").await.1["spec"]["reference"], "r");
}

#[tokio::test]
async fn a_mutating_webhooks_json_patch_is_stored_and_audit_annotations_kept() {
    let s = setup().await;
    let hook = s.webhooks.hook(
        "mutate.example.com",
        "/mutate",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({}),
    );
    let allow = s.webhooks.hook(
        "allow.example.com",
        "/allow",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({}),
    );
    s.core
        .set_mutating_webhook_configuration(configuration("mutate", vec![hook, allow]));
    let dir = s._dir.path();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let log = dir.join("audit.log");
    let (policy_file, log_path) = (policy.clone(), log.display().to_string());
    let server = start(&dir.join("server"), &s.core, move |o| {
        o.audit.policy_file = Some(policy_file);
        o.audit.log_path = Some(log_path);
    })
    .await;

    let (code, body, _) = create(&server, "a").await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["metadata"]["labels"], json!({"mutated": "yes"}));
    assert_eq!(
        get(&server, "a").await.1["metadata"]["labels"],
        json!({"mutated": "yes"})
    );
    // Mutating webhooks run before the strategy: the object has no uid yet; the next
    // webhook sees the patched object.
    let reviews = s.webhooks.reviews("/mutate");
    assert!(reviews[0]["request"]["object"]["metadata"]["uid"].is_null());
    let next = s.webhooks.reviews("/allow");
    assert_eq!(
        next[0]["request"]["object"]["metadata"]["labels"],
        json!({"mutated": "yes"})
    );
    // The webhook's audit annotation, under its name, and kube's of each mutating call.
    let text = std::fs::read_to_string(&log).unwrap();
    let event = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["stage"] == "ResponseComplete" && e["verb"] == "create")
        .unwrap_or_else(|| panic!("{text}"));
    let annotations = &event["annotations"];
    assert_eq!(annotations["allow.example.com/checked"], "yes", "{event}");
    assert_eq!(
        annotations["mutation.webhook.admission.k8s.io/round_0_index_0"],
        r#"{"configuration":"mutate","webhook":"mutate.example.com","mutated":true}"#
    );
    assert_eq!(
        annotations["mutation.webhook.admission.k8s.io/round_0_index_1"],
        r#"{"configuration":"mutate","webhook":"allow.example.com","mutated":false}"#
    );
}

#[tokio::test]
async fn a_webhook_that_asks_is_called_again_after_a_later_change() {
    let s = setup().await;
    let first = s.webhooks.hook(
        "first.example.com",
        "/allow",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({"reinvocationPolicy": "IfNeeded"}),
    );
    let never = s.webhooks.hook(
        "never.example.com",
        "/record",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({}),
    );
    let mutate = s.webhooks.hook(
        "mutate.example.com",
        "/mutate",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({"reinvocationPolicy": "IfNeeded"}),
    );
    // Configurations run in name order: "a-…" before "b-…".
    s.core
        .set_mutating_webhook_configuration(configuration("b-mutate", vec![mutate]));
    s.core
        .set_mutating_webhook_configuration(configuration("a-first", vec![first, never]));
    let server = s.server().await;

    assert_eq!(create(&server, "a").await.0, 201);
    let first = s.webhooks.reviews("/allow");
    assert_eq!(first.len(), 2, "called again after the patch");
    assert!(first[0]["request"]["object"]["metadata"]["labels"].is_null());
    assert_eq!(
        first[1]["request"]["object"]["metadata"]["labels"],
        json!({"mutated": "yes"})
    );
    assert_eq!(s.webhooks.reviews("/record").len(), 1, "Never: once");
    assert_eq!(
        s.webhooks.reviews("/mutate").len(),
        1,
        "not for its own change"
    );

    // kube's per-webhook latency histogram.
    let response = server
        .client()
        .send(
            http::Request::get("/metrics")
                .body(Vec::new().into())
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let metrics = String::from_utf8_lossy(&bytes);
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("apiserver_admission_webhook_admission_duration_seconds_count")
                && l.contains("name=\"first.example.com\"")
        })
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(
        line.contains("type=\"admit\"") && line.contains("operation=\"CREATE\""),
        "{line}"
    );
    assert!(
        line.contains("rejected=\"false\"") && line.ends_with(" 2"),
        "{line}"
    );
}

#[tokio::test]
async fn patches_that_fail_or_break_the_object_are_internal_errors() {
    let s = setup().await;
    let bad = s.webhooks.hook(
        "bad-patch.example.com",
        "/bad-patch",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({"objectSelector": {"matchLabels": {"patch": "bad"}}}),
    );
    let breaks = s.webhooks.hook(
        "break.example.com",
        "/break",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({"objectSelector": {"matchLabels": {"patch": "breaks"}}}),
    );
    s.core
        .set_mutating_webhook_configuration(configuration("patches", vec![bad, breaks]));
    let server = s.server().await;

    let mut object = flunder("a");
    object["metadata"]["labels"] = json!({"patch": "bad"});
    let (code, status, _) = request(&server, "POST", V1ALPHA1, Some(object)).await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(status["reason"], "InternalError");
    // kube's dispatcher: `apierrors.NewInternalError` of json-patch v4's error.
    assert_eq!(
        status["message"],
        "Internal error occurred: remove operation does not apply: doc is missing path: \"/nothing/here\": missing value",
        "{status}"
    );
    let mut object = flunder("b");
    object["metadata"]["labels"] = json!({"patch": "breaks"});
    let (code, status, _) = request(&server, "POST", V1ALPHA1, Some(object)).await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(get(&server, "a").await.0, 404);
    assert_eq!(get(&server, "b").await.0, 404);
}

#[tokio::test]
async fn failed_calls_follow_the_failure_policy() {
    let s = setup().await;
    let fail = |name: &str, path: &str, policy: &str, label: &str| {
        s.webhooks.hook(
            name,
            path,
            rules(&["CREATE"], &["*"], &["flunders"]),
            json!({
                "failurePolicy": policy, "timeoutSeconds": 1,
                "objectSelector": {"matchLabels": {"case": label}},
            }),
        )
    };
    let hooks = vec![
        fail("slow-fail.example.com", "/slow", "Fail", "slow-fail"),
        fail("slow-ignore.example.com", "/slow", "Ignore", "slow-ignore"),
        fail("uid.example.com", "/wrong-uid", "Fail", "uid"),
        fail("garbage.example.com", "/garbage", "Fail", "garbage"),
        fail(
            "garbage-ignore.example.com",
            "/garbage",
            "Ignore",
            "garbage-ignore",
        ),
    ];
    let mut v1beta1_only = fail("old-reviews.example.com", "/allow", "Fail", "old-reviews");
    v1beta1_only["admissionReviewVersions"] = json!(["v1beta1"]);
    let mut all = hooks;
    all.push(v1beta1_only);
    s.core
        .set_validating_webhook_configuration(configuration("failures", all));
    let server = s.server().await;
    let labelled = |name: &str, label: &str| {
        let mut object = flunder(name);
        object["metadata"]["labels"] = json!({"case": label});
        object
    };
    let url = &s.webhooks.url;

    let (code, status, _) =
        request(&server, "POST", V1ALPHA1, Some(labelled("a", "slow-fail"))).await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(
        status,
        internal_error(&format!(
            "failed calling webhook \"slow-fail.example.com\": failed to call webhook: Post \"{url}/slow?timeout=1s\": context deadline exceeded"
        ))
    );
    let (code, status, _) = request(
        &server,
        "POST",
        V1ALPHA1,
        Some(labelled("b", "slow-ignore")),
    )
    .await;
    assert_eq!(code, 201, "{status}");

    let (code, status, _) = request(&server, "POST", V1ALPHA1, Some(labelled("c", "uid"))).await;
    assert_eq!(code, 500, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with("Internal error occurred: failed calling webhook \"uid.example.com\": received invalid webhook response: expected response.uid=")
            && message.ends_with(", got \"not-the-request\""),
        "{message}"
    );
    let (code, status, _) =
        request(&server, "POST", V1ALPHA1, Some(labelled("d", "garbage"))).await;
    assert_eq!(code, 500, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("failed calling webhook \"garbage.example.com\": failed to call webhook"),
        "{status}"
    );
    let (code, _, _) = request(
        &server,
        "POST",
        V1ALPHA1,
        Some(labelled("e", "garbage-ignore")),
    )
    .await;
    assert_eq!(code, 201);
    let (code, status, _) = request(
        &server,
        "POST",
        V1ALPHA1,
        Some(labelled("f", "old-reviews")),
    )
    .await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(
        status["message"],
        "Internal error occurred: failed calling webhook \"old-reviews.example.com\": could not create admission objects: webhook does not accept known AdmissionReview versions"
    );
    for (name, stored) in [
        ("a", 404),
        ("b", 200),
        ("c", 404),
        ("d", 404),
        ("e", 200),
        ("f", 404),
    ] {
        assert_eq!(get(&server, name).await.0, stored, "{name}");
    }
}

#[tokio::test]
async fn object_and_namespace_selectors() {
    let s = setup().await;
    s.core
        .set_namespace_labels("prod", BTreeMap::from([("env".into(), "prod".into())]));
    s.core
        .set_namespace_labels("dev", BTreeMap::from([("env".into(), "dev".into())]));
    let by_namespace = s.webhooks.hook("ns.example.com", "/deny", rules(&["CREATE"], &["*"], &["flunders"]), json!({
        "namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]},
    }));
    let by_object = s.webhooks.hook(
        "object.example.com",
        "/deny",
        rules(&["CREATE", "UPDATE"], &["*"], &["flunders"]),
        json!({
            "objectSelector": {"matchLabels": {"guarded": "true"}},
        }),
    );
    s.core.set_validating_webhook_configuration(configuration(
        "selectors",
        vec![by_namespace, by_object],
    ));
    let server = s.server().await;
    let in_namespace =
        |ns: &str| format!("/apis/wardle.example.com/v1alpha1/namespaces/{ns}/flunders");

    let (code, status, _) =
        request(&server, "POST", &in_namespace("prod"), Some(flunder("a"))).await;
    assert_eq!(code, 403, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("\"ns.example.com\"")
    );
    let (code, status, _) =
        request(&server, "POST", &in_namespace("dev"), Some(flunder("a"))).await;
    assert_eq!(code, 201, "{status}");
    // A namespace the core cluster does not have: its 404, as kube's namespace matcher.
    let (code, status, _) = request(
        &server,
        "POST",
        &in_namespace("nowhere"),
        Some(flunder("a")),
    )
    .await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["message"], "namespaces \"nowhere\" not found");

    let mut guarded = flunder("g");
    guarded["metadata"]["labels"] = json!({"guarded": "true"});
    let (code, status, _) = request(&server, "POST", V1ALPHA1, Some(guarded)).await;
    assert_eq!(code, 403, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("\"object.example.com\"")
    );
    let (code, _, _) = create(&server, "h").await;
    assert_eq!(code, 201);
    // The old object's labels count too: removing the label is still judged.
    let (code, _, _) = request_patch(
        &server,
        "h",
        json!({"metadata": {"labels": {"other": "x"}}}),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(s.webhooks.reviews("/deny").len(), 2);
}

#[tokio::test]
async fn dry_run_reaches_only_webhooks_without_side_effects() {
    let s = setup().await;
    let none = s.webhooks.hook(
        "none.example.com",
        "/allow",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({"objectSelector": {"matchLabels": {"case": "none"}}}),
    );
    let unknown = s.webhooks.hook(
        "unknown.example.com",
        "/allow",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({"sideEffects": "Unknown", "objectSelector": {"matchLabels": {"case": "unknown"}}}),
    );
    s.core
        .set_validating_webhook_configuration(configuration("dry", vec![none, unknown]));
    let server = s.server().await;
    let labelled = |name: &str, label: &str| {
        let mut object = flunder(name);
        object["metadata"]["labels"] = json!({"case": label});
        object
    };
    let dry = format!("{V1ALPHA1}?dryRun=All");

    let (code, status, _) = request(&server, "POST", &dry, Some(labelled("a", "none"))).await;
    assert_eq!(code, 201, "{status}");
    let reviews = s.webhooks.reviews("/allow");
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0]["request"]["dryRun"], true);
    assert_eq!(reviews[0]["request"]["options"]["dryRun"], json!(["All"]));

    let (code, status, _) = request(&server, "POST", &dry, Some(labelled("b", "unknown"))).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "admission webhook \"unknown.example.com\" does not support dry run",
            "reason": "BadRequest", "code": 400,
        })
    );
    assert_eq!(s.webhooks.reviews("/allow").len(), 1, "not called");
    // Not a dry run: called.
    let (code, _, _) = request(&server, "POST", V1ALPHA1, Some(labelled("b", "unknown"))).await;
    assert_eq!(code, 201);
    assert_eq!(s.webhooks.reviews("/allow").len(), 2);
}

#[tokio::test]
async fn rules_on_the_status_subresource() {
    let s = setup().await;
    let hook = s.webhooks.hook(
        "status.example.com",
        "/deny",
        rules(&["UPDATE"], &["*"], &["flunders/status"]),
        json!({}),
    );
    s.core
        .set_validating_webhook_configuration(configuration("status", vec![hook]));
    let server = s.server().await;

    assert_eq!(create(&server, "a").await.0, 201);
    // The main resource is not covered by `flunders/status`.
    let (code, _, _) = request_patch(&server, "a", json!({"spec": {"reference": "x"}})).await;
    assert_eq!(code, 200);
    let status_path = format!("{V1ALPHA1}/a/status");
    let (code, status, _) = request(
        &server,
        "PATCH",
        &status_path,
        Some(json!({"status": {"phase": "Done"}})),
    )
    .await;
    assert_eq!(code, 403, "{status}");
    let reviews = s.webhooks.reviews("/deny");
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0]["request"]["subResource"], "status");
    assert_eq!(reviews[0]["request"]["requestSubResource"], "status");
}

#[tokio::test]
async fn a_configuration_added_while_running_takes_effect() {
    let s = setup().await;
    let server = s.server().await;
    assert_eq!(create(&server, "a").await.0, 201);

    let hook = s.webhooks.hook(
        "late.example.com",
        "/deny",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({}),
    );
    s.core
        .set_validating_webhook_configuration(configuration("late", vec![hook]));
    let mut last = 0;
    for i in 0..100 {
        last = create(&server, &format!("b{i}")).await.0;
        if last == 403 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(last, 403);
    // Listed once, then watched.
    let (lists, watches) = s
        .core
        .lists_and_watches("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations");
    assert_eq!(lists, 1);
    assert!(watches >= 1);
    s.core.delete_validating_webhook_configuration("late");
    for i in 0..100 {
        last = create(&server, &format!("c{i}")).await.0;
        if last == 201 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(last, 201);
}

#[tokio::test]
async fn equivalent_match_policy_converts_to_the_matched_version() {
    let s = setup().await;
    // Rules name only v1beta1; requests come in v1alpha1 (the storage version).
    let equivalent = s.webhooks.hook(
        "beta.example.com",
        "/mutate-v1beta1",
        rules(&["CREATE"], &["v1beta1"], &["flunders"]),
        json!({}),
    );
    let exact = s.webhooks.hook(
        "exact.example.com",
        "/deny",
        rules(&["CREATE"], &["v1beta1"], &["flunders"]),
        json!({"matchPolicy": "Exact"}),
    );
    s.core
        .set_mutating_webhook_configuration(configuration("beta", vec![equivalent]));
    s.core
        .set_validating_webhook_configuration(configuration("exact", vec![exact]));
    let server = s.server().await;

    let (code, body, _) = create(&server, "a").await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["spec"]["reference"], "set-in-v1beta1");
    let reviews = s.webhooks.reviews("/mutate-v1beta1");
    assert_eq!(reviews.len(), 1);
    let req = &reviews[0]["request"];
    assert_eq!(req["kind"]["version"], "v1beta1");
    assert_eq!(req["resource"]["version"], "v1beta1");
    assert_eq!(req["requestKind"]["version"], "v1alpha1");
    assert_eq!(req["requestResource"]["version"], "v1alpha1");
    assert_eq!(req["object"]["apiVersion"], "wardle.example.com/v1beta1");
    assert_eq!(req["object"]["spec"]["flunderReference"], "r");
    // Exact: v1alpha1 requests do not reach a v1beta1-only webhook...
    assert!(s.webhooks.reviews("/deny").is_empty());

    // ...but v1beta1 ones do, in their own version.
    let beta = json!({"apiVersion": "wardle.example.com/v1beta1", "kind": "Flunder",
                      "metadata": {"name": "b"}, "spec": {"flunderReference": "q"}});
    let (code, status, _) = request(&server, "POST", V1BETA1, Some(beta)).await;
    assert_eq!(code, 403, "{status}");
    let denied = &s.webhooks.reviews("/deny")[0]["request"];
    assert_eq!(denied["kind"]["version"], "v1beta1");
    assert_eq!(denied["requestKind"]["version"], "v1beta1");
    assert_eq!(
        denied["object"]["spec"]["flunderReference"],
        "set-in-v1beta1"
    );
}

#[tokio::test]
async fn the_webhook_plugins_can_be_disabled() {
    let s = setup().await;
    let hook = s.webhooks.hook(
        "deny.example.com",
        "/deny",
        rules(&["*"], &["*"], &["*"]),
        json!({}),
    );
    s.core
        .set_validating_webhook_configuration(configuration("deny", vec![hook.clone()]));
    s.core
        .set_mutating_webhook_configuration(configuration("deny", vec![hook]));
    let server = start(&s._dir.path().join("server"), &s.core, |o| {
        o.admission.disable_admission_plugins = vec![
            "MutatingAdmissionWebhook".into(),
            "ValidatingAdmissionWebhook".into(),
        ];
    })
    .await;
    let (code, body, _) = create(&server, "a").await;
    assert_eq!(code, 201, "{body}");
    assert!(s.webhooks.reviews("/deny").is_empty());
    let (lists, _) = s
        .core
        .lists_and_watches("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations");
    assert_eq!(lists, 0, "not followed when disabled");
}

#[tokio::test]
async fn match_conditions_choose_the_calls_and_their_errors_follow_the_failure_policy() {
    let s = setup().await;
    let named = s.webhooks.hook(
        "named.example.com",
        "/named",
        rules(&["CREATE"], &["*"], &["flunders"]),
        json!({"matchConditions": [
            {"name": "mc", "expression": "object.metadata.name.startsWith('mc-')"},
            {"name": "create", "expression": "request.operation == 'CREATE'"},
        ]}),
    );
    let ignoring = s.webhooks.hook(
        "ignoring.example.com",
        "/ignoring",
        rules(&["UPDATE"], &["*"], &["flunders"]),
        json!({"failurePolicy": "Ignore",
               "matchConditions": [{"name": "broken", "expression": "object.spec.nothing == 1"}]}),
    );
    s.core
        .set_validating_webhook_configuration(configuration("conditions", vec![named, ignoring]));
    let server = s.server().await;
    assert_eq!(create(&server, "other").await.0, 201);
    assert!(
        s.webhooks.reviews("/named").is_empty(),
        "excluded: not called"
    );
    assert_eq!(create(&server, "mc-a").await.0, 201);
    assert_eq!(s.webhooks.reviews("/named").len(), 1);

    // An error with `Ignore`: not called, admitted.
    let (code, body, _) = request_patch(&server, "mc-a", json!({"spec": {"reference": "s"}})).await;
    assert_eq!(code, 200, "{body}");
    assert!(s.webhooks.reviews("/ignoring").is_empty());

    // An error with `Fail`: kube's 403 of the matcher's error, not called.
    let failing = s.webhooks.hook(
        "failing.example.com",
        "/failing",
        rules(&["UPDATE"], &["*"], &["flunders"]),
        json!({"matchConditions": [{"name": "broken", "expression": "object.spec.nothing == 1"}]}),
    );
    s.core
        .set_validating_webhook_configuration(configuration("failing", vec![failing]));
    let refused = extension_apiserver_testing::eventually(|| async {
        let (code, body, _) =
            request_patch(&server, "mc-a", json!({"spec": {"reference": "t"}})).await;
        code == 403
            && body["message"].as_str().unwrap_or_default().starts_with(
                "flunders.wardle.example.com \"mc-a\" is forbidden: expression 'object.spec.nothing == 1' resulted in error: ",
            )
    })
    .await;
    assert!(refused);
    assert!(s.webhooks.reviews("/failing").is_empty());
}
