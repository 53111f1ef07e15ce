//! Prometheus metrics with kube-apiserver's names, labels and buckets, served at `/metrics` in
//! the Prometheus text format (authorized as the non-resource URL `/metrics`, as on
//! kube-apiserver).
//!
//! One registry per process, as Go's legacy registry: every stage records into [`global`] and
//! `/metrics` encodes it with [`encode`]. A low module: every stage may stand on it, it stands
//! on nothing of the crate.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{
    Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

mod write_stages;

pub use write_stages::{WriteStage, WriteVerb, write_stage};

/// kube-apiserver's request-duration buckets (seconds), also those of storage requests.
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// The labels of a request, as kube-apiserver's `MonitorRequest` has them (without `code`).
const REQUEST_LABELS: [&str; 8] = [
    "verb",
    "dry_run",
    "group",
    "version",
    "resource",
    "subresource",
    "scope",
    "component",
];

/// The `component` label of requests this server serves.
pub const COMPONENT: &str = "apiserver";

/// Every metric the framework records.
pub struct Metrics {
    registry: Registry,
    /// `apiserver_request_total`.
    pub requests: IntCounterVec,
    /// `apiserver_request_duration_seconds`.
    pub request_duration: HistogramVec,
    /// `apiserver_response_sizes` (gets and lists).
    pub response_sizes: HistogramVec,
    /// `apiserver_current_inflight_requests` by `request_kind` (`readOnly`, `mutating`).
    pub inflight: IntGaugeVec,
    /// `apiserver_longrunning_requests` (watches).
    pub longrunning: IntGaugeVec,
    /// `apiserver_registered_watchers` by group, version and kind.
    pub registered_watchers: IntGaugeVec,
    /// `apiserver_watch_events_total` by group, version and resource.
    pub watch_events: IntCounterVec,
    /// `apiserver_terminated_watchers_total` by group and resource: watchers ended because
    /// their client stopped reading.
    pub terminated_watchers: IntCounterVec,
    /// `apiserver_watch_events_sizes` by group, version and resource.
    pub watch_event_sizes: HistogramVec,
    /// `apiserver_storage_objects` by resource (`flunders.wardle.example.com`).
    pub storage_objects: IntGaugeVec,
    /// `etcd_request_duration_seconds` by operation and type (the group-resource), for every
    /// storage backend.
    pub storage_duration: HistogramVec,
    /// `apiserver_watch_cache_events_received_total` by resource.
    pub watch_cache_events: IntCounterVec,
    /// `apiserver_watch_cache_resource_version` by resource.
    pub watch_cache_revision: IntGaugeVec,
    /// `authentication_duration_seconds` by result (`success`, `failure`, `error`).
    pub authentication_duration: HistogramVec,
    /// `authorization_duration_seconds` by result (`allowed`, `denied`, `error`).
    pub authorization_duration: HistogramVec,
    /// `apiserver_admission_step_admission_duration_seconds` by type, operation, rejected.
    pub admission_duration: HistogramVec,
    /// `apiserver_admission_webhook_admission_duration_seconds` by name, type, operation,
    /// rejected: one admission webhook call.
    pub webhook_duration: HistogramVec,
    /// `apiserver_dropped_requests_total` by request_kind: refused with 429 because the
    /// server had no seat for them.
    pub dropped: IntCounterVec,
    /// `apiserver_audit_event_total`: audit events handed to the backends.
    pub audit_events: IntCounterVec,
    /// `apiserver_audit_error_total` by plugin: audit events lost (`buffered`: the webhook's
    /// buffer was full; `webhook`, `log`: the backend failed).
    pub audit_errors: IntCounterVec,
    /// API Priority and Fairness, with kube's names and labels.
    pub flowcontrol: FlowControlMetrics,
    /// `apiserver_write_stage_duration_seconds` by verb and stage (ours; kube traces these
    /// steps): record with [`write_stage`].
    pub write_stages: HistogramVec,
    /// The `apiserver_storage_objects` series made with [`Metrics::storage_objects_of`], by
    /// resource: what the width of a list is estimated from.
    object_counts: std::sync::RwLock<std::collections::HashMap<String, prometheus::IntGauge>>,
}

