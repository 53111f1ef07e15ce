//! `external.metrics.k8s.io`: metrics of things outside the cluster (queue lengths, request
//! rates of a load balancer), by namespace, name and label selector.

use async_trait::async_trait;

use super::types::ExternalMetricValue;
use crate::error::Result;
use crate::registry::selector::LabelSelector;

/// One external metric a provider has.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExternalMetricInfo {
    /// The metric's name.
    pub metric: String,
}

/// The source of `external.metrics.k8s.io/v1beta1`, as small as custom-metrics-apiserver's
/// `ExternalMetricsProvider`.
#[async_trait]
pub trait ExternalMetricsProvider: Send + Sync + 'static {
    /// Every metric available now (discovery lists them; it follows this list).
    fn list_metrics(&self) -> Vec<ExternalMetricInfo>;

    /// The values of `metric` seen from `namespace` whose labels match `selector` (the
    /// request's `labelSelector`; everything when it gave none).
    async fn metric_values(
        &self,
        namespace: &str,
        metric: &str,
        selector: &LabelSelector,
    ) -> Result<Vec<ExternalMetricValue>>;
}
