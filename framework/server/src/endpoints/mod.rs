//! HTTP and encoding: request info, query parameters, content negotiation, the resource
//! handlers and tables. Handlers call `registry` storage; they never touch a backend.

pub(crate) mod accept;
pub(crate) mod body;
pub(crate) mod duplicates;
pub(crate) mod handlers;
pub(crate) mod installer;
pub mod negotiation;
pub mod params;
pub mod request_info;
pub(crate) mod response;
pub mod table;

use std::sync::Arc;

use axum::Router;
use axum::routing::any;

pub use handlers::APIState;
pub use installer::InstalledResources;
pub use request_info::{RequestInfo, Verb};

/// The largest request body kube-apiserver accepts: 3 MiB.
pub const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Routes every resource path under `/apis/{group}/{version}/` to the handlers.
pub fn resource_router(state: Arc<APIState>) -> Router {
    Router::new()
        .route("/apis/{group}/{version}/{*rest}", any(handlers::handle))
        .with_state(state)
}
