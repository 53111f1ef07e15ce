//! Timeout: a request that is not long-running (watch) gets 504 `Timeout` after the bound.

use std::future::Future;
use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};

use crate::endpoints::{RequestInfo, Verb};
use crate::error::Error;

/// Whether the request runs without the bound (a watch), from its [`RequestInfo`].
pub fn is_long_running(request: &Request) -> bool {
    request
        .extensions()
        .get::<RequestInfo>()
        .is_some_and(|i| i.verb == Verb::Watch)
}

/// Runs `serve` (the rest of the request's path) for at most `limit`; then 504.
pub async fn bound(limit: Duration, serve: impl Future<Output = Response>) -> Response {
    match tokio::time::timeout(limit, serve).await {
        Ok(response) => response,
        Err(_) => {
            Error::timeout("request did not complete within the allowed duration").into_response()
        }
    }
}
