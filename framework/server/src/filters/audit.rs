//! Audit: records each request as `audit.k8s.io/v1` events, as kube-apiserver's `WithAudit`
//! and `WithFailedAuthenticationAudit`. [`record`] starts the event before authentication
//! (URI, verb, source IPs, user agent, object reference); [`begin`], right after
//! authentication, asks the policy with the user known and writes `RequestReceived`;
//! [`finish`] writes `ResponseComplete` (or `Panic`) once the response is made; a
//! long-running response (a watch) writes `ResponseStarted` when it starts and
//! `ResponseComplete` when its body ends. A request refused by authentication is one
//! `ResponseStarted` event with an empty user, as kube's.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use futures::StreamExt;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use super::FilterConfig;
use crate::audit::{Attributes, Level, ObjectReference, RequestAudit, ResponseStatus, Stage};
use crate::auth::UserInfo;
use crate::endpoints::negotiation::{BodyEncoding, off_workers, read_value};
use crate::endpoints::{MAX_REQUEST_BODY_BYTES, RequestInfo, Verb};

/// kube's bound on the `userAgent` of an event, and what marks a cut one.
const MAX_USER_AGENT: usize = 1024;
const USER_AGENT_TRUNCATED: &str = "...TRUNCATED";

/// Set on the response of a handler that panicked.
#[derive(Clone, Copy, Debug)]
pub struct Panicked;

/// What [`finish`] needs of a recorded request.
pub struct Recording {
    audit: Arc<RequestAudit>,
    info: RequestInfo,
    long_running: bool,
}

/// Starts the request's event (when audit is on) and puts it in the request's extensions; the
/// chain has parsed the request info already.
pub fn record(
    config: &FilterConfig,
    request: &mut Request,
    audit_id: &HeaderValue,
) -> Option<Recording> {
    let auditor = config.audit.as_ref()?;
    let info = request.extensions().get::<RequestInfo>()?.clone();
    let uri = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut event = crate::audit::new_event(
        audit_id.to_str().unwrap_or_default(),
        uri,
        info.verb.as_str(),
    );
    event.source_ips = source_ips(request);
    event.user_agent = user_agent(header_str(request, header::USER_AGENT));
    if info.is_resource_request {
        event.object_ref = Some(ObjectReference {
            resource: info.resource.clone(),
            namespace: info.namespace.clone(),
            name: info.name.clone(),
            api_group: info.api_group.clone(),
            api_version: info.api_version.clone(),
            subresource: info.subresource.clone(),
            ..ObjectReference::default()
        });
    }
    let audit = RequestAudit::new(auditor.clone(), event);
    request.extensions_mut().insert(audit.clone());
    let long_running = super::timeout::is_long_running(request, &config.long_running);
    Some(Recording {
        audit,
        info,
        long_running,
    })
}

fn user_agent(agent: &str) -> String {
    if agent.len() <= MAX_USER_AGENT {
        return agent.to_string();
    }
    let mut end = MAX_USER_AGENT;
    while !agent.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{USER_AGENT_TRUNCATED}", &agent[..end])
}

fn header_str(request: &Request, name: header::HeaderName) -> &str {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// kube's `SourceIPs`: `X-Forwarded-For`, then `X-Real-Ip`, then the remote address, each
/// once.
fn source_ips(request: &Request) -> Vec<String> {
    let mut ips: Vec<String> =
        header_str(request, header::HeaderName::from_static("x-forwarded-for"))
            .split(',')
            .map(str::trim)
            .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok())
            .map(String::from)
            .collect();
    let real = header_str(request, header::HeaderName::from_static("x-real-ip")).trim();
    if real.parse::<std::net::IpAddr>().is_ok() && !ips.iter().any(|ip| ip == real) {
        ips.push(real.to_string());
    }
    if let Some(ConnectInfo(addr)) = request.extensions().get::<ConnectInfo<SocketAddr>>() {
        let remote = addr.ip().to_canonical().to_string();
        if !ips.contains(&remote) {
            ips.push(remote);
        }
    }
    ips
}

fn attributes<'a>(info: &'a RequestInfo, user: Option<&'a UserInfo>) -> Attributes<'a> {
    Attributes {
        user: user.map_or("", |u| u.name.as_str()),
        groups: user.map_or(&[], |u| u.groups.as_slice()),
        verb: info.verb.as_str(),
        resource_request: info.is_resource_request,
        api_group: &info.api_group,
        resource: &info.resource,
        subresource: &info.subresource,
        namespace: &info.namespace,
        name: &info.name,
        path: &info.path,
    }
}

/// After authentication: the user, the policy's level, `RequestReceived`; the request body is
/// read (and put back) where the level keeps it, or a create or update names the object.
pub async fn begin(request: Request) -> Request {
    let Some(audit) = request.extensions().get::<Arc<RequestAudit>>().cloned() else {
        return request;
    };
    let Some(info) = request.extensions().get::<RequestInfo>().cloned() else {
        return request;
    };
    let user = request.extensions().get::<UserInfo>();
    let level = audit.evaluate(&attributes(&info, user));
    if let Some(user) = user {
        audit.update(|e| {
            e.user = crate::audit::UserInfo {
                username: user.name.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
            }
        });
    }
    if level == Level::None {
        return request;
    }
    audit.emit(Stage::RequestReceived);
    // A created or updated object completes the reference even at Metadata; a patch is
    // only kept from Request on.
    let reads = match info.verb {
        Verb::Create | Verb::Update => true,
        Verb::Patch => level >= Level::Request,
        _ => false,
    };
    if !(reads && info.is_resource_request) {
        return request;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_REQUEST_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) => return Request::from_parts(parts, unread(e)),
    };
    match parse_object(&parts.headers, bytes.clone()).await {
        // kube's `LogRequestPatch`: the patch is the request object, the reference stays.
        Some(patch) if info.verb == Verb::Patch => {
            audit.update(|e| e.request_object = Some(patch));
        }
        Some(object) => audit.update(|e| log_request_object(e, object, level)),
        None => {}
    }
    Request::from_parts(parts, Body::from(bytes))
}

