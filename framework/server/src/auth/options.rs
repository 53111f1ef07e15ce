//! The flags of delegated authentication and authorization, named and defaulted as
//! `k8s.io/apiserver`'s `DelegatingAuthenticationOptions` and `DelegatingAuthorizationOptions`
//! (plus `--anonymous-auth`). Flattened into [`ServerOptions`](crate::server::ServerOptions).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Delegated authentication and authorization options.
///
/// They select the server's mode: with `--authentication-kubeconfig`,
/// `--authorization-kubeconfig` or an in-cluster configuration the server delegates to the
/// cluster's kube-apiserver; without any, it runs standalone (self-signed client CA, any
/// authenticated user may do anything). See the book's *Delegated authentication* chapter.
#[derive(Clone, Debug, Args)]
pub struct DelegatingOptions {
    /// Let requests without credentials in as system:anonymous (group
    /// system:unauthenticated). Default: true in delegated mode (as k8s.io/apiserver's
    /// delegating authentication), false in standalone mode.
    #[arg(
        long = "anonymous-auth",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub anonymous_auth: Option<bool>,

    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to create
    /// tokenreviews.authentication.k8s.io (and to read the extension-apiserver-authentication
    /// ConfigMap). Without it, the in-cluster configuration is used when running in a pod.
    #[arg(long = "authentication-kubeconfig", value_name = "PATH")]
    pub authentication_kubeconfig: Option<PathBuf>,

    /// Do not look up missing authentication configuration (client CA, request-header
    /// settings) in kube-system/extension-apiserver-authentication.
    #[arg(long = "authentication-skip-lookup", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value_t = false, value_name = "BOOL")]
    pub authentication_skip_lookup: bool,

