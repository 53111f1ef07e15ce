//! What a user adds to the server (see [`extensions`](crate::server::extensions)): the
//! builder's methods that collect it.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::Request;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, Route};
use futures::FutureExt as _;
use tower::{Layer, Service};

use super::APIServer;
use crate::auth::{Authenticator, Authorizer};
use crate::lifecycle::NotReady;
use crate::server::extensions::{FnCheck, HookError, HookFn, LayerFn, PostStartContext};

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
    /// [`ServerError::PostStartHook`](crate::server::ServerError::PostStartHook). Work a hook leaves running should end on the shutdown
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
