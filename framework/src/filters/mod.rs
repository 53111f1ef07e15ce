//! Filters: what every request passes before the router, outermost first — panic recovery,
//! request info, timeout (not for watches), authentication, authorization.
//! Each is an axum middleware in a file of its own; [`apply`] stacks them in that order.

pub mod authentication;
pub mod authorization;
pub mod panic_recovery;
pub mod request_info;
pub mod timeout;

use std::sync::Arc;

use axum::middleware::from_fn_with_state;
use axum::Router;

use crate::auth::{Authenticator, Authorizer};

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

/// Wraps `router` in the filter chain. Layers added last run first, so the order here is
/// innermost to outermost.
pub fn apply(router: Router, config: FilterConfig) -> Router {
    let config = Arc::new(config);
    router
        .layer(from_fn_with_state(config.clone(), authorization::authorize))
        .layer(from_fn_with_state(
            config.clone(),
            authentication::authenticate,
        ))
        .layer(from_fn_with_state(config, timeout::timeout))
        .layer(axum::middleware::from_fn(request_info::request_info))
        .layer(axum::middleware::from_fn(panic_recovery::recover))
}
