//! The real parts around the adapter in its tests: fake kubelets over TLS serving
//! `/metrics/resource` in the kubelet's format, a Prometheus text endpoint, the fake core
//! kube-apiserver with Nodes and Pods, and the adapter itself in process.
#![allow(dead_code)] // each test file uses its own subset

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use extension_apiserver::tls::certs::CertKey;
use extension_apiserver_testing::fake_core::FakeCore;
use extension_apiserver_testing::pki::TestCa;
use extension_apiserver_testing::{TestServer, TlsEndpoint};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeDaemonEndpoints, NodeStatus, Pod, PodSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use metrics_adapter::{Adapter, AdapterOptions};

/// What a page answers instead of metrics, when a test breaks it.
#[derive(Clone, Debug)]
pub enum Breakage {
    /// An HTTP error status.
    Status(u16),
    /// A `200` whose body is not the text format.
    Garbage(String),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One container's usage as a fake kubelet reports it.
#[derive(Clone, Copy, Debug)]
struct Usage {
    /// CPU in cores (the counter grows by this per second).
    cores: f64,
    memory: u64,
    /// The cumulative counter, in core-seconds.
    counter: f64,
}

#[derive(Default)]
struct KubeletState {
    node: Option<Usage>,
    containers: BTreeMap<(String, String, String), Usage>,
    /// Virtual milliseconds since the epoch: each scrape is 10 s after the previous one, so
    /// rates are exact whatever the real timing.
    clock_ms: u64,
    broken: Option<Breakage>,
    scrapes: usize,
}

/// A kubelet's `/metrics/resource` over TLS on 127.0.0.1, with a serving certificate for
/// that IP signed by the test's CA.
pub struct FakeKubelet {
    pub addr: SocketAddr,
    state: Arc<Mutex<KubeletState>>,
    _endpoint: TlsEndpoint,
}

/// The virtual time between two scrapes of a fake kubelet.
pub const KUBELET_STEP: Duration = Duration::from_secs(10);

impl FakeKubelet {
    pub async fn start(ca: &TestCa) -> Self {
        let cert = ca.serving(&["127.0.0.1"]);
        let serving = CertKey::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes())
            .expect("kubelet certificate");
        let state = Arc::new(Mutex::new(KubeletState {
            clock_ms: 1_700_000_000_000,
            ..KubeletState::default()
        }));
        let served = state.clone();
        let router = axum::Router::new().route(
            "/metrics/resource",
            axum::routing::get(move || {
                let state = served.clone();
                async move { kubelet_page(&mut lock(&state)) }
            }),
        );
        let endpoint = TlsEndpoint::start(router, &serving).await;
        Self {
            addr: endpoint.addr,
            state,
            _endpoint: endpoint,
        }
    }

    /// The node's own usage: `cores` of CPU, `memory` bytes of working set.
    pub fn set_node(&self, cores: f64, memory: u64) {
        let mut state = lock(&self.state);
        let counter = state.node.map_or(1000.0, |u| u.counter);
        state.node = Some(Usage {
            cores,
            memory,
            counter,
        });
    }

    /// A container's usage.
    pub fn set_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        cores: f64,
        memory: u64,
    ) {
        let mut state = lock(&self.state);
        let key = (namespace.into(), pod.into(), container.into());
        let counter = state.containers.get(&key).map_or(100.0, |u| u.counter);
        state.containers.insert(
            key,
            Usage {
                cores,
                memory,
                counter,
            },
        );
    }

    /// Answers with `breakage` instead of metrics (`None`: metrics again).
    pub fn break_with(&self, breakage: Option<Breakage>) {
        lock(&self.state).broken = breakage;
    }

    /// How many times the page was fetched.
    pub fn scrapes(&self) -> usize {
        lock(&self.state).scrapes
    }
}

