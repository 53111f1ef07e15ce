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

use axum::routing::{MethodRouter, any};

pub use handlers::APIState;
pub use installer::InstalledResources;
pub use request_info::{RequestInfo, Verb};

/// The largest request body kube-apiserver accepts: 3 MiB.
pub const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// What serves every path no route matched, as the router's fallback: a resource path
/// under `/apis/{group}/{version}/` goes to the handlers, anything else is 404 `NotFound`
/// (the handlers' answer to a path that names no installed resource). A fallback rather
/// than a route `/apis/{group}/{version}/{*rest}`: a route with parameters has axum decode
/// them and store them, and its matched path, in every request, which nothing here reads
/// (the request info has parsed the path already).
pub fn resource_fallback(state: Arc<APIState>) -> MethodRouter {
    any(resource_or_not_found).with_state(state)
}

/// The resource handlers for the paths `/apis/{group}/{version}/{*rest}` matches, 404 otherwise.
async fn resource_or_not_found(
    state: axum::extract::State<Arc<APIState>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    if !is_resource_route(request.uri().path()) {
        return axum::response::IntoResponse::into_response(crate::error::Error::path_not_found());
    }
    handlers::handle(state, request).await
}

/// Whether `path` is one `/apis/{group}/{version}/{*rest}` matches: a group and a version
/// (each a non-empty segment), then anything non-empty.
fn is_resource_route(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/apis/") else {
        return false;
    };
    let mut parts = rest.splitn(3, '/');
    let (group, version, rest) = (parts.next(), parts.next(), parts.next());
    [group, version, rest]
        .iter()
        .all(|part| part.is_some_and(|p| !p.is_empty()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn resource_routes_are_those_the_route_matched() {
        for path in ["/apis/g/v/r", "/apis/g/v/r/n/s", "/apis/g/v/r/"] {
            assert!(super::is_resource_route(path), "{path}");
        }
        let others = [
            "/apis/g/v",
            "/apis/g/v/",
            "/apis/g//r",
            "/apis//v/r",
            "//apis/g/v/r",
            "/api/v1/pods",
        ];
        for path in others {
            assert!(!super::is_resource_route(path), "{path}");
        }
    }
}
