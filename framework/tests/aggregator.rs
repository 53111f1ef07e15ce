//! The aggregator integration against the fake core kube-apiserver: APIService registration
//! (create, update on a new CA, conflict, overwrite, missing RBAC), the deployment diagnostics
//! in `/readyz?verbose`, and the NamespaceLifecycle admission. Only loopback addresses.

use std::path::Path;

use apiserver::aggregator::diagnostics;
use apiserver::aggregator::registration::READYZ_CHECK;
use apiserver::aggregator::{AggregatorOptions, RegistrationOutcome};
use apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use apiserver::server::certs::SelfSignedCerts;
use apiserver::server::core_api::core_client;
use apiserver::server::RunningServer;
use apiserver::testing::fake_core::FakeCore;
use apiserver::testing::pki::TestCa;
use apiserver::testing::TestServer;
use apiserver::{ApiGroup, ApiServer, Resource};
use base64::Engine as _;
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[resource(
    group = "things.example.com",
    version = "v1",
    kind = "Thing",
    namespaced
)]
struct Thing {
    #[serde(default)]
    metadata: ObjectMeta,
}

const CALLER: &str = "system:serviceaccount:things:things-api";
const APISERVICE: &str = "v1.things.example.com";

fn group() -> ApiGroup {
    ApiGroup::new("things.example.com").version("v1", |v| v.resource::<Thing>())
}

/// Options of a server in `dir` talking to `core`, behind Service `things/things-api`, with a
/// self-signed serving certificate for that Service's name.
fn options(core: &FakeCore, register: bool) -> AggregatorOptions {
    AggregatorOptions {
        kubeconfig: Some(core.kubeconfig(CALLER)),
        register_apiservice: register,
        service_namespace: Some("things".into()),
        service_name: Some("things-api".into()),
        ..AggregatorOptions::default()
    }
}

async fn start(
    dir: &Path,
    aggregator: AggregatorOptions,
    service_name_in_cert: bool,
) -> RunningServer {
    let mut server_options = TestServer::options(dir);
    if service_name_in_cert {
        server_options.extra_hosts = vec!["things-api.things.svc".into()];
    }
    ApiServer::new(server_options)
        .aggregator_options(aggregator)
        .group(group())
        .start()
        .await
        .expect("server starts")
}

/// The self-signed serving CA the server in `dir` made.
fn serving_ca(dir: &Path) -> String {
    SelfSignedCerts::load_or_create(&dir.join("certs"), &["things-api.things.svc".into()])
        .unwrap()
        .serving_ca_pem
}

