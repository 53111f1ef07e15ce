//! The adapter's flags, beside the framework's: metrics-server's names for the kubelet
//! scrape, `--scrape-url` and `--scrape-interval` for the Prometheus endpoints.

use std::path::PathBuf;
use std::time::Duration;

use extension_apiserver::metrics_apis::parse_go_duration;

/// Where the token the kubelets are called with lives in a pod (the service account's).
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// The cluster's CA in a pod: what kubelets' serving certificates are checked against when
/// `--kubelet-certificate-authority` names none (metrics-server uses its client's CA).
pub const SERVICE_ACCOUNT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// What is scraped, and how.
#[derive(Clone, Debug, clap::Args)]
pub struct AdapterOptions {
    /// A Prometheus text-format endpoint to scrape (repeatable): each series is the external
    /// metric of its name, and with `namespace` and `pod` labels a custom metric of that pod.
    #[arg(long = "scrape-url", value_name = "URL", value_parser = scrape_url)]
    pub scrape_urls: Vec<http::Uri>,

    /// How often the --scrape-url endpoints are scraped (a Go duration).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = duration)]
    pub scrape_interval: Duration,

    /// A CA bundle (PEM) for https --scrape-url endpoints.
    #[arg(long, value_name = "FILE")]
    pub scrape_certificate_authority: Option<PathBuf>,

    /// How often the kubelets are scraped (metrics-server's flag; it keeps 60s by default, the
    /// HPA reads every 15s).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = duration)]
    pub metric_resolution: Duration,

    /// Which of a Node's `status.addresses` the kubelet is reached at: the first type of this
    /// list the Node has (metrics-server's flag, with its shipped manifest's order).
    #[arg(
        long,
        value_name = "TYPES",
        value_delimiter = ',',
        default_value = "InternalIP,ExternalIP,Hostname"
    )]
    pub kubelet_preferred_address_types: Vec<String>,

    /// The kubelets' port.
    #[arg(long, value_name = "PORT", default_value_t = 10250)]
    pub kubelet_port: u16,

    /// Use the port in each Node's status (`daemonEndpoints.kubeletEndpoint.Port`) instead of
    /// --kubelet-port.
    #[arg(long, default_value_t = false)]
    pub kubelet_use_node_status_port: bool,

    /// Do not verify the kubelets' serving certificates (for self-signed ones; the connection
    /// is encrypted, not authenticated).
    #[arg(long, default_value_t = false)]
    pub kubelet_insecure_tls: bool,

    /// The CA bundle (PEM) the kubelets' serving certificates are signed by (default: the
    /// cluster CA of the pod's service account).
    #[arg(long, value_name = "FILE")]
    pub kubelet_certificate_authority: Option<PathBuf>,

    /// The longest a kubelet scrape may take (at most 9/10 of --metric-resolution is used).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub kubelet_request_timeout: Duration,
}

impl Default for AdapterOptions {
    fn default() -> Self {
        Self {
            scrape_urls: Vec::new(),
            scrape_interval: Duration::from_secs(15),
            scrape_certificate_authority: None,
            metric_resolution: Duration::from_secs(15),
            kubelet_preferred_address_types: ["InternalIP", "ExternalIP", "Hostname"]
                .map(String::from)
                .to_vec(),
            kubelet_port: 10250,
            kubelet_use_node_status_port: false,
            kubelet_insecure_tls: false,
            kubelet_certificate_authority: None,
            kubelet_request_timeout: Duration::from_secs(10),
        }
    }
}

fn duration(value: &str) -> Result<Duration, String> {
    match parse_go_duration(value) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(format!(
            "{value:?} is not a positive duration such as 15s or 1m"
        )),
    }
}

fn scrape_url(value: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = value.parse().map_err(|e| format!("{e}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => Ok(uri),
        _ => Err(format!("{value:?} is not an http(s) URL with a host")),
    }
}
