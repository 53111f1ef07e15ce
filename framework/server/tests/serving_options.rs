//! The secure-serving options of a whole `APIServer`, over real TLS on 127.0.0.1 with
//! certificates made here (`testing::pki`): serving certificate reload, `--tls-min-version`,
//! `--tls-cipher-suites`, client certificates requested at the TLS layer and judged by the
//! x509 authenticator, and HTTP/2 with 1,000 concurrent watches on one connection.
//! Every wait is bounded; nothing asserts on time.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::lifecycle::ShutdownSignal;
use extension_apiserver::server::serving_cert::ServingCertificate;
use extension_apiserver::server::tls::TlsVersion;
use extension_apiserver::server::{
    APIGroup, APIServer, RunningServer, ServerOptions, StorageBackendKind,
};
use extension_apiserver::tls::certs::CertKey;
use extension_apiserver::tls::{crypto_provider, root_store};
use extension_apiserver_testing::pki::{TestCa, TestCert};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CipherSuite, SupportedProtocolVersion};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::client::TlsStream;

const WAIT: Duration = Duration::from_secs(60);

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "serving.example.com",
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

const THINGS: &str = "/apis/serving.example.com/v1/namespaces/default/things";

// ---------------------------------------------------------------------------------------
// Certificates made by the test
// ---------------------------------------------------------------------------------------

/// A client certificate as rustls wants it.
fn cert_key(cert: TestCert) -> CertKey {
    CertKey::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).unwrap()
}

/// A serving certificate of `ca` for localhost and 127.0.0.1: (chain PEM with the CA, key PEM).
fn serving(ca: &TestCa) -> (String, String) {
    let cert = ca.serving(&["localhost", "127.0.0.1"]);
    (cert.cert_pem, cert.key_pem)
}

/// The CA certificate of `ca` in DER, for a client's roots.
fn der(ca: &TestCa) -> CertificateDer<'static> {
    extension_apiserver::tls::certs::parse_certs_pem(ca.cert_pem.as_bytes()).unwrap()[0].clone()
}

/// Writes through a temporary file and a rename, as certificate rotators do.
fn write_atomically(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

// ---------------------------------------------------------------------------------------
// Server and clients
// ---------------------------------------------------------------------------------------

struct Server {
    running: RunningServer,
    _dir: tempfile::TempDir,
    /// The CA the serving certificate chains to.
    serving_ca: Vec<CertificateDer<'static>>,
}

impl Server {
    fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    async fn stop(self) {
        timeout(WAIT, self.running.shutdown())
            .await
            .expect("server did not stop")
            .unwrap();
    }
}

fn options(dir: &Path) -> ServerOptions {
    ServerOptions {
        secure_port: 0,
        bind_address: [127, 0, 0, 1].into(),
        cert_dir: dir.join("certs"),
        storage_backend: StorageBackendKind::Memory,
        ..ServerOptions::default()
    }
}

/// Starts a server with a client CA of the test's (`client_ca`, written into the cert dir
/// before start, which the server then adopts) and options changed by `edit`.
async fn start(client_ca: &TestCa, edit: impl FnOnce(&mut ServerOptions, &Path)) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::write(certs.join("client-ca.crt"), &client_ca.cert_pem).unwrap();
    std::fs::write(certs.join("client-ca.key"), &client_ca.key_pem).unwrap();
    let mut options = options(dir.path());
    edit(&mut options, dir.path());
    let group = APIGroup::new("serving.example.com").version("v1", |v| v.resource::<Thing>());
    let running = APIServer::new(options.clone())
        .group(group)
        .start()
        .await
        .expect("server starts");
    let client_ca_pem = std::fs::read_to_string(certs.join("client-ca.crt")).unwrap();
    assert_eq!(
        client_ca_pem, client_ca.cert_pem,
        "the test's client CA kept"
    );
    let serving_ca = match options.tls_cert_file {
        Some(_) => Vec::new(),
        None => {
            let pem = std::fs::read(certs.join("serving-ca.crt")).unwrap();
            extension_apiserver::tls::certs::parse_certs_pem(&pem).unwrap()
        }
    };
    Server {
        running,
        _dir: dir,
        serving_ca,
    }
}

