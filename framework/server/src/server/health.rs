//! `/healthz`, `/livez`, `/readyz` and `/version`: plain-text checks as kube-apiserver
//! answers them (`ok`, or a list of `[+]`/`[-]` lines with `?verbose`), each check also at
//! `/{endpoint}/{check}`, and `?exclude={check}` to skip one; and `/metrics` (see
//! [`metrics`](crate::metrics)), which, unlike the checks, is authorized as the non-resource
//! URL `/metrics`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderValue, StatusCode, header};

pub use crate::lifecycle::{HealthCheck, NotReady, ReadyzCheck};
use crate::server::version::VersionInfo;
use crate::storage::Backend;

/// What the health endpoints check.
#[derive(Clone)]
pub struct HealthState {
    /// The storage backend; `/readyz` fails while it cannot serve.
    pub backend: Arc<dyn Backend>,
    /// The name of the storage check: `etcd` on etcd (as kube-apiserver's `[-]etcd failed`),
    /// `storage` otherwise.
    pub storage_check: &'static str,
    /// Set when shutdown starts: `/readyz` fails so load balancers stop sending.
    pub shutdown: crate::lifecycle::ShutdownSignal,
    /// Set when SIGTERM arrives, before `--shutdown-delay-duration` has passed and
    /// [`shutdown`](Self::shutdown) starts: `/readyz` fails first while requests are still
    /// served, as kube-apiserver's `ShutdownInitiated`.
    pub shutdown_initiated: crate::lifecycle::ShutdownSignal,
    /// More readiness checks (the aggregator's registration and diagnostics).
    pub readyz: Vec<Arc<dyn ReadyzCheck>>,
    /// What `/version` answers.
    pub version: Arc<VersionInfo>,
    /// The user's checks and the post-start hooks', run after the built-in ones.
    pub checks: HealthChecks,
}

/// Checks added to the server, per endpoint, as `k8s.io/apiserver` keeps them: one added with
/// `AddHealthChecks` is in all three lists, one added with `AddReadyzChecks` in `readyz` only.
#[derive(Clone, Default)]
pub struct HealthChecks {
    /// The checks of `/healthz`.
    pub healthz: Vec<Arc<dyn HealthCheck>>,
    /// The checks of `/livez`.
    pub livez: Vec<Arc<dyn HealthCheck>>,
    /// The checks of `/readyz`.
    pub readyz: Vec<Arc<dyn HealthCheck>>,
}

impl HealthChecks {
    /// The checks of `endpoint` (`healthz`, `livez` or `readyz`).
    pub fn of(&self, endpoint: &str) -> &[Arc<dyn HealthCheck>] {
        match endpoint {
            "healthz" => &self.healthz,
            "livez" => &self.livez,
            "readyz" => &self.readyz,
            _ => &[],
        }
    }
}

impl HealthState {
    /// The names of `endpoint`'s checks (`healthz`, `livez` or `readyz`), in the order its
    /// `?verbose` lists them.
    pub fn check_names(&self, endpoint: &str) -> Vec<String> {
        let mut names = vec!["ping".to_string()];
        if endpoint == "readyz" {
            names.push(self.storage_check.into());
            names.push("shutdown".into());
            names.extend(self.readyz.iter().map(|c| c.name().to_string()));
        }
        let added = self.checks.of(endpoint).iter();
        names.extend(added.map(|c| c.name().to_string()));
        names
    }
}

/// The health and version routes.
pub fn router(state: HealthState) -> Router {
    let mut router = Router::new();
    for endpoint in ["healthz", "livez", "readyz"] {
        router = router
            .route(
                &format!("/{endpoint}"),
                get(move |s: State<HealthState>, q: RawQuery| root(endpoint, s, q)),
            )
            .route(
                // A wildcard: post-start hooks' checks are `poststarthook/{name}`.
                &format!("/{endpoint}/{{*check}}"),
                get(move |s: State<HealthState>, p: Path<String>| single(endpoint, s, p)),
            );
    }
    router
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Every metric in the Prometheus text format.
async fn metrics() -> Response {
    let mut response = crate::metrics::encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    response
}

/// A check's name, result, and whether `?verbose` may show its reason.
type Check = (String, Result<(), NotReady>, bool);

/// The checks of one endpoint, run now. Liveness only says the process serves; readiness
/// also needs storage and no shutdown in progress.
async fn run_checks(endpoint: &str, state: &HealthState) -> Vec<Check> {
    let mut checks: Vec<Check> = vec![("ping".into(), Ok(()), false)];
    if endpoint == "readyz" {
        let storage = state.backend.ready().await.map_err(NotReady::from_error);
        let stopping = state.shutdown.is_shutting_down();
        let shutdown = if stopping || state.shutdown_initiated.is_shutting_down() {
            Err(NotReady::new("process is shutting down"))
        } else {
            Ok(())
        };
        checks.push((state.storage_check.into(), storage, false));
        checks.push(("shutdown".into(), shutdown, false));
        for check in &state.readyz {
            checks.push((check.name().to_string(), check.check(), true));
        }
    }
    for check in state.checks.of(endpoint) {
        checks.push((check.name().to_string(), check.check().await, false));
    }
    checks
}

async fn root(
    endpoint: &'static str,
    State(state): State<HealthState>,
    query: RawQuery,
) -> Response {
    let checks = run_checks(endpoint, &state).await;
    report(endpoint, &checks, query.0.as_deref())
}

/// `/{endpoint}/{check}`: `ok`, or 500 with the reason (kube-apiserver shows it here, unlike
/// on the root, because each check can be authorized on its own); 404 for an unknown check.
async fn single(
    endpoint: &'static str,
    State(state): State<HealthState>,
    Path(name): Path<String>,
) -> Response {
    let checks = run_checks(endpoint, &state).await;
    match checks.into_iter().find(|(check, _, _)| *check == name) {
        Some((_, Ok(()), _)) => plain(StatusCode::OK, "ok".into()),
        Some((_, Err(e), _)) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {e}\n"),
        ),
        None => plain(StatusCode::NOT_FOUND, "404 page not found\n".into()),
    }
}

