//! One `GET` of a metrics page, over plain HTTP or TLS: the kubelets' `/metrics/resource`
//! and the `--scrape-url` endpoints. A connection per scrape, as a scrape every few seconds
//! needs no pool, bounded in time and size.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri, header};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};

use extension_apiserver::tls;

/// The largest page read (a kubelet with hundreds of pods answers a few hundred KiB).
const MAX_PAGE_BYTES: usize = 32 << 20;

/// What Prometheus asks for: the text format.
const ACCEPT: &str = "text/plain;version=0.0.4;q=1,*/*;q=0.1";

/// Fetches pages with one TLS configuration, one time limit and, optionally, a bearer token
/// read from a file at each request (projected service account tokens rotate).
#[derive(Clone)]
pub struct Fetcher {
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
    token_file: Option<PathBuf>,
}

/// How a [`Fetcher`] trusts servers over TLS.
#[derive(Clone, Debug)]
pub enum Trust {
    /// Certificates signed by this CA bundle (PEM file).
    Ca(PathBuf),
    /// Anything (`--kubelet-insecure-tls`): the connection is encrypted, not authenticated.
    Insecure,
    /// No TLS: `https` URLs fail.
    None,
}

impl Fetcher {
    /// A fetcher trusting `trust`, giving up after `timeout`.
    pub fn new(trust: &Trust, timeout: Duration) -> Result<Self, String> {
        tls::install_crypto_provider();
        let builder = rustls::ClientConfig::builder_with_provider(tls::crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let config = match trust {
            Trust::Ca(file) => {
                let cas = tls::certs::read_certs_file(file).map_err(|e| e.to_string())?;
                let roots =
                    tls::root_store(&cas).map_err(|e| format!("{}: {e}", file.display()))?;
                Some(builder.with_root_certificates(roots).with_no_client_auth())
            }
            Trust::Insecure => Some(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyCertificate))
                    .with_no_client_auth(),
            ),
            Trust::None => None,
        };
        Ok(Self {
            tls: config.map(Arc::new),
            timeout,
            token_file: None,
        })
    }

    /// Sends `Authorization: Bearer` with the token in `file` when the file exists (the
    /// kubelet authorizes `nodes/metrics` with it, as it does metrics-server's).
    pub fn with_token_file(mut self, file: Option<&Path>) -> Self {
        self.token_file = file.map(Path::to_path_buf);
        self
    }

    /// The body of a `200` answer to `GET url`; anything else is an error saying what.
    pub async fn get(&self, url: &Uri) -> Result<Bytes, String> {
        tokio::time::timeout(self.timeout, self.get_unbounded(url))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)))
    }

    async fn get_unbounded(&self, url: &Uri) -> Result<Bytes, String> {
        let host = url.host().ok_or("the URL has no host")?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let https = match url.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => return Err(format!("unsupported scheme {other:?}")),
        };
        let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
        let mut request = Request::get(url.path_and_query().map_or("/", |p| p.as_str()))
            .header(header::HOST, url.authority().map_or(host, |a| a.as_str()))
            .header(header::ACCEPT, ACCEPT)
            .header(header::USER_AGENT, "metrics-adapter");
        if let Some(token) = self.token()? {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let tcp = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        if !https {
            return exchange(tcp, request).await;
        }
        let config = self.tls.clone().ok_or("https needs a CA to trust")?;
        let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        exchange(stream, request).await
    }

    fn token(&self) -> Result<Option<String>, String> {
        let Some(file) = &self.token_file else {
            return Ok(None);
        };
        match std::fs::read_to_string(file) {
            Ok(token) => Ok(Some(token.trim().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {}: {e}", file.display())),
        }
    }
}

/// Sends `request` on a fresh HTTP/1.1 connection over `io` and reads the answer.
async fn exchange<I>(io: I, request: Request<Empty<Bytes>>) -> Result<Bytes, String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let connection = tokio::spawn(connection);
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_PAGE_BYTES)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    connection.abort();
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Err(format!("HTTP {status}: {}", text.trim()));
    }
    Ok(body)
}

/// Accepts any certificate, still checking that the server holds its key: what
/// `--kubelet-insecure-tls` asks for (kubelets' self-signed serving certificates).
#[derive(Debug)]
struct AnyCertificate;

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = tls::crypto_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, &algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = tls::crypto_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, &algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        tls::crypto_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
