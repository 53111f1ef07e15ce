//! Client-certificate chains whose leaf is an X.509 v1 certificate, which webpki refuses
//! outright (it parses nothing but v3 end-entity certificates). `openssl x509 -req -CA ...`
//! makes such leaves by default, and so do most "create a Kubernetes user" guides.
//!
//! Go's `x509.Verify`, which `k8s.io/apiserver`'s x509 authenticator calls with
//! `ExtKeyUsageClientAuth`, takes them: a v1 certificate has no extensions, so no extended key
//! usage (Go reads that as any usage) and no basicConstraints (which only issuers need). This
//! module does Go's checks for that case and nothing more: the leaf within its validity, a
//! path through the presented intermediates to a CA of the bundle, each link's names and
//! signature (with the crypto provider's algorithms, so no SHA-1), and on each issuer what
//! Go's `isValid` and `checkChainForKeyUsage` look at: no unhandled critical extension,
//! validity, basicConstraints CA for intermediates, path length, extended key usage. Name
//! constraints cannot bite: a v1 leaf has no subject alternative names. Chains with a v3 leaf
//! stay with webpki.

use rustls::pki_types::{CertificateDer, SignatureVerificationAlgorithm};
use x509_parser::certificate::X509Certificate;
use x509_parser::x509::X509Version;

use super::chain::ChainError;
use crate::tls::signature::{PublicKey, signature_algorithm};

/// Most intermediates a path may have (Go has no limit but the signature budget below).
const MAX_INTERMEDIATES: usize = 8;
/// Most signatures checked for one chain, as webpki's budget, so that a client sending many
/// look-alike intermediates cannot make path building expensive.
const MAX_SIGNATURE_CHECKS: usize = 100;

/// Whether `leaf` is a certificate webpki cannot take as an end entity: below v3.
pub(crate) fn is_legacy(leaf: &X509Certificate<'_>) -> bool {
    leaf.version() != X509Version::V3
}

/// Verifies chains whose leaf is below v3 against a CA bundle, as Go does.
#[derive(Debug)]
pub(crate) struct LegacyLeafVerifier {
    roots: Vec<CertificateDer<'static>>,
    algorithms: &'static [&'static dyn SignatureVerificationAlgorithm],
}

impl LegacyLeafVerifier {
    /// A verifier trusting `roots`, checking signatures with `algorithms` (the crypto
    /// provider's, as webpki uses for v3 chains).
    pub(crate) fn new(
        roots: &[CertificateDer<'static>],
        algorithms: &'static [&'static dyn SignatureVerificationAlgorithm],
    ) -> Self {
        Self {
            roots: roots.to_vec(),
            algorithms,
        }
    }

    /// Verifies `leaf` (already parsed) and `intermediates` at unix time `now`; the error
    /// reads as Go's.
    pub(crate) fn verify(
        &self,
        leaf: &X509Certificate<'_>,
        intermediates: &[CertificateDer<'_>],
        now: i64,
    ) -> Result<(), ChainError> {
        check_validity(leaf, now)?;
        // The bundle was checked when the authenticator was made; a root that does not
        // parse as x509-parser sees it simply issues nothing.
        let roots: Vec<_> = self.roots.iter().filter_map(|c| parse(c).ok()).collect();
        let intermediates = intermediates
            .iter()
            .map(|c| parse(c))
            .collect::<Result<Vec<_>, _>>()?;
        let mut search = PathSearch {
            roots: &roots,
            intermediates: &intermediates,
            algorithms: self.algorithms,
            now,
            budget: MAX_SIGNATURE_CHECKS,
            hint: None,
        };
        if search.reaches_root(leaf, &mut Vec::new()) {
            return Ok(());
        }
        Err(search.hint.unwrap_or(ChainError::UnknownAuthority))
    }
}

fn parse<'a>(der: &'a CertificateDer<'_>) -> Result<X509Certificate<'a>, ChainError> {
    x509_parser::parse_x509_certificate(der.as_ref())
        .map(|(_, cert)| cert)
        .map_err(ChainError::Malformed)
}

/// A depth-first search for a path from a leaf to a root, as Go's `buildChains`.
struct PathSearch<'s, 'c> {
    roots: &'s [X509Certificate<'c>],
    intermediates: &'s [X509Certificate<'c>],
    algorithms: &'static [&'static dyn SignatureVerificationAlgorithm],
    now: i64,
    budget: usize,
    /// Why the last issuer that signed a link was refused: Go reports that rather than
    /// "unknown authority" when no path is left.
    hint: Option<ChainError>,
}

impl PathSearch<'_, '_> {
    /// Whether `child` chains to a root; `path` holds the intermediates (their indexes)
    /// between the leaf and `child`, `child` included.
    fn reaches_root(&mut self, child: &X509Certificate<'_>, path: &mut Vec<usize>) -> bool {
        for root in self.roots {
            if self.issued(child, root) && self.acceptable(root, Role::Root, path.len()) {
                return true;
            }
        }
        if path.len() >= MAX_INTERMEDIATES {
            return false;
        }
        for (i, candidate) in self.intermediates.iter().enumerate() {
            if path.contains(&i)
                || !self.issued(child, candidate)
                || !self.acceptable(candidate, Role::Intermediate, path.len())
            {
                continue;
            }
            path.push(i);
            if self.reaches_root(candidate, path) {
                return true;
            }
            path.pop();
        }
        false
    }

