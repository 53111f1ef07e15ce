//! The metrics APIs autoscalers and `kubectl top` read: `metrics.k8s.io` (resource metrics,
//! what metrics-server serves), `custom.metrics.k8s.io` (metrics describing objects) and
//! `external.metrics.k8s.io` (metrics of things outside the cluster), the APIs of
//! `k8s.io/metrics` that Go's `sigs.k8s.io/custom-metrics-apiserver` serves.
//!
//! A server implements the provider trait of each API it serves and hands it to the builder:
//! [`APIServer::resource_metrics`](crate::server::APIServer::resource_metrics),
//! [`APIServer::custom_metrics`](crate::server::APIServer::custom_metrics),
//! [`APIServer::external_metrics`](crate::server::APIServer::external_metrics). The framework
//! serves the paths, discovery (following the metrics as they come and go), OpenAPI v2 and v3,
//! authorization on the metric's resource of the group as kube's request info names it (`get`
//! on `pods/{metric}` for a custom metric, `list` on `{metric}` for an external one: what the
//! HPA controller's bootstrap role grants), audit and request metrics, beside ordinary
//! resources or alone.
//!
//! The book's "Metrics APIs" chapter walks through an adapter.

mod custom;
mod external;
mod listers;
mod openapi;
mod paths;
mod resource;
mod serve;
mod served;
mod types;
mod wire;

pub use custom::{CustomMetricInfo, CustomMetricsProvider, DescribedObjects, GroupResource};
pub use external::{ExternalMetricInfo, ExternalMetricsProvider};
pub use resource::{GROUP as RESOURCE_METRICS_GROUP, ResourceMetricsProvider};
pub(crate) use resource::{
    NodeMetricsSource, PodMetricsSource, VERSION as RESOURCE_METRICS_VERSION,
};
pub(crate) use served::MetricsAPIs;
pub use types::{
    ContainerMetrics, ExternalMetricValue, MetricValue, NodeMetrics, PodMetrics,
    go_duration_string, parse_go_duration,
};

/// The readers of outside input, for the fuzz targets (`crate::fuzzing`): each answers the
/// code of what it made of the input (200 when it was accepted).
#[cfg(any(fuzzing, test))]
pub(crate) mod fuzzing {
    fn code<T>(result: crate::Result<T>) -> u16 {
        result.map_or_else(|e| e.status().code, |_| 200)
    }

    /// A custom metrics path.
    pub(crate) fn custom_path(path: &str) -> u16 {
        code(super::paths::custom(path))
    }

    /// An external metrics path.
    pub(crate) fn external_path(path: &str) -> u16 {
        code(super::paths::external(path))
    }

    /// The query of a metrics request.
    pub(crate) fn metric_query(query: Option<&str>) -> u16 {
        code(super::serve::MetricQuery::parse(query))
    }
}

/// The group of custom metrics.
pub const CUSTOM_GROUP: &str = "custom.metrics.k8s.io";
/// Its versions, the preferred first.
pub const CUSTOM_VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];
/// The group of external metrics.
pub const EXTERNAL_GROUP: &str = "external.metrics.k8s.io";
/// Its one version.
pub const EXTERNAL_VERSION: &str = "v1beta1";
