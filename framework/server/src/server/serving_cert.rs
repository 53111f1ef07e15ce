//! The serving certificate of the secure port, reloaded when its files change: the Rust side
//! of `k8s.io/apiserver`'s `DynamicServingCertificateController`.
//!
//! Every TLS handshake asks [`ServingCertificate`] (a rustls `ResolvesServerCert`) for the
//! current certificate and key. A background loop re-reads `--tls-cert-file` and
//! `--tls-private-key-file` (or the self-signed pair in `--cert-dir`) every
//! [`RELOAD_INTERVAL`]; a new, consistent pair replaces the old one for new handshakes, while
//! open connections keep theirs. A new pair that does not parse or whose key does not match
//! is logged and the old one kept (a rotation that writes the two files one after the other
//! is picked up on the next poll). Other code learns of changes through
//! [`ServingCertificate::subscribe`], e.g. to put the CA into an `APIService`'s `caBundle`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::lifecycle::ShutdownSignal;
use crate::tls::TlsError;
use crate::tls::certs::CertKey;

/// How often the certificate files are compared with what is being served.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// The current serving certificate and key, shared by the TLS layer and anyone who needs
/// to know it. Cloning shares the same certificate.
#[derive(Clone)]
pub struct ServingCertificate {
    inner: Arc<Inner>,
}

struct Inner {
    /// The served pair; the sender holds the value, receivers are told of changes.
    current: watch::Sender<Arc<CertifiedKey>>,
    provider: Arc<CryptoProvider>,
    /// Where the pair comes from, when it comes from files.
    files: Option<Files>,
}

struct Files {
    cert: PathBuf,
    key: PathBuf,
    /// Digest of the file contents last looked at (served or refused), so an unchanged
    /// file is neither parsed nor logged about again.
    seen: Mutex<[u8; 32]>,
}

impl std::fmt::Debug for ServingCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let files = self.inner.files.as_ref();
        f.debug_struct("ServingCertificate")
            .field("cert_file", &files.map(|f| &f.cert))
            .field("key_file", &files.map(|f| &f.key))
            .finish_non_exhaustive()
    }
}

impl ServingCertificate {
    /// A fixed certificate, never reloaded. Fails if the key does not match the certificate
    /// or `provider` cannot use it.
    pub fn new(serving: &CertKey, provider: &Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let key = certified_key(serving, provider)?;
        Ok(Self::with(key, provider.clone(), None))
    }

    /// The pair in `cert_file` (PEM chain, leaf first) and `key_file` (PEM key), which
    /// [`reload`](Self::reload) and [`spawn_reloader`](Self::spawn_reloader) follow. Fails
    /// if the files cannot be read or do not make a consistent pair.
    pub fn from_files(
        cert_file: &Path,
        key_file: &Path,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let (digest, loaded) = read_pair(cert_file, key_file)?;
        let key = loaded.and_then(|pair| certified_key(&pair, provider))?;
        let files = Files {
            cert: cert_file.to_path_buf(),
            key: key_file.to_path_buf(),
            seen: Mutex::new(digest),
        };
        Ok(Self::with(key, provider.clone(), Some(files)))
    }

    fn with(key: CertifiedKey, provider: Arc<CryptoProvider>, files: Option<Files>) -> Self {
        let (current, _) = watch::channel(Arc::new(key));
        Self {
            inner: Arc::new(Inner {
                current,
                provider,
                files,
            }),
        }
    }

    /// The pair new handshakes get.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.inner.current.borrow().clone()
    }

    /// The current certificate chain, leaf first (with whatever intermediates or CA the
    /// certificate file carries).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current().cert.clone()
    }

    /// A receiver that sees every pair put in service after this call.
    pub fn subscribe(&self) -> watch::Receiver<Arc<CertifiedKey>> {
        self.inner.current.subscribe()
    }

    /// The files followed, if any: (certificate, key).
    pub fn files(&self) -> Option<(&Path, &Path)> {
        let files = self.inner.files.as_ref()?;
        Some((&files.cert, &files.key))
    }

    /// Re-reads the files once. `Ok(true)` if a new pair was put in service, `Ok(false)` if
    /// the files are unchanged since the last look (or there are none), and an error (with
    /// the old pair still served) if changed files do not make a usable pair; the same
    /// refused contents are not reported again.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let Some(files) = &self.inner.files else {
            return Ok(false);
        };
        // Held throughout, so concurrent reloads cannot put an older read in service last.
        let mut seen = files.seen.lock().unwrap_or_else(|e| e.into_inner());
        let (digest, loaded) = read_pair(&files.cert, &files.key)?;
        if *seen == digest {
            return Ok(false);
        }
        *seen = digest;
        let key = loaded.and_then(|pair| certified_key(&pair, &self.inner.provider))?;
        self.inner.current.send_replace(Arc::new(key));
        Ok(true)
    }

    /// Polls the files every `interval` until `shutdown` starts, putting changed pairs in
    /// service and logging (once per content) changed pairs that are unusable. Does nothing
    /// for a certificate without files.
    pub fn spawn_reloader(&self, interval: Duration, shutdown: ShutdownSignal) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let Some((cert, key)) = this.files() else {
                return;
            };
            let (cert, key) = (cert.display().to_string(), key.display().to_string());
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // A file missing for a while is reported once, not at every poll.
            let mut last_error = String::new();
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                // File reads off the async workers: a slow disk must not stall requests.
                let reloading = this.clone();
                let Ok(outcome) = tokio::task::spawn_blocking(move || reloading.reload()).await
                else {
                    return; // The runtime is shutting down.
                };
                match outcome {
                    Ok(reloaded) => {
                        last_error.clear();
                        if reloaded {
                            tracing::info!(%cert, %key, "serving certificate reloaded");
                        }
                    }
                    Err(e) if e.to_string() == last_error => {}
                    Err(e) => {
                        last_error = e.to_string();
                        tracing::error!(
                            %cert, %key, error = %e,
                            "new serving certificate refused; still serving the previous one"
                        );
                    }
                }
            }
        })
    }
}

impl ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A rustls pair from a parsed one, failing on a key that does not match the certificate.
fn certified_key(pair: &CertKey, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    if pair.cert_chain.is_empty() {
        return Err(TlsError::Invalid("no certificate".into()));
    }
    Ok(CertifiedKey::from_der(
        pair.cert_chain.clone(),
        pair.key.clone_key(),
        provider,
    )?)
}

/// The digest of both files' contents, and their parse. A missing or unreadable file is an
/// error of its own (nothing to compare).
fn read_pair(cert: &Path, key: &Path) -> Result<([u8; 32], Result<CertKey, TlsError>), TlsError> {
    let cert_pem = std::fs::read(cert).map_err(|e| TlsError::io(cert, e))?;
    let key_pem = std::fs::read(key).map_err(|e| TlsError::io(key, e))?;
    let mut hasher = Sha256::new();
    for part in [&cert_pem, &key_pem] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let parsed = CertKey::from_pem(&cert_pem, &key_pem)
        .map_err(|e| TlsError::Invalid(format!("{}: {e}", cert.display())));
    Ok((hasher.finalize().into(), parsed))
}
