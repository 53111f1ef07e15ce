//! The secure port end to end: self-signed certificates in a cert dir, `serve_tls` requesting
//! client certificates, and the X509 authenticator in a handler, exercised with
//! kubectl and raw tokio-rustls clients. Only loopback addresses; every wait is bounded.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::routing::get;
use axum::{Json, Router};
use extension_apiserver::auth::{Authenticator, X509Authenticator};
use extension_apiserver::lifecycle::ShutdownSignal;
use extension_apiserver::server::serve::{ServeOptions, serve_tls, serve_tls_with};
use extension_apiserver::server::tls::server_config;
use extension_apiserver::tls::certs::{CertKey, SelfSignedCerts};
use extension_apiserver::tls::{crypto_provider, root_store};
use extension_apiserver_testing::openssl::{KeyType, OpensslCa};
use extension_apiserver_testing::pki::TestCert;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tokio_rustls::client::TlsStream;

const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Test server
// ---------------------------------------------------------------------------------------

struct TestServer {
    addr: SocketAddr,
    certs: SelfSignedCerts,
    dir: tempfile::TempDir,
    stop: ShutdownSignal,
    task: JoinHandle<std::io::Result<()>>,
}

impl TestServer {
    async fn start() -> Self {
        Self::start_with(ServeOptions::default()).await
    }

    async fn start_with(options: ServeOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let certs = SelfSignedCerts::load_or_create(dir.path(), &[]).unwrap();
        certs.write_kubeconfig(addr.port()).unwrap();
        let tls = server_config(&certs.serving, Some(&certs.client_ca())).unwrap();
        let stop = options.signal.clone();
        let router = router(&certs);
        let forever = std::future::pending();
        let task = tokio::spawn(serve_tls_with(listener, tls, router, forever, options));
        Self {
            addr,
            certs,
            dir,
            stop,
            task,
        }
    }

    async fn stop(self) {
        self.stop.trigger();
        let served = timeout(WAIT, self.task).await.expect("server did not stop");
        served.unwrap().unwrap();
    }
}

/// `/whoami` echoes the user the X509 authenticator finds and the HTTP version;
/// `/wait` answers only once shutdown starts, as a watch would end, and `/hang` never
/// answers; `/big` is [`big_body`]; `/version` is there
/// because the installed kubectl (a version dispatcher) asks for it before some commands.
fn router(certs: &SelfSignedCerts) -> Router {
    let authenticator = Arc::new(X509Authenticator::new(&certs.client_ca()).unwrap());
    Router::new()
        .route("/whoami", get(whoami))
        .route("/wait", get(wait_for_shutdown))
        .route("/hang", get(hang))
        .route("/version", get(version))
        .route("/big", get(|| async { big_body() }))
        .with_state(authenticator)
}

async fn whoami(State(auth): State<Arc<X509Authenticator>>, req: Request) -> Json<Value> {
    let (parts, _) = req.into_parts();
    let user = auth.authenticate(&parts).await;
    let proto = format!("{:?}", parts.version);
    Json(match user {
        Ok(user) => json!({ "user": user, "proto": proto }),
        Err(e) => json!({ "error": e.to_string(), "proto": proto }),
    })
}

/// A body of many TLS records and not a whole number of them, no two records alike.
fn big_body() -> Vec<u8> {
    (0..(3 << 20) + 7).map(|i: u32| (i % 251) as u8).collect()
}

/// A handler that ignores shutdown, which only the grace period can end.
async fn hang() -> &'static str {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    "too late"
}

async fn version() -> Json<Value> {
    Json(json!({ "major": "1", "minor": "32", "gitVersion": "v1.32.0" }))
}

async fn wait_for_shutdown(req: Request) -> &'static str {
    let signal = req.extensions().get::<ShutdownSignal>().unwrap().clone();
    signal.cancelled().await;
    "drained"
}

// ---------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new("/usr/bin/kubectl");
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args);
    // Keep kubectl's caches out of the real home.
    cmd.env("HOME", kubeconfig.parent().unwrap())
        .env_remove("KUBECONFIG");
    let run = tokio::task::spawn_blocking(move || cmd.output().expect("run kubectl"));
    timeout(Duration::from_secs(60), run)
        .await
        .expect("kubectl timed out")
        .unwrap()
}