/// The names listed in `exclude=` parameters.
fn excluded(query: Option<&str>) -> Vec<String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v.into_owned())
        .collect()
}

/// The root of an endpoint, worded as kube-apiserver's `handleRootHealth`: a failure never
/// shows the reason of a built-in check (the endpoint is public), excluded checks pass, and
/// names that match no check get a warning line. The reasons of [`ReadyzCheck`]s are shown
/// with `?verbose`: they are deployment diagnostics.
fn report(name: &str, checks: &[Check], query: Option<&str>) -> Response {
    let mut excluded = excluded(query);
    let verbose = query.is_some_and(|q| {
        q.split('&')
            .any(|p| p == "verbose" || p.starts_with("verbose="))
    });
    let mut body = String::new();
    let mut failed = false;
    for (check, result, explain) in checks {
        if let Some(i) = excluded.iter().position(|e| e == check) {
            excluded.remove(i);
            body.push_str(&format!("[+]{check} excluded: ok\n"));
        } else if result.is_ok() {
            body.push_str(&format!("[+]{check} ok\n"));
        } else {
            failed = true;
            match result {
                Err(reason) if *explain && verbose => {
                    body.push_str(&format!("[-]{check} failed: {reason}\n"))
                }
                _ => body.push_str(&format!("[-]{check} failed: reason withheld\n")),
            }
        }
    }
    if !excluded.is_empty() {
        let names: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        body.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            names.join(",")
        ));
    }
    if failed {
        return plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{body}{name} check failed\n"),
        );
    }
    if !verbose {
        return plain(StatusCode::OK, "ok".into());
    }
    plain(StatusCode::OK, format!("{body}{name} check passed\n"))
}

/// A plain-text answer with the headers kube-apiserver sets on health responses.
fn plain(code: StatusCode, body: String) -> Response {
    let mut response = (code, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

async fn version(State(state): State<HealthState>) -> Response {
    axum::Json(&*state.version).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str);

    impl ReadyzCheck for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn check(&self) -> Result<(), NotReady> {
            Ok(())
        }
    }

    #[async_trait::async_trait]
    impl HealthCheck for Named {
        fn name(&self) -> &str {
            self.0
        }
        async fn check(&self) -> Result<(), NotReady> {
            Err(NotReady::new("down"))
        }
    }

    #[tokio::test]
    async fn names_are_the_checks_run_in_their_order() {
        let added: Arc<dyn HealthCheck> = Arc::new(Named("added"));
        let state = HealthState {
            backend: Arc::new(crate::storage::MemoryBackend::new()),
            storage_check: "storage",
            shutdown: Default::default(),
            shutdown_initiated: Default::default(),
            readyz: vec![Arc::new(Named("registration"))],
            version: Default::default(),
            checks: HealthChecks {
                livez: vec![added.clone()],
                readyz: vec![added],
                ..Default::default()
            },
        };
        for endpoint in ["healthz", "livez", "readyz"] {
            let run = run_checks(endpoint, &state).await;
            let run: Vec<_> = run.into_iter().map(|(name, _, _)| name).collect();
            assert_eq!(state.check_names(endpoint), run, "{endpoint}");
        }
        assert_eq!(
            state.check_names("readyz"),
            ["ping", "storage", "shutdown", "registration", "added"]
        );
        assert_eq!(state.check_names("healthz"), ["ping"]);
        let livez = run_checks("livez", &state).await;
        let body = report("livez", &livez, Some("verbose"));
        assert_eq!(body.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
