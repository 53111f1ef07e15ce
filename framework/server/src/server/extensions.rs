//! What a user adds to a server, as to `k8s.io/apiserver`'s `GenericAPIServer`: authenticators
//! and authorizers asked before the delegated ones, tower layers around the handlers,
//! non-resource routes, health checks and post-start hooks. [`APIServer`]'s methods collect
//! them; [`APIServer::build`] checks and installs them.
//!
//! Where each sits on a request's path:
//!
//! ```text
//! filters (… authentication: the user's authenticators, then the delegated ones …
//!          authorization: the user's authorizers, then the delegated ones …)
//!  ─▶ the user's layers (the last added outermost)
//!  ─▶ router: health, discovery, OpenAPI, resources, the user's routes
//! ```

use std::collections::HashSet;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::Request;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, Route};
use axum::Router;
use futures::future::BoxFuture;
use futures::FutureExt as _;
use tower::{Layer, Service};

use crate::auth::delegating::AuthSetup;
use crate::auth::{Authenticator, Authorizer, UnionAuthenticator, UnionAuthorizer};
use crate::lifecycle::{HealthCheck, NotReady, ShutdownSignal};
use crate::registry::store::Reader;
use crate::runtime::Resource;
use crate::server::builder::{APIServer, ServerError, StorageConfig};
use crate::server::health::HealthChecks;

/// Why a post-start hook failed: any error (`?` converts them), or a message
/// (`Err("no quorum".into())`).
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

type HookFn = Box<dyn FnOnce(PostStartContext) -> BoxFuture<'static, Result<(), HookError>> + Send>;

type LayerFn = Arc<dyn Fn(Router) -> Router + Send + Sync>;

/// Paths the server serves itself; a route of the user's may not be one of them or under one.
const RESERVED_PATHS: [&str; 8] = [
    "/api", "/apis", "/healthz", "/livez", "/readyz", "/version", "/metrics", "/openapi",
];

/// What the user added, until [`APIServer::build`] installs it.
#[derive(Default)]
pub(crate) struct Extensions {
    authenticators: Vec<Arc<dyn Authenticator>>,
    authorizers: Vec<Arc<dyn Authorizer>>,
    layers: Vec<LayerFn>,
    routes: Vec<(String, MethodRouter)>,
    checks: HealthChecks,
    /// Behind a mutex only so that the builder stays `Sync` with hooks that are not.
    hooks: Vec<(String, Mutex<HookFn>)>,
}

/// What a post-start hook is given: the server's shutdown signal and its storage.
#[derive(Clone)]
pub struct PostStartContext {
    shutdown: ShutdownSignal,
    storage: Arc<StorageConfig>,
}

impl PostStartContext {
    /// Fires when the server shuts down: work a hook leaves running stops on it.
    pub fn shutdown(&self) -> &ShutdownSignal {
        &self.shutdown
    }

    /// The server's storage: its backend and the stores of every resource it serves.
    pub fn storage(&self) -> &Arc<StorageConfig> {
        &self.storage
    }

    /// Reads the objects of `T`, stored or computed, in process (typed, through the watch
    /// cache, no HTTP): [`StorageConfig::reader`].
    pub fn reader<T: Resource>(&self) -> Reader<T> {
        self.storage.reader::<T>()
    }
}

impl std::fmt::Debug for PostStartContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostStartContext")
            .field("storage", &self.storage)
            .finish_non_exhaustive()
    }
}

impl APIServer {
    /// Asks `authenticator` who sent a request before the server's own authenticators (client
    /// certificates, front-proxy headers, TokenReview): as `k8s.io/apiserver`'s union
    /// authenticator, the first to recognise the request wins, an error does not stop the
    /// others (it is reported only when none recognises the request), and a request none
    /// recognises goes on to the server's own. Added authenticators are asked in the order
    /// added.
    ///
    /// ```no_run
    /// use extension_apiserver::auth::{AuthError, Authenticator, UserInfo};
    /// use extension_apiserver::prelude::*;
    ///
    /// /// `Authorization: Bearer robot-token` is the user `robot`.
    /// struct RobotToken;
    ///
    /// #[async_trait]
    /// impl Authenticator for RobotToken {
    ///     async fn authenticate(
    ///         &self,
    ///         parts: &extension_apiserver::axum::http::request::Parts,
    ///     ) -> Result<Option<UserInfo>, AuthError> {
    ///         let token = parts.headers.get("authorization").and_then(|v| v.to_str().ok());
    ///         Ok((token == Some("Bearer robot-token"))
    ///             .then(|| UserInfo::new("robot", []).with_authenticated_group()))
    ///     }
    /// }
    ///
    /// let server = APIServer::new(ServerOptions::default()).authenticator(RobotToken);
    /// ```
    pub fn authenticator(mut self, authenticator: impl Authenticator + 'static) -> Self {
        self.extensions.authenticators.push(Arc::new(authenticator));
        self
    }

