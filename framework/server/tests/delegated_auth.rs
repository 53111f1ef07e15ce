//! Delegated authentication and authorization end to end: a real server over TLS in delegated
//! mode, the fake core kube-apiserver of `extension_apiserver_testing::fake_core` answering TokenReview
//! and SubjectAccessReview and serving the `extension-apiserver-authentication` ConfigMap,
//! certificates made in the test. Raw HTTP/1.1 over tokio-rustls, so each request chooses its
//! client certificate and headers. Only loopback addresses; every wait is bounded.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::{APIGroup, APIServer, ServerOptions, StorageBackendKind};
use extension_apiserver::tls::certs::{CertKey, SelfSignedCerts};
use extension_apiserver::tls::{crypto_provider, root_store};
use extension_apiserver_testing::fake_core::{AuthenticationConfig, FakeCore, Rule, TokenUser};
use extension_apiserver_testing::openssl::{KeyType, OpensslCa};
use extension_apiserver_testing::pki::{TestCa, TestCert};
use extension_apiserver_testing::{TestServer, eventually};
use rustls::pki_types::ServerName;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "wardle.example.com",
    version = "v1alpha1",
    kind = "Flunder",
    namespaced
)]
pub struct Flunder {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: FlunderSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct FlunderSpec {
    #[serde(default)]
    pub reference: String,
}

const WAIT: Duration = Duration::from_secs(30);
/// The service account the extension server calls the core kube-apiserver as.
const CALLER: &str = "system:serviceaccount:wardle:apiserver";
const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/ns1/flunders";

fn group() -> APIGroup {
    APIGroup::new("wardle.example.com").version("v1alpha1", |v| v.resource::<Flunder>())
}

/// A server in delegated mode and its cluster.
struct Env {
    dir: tempfile::TempDir,
    core: FakeCore,
    server: TestServer,
    /// The CA of user client certificates (`client-ca-file` of the ConfigMap).
    client_ca: TestCa,
    /// The front-proxy CA (`requestheader-client-ca-file` of the ConfigMap).
    front_proxy: TestCa,
    /// What the aggregator presents: CN `front-proxy-client` of the front-proxy CA.
    aggregator: TestCert,
}

/// The options of a delegated server whose kubeconfigs point at `core`.
fn delegated_options(dir: &Path, core: &FakeCore) -> ServerOptions {
    let mut options = ServerOptions {
        storage_backend: StorageBackendKind::Memory,
        ..TestServer::options(dir)
    };
    let kubeconfig = core.kubeconfig(CALLER);
    options.auth.authentication_kubeconfig = Some(kubeconfig.clone());
    options.auth.authorization_kubeconfig = Some(kubeconfig);
    options
}

impl Env {
    async fn start() -> Env {
        Self::start_with(|_| {}).await
    }

    /// Starts the fake core with kube-apiserver's usual ConfigMap, then the server with the
    /// options `configure` leaves.
    async fn start_with(configure: impl FnOnce(&mut ServerOptions)) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let core = FakeCore::start(dir.path()).await;
        let client_ca = TestCa::new("client-ca");
        let front_proxy = TestCa::new("front-proxy-ca");
        core.set_authentication_config(&AuthenticationConfig::with_front_proxy(
            &client_ca.cert_pem,
            &front_proxy.cert_pem,
        ));
        let mut options = delegated_options(dir.path(), &core);
        configure(&mut options);
        let server = TestServer::start_with_options(options, vec![group()]).await;
        let aggregator = front_proxy.client("front-proxy-client", &[]);
        Env {
            dir,
            core,
            server,
            client_ca,
            front_proxy,
            aggregator,
        }
    }

