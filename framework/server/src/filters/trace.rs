//! Tracing: one span per request, `request`, with what it is about (verb, group, version,
//! resource, subresource, namespace, name), who asks (`user`, once authenticated), its
//! `Audit-Id`, the answer's `code`, and the W3C `traceparent` the aggregator (or any client)
//! sent, so the logs of one request — and of the authentication, authorization, admission and
//! storage spans under it — carry the trace they belong to. Like those, it is at debug, or at
//! info while spans are exported.

use axum::extract::Request;
use http::HeaderValue;
use tracing::Span;
use tracing::field::Empty;

use crate::auth::UserInfo;
use crate::endpoints::RequestInfo;

/// W3C's `traceparent`, a name made once rather than parsed at every request.
static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");

/// The span of `request` (its request info already parsed).
pub(crate) fn request_span(request: &Request, audit_id: &HeaderValue) -> Span {
    let info = request.extensions().get::<RequestInfo>();
    let field = |f: fn(&RequestInfo) -> &str| info.map(f).unwrap_or_default();
    // At info only while spans are exported, as the child spans: a span the log filter lets
    // through is formatted and stored for every request, a fifth of a get's CPU under the
    // default `info` when no line inside it is ever written.
    let span = crate::spans::child_span!(
        "request",
        verb = field(|i| i.verb.as_str()),
        group = field(|i| &i.api_group),
        version = field(|i| &i.api_version),
        resource = field(|i| &i.resource),
        subresource = field(|i| &i.subresource),
        namespace = field(|i| &i.namespace),
        name = field(|i| &i.name),
        path = request.uri().path(),
        audit_id = audit_id.to_str().unwrap_or_default(),
        user = Empty,
        code = Empty,
        trace_id = Empty,
        parent_span_id = Empty,
    );
    if let Some((trace, parent)) = request
        .headers()
        .get(&TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(traceparent)
    {
        span.record("trace_id", trace);
        span.record("parent_span_id", parent);
        #[cfg(feature = "otlp")]
        if crate::spans::exporting() {
            otel::continue_trace(&span, request.headers());
        }
    }
    span
}

/// The exported span continues the trace of the `traceparent` (and `tracestate`) it came with.
#[cfg(feature = "otlp")]
mod otel {
    use opentelemetry::propagation::{Extractor, TextMapPropagator};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    struct Headers<'a>(&'a http::HeaderMap);

    impl Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }

        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(http::HeaderName::as_str).collect()
        }
    }

    pub(super) fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        let _ = span.set_parent(parent);
    }
}

/// Records the authenticated user on the current request's span.
pub(crate) fn record_user(request: &Request) {
    if let Some(user) = request.extensions().get::<UserInfo>() {
        Span::current().record("user", user.name.as_str());
    }
}

/// The trace id and parent span id of a W3C `traceparent` header
/// (`00-{32 hex}-{16 hex}-{2 hex}`); `None` for anything else, which is ignored as the
/// specification asks (an all-zero id is invalid too).
pub(crate) fn traceparent(header: &str) -> Option<(&str, &str)> {
    let mut parts = header.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && s.bytes().any(|b| b != b'0')
    };
    let version_ok = version.len() == 2 && version != "ff" && hex(version, 2) || version == "00";
    let extra_ok = version != "00" || parts.next().is_none();
    (version_ok && extra_ok && hex(trace, 32) && hex(parent, 16) && flags.len() == 2)
        .then_some((trace, parent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_read_as_w3c_writes_it() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            traceparent(header),
            Some(("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"))
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(traceparent(bad), None, "{bad}");
        }
    }
}
