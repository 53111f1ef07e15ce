//! `custom.metrics.k8s.io`: metrics describing Kubernetes objects (`v1beta2` and `v1beta1`,
//! from one provider).

use async_trait::async_trait;
use std::fmt;

use super::types::MetricValue;
use crate::error::Result;
use crate::registry::selector::LabelSelector;

/// A resource of a group, as the custom metrics API names it in paths: `pods`,
/// `deployments.apps` (Go's `schema.GroupResource`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    /// The group (empty for the core group).
    pub group: String,
    /// The resource (plural, lower case).
    pub resource: String,
}

impl GroupResource {
    /// `resource` of `group`.
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
        }
    }

    /// Parses a path segment: `pods` (core), `deployments.apps` (the resource, then the
    /// group after the first dot), as Go's `schema.ParseGroupResource`.
    pub fn parse(segment: &str) -> Self {
        match segment.split_once('.') {
            Some((resource, group)) => Self::new(group, resource),
            None => Self::new("", segment),
        }
    }
}

impl fmt::Display for GroupResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// One custom metric a provider has: `metric` of the objects of `group_resource`
/// (`pods`, `deployments.apps`, `namespaces`, …).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CustomMetricInfo {
    /// The resource the metric describes (`resource` plural, `group` empty for the core
    /// group).
    pub group_resource: GroupResource,
    /// Whether the described objects are namespaced.
    pub namespaced: bool,
    /// The metric's name.
    pub metric: String,
}

/// The objects a request for custom metrics describes.
#[derive(Clone, Debug, PartialEq)]
pub enum DescribedObjects<'a> {
    /// One object by name (`…/{resource}/{name}/{metric}`, or the namespace itself for
    /// `namespaces/{namespace}/metrics/{metric}`).
    Named {
        /// Its namespace (`None` when cluster-scoped).
        namespace: Option<&'a str>,
        /// Its name.
        name: &'a str,
    },
    /// The objects that match a label selector (`…/{resource}/*/{metric}?labelSelector=`).
    Selected {
        /// Their namespace (`None` when cluster-scoped).
        namespace: Option<&'a str>,
        /// The selector on the objects' labels (everything when the request gave none).
        selector: &'a LabelSelector,
    },
}

/// The source of `custom.metrics.k8s.io`, as small as custom-metrics-apiserver's
/// `CustomMetricsProvider`.
///
/// The framework checks that the metric asked for is among [`list_metrics`](Self::list_metrics)
/// with the resource and scope of the path (kube's `NotFound` otherwise) before calling
/// [`metric_values`](Self::metric_values), and serves both `v1beta2` and `v1beta1` shapes of
/// the values. Resources are compared as written (`pods`, `deployments.apps`): list them
/// plural and lower case, as clients name them.
#[async_trait]
pub trait CustomMetricsProvider: Send + Sync + 'static {
    /// Every metric available now (discovery lists them as `{resource}/{metric}`; it follows
    /// this list as it changes).
    fn list_metrics(&self) -> Vec<CustomMetricInfo>;

    /// The values of `info` for `objects`, filtered by `metric_selector` (the request's
    /// `metricLabelSelector`; everything when it gave none). For
    /// [`DescribedObjects::Named`] the answer is one value; none is answered 404 as
    /// custom-metrics-apiserver's `NewMetricNotFoundForError` words it. An error returned
    /// is the answer's `Status` (e.g. [`Error::not_found`](crate::Error::not_found)).
    async fn metric_values(
        &self,
        info: &CustomMetricInfo,
        objects: DescribedObjects<'_>,
        metric_selector: &LabelSelector,
    ) -> Result<Vec<MetricValue>>;
}
