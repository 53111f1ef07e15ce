//! Why a client certificate's chain does not verify, whichever verifier (webpki for v3
//! leaves, [`x509_v1`](super::x509_v1) for older ones) refused it.

/// Why a certificate chain does not verify; the texts read as Go's `crypto/x509`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// webpki's verdict on a chain with an X.509 v3 leaf.
    #[error("{0}")]
    Webpki(#[source] rustls::Error),
    /// A certificate of the chain does not parse.
    #[error("x509: malformed certificate: {0}")]
    Malformed(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
    /// A certificate is used outside its validity (unix seconds).
    #[error(
        "x509: certificate has expired or is not yet valid: current time {} is outside {}..{}",
        fmt_time(*now), fmt_time(*not_before), fmt_time(*not_after)
    )]
    OutsideValidity {
        /// When it was checked.
        now: i64,
        /// Its notBefore.
        not_before: i64,
        /// Its notAfter.
        not_after: i64,
    },
    /// No path leads to a CA of the bundle.
    #[error("x509: certificate signed by unknown authority")]
    UnknownAuthority,
    /// An intermediate is not a CA.
    #[error("x509: certificate is not authorized to sign other certificates")]
    NotAuthorizedToSign,
    /// An issuer's pathLenConstraint is exceeded.
    #[error("x509: too many intermediates for path length constraint")]
    TooManyIntermediates,
    /// An issuer's extended key usage excludes client authentication.
    #[error("x509: certificate specifies an incompatible key usage")]
    IncompatibleKeyUsage,
    /// A critical extension Go's `crypto/x509` does not handle (its OID).
    #[error("x509: unhandled critical extension {0}")]
    UnhandledCriticalExtension(String),
    /// An extension of a certificate does not parse.
    #[error("x509: {subject}: {extension}: {source}")]
    BadExtension {
        /// The certificate's subject.
        subject: String,
        /// The extension's name.
        extension: &'static str,
        /// What the parser said.
        #[source]
        source: x509_parser::error::X509Error,
    },
    /// A certificate's signature by its issuer does not verify.
    #[error("x509: signature of {subject} by its issuer: {source}")]
    Signature {
        /// The signed certificate's subject.
        subject: String,
        /// Why the signature was refused.
        #[source]
        source: crate::tls::SignatureError,
    },
}

/// A unix time as RFC 3339, as Go prints times in x509 errors.
fn fmt_time(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| secs.to_string())
}
