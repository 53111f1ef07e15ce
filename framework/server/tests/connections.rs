//! What the secure port allows one connection, over real TLS on 127.0.0.1 with a server of the
//! test kit: idle connections are closed as Go's server closes them (kube-apiserver's
//! `IdleTimeout` and `ReadHeaderTimeout`, configured short here), a quiet watch never is, and
//! request headers up to Go's 1 MiB are accepted over HTTP/1.1 and HTTP/2, and
//! `--goaway-chance` closes HTTP/2 connections gracefully without failing a request.
//! Every wait is bounded; nothing asserts on time but generous bounds.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::APIGroup;
use extension_apiserver::tls::certs::{CertKey, SelfSignedCerts};
use extension_apiserver::tls::{crypto_provider, root_store};
use extension_apiserver_testing::TestServer;
use rustls::pki_types::ServerName;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::client::TlsStream;

/// Bound on anything that must happen; far above the timeouts configured.
const WAIT: Duration = Duration::from_secs(30);

/// The short timeout the servers here are given.
const SHORT: Duration = Duration::from_secs(1);

/// Bound on a close the short timeout asks for: well above it, and below the 30 s after
/// which hyper closed an idle HTTP/1.1 connection on its own.
const CLOSE_WAIT: Duration = Duration::from_secs(15);

/// A timeout that never fires during a test.
const LONG: Duration = Duration::from_secs(3600);

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "conn.example.com",
    version = "v1",
    kind = "Widget",
    namespaced
)]
pub struct Widget {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WidgetSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct WidgetSpec {
    #[serde(default)]
    pub size: i64,
}

const WIDGETS: &str = "/apis/conn.example.com/v1/namespaces/default/widgets";

/// A server with these idle and read-header timeouts, and a TLS client for it.
async fn start(idle: Duration, read_header: Duration) -> (TestServer, Client) {
    start_with(move |o| {
        o.http_idle_timeout = idle;
        o.http_read_header_timeout = read_header;
    })
    .await
}

/// A server with these options, and a TLS client for it.
async fn start_with(
    options: impl FnOnce(&mut extension_apiserver::server::ServerOptions) + Send + 'static,
) -> (TestServer, Client) {
    let group = APIGroup::new("conn.example.com").version("v1", |v| v.resource::<Widget>());
    let server = TestServer::builder()
        .group(group)
        .options(options)
        .start()
        .await;
    let client = Client::of(&server.kubeconfig);
    (server, client)
}

/// A TLS client trusting the server's CA, with its admin certificate.
struct Client {
    addr: std::net::SocketAddr,
    roots: rustls::RootCertStore,
    admin: CertKey,
}

impl Client {
    /// The client of the server whose admin kubeconfig is `kubeconfig` (its certificates
    /// are beside it, and are reused, not made again, by `load_or_create`).
    fn of(kubeconfig: &Path) -> Self {
        let dir = kubeconfig.parent().unwrap();
        let certs = SelfSignedCerts::load_or_create(dir, &[]).unwrap();
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let port = text
            .split("https://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|port| port.parse::<u16>().ok())
            .expect("the server's port in its kubeconfig");
        let admin = CertKey::from_pem(
            certs.admin_cert_pem.as_bytes(),
            certs.admin_key_pem.as_bytes(),
        )
        .unwrap();
        Self {
            addr: ([127, 0, 0, 1], port).into(),
            roots: root_store(&certs.serving_ca()).unwrap(),
            admin,
        }
    }

    async fn connect(&self, alpn: &[u8]) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.addr).await.unwrap();
        self.tls_over(tcp, alpn).await
    }

