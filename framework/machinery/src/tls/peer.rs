//! The client certificate chain of a connection, as the handshake saw it.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};

/// The client's certificate chain (leaf first) as presented during the TLS handshake, in the
/// extensions of every request of a connection that presented one.
///
/// The handshake only proves that the client holds the leaf's key (see
/// `server::tls::RequestClientCert`): the chain is *not* verified
/// against any CA. Authenticators must check it against their own CA (see
/// the server's `X509Authenticator`).
///
/// It also carries the chain's digest, taken once per connection: the authenticators cache
/// their verdicts by it, and hashing the chain again for every request of a connection cost
/// about a microsecond each time.
#[derive(Debug, Clone)]
pub struct PeerCertificates(Arc<PeerChain>);

#[derive(Debug)]
struct PeerChain {
    chain: Vec<CertificateDer<'static>>,
    digest: [u8; 32],
}

impl PeerCertificates {
    /// The chain a client presented, leaf first.
    pub fn new(chain: Vec<CertificateDer<'static>>) -> Self {
        let digest = chain_digest(&chain);
        Self(Arc::new(PeerChain { chain, digest }))
    }

    /// The chain, leaf first.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.0.chain
    }

    /// SHA-256 over the whole chain (each certificate's length, then its bytes).
    pub fn digest(&self) -> &[u8; 32] {
        &self.0.digest
    }
}

/// SHA-256 over the whole chain: two chains with the same leaf but different intermediates
/// must not share a verdict.
pub fn chain_digest(chain: &[CertificateDer<'_>]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for cert in chain {
        hasher.update((cert.len() as u64).to_be_bytes());
        hasher.update(cert.as_ref());
    }
    hasher.finalize().into()
}
