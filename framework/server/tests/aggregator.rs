//! The aggregator integration against the fake core kube-apiserver: APIService registration
//! (create, update on a new CA, conflict, overwrite, missing RBAC), the deployment diagnostics
//! in `/readyz?verbose`, and the NamespaceLifecycle admission. Only loopback addresses.

use std::path::Path;

use base64::Engine as _;
use extension_apiserver::aggregator::diagnostics;
use extension_apiserver::aggregator::registration::READYZ_CHECK;
use extension_apiserver::aggregator::{AggregatorOptions, RegistrationOutcome};
use extension_apiserver::core_api::core_client;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::RunningServer;
use extension_apiserver::tls::certs::SelfSignedCerts;
use extension_apiserver::{APIGroup, APIServer, Resource};
use extension_apiserver_testing::fake_core::FakeCore;
use extension_apiserver_testing::pki::TestCa;
use extension_apiserver_testing::{TestServer, eventually};
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[resource(
    group = "things.example.com",
    version = "v1",
    kind = "Thing",
    namespaced
)]
pub(crate) struct Thing {
    #[serde(default)]
    metadata: ObjectMeta,
}

const CALLER: &str = "system:serviceaccount:things:things-api";
const APISERVICE: &str = "v1.things.example.com";

/// `things.example.com/v1` with `Thing` (also served beside the metrics APIs).
pub(crate) fn group() -> APIGroup {
    APIGroup::new("things.example.com").version("v1", |v| v.resource::<Thing>())
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
    APIServer::new(server_options)
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
async fn a_served_chain_registers_its_last_certificate_or_the_ca_file() {
    use extension_apiserver::tls::certs::parse_certs_pem;
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    let ca = TestCa::new("serving-ca");
    // Leaf followed by its CA, as --tls-cert-file often holds it.
    let serving = ca.serving(&["things-api.things.svc", "127.0.0.1"]);
    let (cert, key) = serving.write(&dir.path().join("tls"), "serving");
    let mut server_options = TestServer::options(dir.path());
    server_options.tls_cert_file = Some(cert);
    server_options.tls_private_key_file = Some(key);
    let server = APIServer::new(server_options.clone())
        .aggregator_options(options(&core, true))
        .group(group())
        .start()
        .await
        .unwrap();
    let registered = ca_bundle(&core.apiservice(APISERVICE).unwrap());
    let registered = parse_certs_pem(registered.as_bytes()).unwrap();
    assert_eq!(registered, parse_certs_pem(ca.cert_pem.as_bytes()).unwrap());
    // (The admin kubeconfig trusts only the self-signed CA: read the findings directly.)
    let findings = server.apiservice_registrar().unwrap().findings().clone();
    assert_eq!(findings.get(diagnostics::CA_BUNDLE), Some(Ok(())));
    assert_eq!(findings.get(READYZ_CHECK), Some(Ok(())));
    assert!(!findings.any_failed());
    server.shutdown().await.unwrap();

    // A leaf alone: --apiservice-ca-file names the CA.
    let leaf_only = serving
        .cert_pem
        .split_inclusive("-----END CERTIFICATE-----\n")
        .next()
        .unwrap();
    let leaf_file = dir.path().join("tls/leaf.crt");
    std::fs::write(&leaf_file, leaf_only).unwrap();
    let ca_file = dir.path().join("tls/ca.crt");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    core.set_apiservice(json!({"metadata": {"name": APISERVICE},
        "spec": {"groupPriorityMinimum": 1, "versionPriority": 1,
                 "service": {"namespace": "things", "name": "things-api"}}}));
    server_options.tls_cert_file = Some(leaf_file);
    let server = APIServer::new(server_options)
        .aggregator_options(AggregatorOptions {
            ca_file: Some(ca_file),
            ..options(&core, true)
        })
        .group(group())
        .start()
        .await
        .unwrap();
    assert_eq!(
        ca_bundle(&core.apiservice(APISERVICE).unwrap()),
        ca.cert_pem
    );
    let findings = server.apiservice_registrar().unwrap().findings().clone();
    assert_eq!(findings.get(diagnostics::CA_BUNDLE), Some(Ok(())));
    assert!(!findings.any_failed());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_new_serving_certificate_is_registered_and_checked() {
    use extension_apiserver::tls::certs::parse_certs_pem;
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    let first_ca = TestCa::new("first");
    let (cert, key) = first_ca
        .serving(&["things-api.things.svc"])
        .write(&dir.path().join("tls"), "serving");
    let mut server_options = TestServer::options(dir.path());
    server_options.tls_cert_file = Some(cert);
    server_options.tls_private_key_file = Some(key);
    let server = APIServer::new(server_options)
        .aggregator_options(options(&core, true))
        .group(group())
        .start()
        .await
        .unwrap();
    let der = |pem: &str| parse_certs_pem(pem.as_bytes()).unwrap();
    let registered = || ca_bundle(&core.apiservice(APISERVICE).unwrap());
    assert_eq!(der(&registered()), der(&first_ca.cert_pem));

    // What the serving-certificate reload calls with the new chain.
    let handle = server.aggregator().expect("a core API").clone();
    let second_ca = TestCa::new("second");
    let second = second_ca.serving(&["things-api.things.svc"]);
    handle
        .serving_certificate_changed(der(&second.cert_pem), None)
        .await
        .unwrap();
    assert_eq!(der(&registered()), der(&second_ca.cert_pem));
    let findings = handle.findings();
    assert!(!findings.any_failed());

    // A new certificate without the Service's name is named at once.
    let third = TestCa::new("third").serving(&["elsewhere.example.com"]);
    handle
        .serving_certificate_changed(der(&third.cert_pem), None)
        .await
        .unwrap();
    let problem = findings.get(diagnostics::SERVING_CERTIFICATE).unwrap();
    assert!(
        problem
            .as_ref()
            .unwrap_err()
            .reason()
            .contains("not valid for things-api.things.svc (it names elsewhere.example.com)"),
        "{problem:?}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn rotated_serving_files_reach_the_apiservice_ca_bundle() {
    use extension_apiserver::tls::certs::parse_certs_pem;
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    let tls = dir.path().join("tls");
    let first_ca = TestCa::new("first");
    let (cert, key) = first_ca
        .serving(&["things-api.things.svc"])
        .write(&tls, "serving");
    let mut server_options = TestServer::options(dir.path());
    server_options.tls_cert_file = Some(cert);
    server_options.tls_private_key_file = Some(key);
    let server = APIServer::new(server_options)
        .aggregator_options(options(&core, true))
        .group(group())
        .start()
        .await
        .unwrap();
    let der = |pem: &str| parse_certs_pem(pem.as_bytes()).unwrap();
    let registered = || der(&ca_bundle(&core.apiservice(APISERVICE).unwrap()));
    assert_eq!(registered(), der(&first_ca.cert_pem));

    // A rotator replaces the files; the reload loop (every second) picks the pair up and the
    // APIService follows, with no call from the test.
    let second_ca = TestCa::new("second");
    second_ca
        .serving(&["things-api.things.svc"])
        .write(&tls, "serving");
    let mut followed = false;
    for _ in 0..200 {
        if registered() == der(&second_ca.cert_pem) {
            followed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(followed, "the caBundle still names the first CA after 10 s");
    assert!(!server.aggregator().unwrap().findings().any_failed());
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
async fn failures_are_retried_until_they_are_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    core.forbid(CALLER, "apiservices");
    core.forbid(CALLER, "tokenreviews");
    let retrying = AggregatorOptions {
        retry_interval: Some(std::time::Duration::from_millis(100)),
        ..options(&core, true)
    };
    let server = start(dir.path(), retrying, true).await;
    let (code, _) = readyz(&server).await;
    assert_eq!(code, 500);
    core.permit(CALLER, "apiservices");
    core.permit(CALLER, "tokenreviews");
    // Bounded wait for a retry round.
    let mut answer = (0, String::new());
    for _ in 0..100 {
        answer = readyz(&server).await;
        if answer.0 == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert!(core.apiservice(APISERVICE).is_some());
    // Nothing failing: no more rounds. (The round that turned /readyz green may still be
    // finishing its probes: at most one more TokenReview; retrying rounds every 100 ms would
    // add about ten in this second.)
    let probes = core.count("/tokenreviews");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(core.count("/tokenreviews") <= probes + 1);
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
    let error = APIServer::new(TestServer::options(dir.path()))
        .aggregator_options(aggregator)
        .group(group())
        .start()
        .await
        .err()
        .expect("no start without a core API");
    assert!(error.to_string().contains("--kubeconfig"), "{error}");
}

// ---------------------------------------------------------------------------------------
// Diagnostics
// ---------------------------------------------------------------------------------------

/// Starts a server (no registration) after `prepare` set up the fake, and returns the
/// `/readyz?verbose` answer.
async fn readyz_after(
    prepare: impl FnOnce(&FakeCore),
    aggregator: impl FnOnce(&FakeCore) -> AggregatorOptions,
    name_in_cert: bool,
) -> (u16, String) {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    prepare(&core);
    let server = start(dir.path(), aggregator(&core), name_in_cert).await;
    let answer = readyz(&server).await;
    server.shutdown().await.unwrap();
    answer
}

#[tokio::test]
async fn a_healthy_deployment_passes_every_diagnostic() {
    let (code, body) = readyz_after(|_| {}, |core| options(core, false), true).await;
    assert_eq!(code, 200, "{body}");
    for check in [
        diagnostics::AUTHENTICATION_CONFIG,
        diagnostics::AUTH_DELEGATOR,
        diagnostics::SERVING_CERTIFICATE,
        diagnostics::CA_BUNDLE,
        READYZ_CHECK,
    ] {
        assert!(body.contains(&format!("[+]{check} ok")), "{check}: {body}");
    }
}

#[tokio::test]
async fn no_access_to_the_authentication_configmap_is_named_with_its_fix() {
    let (code, body) = readyz_after(
        |core| core.forbid(CALLER, "configmaps"),
        |core| options(core, false),
        true,
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("[-]extension-apiserver-authentication failed: cannot read ConfigMap kube-system/extension-apiserver-authentication (403 Forbidden"),
        "{body}"
    );
    assert!(
        body.contains("bind the Role extension-apiserver-authentication-reader in kube-system"),
        "{body}"
    );
    assert!(body.contains("[+]auth-delegator ok"), "{body}");
}

#[tokio::test]
async fn forbidden_token_and_access_reviews_name_the_auth_delegator_binding() {
    let (code, body) = readyz_after(
        |core| core.forbid(CALLER, "tokenreviews"),
        |core| options(core, false),
        true,
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("[-]auth-delegator failed: creating a TokenReview is forbidden"),
        "{body}"
    );
    assert!(
        body.contains("bind the ClusterRole system:auth-delegator"),
        "{body}"
    );

    let (code, body) = readyz_after(
        |core| core.forbid(CALLER, "subjectaccessreviews"),
        |core| options(core, false),
        true,
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("[-]auth-delegator failed: creating a SubjectAccessReview is forbidden"),
        "{body}"
    );
}

#[tokio::test]
async fn a_serving_certificate_without_the_service_name_is_named() {
    let (code, body) = readyz_after(|_| {}, |core| options(core, false), false).await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("[-]serving-certificate failed: the serving certificate is not valid for things-api.things.svc (it names localhost, 127.0.0.1"),
        "{body}"
    );
}

#[tokio::test]
async fn a_ca_bundle_that_does_not_verify_the_serving_certificate_is_named() {
    // Someone else's APIService for our Service, with another CA.
    let (code, body) = readyz_after(
        |core| {
            let other_ca = TestCa::new("other").cert_pem;
            let b64 = base64::engine::general_purpose::STANDARD.encode(other_ca);
            let mut apiservice = other_apiservice();
            apiservice["spec"]["service"] =
                json!({"namespace": "things", "name": "things-api", "port": 443});
            apiservice["spec"]["caBundle"] = json!(b64);
            core.set_apiservice(apiservice);
        },
        |core| options(core, false),
        true,
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains(&format!("[-]apiservice-ca-bundle failed: the caBundle of APIService {APISERVICE} does not verify the serving certificate")),
        "{body}"
    );
    assert!(body.contains(&format!("[+]{READYZ_CHECK} ok")), "{body}");

    // Registered by the server itself with a wrong --apiservice-ca-file.
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong-ca.crt");
    std::fs::write(&wrong, TestCa::new("wrong").cert_pem).unwrap();
    let (code, body) = readyz_after(
        |_| {},
        |core| AggregatorOptions {
            ca_file: Some(wrong.clone()),
            ..options(core, true)
        },
        true,
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("[-]apiservice-ca-bundle failed"), "{body}");
    assert!(body.contains(&format!("[+]{READYZ_CHECK} ok")), "{body}");
}

#[tokio::test]
async fn an_apiservice_pointing_elsewhere_is_named_without_registration() {
    let (code, body) = readyz_after(
        |core| core.set_apiservice(other_apiservice()),
        |core| options(core, false),
        true,
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains(&format!("[-]{READYZ_CHECK} failed: APIService {APISERVICE} points at service other/impostor, not at service things/things-api")),
        "{body}"
    );
}

#[tokio::test]
async fn without_verbose_readyz_withholds_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    core.forbid(CALLER, "configmaps");
    let server = start(dir.path(), options(&core, false), true).await;
    let (code, body) = request(&server, "GET", "/readyz", None).await;
    assert_eq!(code, 500);
    assert!(
        body.contains("[-]extension-apiserver-authentication failed: reason withheld"),
        "{body}"
    );
    server.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// NamespaceLifecycle
// ---------------------------------------------------------------------------------------

async fn create_thing(server: &RunningServer, namespace: &str, name: &str) -> (u16, Value) {
    let path = format!("/apis/things.example.com/v1/namespaces/{namespace}/things");
    let body =
        json!({"apiVersion": "things.example.com/v1", "kind": "Thing", "metadata": {"name": name}});
    let (code, text) = request(server, "POST", &path, Some(body)).await;
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn namespace_lifecycle_refuses_missing_and_terminating_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    core.set_namespace("doomed", "Terminating");
    let server = start(dir.path(), options(&core, false), true).await;

    let (code, _) = create_thing(&server, "default", "a").await;
    assert_eq!(code, 201);

    let (code, status) = create_thing(&server, "missing", "a").await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(
        status,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "namespaces \"missing\" not found", "reason": "NotFound",
            "details": {"name": "missing", "kind": "namespaces"}, "code": 404,
        })
    );

    let (code, status) = create_thing(&server, "doomed", "t").await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "things.things.example.com \"t\" is forbidden: unable to create new content in namespace doomed because it is being terminated",
            "reason": "Forbidden",
            "details": {"name": "t", "group": "things.example.com", "kind": "things", "causes": [{
                "reason": "NamespaceTerminating",
                "message": "namespace doomed is being terminated",
                "field": "metadata.namespace",
            }]},
            "code": 403,
        })
    );
    // Nothing was stored.
    let (code, _) = request(
        &server,
        "GET",
        "/apis/things.example.com/v1/namespaces/doomed/things/t",
        None,
    )
    .await;
    assert_eq!(code, 404);

    // Just created in the core cluster: admitted (from the watch, or the live lookup).
    core.set_namespace("fresh", "Active");
    let (code, status) = create_thing(&server, "fresh", "a").await;
    assert_eq!(code, 201, "{status}");

    // Deleted in the core cluster: refused once the watch delivered it (bounded wait).
    core.delete_namespace("fresh");
    let mut last = 0;
    for i in 0..100 {
        let (code, _) = create_thing(&server, "fresh", &format!("b{i}")).await;
        last = code;
        if code == 404 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(last, 404);

    // Updates of existing objects are not the plugin's business (as in Go).
    core.set_namespace("default", "Terminating");
    let mut refused = false;
    for _ in 0..100 {
        let (code, _) = create_thing(&server, "default", "c").await;
        if code == 403 {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(refused, "creating in a terminating namespace is refused");
    let one = "/apis/things.example.com/v1/namespaces/default/things/a";
    let (code, text) = request(&server, "GET", one, None).await;
    assert_eq!(code, 200, "{text}");
    // An update names the version it replaces (kube refuses one without, with 422).
    let rv = serde_json::from_str::<Value>(&text).unwrap()["metadata"]["resourceVersion"].clone();
    let thing = json!({"apiVersion": "things.example.com/v1", "kind": "Thing",
                       "metadata": {"name": "a", "namespace": "default", "labels": {"x": "y"},
                                    "resourceVersion": rv}});
    let (code, text) = request(
        &server,
        "PUT",
        "/apis/things.example.com/v1/namespaces/default/things/a",
        Some(thing),
    )
    .await;
    assert_eq!(code, 200, "{text}");
    server.shutdown().await.unwrap();
}

/// Lists (not watches) and watches of the namespaces the server made so far.
fn namespace_calls(core: &FakeCore) -> (usize, usize) {
    core.lists_and_watches("/api/v1/namespaces")
}

#[tokio::test]
async fn namespace_lifecycle_follows_deletions_after_the_watch_expired() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    core.set_namespace("brief", "Active");
    let server = start(dir.path(), options(&core, false), true).await;
    let watching = eventually(|| async { namespace_calls(&core).1 > 0 }).await;
    assert!(watching, "the server never watched the namespaces");
    let (code, status) = create_thing(&server, "brief", "a").await;
    assert_eq!(code, 201, "{status}");

    // A write the namespace watch does not see, then the history is gone and the watch
    // restarts from a resourceVersion that has expired (410).
    core.set_configmap("other", "unrelated", Default::default());
    core.compact();
    let (lists, watches) = namespace_calls(&core);
    core.close_watches();
    let relisted = eventually(|| async { namespace_calls(&core).0 > lists }).await;
    assert!(
        relisted,
        "the server did not list the namespaces again after the 410"
    );

    core.delete_namespace("brief");
    let mut refused = None;
    for i in 0..200 {
        let (code, status) = create_thing(&server, "brief", &format!("b{i}")).await;
        if code == 404 {
            refused = Some(status);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        refused.expect("creating in the deleted namespace is refused"),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "namespaces \"brief\" not found", "reason": "NotFound",
            "details": {"name": "brief", "kind": "namespaces"}, "code": 404,
        })
    );

    // One relist, and no spinning: the expired watch, the one after the relist.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let (lists_now, watches_now) = namespace_calls(&core);
    assert_eq!(lists_now - lists, 1);
    assert!(
        watches_now - watches <= 2,
        "{} watches",
        watches_now - watches
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn namespace_lifecycle_is_off_standalone_and_when_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    let mut disabled = TestServer::options(&dir.path().join("disabled"));
    disabled.admission.disable_admission_plugins = vec!["NamespaceLifecycle".into()];
    let server = APIServer::new(disabled)
        .aggregator_options(options(&core, false))
        .group(group())
        .start()
        .await
        .expect("server starts");
    let (code, status) = create_thing(&server, "nowhere", "a").await;
    assert_eq!(code, 201, "{status}");
    server.shutdown().await.unwrap();

    let server = APIServer::new(TestServer::options(&dir.path().join("standalone")))
        .group(group())
        .start()
        .await
        .unwrap();
    let (code, status) = create_thing(&server, "nowhere", "a").await;
    assert_eq!(code, 201, "{status}");
    server.shutdown().await.unwrap();

    // A plugin name the server does not have stops it at start, as in kube-apiserver.
    let mut unknown = TestServer::options(&dir.path().join("unknown"));
    unknown.admission.disable_admission_plugins = vec!["NoSuchPlugin".into()];
    let refused = APIServer::new(unknown).group(group()).start().await;
    let message = refused
        .err()
        .expect("an unknown plugin is refused")
        .to_string();
    assert!(message.contains("NoSuchPlugin"), "{message}");
}