    /// TLS over `tcp`, offering `alpn`.
    async fn tls_over(&self, tcp: TcpStream, alpn: &[u8]) -> TlsStream<TcpStream> {
        let mut config = rustls::ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(self.roots.clone())
            .with_client_auth_cert(self.admin.cert_chain.clone(), self.admin.key.clone_key())
            .unwrap();
        config.alpn_protocols = vec![alpn.to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let tls = timeout(WAIT, connector.connect(name, tcp)).await;
        tls.expect("handshake in time").expect("handshake")
    }

    /// An HTTP/2 connection: the request sender, and the connection's task, which ends when
    /// the server closes the connection.
    async fn h2(
        &self,
    ) -> (
        h2::client::SendRequest<Bytes>,
        tokio::task::JoinHandle<Result<(), h2::Error>>,
    ) {
        let tls = self.connect(b"h2").await;
        let (sender, connection) = h2::client::handshake(tls).await.unwrap();
        (sender, tokio::spawn(connection))
    }

    fn uri(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }
}

/// Reads one HTTP/1.1 response with a `Content-Length` (the status and the whole text), the
/// connection kept open for the next.
async fn read_response<S: AsyncRead + Unpin>(stream: &mut S) -> (u16, String) {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_string)
                })
                .and_then(|n| n.trim().parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n) {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                return (status, text);
            }
        }
        let n = timeout(WAIT, stream.read(&mut chunk))
            .await
            .expect("response in time")
            .expect("read");
        assert!(n > 0, "closed before a whole response: {text:?}");
        seen.extend_from_slice(&chunk[..n]);
    }
}

