//! Panic recovery: a panicking handler answers 500 `InternalError` and the server lives on.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use http::Uri;

use crate::error::Error;

/// Runs `serve` (the rest of the request's path); a panic in it answers 500 and is logged with
/// the request's `uri`.
pub async fn recover(uri: Uri, serve: impl Future<Output = Response>) -> Response {
    match AssertUnwindSafe(serve).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(path = %uri.path(), panic = %what, "handler panicked");
            let mut response =
                Error::internal("the server panicked while serving the request").into_response();
            response.extensions_mut().insert(super::audit::Panicked);
            response
        }
    }
}