/// What the handler reads instead of a body that could not be read: too large, a body the
/// handler refuses with 413 as it would have; else the same error.
fn unread(error: axum::Error) -> Body {
    let error = error.into_inner();
    if error.is::<http_body_util::LengthLimitError>() {
        return Body::from(vec![0; MAX_REQUEST_BODY_BYTES + 1]);
    }
    let message = error.to_string();
    Body::from_stream(futures::stream::once(async move {
        Err::<bytes::Bytes, _>(std::io::Error::other(message))
    }))
}

/// A JSON or YAML body, decoded as the handler decodes it: its depth checked before it is
/// parsed, off the async workers when it is large (the audit filter reads the body of every
/// create before the handler does).
async fn parse_object(headers: &http::HeaderMap, bytes: bytes::Bytes) -> Option<Value> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let encoding = if content_type.contains("yaml") {
        BodyEncoding::Yaml
    } else {
        BodyEncoding::Json
    };
    let decode = move |b: &[u8]| read_value(b, encoding).ok().map(|(value, _)| value);
    off_workers(bytes, decode).await.ok().flatten()
}

/// kube's `LogRequestObject`: the object's namespace, name, uid and resourceVersion complete
/// the reference; the object itself is kept from the Request level.
fn log_request_object(event: &mut crate::audit::Event, object: Value, level: Level) {
    if let (Some(reference), Some(meta)) = (event.object_ref.as_mut(), object.get("metadata")) {
        let field = |name: &str| {
            meta.get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        for (slot, name) in [
            (&mut reference.namespace, "namespace"),
            (&mut reference.name, "name"),
            (&mut reference.uid, "uid"),
            (&mut reference.resource_version, "resourceVersion"),
        ] {
            if slot.is_empty() {
                *slot = field(name);
            }
        }
    }
    if level >= Level::Request {
        event.request_object = Some(object);
    }
}

/// Once the response is made: its status (and body at RequestResponse), then
/// `ResponseComplete`, `Panic`, or for a long-running response `ResponseStarted` now and
/// `ResponseComplete` when its body ends.
pub async fn finish(recording: Option<Recording>, response: Response) -> Response {
    let Some(Recording {
        audit,
        info,
        long_running,
    }) = recording
    else {
        return response;
    };
    if audit.level().is_none() {
        // Refused before `begin`: by authentication. kube's failed-authentication audit.
        audit.evaluate(&attributes(&info, None));
        let (response, status, _) = response_status(response, false).await;
        audit.update(|e| e.response_status = Some(status));
        audit.emit(Stage::ResponseStarted);
        return response;
    }
    if audit.level() == Some(Level::None) {
        return response;
    }
    if response.extensions().get::<Panicked>().is_some() {
        let (response, status, _) = response_status(response, false).await;
        audit.update(|e| e.response_status = Some(status));
        audit.emit(Stage::Panic);
        return response;
    }
    if long_running {
        // kube's long-running sink: ResponseStarted as the headers go out, refused or not.
        audit.update(|e| e.response_status = Some(code_only(response.status())));
        audit.emit(Stage::ResponseStarted);
        if response.status().is_success() {
            return complete_when_body_ends(audit, response);
        }
    }
    let with_body = audit.level() == Some(Level::RequestResponse);
    let (response, status, object) = response_status(response, with_body).await;
    audit.update(|e| {
        e.response_status = Some(status);
        e.response_object = object;
    });
    audit.emit(Stage::ResponseComplete);
    response
}

fn code_only(code: StatusCode) -> ResponseStatus {
    ResponseStatus {
        code: code.as_u16(),
        ..ResponseStatus::default()
    }
}

/// The response's status: its code, and a `Status` body's bounded fields (kube's
/// `LogResponseObject`); with `keep_body` also the body, for the event's `responseObject`.
async fn response_status(
    response: Response,
    keep_body: bool,
) -> (Response, ResponseStatus, Option<Value>) {
    let code = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    // Only a JSON body is read, and only when it is kept or may be an error `Status`.
    let wanted = keep_body || !code.is_success();
    if !json || !wanted {
        return (response, code_only(code), None);
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return (
            Response::from_parts(parts, Body::empty()),
            code_only(code),
            None,
        );
    };
    let mut status = code_only(code);
    let mut kept = None;
    if let Ok(object) = serde_json::from_slice::<Value>(&bytes) {
        if object.get("kind").and_then(Value::as_str) == Some("Status") {
            let text = |name: &str| {
                object
                    .get(name)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            status.status = text("status");
            status.message = text("message");
            status.reason = text("reason");
            status.details = object.get("details").cloned();
        }
        if keep_body {
            kept = Some(object);
        }
    }
    (Response::from_parts(parts, Body::from(bytes)), status, kept)
}

/// Writes `ResponseComplete` when the body of a long-running response ends or is dropped.
fn complete_when_body_ends(audit: Arc<RequestAudit>, response: Response) -> Response {
    struct CompleteOnDrop(Arc<RequestAudit>);
    impl Drop for CompleteOnDrop {
        fn drop(&mut self) {
            self.0.emit(Stage::ResponseComplete);
        }
    }
    let guard = CompleteOnDrop(audit);
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _ = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