async fn kubectl_whoami(kubeconfig: &Path) -> Value {
    let out = kubectl(kubeconfig, &["get", "--raw", "/whoami"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A TLS client trusting the server's serving CA, offering `alpn`, optionally with a
/// client certificate.
async fn connect(
    server: &TestServer,
    client_cert: Option<CertKey>,
    alpn: &[&[u8]],
) -> std::io::Result<TlsStream<TcpStream>> {
    let roots = root_store(&server.certs.serving_ca()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client_cert {
        Some(c) => builder.with_client_auth_cert(c.cert_chain, c.key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(server.addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    timeout(WAIT, connector.connect(name, tcp)).await?
}

/// Sends an HTTP/1.1 GET and returns everything read until the server closes (and the read
/// error, if the connection ended with one).
async fn http1_get<S>(mut stream: S, path: &str) -> (String, Option<std::io::Error>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if let Err(e) = stream.write_all(request.as_bytes()).await {
        return (String::new(), Some(e));
    }
    read_all(&mut stream).await
}

async fn read_all<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
) -> (String, Option<std::io::Error>) {
    let mut buf = Vec::new();
    let result = timeout(WAIT, stream.read_to_end(&mut buf))
        .await
        .expect("read timed out");
    (String::from_utf8_lossy(&buf).into_owned(), result.err())
}

/// The JSON body of an HTTP/1.1 response.
fn body_json(response: &str) -> Value {
    let body = response.split("\r\n\r\n").nth(1).expect("no body");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}"))
}

fn admin_cert(certs: &SelfSignedCerts) -> CertKey {
    CertKey::from_pem(
        certs.admin_cert_pem.as_bytes(),
        certs.admin_key_pem.as_bytes(),
    )
    .unwrap()
}

fn groups(user: &Value) -> Vec<&str> {
    user["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Serving and authentication
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_written_kubeconfig_is_admin_in_system_masters() {
    let server = TestServer::start().await;
    let reply = kubectl_whoami(&server.dir.path().join("kubeconfig")).await;
    assert_eq!(reply["user"]["username"], "admin", "{reply}");
    assert_eq!(
        groups(&reply["user"]),
        ["system:masters", "system:authenticated"]
    );
    // kubectl (Go) negotiates HTTP/2 through ALPN.
    assert_eq!(reply["proto"], "HTTP/2.0");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_certificate_gets_through_tls_unauthenticated() {
    let server = TestServer::start().await;
    let kubeconfig = server.dir.path().join("anonymous-kubeconfig");
    std::fs::write(&kubeconfig, anonymous_kubeconfig(&server)).unwrap();
    let stream = connect(&server, None, &[b"http/1.1"]).await.unwrap();
    let (response, _) = http1_get(stream, "/whoami").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(body_json(&response)["user"], Value::Null);

    let reply = kubectl_whoami(&kubeconfig).await;
    assert_eq!(reply["user"], Value::Null, "{reply}");
    server.stop().await;
}

/// The written kubeconfig without the client certificate. The user gets a bearer token,
/// which this x509-only server ignores, because kubectl prompts for a password when a user
/// has no credentials at all.
fn anonymous_kubeconfig(server: &TestServer) -> String {
    let written = std::fs::read_to_string(server.dir.path().join("kubeconfig")).unwrap();
    let mut config: serde_norway::Value = serde_norway::from_str(&written).unwrap();
    config["users"] = serde_norway::from_str("[{name: admin, user: {token: ignored}}]").unwrap();
    serde_norway::to_string(&config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_client_certificate_authenticates_over_http1() {
    let server = TestServer::start().await;
    let stream = connect(&server, Some(admin_cert(&server.certs)), &[b"http/1.1"])
        .await
        .unwrap();
    let (response, _) = http1_get(stream, "/whoami").await;
    let reply = body_json(&response);
    assert_eq!(reply["user"]["username"], "admin");
    assert_eq!(reply["proto"], "HTTP/1.1");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_prefers_h2_and_falls_back_to_http11() {
    let server = TestServer::start().await;
    let h2 = connect(&server, None, &[b"h2", b"http/1.1"]).await.unwrap();
    assert_eq!(h2.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let h1 = connect(&server, None, &[b"http/1.1"]).await.unwrap();
    assert_eq!(h1.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    server.stop().await;
}

/// An HTTP/2 connection's large bodies are sealed into TLS records as they come and its small
/// frames batched (`write_batch.rs`): interleaved on one connection, every body arrives
/// whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_and_small_http2_responses_share_a_connection_intact() {
    let server = TestServer::start().await;
    let tls = connect(&server, None, &[b"h2"]).await.unwrap();
    let (sender, connection) = h2::client::Builder::new()
        .initial_window_size(8 << 20)
        .initial_connection_window_size(32 << 20)
        .handshake::<_, bytes::Bytes>(tls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let mut responses = Vec::new();
    for i in 0..6 {
        let path = if i % 2 == 0 { "/big" } else { "/version" };
        let request = http::Request::get(format!("https://127.0.0.1{path}"))
            .body(())
            .unwrap();
        let (response, _) = sender
            .clone()
            .ready()
            .await
            .unwrap()
            .send_request(request, true)
            .unwrap();
        responses.push((path, response));
    }
    let big = big_body();
    for (path, response) in responses {
        let mut body = timeout(WAIT, response).await.unwrap().unwrap().into_body();
        let mut got = Vec::new();
        while let Some(chunk) = timeout(WAIT, body.data()).await.unwrap() {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            got.extend_from_slice(&chunk);
        }
        if path == "/big" {
            assert!(
                got == big,
                "a large body of {} bytes, not {}",
                got.len(),
                big.len()
            );
        } else {
            let version: Value = serde_json::from_slice(&got).unwrap();
            assert_eq!(version["major"], "1");
        }
    }
    drop(sender);
    connection.abort();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_and_garbage_do_not_break_the_server() {
    let server = TestServer::start().await;
    let plain = TcpStream::connect(server.addr).await.unwrap();
    let (response, _) = http1_get(plain, "/whoami").await;
    assert!(
        response.starts_with("HTTP/1.0 400 Bad Request"),
        "{response}"
    );
    assert!(response.contains("HTTP request to an HTTPS server"));

    // A bogus TLS record, bytes that are neither TLS nor HTTP, and an immediate hang-up.
    for garbage in [
        &b"\x16\x03\x01\x00\x05hello"[..],
        b"\x00\xff\x13\x37 nonsense\r\n\r\n",
        b"",
    ] {
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(garbage).await.unwrap();
        tcp.shutdown().await.unwrap();
        let (reply, _) = read_all(&mut tcp).await;
        assert!(!reply.contains("200"), "{reply}");
    }

    let reply = kubectl_whoami(&server.dir.path().join("kubeconfig")).await;
    assert_eq!(reply["user"]["username"], "admin");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_of_another_ca_passes_tls_and_fails_authentication() {
    let server = TestServer::start().await;
    let other_dir = tempfile::tempdir().unwrap();
    let other = SelfSignedCerts::load_or_create(other_dir.path(), &[]).unwrap();
    // The TLS layer only requests a certificate (Go's tls.RequestClientCert): a foreign
    // chain gets through the handshake and reaches the authenticator, which refuses it.
    let stream = connect(&server, Some(admin_cert(&other)), &[b"http/1.1"])
        .await
        .expect("the handshake accepts any certificate");
    let (response, _) = http1_get(stream, "/whoami").await;
    let reply = body_json(&response);
    assert_eq!(reply["user"], Value::Null, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("UnknownIssuer"),
        "{reply}"
    );

    // The authenticator, on its own, refuses the foreign chain as well.
    let auth = X509Authenticator::new(&server.certs.client_ca()).unwrap();
    assert!(
        auth.authenticate_chain(&admin_cert(&other).cert_chain)
            .is_err()
    );
    let own = auth
        .authenticate_chain(&admin_cert(&server.certs).cert_chain)
        .unwrap();
    assert_eq!(own.unwrap().name, "admin");
    server.stop().await;
}

/// `curl` of `/whoami` over TLS `version` ("1.2" or "1.3") with `cert`; the JSON reply.
/// curl failing (a handshake that ends the connection) fails the test.
async fn curl_whoami(server: &TestServer, version: &str, cert: &TestCert) -> Value {
    let (cert_file, key_file) = cert.write(&server.dir.path().join("curl"), "client");
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "--max-time", "20"])
        .args([&format!("--tlsv{version}"), "--tls-max", version])
        .arg("--cacert")
        .arg(server.dir.path().join("serving-ca.crt"))
        .arg("--cert")
        .arg(&cert_file)
        .arg("--key")
        .arg(&key_file)
        .arg(format!("https://{}/whoami", server.addr));
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run curl"))
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "curl over TLS {version}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The cert dir's client CA, to sign with `openssl x509 -req` as a user would.
fn dir_client_ca(server: &TestServer) -> OpensslCa {
    OpensslCa {
        cert_pem: server.certs.client_ca_pem.clone(),
        key_pem: read(server.dir.path(), "client-ca.key"),
        chain_pem: String::new(),
    }
}

/// An X.509 v1 client certificate (what `openssl x509 -req -CA` makes) used to end the
/// handshake (webpki parses only v3). Whatever the version, key type, CA or dates, the
/// handshake passes and the authenticator judges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_client_certificates_pass_the_handshake_and_are_judged_per_request() {
    let server = TestServer::start().await;
    let ca = dir_client_ca(&server);
    let stranger = OpensslCa::v1_root("unknown");
    let admin = TestCert {
        cert_pem: server.certs.admin_cert_pem.clone(),
        key_pem: server.certs.admin_key_pem.clone(),
    };
    for version in ["1.2", "1.3"] {
        // The v3 admin certificate, as before.
        let reply = curl_whoami(&server, version, &admin).await;
        assert_eq!(reply["user"]["username"], "admin", "{version}: {reply}");
        for key in [KeyType::Rsa, KeyType::Ecdsa, KeyType::Ed25519] {
            let jane = ca.v1_client("jane", &["devs"], key);
            let reply = curl_whoami(&server, version, &jane).await;
            assert_eq!(
                reply["user"]["username"], "jane",
                "{version} {key:?}: {reply}"
            );
            assert_eq!(groups(&reply["user"]), ["devs", "system:authenticated"]);

            let foreign = stranger.v1_client("jane", &[], key);
            let reply = curl_whoami(&server, version, &foreign).await;
            assert_eq!(reply["user"], Value::Null, "{reply}");
            assert!(
                reply["error"]
                    .as_str()
                    .unwrap()
                    .contains("unknown authority")
            );
        }
        let expired = ca.expired_v1_client("jane", &[], KeyType::Ecdsa);
        let reply = curl_whoami(&server, version, &expired).await;
        assert_eq!(reply["user"], Value::Null, "{reply}");
        assert!(
            reply["error"].as_str().unwrap().contains("expired"),
            "{reply}"
        );
    }
    server.stop().await;
}

/// rustls refuses a server_name extension that is no DNS name, such as the host with its
/// port that some Go tools send, with an `illegal_parameter` alert; Go servers ignore such a
/// name. rustls 0.23 has no setting to relax it (`server/hs.rs`), and the ClientHello cannot
/// be rewritten before rustls sees it (both sides hash it into the handshake transcript).
/// This pins the behaviour the book's serving chapter describes: that connection fails, and
/// the server goes on serving everyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_name_with_a_port_is_refused_and_the_server_keeps_serving() {
    let server = TestServer::start().await;
    let host_port = server.addr.to_string();
    let (ok, out) = s_client(&server, &host_port).await;
    assert!(!ok, "{out}");
    assert!(out.contains("alert illegal parameter"), "{out}");
    for name in ["localhost", "any_name.example"] {
        let (ok, out) = s_client(&server, name).await;
        assert!(ok, "{name}: {out}");
    }
    let reply = kubectl_whoami(&server.dir.path().join("kubeconfig")).await;
    assert_eq!(reply["user"]["username"], "admin");
    server.stop().await;
}

/// `openssl s_client` sending `server_name` as SNI (it sends any string); whether the
/// handshake succeeded, and what it printed.
async fn s_client(server: &TestServer, server_name: &str) -> (bool, String) {
    let mut cmd = std::process::Command::new("openssl");
    cmd.args(["s_client", "-connect", &server.addr.to_string()])
        .args(["-servername", server_name, "-CAfile"])
        .arg(server.dir.path().join("serving-ca.crt"))
        .stdin(std::process::Stdio::null());
    let run = tokio::task::spawn_blocking(move || cmd.output().expect("run openssl"));
    let out = timeout(WAIT, run)
        .await
        .expect("s_client timed out")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

// ---------------------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_long_running_requests_finish_and_stops_accepting() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let certs = SelfSignedCerts::load_or_create(dir.path(), &[]).unwrap();
    let tls = server_config(&certs.serving, Some(&certs.client_ca())).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        let _ = rx.await;
    };
    let task = tokio::spawn(serve_tls(listener, tls, router(&certs), shutdown));
    let server = TestServer {
        addr,
        certs,
        dir,
        stop: ShutdownSignal::new(),
        task,
    };

    let stream = connect(&server, None, &[b"http/1.1"]).await.unwrap();
    let in_flight = tokio::spawn(http1_get(stream, "/wait"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.send(()).unwrap();

    let (response, _) = timeout(WAIT, in_flight).await.unwrap().unwrap();
    assert!(
        response.starts_with("HTTP/1.1 200") && response.ends_with("drained"),
        "{response}"
    );
    timeout(WAIT, server.task).await.unwrap().unwrap().unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_period_bounds_requests_that_ignore_shutdown() {
    let options = ServeOptions {
        grace_period: Duration::from_millis(300),
        ..Default::default()
    };
    let server = TestServer::start_with(options).await;
    let stream = connect(&server, None, &[b"http/1.1"]).await.unwrap();
    let in_flight = tokio::spawn(http1_get(stream, "/hang"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.stop.trigger();
    let stopped = timeout(Duration::from_secs(10), server.task).await;
    stopped
        .expect("grace period not enforced")
        .unwrap()
        .unwrap();
    // The hanging request's connection was closed without a response.
    let (response, _) = timeout(WAIT, in_flight).await.unwrap().unwrap();
    assert!(response.is_empty(), "{response}");
}

// ---------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}

#[test]
fn certificates_are_reused_and_private_files_are_0600() {
    let dir = tempfile::tempdir().unwrap();
    let first = SelfSignedCerts::load_or_create(dir.path(), &[]).unwrap();
    first.write_kubeconfig(6443).unwrap();
    let serving = read(dir.path(), "apiserver.crt");
    let second = SelfSignedCerts::load_or_create(dir.path(), &[]).unwrap();
    assert_eq!(read(dir.path(), "apiserver.crt"), serving);
    assert_eq!(second.serving_ca_pem, first.serving_ca_pem);
    assert_eq!(second.client_ca_pem, first.client_ca_pem);
    assert_eq!(second.admin_cert_pem, first.admin_cert_pem);
    // apiserver.crt carries the chain: leaf, then the serving CA.
    assert_eq!(second.serving.cert_chain.len(), 2);
    assert!(read(dir.path(), "kubeconfig").contains("server: https://127.0.0.1:6443"));
    for file in [
        "apiserver.key",
        "serving-ca.key",
        "client-ca.key",
        "admin.key",
        "kubeconfig",
    ] {
        assert_eq!(mode(&dir.path().join(file)), 0o600, "{file}");
    }
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(not(unix))]
fn mode(_: &Path) -> u32 {
    0o600
}

#[test]
fn serving_certificate_is_regenerated_when_hosts_change() {
    let dir = tempfile::tempdir().unwrap();
    let first = SelfSignedCerts::load_or_create(dir.path(), &[]).unwrap();
    let hosts = ["api.example.com".to_string(), "10.0.0.7".to_string()];
    let second = SelfSignedCerts::load_or_create(dir.path(), &hosts).unwrap();
    assert_ne!(second.serving.cert_chain[0], first.serving.cert_chain[0]);
    // The CAs stay, so bundles handed out earlier keep working.
    assert_eq!(second.serving_ca_pem, first.serving_ca_pem);
    assert_eq!(second.admin_cert_pem, first.admin_cert_pem);
    for host in [
        "localhost",
        "127.0.0.1",
        "::1",
        "api.example.com",
        "10.0.0.7",
    ] {
        assert!(serves(&second, host), "{host} not covered");
    }
    let third = SelfSignedCerts::load_or_create(dir.path(), &hosts).unwrap();
    assert_eq!(third.serving.cert_chain, second.serving.cert_chain);
}

/// Whether a client trusting the serving CA accepts the serving certificate for `host`.
fn serves(certs: &SelfSignedCerts, host: &str) -> bool {
    use rustls::client::danger::ServerCertVerifier as _;
    let roots = Arc::new(root_store(&certs.serving_ca()).unwrap());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, crypto_provider())
            .build()
            .unwrap();
    let chain = &certs.serving.cert_chain;
    let name = ServerName::try_from(host).unwrap();
    let now = rustls::pki_types::UnixTime::now();
    verifier
        .verify_server_cert(&chain[0], &chain[1..], &name, &[], now)
        .is_ok()
}

#[test]
fn expired_or_foreign_certificates_are_regenerated() {
    let dir = tempfile::tempdir().unwrap();
    let first = SelfSignedCerts::load_or_create(dir.path(), &[]).unwrap();

    // A serving certificate not signed by the serving CA is replaced; the CA stays.
    let stranger = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.path().join("apiserver.crt"), stranger.cert.pem()).unwrap();
    std::fs::write(
        dir.path().join("apiserver.key"),
        stranger.signing_key.serialize_pem(),
    )
    .unwrap();
    let second = SelfSignedCerts::load_or_create(dir.path(), &[]).unwrap();
    assert_eq!(second.serving_ca_pem, first.serving_ca_pem);
    assert!(serves(&second, "localhost"));

    // An expired client CA is replaced, and the admin certificate with it.
    write_expired_ca(dir.path(), "client-ca");
    let third = SelfSignedCerts::load_or_create(dir.path(), &[]).unwrap();
    assert_ne!(third.client_ca_pem, read(dir.path(), "serving-ca.crt"));
    assert_ne!(third.client_ca_pem, second.client_ca_pem);
    assert_ne!(third.admin_cert_pem, second.admin_cert_pem);
    let auth = X509Authenticator::new(&third.client_ca()).unwrap();
    let user = auth
        .authenticate_chain(&admin_cert(&third).cert_chain)
        .unwrap()
        .unwrap();
    assert_eq!(user.groups, ["system:masters", "system:authenticated"]);
}

fn write_expired_ca(dir: &Path, stem: &str) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "expired-ca");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join(format!("{stem}.crt")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{stem}.key")), key.serialize_pem()).unwrap();
}

#[test]
fn explicit_certificate_files_load_a_chain() {
    let dir = tempfile::tempdir().unwrap();
    let certs = SelfSignedCerts::load_or_create(dir.path(), &[]).unwrap();
    let (cert_file, key_file) = (
        dir.path().join("apiserver.crt"),
        dir.path().join("apiserver.key"),
    );
    let loaded = CertKey::from_files(&cert_file, &key_file).unwrap();
    assert_eq!(loaded.cert_chain, certs.serving.cert_chain);
    assert!(server_config(&loaded, None).is_ok());

    // A key that does not match the certificate, and a file with no certificate, are errors.
    let mismatched = CertKey::from_files(&cert_file, &dir.path().join("admin.key")).unwrap();
    assert!(server_config(&mismatched, None).is_err());
    assert!(CertKey::from_files(&key_file, &key_file).is_err());
    assert!(CertKey::from_files(&dir.path().join("missing.crt"), &key_file).is_err());
}
