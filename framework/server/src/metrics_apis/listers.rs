//! Discovery of the metrics APIs: what `/apis/{group}/{version}` lists follows the providers'
//! metrics as they come and go, as custom-metrics-apiserver's `resource_lister.go` lists them.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

use super::custom::CustomMetricsProvider;
use super::external::ExternalMetricsProvider;
use crate::discovery::APIResourceLister;

/// `{resource}/{metric}` for each custom metric, of kind `MetricValueList`, `get` only.
pub(crate) struct CustomMetricsLister(pub(crate) Arc<dyn CustomMetricsProvider>);

/// `{metric}` for each external metric, namespaced, of kind `ExternalMetricValueList`.
pub(crate) struct ExternalMetricsLister(pub(crate) Arc<dyn ExternalMetricsProvider>);

impl APIResourceLister for CustomMetricsLister {
    fn list_api_resources(&self) -> Vec<APIResource> {
        let mut resources: Vec<APIResource> = self
            .0
            .list_metrics()
            .into_iter()
            .map(|info| APIResource {
                name: format!("{}/{}", info.group_resource, info.metric),
                namespaced: info.namespaced,
                kind: "MetricValueList".into(),
                verbs: vec!["get".into()],
                ..APIResource::default()
            })
            .collect();
        // A provider may list one metric twice (once per series): discovery lists it once.
        resources.sort_by(|a, b| (&a.name, a.namespaced).cmp(&(&b.name, b.namespaced)));
        resources.dedup_by(|a, b| a.name == b.name && a.namespaced == b.namespaced);
        resources
    }
}

impl APIResourceLister for ExternalMetricsLister {
    fn list_api_resources(&self) -> Vec<APIResource> {
        let mut resources: Vec<APIResource> = self
            .0
            .list_metrics()
            .into_iter()
            .map(|info| APIResource {
                name: info.metric,
                namespaced: true,
                kind: "ExternalMetricValueList".into(),
                verbs: vec!["get".into()],
                ..APIResource::default()
            })
            .collect();
        resources.sort_by(|a, b| a.name.cmp(&b.name));
        resources.dedup_by(|a, b| a.name == b.name);
        resources
    }
}