/// kube's `apiserver_flowcontrol_*` metrics (`util/flowcontrol/metrics`).
pub struct FlowControlMetrics {
    /// `apiserver_flowcontrol_rejected_requests_total` by flow_schema, priority_level,
    /// reason (`queue-full`, `concurrency-limit`, `time-out`, `cancelled`).
    pub rejected: IntCounterVec,
    /// `apiserver_flowcontrol_dispatched_requests_total` by flow_schema, priority_level.
    pub dispatched: IntCounterVec,
    /// `apiserver_flowcontrol_current_inqueue_requests` by flow_schema, priority_level.
    pub inqueue: IntGaugeVec,
    /// `apiserver_flowcontrol_current_executing_requests` by flow_schema, priority_level.
    pub executing: IntGaugeVec,
    /// `apiserver_flowcontrol_current_executing_seats` by flow_schema, priority_level.
    pub executing_seats: IntGaugeVec,
    /// `apiserver_flowcontrol_nominal_limit_seats` by priority_level.
    pub nominal_limit_seats: IntGaugeVec,
    /// `apiserver_flowcontrol_lower_limit_seats` by priority_level: the nominal seats less
    /// those the level may lend.
    pub lower_limit_seats: IntGaugeVec,
    /// `apiserver_flowcontrol_upper_limit_seats` by priority_level: the nominal seats plus
    /// those the level may borrow.
    pub upper_limit_seats: IntGaugeVec,
    /// `apiserver_flowcontrol_current_limit_seats` by priority_level: the seats borrowing
    /// last gave the level.
    pub current_limit_seats: IntGaugeVec,
    /// `apiserver_flowcontrol_demand_seats_high_watermark` by priority_level.
    pub demand_seats_high_watermark: GaugeVec,
    /// `apiserver_flowcontrol_demand_seats_average` by priority_level.
    pub demand_seats_average: GaugeVec,
    /// `apiserver_flowcontrol_demand_seats_stdev` by priority_level.
    pub demand_seats_stdev: GaugeVec,
    /// `apiserver_flowcontrol_demand_seats_smoothed` by priority_level.
    pub demand_seats_smoothed: GaugeVec,
    /// `apiserver_flowcontrol_target_seats` by priority_level.
    pub target_seats: GaugeVec,
    /// `apiserver_flowcontrol_seat_fair_frac`.
    pub seat_fair_frac: Gauge,
    /// `apiserver_flowcontrol_request_wait_duration_seconds` by flow_schema,
    /// priority_level, execute (`true`, `false`).
    pub wait_duration: HistogramVec,
}

