//! Request metrics: `apiserver_request_total`, `apiserver_request_duration_seconds`,
//! `apiserver_response_sizes`, `apiserver_current_inflight_requests` and
//! `apiserver_longrunning_requests`, with kube-apiserver's labels. Recorded for resource
//! requests that passed authentication and authorization, as kube records them in its
//! handlers; the duration counts from when the request arrived. A watch is recorded when its
//! stream ends.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::{Body as _, Frame, SizeHint};
use prometheus::IntGauge;

use crate::endpoints::handlers::connect::HeldUntilClosed;
use crate::endpoints::{RequestInfo, Verb};
use crate::metrics::{COMPONENT, global};

/// One request being recorded.
pub(crate) struct Recording {
    arrived: Instant,
    /// verb, dry_run, group, version, resource, subresource, scope, component.
    labels: [String; 8],
    /// The gauge this request holds up while it runs (in flight, or long-running).
    gauge: IntGauge,
}

/// Starts recording `request` (arrived at `arrived`), if it is a resource request.
pub(crate) fn start(request: &Request, arrived: Instant, long_running: bool) -> Option<Recording> {
    let info = request.extensions().get::<RequestInfo>()?;
    if !info.is_resource_request {
        return None;
    }
    let verb = reported_verb(info, request);
    let labels = [
        verb,
        dry_run(request.uri().query()),
        info.api_group.clone(),
        info.api_version.clone(),
        info.resource.clone(),
        info.subresource.clone(),
        scope(info).to_string(),
        COMPONENT.to_string(),
    ];
    let metrics = global();
    let gauge = if long_running {
        metrics.longrunning.with_label_values(&sized(&labels))
    } else {
        let kind = match info.verb {
            Verb::Get | Verb::List | Verb::Watch => "readOnly",
            _ => "mutating",
        };
        metrics.inflight.with_label_values(&[kind])
    };
    gauge.inc();
    Some(Recording {
        arrived,
        labels,
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
        let metrics = global();
        let labels: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        let code = code.to_string();
        let mut with_code = labels.clone();
        with_code.push(&code);
        metrics.requests.with_label_values(&with_code).inc();
        metrics
            .request_duration
            .with_label_values(&labels)
            .observe(self.arrived.elapsed().as_secs_f64());
        // As kube: sizes of reads only.
        if let (Some(size), "GET" | "LIST") = (size, labels[0]) {
            metrics
                .response_sizes
                .with_label_values(&sized(&self.labels))
                .observe(size as f64);
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
fn reported_verb(info: &RequestInfo, request: &Request) -> String {
    let apply = info.verb == Verb::Patch
        && request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/apply-patch"));
    if apply {
        return "APPLY".into();
    }
    info.verb.as_str().to_ascii_uppercase()
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
fn dry_run(query: Option<&str>) -> String {
    let values: Vec<String> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "dryRun")
        .map(|(_, v)| v.into_owned())
        .collect();
    if !values.is_empty() && values.iter().all(|v| v == "All") {
        "All".into()
    } else {
        String::new()
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
    fn scope_and_dry_run_as_kube_cleans_them() {
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
    }
}