    /// Sends `method path` with an optional client certificate and extra headers.
    async fn send(
        &self,
        method: &str,
        path: &str,
        cert: Option<&TestCert>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let certs = SelfSignedCerts::load_or_create(&self.dir.path().join("certs"), &[]).unwrap();
        let roots = root_store(&certs.serving_ca()).unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match cert {
            Some(c) => {
                let pair = CertKey::from_pem(c.cert_pem.as_bytes(), c.key_pem.as_bytes()).unwrap();
                builder
                    .with_client_auth_cert(pair.cert_chain, pair.key)
                    .unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = TcpStream::connect(self.server.addr).await.unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut stream = timeout(WAIT, connector.connect(name, tcp))
            .await
            .expect("TLS handshake timed out")
            .expect("TLS handshake");
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Accept: application/json\r\n"
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if method == "POST" || method == "PUT" {
            request.push_str("Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
        } else {
            request.push_str("\r\n");
        }
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        // The server may end the TLS stream without close_notify; what was read counts.
        let _ = timeout(WAIT, stream.read_to_end(&mut raw))
            .await
            .expect("response timed out");
        Reply::parse(&raw)
    }

    async fn get(&self, path: &str, cert: Option<&TestCert>, headers: &[(&str, &str)]) -> Reply {
        self.send("GET", path, cert, headers).await
    }

    /// Waits until the front proxy's new certificate `new_aggregator` is trusted for `user`'s
    /// requests, then checks that the old one (`self.aggregator`) no longer is.
    async fn assert_front_proxy_rotated(&self, new_aggregator: &TestCert, user: &[(&str, &str)]) {
        let rotated = eventually(|| async {
            self.get(FLUNDERS, Some(new_aggregator), user).await.code == 200
        })
        .await;
        assert!(rotated, "the new front-proxy CA was never trusted");
        let reply = self.get(FLUNDERS, Some(&self.aggregator), user).await;
        assert_eq!(
            reply.code, 401,
            "old front-proxy CA still trusted: {reply:?}"
        );
    }

    /// A GET by `curl` over TLS `version` ("1.2" or "1.3") with client certificate `cert` and
    /// extra headers. curl failing (a handshake that ends the connection) fails the test.
    async fn curl(
        &self,
        version: &str,
        path: &str,
        cert: &TestCert,
        headers: &[(&str, &str)],
    ) -> Reply {
        let files = tempfile::tempdir().unwrap();
        let (cert_file, key_file) = cert.write(files.path(), "client");
        let certs = SelfSignedCerts::load_or_create(&self.dir.path().join("certs"), &[]).unwrap();
        let ca_file = files.path().join("serving-ca.crt");
        std::fs::write(&ca_file, &certs.serving_ca_pem).unwrap();
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "--max-time", "20", "-i", "--http1.1"])
            .args([
                format!("--tlsv{version}"),
                "--tls-max".into(),
                version.to_string(),
            ])
            .arg("--cacert")
            .arg(&ca_file)
            .arg("--cert")
            .arg(&cert_file)
            .arg("--key")
            .arg(&key_file)
            .args(["-H", "Accept: application/json"]);
        for (name, value) in headers {
            cmd.args(["-H", &format!("{name}: {value}")]);
        }
        cmd.arg(format!("https://{}{path}", self.server.addr));
        let out = tokio::task::spawn_blocking(move || cmd.output().expect("run curl"))
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "curl over TLS {version}: {stderr}");
        Reply::parse(&out.stdout)
    }

    /// A GET with `Authorization: Bearer {token}`.
    async fn get_with_token(&self, path: &str, token: &str) -> Reply {
        let bearer = format!("Bearer {token}");
        self.get(path, None, &[("Authorization", &bearer)]).await
    }

    /// A GET through the "aggregator" for `user` in `groups`.
    async fn get_as_proxied(&self, path: &str, user: &str, groups: &[&str]) -> Reply {
        let mut headers = vec![("X-Remote-User", user)];
        headers.extend(groups.iter().map(|g| ("X-Remote-Group", *g)));
        self.get(path, Some(&self.aggregator), &headers).await
    }
}

/// Status code and JSON body of a response.
#[derive(Debug)]
struct Reply {
    code: u16,
    body: Value,
}

impl Reply {
    fn parse(raw: &[u8]) -> Reply {
        let text = String::from_utf8_lossy(raw);
        let (head, body) = text.split_once("\r\n\r\n").expect("no HTTP head");
        let code = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head}"));
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_string()
        };
        let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
        Reply { code, body }
    }

    fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or("")
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Caches that outlive any test, so counted review calls do not depend on the test's speed.
fn long_caches(options: &mut ServerOptions) {
    let long = Duration::from_secs(3600);
    options.auth.authentication_token_webhook_cache_ttl = long;
    options.auth.authorization_webhook_cache_authorized_ttl = long;
    options.auth.authorization_webhook_cache_unauthorized_ttl = long;
}

/// Denials are not cached, so a test can grant a permission after a denial.
fn no_denial_cache(options: &mut ServerOptions) {
    options.auth.authorization_webhook_cache_unauthorized_ttl = Duration::ZERO;
}

fn allow_list_flunders(user: &str) -> Rule {
    Rule::user(user, &["get", "list"], "wardle.example.com", &["flunders"]).in_namespace("ns1")
}

