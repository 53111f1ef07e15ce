//! Everything between a server and kube-apiserver's aggregator: the `APIService`
//! registration ([`APIServiceRegistrar`]), the deploy manifests ([`manifests()`]), and the
//! diagnostics of the usual deployment mistakes ([`diagnostics`]), each reported in
//! `/readyz`.
//!
//! [`APIServer`](crate::APIServer) wires them from [`AggregatorOptions`] when it finds a core
//! kube-apiserver (`--kubeconfig`, or the in-cluster service account); in standalone mode none
//! of this runs.

pub mod diagnostics;
pub mod manifests;
pub mod options;
pub mod registration;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
    APIServiceSpec, ServiceReference,
};
use rustls::pki_types::CertificateDer;

pub use manifests::{ManifestOptions, manifest_objects, manifests};
pub use options::AggregatorOptions;
pub use registration::{
    APIServiceRegistrar, RegistrationConfig, RegistrationError, RegistrationOutcome,
};

use crate::lifecycle::{NotReady, ReadyzCheck};

/// The `groupPriorityMinimum` of a group unless its [`APIGroup`](crate::APIGroup) says
/// otherwise (sample-apiserver's value: above the built-in groups' defaults of kube-apiserver
/// only for its own group).
pub const DEFAULT_GROUP_PRIORITY_MINIMUM: i32 = 1000;
/// The `versionPriority` of a group's preferred version (sample-apiserver's value); each
/// later version gets one less (at least 1).
pub const DEFAULT_VERSION_PRIORITY: i32 = 15;

/// One served group version as an APIService names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct APIServiceVersion {
    /// The API group.
    pub group: String,
    /// The version.
    pub version: String,
    /// `spec.groupPriorityMinimum`.
    pub group_priority_minimum: i32,
    /// `spec.versionPriority`.
    pub version_priority: i32,
}

impl APIServiceVersion {
    /// `{version}.{group}`, the name kube-aggregator expects.
    pub fn apiservice_name(&self) -> String {
        format!("{}.{}", self.version, self.group)
    }

    /// The APIService's spec pointing at the Service `namespace/name` on `port`, without a
    /// caBundle: registration adds it (or `insecureSkipTLSVerify`), the manifests leave it to
    /// the server's own registration.
    pub fn spec(&self, namespace: &str, name: &str, port: i32) -> APIServiceSpec {
        APIServiceSpec {
            group: Some(self.group.clone()),
            version: Some(self.version.clone()),
            group_priority_minimum: self.group_priority_minimum,
            version_priority: self.version_priority,
            service: Some(ServiceReference {
                namespace: Some(namespace.to_owned()),
                name: Some(name.to_owned()),
                port: Some(port),
            }),
            ..APIServiceSpec::default()
        }
    }
}

