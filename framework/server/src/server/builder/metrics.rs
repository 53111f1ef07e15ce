//! The metrics APIs on the builder: `metrics.k8s.io`, `custom.metrics.k8s.io` and
//! `external.metrics.k8s.io` from their providers.

use std::sync::Arc;

use super::APIServer;
use crate::metrics_apis::{
    CustomMetricsProvider, ExternalMetricsProvider, NodeMetricsSource, PodMetricsSource,
    RESOURCE_METRICS_GROUP, RESOURCE_METRICS_VERSION, ResourceMetricsProvider,
};
use crate::server::APIGroup;

impl APIServer {
    /// Serves `metrics.k8s.io/v1beta1` (`nodes` and `pods`: `NodeMetrics` and `PodMetrics`)
    /// from `provider`, as metrics-server does: `kubectl top` and the HPA's `Resource`
    /// metrics read it. Served as computed resources: `get`, `list` (label and field
    /// selectors, `limit`/`continue`, tables) and `watch`; writes are 405.
    pub fn resource_metrics(self, provider: impl ResourceMetricsProvider) -> Self {
        self.group(resource_metrics_group(Arc::new(provider)))
    }

    /// Serves `custom.metrics.k8s.io` (`v1beta2`, preferred, and `v1beta1`) from `provider`,
    /// as Go's custom-metrics-apiserver does: the HPA's `Object` and `Pods` metrics read it.
    ///
    /// `GET /apis/custom.metrics.k8s.io/{version}/namespaces/{ns}/{resource}/{name}/{metric}`,
    /// `.../{resource}/{name}/{metric}` for cluster-scoped objects and
    /// `.../namespaces/{ns}/metrics/{metric}` for a namespace itself, `{name}` `*` for the
    /// objects `labelSelector` selects, `metricLabelSelector` for the metric's series; a
    /// metric not in [`list_metrics`](CustomMetricsProvider::list_metrics) is 404, a malformed
    /// selector 400, other methods 405. Discovery lists `{resource}/{metric}` as the provider's
    /// metrics come and go; OpenAPI v2 and v3 describe the paths and `MetricValueList`; the
    /// APIServices are `v1beta2` (group priority 100, version priority 200) and `v1beta1`
    /// (100, 100). Requests are authorized as kube's adapters are: the generic request
    /// info, `get` on the resource with the metric as subresource.
    ///
    /// ```no_run
    /// # use extension_apiserver::prelude::*;
    /// use extension_apiserver::metrics_apis::*;
    /// use extension_apiserver::registry::selector::LabelSelector;
    ///
    /// struct Hits;
    ///
    /// #[extension_apiserver::async_trait]
    /// impl CustomMetricsProvider for Hits {
    ///     fn list_metrics(&self) -> Vec<CustomMetricInfo> {
    ///         let pods = GroupResource::new("", "pods");
    ///         vec![CustomMetricInfo { group_resource: pods, namespaced: true, metric: "hits".into() }]
    ///     }
    ///     async fn metric_values(
    ///         &self,
    ///         _info: &CustomMetricInfo,
    ///         _objects: DescribedObjects<'_>,
    ///         _metric_selector: &LabelSelector,
    ///     ) -> extension_apiserver::Result<Vec<MetricValue>> {
    ///         Ok(Vec::new())
    ///     }
    /// }
    ///
    /// # async fn run() -> Result<(), ServerError> {
    /// APIServer::from_args().custom_metrics(Hits).run().await
    /// # }
    /// ```
    pub fn custom_metrics(mut self, provider: impl CustomMetricsProvider) -> Self {
        self.metrics.custom = Some(Arc::new(provider));
        self
    }

    /// Serves `external.metrics.k8s.io/v1beta1` from `provider`: the HPA's `External`
    /// metrics read it.
    ///
    /// `GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}`, `labelSelector`
    /// selecting the metric's series; a metric not in
    /// [`list_metrics`](ExternalMetricsProvider::list_metrics) is 404, a malformed selector
    /// 400, other methods 405. Discovery lists each metric (namespaced, kind
    /// `ExternalMetricValueList`) as they come and go; OpenAPI describes the path and
    /// `ExternalMetricValueList`; the APIService has priorities (100, 100). Requests are
    /// authorized on the generic request info: `list` on the metric in the namespace, what
    /// the HPA controller's role grants.
    pub fn external_metrics(mut self, provider: impl ExternalMetricsProvider) -> Self {
        self.metrics.external = Some(Arc::new(provider));
        self
    }
}

/// The `metrics.k8s.io` group over `provider`, registered as metrics-server registers it
/// (group priority 100, version priority 100).
fn resource_metrics_group(provider: Arc<dyn ResourceMetricsProvider>) -> APIGroup {
    APIGroup::new(RESOURCE_METRICS_GROUP)
        .priority(100, 100)
        .version(RESOURCE_METRICS_VERSION, |v| {
            v.computed(NodeMetricsSource(provider.clone()))
                .computed(PodMetricsSource(provider))
        })
}
