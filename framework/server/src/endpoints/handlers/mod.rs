//! Resource handlers: one per verb. Each decodes its parameters and body, calls the storage
//! and encodes the answer; none touches storage directly.

mod admit;
pub(crate) mod connect;
mod read;
mod subresource;
mod watch;
mod write;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::request::Parts;

use crate::auth::UserInfo;
use crate::endpoints::installer::{InstalledResource, InstalledResources};
use crate::endpoints::params::Query;
use crate::endpoints::request_info::{RequestInfo, Verb};
use crate::endpoints::response::add_warnings;
use crate::error::{Error, Result};
use crate::lifecycle::ShutdownSignal;
use crate::registry::context::{RequestContext, WatchInitialization};

/// Shared state of the resource handlers.
#[derive(Debug)]
pub struct APIState {
    /// Installed resources.
    pub resources: InstalledResources,
    /// Largest accepted request body, in bytes (kube-apiserver: 3 MiB).
    pub max_body_bytes: usize,
    /// Ends watches when the server shuts down.
    pub shutdown: ShutdownSignal,
    /// Admission checks of writes (NamespaceLifecycle with a core API).
    pub admission: crate::admission::Admission,
    /// The server's stores, kept as long as it serves: each store only links to them, so
    /// that its strategies read the others.
    pub stores: crate::registry::store::StoreSet,
}

/// Everything a verb handler needs.
pub(crate) struct Call {
    pub(crate) parts: Parts,
    pub(crate) body: Body,
    pub(crate) info: RequestInfo,
    pub(crate) resource: Arc<InstalledResource>,
    pub(crate) ctx: RequestContext,
    pub(crate) query: Query,
    pub(crate) state: Arc<APIState>,
}

/// The axum handler of every `/apis/{group}/{version}/...` resource path.
pub async fn handle(State(state): State<Arc<APIState>>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    // Taken, not cloned: nothing after the handler reads it.
    let info = parts
        .extensions
        .remove::<RequestInfo>()
        .unwrap_or_else(|| RequestInfo::parse(&parts.method, parts.uri.path(), parts.uri.query()));
    let call = match prepare(state, parts, body, info) {
        Ok(call) => call,
        Err(e) => return e.into_response(),
    };
    let ctx = call.ctx.answered();
    let mut response = dispatch(call)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    // A watch whose storage did not take the signal is initialized once answered.
    ctx.watch_initialized();
    add_warnings(&mut response, &ctx.warnings());
    response
}

fn prepare(state: Arc<APIState>, mut parts: Parts, body: Body, info: RequestInfo) -> Result<Call> {
    if !info.is_resource_request {
        return Err(Error::path_not_found());
    }
    let resource = state
        .resources
        .find(
            &info.api_group,
            &info.api_version,
            &info.resource,
            &info.subresource,
        )
        .ok_or_else(Error::path_not_found)?;
    check_scope(&resource, &info)?;
    let query = Query::parse(parts.uri.query(), info.verb)?;
    let mut ctx = match info.namespace.as_str() {
        "" => RequestContext::cluster(),
        ns => RequestContext::namespaced(ns),
    };
    // Taken, not cloned, as the request info: nothing after the handler reads it.
    ctx.user = parts.extensions.remove::<UserInfo>();
    if let Some(signal) = parts.extensions.remove::<WatchInitialization>() {
        ctx = ctx.with_watch_initialization(signal);
    }
    Ok(Call {
        parts,
        body,
        info,
        resource,
        ctx,
        query,
        state,
    })
}

/// A namespaced kind is reachable without a namespace only to list and watch across all
/// namespaces; a cluster-scoped kind never under a namespace.
fn check_scope(resource: &InstalledResource, info: &RequestInfo) -> Result<()> {
    let namespaced = resource.storage.info.namespaced();
    let collection_read = info.verb.reads_collection();
    match (namespaced, info.namespace.is_empty()) {
        (true, true) if !collection_read => Err(Error::path_not_found()),
        (false, false) => Err(Error::path_not_found()),
        _ => Ok(()),
    }
}

/// Serves a call by its subresource, else by its verb.
///
/// A future is as large as the largest of the futures it may await, and each layer above
/// moves it whole (axum boxes the handler's, and so on up), copying every byte. Reads await
/// their futures in place; writes and subresources, whose futures are larger (2–7 KB
/// against 2 KB), await theirs boxed, so that a get does not carry, and copy, a patch's
/// (book: Benchmarks, "Futures of every size").
async fn dispatch(call: Call) -> Result<Response> {
    if let Some(sub) = call.resource.storage.subresource.clone() {
        return Box::pin(subresource::serve(call, sub)).await;
    }
    // kube-apiserver routes PUT and PATCH only to objects: on a collection they are 405.
    let on_collection = call.info.name.is_empty();
    if on_collection && matches!(call.info.verb, Verb::Update | Verb::Patch) {
        return Err(Error::method_not_allowed());
    }
    match call.info.verb {
        Verb::Get => read::get(call).await,
        Verb::List => read::list(call).await,
        Verb::Watch => watch::watch(call).await,
        Verb::Create => Box::pin(write::create(call)).await,
        Verb::Update => Box::pin(write::update(call)).await,
        Verb::Patch => Box::pin(write::patch(call)).await,
        Verb::Delete => Box::pin(write::delete(call)).await,
        Verb::DeleteCollection => Box::pin(write::delete_collection(call)).await,
        _ => Err(Error::method_not_allowed()),
    }
}

/// The storage capability a verb needs, or 405.
pub(crate) fn require<'a, T: ?Sized>(
    capability: &'a Option<Arc<T>>,
    call: &Call,
) -> Result<&'a Arc<T>> {
    capability.as_ref().ok_or_else(|| {
        Error::method_not_supported(&call.resource.storage.info, call.info.verb.as_str())
    })
}
