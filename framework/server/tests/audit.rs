//! Audit over TLS, as kube-apiserver writes it: a policy file with several rules, the log
//! backend's JSON lines (and their rotation), and webhook backends that receive `EventList`s
//! in batches, or hang and fail without holding up a request.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::{APIGroup, ServerOptions};
use extension_apiserver_testing::{KubectlOutput, TestServer, eventually, pki::TestCa};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "audit.example.com",
    version = "v1",
    kind = "Widget",
    namespaced
)]
pub struct Widget {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WidgetSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct WidgetSpec {
    #[serde(default)]
    pub color: String,
}

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "audit.example.com",
    version = "v1",
    kind = "Quiet",
    namespaced
)]
pub struct Quiet {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

const WIDGETS: &str = "/apis/audit.example.com/v1/namespaces/default/widgets";

/// Widgets at RequestResponse for the admin; quiets not at all; `/version` and health at
/// Metadata without RequestReceived; everything else at Metadata.
const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitManagedFields: true
rules:
- level: None
  resources:
  - group: audit.example.com
    resources: ["quiets"]
- level: Metadata
  nonResourceURLs: ["/version", "/healthz*"]
  omitStages: [RequestReceived]
- level: RequestResponse
  users: ["admin"]
  resources:
  - group: audit.example.com
    resources: ["widgets", "widgets/*"]
- level: Metadata
"#;

fn group() -> APIGroup {
    APIGroup::new("audit.example.com").version("v1", |v| v.resource::<Widget>().resource::<Quiet>())
}

fn ok(out: KubectlOutput) -> String {
    assert!(out.success, "kubectl failed: {}", out.stderr);
    out.stdout
}

fn write_policy(dir: &Path) -> PathBuf {
    let path = dir.join("policy.yaml");
    std::fs::write(&path, POLICY).unwrap();
    path
}

/// Every event of the log file, in order.
fn events(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).expect("one JSON event a line"))
        .collect()
}

fn with_id<'a>(events: &'a [Value], id: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["auditID"] == id).collect()
}

