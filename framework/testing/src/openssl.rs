//! Certificates made with the `openssl` command the way people make them by hand: most
//! "create a Kubernetes user" guides run `openssl req -new` and `openssl x509 -req -CA ...`,
//! which gives an X.509 **v1** certificate (no extensions at all). rcgen cannot make those,
//! so tests of what a server does with them call the real command. Panics when `openssl` is
//! missing (Debian's package `openssl`; `.ci/test` installs it).
//!
//! ```
//! use extension_apiserver_testing::openssl::{KeyType, OpensslCa};
//! use extension_apiserver_testing::pki::TestCa;
//! let ca = OpensslCa::of(&TestCa::new("client-ca"));
//! let jane = ca.v1_client("jane", &["devs"], KeyType::Rsa);
//! assert!(jane.cert_pem.contains("BEGIN CERTIFICATE"));
//! ```

use std::path::Path;
use std::process::Command;

use super::pki::{TestCa, TestCert};

/// The key type of a certificate made with `openssl genpkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// RSA, 2048 bits.
    Rsa,
    /// ECDSA on P-256.
    Ecdsa,
    /// Ed25519.
    Ed25519,
}

impl KeyType {
    fn genpkey_args(self) -> &'static [&'static str] {
        match self {
            Self::Rsa => &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
            Self::Ecdsa => &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
            Self::Ed25519 => &["-algorithm", "ED25519"],
        }
    }
}

/// A CA that signs with `openssl x509 -req`: a [`TestCa`], a v1 root made by openssl, or an
/// intermediate of either.
#[derive(Debug, Clone)]
pub struct OpensslCa {
    /// The CA certificate (PEM).
    pub cert_pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
    /// The certificates a leaf of this CA is sent with: this CA and the intermediates above
    /// it, up to (not including) the root; empty for a root.
    pub chain_pem: String,
}

impl OpensslCa {
    /// Signs with a CA made in the test.
    pub fn of(ca: &TestCa) -> Self {
        Self {
            cert_pem: ca.cert_pem.clone(),
            key_pem: ca.key_pem.clone(),
            chain_pem: String::new(),
        }
    }

    /// A self-signed X.509 v1 root (`openssl x509 -req -signkey`), RSA, valid for a year;
    /// its common name starts with `name`.
    pub fn v1_root(name: &str) -> Self {
        let dir = WorkDir::new();
        let key_pem = generate_key(dir.path(), KeyType::Rsa);
        let cn = format!("/CN={name}@{:016x}", rand::random::<u64>());
        request(dir.path(), &cn);
        let days = "365";
        let args = ["-signkey", "key.pem", "-days", days];
        let cert_pem = sign(dir.path(), &args);
        assert_version(&cert_pem, 1);
        Self {
            cert_pem,
            key_pem,
            chain_pem: String::new(),
        }
    }

    /// An intermediate CA signed by this one with the given `openssl` extension lines
    /// (`basicConstraints=critical,CA:true`, `extendedKeyUsage=serverAuth`, ...); with none
    /// it is a v1 certificate, which may not sign (no basicConstraints).
    pub fn intermediate(&self, name: &str, extensions: &[&str]) -> Self {
        let dir = WorkDir::new();
        let key_pem = generate_key(dir.path(), KeyType::Ecdsa);
        let cn = format!("/CN={name}@{:016x}", rand::random::<u64>());
        request(dir.path(), &cn);
        let cert_pem = self.sign_request(dir.path(), 365, extensions);
        Self {
            chain_pem: format!("{cert_pem}{}", self.chain_pem),
            cert_pem,
            key_pem,
        }
    }

    /// An X.509 v1 client certificate, common name `cn` (the user) and organizations `groups`,
    /// valid for 30 days; its `cert_pem` is followed by this CA's chain.
    pub fn v1_client(&self, cn: &str, groups: &[&str], key: KeyType) -> TestCert {
        self.client(cn, groups, key, 30)
    }

    /// As [`OpensslCa::v1_client`], but expired: `-days -1` ends its validity a day before
    /// it starts, as a certificate past its date looks to a verifier.
    pub fn expired_v1_client(&self, cn: &str, groups: &[&str], key: KeyType) -> TestCert {
        self.client(cn, groups, key, -1)
    }

    fn client(&self, cn: &str, groups: &[&str], key: KeyType, days: i64) -> TestCert {
        let dir = WorkDir::new();
        let key_pem = generate_key(dir.path(), key);
        let mut subject = format!("/CN={cn}");
        for group in groups {
            subject.push_str(&format!("/O={group}"));
        }
        request(dir.path(), &subject);
        let cert_pem = self.sign_request(dir.path(), days, &[]);
        assert_version(&cert_pem, 1);
        TestCert {
            cert_pem: format!("{cert_pem}{}", self.chain_pem),
            key_pem,
        }
    }

    /// `openssl x509 -req -CA`: signs `dir/req.csr` (v1 unless `extensions` are given).
    fn sign_request(&self, dir: &Path, days: i64, extensions: &[&str]) -> String {
        write(dir, "ca.pem", &self.cert_pem);
        write(dir, "ca.key", &self.key_pem);
        let days = days.to_string();
        let serial = format!("0x{:016x}", rand::random::<u64>() >> 1);
        let mut args = vec!["-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", &serial];
        args.extend(["-days", &days]);
        if !extensions.is_empty() {
            write(dir, "ext.cnf", &extensions.join("\n"));
            args.extend(["-extfile", "ext.cnf"]);
        }
        sign(dir, &args)
    }
}

/// A scratch directory for openssl's files, removed when dropped.
struct WorkDir(std::path::PathBuf);

impl WorkDir {
    fn new() -> Self {
        let name = format!("apiserver-openssl-{:016x}", rand::random::<u64>());
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path).expect("create scratch directory");
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn generate_key(dir: &Path, key: KeyType) -> String {
    let mut args = vec!["genpkey"];
    args.extend(key.genpkey_args());
    args.extend(["-out", "key.pem"]);
    openssl(dir, &args);
    std::fs::read_to_string(dir.join("key.pem")).expect("read key")
}

/// `openssl req -new`: a request for `subject` with `dir/key.pem`, into `dir/req.csr`.
fn request(dir: &Path, subject: &str) {
    let args = ["req", "-new", "-key", "key.pem", "-subj", subject];
    openssl(dir, &[&args[..], &["-out", "req.csr"]].concat());
}

/// `openssl x509 -req` of `dir/req.csr` with `args`; the certificate PEM.
fn sign(dir: &Path, args: &[&str]) -> String {
    let base = ["x509", "-req", "-in", "req.csr", "-out", "cert.pem"];
    openssl(dir, &[&base[..], args].concat());
    std::fs::read_to_string(dir.join("cert.pem")).expect("read certificate")
}

fn write(dir: &Path, file: &str, contents: &str) {
    std::fs::write(dir.join(file), contents).expect("write openssl input");
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (Debian package `openssl`)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes sure openssl made the version the test means (newer releases might add extensions
/// by default, which would quietly test something else).
fn assert_version(cert_pem: &str, version: u32) {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).expect("PEM");
    let cert = pem.parse_x509().expect("certificate");
    assert_eq!(
        cert.version().0 + 1,
        version,
        "openssl made another version"
    );
}
