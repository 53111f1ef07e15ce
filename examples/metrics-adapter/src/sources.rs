//! What the adapter knows: the core API's Nodes and Pods (followed with kube-rs reflectors),
//! the kubelets' last batches and the `--scrape-url` pages, kept current by two loops.
//!
//! A scrape that fails or answers garbage keeps the last good data until it is older than
//! [`STALE_AFTER`] intervals: one missed scrape (a kubelet restarting, a slow endpoint) does
//! not take metrics from the HPA, which then holds its scale, but data three periods old no
//! longer stands for the present. `/readyz` says which scrape failed and why while no good
//! data is left.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use extension_apiserver::Error;
use extension_apiserver::core_api::{Followed, follow};
use extension_apiserver::lifecycle::{NotReady, ShutdownSignal};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::watcher;

use crate::fetch::{Fetcher, Trust};
use crate::kubelet::{self, History};
use crate::options::{AdapterOptions, SERVICE_ACCOUNT_CA, SERVICE_ACCOUNT_TOKEN};
use crate::prometheus::{self, Sample};

/// After how many intervals without a good scrape the last good data is dropped.
pub const STALE_AFTER: u32 = 3;

/// The name of the `/readyz` check.
pub const READYZ_CHECK: &str = "metrics-scrapes";

/// The last scrapes of one target.
#[derive(Debug, Default)]
pub(crate) struct Scrape<T> {
    /// What was fetched.
    pub(crate) url: String,
    /// What the good scrapes gave.
    pub(crate) data: T,
    /// When the last good scrape ended.
    pub(crate) good_at: Option<Instant>,
    /// Its wall-clock time (the time of samples that carry none).
    pub(crate) good_time: Option<SystemTime>,
    /// Why the last scrape failed, if it did.
    pub(crate) error: Option<String>,
}

impl<T> Scrape<T> {
    pub(crate) fn fresh(&self, max_age: Duration) -> bool {
        self.good_at.is_some_and(|at| at.elapsed() <= max_age)
    }
}

/// The core API objects the adapter reads.
pub(crate) struct Cluster {
    pub(crate) nodes: Followed<Node>,
    /// Only metadata: the labels and existence of pods is all the adapter needs.
    pub(crate) pods: Followed<PartialObjectMeta<Pod>>,
}

impl Cluster {
    /// Whether the first lists of Nodes and Pods arrived: before that an empty cache means
    /// "not known yet", not "none", and answering from it would tell an HPA that no pod has
    /// the metric.
    pub(crate) fn synced(&self) -> bool {
        self.nodes.synced() && self.pods.synced()
    }
}

/// The cluster's caches once they hold the first lists; 503 before (what a client retries).
pub(crate) fn synced_cluster(state: &State) -> Result<Option<&Cluster>, Error> {
    match state.cluster.get() {
        None => Ok(None),
        Some(cluster) if cluster.synced() => Ok(Some(cluster)),
        Some(_) => Err(Error::service_unavailable(NOT_SYNCED)),
    }
}

/// Why the adapter is not ready, and the message of its 503s, until the first lists arrive.
const NOT_SYNCED: &str = "the core API's nodes and pods are not listed yet";