    /// If true, failures to look up missing authentication configuration from the cluster
    /// are not considered fatal. Note that this can result in authentication that treats all
    /// requests as anonymous.
    #[arg(long = "authentication-tolerate-lookup-failure", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", default_value_t = false,
          value_name = "BOOL")]
    pub authentication_tolerate_lookup_failure: bool,

    /// The duration to cache responses from the webhook token authenticator (TokenReview).
    #[arg(long = "authentication-token-webhook-cache-ttl", default_value = "10s",
          value_parser = parse_duration, value_name = "DURATION")]
    pub authentication_token_webhook_cache_ttl: Duration,

    /// If set, any request presenting a client certificate signed by one of the authorities
    /// in the client-ca-file is authenticated with an identity corresponding to the
    /// CommonName of the client certificate (groups: its Organizations).
    #[arg(long = "client-ca-file", value_name = "PATH")]
    pub client_ca_file: Option<PathBuf>,

    /// Root certificate bundle to use to verify client certificates on incoming requests
    /// before trusting usernames in headers specified by --requestheader-username-headers.
    #[arg(long = "requestheader-client-ca-file", value_name = "PATH")]
    pub requestheader_client_ca_file: Option<PathBuf>,

    /// List of client certificate common names to allow to provide usernames in headers
    /// specified by --requestheader-username-headers. If empty, any client certificate
    /// validated by the authorities in --requestheader-client-ca-file is allowed.
    #[arg(
        long = "requestheader-allowed-names",
        value_delimiter = ',',
        value_name = "NAMES"
    )]
    pub requestheader_allowed_names: Vec<String>,

    /// List of request headers to inspect for usernames. X-Remote-User is common.
    #[arg(
        long = "requestheader-username-headers",
        value_delimiter = ',',
        default_value = "x-remote-user",
        value_name = "HEADERS"
    )]
    pub requestheader_username_headers: Vec<String>,

    /// List of request headers to inspect for UIDs. X-Remote-Uid is suggested.
    #[arg(
        long = "requestheader-uid-headers",
        value_delimiter = ',',
        value_name = "HEADERS"
    )]
    pub requestheader_uid_headers: Vec<String>,

    /// List of request headers to inspect for groups. X-Remote-Group is suggested.
    #[arg(
        long = "requestheader-group-headers",
        value_delimiter = ',',
        default_value = "x-remote-group",
        value_name = "HEADERS"
    )]
    pub requestheader_group_headers: Vec<String>,

    /// List of request header prefixes to inspect. X-Remote-Extra- is suggested.
    #[arg(
        long = "requestheader-extra-headers-prefix",
        value_delimiter = ',',
        default_value = "x-remote-extra-",
        value_name = "PREFIXES"
    )]
    pub requestheader_extra_headers_prefix: Vec<String>,

    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to create
    /// subjectaccessreviews.authorization.k8s.io. Without it, the in-cluster configuration is
    /// used when running in a pod.
    #[arg(long = "authorization-kubeconfig", value_name = "PATH")]
    pub authorization_kubeconfig: Option<PathBuf>,

    /// The duration to cache 'authorized' responses from the webhook authorizer.
    #[arg(long = "authorization-webhook-cache-authorized-ttl", default_value = "10s",
          value_parser = parse_duration, value_name = "DURATION")]
    pub authorization_webhook_cache_authorized_ttl: Duration,

    /// The duration to cache 'unauthorized' responses from the webhook authorizer.
    #[arg(long = "authorization-webhook-cache-unauthorized-ttl", default_value = "10s",
          value_parser = parse_duration, value_name = "DURATION")]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,

    /// A list of HTTP paths to skip during authorization, i.e. these are authorized without
    /// contacting the 'core' kubernetes server. A trailing `*` matches any suffix.
    #[arg(
        long = "authorization-always-allow-paths",
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/livez",
        value_name = "PATHS"
    )]
    pub authorization_always_allow_paths: Vec<String>,

    /// Groups whose members are allowed everything without a SubjectAccessReview (the
    /// kube-apiserver grants system:masters everything anyway).
    #[arg(
        long = "authorization-always-allow-groups",
        value_delimiter = ',',
        default_value = "system:masters",
        value_name = "GROUPS"
    )]
    pub authorization_always_allow_groups: Vec<String>,

    /// Whether, without a kubeconfig, a pod's in-cluster configuration selects delegated mode
    /// (true, as in `k8s.io/apiserver`). Not a flag: tests turn it off so that they run the
    /// same inside a pod.
    #[arg(skip = true)]
    pub in_cluster: bool,
}

impl Default for DelegatingOptions {
    fn default() -> Self {
        let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        Self {
            anonymous_auth: None,
            authentication_kubeconfig: None,
            authentication_skip_lookup: false,
            authentication_tolerate_lookup_failure: false,
            authentication_token_webhook_cache_ttl: Duration::from_secs(10),
            client_ca_file: None,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: strings(&["x-remote-user"]),
            requestheader_uid_headers: Vec::new(),
            requestheader_group_headers: strings(&["x-remote-group"]),
            requestheader_extra_headers_prefix: strings(&["x-remote-extra-"]),
            authorization_kubeconfig: None,
            authorization_webhook_cache_authorized_ttl: Duration::from_secs(10),
            authorization_webhook_cache_unauthorized_ttl: Duration::from_secs(10),
            authorization_always_allow_paths: strings(&["/healthz", "/readyz", "/livez"]),
            authorization_always_allow_groups: strings(&["system:masters"]),
            in_cluster: true,
        }
    }
}

impl DelegatingOptions {
    /// The options with list entries trimmed and empty ones dropped, as pflag's string slices
    /// read them (`--requestheader-allowed-names=` is no name, not one empty name).
    pub fn normalized(&self) -> Self {
        let clean = |list: &[String]| -> Vec<String> {
            list.iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        };
        Self {
            requestheader_allowed_names: clean(&self.requestheader_allowed_names),
            requestheader_username_headers: clean(&self.requestheader_username_headers),
            requestheader_uid_headers: clean(&self.requestheader_uid_headers),
            requestheader_group_headers: clean(&self.requestheader_group_headers),
            requestheader_extra_headers_prefix: clean(&self.requestheader_extra_headers_prefix),
            authorization_always_allow_paths: clean(&self.authorization_always_allow_paths),
            authorization_always_allow_groups: clean(&self.authorization_always_allow_groups),
            ..self.clone()
        }
    }
}

