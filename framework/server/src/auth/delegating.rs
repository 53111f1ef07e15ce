//! Assembly of authentication and authorization from [`DelegatingOptions`]: the server's
//! *mode*, and in delegated mode `k8s.io/apiserver`'s delegating authenticator and authorizer.
//!
//! - **Standalone** (no `--authentication-kubeconfig`, no `--authorization-kubeconfig`, not in
//!   a pod): client certificates of the self-signed client CA (and of `--client-ca-file`),
//!   anonymous off unless `--anonymous-auth`. Authorization: the always-allow groups and
//!   paths (which matter for anonymous requests), then any authenticated user may do
//!   anything.
//! - **Delegated**: a union of, in this order, request headers from a verified front proxy,
//!   client certificates of the client CA, bearer tokens through `TokenReview`; anonymous on
//!   unless `--anonymous-auth=false`. Authorization: `--authorization-always-allow-groups`,
//!   then `--authorization-always-allow-paths`, then `SubjectAccessReview`. The client CA and
//!   the request-header settings come from the flags, or else (unless
//!   `--authentication-skip-lookup`) from `kube-system/extension-apiserver-authentication`,
//!   which is then watched: a rotated CA takes effect without a restart.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use rustls::pki_types::CertificateDer;

use super::{
    AlwaysAllowAuthenticated, AlwaysAllowPaths, Authenticator, Authorizer, DelegatingOptions,
    Dynamic, PrivilegedGroups, RequestHeaderAuthenticator, RequestHeaderConfig,
    SubjectAccessReviewAuthorizer, TokenReviewAuthenticator, UnionAuthenticator, UnionAuthorizer,
    X509Authenticator,
};
use crate::core_api::{self, core_client};
use crate::lifecycle::ShutdownSignal;

/// Namespace of the authentication ConfigMap.
pub const AUTHENTICATION_CONFIGMAP_NAMESPACE: &str = "kube-system";
/// Name of the ConfigMap kube-apiserver writes its client CA and front-proxy settings to.
pub const AUTHENTICATION_CONFIGMAP: &str = "extension-apiserver-authentication";

/// Paths served without credentials or authorization in standalone mode.
const STANDALONE_ALWAYS_ALLOW: [&str; 4] = ["/healthz", "/livez", "/readyz", "/version"];

/// Which way the server authenticates and authorizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Local use: its own client CA, every authenticated user may do anything.
    Standalone,
    /// Behind a cluster: front proxy, TokenReview, SubjectAccessReview.
    Delegated,
}

/// What the filters get: the assembled authenticator and authorizer and their settings.
pub struct AuthSetup {
    /// The mode the options selected.
    pub mode: Mode,
    /// Finds the user.
    pub authenticator: Arc<dyn Authenticator>,
    /// Decides what the user may do.
    pub authorizer: Arc<dyn Authorizer>,
    /// Whether requests without credentials proceed as `system:anonymous`.
    pub anonymous: bool,
    /// Non-resource paths served without authentication and authorization.
    pub always_allow_paths: Vec<String>,
}

impl std::fmt::Debug for AuthSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthSetup")
            .field("mode", &self.mode)
            .field("anonymous", &self.anonymous)
            .field("always_allow_paths", &self.always_allow_paths)
            .finish_non_exhaustive()
    }
}

/// Why delegated authentication and authorization could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthSetupError {
    /// A flag, file or the authentication ConfigMap says something unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A CA bundle could not be read as certificates.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

fn config_error(message: impl Into<String>) -> AuthSetupError {
    AuthSetupError::Config(message.into())
}

fn read(path: &Path, flag: &str) -> Result<Vec<u8>, AuthSetupError> {
    std::fs::read(path).map_err(|e| config_error(format!("--{flag} {}: {e}", path.display())))
}

