//! The webhook backend (`--audit-webhook-config-file`), in kube's `batch` mode: events go
//! into a bounded buffer and a background task POSTs them as `EventList`s of at most
//! `--audit-webhook-batch-max-size`, at least every `--audit-webhook-batch-max-wait`,
//! throttled to `--audit-webhook-batch-throttle-qps`. A request never waits for the webhook:
//! when the buffer is full the event is dropped and counted
//! (`apiserver_audit_error_total{plugin="buffered"}`); a failed POST is counted with
//! `plugin="webhook"`. On shutdown what is buffered is sent before the task ends.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use http::Uri;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::types::{Event, EventList};
use super::{AuditBackend, AuditError};
use crate::lifecycle::ShutdownSignal;

/// How the batches are made.
#[derive(Clone, Debug)]
pub struct BatchConfig {
    /// Events buffered before new ones are dropped.
    pub buffer_size: usize,
    /// Events per POST at most.
    pub max_batch_size: usize,
    /// How long an event waits for its batch to fill.
    pub max_batch_wait: Duration,
    /// POSTs per second (`None`: unthrottled).
    pub throttle_qps: Option<f64>,
    /// POSTs allowed at once above the rate.
    pub throttle_burst: u32,
    /// How long one POST may take.
    pub timeout: Duration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            buffer_size: 10_000,
            max_batch_size: 400,
            max_batch_wait: Duration::from_secs(30),
            throttle_qps: Some(10.0),
            throttle_burst: 15,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Where the events go.
#[derive(Clone)]
struct Target {
    client: kube::Client,
    path: String,
}

/// The buffered webhook backend.
pub struct WebhookBackend {
    buffer: mpsc::Sender<Event>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl WebhookBackend {
    /// Reads the kubeconfig file naming the webhook and starts the sending task, which ends
    /// (after sending what is buffered) on `shutdown`.
    pub async fn start(
        kubeconfig: &Path,
        config: BatchConfig,
        shutdown: ShutdownSignal,
    ) -> Result<Self, AuditError> {
        let target = target(kubeconfig).await?;
        let (buffer, events) = mpsc::channel(config.buffer_size.max(1));
        let task = tokio::spawn(run(target, config, events, shutdown));
        Ok(Self {
            buffer,
            task: Mutex::new(Some(task)),
        })
    }
}

async fn target(kubeconfig: &Path) -> Result<Target, AuditError> {
    let invalid = |reason: String| AuditError::Webhook {
        path: kubeconfig.display().to_string(),
        reason,
    };
    let file =
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| invalid(e.to_string()))?;
    let options = kube::config::KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(file, &options)
        .await
        .map_err(|e| invalid(e.to_string()))?;
    // The server's path is where events are POSTed; the client gets only its origin.
    let url = config.cluster_url.clone();
    let path = match url.path() {
        "" => "/".to_string(),
        p => p.to_string(),
    };
    let mut origin = url.into_parts();
    origin.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    config.cluster_url = Uri::from_parts(origin).map_err(|e| invalid(e.to_string()))?;
    config.read_timeout = None;
    let client = kube::Client::try_from(config).map_err(|e| invalid(e.to_string()))?;
    Ok(Target { client, path })
}

impl AuditBackend for WebhookBackend {
    fn name(&self) -> &'static str {
        "webhook"
    }

    fn process(&self, event: &Event) {
        if self.buffer.try_send(event.clone()).is_err() {
            super::plugin_error("buffered", &"audit buffer queue blocked", 1);
        }
    }

    fn flushed(&self) -> Option<JoinHandle<()>> {
        self.task.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Collects batches and sends them until shutdown, then sends what is left.
async fn run(
    target: Target,
    config: BatchConfig,
    mut events: mpsc::Receiver<Event>,
    shutdown: ShutdownSignal,
) {
    let mut throttle = Throttle::new(config.throttle_qps, config.throttle_burst);
    loop {
        let Some(batch) = collect(&mut events, &config, &shutdown).await else {
            break;
        };
        throttle.wait().await;
        send(&target, batch, config.timeout).await;
    }
    // Shutting down: what is buffered goes out without waiting for full batches.
    let mut rest = Vec::new();
    while let Ok(event) = events.try_recv() {
        rest.push(event);
        if rest.len() == config.max_batch_size {
            send(&target, std::mem::take(&mut rest), config.timeout).await;
        }
    }
    if !rest.is_empty() {
        send(&target, rest, config.timeout).await;
    }
}

/// The next batch: full, or what came within `max_batch_wait` of its first event; `None` on
/// shutdown (events not yet sent stay in the buffer).
async fn collect(
    events: &mut mpsc::Receiver<Event>,
    config: &BatchConfig,
    shutdown: &ShutdownSignal,
) -> Option<Vec<Event>> {
    let first = tokio::select! {
        event = events.recv() => event?,
        _ = shutdown.cancelled() => return None,
    };
    let mut batch = vec![first];
    let deadline = tokio::time::sleep(config.max_batch_wait);
    tokio::pin!(deadline);
    while batch.len() < config.max_batch_size {
        tokio::select! {
            event = events.recv() => match event {
                Some(event) => batch.push(event),
                None => break,
            },
            _ = &mut deadline => break,
            _ = shutdown.cancelled() => break,
        }
    }
    Some(batch)
}

async fn send(target: &Target, batch: Vec<Event>, timeout: Duration) {
    let count = batch.len();
    let body = match serde_json::to_vec(&EventList::new(batch)) {
        Ok(body) => body,
        Err(e) => return super::plugin_error("webhook", &e, count),
    };
    let request = http::Request::post(&target.path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body);
    let request = match request {
        Ok(request) => request,
        Err(e) => return super::plugin_error("webhook", &e, count),
    };
    match tokio::time::timeout(timeout, target.client.send(request.map(Into::into))).await {
        Ok(Ok(response)) if response.status().is_success() => {}
        Ok(Ok(response)) => {
            super::plugin_error("webhook", &format!("status {}", response.status()), count)
        }
        Ok(Err(e)) => super::plugin_error("webhook", &e, count),
        Err(_) => super::plugin_error("webhook", &"timed out", count),
    }
}

/// A token bucket: `qps` POSTs a second, `burst` at once.
struct Throttle {
    qps: Option<f64>,
    burst: f64,
    tokens: f64,
    last: tokio::time::Instant,
}

impl Throttle {
    fn new(qps: Option<f64>, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: qps.filter(|q| *q > 0.0),
            burst,
            tokens: burst,
            last: tokio::time::Instant::now(),
        }
    }

    async fn wait(&mut self) {
        let Some(qps) = self.qps else { return };
        let now = tokio::time::Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.last).as_secs_f64() * qps).min(self.burst);
        self.last = now;
        if self.tokens < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / qps);
            tokio::time::sleep(wait).await;
            self.tokens = 1.0;
            self.last = tokio::time::Instant::now();
        }
        self.tokens -= 1.0;
    }
}