/// A flag value that is not a Go duration (or is negative).
#[derive(Debug, thiserror::Error)]
#[error("invalid duration {text:?} (expected e.g. 10s, 1m30s, 500ms)")]
pub struct InvalidDuration {
    text: String,
}

/// Parses a duration as Go's `time.ParseDuration` writes them (`10s`, `1m30s`, `500ms`,
/// `2h`, `1.5s`, `0`), with [`kube_core::Duration`]; negative durations are refused.
pub fn parse_duration(text: &str) -> Result<Duration, InvalidDuration> {
    let text = text.trim();
    let bad = || InvalidDuration {
        text: text.to_owned(),
    };
    // kube_core reads an empty string as zero; Go's ParseDuration refuses it.
    if text.is_empty() {
        return Err(bad());
    }
    let parsed: kube_core::Duration = text.parse().map_err(|_| bad())?;
    if parsed.is_negative() {
        return Err(bad());
    }
    Ok(parsed.into())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: DelegatingOptions,
    }

    #[test]
    fn defaults_are_k8s_io_apiservers() {
        let parsed = Cli::try_parse_from(["server"]).unwrap().options;
        let default = DelegatingOptions::default();
        assert_eq!(parsed.anonymous_auth, None);
        assert_eq!(
            parsed.authentication_token_webhook_cache_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(
            parsed.requestheader_username_headers,
            default.requestheader_username_headers
        );
        assert_eq!(
            parsed.requestheader_extra_headers_prefix,
            ["x-remote-extra-"]
        );
        assert_eq!(
            parsed.authorization_always_allow_paths,
            ["/healthz", "/readyz", "/livez"]
        );
        assert_eq!(
            parsed.authorization_always_allow_groups,
            default.authorization_always_allow_groups
        );
        assert!(parsed.requestheader_uid_headers.is_empty());
    }

    #[test]
    fn flags_parse_as_pflag_writes_them() {
        let parsed = Cli::try_parse_from([
            "server",
            "--anonymous-auth=false",
            "--authentication-skip-lookup",
            "--authentication-token-webhook-cache-ttl=1m30s",
            "--requestheader-allowed-names=front-proxy-client,aggregator",
            "--authorization-always-allow-paths=/healthz,/metrics*",
            "--authorization-webhook-cache-unauthorized-ttl=500ms",
        ])
        .unwrap()
        .options;
        assert_eq!(parsed.anonymous_auth, Some(false));
        assert!(parsed.authentication_skip_lookup);
        assert_eq!(
            parsed.authentication_token_webhook_cache_ttl,
            Duration::from_secs(90)
        );
        assert_eq!(
            parsed.requestheader_allowed_names,
            ["front-proxy-client", "aggregator"]
        );
        assert_eq!(
            parsed.authorization_webhook_cache_unauthorized_ttl,
            Duration::from_millis(500)
        );
        let on = Cli::try_parse_from(["server", "--anonymous-auth"]).unwrap();
        assert_eq!(on.options.anonymous_auth, Some(true));
        assert!(on.options.in_cluster);
    }

    #[test]
    fn empty_lists_are_empty() {
        let parsed = Cli::try_parse_from([
            "server",
            "--requestheader-allowed-names=",
            "--authorization-always-allow-paths=",
            "--authorization-always-allow-groups= system:masters ,",
        ])
        .unwrap()
        .options
        .normalized();
        assert!(parsed.requestheader_allowed_names.is_empty());
        assert!(parsed.authorization_always_allow_paths.is_empty());
        assert_eq!(parsed.authorization_always_allow_groups, ["system:masters"]);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    }
}
