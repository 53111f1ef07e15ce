//! Filters: what every request passes before the router, outermost first — the headers of
//! every response (`Audit-Id`, `Cache-Control`), the encoding of errors and indented JSON for
//! people, panic recovery,
//! request info and the request's tracing span, timeout (not for watches), authentication,
//! impersonation, in-flight limits or priority and fairness, authorization, request metrics,
//! and audit around everything after authentication; last, the draw of `--goaway-chance` for
//! HTTP/2.
//! Each is a step in a file of its own; [`apply`] runs them in that order in one middleware.
//! One layer, not one per filter: every axum layer costs each request a boxed future and a
//! clone of the service inside it.

pub(crate) mod audit;
pub(crate) mod authentication;
pub(crate) mod authorization;
pub(crate) mod error_encoding;
pub mod goaway;
pub(crate) mod headers;
pub(crate) mod impersonation;
pub mod inflight;
pub(crate) mod metrics;
pub(crate) mod panic_recovery;
pub(crate) mod pretty;
pub mod priority_and_fairness;
pub(crate) mod request_info;
pub mod timeout;
pub(crate) mod trace;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::auth::{Authenticator, Authorizer};
use crate::registry::context::WatchInitialization;

/// What the filters need.
#[derive(Clone)]
pub struct FilterConfig {
    /// Finds the user.
    pub authenticator: Arc<dyn Authenticator>,
    /// Decides what the user may do.
    pub authorizer: Arc<dyn Authorizer>,
    /// Non-resource paths served without authentication or authorization (health).
    pub always_allow_paths: Vec<String>,
    /// Whether requests with no credentials proceed as `system:anonymous`.
    pub anonymous: bool,
    /// Bound on non-long-running requests.
    pub request_timeout: std::time::Duration,
    /// Seats for requests in flight (`--max-requests-inflight`,
    /// `--max-mutating-requests-inflight`).
    pub inflight: Arc<inflight::InflightLimits>,
    /// API Priority and Fairness (`--enable-priority-and-fairness` with a core API): when
    /// set, it replaces the in-flight limits.
    pub flow_control: Option<Arc<crate::flowcontrol::FlowControl>>,
    /// The audit policy and backends (`--audit-policy-file`); `None`: nothing is audited.
    pub audit: Option<Arc<crate::audit::Auditor>>,
    /// The installed streams and connections: long-running, and (connections) authorized
    /// for `create` too when upgraded by a GET.
    pub long_running: timeout::LongRunningSubresources,
    /// The chance that a request on an HTTP/2 connection closes the connection gracefully
    /// after its response (`--goaway-chance`, in [0, 0.02]); 0: never.
    pub goaway_chance: f64,
}

impl std::fmt::Debug for FilterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterConfig")
            .field("always_allow_paths", &self.always_allow_paths)
            .field("anonymous", &self.anonymous)
            .finish()
    }
}

impl FilterConfig {
    /// Whether `path` is served to anyone (a trailing `*` in a pattern matches any suffix).
    pub fn is_always_allowed(&self, path: &str) -> bool {
        crate::auth::authorizer::path_matches(&self.always_allow_paths, path)
    }
}

/// Wraps `router` in the filter chain.
pub fn apply(router: Router, config: FilterConfig) -> Router {
    router.layer(from_fn_with_state(Arc::new(config), chain))
}

/// What an admitted request holds while it runs: a seat of the in-flight limits, or of
/// priority and fairness.
enum Held {
    InFlight { _seat: Option<inflight::Seat> },
    Fair(priority_and_fairness::Admitted),
}