/// Builds authentication and authorization for `options`.
///
/// `standalone_client_ca` is the self-signed client CA of the cert dir, trusted only in
/// standalone mode. In delegated mode the authentication ConfigMap is read here (a failure is
/// fatal unless `--authentication-tolerate-lookup-failure`) and then followed by a task that
/// ends with `shutdown`.
pub async fn build(
    options: &DelegatingOptions,
    standalone_client_ca: &[CertificateDer<'static>],
    shutdown: ShutdownSignal,
) -> Result<AuthSetup, AuthSetupError> {
    let options = &options.normalized();
    let authn_client = client(
        options.authentication_kubeconfig.as_deref(),
        options.in_cluster,
        "--authentication-kubeconfig",
    )
    .await?;
    let authz_client = client(
        options.authorization_kubeconfig.as_deref(),
        options.in_cluster,
        "--authorization-kubeconfig",
    )
    .await?;
    if authn_client.is_none() && authz_client.is_none() {
        return standalone(options, standalone_client_ca);
    }

    let (client_ca, request_header) = authenticators_from_files(options)?;
    let follower = AuthConfigFollower {
        client_ca: options.client_ca_file.is_none().then(|| client_ca.clone()),
        request_header: options
            .requestheader_client_ca_file
            .is_none()
            .then(|| request_header.clone()),
        applied: std::sync::Mutex::new(None),
    };
    let lookup = !options.authentication_skip_lookup
        && (follower.client_ca.is_some() || follower.request_header.is_some());
    match (&authn_client, lookup) {
        (Some(client), true) => follow_configmap(options, client, follower, shutdown).await?,
        (None, true) => tracing::warn!(
            "no authentication kubeconfig: client-ca-file and request-header settings are not \
             looked up in configmap/{AUTHENTICATION_CONFIGMAP}"
        ),
        _ => {}
    }
    let authenticator = delegated_authenticator(options, request_header, client_ca, authn_client);
    Ok(AuthSetup {
        mode: Mode::Delegated,
        authenticator: Arc::new(authenticator),
        authorizer: Arc::new(delegated_authorizer(options, authz_client)),
        anonymous: options.anonymous_auth.unwrap_or(true),
        always_allow_paths: options.authorization_always_allow_paths.clone(),
    })
}

/// The client-certificate authenticator, replaced when the client CA changes.
type ClientCaSlot = Arc<Dynamic<X509Authenticator>>;
/// The request-header authenticator, replaced when the front-proxy settings change.
type RequestHeaderSlot = Arc<Dynamic<RequestHeaderAuthenticator>>;

/// The client-certificate and request-header authenticators, set from `--client-ca-file` and
/// `--requestheader-client-ca-file` when given; otherwise empty until the authentication
/// ConfigMap fills them.
fn authenticators_from_files(
    options: &DelegatingOptions,
) -> Result<(ClientCaSlot, RequestHeaderSlot), AuthSetupError> {
    let client_ca = Arc::new(Dynamic::<X509Authenticator>::new());
    if let Some(path) = &options.client_ca_file {
        let ca = X509Authenticator::from_pem(&read(path, "client-ca-file")?)
            .map_err(|e| config_error(format!("--client-ca-file: {e}")))?;
        client_ca.set(Some(Arc::new(ca)));
    }
    let request_header = Arc::new(Dynamic::<RequestHeaderAuthenticator>::new());
    if let Some(path) = &options.requestheader_client_ca_file {
        let config = RequestHeaderConfig {
            client_ca_pem: read(path, "requestheader-client-ca-file")?,
            allowed_names: options.requestheader_allowed_names.clone(),
            username_headers: options.requestheader_username_headers.clone(),
            uid_headers: options.requestheader_uid_headers.clone(),
            group_headers: options.requestheader_group_headers.clone(),
            extra_headers_prefixes: options.requestheader_extra_headers_prefix.clone(),
        };
        let authenticator = RequestHeaderAuthenticator::new(&config)
            .map_err(|e| config_error(format!("--requestheader-client-ca-file: {e}")))?;
        request_header.set(Some(Arc::new(authenticator)));
    }
    Ok((client_ca, request_header))
}

/// Reads the authentication ConfigMap once (a failure is fatal unless
/// `--authentication-tolerate-lookup-failure`), then follows it until `shutdown`.
async fn follow_configmap(
    options: &DelegatingOptions,
    client: &kube::Client,
    follower: AuthConfigFollower,
    shutdown: ShutdownSignal,
) -> Result<(), AuthSetupError> {
    let api = Api::<ConfigMap>::namespaced(client.clone(), AUTHENTICATION_CONFIGMAP_NAMESPACE);
    match api.get_opt(AUTHENTICATION_CONFIGMAP).await {
        Ok(Some(map)) => follower.apply(&map.data.unwrap_or_default()),
        Ok(None) => tracing::warn!(
            "configmap/{AUTHENTICATION_CONFIGMAP} in {AUTHENTICATION_CONFIGMAP_NAMESPACE} \
             not found: no client-ca-file or request-header settings from the cluster"
        ),
        Err(e) if options.authentication_tolerate_lookup_failure => tracing::warn!(
            error = %e,
            "unable to get configmap/{AUTHENTICATION_CONFIGMAP} in \
             {AUTHENTICATION_CONFIGMAP_NAMESPACE}; continuing without it: \
             authentication may treat all requests as anonymous"
        ),
        Err(e) => {
            return Err(config_error(format!(
                "unable to load configmap based request-header-client-ca-file: {e}. \
                 Unable to get configmap/{AUTHENTICATION_CONFIGMAP} in \
                 {AUTHENTICATION_CONFIGMAP_NAMESPACE}. Usually fixed by 'kubectl create \
                 rolebinding -n kube-system ROLEBINDING_NAME \
                 --role=extension-apiserver-authentication-reader \
                 --serviceaccount=YOUR_NS:YOUR_SA'"
            )));
        }
    }
    follower.follow(api, shutdown);
    Ok(())
}

/// Request headers, then client certificates, then bearer tokens through TokenReview.
fn delegated_authenticator(
    options: &DelegatingOptions,
    request_header: RequestHeaderSlot,
    client_ca: ClientCaSlot,
    authn_client: Option<kube::Client>,
) -> UnionAuthenticator {
    let authenticator = UnionAuthenticator::new()
        .with(request_header)
        .with(client_ca);
    match authn_client {
        Some(client) => {
            let ttl = options.authentication_token_webhook_cache_ttl;
            authenticator.with(TokenReviewAuthenticator::new(client, ttl))
        }
        None => {
            tracing::warn!(
                "no authentication kubeconfig: bearer tokens cannot be reviewed (TokenReview)"
            );
            authenticator
        }
    }
}

/// `--authorization-always-allow-groups` and `--authorization-always-allow-paths`, asked
/// first in either mode.
fn always_allowed(options: &DelegatingOptions) -> UnionAuthorizer {
    let mut authorizer = UnionAuthorizer::new();
    if !options.authorization_always_allow_groups.is_empty() {
        let groups = options.authorization_always_allow_groups.clone();
        authorizer = authorizer.with(PrivilegedGroups::new(groups));
    }
    if !options.authorization_always_allow_paths.is_empty() {
        let paths = options.authorization_always_allow_paths.clone();
        authorizer = authorizer.with(AlwaysAllowPaths::new(paths));
    }
    authorizer
}

/// Always-allowed groups and paths, then SubjectAccessReview.
fn delegated_authorizer(
    options: &DelegatingOptions,
    authz_client: Option<kube::Client>,
) -> UnionAuthorizer {
    let authorizer = always_allowed(options);
    match authz_client {
        Some(client) => authorizer.with(SubjectAccessReviewAuthorizer::new(
            client,
            options.authorization_webhook_cache_authorized_ttl,
            options.authorization_webhook_cache_unauthorized_ttl,
        )),
        None => {
            tracing::warn!(
                "no authorization kubeconfig: SubjectAccessReviews cannot be made, only \
                 always-allowed groups and paths are authorized"
            );
            authorizer
        }
    }
}

/// A client of the core kube-apiserver from `kubeconfig`, or in a pod (when `in_cluster`)
/// from the in-cluster configuration.
async fn client(
    kubeconfig: Option<&Path>,
    in_cluster: bool,
    flag: &str,
) -> Result<Option<kube::Client>, AuthSetupError> {
    if kubeconfig.is_none() && !in_cluster {
        return Ok(None);
    }
    let client = core_client(kubeconfig)
        .await
        .map_err(|e| config_error(format!("{flag}: {e}")))?;
    Ok(client.map(|(client, _)| client))
}

fn standalone(
    options: &DelegatingOptions,
    standalone_client_ca: &[CertificateDer<'static>],
) -> Result<AuthSetup, AuthSetupError> {
    let mut authenticator =
        UnionAuthenticator::new().with(X509Authenticator::new(standalone_client_ca)?);
    if let Some(path) = &options.client_ca_file {
        let ca = X509Authenticator::from_pem(&read(path, "client-ca-file")?)
            .map_err(|e| config_error(format!("--client-ca-file: {e}")))?;
        authenticator = authenticator.with(ca);
    }
    // The always-allow flags act here too: with `--anonymous-auth=true`, a group such as
    // system:unauthenticated or a path in them is how anonymous requests get in.
    let authorizer = always_allowed(options).with(AlwaysAllowAuthenticated);
    let mut always_allow_paths = STANDALONE_ALWAYS_ALLOW.map(String::from).to_vec();
    for path in &options.authorization_always_allow_paths {
        if !always_allow_paths.contains(path) {
            always_allow_paths.push(path.clone());
        }
    }
    Ok(AuthSetup {
        mode: Mode::Standalone,
        authenticator: Arc::new(authenticator),
        authorizer: Arc::new(authorizer),
        anonymous: options.anonymous_auth.unwrap_or(false),
        always_allow_paths,
    })
}

/// Applies the authentication ConfigMap to the slots the flags left open.
struct AuthConfigFollower {
    client_ca: Option<Arc<Dynamic<X509Authenticator>>>,
    request_header: Option<Arc<Dynamic<RequestHeaderAuthenticator>>>,
    /// The data last applied: the same data again (a re-list after a watch ends) changes
    /// nothing, so the authenticators keep their verification caches.
    applied: std::sync::Mutex<Option<Data>>,
}

/// The ConfigMap's `data`.
type Data = BTreeMap<String, String>;

/// A JSON list of strings as kube-apiserver writes them into the ConfigMap (empty: none).
fn string_list(data: &Data, key: &str) -> Vec<String> {
    data.get(key)
        .filter(|s| !s.is_empty())
        .and_then(|s| serde_json::from_str::<Vec<String>>(s).ok())
        .unwrap_or_default()
}

impl AuthConfigFollower {
    /// Installs what `data` (the ConfigMap's `data`) says. A key that is missing disables
    /// that kind of authentication; content that does not parse leaves the previous one.
    fn apply(&self, data: &Data) {
        {
            let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
            if applied.as_ref() == Some(data) {
                return;
            }
            *applied = Some(data.clone());
        }
        if let Some(slot) = &self.client_ca {
            match data.get("client-ca-file").filter(|s| !s.trim().is_empty()) {
                None => slot.set(None),
                Some(pem) => match X509Authenticator::from_pem(pem.as_bytes()) {
                    Ok(ca) => slot.set(Some(Arc::new(ca))),
                    Err(e) => {
                        tracing::error!(error = %e, "client-ca-file of {AUTHENTICATION_CONFIGMAP}")
                    }
                },
            }
        }
        if let Some(slot) = &self.request_header {
            let ca = data
                .get("requestheader-client-ca-file")
                .filter(|s| !s.trim().is_empty());
            let Some(ca) = ca else {
                slot.set(None);
                return;
            };
            let config = RequestHeaderConfig {
                client_ca_pem: ca.as_bytes().to_vec(),
                allowed_names: string_list(data, "requestheader-allowed-names"),
                username_headers: string_list(data, "requestheader-username-headers"),
                uid_headers: string_list(data, "requestheader-uid-headers"),
                group_headers: string_list(data, "requestheader-group-headers"),
                extra_headers_prefixes: string_list(data, "requestheader-extra-headers-prefix"),
            };
            match RequestHeaderAuthenticator::new(&config) {
                Ok(authenticator) => slot.set(Some(Arc::new(authenticator))),
                Err(e) => tracing::error!(
                    error = %e,
                    "requestheader-client-ca-file of {AUTHENTICATION_CONFIGMAP}"
                ),
            }
        }
    }

    /// Follows the ConfigMap until `shutdown` (see [`core_api::follow`]).
    fn follow(self, api: Api<ConfigMap>, shutdown: ShutdownSignal) {
        let config =
            watcher::Config::default().fields(&format!("metadata.name={AUTHENTICATION_CONFIGMAP}"));
        let what =
            format!("configmap/{AUTHENTICATION_CONFIGMAP} in {AUTHENTICATION_CONFIGMAP_NAMESPACE}");
        core_api::follow(
            api,
            config,
            what,
            shutdown,
            move |maps: &Store<ConfigMap>| {
                let key = ObjectRef::new(AUTHENTICATION_CONFIGMAP)
                    .within(AUTHENTICATION_CONFIGMAP_NAMESPACE);
                // As Go's CA controllers: a deleted ConfigMap leaves the last settings.
                if let Some(map) = maps.get(&key) {
                    self.apply(map.data.as_ref().unwrap_or(&Data::new()));
                }
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configmap_lists_are_json() {
        let data = Data::from([
            (
                "requestheader-allowed-names".into(),
                "[\"front-proxy-client\"]".into(),
            ),
            ("requestheader-group-headers".into(), String::new()),
        ]);
        assert_eq!(
            string_list(&data, "requestheader-allowed-names"),
            ["front-proxy-client"]
        );
        assert!(string_list(&data, "requestheader-group-headers").is_empty());
        assert!(string_list(&data, "missing").is_empty());
    }
}
