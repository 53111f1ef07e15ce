//! Checks for the usual mistakes of deploying an aggregated API server, each logged once
//! with its fix and shown in `/readyz?verbose` (the top support questions of Go servers:
//! metrics-server#157 and #543, kubernetes#86155):
//!
//! | `/readyz` check | fails when |
//! |---|---|
//! | `extension-apiserver-authentication` | the ConfigMap `kube-system/extension-apiserver-authentication` cannot be read (403: no `extension-apiserver-authentication-reader` RoleBinding) |
//! | `auth-delegator` | TokenReview or SubjectAccessReview is forbidden (no `system:auth-delegator` ClusterRoleBinding) |
//! | `serving-certificate` | the serving certificate does not name `{service}.{namespace}.svc` |
//! | `apiservice-ca-bundle` | an APIService's `caBundle` does not verify the serving certificate |
//! | `apiservice-registration` | an APIService of ours points at another Service (or, with `--register-apiservice`, could not be written) |

use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, PostParams};
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::aggregator::registration::{self, APIServiceRegistrar};
use crate::aggregator::{APIServiceVersion, Findings};
use crate::lifecycle::NotReady;

/// `/readyz` check: the authentication ConfigMap is readable.
pub const AUTHENTICATION_CONFIG: &str = "extension-apiserver-authentication";
/// `/readyz` check: TokenReview and SubjectAccessReview are allowed.
pub const AUTH_DELEGATOR: &str = "auth-delegator";
/// `/readyz` check: the serving certificate names the Service.
pub const SERVING_CERTIFICATE: &str = "serving-certificate";
/// `/readyz` check: the APIServices' caBundle verifies the serving certificate.
pub const CA_BUNDLE: &str = "apiservice-ca-bundle";

/// What the diagnostics look at.
#[derive(Clone, Debug, Default)]
pub struct DiagnosticsConfig {
    /// The serving certificate chain, leaf first.
    pub serving_chain: Vec<CertificateDer<'static>>,
    /// The Service in front of the server (`namespace`, `name`), when known.
    pub service: Option<(String, String)>,
    /// The served group versions.
    pub versions: Vec<APIServiceVersion>,
}

impl DiagnosticsConfig {
    /// The checks these diagnostics record (those `run` fills in).
    pub fn checks(&self, registering: bool) -> Vec<&'static str> {
        let mut checks = vec![AUTHENTICATION_CONFIG, AUTH_DELEGATOR, CA_BUNDLE];
        if self.service.is_some() {
            checks.push(SERVING_CERTIFICATE);
            if !registering {
                checks.push(registration::READYZ_CHECK);
            }
        }
        checks
    }
}

