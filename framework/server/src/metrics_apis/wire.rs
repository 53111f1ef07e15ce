//! The lists of `custom.metrics.k8s.io` and `external.metrics.k8s.io` as their JSON is on the
//! wire: `MetricValueList` in the shape of `v1beta2` or `v1beta1` (`k8s.io/metrics`'
//! `custom_metrics/{v1beta2,v1beta1}/types.go`), `ExternalMetricValueList`.

use serde_json::{Map, Value, json};

use super::types::{ExternalMetricValue, MetricValue};
use super::{CUSTOM_GROUP, EXTERNAL_GROUP};

/// A `MetricValueList` of `version` (`v1beta2` or `v1beta1`).
pub(crate) fn custom_list(version: &str, values: &[MetricValue]) -> Value {
    let items: Vec<Value> = values.iter().map(|v| custom_value(version, v)).collect();
    json!({
        "kind": "MetricValueList",
        "apiVersion": format!("{CUSTOM_GROUP}/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// One `MetricValue`: `v1beta2` names the metric in `metric: {name, selector}` and its window
/// in `windowSeconds`; `v1beta1` has `metricName`, `selector` and `window` (seconds). Both
/// write `selector` even when null, as Go's types (no `omitempty`) do.
fn custom_value(version: &str, value: &MetricValue) -> Value {
    let mut item = Map::new();
    let described = serde_json::to_value(&value.described_object).unwrap_or_default();
    let selector = value
        .selector
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    let window = value
        .window
        .map(|w| i64::try_from(w.as_secs()).unwrap_or(i64::MAX));
    item.insert("describedObject".into(), described);
    if version == "v1beta1" {
        item.insert("metricName".into(), value.metric.clone().into());
    } else {
        let metric = json!({"name": value.metric, "selector": selector});
        item.insert("metric".into(), metric);
    }
    item.insert("timestamp".into(), json!(value.timestamp));
    if let Some(window) = window {
        let key = if version == "v1beta1" {
            "window"
        } else {
            "windowSeconds"
        };
        item.insert(key.into(), window.into());
    }
    item.insert("value".into(), json!(value.value));
    if version == "v1beta1" {
        item.insert("selector".into(), selector);
    }
    Value::Object(item)
}

/// An `ExternalMetricValueList` (`external.metrics.k8s.io/v1beta1`).
pub(crate) fn external_list(values: &[ExternalMetricValue]) -> Value {
    json!({
        "kind": "ExternalMetricValueList",
        "apiVersion": format!("{EXTERNAL_GROUP}/{}", super::EXTERNAL_VERSION),
        "metadata": {},
        "items": values,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    use super::*;

    fn value(window: Option<Duration>, selector: Option<LabelSelector>) -> MetricValue {
        MetricValue {
            described_object: ObjectReference {
                kind: Some("Pod".into()),
                name: Some("p".into()),
                namespace: Some("ns".into()),
                api_version: Some("v1".into()),
                ..ObjectReference::default()
            },
            metric: "hits".into(),
            selector,
            timestamp: Time(Timestamp::from_second(1_700_000_000).unwrap()),
            window,
            value: Quantity("42".into()),
        }
    }

    #[test]
    fn v1beta2_names_the_metric_in_an_identifier() {
        let list = custom_list("v1beta2", &[value(Some(Duration::from_secs(60)), None)]);
        assert_eq!(list["apiVersion"], "custom.metrics.k8s.io/v1beta2");
        assert_eq!(list["metadata"], json!({}));
        let item = &list["items"][0];
        assert_eq!(item["metric"], json!({"name": "hits", "selector": null}));
        assert_eq!(item["windowSeconds"], 60);
        assert_eq!(item["value"], "42");
        assert_eq!(item["timestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(item["describedObject"]["kind"], "Pod");
        assert!(item.get("metricName").is_none() && item.get("window").is_none());
    }

    #[test]
    fn v1beta1_has_metric_name_window_and_selector() {
        let selector = LabelSelector {
            match_labels: Some([("verb".to_string(), "GET".to_string())].into()),
            ..LabelSelector::default()
        };
        let list = custom_list("v1beta1", &[value(None, Some(selector))]);
        let item = &list["items"][0];
        assert_eq!(item["metricName"], "hits");
        assert_eq!(item["selector"], json!({"matchLabels": {"verb": "GET"}}));
        assert!(item.get("window").is_none() && item.get("metric").is_none());
    }
}
