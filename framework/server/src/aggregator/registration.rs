//! `--register-apiservice`: one `apiregistration.k8s.io/v1` APIService per served group
//! version, named `{version}.{group}`, pointing at this server's Service, with the serving
//! certificate's CA as `caBundle`.
//!
//! [`APIServiceRegistrar::register`] takes the CA bundle and can run again at any time (when
//! the serving certificate changes, or to retry): it creates what is missing, updates what
//! differs (with the resourceVersion it read, retrying a 409 a few times) and leaves alone
//! what is already right. An APIService that points at another Service, or that kube-apiserver
//! serves itself (no `spec.service`), is ours only with `--apiservice-overwrite`; otherwise it
//! is a conflict: logged, and the `/readyz` check `apiservice-registration` fails with the
//! reason.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{APIService, APIServiceSpec};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::aggregator::{APIServiceVersion, Findings};
use crate::lifecycle::NotReady;

/// The name of the `/readyz` check with the registration's result.
pub const READYZ_CHECK: &str = "apiservice-registration";

/// How many times an update that lost a race (409) is retried with a fresh read.
const CONFLICT_RETRIES: usize = 3;

/// What to register.
#[derive(Clone, Debug)]
pub struct RegistrationConfig {
    /// `spec.service.namespace`.
    pub service_namespace: String,
    /// `spec.service.name`.
    pub service_name: String,
    /// `spec.service.port`.
    pub service_port: i32,
    /// `spec.insecureSkipTLSVerify` instead of a caBundle.
    pub insecure_skip_tls_verify: bool,
    /// Take over APIServices that point elsewhere.
    pub overwrite: bool,
    /// The group versions, one APIService each.
    pub versions: Vec<APIServiceVersion>,
}

/// What happened to one APIService.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistrationOutcome {
    /// It did not exist and was created.
    Created,
    /// It differed and was updated.
    Updated,
    /// It was already as wanted.
    Unchanged,
}

/// Why one APIService could not be registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistrationError {
    /// It exists and points at another Service (or is served by kube-apiserver itself).
    Conflict {
        /// The APIService.
        name: String,
        /// Where it points: `namespace/name`, or `kube-apiserver (local)`.
        points_at: String,
    },
    /// The core API refused (403): the service account lacks RBAC.
    Forbidden {
        /// The APIService.
        name: String,
        /// The verb that was refused.
        verb: &'static str,
        /// The core API's message.
        message: String,
    },
    /// Any other failure (unreachable core API, repeated 409, ...).
    Failed {
        /// The APIService.
        name: String,
        /// What went wrong.
        message: String,
    },
}

impl fmt::Display for RegistrationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Conflict { name, points_at } => write!(
                f,
                "APIService {name} points at {points_at}, not at this server: delete it, or \
                 start with --apiservice-overwrite to take it over"
            ),
            Self::Forbidden {
                name,
                verb,
                message,
            } => write!(
                f,
                "not allowed to {verb} APIService {name} ({message}): bind a ClusterRole with \
                 get, create and update on apiservices.apiregistration.k8s.io to the server's \
                 service account (see the `manifests` command)"
            ),
            Self::Failed { name, message } => write!(f, "registering APIService {name}: {message}"),
        }
    }
}

impl std::error::Error for RegistrationError {}

/// One run's results, per APIService name.
pub type RegistrationResults = Vec<(String, Result<RegistrationOutcome, RegistrationError>)>;

/// Registers the APIServices of a server; cheap to clone, safe to run again.
#[derive(Clone)]
pub struct APIServiceRegistrar {
    api: Api<APIService>,
    config: Arc<RegistrationConfig>,
    findings: Findings,
    /// The CA bundle of the last [`register`](Self::register), for [`refresh`](Self::refresh).
    ca_bundle: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
}

impl APIServiceRegistrar {
    /// A registrar using `client` (the core kube-apiserver).
    pub fn new(client: kube::Client, config: RegistrationConfig) -> Self {
        Self::with_findings(client, config, Findings::default())
    }