    /// Asks `authorizer` before the server's own authorizers (always-allowed groups and paths,
    /// SubjectAccessReview; in standalone mode, any authenticated user): as `k8s.io/apiserver`'s
    /// union authorizer, the first [`Allow`](crate::auth::Decision::Allow) or
    /// [`Deny`](crate::auth::Decision::Deny) decides (a `Deny` is a 403 with its reason),
    /// [`NoOpinion`](crate::auth::Decision::NoOpinion) asks the next. Added authorizers are
    /// asked in the order added.
    ///
    /// ```no_run
    /// use extension_apiserver::auth::{AuthError, Attributes, Authorization, Authorizer, Decision};
    /// use extension_apiserver::prelude::*;
    ///
    /// /// Nobody deletes widgets; anything else is for the next authorizer to decide.
    /// struct WidgetsAreForever;
    ///
    /// #[async_trait]
    /// impl Authorizer for WidgetsAreForever {
    ///     async fn authorize(&self, a: &Attributes<'_>) -> Result<Authorization, AuthError> {
    ///         Ok(if a.resource == "widgets" && a.verb == "delete" {
    ///             Authorization::new(Decision::Deny, "widgets are forever")
    ///         } else {
    ///             Authorization::new(Decision::NoOpinion, "")
    ///         })
    ///     }
    /// }
    ///
    /// let server = APIServer::new(ServerOptions::default()).authorizer(WidgetsAreForever);
    /// ```
    pub fn authorizer(mut self, authorizer: impl Authorizer + 'static) -> Self {
        self.extensions.authorizers.push(Arc::new(authorizer));
        self
    }

