//! The request paths of `custom.metrics.k8s.io` and `external.metrics.k8s.io`, read as
//! custom-metrics-apiserver's routes and handler read them (its `cmhandlers.go`,
//! `emhandlers.go` and `ListResourceWithOptions`).

use super::custom::{CustomMetricInfo, GroupResource};
use crate::error::{Error, Result};

/// What a custom metrics path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CustomPath {
    /// The metric, of the resource the path names, scoped as the path is.
    pub(crate) info: CustomMetricInfo,
    /// The described objects' namespace (`None` when cluster-scoped).
    pub(crate) namespace: Option<String>,
    /// The described object's name, or `*` for those a label selector picks.
    pub(crate) name: String,
}

/// Reads the part of a custom metrics path after `/apis/custom.metrics.k8s.io/{version}/`:
/// `namespaces/{ns}/{resource}/{name}/{metric}`, `{resource}/{name}/{metric}`, or
/// `namespaces/{ns}/metrics/{metric}` (the namespace object itself). Other shapes are 404, as
/// no route takes them, but `namespaces/{ns}/{x}` is 400, as Go's handler answers it.
pub(crate) fn custom(rest: &str) -> Result<CustomPath> {
    let parts: Vec<&str> = rest.split('/').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::path_not_found());
    }
    let path = |resource: &str, namespace: Option<&str>, name: &str, metric: &str| CustomPath {
        info: CustomMetricInfo {
            group_resource: GroupResource::parse(resource),
            namespaced: namespace.is_some(),
            metric: metric.to_string(),
        },
        namespace: namespace.map(str::to_string),
        name: name.to_string(),
    };
    match parts.as_slice() {
        ["namespaces", namespace, "metrics", metric] => {
            Ok(path("namespaces", None, namespace, metric))
        }
        ["namespaces", namespace, resource, name, metric] => {
            Ok(path(resource, Some(namespace), name, metric))
        }
        ["namespaces", _, _] => Err(Error::bad_request("invalid request path")),
        [resource, name, metric] => Ok(path(resource, None, name, metric)),
        _ => Err(Error::path_not_found()),
    }
}

/// What an external metrics path names: `namespaces/{ns}/{metric}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExternalPath {
    pub(crate) namespace: String,
    pub(crate) metric: String,
}

/// Reads the part of an external metrics path after
/// `/apis/external.metrics.k8s.io/{version}/`.
pub(crate) fn external(rest: &str) -> Result<ExternalPath> {
    match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["namespaces", namespace, metric] if !namespace.is_empty() && !metric.is_empty() => {
            Ok(ExternalPath {
                namespace: namespace.to_string(),
                metric: metric.to_string(),
            })
        }
        _ => Err(Error::path_not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(result: Result<impl std::fmt::Debug>) -> u16 {
        result.expect_err("an error").status().code
    }

    #[test]
    fn custom_paths_name_the_metric_its_resource_and_objects() {
        let p = custom("namespaces/ns/deployments.apps/*/hits").unwrap();
        assert_eq!(
            p.info.group_resource,
            GroupResource::new("apps", "deployments")
        );
        assert!(p.info.namespaced);
        assert_eq!((p.namespace.as_deref(), p.name.as_str()), (Some("ns"), "*"));
        assert_eq!(p.info.metric, "hits");

        let p = custom("nodes/n1/load").unwrap();
        assert_eq!(p.info.group_resource, GroupResource::new("", "nodes"));
        assert!(!p.info.namespaced);
        assert_eq!((p.namespace, p.name.as_str()), (None, "n1"));

        let p = custom("namespaces/team-a/metrics/quota").unwrap();
        assert_eq!(p.info.group_resource, GroupResource::new("", "namespaces"));
        assert!(!p.info.namespaced, "a namespace is cluster-scoped");
        assert_eq!((p.namespace, p.name.as_str()), (None, "team-a"));
        assert_eq!(p.info.metric, "quota");
    }

    #[test]
    fn other_custom_shapes_are_refused() {
        assert_eq!(code(custom("namespaces/ns/pods")), 400);
        for rest in [
            "pods",
            "pods/x",
            "namespaces/ns/pods/x",
            "a/b/c/d",
            "pods//m",
            "pods/*/m/",
        ] {
            assert_eq!(code(custom(rest)), 404, "{rest}");
        }
    }

    #[test]
    fn external_paths() {
        let p = external("namespaces/ns/queue_length").unwrap();
        assert_eq!(
            (p.namespace.as_str(), p.metric.as_str()),
            ("ns", "queue_length")
        );
        for rest in [
            "queue",
            "namespaces/ns",
            "namespaces//m",
            "namespaces/ns/m/x",
        ] {
            assert_eq!(code(external(rest)), 404, "{rest}");
        }
    }
}
