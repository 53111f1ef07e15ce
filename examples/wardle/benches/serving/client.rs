//! The load generator: HTTP/2 over rustls with the server's admin client certificate, a few
//! multiplexed connections with requests spread over them, and a driver that runs operations
//! with a fixed number in flight and keeps each one's latency.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use extension_apiserver::tls::certs::{CertKey, parse_certs_pem};
use extension_apiserver::tls::{crypto_provider, root_store};
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Any failure of the bench: it stops the run with its message.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The client TLS configuration for a server whose standalone certificates are in `cert_dir`:
/// trusts `serving-ca.crt`, presents `admin.crt` (the kubeconfig's user), offers only `h2`.
pub fn tls_config(cert_dir: &Path) -> Result<Arc<rustls::ClientConfig>, Error> {
    tls_config_from(
        &cert_dir.join("serving-ca.crt"),
        &cert_dir.join("admin.crt"),
        &cert_dir.join("admin.key"),
    )
}

/// A client TLS configuration that trusts the CA bundle in `ca`, presents the certificate
/// `cert` with its key `key`, and offers only `h2`.
pub fn tls_config_from(
    ca: &Path,
    cert: &Path,
    key: &Path,
) -> Result<Arc<rustls::ClientConfig>, Error> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| Error::from(format!("{}: {e}", path.display())))
    };
    let ca = parse_certs_pem(&read(ca)?)?;
    let client = CertKey::from_pem(&read(cert)?, &read(key)?)?;
    let mut config = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(root_store(&ca)?)
        .with_client_auth_cert(client.cert_chain, client.key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// HTTP/2 connections to one server; each request goes out on the next connection in turn.
#[derive(Clone)]
pub struct Client {
    base: Arc<str>,
    connections: Arc<Vec<SendRequest<Full<Bytes>>>>,
    next: Arc<AtomicUsize>,
    /// Sent with every request (the front proxy's `X-Remote-User`, for servers behind one).
    headers: Arc<[(HeaderName, HeaderValue)]>,
}

impl Client {
    /// Opens `connections` TLS connections to `127.0.0.1:port`, each negotiating HTTP/2.
    pub async fn connect(
        port: u16,
        tls: Arc<rustls::ClientConfig>,
        connections: usize,
    ) -> Result<Self, Error> {
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        Self::connect_to(address, "127.0.0.1", tls, connections, Vec::new()).await
    }

    /// Opens `connections` TLS connections to `address`, checking the server's certificate
    /// for `server_name`, each negotiating HTTP/2; every request carries `headers`.
    pub async fn connect_to(
        address: SocketAddr,
        server_name: &str,
        tls: Arc<rustls::ClientConfig>,
        connections: usize,
        headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<Self, Error> {
        let mut senders = Vec::with_capacity(connections);
        for _ in 0..connections {
            let tcp = TcpStream::connect(address).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from(server_name.to_string())?;
            let stream = TlsConnector::from(tls.clone()).connect(name, tcp).await?;
            if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err("the server did not negotiate HTTP/2".into());
            }
            let (sender, connection) =
                hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                    .handshake(TokioIo::new(stream))
                    .await?;
            tokio::spawn(connection);
            senders.push(sender);
        }
        Ok(Self {
            base: format!("https://{address}").into(),
            connections: Arc::new(senders),
            next: Arc::new(AtomicUsize::new(0)),
            headers: headers.into(),
        })
    }

    /// Sends a request and returns the response with its body still streaming (for watches).
    pub async fn open(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Response<Incoming>, Error> {
        self.open_as(method, path, body, "application/json").await
    }

    /// [`open`](Self::open) with a body of `content_type`.
    async fn open_as(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        content_type: &str,
    ) -> Result<Response<Incoming>, Error> {
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        let mut sender = self.connections[turn].clone();
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(http::header::ACCEPT, "application/json");
        if body.is_some() {
            request = request.header(http::header::CONTENT_TYPE, content_type);
        }
        for (name, value) in self.headers.iter() {
            request = request.header(name, value);
        }
        let request = request.body(Full::new(body.unwrap_or_default()))?;
        sender.ready().await?;
        Ok(sender.send_request(request).await?)
    }

    /// Sends a request and reads the whole body.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<(StatusCode, Bytes), Error> {
        let response = self.open(method, path, body).await?;
        let status = response.status();
        Ok((status, response.into_body().collect().await?.to_bytes()))
    }

    /// GET that must answer 200; returns the body.
    pub async fn get(&self, path: &str) -> Result<Bytes, Error> {
        expect(
            self.send(Method::GET, path, None).await?,
            StatusCode::OK,
            path,
        )
    }

    /// PATCH of `content_type` that must answer 200; returns the body.
    pub async fn patch(&self, path: &str, content_type: &str, body: Bytes) -> Result<Bytes, Error> {
        let response = self
            .open_as(Method::PATCH, path, Some(body), content_type)
            .await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        expect((status, body), StatusCode::OK, path)
    }

    /// POST that must answer 201; returns the body.
    pub async fn create(&self, path: &str, body: Bytes) -> Result<Bytes, Error> {
        let answer = self.send(Method::POST, path, Some(body)).await?;
        expect(answer, StatusCode::CREATED, path)
    }
}

fn expect(
    (status, body): (StatusCode, Bytes),
    want: StatusCode,
    path: &str,
) -> Result<Bytes, Error> {
    if status != want {
        let text = String::from_utf8_lossy(&body[..body.len().min(500)]);
        return Err(format!("{path}: {status} (want {want}): {text}").into());
    }
    Ok(body)
}

/// Latencies of a run of operations and its wall time.
#[derive(Debug, Clone)]
pub struct Sample {
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Sample {
    /// A sample of the given latencies over `wall`.
    pub fn new(mut latencies: Vec<Duration>, wall: Duration) -> Self {
        latencies.sort_unstable();
        Self { latencies, wall }
    }

    /// Several samples as one: every latency, over their summed wall time.
    pub fn merge(samples: impl IntoIterator<Item = Sample>) -> Self {
        let (mut latencies, mut wall) = (Vec::new(), Duration::ZERO);
        for sample in samples {
            latencies.extend(sample.latencies);
            wall += sample.wall;
        }
        Self::new(latencies, wall)
    }

    /// The `q` quantile (0.5 = median) of the latencies.
    pub fn quantile(&self, q: f64) -> Duration {
        let last = self.latencies.len().saturating_sub(1);
        let at = (last as f64 * q).round() as usize;
        self.latencies.get(at).copied().unwrap_or_default()
    }

    /// How many operations.
    pub fn len(&self) -> usize {
        self.latencies.len()
    }

    /// Operations per second over the wall time.
    pub fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Runs operations `0..count` with `concurrency` in flight (each worker takes the next index
/// when its previous operation is done); the first failure stops the run.
pub async fn drive<F, Fut>(count: usize, concurrency: usize, op: F) -> Result<Sample, Error>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.clamp(1, count.max(1)) {
        let (op, next) = (op.clone(), next.clone());
        workers.spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, Error>(latencies);
                }
                let started = Instant::now();
                op(i).await?;
                latencies.push(started.elapsed());
            }
        });
    }
    let mut latencies = Vec::with_capacity(count);
    while let Some(done) = workers.join_next().await {
        latencies.extend(done??);
    }
    Ok(Sample::new(latencies, start.elapsed()))
}