    /// Wraps the handlers in a tower layer: inside the filters (after authentication,
    /// authorization, in-flight limits and timeout, so the request carries its
    /// [`UserInfo`](crate::auth::UserInfo) and [`RequestInfo`](crate::endpoints::RequestInfo)
    /// in its extensions; audit and metrics see what the layer answers), around every route:
    /// health, discovery, OpenAPI, the resources, the routes added with
    /// [`route`](Self::route) and the 404 of unknown paths. Takes what axum's `Router::layer`
    /// takes; each layer wraps those added before it.
    ///
    /// ```no_run
    /// use extension_apiserver::prelude::*;
    /// use extension_apiserver::axum::extract::Request;
    /// use extension_apiserver::axum::middleware::{self, Next};
    ///
    /// let server = APIServer::new(ServerOptions::default()).layer(middleware::from_fn(
    ///     |request: Request, next: Next| async move {
    ///         let mut response = next.run(request).await;
    ///         response.headers_mut().insert("x-served-by", "widgets".parse().unwrap());
    ///         response
    ///     },
    /// ));
    /// ```
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<Request> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Error: Into<Infallible> + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        let wrap: LayerFn = Arc::new(move |router: Router| router.layer(layer.clone()));
        self.extensions.layers.push(wrap);
        self
    }

    /// Serves `method_router` at `path` (axum's syntax: `/things/{name}`), a non-resource URL:
    /// behind the same filters as the rest, so the user is authenticated and authorized for
    /// the lower-cased HTTP method on the path, as `/metrics` is (a user without the right gets
    /// kube's 403 `forbidden: User "…" cannot get path "/hello"`). The server's own paths
    /// (`/api`, `/apis`, `/healthz`, `/livez`, `/readyz`, `/version`, `/metrics`, `/openapi`
    /// and below) and a path given twice are refused by [`build`](Self::build).
    ///
    /// ```no_run
    /// use extension_apiserver::prelude::*;
    /// use extension_apiserver::axum::routing::get;
    ///
    /// let server = APIServer::new(ServerOptions::default())
    ///     .route("/hello", get(|| async { "hello" }));
    /// ```
    pub fn route(mut self, path: &str, method_router: MethodRouter) -> Self {
        self.extensions
            .routes
            .push((path.to_string(), method_router));
        self
    }

    /// Adds a check to `/healthz`, `/livez` and `/readyz` (`k8s.io/apiserver`'s
    /// `AddHealthChecks`): each fails while `check` does. The check is at
    /// `/{endpoint}/{name}`, listed by `?verbose` and skipped with `?exclude={name}`.
    ///
    /// ```no_run
    /// use extension_apiserver::prelude::*;
    ///
    /// let server = APIServer::new(ServerOptions::default())
    ///     .health_check("disk", || async {
    ///         let free = 10u64; // e.g. from statvfs
    ///         if free > 0 { Ok(()) } else { Err(NotReady::new("disk full")) }
    ///     });
    /// ```
    pub fn health_check<F, Fut>(mut self, name: impl Into<String>, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), NotReady>> + Send + 'static,
    {
        let check = FnCheck::shared(name, check);
        let checks = &mut self.extensions.checks;
        for list in [&mut checks.healthz, &mut checks.livez, &mut checks.readyz] {
            list.push(check.clone());
        }
        self
    }

    /// Adds a check to `/readyz` only (`k8s.io/apiserver`'s `AddReadyzChecks`): the server
    /// takes no traffic while it fails, but is not restarted. See
    /// [`health_check`](Self::health_check).
    ///
    /// ```no_run
    /// use extension_apiserver::prelude::*;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    ///
    /// let warm = Arc::new(AtomicBool::new(false));
    /// let server = APIServer::new(ServerOptions::default()).readyz_check("cache-warm", move || {
    ///     let warm = warm.load(Ordering::Relaxed);
    ///     async move { if warm { Ok(()) } else { Err(NotReady::new("cache not warm")) } }
    /// });
    /// ```
    pub fn readyz_check<F, Fut>(mut self, name: impl Into<String>, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), NotReady>> + Send + 'static,
    {
        let check = FnCheck::shared(name, check);
        self.extensions.checks.readyz.push(check);
        self
    }

    /// Adds a check to `/livez` only (`k8s.io/apiserver`'s `AddLivezChecks`): the server is
    /// restarted while it fails. See [`health_check`](Self::health_check).
    ///
    /// ```no_run
    /// use extension_apiserver::prelude::*;
    ///
    /// let server = APIServer::new(ServerOptions::default())
    ///     .livez_check("event-loop", || async { Ok(()) });
    /// ```
    pub fn livez_check<F, Fut>(mut self, name: impl Into<String>, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), NotReady>> + Send + 'static,
    {
        let check = FnCheck::shared(name, check);
        self.extensions.checks.livez.push(check);
        self
    }

    /// Runs `hook` once the server listens (`k8s.io/apiserver`'s `AddPostStartHook`), in a
    /// task of its own, given a [`PostStartContext`]: the shutdown signal and the server's
    /// storage (its [`reader`](PostStartContext::reader) reads any resource it serves). Until the
    /// hook returns `Ok`, the check `poststarthook/{name}` of `/healthz`, `/livez` and
    /// `/readyz` fails with `not finished`. A hook that fails (or panics) stops the server,
    /// as kube-apiserver exits: the error is logged, the server shuts down and
    /// [`RunningServer::wait`](crate::server::RunningServer::wait) returns
    /// [`ServerError::PostStartHook`]. Work a hook leaves running should end on the shutdown
    /// signal. Two hooks of the same name are refused by [`build`](Self::build).
    ///
    /// ```no_run
    /// use extension_apiserver::prelude::*;
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
    /// # pub struct Widget { #[serde(default)] pub metadata: ObjectMeta }
    ///
    /// let server = APIServer::new(ServerOptions::default())
    ///     .group(APIGroup::new("example.com").version("v1", |v| v.resource::<Widget>()))
    ///     .post_start_hook("count-widgets", |ctx| async move {
    ///         let widgets = ctx.reader::<Widget>().list(None).await?;
    ///         println!("{} widgets stored", widgets.len());
    ///         Ok(())
    ///     });
    /// ```
    pub fn post_start_hook<F, Fut>(mut self, name: impl Into<String>, hook: F) -> Self
    where
        F: FnOnce(PostStartContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), HookError>> + Send + 'static,
    {
        let hook: HookFn = Box::new(move |ctx| hook(ctx).boxed());
        self.extensions.hooks.push((name.into(), Mutex::new(hook)));
        self
    }
}

