//! Serving certificates, before the first TLS accept: explicit `--tls-cert-file` /
//! `--tls-private-key-file`, or in standalone mode a self-signed set in `--cert-dir` (serving
//! CA and cert, client CA and an admin client cert, and a kubeconfig for kubectl). Once
//! serving, the pair's files are followed by `server::serving_cert::ServingCertificate`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::{self, PemObject as _};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;

use super::{TlsError, crypto_provider, root_store};

/// The group of the admin client certificate: kube's superuser group (`auth::user`'s
/// `SYSTEM_MASTERS`, which the standalone authorizer allows everything).
const SYSTEM_MASTERS: &str = "system:masters";

/// Serving certificate file in `--cert-dir` (leaf followed by its CA), named as in
/// k8s.io/apiserver.
pub const SERVING_CERT_FILE: &str = "apiserver.crt";
/// Serving key file in `--cert-dir`.
pub const SERVING_KEY_FILE: &str = "apiserver.key";
/// Name (without extension) of the CA that signs the serving certificate.
const SERVING_CA: &str = "serving-ca";
/// Name (without extension) of the CA whose client certificates authenticate users.
const CLIENT_CA: &str = "client-ca";
/// Name (without extension) of the admin client certificate.
const ADMIN: &str = "admin";
/// The kubeconfig written next to the certificates.
pub const KUBECONFIG_FILE: &str = "kubeconfig";

/// Hosts every self-signed serving certificate covers, so local clients always verify.
const DEFAULT_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
const DAY: i64 = 24 * 60 * 60;
/// CAs outlive many leaves, so rotating a leaf never invalidates a distributed CA bundle.
const CA_LIFETIME: i64 = 10 * 365 * DAY;
const LEAF_LIFETIME: i64 = 365 * DAY;
/// Certificates closer to expiry than this are renewed at start, before clients see failures.
const RENEW_BEFORE: i64 = 30 * DAY;

/// A certificate chain (leaf first) and its private key, ready for rustls.
#[derive(Debug)]
pub struct CertKey {
    /// The leaf certificate followed by any intermediates.
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for CertKey {
    fn clone(&self) -> Self {
        Self {
            cert_chain: self.cert_chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl CertKey {
    /// Parses a PEM certificate chain (leaf first) and a PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsError> {
        let cert_chain = parse_certs_pem(cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| match e {
            pem::Error::NoItemsFound => TlsError::Invalid("no private key in PEM data".into()),
            e => TlsError::Invalid(format!("private key: {e}")),
        })?;
        Ok(Self { cert_chain, key })
    }

    /// Loads `--tls-cert-file` and `--tls-private-key-file`.
    pub fn from_files(cert_file: &Path, key_file: &Path) -> Result<Self, TlsError> {
        Self::from_pem(&read(cert_file)?, &read(key_file)?)
            .map_err(|e| TlsError::Invalid(format!("{}: {e}", cert_file.display())))
    }
}

/// Parses every `CERTIFICATE` block of a PEM bundle; an empty bundle is an error.
pub fn parse_certs_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid(format!("certificate PEM: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::Invalid("no certificate in PEM data".into()));
    }
    Ok(certs)
}

/// Reads a PEM CA bundle file, e.g. `--client-ca-file`.
pub fn read_certs_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    parse_certs_pem(&read(path)?).map_err(|e| TlsError::Invalid(format!("{}: {e}", path.display())))
}

/// The standalone certificate set kept in `--cert-dir`.
///
/// The directory belongs to the framework: files that are missing, expired, about to expire,
/// not signed by the CA beside them or (for the serving certificate) not valid for every
/// requested host are regenerated; everything still good is reused, so clients that trust
/// the CAs keep working across restarts.
#[derive(Debug, Clone)]
pub struct SelfSignedCerts {
    dir: PathBuf,
    /// The serving certificate chain (leaf, serving CA) and key.
    pub serving: CertKey,
    /// The serving CA in PEM: the `caBundle` of an APIService, the kubeconfig's CA.
    pub serving_ca_pem: String,
    /// The client CA in PEM: the bundle client certificates are verified against.
    pub client_ca_pem: String,
    /// The admin client certificate (CN `admin`, O `system:masters`) in PEM.
    pub admin_cert_pem: String,
    /// The admin client key in PEM.
    pub admin_key_pem: String,
}

impl SelfSignedCerts {
    /// Loads the set from `cert_dir`, (re)generating what is missing or unusable. The serving
    /// certificate covers `localhost`, `127.0.0.1`, `::1` and `hosts` (DNS names or IPs).
    pub fn load_or_create(cert_dir: &Path, hosts: &[String]) -> Result<Self, TlsError> {
        std::fs::create_dir_all(cert_dir).map_err(|e| TlsError::io(cert_dir, e))?;
        let hosts = serving_hosts(hosts);
        let serving_ca = Ca::load_or_create(cert_dir, SERVING_CA)?;
        let serving = serving_ca.leaf(cert_dir, SERVING_KEY_FILE, &LeafKind::Serving(&hosts))?;
        let client_ca = Ca::load_or_create(cert_dir, CLIENT_CA)?;
        let admin = client_ca.leaf(cert_dir, &format!("{ADMIN}.key"), &LeafKind::Admin)?;
        Ok(Self {
            dir: cert_dir.to_path_buf(),
            serving: CertKey::from_pem(serving.cert_pem.as_bytes(), serving.key_pem.as_bytes())?,
            serving_ca_pem: serving_ca.pair.cert_pem,
            client_ca_pem: client_ca.pair.cert_pem,
            admin_cert_pem: admin.cert_pem,
            admin_key_pem: admin.key_pem,
        })
    }

    /// The certificate directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The serving CA certificates (DER), e.g. for a client's root store.
    pub fn serving_ca(&self) -> Vec<CertificateDer<'static>> {
        parse_certs_pem(self.serving_ca_pem.as_bytes()).unwrap_or_default()
    }

    /// The client CA certificates (DER), for the server's `X509Authenticator`.
    pub fn client_ca(&self) -> Vec<CertificateDer<'static>> {
        parse_certs_pem(self.client_ca_pem.as_bytes()).unwrap_or_default()
    }

