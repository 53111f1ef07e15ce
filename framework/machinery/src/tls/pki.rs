//! Certificates made inside a test: CAs, client certificates (valid, expired, of another CA)
//! and serving certificates for 127.0.0.1, as the front-proxy, client and serving CAs of a
//! cluster would issue them.
//!
//! ```
//! use extension_apiserver_machinery::tls::pki::TestCa;
//! let front_proxy = TestCa::new("front-proxy-ca");
//! let aggregator = front_proxy.client("front-proxy-client", &[]);
//! assert!(aggregator.cert_pem.contains("BEGIN CERTIFICATE"));
//! ```

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::tls::certs::{ca_params, set_validity};

const DAY: i64 = 24 * 60 * 60;

/// A certificate and its key, both PEM.
#[derive(Debug, Clone)]
pub struct TestCert {
    /// The certificate (a serving certificate is followed by its CA).
    pub cert_pem: String,
    /// The private key.
    pub key_pem: String,
}

impl TestCert {
    /// Writes `{stem}.crt` and `{stem}.key` into `dir`; returns their paths.
    pub fn write(
        &self,
        dir: &std::path::Path,
        stem: &str,
    ) -> (std::path::PathBuf, std::path::PathBuf) {
        std::fs::create_dir_all(dir).expect("create certificate directory");
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write certificate");
        std::fs::write(&key, &self.key_pem).expect("write key");
        (cert, key)
    }

    /// The certificate and key concatenated, as reqwest-style identities want them.
    pub fn identity_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }
}

/// A certificate authority of a test.
pub struct TestCa {
    /// The CA certificate in PEM: what goes into `--client-ca-file`, a ConfigMap or a
    /// `caBundle`.
    pub cert_pem: String,
    /// The CA's private key in PEM (e.g. to plant the CA in a server's `--cert-dir`).
    pub key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new self-signed CA whose common name starts with `name` (made unique, since
    /// verifiers find issuers by name).
    pub fn new(name: &str) -> Self {
        let cn = format!("{name}@{:016x}", rand::random::<u64>());
        let params = ca_params(&cn, now() - DAY, now() + 365 * DAY).expect("CA params");
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("self-signed CA");
        Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A client certificate with common name `cn` (the user) and organizations `groups`,
    /// valid from yesterday for a year.
    pub fn client(&self, cn: &str, groups: &[&str]) -> TestCert {
        self.client_valid(cn, groups, now() - DAY, now() + 365 * DAY)
    }

    /// A client certificate that expired yesterday.
    pub fn expired_client(&self, cn: &str, groups: &[&str]) -> TestCert {
        self.client_valid(cn, groups, now() - 30 * DAY, now() - DAY)
    }

    fn client_valid(&self, cn: &str, groups: &[&str], from: i64, until: i64) -> TestCert {
        let mut params = leaf_params(Vec::new());
        params.distinguished_name.push(DnType::CommonName, cn);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        set_validity(&mut params, from, until);
        self.sign(params, false)
    }

    /// A serving certificate for `hosts` (DNS names or IPs), followed by this CA.
    pub fn serving(&self, hosts: &[&str]) -> TestCert {
        let mut params = leaf_params(hosts.iter().map(|h| h.to_string()).collect());
        params
            .distinguished_name
            .push(DnType::CommonName, "serving");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        set_validity(&mut params, now() - DAY, now() + 365 * DAY);
        self.sign(params, true)
    }

    fn sign(&self, params: CertificateParams, with_ca: bool) -> TestCert {
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        let mut cert_pem = cert.pem();
        if with_ca {
            cert_pem.push_str(&self.cert_pem);
        }
        TestCert {
            cert_pem,
            key_pem: key.serialize_pem(),
        }
    }
}

fn leaf_params(hosts: Vec<String>) -> CertificateParams {
    let mut params = CertificateParams::new(hosts).expect("leaf params");
    params.distinguished_name = DistinguishedName::new();
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}
