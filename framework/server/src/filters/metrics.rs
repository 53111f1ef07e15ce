//! Request metrics: `apiserver_request_total`, `apiserver_request_duration_seconds`,
//! `apiserver_response_sizes`, `apiserver_current_inflight_requests` and
//! `apiserver_longrunning_requests`, with kube-apiserver's labels. Recorded for resource
//! requests that passed authentication and authorization, as kube records them in its
//! handlers; the duration counts from when the request arrived. A watch is recorded when its
//! stream ends.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use extension_apiserver_machinery::hash::{ServerKeys, seeded_hash};
use hyper::body::{Body as _, Frame, SizeHint};
use prometheus::{Histogram, IntCounter, IntGauge};

use crate::endpoints::handlers::connect::HeldUntilClosed;
use crate::endpoints::{RequestInfo, Verb};
use crate::metrics::{COMPONENT, global};

/// One request being recorded.
pub(crate) struct Recording {
    arrived: Instant,
    /// Its series, resolved once for every request of the same labels.
    series: Arc<Series>,
    /// The gauge this request holds up while it runs (in flight, or long-running).
    gauge: IntGauge,
}

/// The series of requests with the same labels (verb, dry_run, group, version, resource,
/// subresource, scope, component): resolved once, so that a request neither copies its
/// labels into strings nor looks each metric up by them again.
struct Series {
    labels: [String; 8],
    duration: Histogram,
    sizes: Histogram,
    /// `apiserver_request_total` by code, as the codes are met.
    by_code: RwLock<Vec<(u16, IntCounter)>>,
}

impl Series {
    fn new(labels: [String; 8]) -> Self {
        let metrics = global();
        let all: Vec<&str> = labels.iter().map(String::as_str).collect();
        Self {
            duration: metrics.request_duration.with_label_values(&all),
            sizes: metrics.response_sizes.with_label_values(&sized(&labels)),
            by_code: RwLock::default(),
            labels,
        }
    }

    fn is(&self, labels: &[&str; 8]) -> bool {
        self.labels.iter().zip(labels).all(|(a, b)| a == b)
    }

    /// The request counter of `code` in this series.
    fn requests(&self, code: u16) -> IntCounter {
        let known = self.by_code.read().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, counter)) = known.iter().find(|(c, _)| *c == code) {
            return counter.clone();
        }
        drop(known);
        let code_label = code.to_string();
        let mut labels: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        labels.push(&code_label);
        let counter = global().requests.with_label_values(&labels);
        let mut known = self.by_code.write().unwrap_or_else(PoisonError::into_inner);
        if !known.iter().any(|(c, _)| *c == code) {
            known.push((code, counter.clone()));
        }
        counter
    }
}

/// The series met so far, by a hash of their labels. Bounded: past it, a series is resolved
/// for its request alone (the metrics are the same, only slower to reach).
const MAX_SERIES: usize = 4096;

fn series_of(labels: [&str; 8]) -> Arc<Series> {
    // Keyed by the labels' hash (a collision only resolves a series for one request).
    static KNOWN: OnceLock<RwLock<HashMap<u64, Arc<Series>, ServerKeys>>> = OnceLock::new();
    let known = KNOWN.get_or_init(RwLock::default);
    let key = seeded_hash(&labels);
    let found = known
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
        .cloned();
    match found {
        Some(series) if series.is(&labels) => series,
        // Another series with the same hash: resolved, not kept.
        Some(_) => Arc::new(Series::new(labels.map(str::to_string))),
        None => {
            let series = Arc::new(Series::new(labels.map(str::to_string)));
            let mut known = known.write().unwrap_or_else(PoisonError::into_inner);
            if known.len() < MAX_SERIES {
                known.entry(key).or_insert_with(|| series.clone());
            }
            series
        }
    }
}

/// `apiserver_current_inflight_requests` of `readOnly` or `mutating` requests (each series
/// made when first met, as before).
fn inflight(mutating: bool) -> IntGauge {
    static GAUGES: [OnceLock<IntGauge>; 2] = [OnceLock::new(), OnceLock::new()];
    let kind = if mutating { "mutating" } else { "readOnly" };
    let gauge =
        GAUGES[usize::from(mutating)].get_or_init(|| global().inflight.with_label_values(&[kind]));
    gauge.clone()
}

/// The series of a histogram with one label, resolved the first time it is met and kept in
/// `slot`: what the authentication and authorization filters observe with each request.
pub(crate) fn one_label(
    slot: &'static OnceLock<Histogram>,
    vec: &prometheus::HistogramVec,
    label: &str,
) -> &'static Histogram {
    slot.get_or_init(|| vec.with_label_values(&[label]))
}

/// Starts recording `request` (arrived at `arrived`), if it is a resource request.
pub(crate) fn start(request: &Request, arrived: Instant, long_running: bool) -> Option<Recording> {
    let info = request.extensions().get::<RequestInfo>()?;
    if !info.is_resource_request {
        return None;
    }
    let series = series_of([
        reported_verb(info, request),
        dry_run(request.uri().query()),
        &info.api_group,
        &info.api_version,
        &info.resource,
        &info.subresource,
        scope(info),
        COMPONENT,
    ]);
    let gauge = if long_running {
        global()
            .longrunning
            .with_label_values(&sized(&series.labels))
    } else {
        inflight(!matches!(info.verb, Verb::Get | Verb::List | Verb::Watch))
    };
    gauge.inc();
    Some(Recording {
        arrived,
        series,
        gauge,
    })
}

