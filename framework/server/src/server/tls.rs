//! The TLS layer of the secure port: the `rustls::ServerConfig` every accepted connection
//! is handshaken with (serving certificate, protocol versions and cipher suites, ALPN
//! h2/http1.1, client certificates requested), before hyper sees any bytes. See `serve.rs`
//! for the accept loop and `serving_cert.rs` for the reloadable serving certificate.
//!
//! Client certificates are *requested* but, as with Go's `tls.RequestClientCert` in
//! `k8s.io/apiserver`, never verified against a CA here: the handshake only proves that the
//! client holds the certificate's key. Each authenticator then checks the chain against its
//! own CA (client CA, request-header CA), so those CAs can change at run time without a new
//! TLS configuration.

use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{
    CertificateDer, SignatureVerificationAlgorithm, SubjectPublicKeyInfoDer, UnixTime,
};
use rustls::server::ResolvesServerCert;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, CipherSuite, DigitallySignedStruct, DistinguishedName, PeerMisbehaved,
    ServerConfig, SignatureScheme, SupportedCipherSuite,
};

use super::serving_cert::ServingCertificate;
use crate::tls::certs::CertKey;
use crate::tls::signature::{PublicKey, SignatureError, spki_of};
use crate::tls::{TlsError, crypto_provider, root_store};

/// ALPN protocols offered, preferred first: HTTP/2 multiplexes kubectl's and client-go's
/// requests and watches over one connection.
pub const ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

// ---------------------------------------------------------------------------------------
// Versions and cipher suites
// ---------------------------------------------------------------------------------------

/// The lowest TLS version the server accepts (`--tls-min-version`), named as Go's
/// `crypto/tls` constants. TLS 1.0 and 1.1 are not implemented (rustls has neither).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TlsVersion {
    /// `VersionTLS12`: TLS 1.2 and 1.3, the default (as `k8s.io/apiserver`'s).
    #[default]
    Tls12,
    /// `VersionTLS13`: TLS 1.3 only.
    Tls13,
}

impl TlsVersion {
    /// Go's name of the version, as the flag takes it.
    pub fn go_name(self) -> &'static str {
        match self {
            Self::Tls12 => "VersionTLS12",
            Self::Tls13 => "VersionTLS13",
        }
    }
}

impl std::fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.go_name())
    }
}

impl FromStr for TlsVersion {
    type Err = TlsVersionError;

    fn from_str(s: &str) -> Result<Self, TlsVersionError> {
        match s.trim() {
            "VersionTLS12" => Ok(Self::Tls12),
            "VersionTLS13" => Ok(Self::Tls13),
            old @ ("VersionTLS10" | "VersionTLS11") => {
                Err(TlsVersionError::Insecure(old.to_string()))
            }
            other => Err(TlsVersionError::Unknown(other.to_string())),
        }
    }
}

/// Why a `--tls-min-version` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsVersionError {
    /// TLS 1.0 or 1.1, which Go still knows but which are insecure.
    #[error("{0} is not supported: TLS 1.0 and 1.1 are insecure; use VersionTLS12 or VersionTLS13")]
    Insecure(String),
    /// Not a version name of Go's `crypto/tls`.
    #[error("unknown TLS version {0:?}; use VersionTLS12 or VersionTLS13")]
    Unknown(String),
}

/// How a cipher suite name of Go's `crypto/tls` is treated by `--tls-cipher-suites`.
#[derive(Clone, Copy)]
enum SuiteName {
    /// A TLS 1.2 AEAD suite with forward secrecy: configurable.
    Tls12(CipherSuite),
    /// A TLS 1.3 suite: accepted in the list, but TLS 1.3 suites are always enabled.
    Tls13,
    /// A suite rustls does not implement though Go calls it secure (CBC mode).
    Unsupported,
    /// One of Go's `InsecureCipherSuites()`.
    Insecure,
}