// ---------------------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_remote_user_on_a_plain_client_certificate_is_ignored() {
    let env = Env::start_with(no_denial_cache).await;
    let alice = env.client_ca.client("alice", &["devs"]);
    let forged = [
        ("X-Remote-User", "root"),
        ("X-Remote-Group", "system:masters"),
    ];
    let reply = env.get(FLUNDERS, Some(&alice), &forged).await;
    assert_eq!(reply.code, 403, "{reply:?}");
    assert_eq!(
        reply.message(),
        "flunders.wardle.example.com is forbidden: User \"alice\" cannot list resource \
         \"flunders\" in API group \"wardle.example.com\" in the namespace \"ns1\""
    );
    assert_eq!(reply.body["reason"], "Forbidden");
    let review = env.core.access_reviews().pop().unwrap();
    assert_eq!(review["user"], "alice");
    assert_eq!(review["groups"], json!(["devs", "system:authenticated"]));

    env.core.allow(allow_list_flunders("alice"));
    let reply = env.get(FLUNDERS, Some(&alice), &forged).await;
    assert_eq!(reply.code, 200, "{reply:?}");
    assert_eq!(reply.body["kind"], "FlunderList");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_proxy_headers_are_believed_only_from_an_allowed_proxy() {
    let env = Env::start().await;
    env.core.allow(Rule {
        groups: vec!["devs".into()],
        ..allow_list_flunders("nobody")
    });
    let reply = env.get_as_proxied(FLUNDERS, "bob", &["devs"]).await;
    assert_eq!(reply.code, 200, "{reply:?}");
    let review = env.core.access_reviews().pop().unwrap();
    assert_eq!(review["user"], "bob");
    assert_eq!(review["groups"], json!(["devs", "system:authenticated"]));

    // Uid and extras travel too; extra keys are lower-cased and unescaped.
    let headers = [
        ("X-Remote-User", "carol"),
        ("X-Remote-Extra-Example.com%2FScopes", "read"),
        ("X-Remote-Extra-Example.com%2FScopes", "write"),
    ];
    let reply = env.get(FLUNDERS, Some(&env.aggregator), &headers).await;
    assert_eq!(reply.code, 403, "{reply:?}");
    let review = env.core.access_reviews().pop().unwrap();
    assert_eq!(review["user"], "carol");
    assert_eq!(
        review["extra"],
        json!({"example.com/scopes": ["read", "write"]})
    );

    // A certificate of the front-proxy CA with a common name that is not allowed.
    let intruder = env.front_proxy.client("intruder", &[]);
    let reply = env
        .get(FLUNDERS, Some(&intruder), &[("X-Remote-User", "bob")])
        .await;
    assert_eq!(reply.code, 401, "{reply:?}");
    assert_eq!(reply.body["reason"], "Unauthorized");
    // The proxy's certificate without user headers is no user of its own.
    let reply = env.get(FLUNDERS, Some(&env.aggregator), &[]).await;
    assert_eq!(reply.code, 401, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_and_foreign_client_certificates_are_refused() {
    let env = Env::start().await;
    env.core.allow(allow_list_flunders("alice"));
    let valid = env.client_ca.client("alice", &[]);
    assert_eq!(env.get(FLUNDERS, Some(&valid), &[]).await.code, 200);
    let expired = env.client_ca.expired_client("alice", &[]);
    let reply = env.get(FLUNDERS, Some(&expired), &[]).await;
    assert_eq!(reply.code, 401, "{reply:?}");
    let foreign = TestCa::new("other-ca").client("alice", &[]);
    let reply = env.get(FLUNDERS, Some(&foreign), &[]).await;
    assert_eq!(reply.code, 401, "{reply:?}");
    // The standalone client CA of the cert dir is not trusted in delegated mode.
    let certs = SelfSignedCerts::load_or_create(&env.dir.path().join("certs"), &[]).unwrap();
    let admin = TestCert {
        cert_pem: certs.admin_cert_pem.clone(),
        key_pem: certs.admin_key_pem.clone(),
    };
    let reply = env.get(FLUNDERS, Some(&admin), &[]).await;
    assert_eq!(reply.code, 401, "{reply:?}");
}

/// X.509 v1 client certificates (no extensions), made by `openssl x509 -req` as most "create
/// a Kubernetes user" guides make them, pass the handshake whatever their key, CA or dates,
/// and are judged per request as kube-apiserver judges them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_client_certificates_are_judged_per_request_over_tls_12_and_13() {
    let env = Env::start_with(no_denial_cache).await;
    let client_ca = OpensslCa::of(&env.client_ca);
    let front_proxy = OpensslCa::of(&env.front_proxy);
    let forged = [
        ("X-Remote-User", "root"),
        ("X-Remote-Group", "system:masters"),
    ];
    let bob = [("X-Remote-User", "bob")];
    let keys = [KeyType::Rsa, KeyType::Ecdsa, KeyType::Ed25519];
    for version in ["1.2", "1.3"] {
        for key in keys {
            let case = format!("TLS {version}, {key:?}");
            // A user of the client CA: authenticated, the forged headers ignored, and the
            // authorizer's 403 for a user without rights.
            let alice = client_ca.v1_client("alice", &["devs"], key);
            let reply = env.curl(version, FLUNDERS, &alice, &forged).await;
            assert_eq!(reply.code, 403, "{case}: {reply:?}");
            assert!(
                reply.message().contains("User \"alice\""),
                "{case}: {reply:?}"
            );
            let review = env.core.access_reviews().pop().unwrap();
            assert_eq!(review["groups"], json!(["devs", "system:authenticated"]));

            // The front-proxy CA, a common name that is not allowed: 401.
            let intruder = front_proxy.v1_client("intruder", &[], key);
            let reply = env.curl(version, FLUNDERS, &intruder, &bob).await;
            assert_eq!(reply.code, 401, "{case}: {reply:?}");
        }
        // The front-proxy CA and the allowed name: the headers name the user.
        let proxy = front_proxy.v1_client("front-proxy-client", &[], KeyType::Rsa);
        let reply = env.curl(version, FLUNDERS, &proxy, &bob).await;
        assert_eq!(reply.code, 403, "TLS {version}: {reply:?}");
        assert!(reply.message().contains("User \"bob\""), "{reply:?}");

        // Expired, or of a CA nobody trusts: the connection stays up, the answer is 401.
        let expired = client_ca.expired_v1_client("alice", &[], KeyType::Ecdsa);
        let reply = env.curl(version, FLUNDERS, &expired, &[]).await;
        assert_eq!(reply.code, 401, "TLS {version}: {reply:?}");
        let stranger = OpensslCa::v1_root("unknown").v1_client("alice", &[], KeyType::Ed25519);
        let reply = env.curl(version, FLUNDERS, &stranger, &forged).await;
        assert_eq!(reply.code, 401, "TLS {version}: {reply:?}");
    }
    env.core.allow(allow_list_flunders("alice"));
    let alice = client_ca.v1_client("alice", &[], KeyType::Ed25519);
    let reply = env.curl("1.3", FLUNDERS, &alice, &[]).await;
    assert_eq!(reply.code, 200, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_reviewed_and_cached() {
    let env = Env::start_with(long_caches).await;
    env.core.add_token(
        "token-of-dave",
        TokenUser {
            username: "dave".into(),
            uid: "uid-dave".into(),
            groups: vec!["devs".into()],
            ..TokenUser::default()
        },
    );
    env.core.allow(allow_list_flunders("dave"));
    for _ in 0..3 {
        let reply = env.get_with_token(FLUNDERS, "token-of-dave").await;
        assert_eq!(reply.code, 200, "{reply:?}");
    }
    assert_eq!(env.core.count("/tokenreviews"), 1, "accepted token cached");
    let review = env.core.access_reviews().pop().unwrap();
    assert_eq!(review["user"], "dave");
    assert_eq!(review["uid"], "uid-dave");
    // The token is not believed past the cache once it is gone... within the TTL it still is.
    env.core.remove_token("token-of-dave");
    assert_eq!(
        env.get_with_token(FLUNDERS, "token-of-dave").await.code,
        200
    );
    assert_eq!(env.core.count("/tokenreviews"), 1);

    // A rejected token is 401. kube-apiserver's TokenReview explains rejections in
    // status.error, which k8s.io/apiserver treats as an error and does not cache.
    for _ in 0..2 {
        let reply = env.get_with_token(FLUNDERS, "not-a-token").await;
        assert_eq!(reply.code, 401, "{reply:?}");
    }
    assert_eq!(env.core.count("/tokenreviews"), 3);

    // Every call to the core is made as the server's service account.
    let calls = env.core.calls();
    assert!(calls.iter().all(|c| c.caller.as_deref() == Some(CALLER)));

    // A failing TokenReview (the server's RBAC binding is missing) is 401, not 500.
    env.core.forbid(CALLER, "tokenreviews");
    let reply = env.get_with_token(FLUNDERS, "another-token").await;
    assert_eq!(reply.code, 401, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_one_review() {
    let env = Env::start_with(long_caches).await;
    env.core.add_token(
        "token-of-olga",
        TokenUser {
            username: "olga".into(),
            ..TokenUser::default()
        },
    );
    env.core.allow(allow_list_flunders("olga"));
    let requests = (0..16).map(|_| env.get_with_token(FLUNDERS, "token-of-olga"));
    for reply in futures::future::join_all(requests).await {
        assert_eq!(reply.code, 200, "{reply:?}");
    }
    assert_eq!(env.core.count("/tokenreviews"), 1);
    assert_eq!(env.core.count("/subjectaccessreviews"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_is_on_by_default_in_delegated_mode() {
    let env = Env::start_with(no_denial_cache).await;
    let reply = env.get(FLUNDERS, None, &[]).await;
    assert_eq!(reply.code, 403, "{reply:?}");
    assert!(
        reply.message().contains("User \"system:anonymous\""),
        "{reply:?}"
    );
    let review = env.core.access_reviews().pop().unwrap();
    assert_eq!(review["groups"], json!(["system:unauthenticated"]));
    env.core.allow(Rule {
        groups: vec!["system:unauthenticated".into()],
        ..allow_list_flunders("nobody")
    });
    assert_eq!(env.get(FLUNDERS, None, &[]).await.code, 200);
    // Bad credentials are never downgraded to anonymous.
    assert_eq!(env.get_with_token(FLUNDERS, "bad").await.code, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_off_means_401_but_health_stays_open() {
    let env = Env::start_with(|o| o.auth.anonymous_auth = Some(false)).await;
    let reply = env.get(FLUNDERS, None, &[]).await;
    assert_eq!(reply.code, 401, "{reply:?}");
    let reply = env.get("/healthz", None, &[]).await;
    assert_eq!(reply.code, 200, "{reply:?}");
}

// ---------------------------------------------------------------------------------------
// Authorization
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_reviews_are_cached_allowed_and_denied() {
    let env = Env::start_with(long_caches).await;
    env.core.allow(allow_list_flunders("erin"));
    for _ in 0..3 {
        let reply = env.get_as_proxied(FLUNDERS, "erin", &[]).await;
        assert_eq!(reply.code, 200, "{reply:?}");
    }
    assert_eq!(env.core.count("/subjectaccessreviews"), 1);
    let other_namespace = "/apis/wardle.example.com/v1alpha1/namespaces/ns2/flunders/x";
    for _ in 0..3 {
        let reply = env.get_as_proxied(other_namespace, "erin", &[]).await;
        assert_eq!(reply.code, 403, "{reply:?}");
        assert_eq!(
            reply.message(),
            "flunders.wardle.example.com \"x\" is forbidden: User \"erin\" cannot get \
             resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"ns2\""
        );
        assert_eq!(
            reply.body["details"],
            json!({"name": "x", "group": "wardle.example.com", "kind": "flunders"})
        );
    }
    assert_eq!(env.core.count("/subjectaccessreviews"), 2);
    // Another user is another review.
    assert_eq!(env.get_as_proxied(FLUNDERS, "frank", &[]).await.code, 403);
    assert_eq!(env.core.count("/subjectaccessreviews"), 3);

    // A failing SubjectAccessReview is an internal error, as k8s.io/apiserver answers.
    env.core.forbid(CALLER, "subjectaccessreviews");
    let reply = env.get_as_proxied(FLUNDERS, "grace", &[]).await;
    assert_eq!(reply.code, 500, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_attributes_are_kube_apiservers() {
    let env = Env::start().await;
    let base = "/apis/wardle.example.com/v1alpha1";
    let cases: [(&str, String, Value); 7] = [
        (
            "GET",
            format!("{base}/namespaces/ns1/flunders?watch=true"),
            json!({"namespace": "ns1", "verb": "watch", "group": "wardle.example.com",
                   "version": "v1alpha1", "resource": "flunders"}),
        ),
        (
            "DELETE",
            format!("{base}/namespaces/ns1/flunders"),
            json!({"namespace": "ns1", "verb": "deletecollection",
                   "group": "wardle.example.com", "version": "v1alpha1", "resource": "flunders"}),
        ),
        (
            "PUT",
            format!("{base}/namespaces/ns1/flunders/f1/status"),
            json!({"namespace": "ns1", "verb": "update", "group": "wardle.example.com",
                   "version": "v1alpha1", "resource": "flunders", "subresource": "status",
                   "name": "f1"}),
        ),
        (
            "POST",
            format!("{base}/namespaces/ns1/flunders"),
            json!({"namespace": "ns1", "verb": "create", "group": "wardle.example.com",
                   "version": "v1alpha1", "resource": "flunders"}),
        ),
        (
            "GET",
            format!("{base}/flunders"),
            json!({"verb": "list", "group": "wardle.example.com", "version": "v1alpha1",
                   "resource": "flunders"}),
        ),
        (
            "DELETE",
            format!("{base}/namespaces/ns1/flunders/f1"),
            json!({"namespace": "ns1", "verb": "delete", "group": "wardle.example.com",
                   "version": "v1alpha1", "resource": "flunders", "name": "f1"}),
        ),
        (
            "GET",
            format!("{base}/namespaces/ns1/flunders/f1"),
            json!({"namespace": "ns1", "verb": "get", "group": "wardle.example.com",
                   "version": "v1alpha1", "resource": "flunders", "name": "f1"}),
        ),
    ];
    let headers = [("X-Remote-User", "hank")];
    for (method, path, expected) in cases {
        let reply = env
            .send(method, &path, Some(&env.aggregator), &headers)
            .await;
        assert_eq!(reply.code, 403, "{method} {path}: {reply:?}");
        let review = env.core.access_reviews().pop().unwrap();
        assert_eq!(review["resourceAttributes"], expected, "{method} {path}");
        assert!(review.get("nonResourceAttributes").is_none());
    }
    let reply = env.get("/apis", Some(&env.aggregator), &headers).await;
    assert_eq!(reply.code, 403, "{reply:?}");
    assert_eq!(
        reply.message(),
        "forbidden: User \"hank\" cannot get path \"/apis\""
    );
    let review = env.core.access_reviews().pop().unwrap();
    assert_eq!(
        review["nonResourceAttributes"],
        json!({"path": "/apis", "verb": "get"})
    );
    assert!(review.get("resourceAttributes").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allowed_paths_and_groups_skip_the_review() {
    let env = Env::start_with(|o| {
        o.auth.authorization_always_allow_paths =
            vec!["/healthz".into(), "/readyz".into(), "/openapi/*".into()];
    })
    .await;
    for path in ["/healthz", "/readyz", "/openapi/v2"] {
        let reply = env.get_as_proxied(path, "ivan", &[]).await;
        assert_eq!(reply.code, 200, "{path}: {reply:?}");
        assert_eq!(env.get(path, None, &[]).await.code, 200, "{path} anonymous");
    }
    assert_eq!(env.core.count("/subjectaccessreviews"), 0);
    // /livez is not in this list, so it needs a review (and RBAC says no).
    assert_eq!(env.get_as_proxied("/livez", "ivan", &[]).await.code, 403);
    assert_eq!(env.core.count("/subjectaccessreviews"), 1);

    // system:masters needs no review at all, for resources or paths.
    let root = env.client_ca.client("root", &["system:masters"]);
    assert_eq!(env.get(FLUNDERS, Some(&root), &[]).await.code, 200);
    assert_eq!(env.get("/livez", Some(&root), &[]).await.code, 200);
    let reply = env
        .get_as_proxied(FLUNDERS, "judy", &["system:masters"])
        .await;
    assert_eq!(reply.code, 200, "{reply:?}");
    assert_eq!(env.core.count("/subjectaccessreviews"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_authorized_as_the_non_resource_url() {
    let env = Env::start_with(no_denial_cache).await;
    let reply = env.get_as_proxied("/metrics", "mallory", &[]).await;
    assert_eq!(reply.code, 403, "{reply:?}");
    assert_eq!(
        reply.message(),
        "forbidden: User \"mallory\" cannot get path \"/metrics\""
    );
    let review = env.core.access_reviews().pop().unwrap();
    assert_eq!(
        review["nonResourceAttributes"],
        json!({"path": "/metrics", "verb": "get"})
    );
    env.core.allow(Rule {
        users: vec!["prometheus".into()],
        verbs: vec!["get".into()],
        non_resource_urls: vec!["/metrics".into()],
        ..Rule::default()
    });
    let reply = env.get_as_proxied("/metrics", "prometheus", &[]).await;
    assert_eq!(reply.code, 200, "{reply:?}");
    let text = reply.body.as_str().unwrap_or_default();
    assert!(
        text.contains("# TYPE authorization_duration_seconds histogram"),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------
// The authentication ConfigMap
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_cas_take_effect_without_restart() {
    let env = Env::start().await;
    env.core.allow(allow_list_flunders("kim"));
    env.core.allow(allow_list_flunders("alice"));
    assert_eq!(env.get_as_proxied(FLUNDERS, "kim", &[]).await.code, 200);
    let old_alice = env.client_ca.client("alice", &[]);
    assert_eq!(env.get(FLUNDERS, Some(&old_alice), &[]).await.code, 200);

    let new_front_proxy = TestCa::new("front-proxy-ca-2");
    let new_aggregator = new_front_proxy.client("front-proxy-client", &[]);
    let new_client_ca = TestCa::new("client-ca-2");
    let new_alice = new_client_ca.client("alice", &[]);
    env.core
        .set_authentication_config(&AuthenticationConfig::with_front_proxy(
            &new_client_ca.cert_pem,
            &new_front_proxy.cert_pem,
        ));
    let kim = [("X-Remote-User", "kim")];
    env.assert_front_proxy_rotated(&new_aggregator, &kim).await;
    let rotated =
        eventually(|| async { env.get(FLUNDERS, Some(&new_alice), &[]).await.code == 200 }).await;
    assert!(rotated, "the new client CA was never trusted");
    assert_eq!(env.get(FLUNDERS, Some(&old_alice), &[]).await.code, 401);

    // Allowed names and header names follow the ConfigMap as well.
    let mut config =
        AuthenticationConfig::with_front_proxy(&new_client_ca.cert_pem, &new_front_proxy.cert_pem);
    config.requestheader_allowed_names = vec!["aggregator".into()];
    config.requestheader_username_headers = vec!["X-Proxied-User".into()];
    env.core.set_authentication_config(&config);
    let renamed = new_front_proxy.client("aggregator", &[]);
    let changed = eventually(|| async {
        env.get(FLUNDERS, Some(&renamed), &[("X-Proxied-User", "kim")])
            .await
            .code
            == 200
    })
    .await;
    assert!(changed, "the new allowed name and header were never used");
    assert_eq!(
        env.get(FLUNDERS, Some(&new_aggregator), &kim).await.code,
        401
    );
}

/// Lists (not watches) and watches of the authentication ConfigMap the server made so far.
fn configmap_calls(core: &FakeCore) -> (usize, usize) {
    core.lists_and_watches("/api/v1/namespaces/kube-system/configmaps")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_after_the_watch_expired_still_takes_effect() {
    let env = Env::start().await;
    env.core.allow(allow_list_flunders("kim"));
    let kim = [("X-Remote-User", "kim")];
    assert_eq!(
        env.get(FLUNDERS, Some(&env.aggregator), &kim).await.code,
        200
    );
    let watching = eventually(|| async { configmap_calls(&env.core).1 > 0 }).await;
    assert!(watching, "the server never watched the ConfigMap");

    // Writes the ConfigMap watch does not see, then the cluster forgets its history and the
    // watch restarts: the ConfigMap's resourceVersion is too old (410), as on any cluster that
    // ran for a while.
    env.core.set_namespace("elsewhere", "Active");
    env.core.compact();
    let (lists, watches) = configmap_calls(&env.core);
    env.core.close_watches();
    let relisted = eventually(|| async { configmap_calls(&env.core).0 > lists }).await;
    assert!(relisted, "the server did not list again after the 410");

    let new_front_proxy = TestCa::new("front-proxy-ca-2");
    let new_aggregator = new_front_proxy.client("front-proxy-client", &[]);
    env.core
        .set_authentication_config(&AuthenticationConfig::with_front_proxy(
            &env.client_ca.cert_pem,
            &new_front_proxy.cert_pem,
        ));
    env.assert_front_proxy_rotated(&new_aggregator, &kim).await;

    // One relist, and no spinning: the expired watch, the one after the relist.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (lists_now, watches_now) = configmap_calls(&env.core);
    assert_eq!(lists_now - lists, 1, "{:#?}", env.core.calls());
    assert!(
        watches_now - watches <= 2,
        "{} watches after the 410",
        watches_now - watches
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_win_over_the_configmap() {
    let dir = tempfile::tempdir().unwrap();
    let own_front_proxy = TestCa::new("own-front-proxy");
    let (ca_file, _) = TestCert {
        cert_pem: own_front_proxy.cert_pem.clone(),
        key_pem: String::new(),
    }
    .write(dir.path(), "own-front-proxy-ca");
    let env = Env::start_with(|o| {
        o.auth.requestheader_client_ca_file = Some(ca_file.clone());
        o.auth.requestheader_allowed_names = vec!["my-proxy".into()];
        o.auth.requestheader_uid_headers = vec!["X-Remote-Uid".into()];
    })
    .await;
    env.core.allow(allow_list_flunders("lee"));
    let mine = own_front_proxy.client("my-proxy", &[]);
    let lee = [("X-Remote-User", "lee")];
    let with_uid = [("X-Remote-User", "lee"), ("X-Remote-Uid", "uid-lee")];
    assert_eq!(env.get(FLUNDERS, Some(&mine), &with_uid).await.code, 200);
    let review = env.core.access_reviews().pop().unwrap();
    assert_eq!(
        (&review["user"], &review["uid"]),
        (&json!("lee"), &json!("uid-lee"))
    );
    // The ConfigMap's front proxy is not trusted; its client CA still is.
    assert_eq!(
        env.get(FLUNDERS, Some(&env.aggregator), &lee).await.code,
        401
    );
    env.core.allow(allow_list_flunders("alice"));
    let alice = env.client_ca.client("alice", &[]);
    assert_eq!(env.get(FLUNDERS, Some(&alice), &[]).await.code, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_lookup_is_fatal_unless_tolerated() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    core.forbid(CALLER, "configmaps");
    let options = delegated_options(dir.path(), &core);
    let err = APIServer::new(options.clone())
        .group(group())
        .start()
        .await
        .err()
        .expect("start must fail");
    let err = err.to_string();
    assert!(
        err.contains("extension-apiserver-authentication-reader"),
        "{err}"
    );

    let mut tolerant = options.clone();
    tolerant.auth.authentication_tolerate_lookup_failure = true;
    let server = APIServer::new(tolerant)
        .group(group())
        .start()
        .await
        .unwrap();
    server.shutdown().await.unwrap();

    let mut skipping = options;
    skipping.auth.authentication_skip_lookup = true;
    let server = APIServer::new(skipping)
        .group(group())
        .start()
        .await
        .unwrap();
    server.shutdown().await.unwrap();
}

/// `Impersonate-*` headers as kube-apiserver's impersonation filter takes them: each thing
/// impersonated is reviewed (`impersonate` on users, groups, userextras, uids), then the
/// request is authorized as the impersonated user; a user without the permission gets kube's
/// 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_is_authorized_then_the_request_runs_as_the_other_user() {
    let env = Env::start_with(no_denial_cache).await;
    env.core.add_token(
        "token-of-ivy",
        TokenUser {
            username: "ivy".into(),
            ..TokenUser::default()
        },
    );
    let bearer = "Bearer token-of-ivy";
    let as_bob = [("Authorization", bearer), ("Impersonate-User", "bob")];

    // Ivy may not impersonate yet.
    let reply = env.get(FLUNDERS, None, &as_bob).await;
    assert_eq!(reply.code, 403, "{reply:?}");
    assert_eq!(
        reply.message(),
        r#"users "bob" is forbidden: User "ivy" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );

    // Allowed to impersonate, the request is Bob's: his permissions decide.
    env.core.allow(Rule::user(
        "ivy",
        &["impersonate"],
        "",
        &["users", "groups"],
    ));
    let reply = env.get(FLUNDERS, None, &as_bob).await;
    assert_eq!(reply.code, 403, "bob may not list flunders: {reply:?}");
    assert!(
        reply.message().contains(r#"User "bob" cannot list"#),
        "{reply:?}"
    );
    env.core.allow(allow_list_flunders("bob"));
    let reply = env.get(FLUNDERS, None, &as_bob).await;
    assert_eq!(reply.code, 200, "{reply:?}");
    let review = env.core.access_reviews().pop().unwrap();
    assert_eq!(review["user"], "bob");
    assert_eq!(review["groups"], json!(["system:authenticated"]));

    // Every impersonated thing is reviewed: extras need their own permission.
    let with_extra = [
        ("Authorization", bearer),
        ("Impersonate-User", "bob"),
        ("Impersonate-Extra-Scopes", "view"),
    ];
    let reply = env.get(FLUNDERS, None, &with_extra).await;
    assert_eq!(reply.code, 403, "{reply:?}");
    assert_eq!(
        reply.message(),
        r#"userextras.authentication.k8s.io "view" is forbidden: User "ivy" cannot impersonate resource "userextras/scopes" in API group "authentication.k8s.io" at the cluster scope"#
    );

    // Groups without a user are an error, as in kube.
    let groups_only = [("Authorization", bearer), ("Impersonate-Group", "devs")];
    assert_eq!(env.get(FLUNDERS, None, &groups_only).await.code, 500);
}

/// kubectl with the admin kubeconfig of `server` without its client certificate: an anonymous
/// client (a token, which a standalone server ignores, keeps kubectl from prompting).
fn anonymous_kubectl(
    server: &TestServer,
    args: &[&str],
) -> extension_apiserver_testing::KubectlOutput {
    let written = std::fs::read_to_string(&server.kubeconfig).unwrap();
    let mut config: serde_norway::Value = serde_norway::from_str(&written).unwrap();
    config["users"] = serde_norway::from_str("[{name: admin, user: {token: ignored}}]").unwrap();
    let path = server.kubeconfig.with_file_name("anonymous-kubeconfig");
    std::fs::write(&path, serde_norway::to_string(&config).unwrap()).unwrap();
    extension_apiserver_testing::kubectl(&path, args, &[])
}

/// Standalone mode takes `--authorization-always-allow-groups` and `-paths` too (they were
/// accepted and ignored): anonymous clients are refused until a flag lets them in.
#[tokio::test(flavor = "multi_thread")]
async fn standalone_mode_honours_the_always_allow_flags() {
    let anonymous = |o: &mut ServerOptions| o.auth.anonymous_auth = Some(true);
    let server = TestServer::builder()
        .group(group())
        .options(anonymous)
        .start()
        .await;
    let refused = anonymous_kubectl(&server, &["get", "flunders", "-A"]);
    assert!(!refused.success, "{}", refused.stdout);
    assert!(refused.stderr.contains("Forbidden"), "{}", refused.stderr);
    server.stop().await;

    let server = TestServer::builder()
        .group(group())
        .options(move |o| {
            anonymous(o);
            o.auth.authorization_always_allow_groups = vec!["system:unauthenticated".into()];
        })
        .start()
        .await;
    let allowed = anonymous_kubectl(&server, &["get", "flunders", "-A"]);
    assert!(allowed.success, "{}", allowed.stderr);
    server.stop().await;

    let server = TestServer::builder()
        .group(group())
        .options(move |o| {
            anonymous(o);
            o.auth.authorization_always_allow_paths = vec!["/openapi/*".into()];
        })
        .start()
        .await;
    let allowed = anonymous_kubectl(&server, &["get", "--raw", "/openapi/v2"]);
    assert!(allowed.success, "{}", allowed.stderr);
    // As kube's path authorizer, paths allow non-resource requests only.
    let path = "/apis/wardle.example.com/v1alpha1/flunders";
    let resources = anonymous_kubectl(&server, &["get", "--raw", path]);
    assert!(!resources.success, "{}", resources.stdout);
    server.stop().await;
}
