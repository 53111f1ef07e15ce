//! `external.metrics.k8s.io` and `custom.metrics.k8s.io` from the scraped series, as a
//! Prometheus adapter maps them: each series `name{labels}` is the external metric `name`
//! (its labels are the `metricLabels` a selector filters on; a `namespace` label limits it to
//! that namespace), and one with `namespace` and `pod` labels is also the custom metric
//! `pods/name` of that pod.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use extension_apiserver::metrics_apis::{
    CustomMetricInfo, CustomMetricsProvider, DescribedObjects, ExternalMetricInfo,
    ExternalMetricValue, ExternalMetricsProvider, GroupResource, MetricValue,
};
use extension_apiserver::registry::selector::{LabelSelector, Operator};
use extension_apiserver::{Error, Result, async_trait};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;

use crate::prometheus::Sample;
use crate::quantity::decimal_value;
use crate::resource::time;
use crate::sources::{State, lock, synced_cluster};

/// One series of a page still fresh, with its time.
struct Seen {
    sample: Sample,
    at: SystemTime,
}

impl State {
    /// The samples of every fresh page named `metric`, with finite values (no quantity
    /// holds `NaN` or an infinity).
    fn series(&self, metric: &str) -> Vec<Seen> {
        let max_age = self.page_max_age();
        let pages = lock(&self.pages);
        let mut seen = Vec::new();
        for page in pages.values().filter(|p| p.fresh(max_age)) {
            let scraped = page.good_time.unwrap_or(SystemTime::UNIX_EPOCH);
            for sample in &page.data {
                if metric != sample.name || !sample.value.is_finite() {
                    continue;
                }
                let at = sample
                    .timestamp_ms
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map_or(scraped, |ms| {
                        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
                    });
                seen.push(Seen {
                    sample: sample.clone(),
                    at,
                });
            }
        }
        seen
    }

    /// The names of the finite samples of every fresh page that `keep` keeps (read in place:
    /// discovery asks for them at every request).
    fn metric_names(&self, keep: impl Fn(&Sample) -> bool) -> BTreeSet<String> {
        let max_age = self.page_max_age();
        let pages = lock(&self.pages);
        let fresh = pages.values().filter(|p| p.fresh(max_age));
        fresh
            .flat_map(|page| &page.data)
            .filter(|s| s.value.is_finite() && keep(s))
            .map(|s| s.name.clone())
            .collect()
    }
}

/// The [`ExternalMetricsProvider`] of the adapter.
pub(crate) struct ExternalMetrics(pub(crate) Arc<State>);

#[async_trait]
impl ExternalMetricsProvider for ExternalMetrics {
    fn list_metrics(&self) -> Vec<ExternalMetricInfo> {
        self.0
            .metric_names(|_| true)
            .into_iter()
            .map(|metric| ExternalMetricInfo { metric })
            .collect()
    }

    async fn metric_values(
        &self,
        namespace: &str,
        metric: &str,
        selector: &LabelSelector,
    ) -> Result<Vec<ExternalMetricValue>> {
        let values = self
            .0
            .series(metric)
            .into_iter()
            .filter(|s| {
                s.sample
                    .labels
                    .get("namespace")
                    .is_none_or(|ns| ns == namespace)
                    && selector.matches(&s.sample.labels)
            })
            .filter_map(|s| {
                Some(ExternalMetricValue {
                    metric_name: s.sample.name,
                    value: decimal_value(s.sample.value)?,
                    metric_labels: s.sample.labels,
                    timestamp: time(s.at),
                    window_seconds: None,
                })
            })
            .collect();
        Ok(values)
    }
}

/// The [`CustomMetricsProvider`] of the adapter: metrics of pods.
pub(crate) struct CustomMetrics(pub(crate) Arc<State>);

fn pods() -> GroupResource {
    GroupResource::new("", "pods")
}

#[async_trait]
impl CustomMetricsProvider for CustomMetrics {
    fn list_metrics(&self) -> Vec<CustomMetricInfo> {
        self.0
            .metric_names(|s| of_a_pod(s).is_some())
            .into_iter()
            .map(|metric| CustomMetricInfo {
                group_resource: pods(),
                namespaced: true,
                metric,
            })
            .collect()
    }

