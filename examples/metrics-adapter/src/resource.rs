//! `metrics.k8s.io` from the kubelets' batches, as metrics-server answers: only Nodes and
//! Pods the core API has, with their labels; a pod once every container has two points.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use extension_apiserver::metrics_apis::{
    ContainerMetrics, NodeMetrics, PodMetrics, ResourceMetricsProvider,
};
use extension_apiserver::{Result, async_trait};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::kubelet::{PodKey, Usage};
use crate::quantity::{binary_bytes, decimal_nanos};
use crate::sources::{State, lock, synced_cluster};

/// The [`ResourceMetricsProvider`] of the adapter.
pub(crate) struct ResourceMetrics(pub(crate) Arc<State>);

#[async_trait]
impl ResourceMetricsProvider for ResourceMetrics {
    async fn node_metrics(&self) -> Result<Vec<NodeMetrics>> {
        let Some(cluster) = synced_cluster(&self.0)? else {
            return Ok(Vec::new());
        };
        let max_age = self.0.kubelet_max_age();
        let kubelets = lock(&self.0.kubelets);
        let mut metrics = Vec::new();
        for node in cluster.nodes.store().state() {
            let name = node.metadata.name.clone().unwrap_or_default();
            let Some(scrape) = kubelets.get(&name).filter(|s| s.fresh(max_age)) else {
                continue;
            };
            let Some(usage) = scrape.data.node_usage() else {
                continue;
            };
            metrics.push(NodeMetrics {
                metadata: ObjectMeta {
                    name: Some(name),
                    labels: node.metadata.labels.clone(),
                    ..ObjectMeta::default()
                },
                timestamp: time(usage.timestamp),
                window: usage.window,
                usage: resources(&usage),
            });
        }
        Ok(metrics)
    }

    async fn pod_metrics(&self, namespace: Option<&str>) -> Result<Vec<PodMetrics>> {
        let Some(cluster) = synced_cluster(&self.0)? else {
            return Ok(Vec::new());
        };
        let max_age = self.0.kubelet_max_age();
        let kubelets = lock(&self.0.kubelets);
        let fresh: Vec<_> = kubelets.values().filter(|s| s.fresh(max_age)).collect();
        let mut metrics = Vec::new();
        for pod in cluster.pods.store().state() {
            let key: PodKey = (
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default(),
            );
            if namespace.is_some_and(|ns| ns != key.0) {
                continue;
            }
            let Some((containers, pod_usage)) = fresh.iter().find_map(|s| s.data.pod_usage(&key))
            else {
                continue;
            };
            metrics.push(PodMetrics {
                metadata: ObjectMeta {
                    namespace: Some(key.0),
                    name: Some(key.1),
                    labels: pod.metadata.labels.clone(),
                    ..ObjectMeta::default()
                },
                timestamp: time(pod_usage.timestamp),
                window: pod_usage.window,
                containers: containers
                    .iter()
                    .map(|(name, usage)| ContainerMetrics {
                        name: name.clone(),
                        usage: resources(usage),
                    })
                    .collect(),
            });
        }
        Ok(metrics)
    }
}

/// `cpu` in nanocores and `memory` in bytes, in metrics-server's quantity formats.
fn resources(
    usage: &Usage,
) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    BTreeMap::from([
        (
            "cpu".to_string(),
            decimal_nanos(i128::from(usage.nanocores)),
        ),
        ("memory".to_string(), binary_bytes(usage.memory)),
    ])
}

/// A wall-clock time as `metav1.Time`.
pub(crate) fn time(at: SystemTime) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::try_from(at)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}
