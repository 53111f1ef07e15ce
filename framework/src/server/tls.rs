//! The TLS layer of the secure port: the `rustls::ServerConfig` every accepted connection
//! is handshaken with (serving certificate, ALPN h2/http1.1, optional client certificates),
//! before hyper sees any bytes. See `serve.rs` for the accept loop.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::certs::CertKey;

/// ALPN protocols offered, preferred first: HTTP/2 multiplexes kubectl's and client-go's
/// requests and watches over one connection.
pub const ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Why certificates or the TLS configuration could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Generating a key or certificate failed.
    #[error("generating certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Certificates, keys or CA bundles are malformed or inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// rustls rejected the configuration (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

impl TlsError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The crypto provider the framework's TLS configs use: the process default, which is ring
/// unless the application installed another first.
///
/// Configs are built with it explicitly so that a second provider pulled in by some other
/// crate can never make rustls' `builder()` panic over an ambiguous process default.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    install_crypto_provider();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// Installs ring as the process-wide default provider, for TLS clients (kube, reqwest) that
/// use the default; a no-op when a default is already installed.
pub fn install_crypto_provider() {
    // Err only means another default is installed already, which is just as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A root store of the given CA certificates; an empty or unparsable set is an error, since
/// it would silently reject (or, with anonymous allowed, ignore) every client certificate.
pub fn root_store(cas: &[CertificateDer<'static>]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(cas.iter().cloned());
    if added == 0 {
        return Err(TlsError::Invalid(
            "CA bundle holds no usable certificate".into(),
        ));
    }
    Ok(roots)
}

/// The server TLS configuration: TLS 1.3 and 1.2, ALPN `h2` and `http/1.1`, and when
/// `client_ca` is given, client certificates verified against it.
///
/// A client without a certificate is still let in (it may use a token, or be anonymous):
/// authentication decides later. `client_ca` should hold every CA whose client certificates
/// the server accepts (client CA and request-header CA); authenticators re-check their own.
pub fn server_config(
    serving: &CertKey,
    client_ca: Option<&[CertificateDer<'static>]>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = crypto_provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_ca {
        Some(cas) => {
            let roots = Arc::new(root_store(cas)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Invalid(format!("client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_single_cert(serving.cert_chain.clone(), serving.key.clone_key())?;
    config.alpn_protocols = ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}