/// Everything the providers read.
pub(crate) struct State {
    pub(crate) options: AdapterOptions,
    core: Option<kube::Client>,
    kubelet_fetcher: Fetcher,
    page_fetcher: Fetcher,
    pub(crate) cluster: OnceLock<Cluster>,
    pub(crate) kubelets: Mutex<BTreeMap<String, Scrape<History>>>,
    pub(crate) pages: Mutex<BTreeMap<String, Scrape<Vec<Sample>>>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    pub(crate) fn new(options: AdapterOptions, core: Option<kube::Client>) -> Result<Self, String> {
        let kubelet_trust = match (
            &options.kubelet_certificate_authority,
            options.kubelet_insecure_tls,
        ) {
            (_, true) => Trust::Insecure,
            (Some(ca), false) => Trust::Ca(ca.clone()),
            (None, false) if std::path::Path::new(SERVICE_ACCOUNT_CA).exists() => {
                Trust::Ca(SERVICE_ACCOUNT_CA.into())
            }
            (None, false) => Trust::None,
        };
        let kubelet_timeout = options
            .kubelet_request_timeout
            .min(options.metric_resolution * 9 / 10);
        let kubelet_fetcher = Fetcher::new(&kubelet_trust, kubelet_timeout)
            .map_err(|e| format!("kubelet TLS: {e}"))?
            .with_token_file(Some(SERVICE_ACCOUNT_TOKEN.as_ref()));
        let page_trust = options
            .scrape_certificate_authority
            .clone()
            .map_or(Trust::None, Trust::Ca);
        let page_fetcher = Fetcher::new(&page_trust, options.scrape_interval * 9 / 10)
            .map_err(|e| format!("--scrape-certificate-authority: {e}"))?;
        let pages = options
            .scrape_urls
            .iter()
            .map(|url| {
                let scrape = Scrape {
                    url: url.to_string(),
                    ..Scrape::default()
                };
                (url.to_string(), scrape)
            })
            .collect();
        Ok(Self {
            options,
            core,
            kubelet_fetcher,
            page_fetcher,
            cluster: OnceLock::new(),
            kubelets: Mutex::new(BTreeMap::new()),
            pages: Mutex::new(pages),
        })
    }

    /// Starts following the core API and the two scrape loops, until `shutdown`.
    pub(crate) fn start(self: &Arc<Self>, shutdown: &ShutdownSignal) {
        if let Some(client) = &self.core {
            let config = watcher::Config::default();
            let nodes = follow(
                Api::<Node>::all(client.clone()),
                config.clone(),
                "nodes".into(),
                shutdown.clone(),
                |_| {},
            );
            let pods = follow(
                Api::<PartialObjectMeta<Pod>>::all(client.clone()),
                config,
                "pods".into(),
                shutdown.clone(),
                |_| {},
            );
            let _ = self.cluster.set(Cluster { nodes, pods });
            let state = self.clone();
            spawn_every(self.options.metric_resolution, shutdown, move || {
                let state = state.clone();
                async move { state.scrape_kubelets().await }
            });
        }
        if !self.options.scrape_urls.is_empty() {
            let state = self.clone();
            spawn_every(self.options.scrape_interval, shutdown, move || {
                let state = state.clone();
                async move { state.scrape_pages().await }
            });
        }
    }

    /// How old the last good kubelet data may be.
    pub(crate) fn kubelet_max_age(&self) -> Duration {
        self.options.metric_resolution * STALE_AFTER
    }

    /// How old the last good page may be.
    pub(crate) fn page_max_age(&self) -> Duration {
        self.options.scrape_interval * STALE_AFTER
    }

    /// One round over the kubelets of the Nodes now in the core API.
    async fn scrape_kubelets(&self) {
        let Some(cluster) = self.cluster.get() else {
            return;
        };
        if !cluster.synced() {
            return;
        }
        let nodes = cluster.nodes.store().state();
        let rounds = nodes.iter().map(|node| async move {
            let name = node.metadata.name.clone().unwrap_or_default();
            let url = self.kubelet_url(node);
            let result = match &url {
                Ok(url) => self.fetch_page(&self.kubelet_fetcher, url).await,
                Err(e) => Err(e.clone()),
            };
            let url = url.map(|u| u.to_string()).unwrap_or_default();
            (name, url, result)
        });
        let results = futures::future::join_all(rounds).await;
        let max_age = self.kubelet_max_age();
        let mut kubelets = lock(&self.kubelets);
        kubelets.retain(|name, _| results.iter().any(|(n, _, _)| n == name));
        for (name, url, result) in results {
            let scrape = kubelets.entry(name.clone()).or_default();
            scrape.url = url;
            match result {
                Ok((samples, at)) => {
                    // After a gap, usage waits for two fresh points rather than spanning it.
                    if !scrape.fresh(max_age) {
                        scrape.data = History::default();
                    }
                    scrape.data.store(kubelet::decode(&samples, at));
                    scrape.good_at = Some(Instant::now());
                    scrape.good_time = Some(at);
                    scrape.error = None;
                }
                Err(e) => {
                    tracing::warn!(node = %name, url = %scrape.url, "scraping the kubelet: {e}");
                    scrape.error = Some(e);
                }
            }
        }
    }