impl Metrics {
    fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let metric = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(metric.clone()))?;
            Ok::<_, prometheus::Error>(metric)
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let metric = IntGaugeVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(metric.clone()))?;
            Ok::<_, prometheus::Error>(metric)
        };
        let float_gauge = |name: &str, help: &str, labels: &[&str]| {
            let metric = GaugeVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(metric.clone()))?;
            Ok::<_, prometheus::Error>(metric)
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            let opts = HistogramOpts::new(name, help).buckets(buckets);
            let metric = HistogramVec::new(opts, labels)?;
            registry.register(Box::new(metric.clone()))?;
            Ok::<_, prometheus::Error>(metric)
        };
        let durations = DURATION_BUCKETS.to_vec();
        let with_code: Vec<&str> = REQUEST_LABELS.iter().copied().chain(["code"]).collect();
        let sized = [
            "verb",
            "group",
            "version",
            "resource",
            "subresource",
            "scope",
            "component",
        ];
        let gvr = ["group", "version", "resource"];
        let metrics = Self {
            requests: counter(
                "apiserver_request_total",
                "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
                &with_code,
            )?,
            request_duration: histogram(
                "apiserver_request_duration_seconds",
                "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
                &REQUEST_LABELS,
                durations.clone(),
            )?,
            response_sizes: histogram(
                "apiserver_response_sizes",
                "Response size distribution in bytes for each group, version, verb, resource, subresource, scope and component.",
                &sized,
                prometheus::exponential_buckets(1000.0, 10.0, 8)?,
            )?,
            inflight: gauge(
                "apiserver_current_inflight_requests",
                "Number of requests currently being served, by kind of request.",
                &["request_kind"],
            )?,
            longrunning: gauge(
                "apiserver_longrunning_requests",
                "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component.",
                &sized,
            )?,
            registered_watchers: gauge(
                "apiserver_registered_watchers",
                "Number of currently registered watchers for a given resources",
                &["group", "version", "kind"],
            )?,
            watch_events: counter(
                "apiserver_watch_events_total",
                "Number of events sent in watch clients",
                &gvr,
            )?,
            terminated_watchers: counter(
                "apiserver_terminated_watchers_total",
                "Counter of watchers closed due to unresponsiveness broken by resource type.",
                &["group", "resource"],
            )?,
            watch_event_sizes: histogram(
                "apiserver_watch_events_sizes",
                "Watch event size distribution in bytes",
                &gvr,
                prometheus::exponential_buckets(1024.0, 2.0, 8)?,
            )?,
            storage_objects: gauge(
                "apiserver_storage_objects",
                "Number of stored objects at the time of last check split by kind.",
                &["resource"],
            )?,
            storage_duration: histogram(
                "etcd_request_duration_seconds",
                "Etcd request latency in seconds for each operation and object type.",
                &["operation", "type"],
                durations.clone(),
            )?,
            watch_cache_events: counter(
                "apiserver_watch_cache_events_received_total",
                "Counter of events received in watch cache broken by resource type.",
                &["resource"],
            )?,
            watch_cache_revision: gauge(
                "apiserver_watch_cache_resource_version",
                "Current resource version of watch cache broken by resource type.",
                &["resource"],
            )?,
            authentication_duration: histogram(
                "authentication_duration_seconds",
                "Authentication duration in seconds broken out by result.",
                &["result"],
                prometheus::exponential_buckets(0.001, 2.0, 15)?,
            )?,
            authorization_duration: histogram(
                "authorization_duration_seconds",
                "Authorization duration in seconds broken out by result.",
                &["result"],
                prometheus::exponential_buckets(0.001, 2.0, 15)?,
            )?,
            admission_duration: histogram(
                "apiserver_admission_step_admission_duration_seconds",
                "Admission sub-step latency histogram in seconds, broken out for each operation and API resource and step type (validate or admit).",
                &["type", "operation", "rejected"],
                vec![0.005, 0.025, 0.1, 0.5, 1.0, 2.5],
            )?,
            webhook_duration: histogram(
                "apiserver_admission_webhook_admission_duration_seconds",
                "Admission webhook latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).",
                &["name", "type", "operation", "rejected"],
                vec![0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 25.0],
            )?,
            dropped: counter(
                "apiserver_dropped_requests_total",
                "Number of requests dropped with 'Try again later' response",
                &["request_kind"],
            )?,
            audit_events: counter(
                "apiserver_audit_event_total",
                "Counter of audit events generated and sent to the audit backend.",
                &[],
            )?,
            audit_errors: counter(
                "apiserver_audit_error_total",
                "Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.",
                &["plugin"],
            )?,
            flowcontrol: FlowControlMetrics {
                rejected: counter(
                    "apiserver_flowcontrol_rejected_requests_total",
                    "Number of requests rejected by API Priority and Fairness subsystem",
                    &["flow_schema", "priority_level", "reason"],
                )?,
                dispatched: counter(
                    "apiserver_flowcontrol_dispatched_requests_total",
                    "Number of requests executed by API Priority and Fairness subsystem",
                    &["flow_schema", "priority_level"],
                )?,
                inqueue: gauge(
                    "apiserver_flowcontrol_current_inqueue_requests",
                    "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
                    &["flow_schema", "priority_level"],
                )?,
                executing: gauge(
                    "apiserver_flowcontrol_current_executing_requests",
                    "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
                    &["flow_schema", "priority_level"],
                )?,
                executing_seats: gauge(
                    "apiserver_flowcontrol_current_executing_seats",
                    "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem",
                    &["flow_schema", "priority_level"],
                )?,
                nominal_limit_seats: gauge(
                    "apiserver_flowcontrol_nominal_limit_seats",
                    "Nominal number of execution seats configured for each priority level",
                    &["priority_level"],
                )?,
                lower_limit_seats: gauge(
                    "apiserver_flowcontrol_lower_limit_seats",
                    "Configured lower bound on number of execution seats available to each priority level",
                    &["priority_level"],
                )?,
                upper_limit_seats: gauge(
                    "apiserver_flowcontrol_upper_limit_seats",
                    "Configured upper bound on number of execution seats available to each priority level",
                    &["priority_level"],
                )?,
                current_limit_seats: gauge(
                    "apiserver_flowcontrol_current_limit_seats",
                    "current derived number of execution seats available to each priority level",
                    &["priority_level"],
                )?,
                demand_seats_high_watermark: float_gauge(
                    "apiserver_flowcontrol_demand_seats_high_watermark",
                    "High watermark, over last adjustment period, of demand_seats",
                    &["priority_level"],
                )?,
                demand_seats_average: float_gauge(
                    "apiserver_flowcontrol_demand_seats_average",
                    "Time-weighted average, over last adjustment period, of demand_seats",
                    &["priority_level"],
                )?,
                demand_seats_stdev: float_gauge(
                    "apiserver_flowcontrol_demand_seats_stdev",
                    "Time-weighted standard deviation, over last adjustment period, of demand_seats",
                    &["priority_level"],
                )?,
                demand_seats_smoothed: float_gauge(
                    "apiserver_flowcontrol_demand_seats_smoothed",
                    "Smoothed seat demands",
                    &["priority_level"],
                )?,
                target_seats: float_gauge(
                    "apiserver_flowcontrol_target_seats",
                    "Seat allocation targets",
                    &["priority_level"],
                )?,
                seat_fair_frac: {
                    let metric = Gauge::new(
                        "apiserver_flowcontrol_seat_fair_frac",
                        "Fair fraction of server's concurrency to allocate to each priority level that can use it",
                    )?;
                    registry.register(Box::new(metric.clone()))?;
                    metric
                },
                wait_duration: histogram(
                    "apiserver_flowcontrol_request_wait_duration_seconds",
                    "Length of time a request spent waiting in its queue",
                    &["flow_schema", "priority_level", "execute"],
                    vec![
                        0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
                    ],
                )?,
            },
            write_stages: histogram(
                write_stages::NAME,
                write_stages::HELP,
                &["verb", "stage"],
                write_stages::buckets()?,
            )?,
            object_counts: Default::default(),
            registry,
        };
        metrics.register_process()?;
        Ok(metrics)
    }

    /// The `apiserver_storage_objects` series of `resource` (`flunders.wardle.example.com`),
    /// remembered so that [`stored_objects`](Self::stored_objects) can read it.
    pub fn storage_objects_of(&self, resource: &str) -> prometheus::IntGauge {
        let gauge = self.storage_objects.with_label_values(&[resource]);
        let mut counts = self
            .object_counts
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.insert(resource.to_string(), gauge.clone());
        gauge
    }

    /// How many objects of `resource` are stored, as last counted; `None` when nothing
    /// counts them (no watch cache).
    pub fn stored_objects(&self, resource: &str) -> Option<i64> {
        let counts = self
            .object_counts
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.get(resource).map(prometheus::IntGauge::get)
    }

    /// `process_cpu_seconds_total`, `process_resident_memory_bytes`, … as Go's process
    /// collector has them (Linux only, as there).
    fn register_process(&self) -> Result<(), prometheus::Error> {
        #[cfg(target_os = "linux")]
        self.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(())
    }
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| Metrics::new().expect("the metric definitions are valid"))
}