/// POSTs a widget with the admin's client; the response's `Audit-Id` and code.
async fn create_widget(server: &TestServer, name: &str, color: &str) -> (String, u16) {
    let body = json!({
        "apiVersion": "audit.example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"color": color}
    });
    let request = http::Request::post(WIDGETS)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let response = server.client().send(request.map(Into::into)).await.unwrap();
    let id = response.headers()["audit-id"].to_str().unwrap().to_string();
    (id, response.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_a_create_a_refused_and_a_missing_request_match_kube_apiservers() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit/audit.log");
    let policy = write_policy(dir.path());
    let log_path = log.display().to_string();
    let server = TestServer::builder()
        .group(group())
        .options(move |o: &mut ServerOptions| {
            o.audit.policy_file = Some(policy);
            o.audit.log_path = Some(log_path);
        })
        .start()
        .await;

    // A create at RequestResponse: RequestReceived, then ResponseComplete.
    let (id, code) = create_widget(&server, "w1", "blue").await;
    assert_eq!(code, 201);
    let all = events(&log);
    let created = with_id(&all, &id);
    let stages: Vec<&Value> = created.iter().map(|e| &e["stage"]).collect();
    assert_eq!(stages, ["RequestReceived", "ResponseComplete"], "{all:#?}");
    let (received, complete) = (created[0], created[1]);
    for event in [received, complete] {
        assert_eq!(event["kind"], "Event");
        assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(event["level"], "RequestResponse");
        assert_eq!(event["verb"], "create");
        assert_eq!(event["requestURI"], WIDGETS);
        assert_eq!(event["user"]["username"], "admin");
        let groups = event["user"]["groups"].as_array().unwrap();
        assert!(groups.contains(&json!("system:masters")), "{event}");
        assert_eq!(event["sourceIPs"], json!(["127.0.0.1"]));
        assert!(
            event["requestReceivedTimestamp"]
                .as_str()
                .unwrap()
                .ends_with('Z')
        );
    }
    // As kube-apiserver: the name is known once the body is read; bodies and status only at
    // the end.
    let reference = json!({"resource": "widgets", "namespace": "default",
        "apiGroup": "audit.example.com", "apiVersion": "v1"});
    assert_eq!(received["objectRef"], reference);
    assert!(received.get("requestObject").is_none() && received.get("responseStatus").is_none());
    assert_eq!(
        received["stageTimestamp"],
        received["requestReceivedTimestamp"]
    );
    assert_eq!(complete["objectRef"]["name"], "w1");
    assert_eq!(
        complete["responseStatus"],
        json!({"metadata": {}, "code": 201})
    );
    assert_eq!(complete["requestObject"]["spec"]["color"], "blue");
    assert_eq!(complete["responseObject"]["metadata"]["name"], "w1");
    assert!(complete["responseObject"]["metadata"]["uid"].is_string());
    assert!(
        complete["responseObject"]["metadata"]
            .get("managedFields")
            .is_none()
    );
    assert_eq!(
        complete["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );

    // A patch: the patch itself is the request object (kube's LogRequestPatch).
    let patch = r#"{"spec":{"color":"green"}}"#;
    ok(server.kubectl(&[
        "patch",
        "widgets.audit.example.com",
        "w1",
        "--type=merge",
        "-p",
        patch,
    ]));
    let all = events(&log);
    let patched = all
        .iter()
        .rfind(|e| e["verb"] == "patch" && e["stage"] == "ResponseComplete")
        .expect("the patch's event");
    assert_eq!(
        patched["requestObject"],
        json!({"spec": {"color": "green"}})
    );
    assert_eq!(patched["responseObject"]["spec"]["color"], "green");
    assert_eq!(patched["objectRef"]["name"], "w1");
    assert_eq!(patched["responseStatus"]["code"], 200);

    // A body past the 3 MiB limit: still 413, audited as such.
    let (id, code) = create_widget(&server, "huge", &"x".repeat(3 * 1024 * 1024)).await;
    assert_eq!(code, 413);
    let all = events(&log);
    let huge = with_id(&all, &id);
    assert_eq!(
        huge.last().unwrap()["responseStatus"]["code"],
        413,
        "{huge:#?}"
    );
    assert!(huge.last().unwrap().get("requestObject").is_none());

    // A missing object: 404 with the Status's bounded fields.
    let missing = server.kubectl(&["get", "widgets.audit.example.com", "nope"]);
    assert!(!missing.success);
    let all = events(&log);
    let got = all
        .iter()
        .rfind(|e| {
            e["verb"] == "get"
                && e["objectRef"]["name"] == "nope"
                && e["stage"] == "ResponseComplete"
        })
        .expect("the 404's event");
    let status = &got["responseStatus"];
    assert_eq!(status["code"], 404);
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(status["details"]["name"], "nope");
    assert!(
        status["message"].as_str().unwrap().contains("not found"),
        "{status}"
    );

    // No credentials: refused by authentication; one ResponseStarted event, no user.
    let url = format!("https://127.0.0.1:{}{WIDGETS}", server.addr.port());
    let curl = std::process::Command::new("curl")
        .args([
            "-sk",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "-H",
            "User-Agent: audit-test",
            &url,
        ])
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&curl.stdout).to_lowercase();
    assert!(
        headers.starts_with("http/") && headers.contains(" 401"),
        "{headers}"
    );
    let id = headers
        .lines()
        .find_map(|l| l.strip_prefix("audit-id:"))
        .expect("Audit-Id on a 401")
        .trim()
        .to_string();
    let all = events(&log);
    let refused = with_id(&all, &id);
    assert_eq!(refused.len(), 1, "{all:#?}");
    let refused = refused[0];
    assert_eq!(refused["stage"], "ResponseStarted");
    assert_eq!(refused["level"], "Metadata");
    assert_eq!(refused["verb"], "list");
    assert_eq!(refused["user"], json!({}));
    assert_eq!(refused["userAgent"], "audit-test");
    assert_eq!(refused["responseStatus"]["code"], 401);
    assert_eq!(refused["responseStatus"]["reason"], "Unauthorized");
    assert_eq!(refused["responseStatus"]["message"], "Unauthorized");
    assert_eq!(refused["responseStatus"]["status"], "Failure");

    // A None rule: nothing about quiets.
    let file = dir.path().join("quiet.yaml");
    let yaml = "apiVersion: audit.example.com/v1\nkind: Quiet\nmetadata:\n  name: q\n  namespace: default\n";
    std::fs::write(&file, yaml).unwrap();
    ok(server.kubectl(&["create", "-f", &file.display().to_string()]));
    ok(server.kubectl(&["get", "quiets.audit.example.com", "q"]));
    assert!(
        events(&log)
            .iter()
            .all(|e| e["objectRef"]["resource"] != "quiets")
    );

    // omitStages: /version has no RequestReceived.
    ok(server.kubectl(&["get", "--raw", "/version"]));
    let all = events(&log);
    let version: Vec<&Value> = all
        .iter()
        .filter(|e| e["requestURI"] == "/version")
        .collect();
    assert_eq!(version.len(), 1, "{version:#?}");
    assert_eq!(version[0]["stage"], "ResponseComplete");
    assert_eq!(version[0]["verb"], "get");
    assert!(version[0].get("objectRef").is_none());

    // A watch: ResponseStarted when it starts, ResponseComplete when it ends.
    let watch = format!("{WIDGETS}?watch=1&timeoutSeconds=1");
    ok(server.kubectl(&["get", "--raw", &watch]));
    let complete = eventually(|| {
        let log = log.clone();
        async move {
            let all = events(&log);
            let stages: Vec<Value> = all
                .iter()
                .filter(|e| e["verb"] == "watch")
                .map(|e| e["stage"].clone())
                .collect();
            stages
                == [
                    json!("RequestReceived"),
                    json!("ResponseStarted"),
                    json!("ResponseComplete"),
                ]
        }
    })
    .await;
    assert!(complete, "{:#?}", events(&log));

    // The counters on /metrics.
    let metrics = ok(server.kubectl(&["get", "--raw", "/metrics"]));
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("apiserver_audit_event_total ")),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_rotates_past_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let policy = write_policy(dir.path());
    let log_path = logs.join("audit.log").display().to_string();
    let server = TestServer::builder()
        .group(group())
        .options(move |o: &mut ServerOptions| {
            o.audit.policy_file = Some(policy);
            o.audit.log_path = Some(log_path);
            o.audit.log_max_size = 1;
            o.audit.log_max_backups = 2;
        })
        .start()
        .await;
    // Each create writes about 600 KB (the object in the request and in the response): a
    // megabyte holds one.
    let big = "x".repeat(300 * 1024);
    for i in 0..4 {
        let (_, code) = create_widget(&server, &format!("big{i}"), &big).await;
        assert_eq!(code, 201);
    }
    let mut names: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "the file and two backups: {names:?}");
    assert_eq!(names[2], "audit.log");
    for name in &names {
        let path = logs.join(name);
        assert!(
            std::fs::metadata(&path).unwrap().len() <= 1024 * 1024,
            "{name}"
        );
        assert!(!events(&path).is_empty(), "{name}");
        if name != "audit.log" {
            // audit-2026-11-24T03-30-00.000.log
            assert_eq!(
                name.len(),
                "audit-2026-11-24T03-30-00.000.log".len(),
                "{name}"
            );
        }
    }
    let last = events(&logs.join("audit.log"));
    assert_eq!(last.last().unwrap()["objectRef"]["name"], "big3");
    server.stop().await;
}