    /// One round over the `--scrape-url` endpoints.
    async fn scrape_pages(&self) {
        let rounds = self.options.scrape_urls.iter().map(|url| async move {
            (
                url.to_string(),
                self.fetch_page(&self.page_fetcher, url).await,
            )
        });
        let results = futures::future::join_all(rounds).await;
        let mut pages = lock(&self.pages);
        for (url, result) in results {
            let scrape = pages.entry(url.clone()).or_default();
            match result {
                Ok((samples, at)) => {
                    scrape.data = samples;
                    scrape.good_at = Some(Instant::now());
                    scrape.good_time = Some(at);
                    scrape.error = None;
                }
                Err(e) => {
                    tracing::warn!(%url, "scraping: {e}");
                    scrape.error = Some(e);
                }
            }
        }
    }

    /// Fetches and parses one page: its samples and when it was fetched.
    async fn fetch_page(
        &self,
        fetcher: &Fetcher,
        url: &http::Uri,
    ) -> Result<(Vec<Sample>, SystemTime), String> {
        let body = fetcher.get(url).await?;
        let at = SystemTime::now();
        let text = std::str::from_utf8(&body).map_err(|e| format!("not UTF-8: {e}"))?;
        let samples = prometheus::parse(text).map_err(|e| format!("not the text format: {e}"))?;
        Ok((samples, at))
    }

    /// `https://{address}:{port}/metrics/resource`, as metrics-server addresses a kubelet: the
    /// Node's address of the first preferred type it has.
    fn kubelet_url(&self, node: &Node) -> Result<http::Uri, String> {
        let status = node.status.as_ref();
        let addresses = status
            .and_then(|s| s.addresses.as_deref())
            .unwrap_or_default();
        let preferred = &self.options.kubelet_preferred_address_types;
        let ip = preferred
            .iter()
            .find_map(|kind| addresses.iter().find(|a| &a.type_ == kind))
            .map(|a| a.address.clone())
            .ok_or_else(|| format!("the node has no address of type {}", preferred.join(", ")))?;
        let port = if self.options.kubelet_use_node_status_port {
            status
                .and_then(|s| s.daemon_endpoints.as_ref())
                .and_then(|d| d.kubelet_endpoint.as_ref())
                .map(|e| e.port)
                .ok_or("the node's status has no kubelet port")?
        } else {
            i32::from(self.options.kubelet_port)
        };
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip
        };
        format!("https://{host}:{port}/metrics/resource")
            .parse()
            .map_err(|e| format!("kubelet URL: {e}"))
    }

    /// `/readyz`: fails until the first lists of Nodes and Pods arrived, while a `--scrape-url`
    /// has failed and has no good data left, or while
    /// every kubelet has (a single kubelet down is the node's problem, not the adapter's, as
    /// metrics-server's readiness only asks for some data).
    pub(crate) fn readiness(&self) -> Result<(), NotReady> {
        if self.cluster.get().is_some_and(|c| !c.synced()) {
            return Err(NotReady::new(NOT_SYNCED));
        }
        let mut problems = Vec::new();
        for scrape in lock(&self.pages).values() {
            problems.extend(failing(scrape, self.page_max_age(), "scrape of"));
        }
        let kubelets = lock(&self.kubelets);
        let max_age = self.kubelet_max_age();
        if !kubelets.values().any(|s| s.fresh(max_age)) {
            for (node, scrape) in kubelets.iter() {
                let what = format!("scrape of node {node}'s kubelet");
                problems.extend(failing(scrape, max_age, &what));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(NotReady::new(format!(
                "no good data (last good values are dropped after {STALE_AFTER} intervals): {}",
                problems.join("; ")
            )))
        }
    }
}

/// What to say of `scrape` in `/readyz`: why it failed, when it has no good data left.
fn failing<T>(scrape: &Scrape<T>, max_age: Duration, what: &str) -> Option<String> {
    let error = scrape.error.as_ref()?;
    (!scrape.fresh(max_age)).then(|| format!("{what} {}: {error}", scrape.url))
}

/// Runs `round` now and then every `every` (a round that overruns delays the next, never
/// overlaps it), until `shutdown`.
fn spawn_every<F, Fut>(every: Duration, shutdown: &ShutdownSignal, round: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticks.tick() => round().await,
            }
        }
    });
}