/// Every metric, in the Prometheus text format (`text/plain; version=0.0.4`).
pub fn encode() -> String {
    let families = global().registry.gather();
    TextEncoder::new()
        .encode_to_string(&families)
        .unwrap_or_default()
}

/// The content type of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `elapsed` in seconds, for a histogram.
pub fn seconds(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64()
}

/// The group-resource a storage key or prefix belongs to (`flunders.wardle.example.com`),
/// from `{prefix}/{group}/{plural}/…`; empty when the key is not under `prefix`.
pub fn group_resource_of_key(prefix: &str, key: &str) -> String {
    let mut out = String::new();
    write_group_resource_of_key(prefix, key, &mut out);
    out
}

/// [`group_resource_of_key`] written at the end of `out` (nothing when the key is not under
/// `prefix`): a caller that labels every request with it reuses one buffer.
pub fn write_group_resource_of_key(prefix: &str, key: &str, out: &mut String) {
    let Some(rest) = key.strip_prefix(prefix.trim_end_matches('/')) else {
        return;
    };
    let mut parts = rest.trim_start_matches('/').split('/');
    if let (Some(group), Some(plural)) = (parts.next(), parts.next())
        && !plural.is_empty()
    {
        out.push_str(plural);
        if !group.is_empty() {
            out.push('.');
            out.push_str(group);
        }
    }
}