/// Whether the server closes `stream` within `CLOSE_WAIT` (end of stream or reset), with
/// nothing more sent.
async fn closed_by_server<S: AsyncRead + Unpin>(stream: &mut S) -> bool {
    let mut buf = [0u8; 1024];
    matches!(
        timeout(CLOSE_WAIT, stream.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

// ---------------------------------------------------------------------------------------
// Idle connections
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_connection_idle_between_requests_is_closed() {
    let (server, client) = start(SHORT, LONG).await;
    let mut tls = client.connect(b"http/1.1").await;
    for _ in 0..2 {
        let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        tls.write_all(request.as_bytes()).await.unwrap();
        let (status, text) = read_response(&mut tls).await;
        assert_eq!(status, 200, "{text}");
    }
    assert!(
        closed_by_server(&mut tls).await,
        "an idle keep-alive connection stays open"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_no_request_or_half_a_header_is_closed() {
    let (server, client) = start(LONG, SHORT).await;
    // TLS, then nothing at all.
    let mut silent = client.connect(b"http/1.1").await;
    // A header that never ends (slow loris).
    let mut slow = client.connect(b"http/1.1").await;
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut silent).await,
        "a silent connection stays open"
    );
    assert!(
        closed_by_server(&mut slow).await,
        "a header that never ends keeps the connection"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_without_streams_is_closed() {
    let (server, client) = start(SHORT, LONG).await;
    let (sender, connection) = client.h2().await;
    let mut sender = sender.ready().await.unwrap();
    let request = http::Request::get(client.uri("/healthz")).body(()).unwrap();
    let (response, _) = sender.send_request(request, true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    let ended = timeout(CLOSE_WAIT, connection).await;
    assert!(
        ended.is_ok(),
        "an HTTP/2 connection without streams stays open"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_is_not_idle() {
    let (server, client) = start(SHORT, SHORT).await;

    let mut h1 = client.connect(b"http/1.1").await;
    let request = format!("GET {WIDGETS}?watch=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    h1.write_all(request.as_bytes()).await.unwrap();
    let (sender, connection) = client.h2().await;
    let mut sender = sender.ready().await.unwrap();
    let request = http::Request::get(client.uri(&format!("{WIDGETS}?watch=1")))
        .body(())
        .unwrap();
    let (response, _) = sender.send_request(request, true).unwrap();
    let response = timeout(WAIT, response).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let mut h2_body = response.into_body();

    // Several idle and header timeouts pass without an event.
    tokio::time::sleep(4 * SHORT).await;
    assert!(
        !connection.is_finished(),
        "the watch's HTTP/2 connection was closed"
    );

    let widget = serde_json::json!({
        "apiVersion": "conn.example.com/v1", "kind": "Widget",
        "metadata": {"name": "late", "namespace": "default"},
    })
    .to_string();
    let mut create = client.connect(b"http/1.1").await;
    let request = format!(
        "POST {WIDGETS} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{widget}",
        widget.len()
    );
    create.write_all(request.as_bytes()).await.unwrap();
    let (status, text) = read_response(&mut create).await;
    assert_eq!(status, 201, "{text}");

    let mut h1_seen = Vec::new();
    let h1_event = timeout(WAIT, async {
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&h1_seen).contains("\"late\"") {
            let n = h1
                .read(&mut chunk)
                .await
                .expect("HTTP/1.1 watch still open");
            assert!(
                n > 0,
                "HTTP/1.1 watch closed: {}",
                String::from_utf8_lossy(&h1_seen)
            );
            h1_seen.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert!(h1_event.is_ok(), "no event on the HTTP/1.1 watch");
    let mut h2_seen = Vec::new();
    let h2_event = timeout(WAIT, async {
        while !String::from_utf8_lossy(&h2_seen).contains("\"late\"") {
            let chunk = h2_body.data().await.expect("HTTP/2 watch still open");
            h2_seen.extend_from_slice(&chunk.expect("HTTP/2 watch body"));
        }
    })
    .await;
    assert!(h2_event.is_ok(), "no event on the HTTP/2 watch");
    connection.abort();
    server.stop().await;
}

#[test]
fn idle_timeouts_are_flags_with_go_defaults() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: extension_apiserver::server::ServerOptions,
    }
    let defaults = Cli::try_parse_from(["server"]).unwrap().options;
    assert_eq!(defaults.http_idle_timeout, Duration::from_secs(90));
    assert_eq!(defaults.http_read_header_timeout, Duration::from_secs(32));
    let set = Cli::try_parse_from([
        "server",
        "--http-idle-timeout=2m",
        "--http-read-header-timeout=0s",
    ])
    .unwrap()
    .options;
    assert_eq!(set.http_idle_timeout, Duration::from_secs(120));
    assert_eq!(set.http_read_header_timeout, Duration::ZERO);
    assert!(Cli::try_parse_from(["server", "--http-idle-timeout=-1s"]).is_err());
}

// ---------------------------------------------------------------------------------------
// Header limits
// ---------------------------------------------------------------------------------------

/// `count` header fields of about `size` bytes each, as a front proxy sends a user's groups.
fn group_headers(count: usize, size: usize) -> Vec<(String, String)> {
    (0..count)
        .map(|i| {
            let value = format!("group-{i:05}-{}", "g".repeat(size.saturating_sub(12)));
            (format!("x-test-group-{i}"), value)
        })
        .collect()
}

/// One HTTP/1.1 GET of `path` with `headers`, on its own connection; the status.
async fn http1_get(client: &Client, path: &str, headers: &[(String, String)]) -> u16 {
    let tls = client.connect(b"http/1.1").await;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let (mut read, mut write) = tokio::io::split(tls);
    // The server may answer (431) and close before it has read everything.
    let sending = tokio::spawn(async move {
        let _ = write.write_all(request.as_bytes()).await;
        write
    });
    let mut response = Vec::new();
    let _ = timeout(WAIT, read.read_to_end(&mut response))
        .await
        .expect("a response in time");
    drop(sending);
    let text = String::from_utf8_lossy(&response);
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_accepts_headers_and_query_up_to_go_limits() {
    let (server, client) = start(LONG, LONG).await;
    // 300 fields, about 200 KB, and a query of 60 KB (an unknown parameter, ignored), on an
    // API path that authenticates and authorizes the request.
    let headers = group_headers(300, 660);
    let query = format!("{WIDGETS}?padding={}", "q".repeat(60 * 1024));
    assert_eq!(http1_get(&client, &query, &headers).await, 200);
    // Beyond Go's 1 MiB (and its 4 KiB of slop): 431, as Go answers.
    let too_many = group_headers(1100, 1000);
    assert_eq!(http1_get(&client, WIDGETS, &too_many).await, 431);
    // The server still serves.
    assert_eq!(http1_get(&client, WIDGETS, &[]).await, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_accepts_a_header_list_of_hundreds_of_kilobytes() {
    let (server, client) = start(LONG, LONG).await;
    let (sender, connection) = client.h2().await;
    let mut sender = sender.ready().await.unwrap();
    let mut request = http::Request::get(client.uri(WIDGETS));
    for (name, value) in group_headers(400, 500) {
        request = request.header(name, value);
    }
    let (response, _) = sender
        .send_request(request.body(()).unwrap(), true)
        .unwrap();
    let response = timeout(WAIT, response)
        .await
        .expect("a response in time")
        .expect("the request is sent and answered");
    assert_eq!(response.status(), 200);
    connection.abort();
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// --goaway-chance
// ---------------------------------------------------------------------------------------

/// What a client saw sending requests one after another over HTTP/2.
#[derive(Debug, Default)]
struct Goaways {
    /// Connections opened.
    connections: usize,
    /// Connections the server ended with a GOAWAY without error.
    graceful_closes: usize,
    /// Requests the server's GOAWAY left unprocessed, sent again on a new connection (as Go's
    /// and hyper's clients do).
    resent: usize,
}

/// Whether a request failed because the server's GOAWAY left it unprocessed.
fn unprocessed(e: &h2::Error) -> bool {
    (e.is_go_away() && e.reason() == Some(h2::Reason::NO_ERROR))
        || e.reason() == Some(h2::Reason::REFUSED_STREAM)
}

/// Sends `count` GETs one after another over HTTP/2, on a new connection whenever the server
/// sent a GOAWAY; every request must be answered 200.
async fn h2_requests(client: &Client, count: usize) -> Goaways {
    let mut seen = Goaways::default();
    let mut open = None;
    let mut answered = 0;
    let mut attempts = 0;
    while answered < count {
        attempts += 1;
        assert!(attempts < 4 * count, "requests keep failing: {seen:?}");
        let (sender, connection) = match open.take() {
            Some(open) => open,
            None => {
                seen.connections += 1;
                client.h2().await
            }
        };
        let sent = async {
            let mut sender = sender.ready().await?;
            let request = http::Request::get(client.uri(WIDGETS)).body(()).unwrap();
            let (response, _) = sender.send_request(request, true)?;
            let response = response.await?;
            let status = response.status();
            let mut body = response.into_body();
            while let Some(chunk) = body.data().await {
                let chunk = chunk?;
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            Ok::<_, h2::Error>((sender, status))
        };
        match timeout(WAIT, sent).await.expect("an answer in time") {
            Ok((sender, status)) => {
                assert_eq!(status, 200, "request {answered}");
                answered += 1;
                if connection.is_finished() {
                    seen.graceful_closes += usize::from(matches!(connection.await, Ok(Ok(()))));
                } else {
                    open = Some((sender, connection));
                }
            }
            Err(e) if unprocessed(&e) => {
                seen.resent += 1;
                let closed = timeout(WAIT, connection).await.expect("closed in time");
                seen.graceful_closes += usize::from(matches!(closed, Ok(Ok(()))));
            }
            Err(e) => panic!("request {answered} failed: {e} ({seen:?})"),
        }
    }
    if let Some((_, connection)) = open {
        connection.abort();
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_chance_closes_http2_connections_gracefully() {
    // 500 requests at kube's highest chance: no GOAWAY at all has a chance of 0.98^500 < 1e-4.
    let (server, client) = start_with(|o| o.goaway_chance = 0.02).await;
    let seen = h2_requests(&client, 500).await;
    assert!(seen.graceful_closes >= 1, "no GOAWAY seen: {seen:?}");
    assert!(seen.connections >= 2, "{seen:?}");
    server.stop().await;

    let (server, client) = start_with(|o| o.goaway_chance = 0.0).await;
    let seen = h2_requests(&client, 300).await;
    assert_eq!(
        (seen.connections, seen.graceful_closes, seen.resent),
        (1, 0, 0)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_never_draws_the_goaway() {
    let (server, client) = start_with(|o| o.goaway_chance = 0.02).await;
    let (sender, connection) = client.h2().await;
    let mut sender = sender.ready().await.unwrap();
    // Watches on one connection, every one of which would have drawn at a chance of 1.
    let mut watches = Vec::new();
    for _ in 0..200 {
        let uri = client.uri(&format!("{WIDGETS}?watch=1&timeoutSeconds=60"));
        let request = http::Request::get(uri).body(()).unwrap();
        let (response, _) = sender.send_request(request, true).unwrap();
        let response = timeout(WAIT, response).await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        watches.push(response);
        sender = sender.ready().await.unwrap();
    }
    assert!(!connection.is_finished(), "a watch drew the GOAWAY");
    connection.abort();
    server.stop().await;
}

#[test]
fn goaway_chance_is_bounded_as_kube_bounds_it() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: extension_apiserver::server::ServerOptions,
    }
    let set = Cli::try_parse_from(["server", "--goaway-chance=0.001"]).unwrap();
    assert_eq!(set.options.goaway_chance, 0.001);
    let defaults = Cli::try_parse_from(["server"]).unwrap().options;
    assert_eq!(defaults.goaway_chance, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goaway_chance_above_kubes_bound_refuses_to_start() {
    let group = APIGroup::new("conn.example.com").version("v1", |v| v.resource::<Widget>());
    let dir = tempfile::tempdir().unwrap();
    let mut options = extension_apiserver::server::ServerOptions {
        secure_port: 0,
        bind_address: [127, 0, 0, 1].into(),
        cert_dir: dir.path().join("certs"),
        storage_backend: extension_apiserver::server::StorageBackendKind::Memory,
        goaway_chance: 0.05,
        ..Default::default()
    };
    options.auth.authentication_skip_lookup = true;
    let built = extension_apiserver::APIServer::new(options)
        .without_logging()
        .group(group)
        .build()
        .await;
    let Err(error) = built else {
        panic!("a server with --goaway-chance=0.05 was built")
    };
    assert!(
        error
            .to_string()
            .contains("--goaway-chance can not be less than 0 or greater than 0.02"),
        "{error}"
    );
}

// ---------------------------------------------------------------------------------------
// A watcher that stops reading
// ---------------------------------------------------------------------------------------

/// POSTs `object` as JSON on `sender`'s connection; the response's status.
async fn h2_create(
    sender: &h2::client::SendRequest<Bytes>,
    uri: &str,
    object: &serde_json::Value,
) -> http::StatusCode {
    let mut sender = timeout(WAIT, sender.clone().ready())
        .await
        .unwrap()
        .unwrap();
    let request = http::Request::post(uri)
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let (response, mut body) = sender.send_request(request, false).unwrap();
    body.send_data(Bytes::from(object.to_string()), true)
        .unwrap();
    timeout(WAIT, response).await.unwrap().unwrap().status()
}

/// Opens a watch of the widgets on `sender`'s connection: its body, unread.
async fn open_watch(sender: &h2::client::SendRequest<Bytes>) -> h2::RecvStream {
    let mut sender = timeout(WAIT, sender.clone().ready())
        .await
        .unwrap()
        .unwrap();
    let uri = format!("{WIDGETS}?watch=1&resourceVersion=0&timeoutSeconds=600");
    let request = http::Request::get(uri).body(()).unwrap();
    let (response, _) = sender.send_request(request, true).unwrap();
    let response = timeout(WAIT, response).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    response.into_body()
}

/// Reads a watch until `count` ADDED events, or to its end when `count` is `None`; returns
/// how many it got.
async fn read_added(body: h2::RecvStream, count: Option<usize>) -> usize {
    read_added_names(body, count).await.len()
}

/// Opens a watch of the widgets over HTTP/1.1 on a socket with a small receive buffer, reads
/// its response header, and returns the connection, not read further.
async fn open_http1_watch(client: &Client) -> TlsStream<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(client.addr).await.unwrap();
    let mut tls = client.tls_over(tcp, b"http/1.1").await;
    let request = format!(
        "GET {WIDGETS}?watch=1&resourceVersion=0&timeoutSeconds=600 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut header = Vec::new();
    while !header.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = timeout(WAIT, tls.read(&mut byte)).await.unwrap().unwrap();
        assert_eq!(n, 1, "the watch's header");
        header.push(byte[0]);
    }
    assert!(
        header.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&header)
    );
    tls
}

/// Reads an HTTP/1.1 watch to the end of its chunked body; returns how many ADDED events
/// it had.
async fn read_http1_added(mut tls: TlsStream<TcpStream>) -> usize {
    let mut text = Vec::new();
    let mut chunk = [0u8; 16384];
    while !text.ends_with(b"0\r\n\r\n") {
        match tls.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&text)
        .matches(r#"{"type":"ADDED""#)
        .count()
}

/// `apiserver_terminated_watchers_total` of the widgets, from `/metrics`.
async fn terminated_watchers(client: &Client) -> u64 {
    let (sender, connection) = client.h2().await;
    let mut sender = sender.ready().await.unwrap();
    let request = http::Request::get(client.uri("/metrics")).body(()).unwrap();
    let (response, _) = sender.send_request(request, true).unwrap();
    let response = timeout(WAIT, response).await.unwrap().unwrap();
    let text = read_h2_body(response.into_body()).await;
    connection.abort();
    let series =
        r#"apiserver_terminated_watchers_total{group="conn.example.com",resource="widgets"} "#;
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|line| line.strip_prefix(series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_stops_reading_is_ended_without_holding_up_the_others() {
    // Widgets of about 8 KiB, 8 MB in all: the slow HTTP/2 watch's 64 KiB window holds some
    // 8 events, its channel 256, and the HTTP/1.1 one's socket buffers and hyper's a few
    // megabytes, so both stop taking events long before the last write.
    const WRITES: usize = 1000;
    let (server, client) = start(LONG, LONG).await;
    let before = terminated_watchers(&client).await;
    // The slow watcher has a connection of its own (a stream that is not read holds back
    // the connection's window too), and so has one over HTTP/1.1 with a small socket
    // buffer; three others share one and read everything.
    let (slow_sender, slow_connection) = client.h2().await;
    let slow = open_watch(&slow_sender).await;
    let slow_http1 = open_http1_watch(&client).await;
    let (fast_sender, fast_connection) = client.h2().await;
    let mut fast = Vec::new();
    for _ in 0..3 {
        let body = open_watch(&fast_sender).await;
        fast.push(tokio::spawn(read_added(body, Some(WRITES))));
    }

    let (writer, writer_connection) = client.h2().await;
    let padding = "x".repeat(8000);
    for i in 0..WRITES {
        let widget = serde_json::json!({
            "apiVersion": "conn.example.com/v1", "kind": "Widget",
            "metadata": {"name": format!("w{i:04}"), "namespace": "default",
                         "annotations": {"padding": padding}},
        });
        let status = h2_create(&writer, &client.uri(WIDGETS), &widget).await;
        assert_eq!(status, 201, "create {i}");
    }
    writer_connection.abort();

    // Every other watcher gets every event, while the slow one still reads nothing.
    for task in fast {
        let added = timeout(WAIT, task)
            .await
            .expect("fast watchers not held up");
        assert_eq!(added.unwrap(), WRITES);
    }
    // The slow one is ended (and counted) in bounded time, without reading.
    let ended = timeout(WAIT, async {
        while terminated_watchers(&client).await < before + 2 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the watchers that stopped reading (HTTP/2, HTTP/1.1) are still served"
    );
    // When it reads again it finds its watch over, after what was buffered for it: its
    // channel (256 events) and window (some 8), far fewer than the writes.
    let got = timeout(WAIT, read_added(slow, None))
        .await
        .expect("the slow watch's stream ends");
    assert!(got <= 400, "the slow watch got {got} of {WRITES} events");
    let got = timeout(WAIT, read_http1_added(slow_http1))
        .await
        .expect("the slow HTTP/1.1 watch's stream ends");
    assert!(got < WRITES, "the slow HTTP/1.1 watch got {got} events");
    slow_connection.abort();
    fast_connection.abort();
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// Many watchers on one HTTP/2 connection
// ---------------------------------------------------------------------------------------

/// Reads a watch until it has `count` ADDED events, or to its end when `count` is `None`;
/// returns their objects' names in the order they came.
async fn read_added_names(mut body: h2::RecvStream, count: Option<usize>) -> Vec<String> {
    let (mut names, mut text) = (Vec::new(), Vec::new());
    while count.is_none_or(|count| names.len() < count) {
        let Some(chunk) = body.data().await else {
            break;
        };
        let chunk = chunk.expect("the watch's body");
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
        while let Some(end) = text.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = text.drain(..=end).collect();
            let event: serde_json::Value = serde_json::from_slice(&line).expect("a JSON line");
            if event["type"] == "ADDED" {
                names.push(event["object"]["metadata"]["name"].as_str().unwrap().into());
            }
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watchers_on_one_http2_connection_get_every_event_in_order() {
    // The server batches the frames the streams of a connection have for one event into
    // one write: every watch must still get every event, whole and in order, on a connection
    // shared with the writes, and a lone request between the bursts is answered.
    const WATCHERS: usize = 200;
    const WRITES: usize = 40;
    let (server, client) = start(LONG, LONG).await;
    // The flow-control windows kube-rs opens with (hyper's client: 2 MiB a stream, 5 MiB
    // the connection; client-go's are larger). With h2's bare 64 KiB connection window,
    // one event for 200 streams is more than the window, and h2's client then ends the
    // connection for too many small DATA frames (the window's last bytes, spread over
    // streams, make frames under its 256-byte threshold).
    let tls = client.connect(b"h2").await;
    let (sender, connection) = h2::client::Builder::new()
        .initial_window_size(2 << 20)
        .initial_connection_window_size(5 << 20)
        .handshake(tls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let mut watches = Vec::new();
    for _ in 0..WATCHERS {
        let body = open_watch(&sender).await;
        watches.push(tokio::spawn(read_added_names(body, Some(WRITES))));
    }
    let expected: Vec<String> = (0..WRITES).map(|i| format!("w{i:04}")).collect();
    for name in &expected {
        let widget = serde_json::json!({
            "apiVersion": "conn.example.com/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "default"},
        });
        let status = h2_create(&sender, &client.uri(WIDGETS), &widget).await;
        assert_eq!(status, 201, "create {name}");
    }
    for (i, watch) in watches.into_iter().enumerate() {
        let names = timeout(WAIT, watch)
            .await
            .expect("every watcher gets every event in time")
            .unwrap();
        assert_eq!(names, expected, "watcher {i}");
    }
    // The connection still answers a single request after the bursts.
    let (status, _) = timeout(WAIT, h2_get(&sender, &client.uri(WIDGETS)))
        .await
        .expect("a get answered in time");
    assert_eq!(status, 200);
    connection.abort();
    server.stop().await;
}

/// A GET on `sender`'s connection: its status and body.
async fn h2_get(sender: &h2::client::SendRequest<Bytes>, uri: &str) -> (u16, Vec<u8>) {
    let mut sender = sender.clone().ready().await.unwrap();
    let request = http::Request::get(uri).body(()).unwrap();
    let (response, _) = sender.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    let status = response.status().as_u16();
    (status, read_h2_body(response.into_body()).await)
}

/// An HTTP/2 response's whole body, its window given back as it is read.
async fn read_h2_body(mut body: h2::RecvStream) -> Vec<u8> {
    let mut text = Vec::new();
    while let Some(chunk) = timeout(WAIT, body.data()).await.unwrap() {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    text
}

// ---------------------------------------------------------------------------------------
// Large lists
// ---------------------------------------------------------------------------------------

/// The names of a list response's items, and its `metadata`.
fn list_names(body: &[u8]) -> (Vec<String>, serde_json::Value) {
    let list: serde_json::Value = serde_json::from_slice(body).expect("a whole JSON list");
    let names = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    (names, list["metadata"].clone())
}

/// A list larger than what the server encodes in one buffer (8 MiB) is written piece by
/// piece: whole, in order, with its `Content-Length`, over HTTP/1.1 and HTTP/2, from the
/// watch cache (a list, a page) and from the store (an exact revision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_list_is_sent_whole_with_its_length_over_http1_and_http2() {
    let (server, client) = start(LONG, LONG).await;
    let (sender, _connection) = client.h2().await;
    let uri = client.uri(WIDGETS);
    let names: Vec<String> = (0..160).map(|i| format!("w{i:04}")).collect();
    for (i, name) in names.iter().enumerate() {
        let widget = serde_json::json!({
            "apiVersion": "conn.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": name, "annotations": {"pad": "x".repeat(64_000)}},
            "spec": {"size": i},
        });
        assert_eq!(h2_create(&sender, &uri, &widget).await, 201);
    }
    let (status, body) = h2_get(&sender, &uri).await;
    assert_eq!(status, 200);
    let (_, metadata) = list_names(&body);
    let rv = metadata["resourceVersion"].as_str().unwrap().to_owned();
    let exact = format!("?resourceVersion={rv}&resourceVersionMatch=Exact");
    for (query, count) in [
        ("", 160),
        ("?resourceVersion=0", 160),
        (&exact[..], 160),
        ("?limit=150", 150),
    ] {
        // HTTP/2.
        let mut h2 = sender.clone().ready().await.unwrap();
        let request = http::Request::get(format!("{uri}{query}"))
            .body(())
            .unwrap();
        let (response, _) = h2.send_request(request, true).unwrap();
        let response = timeout(WAIT, response).await.unwrap().unwrap();
        assert_eq!(response.status(), 200, "{query}");
        let length: usize = response.headers()["content-length"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let text = read_h2_body(response.into_body()).await;
        assert!(
            length > 8 << 20,
            "{query}: {length} bytes is not a list of pieces"
        );
        assert_eq!(text.len(), length, "{query}");
        let (got, metadata) = list_names(&text);
        assert_eq!(got, names[..count], "{query}");
        if count < 160 {
            assert_eq!(metadata["remainingItemCount"], 10, "{query}");
        }

        // HTTP/1.1: the head, then the announced length.
        let mut tls = client.connect(b"http/1.1").await;
        let request = format!("GET {WIDGETS}{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        let end = loop {
            if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = timeout(WAIT, tls.read(&mut chunk)).await.unwrap().unwrap();
            assert!(n > 0, "closed before the head");
            seen.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(seen[..end].to_vec()).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 "), "{query}: {head}");
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_owned)
            })
            .expect("a Content-Length")
            .trim()
            .parse()
            .unwrap();
        let mut body = seen[end..].to_vec();
        body.resize(length, 0);
        let have = seen.len() - end;
        timeout(WAIT, tls.read_exact(&mut body[have..]))
            .await
            .unwrap()
            .unwrap();
        assert!(
            !head.to_ascii_lowercase().contains("transfer-encoding"),
            "{head}"
        );
        let (got, _) = list_names(&body);
        assert_eq!(got, names[..count], "{query} over HTTP/1.1");
    }
    server.stop().await;
}
