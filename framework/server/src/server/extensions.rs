//! What a user adds to a server, as to `k8s.io/apiserver`'s `GenericAPIServer`: authenticators
//! and authorizers asked before the delegated ones, tower layers around the handlers,
//! non-resource routes, health checks and post-start hooks. [`APIServer`](crate::server::APIServer)'s methods collect
//! them; [`APIServer::build`](crate::server::APIServer::build) checks and installs them.
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
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::routing::MethodRouter;
use futures::FutureExt as _;
use futures::future::BoxFuture;

use crate::auth::delegating::AuthSetup;
use crate::auth::{Authenticator, Authorizer, UnionAuthenticator, UnionAuthorizer};
use crate::lifecycle::{HealthCheck, NotReady, ShutdownSignal};
use crate::registry::store::Reader;
use crate::runtime::Resource;
use crate::server::error::ServerError;
use crate::server::health::HealthChecks;
use crate::server::storage_config::StorageConfig;

/// Why a post-start hook failed: any error (`?` converts them), or a message
/// (`Err("no quorum".into())`).
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

pub(super) type HookFn =
    Box<dyn FnOnce(PostStartContext) -> BoxFuture<'static, Result<(), HookError>> + Send>;

pub(super) type LayerFn = Arc<dyn Fn(Router) -> Router + Send + Sync>;

/// Paths the server serves itself; a route of the user's may not be one of them or under one.
pub(super) const RESERVED_PATHS: [&str; 8] = [
    "/api", "/apis", "/healthz", "/livez", "/readyz", "/version", "/metrics", "/openapi",
];

/// What the user added, until [`APIServer::build`] installs it.
#[derive(Default)]
pub(crate) struct Extensions {
    pub(super) authenticators: Vec<Arc<dyn Authenticator>>,
    pub(super) authorizers: Vec<Arc<dyn Authorizer>>,
    pub(super) layers: Vec<LayerFn>,
    pub(super) routes: Vec<(String, MethodRouter)>,
    pub(super) checks: HealthChecks,
    /// Behind a mutex only so that the builder stays `Sync` with hooks that are not.
    pub(super) hooks: Vec<(String, Mutex<HookFn>)>,
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

pub(super) fn config(message: String) -> ServerError {
    ServerError::Config(message)
}

/// A health check from a closure.
pub(super) struct FnCheck<F> {
    name: String,
    check: F,
}

impl<F, Fut> FnCheck<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), NotReady>> + Send + 'static,
{
    pub(super) fn shared(name: impl Into<String>, check: F) -> Arc<dyn HealthCheck> {
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
pub(super) struct PostStartHookCheck {
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
pub(super) struct PendingHook {
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
    use crate::server::builder::APIServer;

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
