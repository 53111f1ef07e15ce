//! Timeout: a request that is not long-running (watch) gets 504 `Timeout` after the bound.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::FilterConfig;
use crate::endpoints::RequestInfo;
use crate::error::Error;

/// The middleware.
pub async fn timeout(
    State(config): State<Arc<FilterConfig>>,
    request: Request,
    next: Next,
) -> Response {
    let long_running = request
        .extensions()
        .get::<RequestInfo>()
        .is_some_and(|i| i.verb == "watch");
    if long_running {
        return next.run(request).await;
    }
    match tokio::time::timeout(config.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            Error::timeout("request did not complete within the allowed duration").into_response()
        }
    }
}
