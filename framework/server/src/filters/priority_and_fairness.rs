//! API Priority and Fairness as a filter, as kube's `filters/priority-and-fairness.go`: after
//! impersonation and before authorization, a request is classified (FlowSchema and priority
//! level, named by UID in the `X-Kubernetes-PF-FlowSchema-UID` and
//! `X-Kubernetes-PF-PriorityLevel-UID` headers of its response), its width estimated (lists
//! from the stored object count), and it waits for seats at most a quarter of the request
//! timeout (at most a minute); refused, it is a 429 `TooManyRequests` with the level's
//! `Retry-After` (kube's dropped-requests tracker) and changes nothing. Long-running requests
//! other than watches are not tracked; a watch holds its seats until its initial events are
//! queued for its client (its storage signals it, as kube's cacher does; a watch whose storage
//! does not, until its response starts).

use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use http::HeaderValue;

use crate::auth::UserInfo;
use crate::endpoints::{RequestInfo, Verb};
use crate::flowcontrol::width::{ListShape, list_seats};
use crate::flowcontrol::{Classification, FlowControl, RequestDigest, ResourceTarget, Seat};

/// kube's header naming the matched FlowSchema by UID.
pub const FLOW_SCHEMA_UID: &str = "x-kubernetes-pf-flowschema-uid";
/// kube's header naming the matched priority level by UID.
pub const PRIORITY_LEVEL_UID: &str = "x-kubernetes-pf-prioritylevel-uid";

/// What an admitted request holds while it runs: its seats (`None`: not tracked) and the
/// headers its response gets.
pub(crate) struct Admitted {
    pub(crate) _seat: Option<Seat>,
    headers: Option<[HeaderValue; 2]>,
}

impl Admitted {
    /// Adds the `X-Kubernetes-PF-*` headers to `response`.
    pub(crate) fn stamp(&self, response: &mut Response) {
        stamp(&self.headers, response);
    }
}

fn stamp(headers: &Option<[HeaderValue; 2]>, response: &mut Response) {
    if let Some([schema, level]) = headers {
        let map = response.headers_mut();
        map.insert(FLOW_SCHEMA_UID, schema.clone());
        map.insert(PRIORITY_LEVEL_UID, level.clone());
    }
}

/// kube's `getRequestWaitContext`: a quarter of the request's time, at most a minute.
pub(crate) fn wait_limit(request_timeout: Duration) -> Duration {
    (request_timeout / 4).min(Duration::from_secs(60))
}

/// A request classified, before it waits for seats.
pub(crate) struct Classified {
    classification: Classification,
    width: u32,
    headers: Option<[HeaderValue; 2]>,
    /// `readOnly` or `mutating`, for `apiserver_dropped_requests_total`.
    kind: &'static str,
}

/// Classifies `request`; `None` when it is not tracked (no user: an always-allowed path
/// served before authentication; or long-running and not a watch).
pub(crate) fn classify(
    engine: &FlowControl,
    request: &Request,
    long_running: bool,
) -> Option<Classified> {
    let info = request.extensions().get::<RequestInfo>()?;
    let user = request.extensions().get::<UserInfo>()?;
    if long_running && info.verb != Verb::Watch {
        return None;
    }
    let digest = RequestDigest {
        user,
        verb: info.verb.as_str(),
        path: &info.path,
        resource: info.is_resource_request.then_some(ResourceTarget {
            api_group: &info.api_group,
            resource: &info.resource,
            subresource: &info.subresource,
            namespace: &info.namespace,
        }),
    };
    let classification = engine.classify(&digest);
    // The UIDs are shared bytes of the configuration: no copy per request.
    let header = |v: &bytes::Bytes| {
        HeaderValue::from_maybe_shared(v.clone()).unwrap_or(HeaderValue::from_static(""))
    };
    let [schema_uid, level_uid] = classification.shared_uids();
    let headers = Some([header(schema_uid), header(level_uid)]);
    let width = if classification.exempt() {
        1
    } else {
        width(info, request.uri().query(), classification.max_seats())
    };
    let kind = if matches!(info.verb, Verb::Get | Verb::List | Verb::Watch) {
        "readOnly"
    } else {
        "mutating"
    };
    Some(Classified {
        classification,
        width,
        headers,
        kind,
    })
}