async fn request(
    server: &RunningServer,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, String) {
    let (client, _) = core_client(Some(&server.kubeconfig))
        .await
        .unwrap()
        .unwrap();
    let builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let response = client
        .send(builder.body(body.into()).unwrap())
        .await
        .unwrap();
    let code = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

async fn readyz(server: &RunningServer) -> (u16, String) {
    request(server, "GET", "/readyz?verbose", None).await
}

fn ca_bundle(apiservice: &Value) -> String {
    let b64 = apiservice["spec"]["caBundle"].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

fn other_apiservice() -> Value {
    json!({
        "metadata": {"name": APISERVICE},
        "spec": {"group": "things.example.com", "version": "v1", "groupPriorityMinimum": 100,
                 "versionPriority": 10, "service": {"namespace": "other", "name": "impostor", "port": 443}},
    })
}

#[tokio::test]
async fn registers_on_start_and_updates_for_a_new_ca() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    let server = start(dir.path(), options(&core, true), true).await;

    let apiservice = core.apiservice(APISERVICE).expect("APIService created");
    let spec = &apiservice["spec"];
    assert_eq!(spec["group"], "things.example.com");
    assert_eq!(spec["version"], "v1");
    assert_eq!(spec["groupPriorityMinimum"], 1000);
    assert_eq!(spec["versionPriority"], 15);
    assert_eq!(spec["service"]["namespace"], "things");
    assert_eq!(spec["service"]["name"], "things-api");
    // Default port: the secure port.
    assert_eq!(spec["service"]["port"], server.addr.port());
    assert_eq!(ca_bundle(&apiservice), serving_ca(dir.path()));
    assert!(spec.get("insecureSkipTLSVerify").is_none_or(|v| v != true));

    let (code, body) = readyz(&server).await;
    assert_eq!(code, 200, "{body}");
    for check in [
        READYZ_CHECK,
        diagnostics::AUTHENTICATION_CONFIG,
        diagnostics::AUTH_DELEGATOR,
        diagnostics::SERVING_CERTIFICATE,
        diagnostics::CA_BUNDLE,
    ] {
        assert!(body.contains(&format!("[+]{check} ok")), "{check}: {body}");
    }

    // The serving certificate changed: the reload hook registers the new CA.
    let registrar = server.apiservice_registrar().expect("a registrar");
    let new_ca = TestCa::new("rotated").cert_pem;
    let results = registrar.register(Some(new_ca.as_bytes())).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].1, Ok(RegistrationOutcome::Updated));
    let updated = core.apiservice(APISERVICE).unwrap();
    assert_eq!(ca_bundle(&updated), new_ca);
    assert_eq!(updated["metadata"]["uid"], apiservice["metadata"]["uid"]);

    // Nothing to do the second time: no write.
    let puts = core
        .calls()
        .iter()
        .filter(|c| c.method == http::Method::PUT)
        .count();
    let results = registrar.register(Some(new_ca.as_bytes())).await;
    assert_eq!(results[0].1, Ok(RegistrationOutcome::Unchanged));
    let puts_after = core
        .calls()
        .iter()
        .filter(|c| c.method == http::Method::PUT)
        .count();
    assert_eq!(puts, puts_after);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_apiservice_pointing_elsewhere_is_a_conflict_unless_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    core.set_apiservice(other_apiservice());
    let server = start(&dir.path().join("a"), options(&core, true), true).await;

    let untouched = core.apiservice(APISERVICE).unwrap();
    assert_eq!(untouched["spec"]["service"]["name"], "impostor");
    let (code, body) = readyz(&server).await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains(&format!(
            "[-]{READYZ_CHECK} failed: APIService {APISERVICE} points at service other/impostor"
        )),
        "{body}"
    );
    assert!(body.contains("--apiservice-overwrite"), "{body}");
    let (code, single) = request(&server, "GET", &format!("/readyz/{READYZ_CHECK}"), None).await;
    assert_eq!(code, 500);
    assert!(single.contains("other/impostor"), "{single}");
    server.shutdown().await.unwrap();

    // With the flag it is taken over.
    let overwrite = AggregatorOptions {
        overwrite: true,
        ..options(&core, true)
    };
    let server = start(&dir.path().join("b"), overwrite, true).await;
    let taken = core.apiservice(APISERVICE).unwrap();
    assert_eq!(taken["spec"]["service"]["namespace"], "things");
    assert_eq!(taken["spec"]["service"]["name"], "things-api");
    assert_eq!(taken["spec"]["groupPriorityMinimum"], 1000);
    assert_eq!(ca_bundle(&taken), serving_ca(&dir.path().join("b")));
    let (code, body) = readyz(&server).await;
    assert_eq!(code, 200, "{body}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn missing_rbac_for_apiservices_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    core.forbid(CALLER, "apiservices");
    let server = start(dir.path(), options(&core, true), true).await;
    assert!(core.apiservice(APISERVICE).is_none());
    let (code, body) = readyz(&server).await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains(&format!(
            "[-]{READYZ_CHECK} failed: not allowed to get APIService {APISERVICE}"
        )),
        "{body}"
    );
    assert!(
        body.contains("apiservices.apiregistration.k8s.io"),
        "{body}"
    );

    // Granted later: the next attempt registers (what the periodic retry runs).
    core.permit(CALLER, "apiservices");
    let results = server.apiservice_registrar().unwrap().refresh().await;
    assert_eq!(results[0].1, Ok(RegistrationOutcome::Created));
    assert!(core.apiservice(APISERVICE).is_some());
    let (code, single) = request(&server, "GET", &format!("/readyz/{READYZ_CHECK}"), None).await;
    assert_eq!(code, 200, "{single}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn insecure_skip_tls_verify_registers_without_a_ca_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    let insecure = AggregatorOptions {
        insecure_skip_tls_verify: true,
        service_port: Some(443),
        ..options(&core, true)
    };
    let server = start(dir.path(), insecure, true).await;
    let apiservice = core.apiservice(APISERVICE).unwrap();
    assert_eq!(apiservice["spec"]["insecureSkipTLSVerify"], true);
    assert!(apiservice["spec"].get("caBundle").is_none());
    assert_eq!(apiservice["spec"]["service"]["port"], 443);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn registration_needs_a_core_api() {
    let dir = tempfile::tempdir().unwrap();
    let aggregator = AggregatorOptions {
        register_apiservice: true,
        service_namespace: Some("things".into()),
        service_name: Some("things-api".into()),
        ..AggregatorOptions::default()
    };
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        panic!("this test needs to run outside a pod (KUBERNETES_SERVICE_HOST is set)");
    }
    let error = ApiServer::new(TestServer::options(dir.path()))
        .aggregator_options(aggregator)
        .group(group())
        .start()
        .await
        .err()
        .expect("no start without a core API");
    assert!(error.to_string().contains("--kubeconfig"), "{error}");
}