    /// Writes `kubeconfig` in the certificate directory (0600: it holds the admin key):
    /// cluster `apiserver` at `https://127.0.0.1:{port}` trusting the serving CA, user `admin`
    /// with the admin client certificate, and context `apiserver` as the current context.
    pub fn write_kubeconfig(&self, port: u16) -> Result<PathBuf, TlsError> {
        let path = self.dir.join(KUBECONFIG_FILE);
        let yaml = serde_norway::to_string(&self.kubeconfig(port))
            .map_err(|e| TlsError::Invalid(format!("kubeconfig: {e}")))?;
        write_file(&path, yaml.as_bytes(), true)?;
        Ok(path)
    }

    fn kubeconfig(&self, port: u16) -> serde_json::Value {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "apiserver", "cluster": {
                "server": format!("https://127.0.0.1:{port}"),
                "certificate-authority-data": b64(&self.serving_ca_pem),
            }}],
            "users": [{"name": ADMIN, "user": {
                "client-certificate-data": b64(&self.admin_cert_pem),
                "client-key-data": b64(&self.admin_key_pem),
            }}],
            "contexts": [{"name": "apiserver", "context": {"cluster": "apiserver", "user": ADMIN}}],
            "current-context": "apiserver",
        })
    }
}

/// The default hosts followed by the requested ones, without duplicates or empty names.
fn serving_hosts(hosts: &[String]) -> Vec<String> {
    let mut all: Vec<String> = DEFAULT_HOSTS.iter().map(|h| h.to_string()).collect();
    for host in hosts.iter().map(|h| h.trim()) {
        if !host.is_empty() && !all.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            all.push(host.to_string());
        }
    }
    all
}

/// A certificate and key, both PEM, as stored on disk.
#[derive(Debug, Clone)]
struct Pair {
    cert_pem: String,
    key_pem: String,
}

impl Pair {
    /// Reads `{stem}.crt` / `{stem}.key`; `None` if either is missing or unreadable.
    fn load(dir: &Path, cert_file: &str, key_file: &str) -> Option<Self> {
        let cert_pem = std::fs::read_to_string(dir.join(cert_file)).ok()?;
        let key_pem = std::fs::read_to_string(dir.join(key_file)).ok()?;
        Some(Self { cert_pem, key_pem })
    }

    fn store(&self, dir: &Path, cert_file: &str, key_file: &str) -> Result<(), TlsError> {
        write_file(&dir.join(key_file), self.key_pem.as_bytes(), true)?;
        write_file(&dir.join(cert_file), self.cert_pem.as_bytes(), false)
    }
}