/// Every cipher suite name Go's `crypto/tls` knows (IANA names, plus Go's two short
/// ChaCha20 aliases), and what `--tls-cipher-suites` makes of it.
const CIPHER_SUITES: &[(&str, SuiteName)] = {
    use CipherSuite as C;
    use SuiteName::{Insecure, Tls12, Tls13, Unsupported};
    &[
        ("TLS_AES_128_GCM_SHA256", Tls13),
        ("TLS_AES_256_GCM_SHA384", Tls13),
        ("TLS_CHACHA20_POLY1305_SHA256", Tls13),
        (
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            Tls12(C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            Tls12(C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            Tls12(C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            Tls12(C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            Tls12(C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            Tls12(C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
        ),
        (
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            Tls12(C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
        ),
        (
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            Tls12(C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
        ),
        ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", Unsupported),
        ("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", Unsupported),
        ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", Unsupported),
        ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", Unsupported),
        ("TLS_RSA_WITH_RC4_128_SHA", Insecure),
        ("TLS_RSA_WITH_3DES_EDE_CBC_SHA", Insecure),
        ("TLS_RSA_WITH_AES_128_CBC_SHA", Insecure),
        ("TLS_RSA_WITH_AES_256_CBC_SHA", Insecure),
        ("TLS_RSA_WITH_AES_128_CBC_SHA256", Insecure),
        ("TLS_RSA_WITH_AES_128_GCM_SHA256", Insecure),
        ("TLS_RSA_WITH_AES_256_GCM_SHA384", Insecure),
        ("TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", Insecure),
        ("TLS_ECDHE_RSA_WITH_RC4_128_SHA", Insecure),
        ("TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", Insecure),
        ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", Insecure),
        ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", Insecure),
    ]
};

/// The names `--tls-cipher-suites` accepts, comma separated, for error messages and help.
pub fn supported_cipher_suite_names() -> String {
    CIPHER_SUITES
        .iter()
        .filter(|(_, kind)| matches!(kind, SuiteName::Tls12(_) | SuiteName::Tls13))
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `--tls-cipher-suites` name that is refused, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CipherSuiteError {
    /// A suite Go lists as insecure.
    #[error("{0} is insecure and not allowed; supported: {supported}", supported = supported_cipher_suite_names())]
    Insecure(String),
    /// A CBC-mode suite, which rustls does not implement.
    #[error("{0} (CBC mode) is not supported, only AEAD suites are: {supported}", supported = supported_cipher_suite_names())]
    Unsupported(String),
    /// A name Go does not know.
    #[error("unknown cipher suite {0:?}; supported: {supported}", supported = supported_cipher_suite_names())]
    Unknown(String),
}

/// Checks one `--tls-cipher-suites` name; the error says why it is refused. Usable as a
/// clap value parser, so a bad flag fails before anything starts.
pub fn parse_cipher_suite(name: &str) -> Result<String, CipherSuiteError> {
    let name = name.trim();
    match CIPHER_SUITES.iter().find(|(n, _)| *n == name) {
        Some((_, SuiteName::Tls12(_) | SuiteName::Tls13)) => Ok(name.to_string()),
        Some((_, SuiteName::Insecure)) => Err(CipherSuiteError::Insecure(name.to_string())),
        Some((_, SuiteName::Unsupported)) => Err(CipherSuiteError::Unsupported(name.to_string())),
        None => Err(CipherSuiteError::Unknown(name.to_string())),
    }
}

/// The TLS knobs of the secure port: `--tls-min-version` and `--tls-cipher-suites`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// The lowest protocol version accepted.
    pub min_version: TlsVersion,
    /// Go/IANA names of the TLS 1.2 cipher suites to enable; empty means all of the crypto
    /// provider's. TLS 1.3 names are accepted and ignored: TLS 1.3 suites are always on,
    /// as in Go.
    pub cipher_suites: Vec<String>,
}

impl TlsSettings {
    /// The crypto provider for these settings: the process default with its TLS 1.2 suites
    /// cut down to `cipher_suites` (in the order given).
    pub fn provider(&self) -> Result<Arc<CryptoProvider>, TlsError> {
        let base = crypto_provider();
        if self.cipher_suites.is_empty() {
            return Ok(base);
        }
        let mut suites: Vec<SupportedCipherSuite> = base
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_some())
            .copied()
            .collect();
        for name in &self.cipher_suites {
            parse_cipher_suite(name)
                .map_err(|e| TlsError::Invalid(format!("--tls-cipher-suites: {e}")))?;
            let Some((_, SuiteName::Tls12(id))) =
                CIPHER_SUITES.iter().find(|(n, _)| *n == name.trim())
            else {
                continue; // A TLS 1.3 name: always on.
            };
            let found = base.cipher_suites.iter().find(|s| s.suite() == *id);
            match found {
                Some(suite) if !suites.contains(suite) => suites.push(*suite),
                Some(_) => {}
                None => {
                    return Err(TlsError::Invalid(format!(
                        "--tls-cipher-suites: {name} is not offered by the crypto provider"
                    )));
                }
            }
        }
        Ok(Arc::new(CryptoProvider {
            cipher_suites: suites,
            ..(*base).clone()
        }))
    }

    fn versions(&self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static TLS12_UP: [&rustls::SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self.min_version {
            TlsVersion::Tls12 => &TLS12_UP,
            TlsVersion::Tls13 => &TLS13_ONLY,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Client certificates
// ---------------------------------------------------------------------------------------

/// Go's `tls.RequestClientCert`: asks every client for a certificate, lets clients without
/// one in, and accepts any parsable chain whose key signed the handshake. Whether the chain
/// is trusted (CA, expiry, usage, X.509 version) is for the authenticators to decide, per
/// request: nothing else about a certificate ends the connection.
///
/// The handshake signature is checked with the certificate's SubjectPublicKeyInfo, not with
/// rustls' `verify_tls12_signature`/`verify_tls13_signature`: those parse the certificate
/// with webpki, which refuses every certificate but v3, so an X.509 v1 client certificate
/// (no extensions, as `openssl x509 -req -CA ...` makes) would end the handshake with a
/// `certificate_unknown` alert, where Go accepts it.
///
/// No CA names are hinted: a Go client offers its certificate only when it matches the
/// hints, so hints that lag behind a changed CA would make clients silently send none.
#[derive(Debug)]
pub struct RequestClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl RequestClientCert {
    /// A verifier checking handshake signatures with `provider`'s algorithms.
    pub fn new(provider: &CryptoProvider) -> Self {
        Self {
            algorithms: provider.signature_verification_algorithms,
        }
    }

    /// The algorithms a TLS 1.2 signature scheme maps to (never empty).
    fn algorithms_of(
        &self,
        scheme: SignatureScheme,
    ) -> Result<&'static [&'static dyn SignatureVerificationAlgorithm], rustls::Error> {
        self.algorithms
            .mapping
            .iter()
            .find(|(s, algs)| *s == scheme && !algs.is_empty())
            .map(|(_, algs)| *algs)
            .ok_or_else(|| PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into())
    }
}

/// A signature check's failure as rustls reports a bad certificate.
fn certificate_error(e: SignatureError) -> rustls::Error {
    rustls::Error::InvalidCertificate(match e {
        SignatureError::BadEncoding => CertificateError::BadEncoding,
        SignatureError::UnsupportedAlgorithm => {
            CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext {
                signature_algorithm_id: Vec::new(),
                public_key_algorithm_id: Vec::new(),
            }
        }
        SignatureError::Invalid => CertificateError::BadSignature,
        _ => CertificateError::BadSignature,
    })
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // As Go does, refuse certificates that do not even parse; trust is decided later.
        for cert in std::iter::once(end_entity).chain(intermediates) {
            if x509_parser::parse_x509_certificate(cert).is_err() {
                return Err(rustls::Error::InvalidCertificate(
                    CertificateError::BadEncoding,
                ));
            }
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // TLS 1.2 schemes do not name the curve: every algorithm of the scheme is a candidate.
        let candidates = self.algorithms_of(dss.scheme)?;
        let key = PublicKey::of_certificate(cert).map_err(certificate_error)?;
        key.verify(candidates, message, dss.signature())
            .map_err(certificate_error)?;
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // webpki's raw-key check takes the key alone, so any certificate version will do.
        let spki = spki_of(cert).map_err(certificate_error)?;
        rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(spki),
            dss,
            &self.algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

// ---------------------------------------------------------------------------------------
// Server configs
// ---------------------------------------------------------------------------------------

/// The server TLS configuration with a fixed serving certificate and default
/// [`TlsSettings`] (TLS 1.2 and 1.3, every AEAD suite), ALPN `h2` and `http/1.1`.
///
/// When `client_ca` is given, client certificates are requested (see
/// [`RequestClientCert`]); the bundle must hold a usable CA, but chains are verified against
/// it by the authenticators, not here. A client without a certificate is still let in (it may
/// use a token, or be anonymous). With `None` no client certificate is asked for.
pub fn server_config(
    serving: &CertKey,
    client_ca: Option<&[CertificateDer<'static>]>,
) -> Result<Arc<ServerConfig>, TlsError> {
    if let Some(cas) = client_ca {
        root_store(cas)?;
    }
    let settings = TlsSettings::default();
    let certificate = ServingCertificate::new(serving, &settings.provider()?)?;
    server_config_with(Arc::new(certificate), client_ca.is_some(), &settings)
}

/// The server TLS configuration: the certificate `resolver` gives for each handshake (e.g.
/// a reloading [`ServingCertificate`]), the protocol versions and cipher suites of
/// `settings`, ALPN `h2` and `http/1.1`, and, with `request_client_certs`, client
/// certificates requested as [`RequestClientCert`] does.
pub fn server_config_with(
    resolver: Arc<dyn ResolvesServerCert>,
    request_client_certs: bool,
    settings: &TlsSettings,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = settings.provider()?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(settings.versions())?;
    let builder = if request_client_certs {
        builder.with_client_cert_verifier(Arc::new(RequestClientCert::new(&provider)))
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_use_go_names() {
        assert_eq!("VersionTLS12".parse(), Ok(TlsVersion::Tls12));
        assert_eq!("VersionTLS13".parse(), Ok(TlsVersion::Tls13));
        let old = "VersionTLS11".parse::<TlsVersion>().unwrap_err();
        assert!(old.to_string().contains("not supported"), "{old}");
        assert!("TLS1.2".parse::<TlsVersion>().is_err());
        assert_eq!(TlsVersion::default().to_string(), "VersionTLS12");
    }

    #[test]
    fn cipher_suite_names_are_checked() {
        assert!(parse_cipher_suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").is_ok());
        assert!(parse_cipher_suite("TLS_AES_128_GCM_SHA256").is_ok());
        let insecure = parse_cipher_suite("TLS_RSA_WITH_RC4_128_SHA")
            .unwrap_err()
            .to_string();
        assert!(insecure.contains("insecure"), "{insecure}");
        let cbc = parse_cipher_suite("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA")
            .unwrap_err()
            .to_string();
        assert!(cbc.contains("not supported"), "{cbc}");
        let unknown = parse_cipher_suite("TLS_FANCY").unwrap_err().to_string();
        assert!(unknown.contains("unknown"), "{unknown}");
    }

    #[test]
    fn every_configurable_suite_exists_in_ring() {
        let ring = rustls::crypto::ring::default_provider();
        for (name, kind) in CIPHER_SUITES {
            if let SuiteName::Tls12(id) = kind {
                assert!(
                    ring.cipher_suites.iter().any(|s| s.suite() == *id),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn chosen_suites_replace_tls12_ones_and_keep_tls13() {
        let settings = TlsSettings {
            min_version: TlsVersion::Tls12,
            cipher_suites: vec![
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".into(),
                "TLS_AES_128_GCM_SHA256".into(),
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305".into(),
            ],
        };
        let provider = settings.provider().unwrap();
        let tls12: Vec<_> = provider
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_none())
            .map(|s| s.suite())
            .collect();
        assert_eq!(
            tls12,
            [
                CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
                CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
            ]
        );
        assert!(provider.cipher_suites.iter().any(|s| s.tls13().is_some()));
        let bad = TlsSettings {
            cipher_suites: vec!["TLS_RSA_WITH_AES_128_CBC_SHA".into()],
            ..TlsSettings::default()
        };
        assert!(bad.provider().is_err());
    }
}