/// What a test webhook does with a POST.
#[derive(Clone, Copy)]
enum Behaviour {
    Accept,
    Fail,
    Hang,
}

/// An HTTPS webhook on 127.0.0.1 with a certificate of its own CA; the kubeconfig naming
/// it; every `EventList` it accepted.
async fn webhook(dir: &Path, behaviour: Behaviour) -> (PathBuf, Arc<Mutex<Vec<Value>>>) {
    extension_apiserver::tls::install_crypto_provider();
    let ca = TestCa::new("audit-webhook");
    let cert = ca.serving(&["127.0.0.1"]);
    let pair = extension_apiserver::tls::certs::CertKey::from_pem(
        cert.cert_pem.as_bytes(),
        cert.key_pem.as_bytes(),
    )
    .unwrap();
    let tls = extension_apiserver::server::tls::server_config(&pair, None).unwrap();
    let received = Arc::new(Mutex::new(Vec::new()));
    let kept = received.clone();
    let router = axum::Router::new().route(
        "/audit",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                match behaviour {
                    Behaviour::Accept => {}
                    Behaviour::Fail => return http::StatusCode::INTERNAL_SERVER_ERROR,
                    Behaviour::Hang => std::future::pending::<()>().await,
                }
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(extension_apiserver::server::serve::serve_tls(
        listener,
        tls,
        router,
        std::future::pending(),
    ));
    let ca_file = dir.join("webhook-ca.crt");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    let kubeconfig = dir.join("webhook.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: audit\n  cluster:\n    server: https://127.0.0.1:{port}/audit\n    certificate-authority: {}\n\
         contexts:\n- name: audit\n  context:\n    cluster: audit\n    user: audit\ncurrent-context: audit\nusers:\n- name: audit\n  user: {{}}\n",
        ca_file.display()
    );
    std::fs::write(&kubeconfig, text).unwrap();
    (kubeconfig, received)
}

async fn webhook_server(
    dir: &Path,
    kubeconfig: PathBuf,
    configure: impl FnOnce(&mut ServerOptions) + Send + 'static,
) -> TestServer {
    let policy = write_policy(dir);
    TestServer::builder()
        .group(group())
        .options(move |o: &mut ServerOptions| {
            o.audit.policy_file = Some(policy);
            o.audit.webhook_config_file = Some(kubeconfig);
            configure(o);
        })
        .start()
        .await
}

fn counter(metrics: &str, line_start: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line_start))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_gets_event_lists_in_batches_and_what_is_buffered_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (kubeconfig, received) = webhook(dir.path(), Behaviour::Accept).await;
    let server = webhook_server(dir.path(), kubeconfig, |o| {
        o.audit.webhook_max_batch_size = 3;
        o.audit.webhook_max_batch_wait = Duration::from_millis(200);
    })
    .await;
    let (id, _) = create_widget(&server, "w1", "red").await;
    let arrived = eventually(|| {
        let received = received.clone();
        let id = id.clone();
        async move {
            let lists = received.lock().unwrap();
            let items = lists.iter().flat_map(|l| l["items"].as_array().unwrap());
            items.filter(|e| e["auditID"] == id.as_str()).count() == 2
        }
    })
    .await;
    assert!(arrived, "{:#?}", received.lock().unwrap());
    for list in received.lock().unwrap().iter() {
        assert_eq!(list["kind"], "EventList");
        assert_eq!(list["apiVersion"], "audit.k8s.io/v1");
        let items = list["items"].as_array().unwrap();
        assert!(!items.is_empty() && items.len() <= 3, "{list}");
    }
    server.stop().await;

    // Batches that wait an hour: only shutdown sends them.
    let (kubeconfig, received) = webhook(dir.path(), Behaviour::Accept).await;
    let server = webhook_server(dir.path(), kubeconfig, |o| {
        o.audit.webhook_max_batch_wait = Duration::from_secs(3600);
    })
    .await;
    let (id, _) = create_widget(&server, "w2", "red").await;
    assert!(received.lock().unwrap().is_empty());
    server.stop().await;
    let lists = received.lock().unwrap();
    let items: Vec<&Value> = lists
        .iter()
        .flat_map(|l| l["items"].as_array().unwrap())
        .collect();
    assert_eq!(
        items.iter().filter(|e| e["auditID"] == id.as_str()).count(),
        2,
        "{items:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_or_failing_webhook_never_holds_up_requests_and_losses_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    // Hanging: one batch of one event in flight forever, a buffer of two; the rest dropped.
    let (kubeconfig, _) = webhook(dir.path(), Behaviour::Hang).await;
    let server = webhook_server(dir.path(), kubeconfig, |o| {
        o.audit.webhook_buffer_size = 2;
        o.audit.webhook_max_batch_size = 1;
        o.audit.webhook_max_batch_wait = Duration::from_millis(10);
    })
    .await;
    for i in 0..5 {
        let (_, code) = create_widget(&server, &format!("h{i}"), "red").await;
        assert_eq!(code, 201);
    }
    let metrics = ok(server.kubectl(&["get", "--raw", "/metrics"]));
    let dropped = counter(&metrics, "apiserver_audit_error_total{plugin=\"buffered\"}");
    assert!(dropped >= 5.0, "{metrics}");
    assert!(counter(&metrics, "apiserver_audit_event_total") >= 10.0);

    // Failing: every POST answered 500, counted by event.
    let dir = tempfile::tempdir().unwrap();
    let (kubeconfig, _) = webhook(dir.path(), Behaviour::Fail).await;
    let server = webhook_server(dir.path(), kubeconfig, |o| {
        o.audit.webhook_max_batch_wait = Duration::from_millis(10);
    })
    .await;
    let (_, code) = create_widget(&server, "f", "red").await;
    assert_eq!(code, 201);
    let failed = eventually(|| async {
        let metrics = ok(server.kubectl(&["get", "--raw", "/metrics"]));
        counter(&metrics, "apiserver_audit_error_total{plugin=\"webhook\"}") >= 2.0
    })
    .await;
    assert!(failed);
    server.stop().await;
}

