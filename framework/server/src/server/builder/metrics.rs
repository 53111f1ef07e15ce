//! The metrics APIs on the builder: `metrics.k8s.io`, `custom.metrics.k8s.io` and
//! `external.metrics.k8s.io` from their providers.

use std::sync::Arc;

use super::APIServer;
use crate::metrics_apis::{
    CustomMetricsProvider, ExternalMetricsProvider, ResourceMetricsProvider,
};

/// The providers of the custom and external metrics APIs a server serves.
#[derive(Default, Clone)]
pub(crate) struct MetricsProviders {
    pub(crate) custom: Option<Arc<dyn CustomMetricsProvider>>,
    pub(crate) external: Option<Arc<dyn ExternalMetricsProvider>>,
}

impl APIServer {
    /// Serves `metrics.k8s.io/v1beta1` (`nodes` and `pods`: `NodeMetrics` and `PodMetrics`)
    /// from `provider`, as metrics-server does: `kubectl top` and the HPA's `Resource`
    /// metrics read it. Served as computed resources: `get`, `list` (label and field
    /// selectors, `limit`/`continue`, tables) and `watch`; writes are 405.
    pub fn resource_metrics(self, provider: impl ResourceMetricsProvider) -> Self {
        self.group(crate::metrics_apis::resource_group(Arc::new(provider)))
    }

    /// Serves `custom.metrics.k8s.io` (`v1beta2`, preferred, and `v1beta1`) from `provider`,
    /// as Go's custom-metrics-apiserver does: the HPA's `Object` and `Pods` metrics read it.
    pub fn custom_metrics(mut self, provider: impl CustomMetricsProvider) -> Self {
        self.metrics.custom = Some(Arc::new(provider));
        self
    }

    /// Serves `external.metrics.k8s.io/v1beta1` from `provider`: the HPA's `External`
    /// metrics read it.
    pub fn external_metrics(mut self, provider: impl ExternalMetricsProvider) -> Self {
        self.metrics.external = Some(Arc::new(provider));
        self
    }
}
