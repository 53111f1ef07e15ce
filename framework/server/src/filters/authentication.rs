//! Authentication: finds the user of a request, or answers 401. Non-resource paths that are
//! always allowed (health) pass without credentials. Credentials the authenticators read
//! (front-proxy headers, bearer tokens) are removed before later stages see the request.

use std::sync::OnceLock;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use prometheus::Histogram;
use tracing::Instrument;

use super::FilterConfig;
use crate::auth::UserInfo;
use crate::endpoints::RequestInfo;
use crate::error::Error;

/// The step: stores the [`UserInfo`] in the request's extensions, or answers 401.
pub async fn authenticate(config: &FilterConfig, request: Request) -> Result<Request, Response> {
    let (mut parts, body) = request.into_parts();
    let started = std::time::Instant::now();
    let found = config
        .authenticator
        .authenticate(&parts)
        .instrument(crate::spans::child_span!("authentication"))
        .await;
    // kube's `authentication_duration_seconds`: `success`, `failure` (no user), `error`.
    static RESULTS: [OnceLock<Histogram>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let (result, slot) = match &found {
        Ok(Some(_)) => ("success", 0),
        Ok(None) => ("failure", 1),
        Err(_) => ("error", 2),
    };
    let durations = &crate::metrics::global().authentication_duration;
    super::metrics::one_label(&RESULTS[slot], durations, result)
        .observe(started.elapsed().as_secs_f64());
    let user = match found {
        Ok(Some(user)) => Some(user),
        Ok(None) if config.anonymous => Some(UserInfo::anonymous()),
        Ok(None) => None,
        // Credentials that were sent but are wrong are refused everywhere, as kube-apiserver
        // does: only requests with no credentials at all may fall through.
        Err(e) => {
            tracing::debug!(error = %e, "authentication failed");
            return Err(Error::unauthorized().into_response());
        }
    };
    config.authenticator.clear_credentials(&mut parts.headers);
    match user {
        Some(user) => {
            parts.extensions.insert(user);
        }
        None if is_always_allowed(config, &parts) => {}
        None => return Err(Error::unauthorized().into_response()),
    }
    Ok(Request::from_parts(parts, body))
}

/// An always-allowed path of a non-resource request.
pub(crate) fn is_always_allowed(config: &FilterConfig, parts: &http::request::Parts) -> bool {
    let resource_request = parts
        .extensions
        .get::<RequestInfo>()
        .is_some_and(|info| info.is_resource_request);
    !resource_request && config.is_always_allowed(parts.uri.path())
}