impl Held {
    /// Seats for `request`, or the 429 that refuses it.
    fn admit<'a>(
        config: &'a FilterConfig,
        request: &Request,
        long_running: bool,
    ) -> impl Future<Output = Result<Self, Response>> + Send + 'a {
        // What the request says is read before the wait: a `&Request` is not `Send`.
        let decided = match &config.flow_control {
            Some(engine) => Ok((
                engine,
                priority_and_fairness::classify(engine, request, long_running),
            )),
            None => Err(config.inflight.admit(request, long_running)),
        };
        async move {
            match decided {
                Ok((engine, classified)) => {
                    let wait = priority_and_fairness::wait_limit(config.request_timeout);
                    priority_and_fairness::admit(engine, classified, wait)
                        .await
                        .map(Held::Fair)
                }
                Err(Ok(seat)) => Ok(Held::InFlight { _seat: seat }),
                Err(Err(inflight::Refused)) => Err(too_many_requests(1)),
            }
        }
    }

    /// For a watch holding seats: the signal of its initialization, put in `request` for its
    /// storage, and what resolves once it is initialized (kube's
    /// `watchInitializationSignal`).
    fn watch_initialization(
        &self,
        request: &mut Request,
        long_running: bool,
    ) -> Option<tokio::sync::oneshot::Receiver<()>> {
        match self {
            Held::Fair(admitted) if long_running && admitted._seat.is_some() => {
                let (signal, initialized) = WatchInitialization::new();
                request.extensions_mut().insert(signal);
                Some(initialized)
            }
            _ => None,
        }
    }

    /// The response's `X-Kubernetes-PF-*` headers, under priority and fairness.
    fn stamp(&self, response: &mut Response) {
        if let Held::Fair(admitted) = self {
            admitted.stamp(response);
        }
    }
}

