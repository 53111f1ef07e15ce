//! Panic recovery: a panicking handler answers 500 `InternalError` and the server lives on.

use std::panic::AssertUnwindSafe;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;

use crate::error::Error;

/// The middleware.
pub async fn recover(request: Request, next: Next) -> Response {
    // A `Uri` clone shares its bytes: nothing is copied unless the handler panics.
    let uri = request.uri().clone();
    match AssertUnwindSafe(next.run(request)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(path = %uri.path(), panic = %what, "handler panicked");
            Error::internal("the server panicked while serving the request").into_response()
        }
    }
}
