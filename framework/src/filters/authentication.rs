//! Authentication: finds the user of a request, or answers 401. Paths always allowed (health)
//! pass without credentials.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::FilterConfig;
use crate::auth::UserInfo;
use crate::error::Error;

/// The middleware: stores the [`UserInfo`] in the request's extensions.
pub async fn authenticate(
    State(config): State<Arc<FilterConfig>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let user = match config.authenticator.authenticate(&parts).await {
        Ok(Some(user)) => Some(user),
        Ok(None) if config.anonymous => Some(UserInfo::anonymous()),
        Ok(None) => None,
        // Credentials that were sent but are wrong are refused everywhere, as kube-apiserver
        // does: only requests with no credentials at all may fall through.
        Err(e) => {
            tracing::debug!(error = %e, "authentication failed");
            return Error::unauthorized().into_response();
        }
    };
    match user {
        Some(user) => {
            parts.extensions.insert(user);
        }
        None if config.is_always_allowed(parts.uri.path()) => {}
        None => return Error::unauthorized().into_response(),
    }
    next.run(Request::from_parts(parts, body)).await
}
