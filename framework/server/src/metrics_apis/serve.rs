//! The HTTP side of `custom.metrics.k8s.io` and `external.metrics.k8s.io`: `GET` (and `HEAD`,
//! as for every resource) of the metric paths, answered as custom-metrics-apiserver answers
//! them; any other method is 405. The routes sit beside the resource routes, behind the same
//! filters (authentication, authorization on the generic request info, audit, metrics,
//! timeouts).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use http::{HeaderMap, Method, StatusCode, Uri, header};

use super::custom::{CustomMetricsProvider, DescribedObjects, GroupResource};
use super::external::ExternalMetricsProvider;
use super::{CUSTOM_GROUP, CUSTOM_VERSIONS, EXTERNAL_GROUP, EXTERNAL_VERSION, paths, wire};
use crate::endpoints::negotiation::{Endpoint, negotiate};
use crate::endpoints::response::respond;
use crate::error::{Error, Result};
use crate::registry::selector::LabelSelector;

/// The routes of the custom metrics API over `provider`.
pub(crate) fn custom_router(provider: Arc<dyn CustomMetricsProvider>) -> Router {
    Router::new()
        .route(
            &format!("/apis/{CUSTOM_GROUP}/{{version}}/{{*rest}}"),
            any(custom),
        )
        .with_state(provider)
}

/// The routes of the external metrics API over `provider`.
pub(crate) fn external_router(provider: Arc<dyn ExternalMetricsProvider>) -> Router {
    Router::new()
        .route(
            &format!("/apis/{EXTERNAL_GROUP}/{{version}}/{{*rest}}"),
            any(external),
        )
        .with_state(provider)
}