    /// A registrar that records its results in `findings` under [`READYZ_CHECK`].
    pub fn with_findings(
        client: kube::Client,
        config: RegistrationConfig,
        findings: Findings,
    ) -> Self {
        Self {
            api: Api::all(client),
            config: Arc::new(config),
            findings,
            ca_bundle: Arc::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RegistrationConfig {
        &self.config
    }

    /// Where results are recorded (the `/readyz` check reads them).
    pub fn findings(&self) -> &Findings {
        &self.findings
    }

    /// The APIService wanted for `version` with `ca_bundle` (PEM).
    pub fn desired(&self, version: &APIServiceVersion, ca_bundle: Option<&[u8]>) -> APIServiceSpec {
        let config = &self.config;
        let insecure = config.insecure_skip_tls_verify;
        APIServiceSpec {
            ca_bundle: if insecure {
                None
            } else {
                ca_bundle.map(|ca| ByteString(ca.to_vec()))
            },
            insecure_skip_tls_verify: insecure.then_some(true),
            ..version.spec(
                &config.service_namespace,
                &config.service_name,
                config.service_port,
            )
        }
    }

    /// Creates or updates every APIService with `ca_bundle` (the PEM CA of the serving
    /// certificate); run it again with the new bundle when the certificate changes. Logs each
    /// change and problem and records the outcome for `/readyz`.
    pub async fn register(&self, ca_bundle: Option<&[u8]>) -> RegistrationResults {
        *self.ca_bundle.lock().unwrap_or_else(|e| e.into_inner()) = ca_bundle.map(<[u8]>::to_vec);
        self.register_with(ca_bundle).await
    }

    /// Runs [`register`](Self::register) again with the last CA bundle (to retry, or to
    /// repair an APIService someone changed).
    pub async fn refresh(&self) -> RegistrationResults {
        let ca = self
            .ca_bundle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        self.register_with(ca.as_deref()).await
    }

    async fn register_with(&self, ca_bundle: Option<&[u8]>) -> RegistrationResults {
        let mut results = Vec::new();
        for version in &self.config.versions {
            let name = version.apiservice_name();
            let result = self.register_one(version, ca_bundle).await;
            if let Ok(outcome @ (RegistrationOutcome::Created | RegistrationOutcome::Updated)) =
                &result
            {
                tracing::info!(apiservice = %name, ?outcome, "APIService registered");
            }
            results.push((name, result));
        }
        let problems: Vec<String> = results
            .iter()
            .filter_map(|(_, r)| r.as_ref().err().map(ToString::to_string))
            .collect();
        let summary = if problems.is_empty() {
            Ok(())
        } else {
            Err(NotReady::new(problems.join("; ")))
        };
        // One log line per problem when it appears, not at every retry.
        if self.findings.get(READYZ_CHECK).as_ref() != Some(&summary) {
            for problem in &problems {
                tracing::warn!(check = READYZ_CHECK, "{problem}");
            }
        }
        self.findings.set(READYZ_CHECK, summary);
        results
    }

    async fn register_one(
        &self,
        version: &APIServiceVersion,
        ca_bundle: Option<&[u8]>,
    ) -> Result<RegistrationOutcome, RegistrationError> {
        let name = version.apiservice_name();
        let desired = self.desired(version, ca_bundle);
        for _ in 0..CONFLICT_RETRIES {
            let existing = self
                .api
                .get_opt(&name)
                .await
                .map_err(|e| classify(&name, "get", e))?;
            let Some(mut existing) = existing else {
                let object = APIService {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(desired.clone()),
                    status: None,
                };
                match self.api.create(&PostParams::default(), &object).await {
                    Ok(_) => return Ok(RegistrationOutcome::Created),
                    // Created by someone else since we looked: look again.
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => return Err(classify(&name, "create", e)),
                }
            };
            if !self.config.overwrite {
                if let Some(points_at) = self.elsewhere(existing.spec.as_ref()) {
                    return Err(RegistrationError::Conflict { name, points_at });
                }
            }
            if existing.spec.as_ref() == Some(&desired) {
                return Ok(RegistrationOutcome::Unchanged);
            }
            existing.spec = Some(desired.clone());
            existing.status = None;
            match self
                .api
                .replace(&name, &PostParams::default(), &existing)
                .await
            {
                Ok(_) => return Ok(RegistrationOutcome::Updated),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(classify(&name, "update", e)),
            }
        }
        Err(RegistrationError::Failed {
            name,
            message: format!("still conflicting after {CONFLICT_RETRIES} attempts"),
        })
    }

    /// Where an existing APIService points, if not at our Service.
    pub fn elsewhere(&self, spec: Option<&APIServiceSpec>) -> Option<String> {
        let Some(service) = spec.and_then(|s| s.service.as_ref()) else {
            return Some("kube-apiserver (local, no spec.service)".into());
        };
        let namespace = service.namespace.as_deref().unwrap_or("");
        let name = service.name.as_deref().unwrap_or("");
        let ours = namespace == self.config.service_namespace && name == self.config.service_name;
        (!ours).then(|| format!("service {namespace}/{name}"))
    }
}

fn classify(name: &str, verb: &'static str, error: kube::Error) -> RegistrationError {
    match error {
        kube::Error::Api(status) if status.code == 403 => RegistrationError::Forbidden {
            name: name.to_string(),
            verb,
            message: status.message.clone(),
        },
        other => RegistrationError::Failed {
            name: name.to_string(),
            message: format!("{verb}: {other}"),
        },
    }
}