/// What a test client offers.
struct Client<'a> {
    roots: &'a [CertificateDer<'static>],
    cert: Option<&'a CertKey>,
    alpn: &'a [&'a [u8]],
    versions: &'a [&'static SupportedProtocolVersion],
    /// TLS 1.2 suites offered (TLS 1.3 ones always are); `None`: all.
    suites: Option<&'a [CipherSuite]>,
}

impl<'a> Client<'a> {
    fn new(roots: &'a [CertificateDer<'static>]) -> Self {
        Self {
            roots,
            cert: None,
            alpn: &[b"http/1.1"],
            versions: rustls::DEFAULT_VERSIONS,
            suites: None,
        }
    }

    fn cert(mut self, cert: &'a CertKey) -> Self {
        self.cert = Some(cert);
        self
    }

    async fn connect(&self, addr: SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
        let mut provider = (*crypto_provider()).clone();
        if let Some(suites) = self.suites {
            provider
                .cipher_suites
                .retain(|s| s.tls13().is_some() || suites.contains(&s.suite()));
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(self.versions)
            .unwrap()
            .with_root_certificates(root_store(self.roots).unwrap());
        let mut config = match self.cert {
            Some(c) => builder
                .with_client_auth_cert(c.cert_chain.clone(), c.key.clone_key())
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = self.alpn.iter().map(|p| p.to_vec()).collect();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from("127.0.0.1").unwrap();
        timeout(WAIT, connector.connect(name, tcp))
            .await
            .expect("handshake timed out")
    }
}

/// One HTTP/1.1 request on its own connection: (status, body).
async fn http1(
    stream: TlsStream<TcpStream>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let mut stream = stream;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    // A peer closing without close_notify is fine once the response is in.
    let _ = timeout(WAIT, stream.read_to_end(&mut buf))
        .await
        .expect("response timed out");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

async fn get_status(client: &Client<'_>, addr: SocketAddr, path: &str) -> u16 {
    let stream = client.connect(addr).await.expect("handshake succeeds");
    http1(stream, "GET", path, None).await.0
}

/// The leaf certificate the server presented.
fn served_leaf(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream.get_ref().1.peer_certificates().unwrap()[0].clone()
}

fn leaf_of(chain_pem: &str) -> CertificateDer<'static> {
    extension_apiserver::tls::certs::parse_certs_pem(chain_pem.as_bytes()).unwrap()[0].clone()
}

// ---------------------------------------------------------------------------------------
// Client certificates: requested by TLS, judged by the authenticator
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_judged_by_the_authenticator_not_the_handshake() {
    let client_ca = TestCa::new("test-client-ca");
    let server = start(&client_ca, |_, _| {}).await;
    let addr = server.addr();
    let roots = &server.serving_ca;

    let good = cert_key(client_ca.client("alice", &["devs"]));
    assert_eq!(
        get_status(&Client::new(roots).cert(&good), addr, "/apis").await,
        200
    );

    // Signed by the client CA but expired: the handshake succeeds, the request is a 401.
    let expired = cert_key(client_ca.expired_client("alice", &["devs"]));
    assert_eq!(
        get_status(&Client::new(roots).cert(&expired), addr, "/apis").await,
        401
    );

    // Signed by another CA: the same.
    let stranger = cert_key(TestCa::new("someone-else").client("alice", &["devs"]));
    let stream = Client::new(roots).cert(&stranger).connect(addr).await;
    let (status, body) = http1(stream.expect("handshake succeeds"), "GET", "/apis", None).await;
    assert_eq!(status, 401, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Unauthorized");

    // No certificate at all: the connection works, the request is unauthenticated.
    assert_eq!(get_status(&Client::new(roots), addr, "/apis").await, 401);
    assert_eq!(get_status(&Client::new(roots), addr, "/healthz").await, 200);

    // The same over TLS 1.2.
    let tls12 = Client {
        versions: &[&rustls::version::TLS12],
        ..Client::new(roots).cert(&expired)
    };
    assert_eq!(get_status(&tls12, addr, "/apis").await, 401);
    let tls12 = Client {
        versions: &[&rustls::version::TLS12],
        ..Client::new(roots).cert(&good)
    };
    assert_eq!(get_status(&tls12, addr, "/apis").await, 200);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// Serving certificate reload
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_certificate_files_are_reloaded_and_bad_pairs_ignored() {
    let client_ca = TestCa::new("test-client-ca");
    let serving_ca = TestCa::new("test-serving-ca");
    let (first_cert, first_key) = serving(&serving_ca);
    let first_leaf = leaf_of(&first_cert);
    let files: Arc<std::sync::Mutex<Option<(PathBuf, PathBuf)>>> = Default::default();
    let files_in = files.clone();
    let server = start(&client_ca, move |options, dir| {
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &first_cert).unwrap();
        std::fs::write(&key, &first_key).unwrap();
        options.tls_cert_file = Some(cert.clone());
        options.tls_private_key_file = Some(key.clone());
        *files_in.lock().unwrap() = Some((cert, key));
    })
    .await;
    let (cert_file, key_file) = files.lock().unwrap().clone().unwrap();
    let roots = [der(&serving_ca)];
    let addr = server.addr();
    let handle = server.running.serving_certificate().clone();
    assert_eq!(
        handle.files(),
        Some((cert_file.as_path(), key_file.as_path()))
    );

    let stream = Client::new(&roots).connect(addr).await.unwrap();
    assert_eq!(served_leaf(&stream), first_leaf);
    assert_eq!(handle.chain()[0], first_leaf);
    // A connection made before the rotation keeps working on its certificate.
    let mut old_connection = Some(stream);

    // Rotate: the key first, then the certificate, as a rotator may. In between the pair
    // does not match, which the reloader refuses; then the new pair is served.
    let mut changes = handle.subscribe();
    let (second_cert, second_key) = serving(&serving_ca);
    write_atomically(&key_file, &second_key);
    write_atomically(&cert_file, &second_cert);
    let second_leaf = leaf_of(&second_cert);
    timeout(WAIT, async {
        while handle.current().cert[0] != second_leaf {
            changes.changed().await.unwrap();
        }
    })
    .await
    .expect("the new certificate was not picked up");
    let stream = Client::new(&roots).connect(addr).await.unwrap();
    assert_eq!(served_leaf(&stream), second_leaf);
    let (status, _) = http1(stream, "GET", "/healthz", None).await;
    assert_eq!(status, 200);
    let (status, _) = http1(old_connection.take().unwrap(), "GET", "/healthz", None).await;
    assert_eq!(status, 200);

    // A key that does not match the certificate is refused, whoever looks first (the
    // reloader or this call); the second pair stays in service.
    let (_, stray_key) = serving(&serving_ca);
    write_atomically(&key_file, &stray_key);
    assert!(!matches!(handle.reload(), Ok(true)));
    assert_eq!(handle.current().cert[0], second_leaf);
    // Garbage in the certificate file: the same.
    write_atomically(&cert_file, "not a certificate");
    assert!(!matches!(handle.reload(), Ok(true)));
    let stream = Client::new(&roots).connect(addr).await.unwrap();
    assert_eq!(served_leaf(&stream), second_leaf);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_reports_changes_once_and_the_reloader_stops_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test-serving-ca");
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let (cert, key) = serving(&ca);
    std::fs::write(&cert_file, &cert).unwrap();
    std::fs::write(&key_file, &key).unwrap();
    let provider = crypto_provider();
    let handle = ServingCertificate::from_files(&cert_file, &key_file, &provider).unwrap();
    assert!(!handle.reload().unwrap(), "unchanged files are no change");

    let (_, stray_key) = serving(&ca);
    write_atomically(&key_file, &stray_key);
    assert!(handle.reload().is_err(), "a mismatched pair is an error");
    assert!(!handle.reload().unwrap(), "and reported once");
    assert_eq!(handle.current().cert[0], leaf_of(&cert));

    let (cert, key) = serving(&ca);
    write_atomically(&key_file, &key);
    write_atomically(&cert_file, &cert);
    assert!(handle.reload().unwrap());
    assert_eq!(handle.chain()[0], leaf_of(&cert));

    // Files that cannot be loaded at start are an error there.
    std::fs::write(&key_file, "nonsense").unwrap();
    assert!(ServingCertificate::from_files(&cert_file, &key_file, &provider).is_err());

    let shutdown = ShutdownSignal::new();
    let reloader = handle.spawn_reloader(Duration::from_millis(10), shutdown.clone());
    shutdown.trigger();
    timeout(WAIT, reloader)
        .await
        .expect("reloader did not stop")
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// --tls-min-version and --tls-cipher-suites
// ---------------------------------------------------------------------------------------

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    options: ServerOptions,
}

#[test]
fn tls_flags_parse_as_k8s_names_them_and_refuse_bad_values() {
    let defaults = Cli::try_parse_from(["server"]).unwrap().options;
    assert_eq!(defaults.tls_min_version, TlsVersion::Tls12);
    assert!(defaults.tls_cipher_suites.is_empty());
    assert_eq!(defaults.http2_max_streams_per_connection, 1000);

    let cli = Cli::try_parse_from([
        "server",
        "--tls-min-version=VersionTLS13",
        "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384",
        "--http2-max-streams-per-connection=2000",
    ])
    .unwrap();
    assert_eq!(cli.options.tls_min_version, TlsVersion::Tls13);
    assert_eq!(
        cli.options.tls_cipher_suites,
        [
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_AES_256_GCM_SHA384"
        ]
    );
    assert_eq!(cli.options.http2_max_streams_per_connection, 2000);

    for (flag, says) in [
        ("--tls-min-version=VersionTLS10", "not supported"),
        ("--tls-min-version=1.2", "unknown TLS version"),
        ("--tls-cipher-suites=TLS_RSA_WITH_RC4_128_SHA", "insecure"),
        (
            "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_NOPE",
            "unknown cipher suite",
        ),
        (
            "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
            "CBC",
        ),
    ] {
        let error = Cli::try_parse_from(["server", flag]).err().unwrap();
        assert!(error.to_string().contains(says), "{flag}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_cipher_suites_set_in_code_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        tls_cipher_suites: vec!["TLS_RSA_WITH_3DES_EDE_CBC_SHA".into()],
        ..options(dir.path())
    };
    let error = APIServer::new(options).start().await.err().unwrap();
    assert!(error.to_string().contains("insecure"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_min_version_13_refuses_tls_12_clients() {
    let client_ca = TestCa::new("test-client-ca");
    let server = start(&client_ca, |o, _| o.tls_min_version = TlsVersion::Tls13).await;
    let roots = &server.serving_ca;
    let tls12 = Client {
        versions: &[&rustls::version::TLS12],
        ..Client::new(roots)
    };
    assert!(tls12.connect(server.addr()).await.is_err());
    let stream = Client::new(roots).connect(server.addr()).await.unwrap();
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(http1(stream, "GET", "/healthz", None).await.0, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_cipher_suites_are_limited_to_the_flag_and_tls13_stays_on() {
    let client_ca = TestCa::new("test-client-ca");
    // The self-signed serving key is ECDSA P-256.
    let server = start(&client_ca, |o, _| {
        o.tls_cipher_suites = vec!["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".into()];
    })
    .await;
    let roots = &server.serving_ca;
    let other_suite = Client {
        versions: &[&rustls::version::TLS12],
        suites: Some(&[CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]),
        ..Client::new(roots)
    };
    assert!(other_suite.connect(server.addr()).await.is_err());

    let both = Client {
        versions: &[&rustls::version::TLS12],
        suites: Some(&[
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        ]),
        ..Client::new(roots)
    };
    let stream = both.connect(server.addr()).await.unwrap();
    let suite = stream.get_ref().1.negotiated_cipher_suite().unwrap();
    assert_eq!(
        suite.suite(),
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
    );

    let tls13 = Client::new(roots).connect(server.addr()).await.unwrap();
    assert_eq!(
        tls13.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// HTTP/2: 1,000 concurrent watches on one connection
// ---------------------------------------------------------------------------------------

const WATCHES: usize = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_http2_connection_carries_a_thousand_watches() {
    let client_ca = TestCa::new("test-client-ca");
    let server = start(&client_ca, |_, _| {}).await;
    let addr = server.addr();
    let user = cert_key(client_ca.client("alice", &["devs"]));
    let roots = &server.serving_ca;

    let list = Client::new(roots).cert(&user).connect(addr).await.unwrap();
    let (status, body) = http1(list, "GET", THINGS, None).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let h2_client = Client {
        alpn: &[b"h2"],
        ..Client::new(roots).cert(&user)
    };
    let tls = h2_client.connect(addr).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, connection) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(64 << 20)
        .handshake::<_, Bytes>(tls)
        .await
        .unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });

    // Open every watch before anything happens; each starts at the list's revision, so
    // the object created below is an ADDED event for all of them.
    let uri = format!(
        "https://127.0.0.1:{}{THINGS}?watch=1&resourceVersion={rv}",
        addr.port()
    );
    // Every watch holds its stream open until all have seen the event, so the streams are
    // truly concurrent: none frees its slot for another.
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::channel::<()>(WATCHES);
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let mut watches = tokio::task::JoinSet::new();
    let opening = async {
        let mut sender = sender;
        for _ in 0..WATCHES {
            // Waits while the server's stream limit is reached, which it must not be.
            sender = sender.ready().await.unwrap();
            let request = http::Request::get(&uri).body(()).unwrap();
            let (response, _) = sender.send_request(request, true).unwrap();
            let (seen, release) = (seen_tx.clone(), release_rx.clone());
            watches.spawn(first_added_event(response, seen, release));
        }
        sender
    };
    let sender = timeout(WAIT, opening)
        .await
        .unwrap_or_else(|_| panic!("could not open {WATCHES} concurrent streams"));

    let create = Client::new(roots).cert(&user).connect(addr).await.unwrap();
    let thing = serde_json::json!({
        "apiVersion": "serving.example.com/v1", "kind": "Thing",
        "metadata": {"name": "one", "namespace": "default"}, "spec": {"color": "red"},
    });
    let (status, body) = http1(create, "POST", THINGS, Some(&thing)).await;
    assert_eq!(status, 201, "{body}");

    let mut got = 0;
    let all = timeout(Duration::from_secs(120), async {
        while got < WATCHES {
            tokio::select! {
                Some(()) = seen_rx.recv() => got += 1,
                // A watch that failed panicked: report it.
                Some(outcome) = watches.join_next() => outcome.unwrap(),
            }
        }
    })
    .await;
    assert!(all.is_ok(), "only {got} of {WATCHES} watches saw the event");
    release_tx.send_replace(true);
    while let Some(outcome) = timeout(WAIT, watches.join_next()).await.unwrap() {
        outcome.unwrap();
    }
    drop(sender);
    driver.abort();
    server.stop().await;
}

/// Waits for a watch's response and reads it until an ADDED event of `one` arrives, says so
/// on `saw_it`, and keeps the stream open until `release`.
async fn first_added_event(
    response: h2::client::ResponseFuture,
    saw_it: tokio::sync::mpsc::Sender<()>,
    mut release: tokio::sync::watch::Receiver<bool>,
) {
    let response = response.await.expect("watch response");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut seen = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("watch body");
        let _ = body.flow_control().release_capacity(chunk.len());
        seen.extend_from_slice(&chunk);
        let text = String::from_utf8_lossy(&seen);
        if text.contains("\"ADDED\"") && text.contains("\"one\"") {
            saw_it.send(()).await.unwrap();
            let _ = release.wait_for(|released| *released).await;
            return;
        }
    }
    panic!(
        "watch ended without the event: {}",
        String::from_utf8_lossy(&seen)
    );
}