/// The page a kubelet (1.33) answers, with HELP and TYPE as it writes them; each fetch moves
/// the virtual clock and the counters on by [`KUBELET_STEP`].
fn kubelet_page(state: &mut KubeletState) -> axum::response::Response {
    state.scrapes += 1;
    match &state.broken {
        Some(Breakage::Status(code)) => {
            return (StatusCode::from_u16(*code).unwrap(), "kubelet is unwell").into_response();
        }
        Some(Breakage::Garbage(body)) => return body.clone().into_response(),
        None => {}
    }
    let step = KUBELET_STEP.as_secs_f64();
    state.clock_ms += KUBELET_STEP.as_millis() as u64;
    let ts = state.clock_ms;
    let mut page = String::new();
    let mut family = |name: &str, help: &str, kind: &str, lines: Vec<String>| {
        page.push_str(&format!(
            "# HELP {name} [STABLE] {help}\n# TYPE {name} {kind}\n"
        ));
        for line in lines {
            page.push_str(&format!("{name}{line} {ts}\n"));
        }
    };
    let containers: Vec<_> = state
        .containers
        .iter_mut()
        .map(|(k, u)| {
            u.counter += u.cores * step;
            (k.clone(), *u)
        })
        .collect();
    let labels = |(ns, pod, c): &(String, String, String)| {
        format!("{{container=\"{c}\",namespace=\"{ns}\",pod=\"{pod}\"}}")
    };
    family(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the container in core-seconds",
        "counter",
        containers
            .iter()
            .map(|(k, u)| format!("{} {}", labels(k), u.counter))
            .collect(),
    );
    family(
        "container_memory_working_set_bytes",
        "Current working set of the container in bytes",
        "gauge",
        containers
            .iter()
            .map(|(k, u)| format!("{} {:e}", labels(k), u.memory as f64))
            .collect(),
    );
    family(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds",
        "gauge",
        containers
            .iter()
            .map(|(k, _)| format!("{} 1.7e+09", labels(k)))
            .collect(),
    );
    if let Some(node) = &mut state.node {
        node.counter += node.cores * step;
        let node = *node;
        family(
            "node_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the node in core-seconds",
            "counter",
            vec![format!(" {}", node.counter)],
        );
        family(
            "node_memory_working_set_bytes",
            "Current working set of the node in bytes",
            "gauge",
            vec![format!(" {:e}", node.memory as f64)],
        );
    }
    page.push_str(
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n\
         # TYPE resource_scrape_error gauge\nresource_scrape_error 0\n",
    );
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        page,
    )
        .into_response()
}

/// A Prometheus text endpoint over plain HTTP on 127.0.0.1 whose page the test writes.
pub struct FakeExporter {
    pub url: String,
    page: Arc<Mutex<Result<String, Breakage>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeExporter {
    pub async fn start(page: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let page = Arc::new(Mutex::new(Ok(page.to_string())));
        let served = page.clone();
        let router = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let page = lock(&served).clone();
                async move {
                    match page {
                        Ok(text) | Err(Breakage::Garbage(text)) => text.into_response(),
                        Err(Breakage::Status(code)) => {
                            StatusCode::from_u16(code).unwrap().into_response()
                        }
                    }
                }
            }),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Self {
            url,
            page,
            _stop: stop,
        }
    }

    /// The page from now on.
    pub fn set(&self, page: &str) {
        *lock(&self.page) = Ok(page.to_string());
    }

    /// Answers with `breakage` from now on.
    pub fn break_with(&self, breakage: Breakage) {
        *lock(&self.page) = Err(breakage);
    }
}

/// A Node in the core API's shape: its labels, InternalIP 127.0.0.1 and kubelet port
/// (read with `--kubelet-use-node-status-port`), 4 cores and 8Gi allocatable.
pub fn node(name: &str, labels: &[(&str, &str)], kubelet: &FakeKubelet) -> serde_json::Value {
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(label_map(labels)),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            addresses: Some(vec![
                NodeAddress {
                    type_: "Hostname".into(),
                    address: name.into(),
                },
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: "127.0.0.1".into(),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: i32::from(kubelet.addr.port()),
                }),
            }),
            allocatable: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("4".into())),
                ("memory".to_string(), Quantity("8Gi".into())),
            ])),
            capacity: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("4".into())),
                ("memory".to_string(), Quantity("8Gi".into())),
            ])),
            ..NodeStatus::default()
        }),
        ..Node::default()
    };
    serde_json::to_value(node).unwrap()
}

