//! The command-line options of the aggregator integration: the core API connection and the
//! APIService registration, flattened into a server's own parser next to
//! [`ServerOptions`](crate::server::ServerOptions).

use std::path::PathBuf;

use clap::Args;

/// How the server finds the core kube-apiserver and registers itself with its aggregator.
///
/// Flag names follow `sample-apiserver` (`--kubeconfig`) and add the `--apiservice-*` family.
#[derive(Clone, Debug, Default, Args)]
pub struct AggregatorOptions {
    /// A kubeconfig of the core kube-apiserver (the cluster this server extends). Without it a
    /// server in a pod uses its service account (in-cluster configuration); outside a cluster
    /// there is no core API (standalone mode: no registration, no namespace lifecycle).
    #[arg(long = "kubeconfig")]
    pub kubeconfig: Option<PathBuf>,

    /// Without --kubeconfig, use the pod's service account when running in a pod. True when
    /// parsed from the command line (as sample-apiserver); false in
    /// `AggregatorOptions::default()`, so a server built in code (and
    /// `TestServer` (extension-apiserver-testing)) stays standalone in a CI pod unless asked.
    #[arg(skip = true)]
    pub in_cluster: bool,

    /// At start, create or update one `apiregistration.k8s.io/v1` APIService per served group
    /// version (`{version}.{group}`) pointing at --apiservice-service-namespace/-name, with
    /// the serving certificate's CA as caBundle. Needs a core API.
    #[arg(long = "register-apiservice", default_value_t = false)]
    pub register_apiservice: bool,

    /// The namespace of the Service in front of this server (the APIService's
    /// `spec.service.namespace`). Also used to check the serving certificate's names.
    #[arg(long = "apiservice-service-namespace")]
    pub service_namespace: Option<String>,

    /// The name of the Service in front of this server (the APIService's
    /// `spec.service.name`).
    #[arg(long = "apiservice-service-name")]
    pub service_name: Option<String>,

    /// The Service port the aggregator connects to (default: --secure-port; the `manifests`
    /// Deployment passes 443, the port its Service exposes).
    #[arg(long = "apiservice-service-port")]
    pub service_port: Option<u16>,

    /// Register with `insecureSkipTLSVerify: true` and no caBundle (for experiments only: the
    /// aggregator then talks to this server without checking its certificate).
    #[arg(long = "apiservice-insecure-skip-tls-verify", default_value_t = false)]
    pub insecure_skip_tls_verify: bool,

    /// Take over APIServices of our group versions that point at another Service (or are
    /// served locally by kube-apiserver). Without it such a conflict is logged and fails
    /// `/readyz`, and the APIService is left alone.
    #[arg(long = "apiservice-overwrite", default_value_t = false)]
    pub overwrite: bool,

    /// A PEM file with the CA that signed the serving certificate, for the caBundle (e.g. the
    /// `ca.crt` of a cert-manager Secret). Default: the last certificate of --tls-cert-file's
    /// chain, or the self-signed serving CA in --cert-dir.
    #[arg(long = "apiservice-ca-file")]
    pub ca_file: Option<PathBuf>,

    /// How often failing registration and deployment checks are tried again (not a flag;
    /// default [`RETRY_INTERVAL`](crate::aggregator::RETRY_INTERVAL)).
    #[arg(skip)]
    pub retry_interval: Option<std::time::Duration>,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::AggregatorOptions;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: AggregatorOptions,
    }

    #[test]
    fn the_command_line_looks_in_cluster_but_code_stays_standalone() {
        let parsed = Cli::try_parse_from(["server"]).unwrap().options;
        assert!(parsed.in_cluster);
        assert!(!parsed.register_apiservice);
        assert!(!AggregatorOptions::default().in_cluster);
    }

    #[test]
    fn registration_flags() {
        let parsed = Cli::try_parse_from([
            "server",
            "--kubeconfig=/etc/core.kubeconfig",
            "--register-apiservice",
            "--apiservice-service-namespace=wardle",
            "--apiservice-service-name=api",
            "--apiservice-service-port=443",
            "--apiservice-ca-file=/certs/ca.crt",
            "--apiservice-overwrite",
        ])
        .unwrap()
        .options;
        assert!(parsed.register_apiservice && parsed.overwrite);
        assert!(!parsed.insecure_skip_tls_verify);
        assert_eq!(parsed.service_namespace.as_deref(), Some("wardle"));
        assert_eq!(parsed.service_name.as_deref(), Some("api"));
        assert_eq!(parsed.service_port, Some(443));
    }
}