/// What a leaf certificate is for.
enum LeafKind<'a> {
    /// A serving certificate for these hosts.
    Serving(&'a [String]),
    /// The admin client certificate.
    Admin,
}

/// A CA loaded or created in the certificate directory, able to sign leaves.
struct Ca {
    pair: Pair,
    issuer: Issuer<'static, KeyPair>,
    not_after: i64,
    /// Set when the CA was just generated: leaves signed by a predecessor must be replaced.
    fresh: bool,
}

impl Ca {
    fn load_or_create(dir: &Path, stem: &str) -> Result<Self, TlsError> {
        let (crt, key) = (format!("{stem}.crt"), format!("{stem}.key"));
        if let Some(ca) = Pair::load(dir, &crt, &key).and_then(Self::from_pair) {
            return Ok(ca);
        }
        tracing::info!(dir = %dir.display(), stem, "generating a self-signed CA");
        let ca = Self::generate(&format!("apiserver-{stem}"))?;
        ca.pair.store(dir, &crt, &key)?;
        Ok(ca)
    }

    /// Rebuilds the signer of a stored CA; `None` if it is unusable or not one of ours (only
    /// a CN subject can be re-encoded exactly, which the leaves' issuer name must match).
    fn from_pair(pair: Pair) -> Option<Self> {
        let der = parse_certs_pem(pair.cert_pem.as_bytes())
            .ok()?
            .into_iter()
            .next()?;
        let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
        let subject = cert.subject();
        let cn = subject
            .iter_common_name()
            .next()?
            .as_str()
            .ok()?
            .to_string();
        let not_after = cert.validity().not_after.timestamp();
        let usable = cert.is_ca() && subject.iter_attributes().count() == 1;
        if !usable || !still_valid(cert.validity()) {
            return None;
        }
        let key = KeyPair::from_pem(&pair.key_pem).ok()?;
        let issuer = Issuer::new(ca_params(&cn, now(), not_after).ok()?, key);
        let fresh = false;
        Some(Self {
            pair,
            issuer,
            not_after,
            fresh,
        })
    }

    fn generate(name: &str) -> Result<Self, TlsError> {
        let now = now();
        // Unique even for CAs made in the same second: verifiers find issuers by name.
        let cn = format!("{name}@{now}-{:08x}", rand::random::<u32>());
        let params = ca_params(&cn, now, now + CA_LIFETIME)?;
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let pair = Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        let issuer = Issuer::new(params, key);
        let not_after = now + CA_LIFETIME;
        Ok(Self {
            pair,
            issuer,
            not_after,
            fresh: true,
        })
    }

    /// Loads the leaf `key_file` names (certificate beside it, `.crt`), or signs a new one.
    fn leaf(&self, dir: &Path, key_file: &str, kind: &LeafKind<'_>) -> Result<Pair, TlsError> {
        let cert_file = key_file.replace(".key", ".crt");
        let stored = Pair::load(dir, &cert_file, key_file);
        if let Some(pair) = stored.filter(|p| !self.fresh && self.accepts(p, kind)) {
            return Ok(pair);
        }
        tracing::info!(dir = %dir.display(), cert_file, "generating a certificate");
        let pair = self.sign(kind)?;
        pair.store(dir, &cert_file, key_file)?;
        Ok(pair)
    }

    fn sign(&self, kind: &LeafKind<'_>) -> Result<Pair, TlsError> {
        let now = now();
        let mut params = leaf_params(kind)?;
        set_validity(&mut params, now, (now + LEAF_LIFETIME).min(self.not_after));
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let mut cert_pem = cert.pem();
        if let LeafKind::Serving(_) = kind {
            // k8s.io/apiserver's apiserver.crt carries the CA too, so any client sees the chain.
            cert_pem.push_str(&self.pair.cert_pem);
        }
        Ok(Pair {
            cert_pem,
            key_pem: key.serialize_pem(),
        })
    }

    /// Whether a stored leaf chains to this CA, suits `kind`, and is not near expiry.
    fn accepts(&self, pair: &Pair, kind: &LeafKind<'_>) -> bool {
        let Ok(chain) = parse_certs_pem(pair.cert_pem.as_bytes()) else {
            return false;
        };
        let key_ok = KeyPair::from_pem(&pair.key_pem).is_ok();
        let verified = match kind {
            LeafKind::Serving(hosts) => self.verifies_for_hosts(&chain, hosts),
            LeafKind::Admin => self.verifies_as_client(&chain),
        };
        key_ok && verified && leaf_still_valid(&chain[0])
    }