/// Runs every check against the core API and records the results in `findings`, logging each
/// problem (with its fix) when it first appears. With `registrar`, the registration's own
/// check covers the APIServices' targets.
pub async fn run(
    client: &kube::Client,
    config: &DiagnosticsConfig,
    findings: &Findings,
    registrar: Option<&APIServiceRegistrar>,
) {
    record(
        findings,
        AUTHENTICATION_CONFIG,
        authentication_config(client).await,
    );
    record(findings, AUTH_DELEGATOR, auth_delegator(client).await);
    if let Some((namespace, name)) = &config.service {
        record(
            findings,
            SERVING_CERTIFICATE,
            serving_names(&config.serving_chain, &format!("{name}.{namespace}.svc")),
        );
    }
    let apiservices = apiservices(client, &config.versions).await;
    let apiservices = match apiservices {
        Ok(list) => list,
        Err(e) => {
            record(findings, CA_BUNDLE, Err(e.clone()));
            if registrar.is_none() && config.service.is_some() {
                record(findings, registration::READYZ_CHECK, Err(e));
            }
            return;
        }
    };
    let ours = |a: &APIService| match &config.service {
        Some((namespace, name)) => a
            .spec
            .as_ref()
            .and_then(|s| s.service.as_ref())
            .is_some_and(|s| {
                s.namespace.as_deref() == Some(namespace) && s.name.as_deref() == Some(name)
            }),
        None => true,
    };
    let mut bad_bundles = Vec::new();
    for apiservice in apiservices.iter().filter(|a| ours(a)) {
        let Some(spec) = &apiservice.spec else {
            continue;
        };
        if spec.insecure_skip_tls_verify == Some(true) {
            continue;
        }
        let name = apiservice.metadata.name.clone().unwrap_or_default();
        let result = match &spec.ca_bundle {
            Some(ca) if !ca.0.is_empty() => verify_chain(&config.serving_chain, &ca.0),
            _ => Err(ServingChainError::NoCaBundle),
        };
        if let Err(e) = result {
            bad_bundles.push(format!(
                "the caBundle of APIService {name} does not verify the serving certificate \
                 ({e}): set it to the CA that signed the serving certificate \
                 (--register-apiservice does, from --apiservice-ca-file)"
            ));
        }
    }
    let bundles = if bad_bundles.is_empty() {
        Ok(())
    } else {
        Err(NotReady::new(bad_bundles.join("; ")))
    };
    record(findings, CA_BUNDLE, bundles);
    if let (None, Some((namespace, name))) = (registrar, &config.service) {
        let elsewhere: Vec<String> = apiservices
            .iter()
            .filter(|a| !ours(a))
            .map(|a| {
                let target = a
                    .spec
                    .as_ref()
                    .and_then(|s| s.service.as_ref())
                    .map(|s| {
                        format!(
                            "service {}/{}",
                            s.namespace.as_deref().unwrap_or(""),
                            s.name.as_deref().unwrap_or("")
                        )
                    })
                    .unwrap_or_else(|| "kube-apiserver (local)".into());
                format!(
                    "APIService {} points at {target}, not at service {namespace}/{name}: \
                     requests for it never reach this server; fix its spec.service (or start \
                     with --register-apiservice --apiservice-overwrite)",
                    a.metadata.name.as_deref().unwrap_or("")
                )
            })
            .collect();
        let result = if elsewhere.is_empty() {
            Ok(())
        } else {
            Err(NotReady::new(elsewhere.join("; ")))
        };
        record(findings, registration::READYZ_CHECK, result);
    }
}

/// Records `result`, logging a problem when it is new or changed, and its end.
fn record(findings: &Findings, check: &str, result: Result<(), NotReady>) {
    let previous = findings.get(check);
    if previous.as_ref() != Some(&result) {
        match &result {
            Err(e) => tracing::warn!(check, "{e}"),
            Ok(()) if matches!(previous, Some(Err(_))) => tracing::info!(check, "resolved"),
            Ok(()) => {}
        }
    }
    findings.set(check, result);
}

fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

async fn authentication_config(client: &kube::Client) -> Result<(), NotReady> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    match api.get_opt("extension-apiserver-authentication").await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => {
            // A cluster without front-proxy or client-CA settings: nothing to read, not an error.
            tracing::warn!(
                "ConfigMap kube-system/extension-apiserver-authentication does not exist: \
                 kube-apiserver runs without --client-ca-file and --requestheader-client-ca-file, \
                 so the aggregator cannot pass on who is calling"
            );
            Ok(())
        }
        Err(e) if status_code(&e) == Some(403) => Err(NotReady::new(format!(
            "cannot read ConfigMap kube-system/extension-apiserver-authentication (403 Forbidden: \
             {}): bind the Role extension-apiserver-authentication-reader in kube-system to the \
             server's service account (a RoleBinding in kube-system; see the `manifests` command)",
            api_message(&e)
        ))),
        Err(e) => Err(NotReady::new(format!(
            "reading ConfigMap kube-system/extension-apiserver-authentication: {e}"
        ))),
    }
}