/// Seats for a classified request, or the 429 that refuses it.
pub(crate) async fn admit(
    engine: &FlowControl,
    classified: Option<Classified>,
    wait: Duration,
) -> Result<Admitted, Response> {
    let Some(Classified {
        classification,
        width,
        headers,
        kind,
    }) = classified
    else {
        return Ok(Admitted {
            _seat: None,
            headers: None,
        });
    };
    match engine.admit(&classification, width, wait).await {
        Ok(seat) => Ok(Admitted {
            _seat: Some(seat),
            headers,
        }),
        Err(rejection) => {
            tracing::debug!(
                flow_schema = classification.flow_schema(),
                priority_level = classification.priority_level(),
                reason = rejection.reason(),
                "refused by priority and fairness"
            );
            let metrics = crate::metrics::global();
            metrics.dropped.with_label_values(&[kind]).inc();
            let mut response = super::too_many_requests(classification.retry_after());
            stamp(&headers, &mut response);
            Err(response)
        }
    }
}

/// Seats of a request: a list's from the objects it reads (kube's list work estimator), one
/// otherwise (a watch without `sendInitialEvents`, as kube's).
fn width(info: &RequestInfo, query: Option<&str>, max_seats: u32) -> u32 {
    if info.verb != Verb::List {
        return 1;
    }
    let mut shape = ListShape::default();
    let resource = if info.api_group.is_empty() {
        info.resource.clone()
    } else {
        format!("{}.{}", info.resource, info.api_group)
    };
    shape.stored = crate::metrics::global()
        .stored_objects(&resource)
        .and_then(|n| u64::try_from(n).ok());
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*key {
            "limit" => shape.limit = value.parse().ok(),
            "labelSelector" if !value.is_empty() => shape.selector = true,
            "fieldSelector" if !value.is_empty() => {
                shape.selector = true;
                shape.single = value.starts_with("metadata.name=") && !value.contains(',');
            }
            "continue" if !value.is_empty() => shape.from_storage = true,
            "resourceVersionMatch" if value == "Exact" => shape.from_storage = true,
            _ => {}
        }
    }
    list_seats(shape, max_seats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_as_wide_as_the_objects_it_reads() {
        let info = |verb, resource: &str| RequestInfo {
            is_resource_request: true,
            verb,
            api_group: "width.example.com".into(),
            resource: resource.into(),
            ..RequestInfo::default()
        };
        crate::metrics::global()
            .storage_objects_of("gadgets.width.example.com")
            .set(450);
        let list = info(Verb::List, "gadgets");
        assert_eq!(width(&list, None, 10), 5, "one seat a hundred objects");
        assert_eq!(width(&list, None, 3), 3, "at most the level's maximum");
        let one = Some("fieldSelector=metadata.name%3Da");
        assert_eq!(width(&list, one, 10), 1, "one object named");
        let page = Some("limit=50&continue=abc");
        assert_eq!(width(&list, page, 10), 1, "twice the limit, from storage");
        assert_eq!(width(&info(Verb::Get, "gadgets"), None, 10), 1);
        assert_eq!(width(&info(Verb::Watch, "gadgets"), None, 10), 1);
        assert_eq!(
            width(&info(Verb::List, "uncounted"), None, 10),
            1,
            "nothing counts it: the minimum, as kube"
        );
        assert_eq!(wait_limit(Duration::from_secs(60)), Duration::from_secs(15));
        assert_eq!(
            wait_limit(Duration::from_secs(600)),
            Duration::from_secs(60)
        );
    }
}
