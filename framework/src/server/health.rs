//! `/healthz`, `/livez`, `/readyz` and `/version`: plain-text checks as kube-apiserver
//! answers them (`ok`, or a list of `[+]`/`[-]` lines with `?verbose`).

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http::StatusCode;
use serde_json::json;

use crate::storage::Backend;

/// What the health endpoints check.
#[derive(Clone)]
pub struct HealthState {
    /// The storage backend; `/readyz` fails while it cannot serve.
    pub backend: Arc<dyn Backend>,
    /// Set when shutdown starts: `/readyz` fails so load balancers stop sending.
    pub shutdown: crate::server::serve::ShutdownSignal,
}

/// The health and version routes.
pub fn router(state: HealthState) -> Router {
    Router::new()
        .route("/healthz", get(livez))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/version", get(version))
        .with_state(state)
}

async fn livez(RawQuery(query): RawQuery) -> Response {
    report("livez", &[("ping", Ok(()))], query.as_deref())
}

async fn readyz(State(state): State<HealthState>, RawQuery(query): RawQuery) -> Response {
    let storage = state.backend.ready().await.map_err(|e| e.to_string());
    let shutdown = if state.shutdown.is_shutting_down() {
        Err("process is shutting down".to_string())
    } else {
        Ok(())
    };
    report(
        "readyz",
        &[
            ("ping", Ok(())),
            ("storage", storage),
            ("shutdown", shutdown),
        ],
        query.as_deref(),
    )
}

fn report(name: &str, checks: &[(&str, Result<(), String>)], query: Option<&str>) -> Response {
    let failed = checks.iter().any(|(_, r)| r.is_err());
    let verbose = query.is_some_and(|q| {
        q.split('&')
            .any(|p| p == "verbose" || p.starts_with("verbose="))
    });
    let code = if failed {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    if !verbose && !failed {
        return (code, "ok").into_response();
    }
    let mut body = String::new();
    for (check, result) in checks {
        match result {
            Ok(()) => body.push_str(&format!("[+]{check} ok\n")),
            Err(e) if verbose => body.push_str(&format!("[-]{check} failed: {e}\n")),
            Err(_) => body.push_str(&format!("[-]{check} failed: reason withheld\n")),
        }
    }
    let verdict = if failed { "failed" } else { "passed" };
    body.push_str(&format!("{name} check {verdict}\n"));
    (code, body).into_response()
}

async fn version() -> Response {
    axum::Json(json!({
        "major": "0",
        "minor": "1",
        "gitVersion": concat!("v", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    }))
    .into_response()
}
