//! What a server serves of `custom.metrics.k8s.io` and `external.metrics.k8s.io`: routes,
//! discovery groups, OpenAPI paths and APIServices, from the providers it was given.

use std::sync::Arc;

use axum::Router;

use super::custom::CustomMetricsProvider;
use super::external::ExternalMetricsProvider;
use super::listers::{CustomMetricsLister, ExternalMetricsLister};
use super::{CUSTOM_GROUP, CUSTOM_VERSIONS, EXTERNAL_GROUP, EXTERNAL_VERSION, openapi, serve};
use crate::aggregator::APIServiceVersion;
use crate::discovery::DynamicGroup;
use crate::openapi::ExtraPaths;

/// The providers of the custom and external metrics APIs a server serves.
#[derive(Clone, Default)]
pub(crate) struct MetricsAPIs {
    pub(crate) custom: Option<Arc<dyn CustomMetricsProvider>>,
    pub(crate) external: Option<Arc<dyn ExternalMetricsProvider>>,
}

impl MetricsAPIs {
    /// The groups served, to refuse an ordinary group of the same name.
    pub(crate) fn group_names(&self) -> Vec<&'static str> {
        let custom = self.custom.as_ref().map(|_| CUSTOM_GROUP);
        let external = self.external.as_ref().map(|_| EXTERNAL_GROUP);
        custom.into_iter().chain(external).collect()
    }

    /// The metric routes.
    pub(crate) fn router(&self) -> Router {
        let mut router = Router::new();
        if let Some(provider) = &self.custom {
            router = router.merge(serve::custom_router(provider.clone()));
        }
        if let Some(provider) = &self.external {
            router = router.merge(serve::external_router(provider.clone()));
        }
        router
    }

    /// Discovery of the groups, following the providers' metrics.
    pub(crate) fn discovery_groups(&self) -> Vec<DynamicGroup> {
        let mut groups = Vec::new();
        if let Some(provider) = &self.custom {
            let lister = Arc::new(CustomMetricsLister(provider.clone()));
            let group = CUSTOM_VERSIONS
                .iter()
                .fold(DynamicGroup::new(CUSTOM_GROUP), |group, version| {
                    group.version(*version, lister.clone())
                });
            groups.push(group);
        }
        if let Some(provider) = &self.external {
            let lister = Arc::new(ExternalMetricsLister(provider.clone()));
            groups.push(DynamicGroup::new(EXTERNAL_GROUP).version(EXTERNAL_VERSION, lister));
        }
        groups
    }

    /// The OpenAPI paths and definitions of every version served.
    pub(crate) fn openapi_paths(&self) -> Vec<ExtraPaths> {
        let mut paths = Vec::new();
        if self.custom.is_some() {
            paths.extend(CUSTOM_VERSIONS.iter().map(|v| openapi::custom(v)));
        }
        if self.external.is_some() {
            paths.push(openapi::external());
        }
        paths
    }

    /// The APIServices, with the priorities custom-metrics-apiserver's deployments give them:
    /// `v1beta2.custom.metrics.k8s.io` (100, 200), `v1beta1.custom.metrics.k8s.io` (100, 100),
    /// `v1beta1.external.metrics.k8s.io` (100, 100).
    pub(crate) fn apiservice_versions(&self) -> Vec<APIServiceVersion> {
        let version = |group: &str, version: &str, version_priority| APIServiceVersion {
            group: group.into(),
            version: version.into(),
            group_priority_minimum: 100,
            version_priority,
        };
        let mut versions = Vec::new();
        if self.custom.is_some() {
            versions.push(version(CUSTOM_GROUP, "v1beta2", 200));
            versions.push(version(CUSTOM_GROUP, "v1beta1", 100));
        }
        if self.external.is_some() {
            versions.push(version(EXTERNAL_GROUP, EXTERNAL_VERSION, 100));
        }
        versions
    }
}