/// A certificate in PEM.
pub fn cert_pem(cert: &CertificateDer<'_>) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// The caBundle for a serving chain when none is given: the last certificate of the chain.
///
/// A chain from `--tls-cert-file` is the leaf followed by its intermediates and, often, the
/// CA; its last certificate is then the CA the aggregator must trust. A chain of one
/// certificate gives that certificate (right when it is self-signed; otherwise pass the CA
/// with `--apiservice-ca-file`).
pub fn default_ca_bundle(chain: &[CertificateDer<'_>]) -> Option<String> {
    chain.last().map(cert_pem)
}

/// Named results shared between the code that finds them and the `/readyz` checks that show
/// them.
#[derive(Clone, Default)]
pub struct Findings {
    inner: Arc<Mutex<BTreeMap<String, Result<(), NotReady>>>>,
}

impl Findings {
    /// Records the result of `check`.
    pub fn set(&self, check: &str, result: Result<(), NotReady>) {
        self.lock().insert(check.to_string(), result);
    }

    /// The last result of `check`, if any.
    pub fn get(&self, check: &str) -> Option<Result<(), NotReady>> {
        self.lock().get(check).cloned()
    }

    /// Whether any recorded check fails.
    pub fn any_failed(&self) -> bool {
        self.lock().values().any(Result::is_err)
    }

    /// A `/readyz` check that shows the result of `check` (failing with `pending` until one
    /// is recorded).
    pub fn readyz_check(&self, check: &str) -> Arc<dyn ReadyzCheck> {
        Arc::new(FindingCheck {
            name: check.to_string(),
            findings: self.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Result<(), NotReady>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct FindingCheck {
    name: String,
    findings: Findings,
}

impl ReadyzCheck for FindingCheck {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self) -> Result<(), NotReady> {
        self.findings
            .get(&self.name)
            .unwrap_or_else(|| Err(NotReady::new("not checked yet")))
    }
}

/// How often failing registration and diagnostics are tried again.
pub const RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);
/// How long start waits for the first registration and diagnostics before serving anyway.
pub const FIRST_ROUND_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What [`wire`] gives the builder.
#[derive(Default)]
pub struct Wiring {
    /// Checks for `/readyz`.
    pub readyz: Vec<Arc<dyn ReadyzCheck>>,
    /// The core API client, when there is a core API.
    pub core: Option<kube::Client>,
    /// Registration and checks, with a core API.
    pub handle: Option<AggregatorHandle>,
}

/// The running registration and deployment checks of a server with a core API.
///
/// Cheap to clone. When the serving certificate changes, call
/// [`serving_certificate_changed`](Self::serving_certificate_changed): it registers the new
/// caBundle and checks the new certificate.
#[derive(Clone)]
pub struct AggregatorHandle {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    client: kube::Client,
    options: AggregatorOptions,
    registrar: Option<APIServiceRegistrar>,
    diagnostics: Mutex<diagnostics::DiagnosticsConfig>,
    findings: Findings,
}

impl AggregatorHandle {
    /// The APIService registrar, with `--register-apiservice`.
    pub fn registrar(&self) -> Option<&APIServiceRegistrar> {
        self.inner.registrar.as_ref()
    }

    /// The results `/readyz` shows.
    pub fn findings(&self) -> &Findings {
        &self.inner.findings
    }

    /// The serving certificate is now `chain` (leaf first; `self_signed_ca`: the CA in PEM
    /// when the server made the certificate itself): registers the caBundle that goes with
    /// it (see [`ca_bundle`]) and checks it again.
    pub async fn serving_certificate_changed(
        &self,
        chain: Vec<CertificateDer<'static>>,
        self_signed_ca: Option<String>,
    ) -> Result<(), CaBundleError> {
        let versions = self.lock_diagnostics().versions.clone();
        let serving = ServingInfo {
            chain: chain.clone(),
            self_signed_ca,
            secure_port: 0,
            versions,
        };
        let ca = if self.inner.options.insecure_skip_tls_verify {
            None
        } else {
            Some(ca_bundle(&self.inner.options, &serving)?)
        };
        self.lock_diagnostics().serving_chain = chain;
        if let Some(registrar) = &self.inner.registrar {
            registrar.register(ca.as_deref()).await;
        }
        self.run_diagnostics().await;
        Ok(())
    }

    /// Registers again with the last caBundle and runs the checks again (what the periodic
    /// retry does while something fails).
    pub async fn check_again(&self) {
        if let Some(registrar) = &self.inner.registrar {
            registrar.refresh().await;
        }
        self.run_diagnostics().await;
    }

    async fn run_diagnostics(&self) {
        let config = self.lock_diagnostics().clone();
        let inner = &self.inner;
        diagnostics::run(
            &inner.client,
            &config,
            &inner.findings,
            inner.registrar.as_ref(),
        )
        .await;
    }

    fn lock_diagnostics(&self) -> std::sync::MutexGuard<'_, diagnostics::DiagnosticsConfig> {
        self.inner
            .diagnostics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// What [`wire`] needs to know about the server.
pub struct ServingInfo {
    /// The serving certificate chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The self-signed serving CA (PEM) when the server made its own certificate.
    pub self_signed_ca: Option<String>,
    /// The port the server listens on.
    pub secure_port: u16,
    /// The served group versions.
    pub versions: Vec<APIServiceVersion>,
}

/// The caBundle to register: `--apiservice-ca-file`, else the self-signed serving CA, else
/// the last certificate of the serving chain ([`default_ca_bundle`]).
pub fn ca_bundle(
    options: &AggregatorOptions,
    serving: &ServingInfo,
) -> Result<Vec<u8>, CaBundleError> {
    if let Some(file) = &options.ca_file {
        let pem = std::fs::read(file).map_err(|source| CaBundleError::Read {
            path: file.clone(),
            source,
        })?;
        crate::tls::certs::parse_certs_pem(&pem).map_err(|source| CaBundleError::Parse {
            path: file.clone(),
            source,
        })?;
        return Ok(pem);
    }
    if let Some(ca) = &serving.self_signed_ca {
        return Ok(ca.clone().into_bytes());
    }
    default_ca_bundle(&serving.chain)
        .map(String::into_bytes)
        .ok_or(CaBundleError::NoServingCertificate)
}

/// Why no caBundle could be made for the APIServices.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaBundleError {
    /// `--apiservice-ca-file` could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `--apiservice-ca-file` holds no usable certificate.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: crate::tls::TlsError,
    },
    /// There is no serving certificate to take the CA from.
    #[error("no serving certificate")]
    NoServingCertificate,
}

/// Why the aggregator integration could not be set up at start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The flags contradict each other or name unusable files.
    #[error("{0}")]
    Config(String),
    /// No caBundle could be made for the APIServices.
    #[error(transparent)]
    CaBundle(#[from] CaBundleError),
    /// No client to the core kube-apiserver could be made.
    #[error(transparent)]
    CoreAPI(#[from] crate::core_api::CoreAPIError),
}

/// Connects to the core API (if any) and sets up registration and diagnostics:
/// the first round runs now (waited for up to [`FIRST_ROUND_WAIT`]), failures are retried
/// every [`RETRY_INTERVAL`] until `shutdown`.
pub async fn wire(
    options: &AggregatorOptions,
    serving: ServingInfo,
    shutdown: crate::lifecycle::ShutdownSignal,
) -> Result<Wiring, WireError> {
    let Some(client) = connect(options).await? else {
        return Ok(Wiring::default());
    };
    let service = service_of(options)?;
    let findings = Findings::default();
    let (registrar, ca) = match options.register_apiservice {
        true => {
            let (registrar, ca) = registrar(options, &client, &serving, &service, &findings)?;
            (Some(registrar), ca)
        }
        false => (None, None),
    };
    let diagnostics = diagnostics::DiagnosticsConfig {
        serving_chain: serving.chain.clone(),
        service,
        versions: serving.versions.clone(),
    };
    let mut names = diagnostics.checks(registrar.is_some());
    if registrar.is_some() {
        names.push(registration::READYZ_CHECK);
    }
    let readyz = names.iter().map(|n| findings.readyz_check(n)).collect();
    let handle = AggregatorHandle {
        inner: Arc::new(HandleInner {
            client: client.clone(),
            options: options.clone(),
            registrar,
            diagnostics: Mutex::new(diagnostics),
            findings,
        }),
    };
    let retry_interval = options.retry_interval.unwrap_or(RETRY_INTERVAL);
    let first_round = spawn_rounds(handle.clone(), ca, retry_interval, shutdown);
    wait_for_first_round(first_round).await;
    Ok(Wiring {
        readyz,
        core: Some(client),
        handle: Some(handle),
    })
}

/// The core API client, when the options ask for one (`--kubeconfig`, or in a pod).
async fn connect(options: &AggregatorOptions) -> Result<Option<kube::Client>, WireError> {
    let core = if options.kubeconfig.is_some() || options.in_cluster {
        crate::core_api::core_client(options.kubeconfig.as_deref()).await?
    } else {
        None
    };
    match core {
        Some((client, source)) => {
            tracing::info!(?source, "core kube-apiserver found");
            Ok(Some(client))
        }
        None if options.register_apiservice => Err(WireError::Config(
            "--register-apiservice needs the core kube-apiserver: give --kubeconfig, \
             or run in a pod"
                .into(),
        )),
        None => Ok(None),
    }
}

/// `--apiservice-service-namespace` and `--apiservice-service-name`, which go together.
fn service_of(options: &AggregatorOptions) -> Result<Option<(String, String)>, WireError> {
    match (&options.service_namespace, &options.service_name) {
        (Some(namespace), Some(name)) => Ok(Some((namespace.clone(), name.clone()))),
        (None, None) => Ok(None),
        _ => Err(WireError::Config(
            "--apiservice-service-namespace and --apiservice-service-name go together".into(),
        )),
    }
}

/// The APIService registrar of `--register-apiservice`, and the caBundle it registers.
fn registrar(
    options: &AggregatorOptions,
    client: &kube::Client,
    serving: &ServingInfo,
    service: &Option<(String, String)>,
    findings: &Findings,
) -> Result<(APIServiceRegistrar, Option<Vec<u8>>), WireError> {
    let Some((namespace, name)) = service.clone() else {
        return Err(WireError::Config(
            "--register-apiservice needs --apiservice-service-namespace and \
             --apiservice-service-name"
                .into(),
        ));
    };
    let config = RegistrationConfig {
        service_namespace: namespace,
        service_name: name,
        service_port: i32::from(options.service_port.unwrap_or(serving.secure_port)),
        insecure_skip_tls_verify: options.insecure_skip_tls_verify,
        overwrite: options.overwrite,
        versions: serving.versions.clone(),
    };
    let registrar = APIServiceRegistrar::with_findings(client.clone(), config, findings.clone());
    let ca = match options.insecure_skip_tls_verify {
        true => None,
        false => Some(ca_bundle(options, serving)?),
    };
    Ok((registrar, ca))
}

/// Registers and checks once, then again every `retry_interval` while anything fails, until
/// `shutdown`. The returned channel fires when the first round is done.
fn spawn_rounds(
    handle: AggregatorHandle,
    ca: Option<Vec<u8>>,
    retry_interval: std::time::Duration,
    shutdown: crate::lifecycle::ShutdownSignal,
) -> tokio::sync::oneshot::Receiver<()> {
    let (first_done, first_round) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let first = async {
            if let Some(registrar) = handle.registrar() {
                registrar.register(ca.as_deref()).await;
            }
            handle.run_diagnostics().await;
        };
        tokio::select! {
            _ = first => {}
            _ = shutdown.cancelled() => return,
        }
        let _ = first_done.send(());
        loop {
            tokio::select! {
                _ = tokio::time::sleep(retry_interval) => {}
                _ = shutdown.cancelled() => return,
            }
            if !handle.findings().any_failed() {
                continue;
            }
            tokio::select! {
                _ = handle.check_again() => {}
                _ = shutdown.cancelled() => return,
            }
        }
    });
    first_round
}

/// Start serving after the first round, or after [`FIRST_ROUND_WAIT`] if the core API is
/// slow (a pod must answer its liveness probe); the round then finishes in the background.
async fn wait_for_first_round(first_round: tokio::sync::oneshot::Receiver<()>) {
    if tokio::time::timeout(FIRST_ROUND_WAIT, first_round)
        .await
        .is_err()
    {
        tracing::warn!(
            "the core kube-apiserver is slow to answer: APIService registration and the \
             deployment checks go on in the background (/readyz fails until they are done)"
        );
    }
}
