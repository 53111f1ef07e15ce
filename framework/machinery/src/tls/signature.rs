//! Signatures checked with the public key of a certificate of any X.509 version.
//!
//! rustls' helpers (`verify_tls12_signature` and the rest) parse the certificate with webpki,
//! which takes only v3 certificates. A v1 certificate (no extensions: what
//! `openssl x509 -req -CA ...` makes by default) has a SubjectPublicKeyInfo all the same, and
//! that is all a signature check needs. The handshake checks a client's CertificateVerify with
//! it, and the client-certificate authenticator a v1 leaf's signature by its issuer, with the
//! crypto provider's algorithms either way.

use rustls::pki_types::{CertificateDer, SignatureVerificationAlgorithm};
use x509_parser::asn1_rs::{Any, FromDer, Tag};

/// Why a signature was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The key or certificate is not the DER it should be.
    #[error("malformed key or certificate")]
    BadEncoding,
    /// None of the algorithms fits the key (or the signature algorithm is not supported).
    #[error("unsupported signature algorithm")]
    UnsupportedAlgorithm,
    /// The signature does not verify.
    #[error("invalid signature")]
    Invalid,
}

/// A SubjectPublicKeyInfo taken apart: what `SignatureVerificationAlgorithm` needs.
pub struct PublicKey<'a> {
    /// The contents of its AlgorithmIdentifier (no SEQUENCE header), as
    /// `SignatureVerificationAlgorithm::public_key_alg_id` gives them.
    algorithm: &'a [u8],
    /// The key: the BIT STRING's bytes.
    key: &'a [u8],
}

impl<'a> PublicKey<'a> {
    /// Takes apart a DER SubjectPublicKeyInfo.
    pub fn from_spki(spki: &'a [u8]) -> Result<Self, SignatureError> {
        let elements = sequence_elements(spki)?;
        let [algorithm, bits] = elements.as_slice() else {
            return Err(SignatureError::BadEncoding);
        };
        if algorithm.tag() != Tag::Sequence || bits.tag() != Tag::BitString {
            return Err(SignatureError::BadEncoding);
        }
        // A key is a whole number of bytes: no unused bits.
        match bits.data.split_first() {
            Some((0, key)) => Ok(Self {
                algorithm: algorithm.data,
                key,
            }),
            _ => Err(SignatureError::BadEncoding),
        }
    }

    /// The public key of a DER certificate of any version.
    pub fn of_certificate(cert: &'a CertificateDer<'_>) -> Result<Self, SignatureError> {
        Self::from_spki(spki_of(cert)?)
    }

    /// Verifies `signature` over `message`: it holds when one of `candidates` made for this
    /// key's type verifies it. Candidates for other key types are skipped, as webpki skips
    /// them (a TLS 1.2 ECDSA scheme, say, maps to one algorithm per curve).
    pub fn verify<'c>(
        &self,
        candidates: impl IntoIterator<Item = &'c &'static dyn SignatureVerificationAlgorithm>,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), SignatureError> {
        let mut fitting = candidates
            .into_iter()
            .filter(|alg| alg.public_key_alg_id().as_ref() == self.algorithm)
            .peekable();
        if fitting.peek().is_none() {
            return Err(SignatureError::UnsupportedAlgorithm);
        }
        if fitting.any(|alg| alg.verify_signature(self.key, message, signature).is_ok()) {
            Ok(())
        } else {
            Err(SignatureError::Invalid)
        }
    }
}

/// The DER SubjectPublicKeyInfo of a DER certificate of any version.
pub fn spki_of<'a>(cert: &'a CertificateDer<'_>) -> Result<&'a [u8], SignatureError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|_| SignatureError::BadEncoding)?;
    Ok(parsed.tbs_certificate.subject_pki.raw)
}

/// The contents of a certificate's outer signatureAlgorithm (no SEQUENCE header), as
/// `SignatureVerificationAlgorithm::signature_alg_id` gives them.
pub fn signature_algorithm(cert: &[u8]) -> Result<&[u8], SignatureError> {
    match sequence_elements(cert)?.as_slice() {
        [_, algorithm, _] if algorithm.tag() == Tag::Sequence => Ok(algorithm.data),
        _ => Err(SignatureError::BadEncoding),
    }
}

/// The elements of the DER SEQUENCE that is all of `der`.
fn sequence_elements(der: &[u8]) -> Result<Vec<Any<'_>>, SignatureError> {
    let (rest, sequence) = Any::from_der(der).map_err(|_| SignatureError::BadEncoding)?;
    if !rest.is_empty() || sequence.tag() != Tag::Sequence {
        return Err(SignatureError::BadEncoding);
    }
    let mut elements = Vec::new();
    let mut input = sequence.data;
    while !input.is_empty() {
        let (rest, element) = Any::from_der(input).map_err(|_| SignatureError::BadEncoding)?;
        elements.push(element);
        input = rest;
    }
    Ok(elements)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::pki::TestCa;

    #[test]
    fn keys_of_any_certificate_and_their_failures() {
        let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        // rcgen's CA is a v3 ECDSA P-256 certificate, self-signed.
        let ca = crate::tls::certs::parse_certs_pem(TestCa::new("ca").cert_pem.as_bytes())
            .unwrap()
            .remove(0);
        let key = PublicKey::of_certificate(&ca).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&ca).unwrap();
        let signed_with = signature_algorithm(&ca).unwrap();
        let fitting = algorithms
            .all
            .iter()
            .filter(|a| a.signature_alg_id().as_ref() == signed_with);
        let tbs = parsed.tbs_certificate.as_ref();
        let signature = &parsed.signature_value.data;
        assert_eq!(key.verify(fitting.clone(), tbs, signature), Ok(()));
        assert_eq!(
            key.verify(fitting, &tbs[1..], signature),
            Err(SignatureError::Invalid)
        );
        let other_keys: Vec<_> = algorithms
            .all
            .iter()
            .filter(|a| a.public_key_alg_id().as_ref() != key.algorithm)
            .collect();
        assert!(!other_keys.is_empty());
        assert_eq!(
            key.verify(other_keys.into_iter(), tbs, signature),
            Err(SignatureError::UnsupportedAlgorithm)
        );
        assert_eq!(
            PublicKey::from_spki(b"\x30\x00").err(),
            Some(SignatureError::BadEncoding)
        );
    }
}