impl Extensions {
    /// What [`APIServer::build`] refuses: two hooks or two checks of one endpoint with the same
    /// name, a route on a path the server serves itself or given twice.
    pub(crate) fn validate(&self) -> Result<(), ServerError> {
        let mut hooks = HashSet::new();
        for (name, _) in &self.hooks {
            if !hooks.insert(name) {
                return Err(config(format!(
                    "post-start hook {name:?} is already registered"
                )));
            }
        }
        let mut paths = HashSet::new();
        for (path, _) in &self.routes {
            let reserved = RESERVED_PATHS
                .iter()
                .any(|r| path == r || path.starts_with(&format!("{r}/")));
            if !path.starts_with('/') || reserved || !paths.insert(path) {
                return Err(config(format!(
                    "route {path:?}: a path must start with `/`, be added once, and not be \
                     one the server serves ({})",
                    RESERVED_PATHS.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The server's authenticator and authorizer behind the user's.
    pub(crate) fn wrap_auth(&self, mut auth: AuthSetup) -> AuthSetup {
        if !self.authenticators.is_empty() {
            let union = self.authenticators.iter().cloned();
            let union = union.fold(UnionAuthenticator::new(), UnionAuthenticator::with);
            auth.authenticator = Arc::new(union.with(auth.authenticator));
        }
        if !self.authorizers.is_empty() {
            let union = self.authorizers.iter().cloned();
            let union = union.fold(UnionAuthorizer::new(), UnionAuthorizer::with);
            auth.authorizer = Arc::new(union.with(auth.authorizer));
        }
        auth
    }

    /// `router` with the user's routes, whose paths [`validate`](Self::validate) checked.
    pub(crate) fn routes(&self, router: Router) -> Router {
        let routes = self.routes.iter().cloned();
        routes.fold(router, |r, (path, method)| r.route(&path, method))
    }

    /// `router` (its fallback too) in the user's layers, the last added outermost.
    pub(crate) fn layers(&self, router: Router) -> Router {
        self.layers.iter().fold(router, |r, wrap| wrap(r))
    }

    /// The user's health checks and one `poststarthook/{name}` per hook; the hooks, to run
    /// once the server listens.
    pub(crate) fn take_checks_and_hooks(&mut self) -> (HealthChecks, PostStartHooks) {
        let mut checks = self.checks.clone();
        let mut hooks = Vec::new();
        for (name, hook) in std::mem::take(&mut self.hooks) {
            let done = Arc::new(AtomicBool::new(false));
            let check: Arc<dyn HealthCheck> = Arc::new(PostStartHookCheck {
                name: format!("poststarthook/{name}"),
                done: done.clone(),
            });
            for list in [&mut checks.healthz, &mut checks.livez, &mut checks.readyz] {
                list.push(check.clone());
            }
            let run = hook.into_inner().unwrap_or_else(PoisonError::into_inner);
            hooks.push(PendingHook { name, run, done });
        }
        (checks, PostStartHooks { hooks })
    }
}

fn config(message: String) -> ServerError {
    ServerError::Config(message)
}

/// A health check from a closure.
struct FnCheck<F> {
    name: String,
    check: F,
}

impl<F, Fut> FnCheck<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), NotReady>> + Send + 'static,
{
    fn shared(name: impl Into<String>, check: F) -> Arc<dyn HealthCheck> {
        let name = name.into();
        Arc::new(Self { name, check })
    }
}

#[async_trait::async_trait]
impl<F, Fut> HealthCheck for FnCheck<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), NotReady>> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    async fn check(&self) -> Result<(), NotReady> {
        (self.check)().await
    }
}

/// `poststarthook/{name}`: fails until the hook has returned `Ok`, as kube's
/// `postStartHookHealthz`.
struct PostStartHookCheck {
    name: String,
    done: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl HealthCheck for PostStartHookCheck {
    fn name(&self) -> &str {
        &self.name
    }

    async fn check(&self) -> Result<(), NotReady> {
        match self.done.load(Ordering::Acquire) {
            true => Ok(()),
            false => Err(NotReady::new("not finished")),
        }
    }
}

/// A hook not run yet.
struct PendingHook {
    name: String,
    run: HookFn,
    done: Arc<AtomicBool>,
}

/// The hooks of a built server, run by its start.
#[derive(Default)]
pub(crate) struct PostStartHooks {
    hooks: Vec<PendingHook>,
}

/// The first post-start hook failure, which the serving task returns once the server stopped.
pub(crate) type HookFailure = Arc<Mutex<Option<ServerError>>>;

impl PostStartHooks {
    /// The hooks' names, in the order added.
    pub(crate) fn names(&self) -> Vec<String> {
        self.hooks.iter().map(|h| h.name.clone()).collect()
    }

    /// Runs every hook in a task of its own. A failure (an error or a panic) is logged, kept
    /// in the returned slot and shuts the server down.
    pub(crate) fn run(self, ctx: PostStartContext) -> HookFailure {
        let failure = HookFailure::default();
        for hook in self.hooks {
            let (ctx, failure) = (ctx.clone(), failure.clone());
            tokio::spawn(async move {
                let run = std::panic::AssertUnwindSafe((hook.run)(ctx.clone())).catch_unwind();
                let message = match run.await {
                    Ok(Ok(())) => return hook.done.store(true, Ordering::Release),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "panicked".to_string(),
                };
                tracing::error!(hook = %hook.name, error = %message, "PostStartHook failed");
                let error = ServerError::PostStartHook {
                    name: hook.name,
                    message,
                };
                failure
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert(error);
                ctx.shutdown.trigger();
            });
        }
        failure
    }
}

/// The context hooks get.
pub(crate) fn post_start_context(
    shutdown: ShutdownSignal,
    storage: Arc<StorageConfig>,
) -> PostStartContext {
    PostStartContext { shutdown, storage }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_on_the_servers_paths_and_twice_are_refused() {
        let get = || axum::routing::get(|| async { "x" });
        for path in [
            "/apis/x",
            "/healthz",
            "/readyz/mine",
            "/openapi/v2",
            "hello",
        ] {
            let server = APIServer::new(Default::default()).route(path, get());
            assert!(server.extensions.validate().is_err(), "{path}");
        }
        let server = APIServer::new(Default::default())
            .route("/hello", get())
            .route("/apiserver-info", get());
        assert!(server.extensions.validate().is_ok());
        let twice = server.route("/hello", get());
        assert!(twice.extensions.validate().is_err());
    }

    #[test]
    fn hooks_have_one_name_each_and_a_check_everywhere() {
        let hook = |_| async { Ok(()) };
        let server = APIServer::new(Default::default())
            .post_start_hook("a", hook)
            .post_start_hook("b", hook);
        assert!(server.extensions.validate().is_ok());
        let mut server = server.post_start_hook("a", hook);
        let Err(ServerError::Config(message)) = server.extensions.validate() else {
            panic!("a second hook `a` must be refused");
        };
        assert!(message.contains("\"a\" is already registered"), "{message}");
        let (checks, hooks) = server.extensions.take_checks_and_hooks();
        assert_eq!(hooks.names(), ["a", "b", "a"]);
        for endpoint in ["healthz", "livez", "readyz"] {
            let names: Vec<_> = checks.of(endpoint).iter().map(|c| c.name()).collect();
            assert_eq!(names[0], "poststarthook/a", "{endpoint}");
        }
    }

    fn is_send<T: Send>(_: &T) {}

    #[test]
    fn the_builder_and_its_futures_can_be_spawned() {
        fn is_sync<T: Send + Sync>() {}
        is_sync::<APIServer>();
        let hook = |_| async { Ok::<(), HookError>(()) };
        let server = APIServer::new(Default::default()).post_start_hook("h", hook);
        // Futures not polled: nothing starts.
        is_send(&server.build());
        is_send(&APIServer::new(Default::default()).start());
        // Never called: that it compiles is the test.
        fn _run_is_send(built: crate::server::BuiltServer) {
            is_send(&built.run());
        }
    }

    fn boom() -> Result<(), HookError> {
        panic!("boom")
    }

    #[tokio::test]
    async fn a_panicking_hook_stops_the_server_with_its_failure() {
        let mut server = APIServer::new(Default::default())
            .post_start_hook("fine", |_| async { Ok(()) })
            .post_start_hook("boom", |_| async { boom() });
        let (checks, hooks) = server.extensions.take_checks_and_hooks();
        let shutdown = ShutdownSignal::new();
        let backend = Arc::new(crate::storage::MemoryBackend::new());
        let storage = StorageConfig::new(backend, "/registry", false, shutdown.clone());
        let failure = hooks.run(post_start_context(shutdown.clone(), Arc::new(storage)));
        let stopped =
            tokio::time::timeout(std::time::Duration::from_secs(10), shutdown.cancelled());
        stopped.await.expect("a failed hook shuts the server down");
        let failed = failure.lock().unwrap().take();
        let Some(ServerError::PostStartHook { name, message }) = failed else {
            panic!("the hook's failure is kept: {failed:?}");
        };
        assert_eq!((name.as_str(), message.as_str()), ("boom", "panicked"));
        let fine = checks.readyz[0].clone();
        assert_eq!(fine.name(), "poststarthook/fine");
        for _ in 0..100 {
            if fine.check().await.is_ok() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the fine hook's check never passed");
    }

    #[tokio::test]
    async fn a_hook_check_fails_until_the_hook_is_done() {
        let check = PostStartHookCheck {
            name: "poststarthook/x".into(),
            done: Arc::default(),
        };
        let failed = check.check().await.unwrap_err();
        assert_eq!(failed.reason(), "not finished");
        check.done.store(true, Ordering::Release);
        assert!(check.check().await.is_ok());
    }
}