async fn custom(
    State(provider): State<Arc<dyn CustomMetricsProvider>>,
    Path((version, rest)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let answer = async {
        if !CUSTOM_VERSIONS.contains(&version.as_str()) {
            return Err(Error::path_not_found());
        }
        let path = only_get(&method, paths::custom(&rest))?;
        let query = MetricQuery::parse(uri.query())?;
        let values = custom_values(provider.as_ref(), &path, &query).await?;
        reply(&headers, &wire::custom_list(&version, &values))
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// The values `path` asks for, once the metric is known to be among the provider's (of the
/// resource and scope the path names): otherwise kube's `NotFound`, worded as
/// custom-metrics-apiserver's `NewMetricNotFoundError`.
async fn custom_values(
    provider: &dyn CustomMetricsProvider,
    path: &paths::CustomPath,
    query: &MetricQuery,
) -> Result<Vec<super::MetricValue>> {
    let info = &path.info;
    if !provider.list_metrics().contains(info) {
        return Err(metric_not_found(&info.group_resource, &info.metric));
    }
    let namespace = path.namespace.as_deref();
    let objects = match path.name.as_str() {
        "*" => DescribedObjects::Selected {
            namespace,
            selector: &query.label_selector,
        },
        name => DescribedObjects::Named { namespace, name },
    };
    let values = provider
        .metric_values(info, objects, &query.metric_label_selector)
        .await?;
    if values.is_empty() && path.name != "*" {
        // NewMetricNotFoundForError: the object has no value of the metric.
        let message = format!(
            "the server could not find the metric {} for {} {}",
            info.metric, info.group_resource, path.name
        );
        return Err(Error::new(404, "NotFound", message));
    }
    Ok(values)
}

async fn external(
    State(provider): State<Arc<dyn ExternalMetricsProvider>>,
    Path((version, rest)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let answer = async {
        if version != EXTERNAL_VERSION {
            return Err(Error::path_not_found());
        }
        let path = only_get(&method, paths::external(&rest))?;
        let query = MetricQuery::parse(uri.query())?;
        let known = provider
            .list_metrics()
            .iter()
            .any(|m| m.metric == path.metric);
        if !known {
            // As adapters word it (prometheus-adapter names the namespaces resource).
            return Err(metric_not_found(
                &GroupResource::new("", "namespaces"),
                &path.metric,
            ));
        }
        let values = provider
            .metric_values(&path.namespace, &path.metric, &query.label_selector)
            .await?;
        reply(&headers, &wire::external_list(&values))
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// The path read, for `GET` and `HEAD`; 405 for any other method on a path of a route (a path
/// no route takes stays 404).
fn only_get<T>(method: &Method, path: Result<T>) -> Result<T> {
    match path {
        Err(e) if e.status().code == 404 => Err(e),
        _ if !matches!(*method, Method::GET | Method::HEAD) => Err(Error::method_not_allowed()),
        path => path,
    }
}

/// custom-metrics-apiserver's `NewMetricNotFoundError`.
fn metric_not_found(resource: &GroupResource, metric: &str) -> Error {
    let message = format!("the server could not find the metric {metric} for {resource}");
    Error::new(404, "NotFound", message)
}

fn reply(headers: &HeaderMap, body: &serde_json::Value) -> Result<Response> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let target = negotiate(accept, Endpoint::Plain)?;
    respond(StatusCode::OK, target, body)
}

/// The query parameters the metrics APIs read (`MetricListOptions`); others are ignored.
#[derive(Debug)]
pub(crate) struct MetricQuery {
    /// `labelSelector`: the described objects' labels (custom), the series' labels (external).
    pub(crate) label_selector: LabelSelector,
    /// `metricLabelSelector`: the metric's series (custom).
    pub(crate) metric_label_selector: LabelSelector,
}

impl MetricQuery {
    /// Reads the first value of each parameter, as Go's `url.Values.Get`; a selector that does
    /// not parse is 400, as kube-apiserver answers a malformed `labelSelector`.
    pub(crate) fn parse(query: Option<&str>) -> Result<Self> {
        let pairs: Vec<(String, String)> =
            form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .into_owned()
                .collect();
        let selector = |name: &str| -> Result<LabelSelector> {
            match pairs.iter().find(|(k, _)| k == name) {
                Some((_, value)) => {
                    LabelSelector::parse(value).map_err(|e| Error::bad_request(e.to_string()))
                }
                None => Ok(LabelSelector::everything()),
            }
        };
        Ok(Self {
            label_selector: selector("labelSelector")?,
            metric_label_selector: selector("metricLabelSelector")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_default_to_everything_and_malformed_ones_are_400() {
        let q = MetricQuery::parse(Some(
            "labelSelector=app%3Dweb&metricLabelSelector=verb!%3DGET&x=1",
        ))
        .unwrap();
        assert_eq!(q.label_selector.to_string(), "app=web");
        assert_eq!(q.metric_label_selector.to_string(), "verb!=GET");
        let q = MetricQuery::parse(None).unwrap();
        assert!(q.label_selector.is_everything() && q.metric_label_selector.is_everything());
        for bad in [
            "labelSelector=a%3D%3D%3Db",
            "metricLabelSelector=a%20in%20(b",
        ] {
            let e = MetricQuery::parse(Some(bad)).unwrap_err();
            assert_eq!(
                (e.status().code, e.status().reason.as_str()),
                (400, "BadRequest"),
                "{bad}"
            );
        }
    }

    #[test]
    fn other_methods_are_405_on_routed_paths_only() {
        let routed: Result<()> = Ok(());
        assert_eq!(
            only_get(&Method::POST, routed).unwrap_err().status().code,
            405
        );
        assert!(only_get(&Method::HEAD, Ok(())).is_ok());
        let unrouted: Result<()> = Err(Error::path_not_found());
        assert_eq!(
            only_get(&Method::DELETE, unrouted)
                .unwrap_err()
                .status()
                .code,
            404
        );
        let bad: Result<()> = Err(Error::bad_request("invalid request path"));
        assert_eq!(only_get(&Method::PUT, bad).unwrap_err().status().code, 405);
    }
}