/// Records the answer: now, or for a long-running request when its body ends.
pub(crate) fn finish(recording: Recording, long_running: bool, response: Response) -> Response {
    if !long_running {
        recording.record(
            response.status().as_u16(),
            response.body().size_hint().exact(),
        );
        return response;
    }
    // An upgraded connection: counted until the session ends, not the 101 answer.
    if let Some(held) = response.extensions().get::<HeldUntilClosed>() {
        let code = response.status().as_u16();
        held.hold(Box::new(Recorded {
            body: Body::empty(),
            recording: Some((recording, code)),
        }));
        return response;
    }
    let (parts, body) = response.into_parts();
    let code = parts.status.as_u16();
    let body = Body::new(Recorded {
        body,
        recording: Some((recording, code)),
    });
    Response::from_parts(parts, body)
}

impl Recording {
    fn record(self, code: u16, size: Option<u64>) {
        let series = &self.series;
        series.requests(code).inc();
        series
            .duration
            .observe(self.arrived.elapsed().as_secs_f64());
        // As kube: sizes of reads only.
        if let (Some(size), "GET" | "LIST") = (size, series.labels[0].as_str()) {
            series.sizes.observe(size as f64);
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// The labels of the size and long-running metrics: all but `dry_run`.
fn sized(labels: &[String; 8]) -> [&str; 7] {
    [
        &labels[0], &labels[2], &labels[3], &labels[4], &labels[5], &labels[6], &labels[7],
    ]
}

/// kube's reported verb: the request verb upper-cased; `APPLY` for a server-side apply patch.
fn reported_verb(info: &RequestInfo, request: &Request) -> &'static str {
    let apply = info.verb == Verb::Patch
        && request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/apply-patch"));
    if apply {
        return "APPLY";
    }
    info.verb.as_upper_str()
}

/// kube's `CleanScope`: `resource` for one object (or a create), `namespace`, `cluster`.
fn scope(info: &RequestInfo) -> &'static str {
    if !info.name.is_empty() || info.verb == Verb::Create {
        "resource"
    } else if !info.namespace.is_empty() {
        "namespace"
    } else {
        "cluster"
    }
}

/// kube's `cleanDryRun`: the `dryRun` values when every one is `All`, else empty.
fn dry_run(query: Option<&str>) -> &'static str {
    let Some(query) = query.filter(|q| q.contains("dryRun")) else {
        return "";
    };
    let mut values = form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "dryRun")
        .map(|(_, v)| v)
        .peekable();
    if values.peek().is_some() && values.all(|v| v == "All") {
        "All"
    } else {
        ""
    }
}

/// A long-running response's body, recorded when it ends (or the client goes away).
struct Recorded {
    body: Body,
    recording: Option<(Recording, u16)>,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if let Some((recording, code)) = self.recording.take() {
            recording.record(code, None);
        }
    }
}

impl hyper::body::Body for Recorded {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_resolved_once_and_counts_each_code() {
        let labels = [
            "GET",
            "",
            "series.example.com",
            "v1",
            "gadgets",
            "",
            "resource",
            COMPONENT,
        ];
        let series = series_of(labels);
        assert!(Arc::ptr_eq(&series, &series_of(labels)), "kept");
        let mut other = labels;
        other[4] = "widgets";
        assert!(!Arc::ptr_eq(&series, &series_of(other)));
        series.requests(200).inc();
        series.requests(200).inc();
        series.requests(404).inc();
        let count = |code: &str| {
            let mut with_code = labels.to_vec();
            with_code.push(code);
            global().requests.with_label_values(&with_code).get()
        };
        assert_eq!((count("200"), count("404")), (2, 1));
    }

    #[test]
    fn verb_scope_and_dry_run_as_kube_cleans_them() {
        let info = |verb, ns: &str, name: &str| RequestInfo {
            is_resource_request: true,
            verb,
            namespace: ns.into(),
            name: name.into(),
            ..RequestInfo::default()
        };
        assert_eq!(scope(&info(Verb::Get, "ns", "a")), "resource");
        assert_eq!(scope(&info(Verb::Create, "ns", "")), "resource");
        assert_eq!(scope(&info(Verb::List, "ns", "")), "namespace");
        assert_eq!(scope(&info(Verb::List, "", "")), "cluster");
        assert_eq!(dry_run(Some("dryRun=All&x=1")), "All");
        assert_eq!(dry_run(Some("dryRun=All&dryRun=Nope")), "");
        assert_eq!(dry_run(None), "");
        assert_eq!(dry_run(Some("x=dryRun")), "");
        // Every verb a request can have, from its method, path and query.
        let methods = [
            "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE",
        ];
        let paths = [
            ("/apis/g/v/r/n", None),
            ("/apis/g/v/r", None),
            ("/apis/g/v/r", Some("watch=1")),
            ("/healthz", None),
        ];
        for method in methods {
            let method: http::Method = method.parse().unwrap();
            for (path, query) in paths {
                let verb = RequestInfo::parse(&method, path, query).verb;
                assert_eq!(verb.as_upper_str(), verb.as_str().to_ascii_uppercase());
            }
        }
        assert_eq!(Verb::Impersonate.as_upper_str(), "IMPERSONATE");
    }
}