    async fn metric_values(
        &self,
        info: &CustomMetricInfo,
        objects: DescribedObjects<'_>,
        metric_selector: &LabelSelector,
    ) -> Result<Vec<MetricValue>> {
        let series: Vec<Seen> = self
            .0
            .series(&info.metric)
            .into_iter()
            .filter(|s| of_a_pod(&s.sample).is_some() && metric_selector.matches(&s.sample.labels))
            .collect();
        // The pods' values: the sum of their series, as Prometheus adapters' rules aggregate
        // (`sum(...) by (pod)`).
        let mut by_pod: BTreeMap<(&str, &str), (f64, SystemTime)> = BTreeMap::new();
        for s in &series {
            let Some(pod) = of_a_pod(&s.sample) else {
                continue;
            };
            let entry = by_pod.entry(pod).or_insert((0.0, s.at));
            entry.0 += s.sample.value;
            entry.1 = entry.1.max(s.at);
        }
        let value = |namespace: &str, name: &str| {
            let (sum, at) = by_pod.get(&(namespace, name))?;
            Some(MetricValue {
                described_object: ObjectReference {
                    kind: Some("Pod".into()),
                    api_version: Some("/v1".into()),
                    namespace: Some(namespace.into()),
                    name: Some(name.into()),
                    ..ObjectReference::default()
                },
                metric: info.metric.clone(),
                selector: as_label_selector(metric_selector),
                timestamp: time(*at),
                window: None,
                value: decimal_value(*sum)?,
            })
        };
        match objects {
            DescribedObjects::Named { namespace, name } => {
                let namespace = namespace.unwrap_or_default();
                value(namespace, name).map(|v| vec![v]).ok_or_else(|| {
                    // custom-metrics-apiserver's `NewMetricNotFoundForError`.
                    Error::new(
                        404,
                        "NotFound",
                        format!(
                            "the server could not find the metric {} for {} {name}",
                            info.metric, info.group_resource
                        ),
                    )
                })
            }
            DescribedObjects::Selected {
                namespace,
                selector,
            } => {
                let Some(cluster) = synced_cluster(&self.0)? else {
                    return Ok(Vec::new());
                };
                let mut values = Vec::new();
                for pod in cluster.pods.store().state() {
                    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
                    let labels = pod.metadata.labels.clone().unwrap_or_default();
                    if namespace.is_some_and(|want| want != ns) || !selector.matches(&labels) {
                        continue;
                    }
                    let name = pod.metadata.name.as_deref().unwrap_or_default();
                    values.extend(value(ns, name));
                }
                Ok(values)
            }
        }
    }
}

/// The pod (namespace, name) a series describes, when it has both labels.
fn of_a_pod(sample: &Sample) -> Option<(&str, &str)> {
    Some((
        sample.labels.get("namespace")?.as_str(),
        sample.labels.get("pod")?.as_str(),
    ))
}

/// The metric selector as the values report it (`metav1.ParseToLabelSelector`'s shape:
/// equalities as `matchLabels`, the rest as `matchExpressions`); none when it selects
/// everything.
fn as_label_selector(selector: &LabelSelector) -> Option<metav1::LabelSelector> {
    if selector.is_everything() {
        return None;
    }
    let mut labels = BTreeMap::new();
    let mut expressions = Vec::new();
    for requirement in selector.requirements() {
        let key = requirement.key().to_string();
        let values = requirement.values().to_vec();
        let operator = match requirement.operator() {
            Operator::Equals | Operator::DoubleEquals if values.len() == 1 => {
                labels.insert(key, values[0].clone());
                continue;
            }
            Operator::Equals | Operator::DoubleEquals | Operator::In => "In",
            Operator::NotEquals | Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            // Not expressible in a metav1.LabelSelector (Go's conversion fails on them too).
            Operator::GreaterThan | Operator::LessThan => continue,
        };
        expressions.push(metav1::LabelSelectorRequirement {
            key,
            operator: operator.into(),
            values: (!values.is_empty()).then_some(values),
        });
    }
    Some(metav1::LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!expressions.is_empty()).then_some(expressions),
    })
}