    /// Whether `issuer`'s subject is `child`'s issuer and its key signed `child`.
    fn issued(&mut self, child: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> bool {
        if child.issuer().as_raw() != issuer.subject().as_raw() || self.budget == 0 {
            return false;
        }
        self.budget -= 1;
        let signed = check_signature(child, issuer, self.algorithms);
        if let Err(e) = &signed {
            self.hint = Some(e.clone());
        }
        signed.is_ok()
    }

    fn acceptable(&mut self, issuer: &X509Certificate<'_>, role: Role, below: usize) -> bool {
        let checked = check_issuer(issuer, role, below, self.now);
        if let Err(e) = &checked {
            self.hint = Some(e.clone());
        }
        checked.is_ok()
    }
}

/// Where an issuer sits in a path: Go requires the CA flag of intermediates only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Intermediate,
    Root,
}

/// `child`'s signature by `issuer`'s key, with an algorithm of `algorithms` naming the
/// child's signatureAlgorithm and fitting the issuer's key.
fn check_signature(
    child: &X509Certificate<'_>,
    issuer: &X509Certificate<'_>,
    algorithms: &'static [&'static dyn SignatureVerificationAlgorithm],
) -> Result<(), ChainError> {
    let refused = |source| ChainError::Signature {
        subject: child.subject().to_string(),
        source,
    };
    let signed_with = signature_algorithm(child.as_raw()).map_err(refused)?;
    let key = PublicKey::from_spki(issuer.public_key().raw).map_err(refused)?;
    let candidates = algorithms
        .iter()
        .filter(|alg| alg.signature_alg_id().as_ref() == signed_with);
    key.verify(
        candidates,
        child.tbs_certificate.as_ref(),
        &child.signature_value.data,
    )
    .map_err(refused)
}

/// Go's `isValid` for an issuer of the path, and `checkChainForKeyUsage` for client auth.
fn check_issuer(
    cert: &X509Certificate<'_>,
    role: Role,
    below: usize,
    now: i64,
) -> Result<(), ChainError> {
    check_critical_extensions(cert)?;
    check_validity(cert, now)?;
    let constraints = cert
        .basic_constraints()
        .map_err(|e| bad_extension(cert, "basicConstraints", e))?
        .map(|ext| ext.value);
    if role == Role::Intermediate && !constraints.is_some_and(|c| c.ca) {
        return Err(ChainError::NotAuthorizedToSign);
    }
    let max_path_len = constraints.and_then(|c| c.path_len_constraint);
    if max_path_len.is_some_and(|max| below > max as usize) {
        return Err(ChainError::TooManyIntermediates);
    }
    let usage = cert
        .extended_key_usage()
        .map_err(|e| bad_extension(cert, "extKeyUsage", e))?;
    if usage.is_some_and(|u| !u.value.any && !u.value.client_auth) {
        return Err(ChainError::IncompatibleKeyUsage);
    }
    Ok(())
}

/// Go's validity check: `now` within notBefore..=notAfter.
fn check_validity(cert: &X509Certificate<'_>, now: i64) -> Result<(), ChainError> {
    let validity = cert.validity();
    let (not_before, not_after) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    if now < not_before || now > not_after {
        return Err(ChainError::OutsideValidity {
            now,
            not_before,
            not_after,
        });
    }
    Ok(())
}

fn bad_extension(
    cert: &X509Certificate<'_>,
    extension: &'static str,
    source: x509_parser::error::X509Error,
) -> ChainError {
    ChainError::BadExtension {
        subject: cert.subject().to_string(),
        extension,
        source,
    }
}

/// Extensions Go's `crypto/x509` understands, so a critical one is no reason to refuse:
/// subjectKeyIdentifier, keyUsage, subjectAltName, basicConstraints, nameConstraints,
/// cRLDistributionPoints, certificatePolicies, policyMappings, authorityKeyIdentifier,
/// policyConstraints, extKeyUsage, inhibitAnyPolicy, authorityInfoAccess.
const HANDLED_EXTENSIONS: [&str; 13] = [
    "2.5.29.14",
    "2.5.29.15",
    "2.5.29.17",
    "2.5.29.19",
    "2.5.29.30",
    "2.5.29.31",
    "2.5.29.32",
    "2.5.29.33",
    "2.5.29.35",
    "2.5.29.36",
    "2.5.29.37",
    "2.5.29.54",
    "1.3.6.1.5.5.7.1.1",
];

fn check_critical_extensions(cert: &X509Certificate<'_>) -> Result<(), ChainError> {
    let unhandled = cert
        .extensions()
        .iter()
        .filter(|ext| ext.critical)
        .map(|ext| ext.oid.to_id_string())
        .find(|oid| !HANDLED_EXTENSIONS.contains(&oid.as_str()));
    match unhandled {
        Some(oid) => Err(ChainError::UnhandledCriticalExtension(oid)),
        None => Ok(()),
    }
}