/// The extension server's own identity towards the fake core.
const CALLER: &str = "system:serviceaccount:audit:apiserver";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_authorizer_denies_is_audited_as_kube_apiserver_audits_it() {
    use extension_apiserver_testing::fake_core::{AuthenticationConfig, FakeCore};
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let users = TestCa::new("client-ca");
    let proxies = TestCa::new("front-proxy-ca");
    core.set_authentication_config(&AuthenticationConfig::with_front_proxy(
        &users.cert_pem,
        &proxies.cert_pem,
    ));
    let log = dir.path().join("audit.log");
    let mut options = ServerOptions {
        storage_backend: extension_apiserver::server::StorageBackendKind::Memory,
        ..TestServer::options(dir.path())
    };
    let kubeconfig = core.kubeconfig(CALLER);
    options.auth.authentication_kubeconfig = Some(kubeconfig.clone());
    options.auth.authorization_kubeconfig = Some(kubeconfig);
    options.audit.policy_file = Some(write_policy(dir.path()));
    options.audit.log_path = Some(log.display().to_string());
    let server = TestServer::start_with_options(options, vec![group()]).await;

    // bob, with a client certificate of the cluster's client CA, may do nothing.
    let (cert, key) = users.client("bob", &["devs"]).write(dir.path(), "bob");
    let url = format!("https://127.0.0.1:{}{WIDGETS}", server.addr.port());
    let curl = std::process::Command::new("curl")
        .args(["-sk", "-D", "-", "-o", "/dev/null", "--cert"])
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .arg(&url)
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&curl.stdout).to_lowercase();
    assert!(headers.contains(" 403"), "{headers}");
    let id = headers
        .lines()
        .find_map(|l| l.strip_prefix("audit-id:"))
        .expect("Audit-Id on a 403")
        .trim()
        .to_string();
    let all = events(&log);
    let denied = with_id(&all, &id);
    let stages: Vec<&Value> = denied.iter().map(|e| &e["stage"]).collect();
    assert_eq!(stages, ["RequestReceived", "ResponseComplete"], "{all:#?}");
    let event = denied[1];
    assert_eq!(event["level"], "Metadata");
    assert_eq!(event["verb"], "list");
    assert_eq!(event["user"]["username"], "bob");
    assert_eq!(
        event["user"]["groups"],
        json!(["devs", "system:authenticated"])
    );
    assert_eq!(
        event["objectRef"],
        json!({"resource": "widgets", "namespace": "default",
        "apiGroup": "audit.example.com", "apiVersion": "v1"})
    );
    assert_eq!(
        event["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert!(
        event["annotations"]
            .get("authorization.k8s.io/reason")
            .is_some(),
        "{event}"
    );
    let status = &event["responseStatus"];
    assert_eq!(status["code"], 403);
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "widgets.audit.example.com is forbidden: User \"bob\" cannot list resource \"widgets\" \
         in API group \"audit.example.com\" in the namespace \"default\""
    );
    assert_eq!(status["details"]["group"], "audit.example.com");
    assert_eq!(status["details"]["kind"], "widgets");
    assert!(event.get("requestObject").is_none() && event.get("responseObject").is_none());
    server.stop().await;
}