/// The group-resource of a resource's key prefix, `{anything}/{group}/{plural}/` (a watch
/// cache's): `flunders.wardle.example.com`.
pub fn group_resource_of_prefix(prefix: &str) -> String {
    let mut parts = prefix.trim_end_matches('/').rsplit('/');
    match (parts.next(), parts.next()) {
        (Some(plural), Some("")) | (Some(plural), None) => plural.to_string(),
        (Some(plural), Some(group)) => format!("{plural}.{group}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_group_resource() {
        let key = "/registry/wardle.example.com/flunders/default/a";
        assert_eq!(
            group_resource_of_key("/registry", key),
            "flunders.wardle.example.com"
        );
        let prefix = "/registry/wardle.example.com/flunders/";
        assert_eq!(
            group_resource_of_key("/registry/", prefix),
            "flunders.wardle.example.com"
        );
        assert_eq!(group_resource_of_key("/other", key), "");
        assert_eq!(group_resource_of_key("/registry", "/registry/x"), "");
        // Written at the end of what a reused buffer holds.
        let mut buffer = String::from("label:");
        write_group_resource_of_key("/registry", key, &mut buffer);
        assert_eq!(buffer, "label:flunders.wardle.example.com");
        assert_eq!(
            group_resource_of_prefix("/registry/wardle.example.com/flunders/"),
            "flunders.wardle.example.com"
        );
    }

    #[test]
    fn the_text_has_kube_apiservers_names() {
        let m = global();
        m.requests
            .with_label_values(&[
                "GET",
                "",
                "g",
                "v1",
                "things",
                "",
                "namespace",
                COMPONENT,
                "200",
            ])
            .inc();
        m.storage_duration
            .with_label_values(&["get", "things.g"])
            .observe(0.01);
        let text = encode();
        assert!(
            text.contains("# TYPE apiserver_request_total counter"),
            "{text}"
        );
        assert!(text.contains("etcd_request_duration_seconds_bucket{operation=\"get\""));
        #[cfg(target_os = "linux")]
        assert!(text.contains("process_resident_memory_bytes"));
    }
}