    fn roots(&self) -> Option<Arc<rustls::RootCertStore>> {
        let ca = parse_certs_pem(self.pair.cert_pem.as_bytes()).ok()?;
        Some(Arc::new(root_store(&ca).ok()?))
    }

    fn verifies_for_hosts(&self, chain: &[CertificateDer<'static>], hosts: &[String]) -> bool {
        let Some(roots) = self.roots() else {
            return false;
        };
        let Ok(verifier) =
            WebPkiServerVerifier::builder_with_provider(roots, crypto_provider()).build()
        else {
            return false;
        };
        hosts.iter().all(|host| {
            let Ok(name) = ServerName::try_from(host.as_str()) else {
                return false;
            };
            verifier
                .verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now())
                .is_ok()
        })
    }

    fn verifies_as_client(&self, chain: &[CertificateDer<'static>]) -> bool {
        let Some(roots) = self.roots() else {
            return false;
        };
        let Ok(verifier) =
            WebPkiClientVerifier::builder_with_provider(roots, crypto_provider()).build()
        else {
            return false;
        };
        verifier
            .verify_client_cert(&chain[0], &chain[1..], UnixTime::now())
            .is_ok()
    }
}

pub(crate) fn ca_params(cn: &str, from: i64, until: i64) -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, from, until);
    Ok(params)
}

fn leaf_params(kind: &LeafKind<'_>) -> Result<CertificateParams, TlsError> {
    let mut params = match kind {
        LeafKind::Serving(hosts) => CertificateParams::new(hosts.to_vec())?,
        LeafKind::Admin => CertificateParams::new(Vec::<String>::new())?,
    };
    params.distinguished_name = DistinguishedName::new();
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    match kind {
        LeafKind::Serving(_) => {
            params
                .distinguished_name
                .push(DnType::CommonName, "apiserver");
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        }
        LeafKind::Admin => {
            params.distinguished_name.push(DnType::CommonName, ADMIN);
            params
                .distinguished_name
                .push(DnType::OrganizationName, SYSTEM_MASTERS);
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
    }
    Ok(params)
}

/// Sets the validity in whole days: from the day before `from` (tolerating clock skew between
/// machines) to the day of `until`.
pub(crate) fn set_validity(params: &mut CertificateParams, from: i64, until: i64) {
    let (y, m, d) = ymd(from - DAY);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = ymd(until);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

fn ymd(unix: i64) -> (i32, u8, u8) {
    let ts = jiff::Timestamp::from_second(unix).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let date = ts.to_zoned(jiff::tz::TimeZone::UTC).date();
    (i32::from(date.year()), date.month() as u8, date.day() as u8)
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Valid now and for at least [`RENEW_BEFORE`] more.
fn still_valid(validity: &x509_parser::certificate::Validity) -> bool {
    validity.is_valid() && validity.not_after.timestamp() - now() > RENEW_BEFORE
}

fn leaf_still_valid(der: &CertificateDer<'_>) -> bool {
    x509_parser::parse_x509_certificate(der).is_ok_and(|(_, cert)| still_valid(cert.validity()))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::io(path, e))
}

/// Writes through a temporary file and a rename, so a crash never leaves half a key behind;
/// private files are created 0600 before any secret is written to them.
fn write_file(path: &Path, contents: &[u8], private: bool) -> Result<(), TlsError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    write_new(&tmp, contents, private).map_err(|e| TlsError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| TlsError::io(path, e))
}

fn write_new(path: &Path, contents: &[u8], private: bool) -> io::Result<()> {
    use std::io::Write as _;
    let _ = std::fs::remove_file(path);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_hosts_come_first_without_duplicates() {
        let hosts = serving_hosts(&["LOCALHOST".into(), "".into(), "api.example.com".into()]);
        assert_eq!(hosts, ["localhost", "127.0.0.1", "::1", "api.example.com"]);
    }

    #[test]
    fn ymd_is_utc_calendar_date() {
        assert_eq!(ymd(0), (1970, 1, 1));
        assert_eq!(ymd(DAY * 365), (1971, 1, 1));
    }
}