fn label_map(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A Pod in the core API's shape, on `node`.
pub fn pod(namespace: &str, name: &str, labels: &[(&str, &str)], node: &str) -> serde_json::Value {
    let pod = Pod {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            labels: Some(label_map(labels)),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    serde_json::to_value(pod).unwrap()
}

/// The fake core, fake kubelets' CA, and the adapter serving in process (standalone
/// authentication, its core API the fake's).
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub core: FakeCore,
    pub ca: TestCa,
    pub ca_file: PathBuf,
}

impl Setup {
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let core = FakeCore::start(dir.path()).await;
        let ca = TestCa::new("kubelet-ca");
        let ca_file = dir.path().join("kubelet-ca.crt");
        std::fs::write(&ca_file, &ca.cert_pem).unwrap();
        Self {
            dir,
            core,
            ca,
            ca_file,
        }
    }

    /// Options scraping fast: every 200 ms, kubelets trusted through the test's CA, at the
    /// port of each Node's status.
    pub fn options(&self, scrape_urls: &[&str]) -> AdapterOptions {
        AdapterOptions {
            scrape_urls: scrape_urls.iter().map(|u| u.parse().unwrap()).collect(),
            scrape_interval: Duration::from_millis(200),
            metric_resolution: Duration::from_millis(200),
            kubelet_use_node_status_port: true,
            kubelet_certificate_authority: Some(self.ca_file.clone()),
            kubelet_request_timeout: Duration::from_secs(5),
            ..AdapterOptions::default()
        }
    }

    /// The adapter started with `options`, its core API the fake's.
    pub async fn adapter(&self, options: AdapterOptions) -> TestServer {
        let kubeconfig = self
            .core
            .kubeconfig("system:serviceaccount:kube-system:metrics-adapter");
        self.adapter_with_core(options, &kubeconfig).await
    }

    /// The adapter started with `options`, reaching its core API with `kubeconfig`.
    pub async fn adapter_with_core(
        &self,
        options: AdapterOptions,
        kubeconfig: &Path,
    ) -> TestServer {
        let core = core_client(kubeconfig).await;
        let adapter = Adapter::new(options, Some(core)).expect("adapter options");
        TestServer::builder()
            .dir(self.dir.path().join("adapter"))
            .extend(move |server| adapter.install(server))
            .start()
            .await
    }

    /// A kubeconfig of the fake core for kubectl, with `metrics.k8s.io` served by `adapter`
    /// behind it as the aggregator serves it.
    pub fn aggregated_kubeconfig(&self, adapter: &TestServer) -> PathBuf {
        self.core
            .aggregate("metrics.k8s.io", &["v1beta1"], adapter.client());
        self.core.kubeconfig("admin")
    }
}

async fn core_client(kubeconfig: &Path) -> kube::Client {
    extension_apiserver::core_api::core_client(Some(kubeconfig))
        .await
        .unwrap()
        .unwrap()
        .0
}

/// `GET path` on `server` as its admin: the status and body.
pub async fn get_raw(client: &kube::Client, path: &str) -> (u16, serde_json::Value) {
    let request = http::Request::get(path)
        .body(kube::client::Body::empty())
        .unwrap();
    let response = client.send(request).await.unwrap();
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&body).into()));
    (status, value)
}

/// `GET path` on `server` as its admin, as text (health endpoints).
pub async fn get_text(client: &kube::Client, path: &str) -> (u16, String) {
    let (status, value) = get_raw(client, path).await;
    match value {
        serde_json::Value::String(s) => (status, s),
        other => (status, other.to_string()),
    }
}
