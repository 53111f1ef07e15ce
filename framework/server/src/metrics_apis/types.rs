//! The types of `k8s.io/metrics`, as their JSON is on the wire.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Resource;

/// `metrics.k8s.io/v1beta1` `NodeMetrics`: the resource usage of one node (`nodes`,
/// cluster-scoped), as metrics-server serves it. Its labels are the node's, so a label
/// selector on the metrics selects nodes.
// Clippy takes the repeated `type = "string"` of the printcolumns for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(Resource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "metrics.k8s.io",
    version = "v1beta1",
    kind = "NodeMetrics",
    plural = "nodes",
    singular = "node",
    printcolumn(name = "CPU", type = "string", json_path = ".usage.cpu"),
    printcolumn(name = "Memory", type = "string", json_path = ".usage.memory"),
    printcolumn(name = "Window", type = "string", json_path = ".window")
)]
pub struct NodeMetrics {
    /// The node's name and labels.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// When the usage was measured: the end of the window.
    pub timestamp: Time,
    /// The time over which the usage was measured (`Time` is its end).
    #[serde(with = "go_duration")]
    #[schemars(with = "String")]
    pub window: Duration,
    /// `cpu` (cores) and `memory` (bytes of working set).
    #[serde(default)]
    pub usage: BTreeMap<String, Quantity>,
}

/// `metrics.k8s.io/v1beta1` `PodMetrics`: the resource usage of one pod's containers
/// (`pods`, namespaced). Its labels are the pod's.
#[derive(Resource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "metrics.k8s.io",
    version = "v1beta1",
    kind = "PodMetrics",
    plural = "pods",
    singular = "pod",
    namespaced,
    printcolumn(name = "Window", type = "string", json_path = ".window")
)]
pub struct PodMetrics {
    /// The pod's namespace, name and labels.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// When the usage was measured: the end of the window.
    pub timestamp: Time,
    /// The time over which the usage was measured.
    #[serde(with = "go_duration")]
    #[schemars(with = "String")]
    pub window: Duration,
    /// The usage of each container.
    #[serde(default)]
    pub containers: Vec<ContainerMetrics>,
}

/// The usage of one container of a [`PodMetrics`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContainerMetrics {
    /// The container's name.
    pub name: String,
    /// `cpu` (cores) and `memory` (bytes of working set).
    #[serde(default)]
    pub usage: BTreeMap<String, Quantity>,
}

/// One value of a custom metric, describing one object (`custom.metrics.k8s.io`). The
/// framework writes it in the shape of the version asked: `v1beta2`'s `metric: {name,
/// selector}` and `windowSeconds`, or `v1beta1`'s `metricName`, `selector` and `window`.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricValue {
    /// The object the value describes (`kind`, `name`, `namespace`, `apiVersion`).
    pub described_object: ObjectReference,
    /// The metric's name.
    pub metric: String,
    /// The metric label selector the value was selected with, when one was given.
    pub selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// When the value was measured.
    pub timestamp: Time,
    /// Over how long it was measured, for a rate or an average.
    pub window: Option<Duration>,
    /// The value.
    pub value: Quantity,
}

/// One value of an external metric (`external.metrics.k8s.io/v1beta1` `ExternalMetricValue`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalMetricValue {
    /// The metric's name.
    pub metric_name: String,
    /// The labels of the series (what a label selector on the metric filters on).
    #[serde(default)]
    pub metric_labels: BTreeMap<String, String>,
    /// When the value was measured.
    pub timestamp: Time,
    /// Over how long it was measured, in seconds.
    #[serde(rename = "window", default, skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<i64>,
    /// The value.
    pub value: Quantity,
}

/// `d` as Go's `time.Duration.String()` writes it (`metav1.Duration`'s JSON): `20.5s`,
/// `1m0s`, `1h2m3s`, `500ms`, `0s`.
pub fn go_duration_string(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", fraction(nanos, 1_000_000));
    }
    let total_secs = d.as_secs();
    let (h, m, s) = (total_secs / 3600, (total_secs / 60) % 60, total_secs % 60);
    let seconds = fraction(
        u128::from(s) * 1_000_000_000 + u128::from(d.subsec_nanos()),
        1_000_000_000,
    );
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `value / unit` with the fraction Go writes (no trailing zeros).
fn fraction(value: u128, unit: u128) -> String {
    let (whole, rest) = (value / unit, value % unit);
    if rest == 0 {
        return whole.to_string();
    }
    let digits = unit.to_string().len() - 1;
    let rest = format!("{rest:0digits$}");
    format!("{whole}.{}", rest.trim_end_matches('0'))
}

/// Parses a Go duration (`time.ParseDuration`): `1h2m3.5s`, `500ms`, `10s`, `1.5m`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    Some(Duration::from_secs_f64(total))
}

/// Serde for a `metav1.Duration` field.
mod go_duration {
    use super::*;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&go_duration_string(*d))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse_go_duration(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid duration {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_go_writes_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(20_034), "20.034s"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(3723), "1h2m3s"),
            (Duration::from_micros(1500), "1.5ms"),
        ];
        for (d, s) in cases {
            assert_eq!(go_duration_string(d), s);
            assert_eq!(parse_go_duration(s), Some(d), "{s}");
        }
        assert_eq!(parse_go_duration("1.5m"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("ten"), None);
        assert_eq!(parse_go_duration(""), None);
    }
}
