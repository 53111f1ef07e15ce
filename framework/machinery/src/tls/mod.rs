//! TLS material every stage stands on: PEM certificates and keys, the crypto provider, CA
//! root stores, and the chain a client presented at the handshake. The secure port's TLS
//! configuration is `server::tls`; the authenticators, the etcd client and the aggregator's
//! checks read certificates through here, so none of them reaches up into `server/`.

pub mod certs;
mod peer;
pub mod pki;
pub mod signature;

use std::path::PathBuf;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;

pub use peer::PeerCertificates;
pub use peer::chain_digest;
pub use signature::SignatureError;

/// Why certificates or the TLS configuration could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// Reading or writing `path` failed with `source`.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
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
