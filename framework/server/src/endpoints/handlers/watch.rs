//! watch: a chunked stream of `{"type": ..., "object": ...}` lines, one per event, ended by
//! the watch's timeout, the client, or server shutdown.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderValue, StatusCode, header};

use super::read::accept_header;
use super::{Call, require};
use crate::endpoints::negotiation::{Encoding, Endpoint, negotiate};
use crate::endpoints::response::watch_line;
use crate::error::{Error, Result};
use crate::registry::rest::{Object, WatchEvent, WatchEventType};
use crate::runtime::ResourceInfo;

/// kube's watch metrics of one watch: `apiserver_registered_watchers` while it runs,
/// `apiserver_watch_events_total` and `apiserver_watch_events_sizes` per event sent.
struct WatchMetrics {
    watchers: prometheus::IntGauge,
    events: prometheus::IntCounter,
    sizes: prometheus::Histogram,
}

impl WatchMetrics {
    fn new(info: &ResourceInfo) -> Self {
        let metrics = crate::metrics::global();
        let watchers =
            metrics
                .registered_watchers
                .with_label_values(&[info.group, info.version, info.kind]);
        watchers.inc();
        let resource = [info.group, info.version, info.plural];
        Self {
            watchers,
            events: metrics.watch_events.with_label_values(&resource),
            sizes: metrics.watch_event_sizes.with_label_values(&resource),
        }
    }

    fn sent(&self, bytes: usize) {
        self.events.inc();
        self.sizes.observe(bytes as f64);
    }
}

impl Drop for WatchMetrics {
    fn drop(&mut self) {
        self.watchers.dec();
    }
}

pub(crate) async fn watch(call: Call) -> Result<Response> {
    let target = negotiate(accept_header(&call), Endpoint::Watch)?;
    if target.encoding != Encoding::Json {
        return Err(Error::not_acceptable(
            "only the following media types are accepted for watch: application/json",
        ));
    }
    let include = call.query.include_object(target.shape)?;
    let watcher = require(&call.resource.storage.watcher, &call)?;
    let options = call.query.list_options()?;
    let events = watcher.watch(&call.ctx, &options).await?;
    let resource = call.resource.clone();
    let shutdown = call.state.shutdown.clone();
    let metrics = WatchMetrics::new(&resource.storage.info);
    let lines = events
        .map(move |event| {
            let line = watch_line(target, event, &resource.table, include).unwrap_or_else(|e| {
                let error = WatchEvent {
                    type_: WatchEventType::Error,
                    object: Object::Decoded(e.to_json()),
                };
                watch_line(target, error, &resource.table, include).unwrap_or_default()
            });
            metrics.sent(line.len());
            Ok::<Bytes, std::io::Error>(Bytes::from(line))
        })
        .take_until(async move { shutdown.cancelled().await });
    let mut response = Response::new(Body::from_stream(lines));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(target.content_type()),
    );
    Ok(response)
}