/// Adds `audit.example.com/colour` to the audit events of every widget create.
struct Annotator;

#[extension_apiserver::async_trait]
impl extension_apiserver::admission::AdmissionPlugin for Annotator {
    fn name(&self) -> &str {
        "Annotator"
    }

    async fn validate(
        &self,
        a: &extension_apiserver::admission::Attributes,
    ) -> extension_apiserver::Result<()> {
        if let Some(object) = &a.object {
            let colour = object["spec"]["color"].as_str().unwrap_or_default();
            a.add_audit_annotation("audit.example.com/colour", colour);
        }
        Ok(())
    }
}

/// An impersonated request is audited with both users (`user`, `impersonatedUser`), and
/// what an admission plugin annotates reaches the request's events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_and_admission_annotations_are_in_the_events() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let mut options = ServerOptions {
        storage_backend: extension_apiserver::server::StorageBackendKind::Memory,
        ..TestServer::options(dir.path())
    };
    options.audit.policy_file = Some(write_policy(dir.path()));
    options.audit.log_path = Some(log.display().to_string());
    let server = TestServer::start_configured(options, |server| {
        server
            .group(group())
            .admission_plugin(|_| extension_apiserver::admission::Plugin::validating(Annotator))
    })
    .await;
    let body = json!({
        "apiVersion": "audit.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"}, "spec": {"color": "teal"}
    });
    let request = http::Request::post(WIDGETS)
        .header("content-type", "application/json")
        .header("Impersonate-User", "carol")
        .header("Impersonate-Group", "qa")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let response = server.client().send(request.map(Into::into)).await.unwrap();
    assert_eq!(response.status(), 201);
    let id = response.headers()["audit-id"].to_str().unwrap().to_string();
    let all = events(&log);
    let event = *with_id(&all, &id).last().unwrap();
    assert_eq!(event["stage"], "ResponseComplete");
    assert_eq!(
        event["impersonatedUser"],
        json!({"username": "carol", "groups": ["qa", "system:authenticated"]})
    );
    assert_ne!(event["user"]["username"], "carol");
    assert_eq!(event["annotations"]["audit.example.com/colour"], "teal");
    server.stop().await;
}