async fn auth_delegator(client: &kube::Client) -> Result<(), NotReady> {
    let fix = "bind the ClusterRole system:auth-delegator to the server's service account \
               (a ClusterRoleBinding; see the `manifests` command)";
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let probe = TokenReview {
        spec: TokenReviewSpec {
            token: Some("apiserver-diagnostics-probe".into()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let mut problems = Vec::new();
    match reviews.create(&PostParams::default(), &probe).await {
        Ok(_) => {}
        Err(e) if status_code(&e) == Some(403) => problems.push(format!(
            "creating a TokenReview is forbidden ({}): bearer tokens cannot be checked",
            api_message(&e)
        )),
        Err(e) => problems.push(format!("creating a TokenReview: {e}")),
    }
    let sars: Api<SubjectAccessReview> = Api::all(client.clone());
    let probe = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("system:anonymous".into()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some("get".into()),
                resource: Some("namespaces".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    match sars.create(&PostParams::default(), &probe).await {
        Ok(_) => {}
        Err(e) if status_code(&e) == Some(403) => problems.push(format!(
            "creating a SubjectAccessReview is forbidden ({}): requests cannot be authorized",
            api_message(&e)
        )),
        Err(e) => problems.push(format!("creating a SubjectAccessReview: {e}")),
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(NotReady::new(format!("{}: {fix}", problems.join("; "))))
    }
}

fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

async fn apiservices(
    client: &kube::Client,
    versions: &[APIServiceVersion],
) -> Result<Vec<APIService>, NotReady> {
    let api: Api<APIService> = Api::all(client.clone());
    let mut found = Vec::new();
    for version in versions {
        let name = version.apiservice_name();
        match api.get_opt(&name).await {
            Ok(Some(a)) => found.push(a),
            Ok(None) => {}
            Err(e) if status_code(&e) == Some(403) => {
                return Err(NotReady::new(format!(
                    "cannot read APIService {name} (403 Forbidden): grant get on \
                     apiservices.apiregistration.k8s.io to the server's service account"
                )));
            }
            Err(e) => return Err(NotReady::new(format!("reading APIService {name}: {e}"))),
        }
    }
    Ok(found)
}

/// The DNS names and IPs of a certificate.
pub fn subject_alt_names(cert: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some(d.to_string()),
            GeneralName::IPAddress(ip) => match ip.len() {
                4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(*ip).ok()?).to_string()),
                16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(*ip).ok()?).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Whether the leaf of `chain` is valid for `host` (exactly or by a `*.` wildcard).
pub fn serving_names(chain: &[CertificateDer<'_>], host: &str) -> Result<(), NotReady> {
    let Some(leaf) = chain.first() else {
        return Err(NotReady::new("no serving certificate"));
    };
    let names = subject_alt_names(leaf);
    let matches = |n: &String| {
        n.eq_ignore_ascii_case(host)
            || n.strip_prefix("*.").is_some_and(|suffix| {
                host.split_once('.')
                    .is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(suffix))
            })
    };
    if names.iter().any(matches) {
        return Ok(());
    }
    Err(NotReady::new(format!(
        "the serving certificate is not valid for {host} (it names {}): the aggregator \
         connects to the Service by that name; issue the certificate with {host} among its \
         DNS names",
        if names.is_empty() {
            "nothing".to_string()
        } else {
            names.join(", ")
        }
    )))
}

/// Why a caBundle does not verify the serving certificate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServingChainError {
    /// There is no serving certificate.
    #[error("no serving certificate")]
    NoServingCertificate,
    /// The APIService has no caBundle.
    #[error("it has no caBundle")]
    NoCaBundle,
    /// The caBundle holds no usable certificate.
    #[error(transparent)]
    CaBundle(#[from] crate::tls::TlsError),
    /// No verifier could be made of the caBundle.
    #[error(transparent)]
    Verifier(#[from] rustls::client::VerifierBuilderError),
    /// The certificate names nothing a client could ask for.
    #[error(transparent)]
    Name(#[from] rustls::pki_types::InvalidDnsNameError),
    /// The chain does not verify.
    #[error(transparent)]
    Verify(#[from] rustls::Error),
}

/// Whether `ca_pem` (a caBundle) verifies the serving `chain` (leaf first), as the
/// aggregator's TLS client would, for a name the leaf carries.
pub fn verify_chain(
    chain: &[CertificateDer<'static>],
    ca_pem: &[u8],
) -> Result<(), ServingChainError> {
    let Some(leaf) = chain.first() else {
        return Err(ServingChainError::NoServingCertificate);
    };
    let roots = crate::tls::certs::parse_certs_pem(ca_pem)?;
    let store = crate::tls::root_store(&roots)?;
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(store),
        crate::tls::crypto_provider(),
    )
    .build()?;
    let name = subject_alt_names(leaf)
        .into_iter()
        .find(|n| !n.starts_with("*."))
        .unwrap_or_else(|| "localhost".into());
    let server_name = ServerName::try_from(name)?;
    verifier.verify_server_cert(leaf, &chain[1..], &server_name, &[], UnixTime::now())?;
    Ok(())
}