/// kube's refusal of a request beyond the limits (`tooManyRequests` of its max-in-flight and
/// priority-and-fairness filters): 429 with `Retry-After` and Go's `http.Error` plain-text
/// body, not a `Status`. client-go retries it after `Retry-After` either way.
pub(crate) fn too_many_requests(retry_after_seconds: u32) -> Response {
    let mut response = (
        http::StatusCode::TOO_MANY_REQUESTS,
        "Too many requests, please try again later.\n",
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    headers.insert(http::header::RETRY_AFTER, retry_after_seconds.into());
    response
}

/// The filters in order, around the rest of the request's path.
async fn chain(
    State(config): State<Arc<FilterConfig>>,
    mut request: Request,
    next: Next,
) -> Response {
    let arrived = std::time::Instant::now();
    let audit_id = headers::audit_id(&request);
    let yaml_errors = error_encoding::wants_yaml(&request);
    let pretty = pretty::wanted(&request);
    let uri = request.uri().clone();
    request_info::annotate(&mut request);
    let span = trace::request_span(&request, &audit_id);
    let audit = audit::record(&config, &mut request, &audit_id);
    let long_running = timeout::is_long_running(&request, &config.long_running);
    let goaway = goaway::draw(config.goaway_chance, &request, long_running);
    let audited = audit.is_some();
    // The rest of the request's path is one future on the heap, made once: it is large (every
    // step's state), and moved by value through the span, the panic guard and the timeout it
    // would be copied whole each time. The steps most requests skip (the audit's reading of
    // bodies, impersonation, YAML errors, indentation) are boxed only when they run, so that
    // their state does not make every request's future larger.
    let served = Box::pin(async move {
        let limit = config.request_timeout;
        let admitted = async move {
            let request = match authentication::authenticate(&config, request).await {
                Ok(request) => request,
                Err(refused) => return refused,
            };
            trace::record_user(&request);
            let request = if audited {
                Box::pin(audit::begin(request)).await
            } else {
                request
            };
            let request = if impersonation::asked(&request) {
                Box::pin(impersonation::impersonate(&config, request)).await
            } else {
                Ok(request)
            };
            let mut request = match request {
                Ok(request) => request,
                Err(refused) => return refused,
            };
            let held = match Held::admit(&config, &request, long_running).await {
                Ok(held) => held,
                Err(refused) => return refused,
            };
            let initialized = held.watch_initialization(&mut request, long_running);
            let mut response = match authorization::authorize(&config, request).await {
                Ok(request) => match metrics::start(&request, arrived, long_running) {
                    Some(recording) => {
                        let response = next.run(request).await;
                        metrics::finish(recording, long_running, response)
                    }
                    None => next.run(request).await,
                },
                Err(refused) => refused,
            };
            held.stamp(&mut response);
            if let Some(initialized) = initialized {
                // A watch keeps its seats until its initial events are queued, as kube's.
                tokio::spawn(async move {
                    let _ = initialized.await;
                    drop(held);
                });
            }
            response
        };
        if long_running {
            admitted.await
        } else {
            timeout::bound(limit, admitted).await
        }
    });
    let mut response = panic_recovery::recover(uri, served.instrument(span.clone())).await;
    if audit.is_some() {
        response = Box::pin(audit::finish(audit, response)).await;
    }
    let code = response.status().as_u16();
    span.record("code", code);
    // kube-apiserver's httplog line, at debug (`RUST_LOG=extension_apiserver::filters=debug`).
    let latency_ms = arrived.elapsed().as_secs_f64() * 1000.0;
    tracing::debug!(parent: &span, code, latency_ms, "served");
    if yaml_errors {
        response = Box::pin(error_encoding::as_yaml(response)).await;
    }
    if pretty {
        response = Box::pin(pretty::indent_response(response)).await;
    }
    headers::finish(&mut response, audit_id);
    if let Some(goaway) = goaway {
        goaway.request();
    }
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use async_trait::async_trait;
    use axum::body::Body;
    use axum::routing::get;
    use http::StatusCode;
    use tower::ServiceExt;

    use super::*;
    use crate::auth::authorizer::AlwaysAllowAuthenticated;
    use crate::auth::{AuthError, UserInfo};

    /// The user named by the `x-user` header; `bad` is a wrong credential.
    struct HeaderUser;

    #[async_trait]
    impl Authenticator for HeaderUser {
        async fn authenticate(
            &self,
            parts: &http::request::Parts,
        ) -> Result<Option<UserInfo>, AuthError> {
            match parts.headers.get("x-user").and_then(|v| v.to_str().ok()) {
                Some("bad") => Err(AuthError::InvalidCredentials("bad".into())),
                Some(name) => Ok(Some(UserInfo::new(name, []).with_authenticated_group())),
                None => Ok(None),
            }
        }
    }

    fn router(anonymous: bool) -> Router {
        router_audited(anonymous, None)
    }

    fn router_audited(anonymous: bool, audit: Option<Arc<crate::audit::Auditor>>) -> Router {
        let routes = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/panic",
                get(|| async {
                    if Duration::ZERO.is_zero() {
                        panic!("boom");
                    }
                    "unreachable"
                }),
            )
            .route(
                "/apis/g/v1/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    "late"
                }),
            )
            .route("/apis/g/v1/things", get(|| async { "things" }));
        apply(
            routes,
            FilterConfig {
                authenticator: Arc::new(HeaderUser),
                authorizer: Arc::new(AlwaysAllowAuthenticated),
                always_allow_paths: vec!["/healthz".into()],
                anonymous,
                request_timeout: Duration::from_millis(200),
                inflight: Arc::new(inflight::InflightLimits::new(0, 0)),
                flow_control: None,
                audit,
                long_running: Default::default(),
                goaway_chance: 0.0,
            },
        )
    }

    async fn call(router: Router, path: &str, user: Option<&str>) -> (StatusCode, String) {
        let mut request = Request::get(path);
        if let Some(user) = user {
            request = request.header("x-user", user);
        }
        let response = router
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_chain_runs_every_filter_in_order() {
        let ok = call(router(false), "/apis/g/v1/things", Some("alice")).await;
        assert_eq!(ok, (StatusCode::OK, "things".into()));
        // No credentials: 401, except on an always-allowed path.
        let (code, _) = call(router(false), "/apis/g/v1/things", None).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        assert_eq!(
            call(router(false), "/healthz", None).await.0,
            StatusCode::OK
        );
        // Wrong credentials: 401 even where anonymous requests are let in.
        let (code, _) = call(router(true), "/apis/g/v1/things", Some("bad")).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        // Anonymous: authenticated as system:anonymous, which this authorizer refuses.
        let (code, body) = call(router(true), "/apis/g/v1/things", None).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
        assert!(body.contains("system:anonymous"), "{body}");
        // A handler that panics: 500, and the server goes on.
        let (code, body) = call(router(false), "/panic", Some("alice")).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains("panicked"), "{body}");
        // Past the request timeout: 504; a watch is not bounded.
        let (code, body) = call(router(false), "/apis/g/v1/slow", Some("alice")).await;
        assert_eq!(code, StatusCode::GATEWAY_TIMEOUT, "{body}");
        let watch = "/apis/g/v1/slow?watch=true";
        assert_eq!(
            call(router(false), watch, Some("alice")).await.0,
            StatusCode::OK
        );
    }

    #[tokio::test]
    async fn a_watch_holds_its_seat_until_its_initial_events_are_queued() {
        // One seat in all: catch-all's, which refuses what finds it taken.
        let engine = crate::flowcontrol::FlowControl::new(1);
        let things = |request: Request| async move {
            if !request.uri().query().unwrap_or("").contains("watch") {
                return Response::new(Body::from("things"));
            }
            // The storage's part: told once the initial events are queued, here when the
            // client reads the first.
            let signal = request.extensions().get::<WatchInitialization>().cloned();
            let signal = signal.expect("a watch holding seats is given the signal");
            let initial = futures::stream::once(async move {
                signal.signal();
                Ok::<_, std::convert::Infallible>(bytes::Bytes::from("initial"))
            });
            Response::new(Body::from_stream(futures::StreamExt::chain(
                initial,
                futures::stream::pending(),
            )))
        };
        let routes = Router::new().route("/apis/g/v1/things", get(things));
        let router = apply(
            routes,
            FilterConfig {
                authenticator: Arc::new(HeaderUser),
                authorizer: Arc::new(AlwaysAllowAuthenticated),
                always_allow_paths: Vec::new(),
                anonymous: false,
                request_timeout: Duration::from_secs(60),
                inflight: Arc::new(inflight::InflightLimits::new(0, 0)),
                flow_control: Some(engine),
                audit: None,
                long_running: Default::default(),
                goaway_chance: 0.0,
            },
        );
        let watch = Request::get("/apis/g/v1/things?watch=true").header("x-user", "alice");
        let watch = respond(router.clone(), watch).await;
        assert_eq!(watch.status(), StatusCode::OK);
        // Answered, but its initial events are not out: the seat is still the watch's.
        let (code, _) = call(router.clone(), "/apis/g/v1/things", Some("bob")).await;
        assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
        let mut body = watch.into_body();
        let first = http_body_util::BodyExt::frame(&mut body).await;
        assert_eq!(first.unwrap().unwrap().into_data().unwrap(), "initial");
        let mut served = false;
        for _ in 0..200 {
            let (code, _) = call(router.clone(), "/apis/g/v1/things", Some("bob")).await;
            if code == StatusCode::OK {
                served = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(served, "the seat is free once the watch is initialized");
        drop(body);
    }

    async fn respond(router: Router, request: http::request::Builder) -> Response {
        router
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn every_response_has_an_audit_id_and_cache_control() {
        let paths = [
            ("/apis/g/v1/things", Some("alice"), StatusCode::OK),
            ("/apis/g/v1/things", None, StatusCode::UNAUTHORIZED),
            ("/healthz", None, StatusCode::OK),
            ("/panic", Some("alice"), StatusCode::INTERNAL_SERVER_ERROR),
        ];
        let mut ids = Vec::new();
        for (path, user, code) in paths {
            let mut request = Request::get(path);
            if let Some(user) = user {
                request = request.header("x-user", user);
            }
            let response = respond(router(false), request).await;
            assert_eq!(response.status(), code, "{path}");
            let headers = response.headers();
            assert_eq!(headers["cache-control"], "no-cache, private", "{path}");
            assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
            let id = headers["audit-id"].to_str().unwrap().to_string();
            assert!(uuid::Uuid::parse_str(&id).is_ok(), "{path}: {id}");
            ids.push(id);
        }
        ids.dedup();
        assert_eq!(ids.len(), paths.len(), "a new ID per request");
        // The caller's own ID is echoed.
        let request = Request::get("/healthz").header("Audit-ID", "mine");
        let response = respond(router(false), request).await;
        assert_eq!(response.headers()["audit-id"], "mine");
    }

    #[tokio::test]
    async fn errors_come_in_the_encoding_asked_for() {
        let request = Request::get("/apis/g/v1/things").header("accept", "application/yaml");
        let response = respond(router(false), request).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()["content-type"], "application/yaml");
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let status: serde_json::Value = serde_norway::from_slice(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 401);
        // JSON, or an Accept only satisfiable with a Table, keeps JSON.
        for accept in [
            "application/json",
            "application/yaml;as=Table;v=v1;g=meta.k8s.io",
        ] {
            let request = Request::get("/apis/g/v1/things").header("accept", accept);
            let response = respond(router(false), request).await;
            assert_eq!(
                response.headers()["content-type"],
                "application/json",
                "{accept}"
            );
        }
    }

    struct Collect(std::sync::Mutex<Vec<crate::audit::Event>>);

    impl crate::audit::AuditBackend for Collect {
        fn name(&self) -> &'static str {
            "collect"
        }
        fn process(&self, event: &crate::audit::Event) {
            self.0.lock().unwrap().push(event.clone());
        }
    }

    #[tokio::test]
    async fn audit_writes_each_stage_as_kube_apiserver_does() {
        use crate::audit::{Auditor, Policy, Stage};
        let policy: Policy = serde_norway::from_str(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]",
        )
        .unwrap();
        let collect = Arc::new(Collect(std::sync::Mutex::new(Vec::new())));
        let auditor = Arc::new(Auditor::new(policy, vec![collect.clone()]));
        let audited = || router_audited(false, Some(auditor.clone()));
        let stages = |response: &Response| {
            let id = response.headers()["audit-id"].to_str().unwrap().to_string();
            let events = collect.0.lock().unwrap();
            let mine: Vec<_> = events
                .iter()
                .filter(|e| e.audit_id == id)
                .cloned()
                .collect();
            let stages: Vec<Stage> = mine.iter().map(|e| e.stage).collect();
            (mine, stages)
        };
        let request = Request::get("/apis/g/v1/things").header("x-user", "alice");
        let response = respond(audited(), request).await;
        let (events, seen) = stages(&response);
        assert_eq!(seen, [Stage::RequestReceived, Stage::ResponseComplete]);
        assert_eq!(events[1].user.username, "alice");
        assert_eq!(events[1].response_status.as_ref().unwrap().code, 200);
        // A panic: RequestReceived, then Panic with the 500.
        let request = Request::get("/panic").header("x-user", "alice");
        let response = respond(audited(), request).await;
        let (events, seen) = stages(&response);
        assert_eq!(seen, [Stage::RequestReceived, Stage::Panic]);
        let status = events[1].response_status.clone().unwrap();
        assert_eq!(
            (status.code, status.reason.as_str()),
            (500, "InternalError")
        );
        // Wrong credentials: one ResponseStarted event, no user.
        let request = Request::get("/apis/g/v1/things").header("x-user", "bad");
        let response = respond(audited(), request).await;
        let (events, seen) = stages(&response);
        assert_eq!(seen, [Stage::ResponseStarted]);
        assert_eq!(events[0].user, crate::audit::UserInfo::default());
        assert_eq!(events[0].response_status.as_ref().unwrap().code, 401);
    }
}
