//! `metrics-adapter`: metrics-server and a Prometheus adapter in one aggregated API server.
//!
//! - `metrics.k8s.io` (what `kubectl top` and the HPA's `Resource` metrics read): the usage
//!   of the Nodes and Pods of the core API, scraped from each kubelet's `/metrics/resource`
//!   every `--metric-resolution` as metrics-server scrapes it;
//! - `external.metrics.k8s.io`: every series of the `--scrape-url` Prometheus text endpoints,
//!   by name, its labels the `metricLabels` selectors filter on;
//! - `custom.metrics.k8s.io`: the series with `namespace` and `pod` labels, as metrics of
//!   those pods.
//!
//! [`Adapter::install`] adds all of it to an [`APIServer`]; `main.rs` only parses flags.

mod fetch;
pub mod kubelet;
mod options;
pub mod prometheus;
mod quantity;
mod resource;
mod series;
mod sources;

use std::sync::Arc;

use extension_apiserver::APIServer;
use extension_apiserver::aggregator::AggregatorOptions;
use extension_apiserver::server::ServerOptions;

pub use options::AdapterOptions;
pub use sources::{READYZ_CHECK, STALE_AFTER};

/// The command line of `metrics-adapter`: the framework's option groups flattened beside the
/// adapter's (the framework's book: "Flag reference").
#[derive(clap::Parser, Debug)]
pub struct Cli {
    /// Serving, TLS, storage, authentication and authorization.
    #[command(flatten)]
    pub server: ServerOptions,
    /// The core API (`--kubeconfig`) and APIService registration.
    #[command(flatten)]
    pub aggregator: AggregatorOptions,
    /// What is scraped.
    #[command(flatten)]
    pub adapter: AdapterOptions,
}

/// The adapter's sources and providers, ready to be installed on a server.
pub struct Adapter {
    state: Arc<sources::State>,
}

impl Adapter {
    /// An adapter scraping as `options` say, reading Nodes and Pods through `core` (the core
    /// kube-apiserver; without one no resource metrics are served and custom metrics by
    /// label selector find no pods). Fails on an unreadable CA file.
    pub fn new(options: AdapterOptions, core: Option<kube::Client>) -> Result<Self, String> {
        let state = sources::State::new(options, core)?;
        Ok(Self {
            state: Arc::new(state),
        })
    }

    /// Serves the three metrics APIs on `server`, with the `/readyz` check
    /// [`READYZ_CHECK`], and starts following the core API and scraping once it listens (until
    /// it shuts down).
    pub fn install(self, server: APIServer) -> APIServer {
        let state = self.state;
        let (ready, start) = (state.clone(), state.clone());
        server
            .resource_metrics(resource::ResourceMetrics(state.clone()))
            .custom_metrics(series::CustomMetrics(state.clone()))
            .external_metrics(series::ExternalMetrics(state))
            .readyz_check(READYZ_CHECK, move || {
                let result = ready.readiness();
                async move { result }
            })
            .post_start_hook("start-metrics-scrapers", move |ctx| async move {
                start.start(ctx.shutdown());
                Ok(())
            })
    }
}
