//! Client-certificate authentication: the TLS layer puts the peer's certificate chain in the
//! request extensions ([`PeerCertificates`]); this authenticator verifies it against the
//! client CA and maps it to a user as kube's `CommonNameUserConversion` does (CN → name,
//! O → groups).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use x509_parser::certificate::X509Certificate;

use super::chain::ChainError;
use super::x509_v1::{LegacyLeafVerifier, is_legacy};
use super::{AuthError, Authenticator, user::UserInfo};
use crate::tls::{PeerCertificates, chain_digest};
use crate::tls::{TlsError, crypto_provider};

/// Why a client certificate was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// The leaf is not an X.509 certificate.
    #[error("parsing certificate: {0}")]
    Parse(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
    /// The chain does not verify against the CA bundle.
    #[error("verifying certificate: {0}")]
    Verify(#[source] ChainError),
    /// A front proxy's certificate verified, but its common name is not an allowed one.
    #[error("x509: subject with cn={common_name} is not in the allowed list")]
    NotAllowed {
        /// The certificate's common name.
        common_name: String,
    },
}

/// How long a verified chain is trusted without re-verifying, so an HTTP/2 connection's
/// thousands of requests cost one signature check, while a replaced CA takes effect soon.
const CACHE_TTL_SECS: i64 = 60;
/// Bound on cached chains; past it the cache is simply cleared (misses only cost a verify).
const CACHE_MAX_ENTRIES: usize = 4096;

/// A verified user and the unix time until which it may be served from the cache.
#[derive(Clone)]
struct CachedUser {
    user: Option<UserInfo>,
    valid_until: i64,
}

/// Authenticates requests by their verified client certificate.
///
/// It verifies the chain against its own CA bundle: the TLS layer requests any client
/// certificate and only proves the client holds its key (as Go's `tls.RequestClientCert`), so
/// the chain's trust, expiry included, is decided here, and only the client CA may assert
/// arbitrary user names. X.509 v1 leaves (no extensions) are accepted as Go accepts them.
pub struct X509Authenticator {
    verifier: Arc<dyn ClientCertVerifier>,
    legacy: LegacyLeafVerifier,
    cache: Mutex<HashMap<[u8; 32], CachedUser>>,
}

impl std::fmt::Debug for X509Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X509Authenticator").finish_non_exhaustive()
    }
}

impl X509Authenticator {
    /// An authenticator trusting the given client CA certificates.
    pub fn new(client_ca: &[CertificateDer<'static>]) -> Result<Self, TlsError> {
        let roots = crate::tls::root_store(client_ca)?;
        let provider = crypto_provider();
        let legacy =
            LegacyLeafVerifier::new(client_ca, provider.signature_verification_algorithms.all);
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| TlsError::Invalid(format!("client CA: {e}")))?;
        Ok(Self {
            verifier,
            legacy,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// An authenticator trusting the CA certificates of a PEM bundle.
    pub fn from_pem(client_ca_pem: &[u8]) -> Result<Self, TlsError> {
        Self::new(&crate::tls::certs::parse_certs_pem(client_ca_pem)?)
    }

    /// Verifies a chain (leaf first) and maps it to a user; `Ok(None)` if the leaf has no CN.
    pub fn authenticate_chain(
        &self,
        chain: &[CertificateDer<'static>],
    ) -> Result<Option<UserInfo>, AuthError> {
        self.authenticate_digested(chain, chain_digest(chain))
    }

    /// [`X509Authenticator::authenticate_chain`] of a connection's chain, whose digest was
    /// taken once for the connection.
    pub fn authenticate_peer(
        &self,
        peer: &PeerCertificates,
    ) -> Result<Option<UserInfo>, AuthError> {
        self.authenticate_digested(peer.chain(), *peer.digest())
    }

    /// What `read` makes of the user of a connection's verified chain, without a copy of
    /// the user when the verdict is cached (a front proxy's certificate is only checked,
    /// its user is not the request's).
    pub(crate) fn read_peer<R>(
        &self,
        peer: &PeerCertificates,
        read: impl FnOnce(Option<&UserInfo>) -> R,
    ) -> Result<R, AuthError> {
        self.read_digested(peer.chain(), *peer.digest(), read)
    }

    fn authenticate_digested(
        &self,
        chain: &[CertificateDer<'static>],
        key: [u8; 32],
    ) -> Result<Option<UserInfo>, AuthError> {
        self.read_digested(chain, key, |user| user.cloned())
    }

    fn read_digested<R>(
        &self,
        chain: &[CertificateDer<'static>],
        key: [u8; 32],
        read: impl FnOnce(Option<&UserInfo>) -> R,
    ) -> Result<R, AuthError> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Ok(read(None));
        };
        let now = jiff::Timestamp::now().as_second();
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(hit) = cache.get(&key).filter(|c| c.valid_until > now) {
                return Ok(read(hit.user.as_ref()));
            }
        }
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| AuthError::InvalidCertificate(CertificateError::Parse(e)))?;
        self.verify(leaf, &parsed, intermediates, now)
            .map_err(|e| AuthError::InvalidCertificate(CertificateError::Verify(e)))?;
        let (user, not_after) = user_from_certificate(&parsed);
        let read = read(user.as_ref());
        self.remember(key, user, not_after.min(now + CACHE_TTL_SECS));
        Ok(read)
    }

    /// webpki verifies chains with a v3 leaf; it refuses v1 leaves outright, which Go (and so
    /// kube-apiserver) accepts, so those go to [`LegacyLeafVerifier`].
    fn verify(
        &self,
        leaf: &CertificateDer<'static>,
        parsed: &X509Certificate<'_>,
        intermediates: &[CertificateDer<'static>],
        now: i64,
    ) -> Result<(), ChainError> {
        if is_legacy(parsed) {
            return self.legacy.verify(parsed, intermediates, now);
        }
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(ChainError::Webpki)
    }

    fn remember(&self, key: [u8; 32], user: Option<UserInfo>, valid_until: i64) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_MAX_ENTRIES {
            cache.clear();
        }
        cache.insert(key, CachedUser { user, valid_until });
    }
}

#[async_trait]
impl Authenticator for X509Authenticator {
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError> {
        match parts.extensions.get::<PeerCertificates>() {
            Some(peer) => self.authenticate_peer(peer),
            None => Ok(None),
        }
    }
}

/// kube's `CommonNameUserConversion`: the subject's CN is the user name (the last one, as Go's
/// `pkix.Name` keeps), its O values are the groups; no CN means no user. Also returns the
/// leaf's expiry, which bounds how long the result may be cached.
fn user_from_certificate(cert: &X509Certificate<'_>) -> (Option<UserInfo>, i64) {
    let subject = cert.subject();
    let not_after = cert.validity().not_after.timestamp();
    let name = subject
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .last();
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return (None, not_after);
    };
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_string);
    let user = UserInfo::new(name, groups).with_authenticated_group();
    (Some(user), not_after)
}
