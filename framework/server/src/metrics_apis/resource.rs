//! `metrics.k8s.io`: the resource usage of nodes and pods (`kubectl top`, the HPA's
//! `Resource` metrics).

use std::sync::Arc;

use async_trait::async_trait;

use super::types::{NodeMetrics, PodMetrics};
use crate::error::Result;
use crate::registry::computed::Provider;

/// The source of `metrics.k8s.io/v1beta1`: the current usage of nodes and pods, as
/// metrics-server's `MetricsGetter` gives it.
///
/// The framework serves the answers as computed resources (see
/// [`registry::computed`](crate::registry::computed)): `get`, `list` and `watch` of `nodes`
/// and `pods`, with label selectors (on the node's or pod's labels, which the provider copies
/// into the metrics' `metadata.labels`), field selectors on `metadata.name`, `limit` and
/// `continue`, tables, and 405 for writes.
#[async_trait]
pub trait ResourceMetricsProvider: Send + Sync + 'static {
    /// The usage of every node measured.
    async fn node_metrics(&self) -> Result<Vec<NodeMetrics>>;

    /// The usage of every pod of `namespace` measured (of every namespace when `None`).
    async fn pod_metrics(&self, namespace: Option<&str>) -> Result<Vec<PodMetrics>>;
}

/// The `nodes` of `metrics.k8s.io`, a computed resource over the provider.
pub(crate) struct NodeMetricsSource(pub(crate) Arc<dyn ResourceMetricsProvider>);

/// The `pods` of `metrics.k8s.io`, a computed resource over the provider.
pub(crate) struct PodMetricsSource(pub(crate) Arc<dyn ResourceMetricsProvider>);

#[async_trait]
impl Provider for NodeMetricsSource {
    type Object = NodeMetrics;

    async fn list(&self, _namespace: Option<&str>) -> Result<Vec<NodeMetrics>> {
        self.0.node_metrics().await
    }
}

#[async_trait]
impl Provider for PodMetricsSource {
    type Object = PodMetrics;

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<PodMetrics>> {
        let mut pods = self.0.pod_metrics(namespace).await?;
        // A provider may answer for more than the namespace asked.
        if let Some(namespace) = namespace {
            pods.retain(|p| {
                p.metadata
                    .namespace
                    .as_deref()
                    .is_none_or(|ns| ns == namespace)
            });
        }
        Ok(pods)
    }
}

/// The group of resource metrics.
pub const GROUP: &str = "metrics.k8s.io";
/// Its one version.
pub const VERSION: &str = "v1beta1";
