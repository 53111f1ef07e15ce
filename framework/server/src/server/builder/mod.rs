//! The builder: groups of resources in, a running HTTPS server out.
//!
//! `APIServer` collects [`APIGroup`]s (each a set of versions, each a set of resources), then
//! at start opens the storage backend, instantiates every store, builds the
//! `APIGroupInfo`s, discovery and OpenAPI documents once, and serves them behind the filters.
//! Starting is two stages, [`APIServer::build`] then [`BuiltServer::start`] or
//! [`BuiltServer::run`]; what a user adds to the server is in [`extensions`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use axum::Router;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tokio::net::TcpListener;

use super::plugins::{AdmissionPluginFactory, PluginContext};
use super::tracing_export::{TracingConfiguration, TracingExport};
use crate::admission::{Admission, Plugin};
use crate::aggregator::{
    APIServiceRegistrar, APIServiceVersion, AggregatorHandle, AggregatorOptions, ManifestOptions,
};
use crate::auth::delegating::{self, AuthSetup, Mode};
use crate::discovery::DiscoveryDocuments;
use crate::endpoints::{self, APIState, InstalledResources};
use crate::filters::inflight::InflightLimits;
use crate::filters::{self, FilterConfig};
use crate::flowcontrol::FlowControl;
use crate::lifecycle::ShutdownSignal;
use crate::metrics_apis::MetricsAPIs;
use crate::openapi::{OpenAPIDocuments, OpenAPIInfo};
use crate::registry::group::APIGroupInfo;
use crate::registry::store::{MigrationReport, StorageMigrator};
use crate::registry::strategy::Strategy;
use crate::server::error::ServerError;
use crate::server::extensions::{self, Extensions, HookFailure, PostStartHooks};
use crate::server::group::*;
use crate::server::storage_config::*;

mod extend;
mod metrics;
use crate::server::health::{self, HealthChecks, HealthState, ReadyzCheck};
use crate::server::migrate::MigrateStorageOptions;
use crate::server::options::{DEFAULT_HTTP2_MAX_STREAMS, ServerOptions, StorageBackendKind};
use crate::server::serve::{ServeOptions, serve_tls_with, shutdown_signal};
use crate::server::serving_cert::{RELOAD_INTERVAL, ServingCertificate};
use crate::server::tls;
use crate::server::version::VersionInfo;
use crate::storage::instrumented::Instrumented;
use crate::storage::{Backend, CacherOptions, SizeLimited};
use crate::tls::certs::{SERVING_CERT_FILE, SERVING_KEY_FILE, SelfSignedCerts};

/// The serving side of TLS: the cert dir's self-signed material, the serving certificate (from
/// files, followed when they change) and the rustls configuration of the secure port.
struct ServingTls {
    certs: SelfSignedCerts,
    serving: ServingCertificate,
    /// The self-signed serving CA, when the serving certificate is the cert dir's own.
    self_signed_ca: Option<String>,
    config: Arc<rustls::ServerConfig>,
}

impl ServingTls {
    fn load(options: &ServerOptions) -> Result<Self, ServerError> {
        let mut hosts = options.extra_hosts.clone();
        if !options.bind_address.is_unspecified() {
            hosts.push(options.bind_address.to_string());
        }
        let certs = SelfSignedCerts::load_or_create(&options.cert_dir, &hosts)?;
        let settings = tls::TlsSettings {
            min_version: options.tls_min_version,
            cipher_suites: options.tls_cipher_suites.clone(),
        };
        let (cert_file, key_file) = match (&options.tls_cert_file, &options.tls_private_key_file) {
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
            _ => (
                options.cert_dir.join(SERVING_CERT_FILE),
                options.cert_dir.join(SERVING_KEY_FILE),
            ),
        };
        let serving = ServingCertificate::from_files(&cert_file, &key_file, &settings.provider()?)?;
        let self_signed_ca = options
            .tls_cert_file
            .is_none()
            .then(|| certs.serving_ca_pem.clone());
        // Client certificates are requested, not verified: each authenticator checks its own
        // CA, so CAs that change at run time (the authentication ConfigMap) need no new config.
        let config = tls::server_config_with(Arc::new(serving.clone()), true, &settings)?;
        Ok(Self {
            certs,
            serving,
            self_signed_ca,
            config,
        })
    }
}

/// The secure port, bound, and what the core API gave.
struct Bound {
    listener: TcpListener,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    wiring: crate::aggregator::Wiring,
    admission: Admission,
    audit: Option<Arc<crate::audit::Auditor>>,
    flow_control: Option<Arc<FlowControl>>,
}

/// What `--help` says a server is when its builder names nothing else.
pub const DEFAULT_ABOUT: &str = "A Kubernetes extension API server, built with extension-apiserver";

#[derive(Parser)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    options: ServerOptions,
    #[command(flatten)]
    aggregator: AggregatorOptions,
}

/// What a server built with [`APIServer::from_args`] can do besides serving (the default).
#[derive(Clone, Debug, Subcommand)]
// Parsed once per process: the size of the server's flags does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Print the YAML to run this server in a cluster behind the aggregator: Namespace,
    /// ServiceAccount, RBAC, Deployment, Service and APIServices.
    Manifests(ManifestOptions),
    /// Rewrite every stored object that is not in its resource's current storage version,
    /// converted, and exit: after a change of storage version, so that the older version can
    /// be dropped. Resumable; on etcd, safe while servers run (each rewrite is a
    /// compare-and-swap, and watchers see a MODIFIED event).
    MigrateStorage(MigrateStorageOptions),
}

/// A server under construction.
///
/// ```no_run
/// use extension_apiserver::{APIGroup, APIServer};
/// # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema, extension_apiserver::Resource)]
/// # #[resource(group = "example.com", version = "v1", kind = "Thing", namespaced)]
/// # struct Thing { metadata: extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta }
/// # async fn run() -> Result<(), extension_apiserver::server::ServerError> {
/// APIServer::from_args()
///     .group(APIGroup::new("example.com").version("v1", |v| v.resource::<Thing>()))
///     .run()
///     .await
/// # }
/// ```
pub struct APIServer {
    options: ServerOptions,
    aggregator: AggregatorOptions,
    command: Option<Command>,
    groups: Vec<APIGroup>,
    backend: Option<Arc<dyn Backend>>,
    openapi: OpenAPIInfo,
    malloc_arena_max: Option<u32>,
    version: VersionInfo,
    admission_plugins: Vec<AdmissionPluginFactory>,
    /// Whether [`run`](Self::run) installs the log subscriber ([`without_logging`](Self::without_logging)).
    logging: bool,
    /// Authenticators, authorizers, layers, routes, checks and hooks the user added.
    pub(super) extensions: Extensions,
    /// The providers of the custom and external metrics APIs.
    metrics: MetricsAPIs,
}

/// How long a stopping server waits for the audit webhook to take the buffered events.
const AUDIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// A started server.
pub struct RunningServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The standalone admin kubeconfig (its client certificate is trusted only in
    /// standalone mode).
    pub kubeconfig: PathBuf,
    /// Standalone, or delegated to a cluster's kube-apiserver.
    pub mode: Mode,
    serving_certificate: ServingCertificate,
    shutdown: ShutdownSignal,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
    aggregator: Option<AggregatorHandle>,
}

impl RunningServer {
    /// The serving certificate: the pair handshakes get now, and a receiver of every
    /// replacement (the files are polled every [`RELOAD_INTERVAL`] while the server runs).
    pub fn serving_certificate(&self) -> &ServingCertificate {
        &self.serving_certificate
    }

    /// The APIService registration and deployment checks (with a core API): call
    /// [`serving_certificate_changed`](AggregatorHandle::serving_certificate_changed) when the
    /// serving certificate changes.
    pub fn aggregator(&self) -> Option<&AggregatorHandle> {
        self.aggregator.as_ref()
    }

    /// The APIService registrar (with `--register-apiservice`).
    pub fn apiservice_registrar(&self) -> Option<&APIServiceRegistrar> {
        self.aggregator
            .as_ref()
            .and_then(AggregatorHandle::registrar)
    }

    /// Stops accepting, ends watches, waits for in-flight requests.
    pub async fn shutdown(self) -> Result<(), ServerError> {
        self.shutdown.trigger();
        self.task.await?
    }

    /// Waits until the server stops by itself: SIGTERM or SIGINT with
    /// [`run`](APIServer::run), or a post-start hook's failure
    /// ([`ServerError::PostStartHook`]).
    pub async fn wait(self) -> Result<(), ServerError> {
        self.task.await?
    }
}

/// A server built and not serving yet ([`APIServer::build`]): its storage is open, its port
/// bound, its routes made. Inspect it, then [`start`](Self::start) or [`run`](Self::run) it.
pub struct BuiltServer {
    server: APIServer,
    tls: ServingTls,
    listener: TcpListener,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    mode: Mode,
    router: Router,
    backend: Arc<dyn Backend>,
    storage: Arc<StorageConfig>,
    aggregator: Option<AggregatorHandle>,
    audit: Option<Arc<crate::audit::Auditor>>,
    initiated: ShutdownSignal,
    health: HealthState,
    hooks: PostStartHooks,
    stop: StopOnDrop,
    tracing: Option<TracingExport>,
}

impl std::fmt::Debug for BuiltServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltServer")
            .field("addr", &self.addr)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl BuiltServer {
    /// The address the secure port is bound to (its port chosen by the system when
    /// `--secure-port=0`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The standalone admin kubeconfig (its client certificate is trusted only in
    /// standalone mode).
    pub fn kubeconfig(&self) -> &std::path::Path {
        &self.kubeconfig
    }

    /// Standalone, or delegated to a cluster's kube-apiserver.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The storage: backend, key prefix, and the store of every served resource (its
    /// [`reader`](StorageConfig::reader) reads them, e.g. to seed objects before serving).
    pub fn storage(&self) -> &Arc<StorageConfig> {
        &self.storage
    }

    /// The serving certificate.
    pub fn serving_certificate(&self) -> &ServingCertificate {
        &self.tls.serving
    }

    /// The checks of `/healthz`, in the order `?verbose` lists them.
    pub fn healthz_checks(&self) -> Vec<String> {
        self.health.check_names("healthz")
    }

    /// The checks of `/livez`, in the order `?verbose` lists them.
    pub fn livez_checks(&self) -> Vec<String> {
        self.health.check_names("livez")
    }

    /// The checks of `/readyz`, in the order `?verbose` lists them.
    pub fn readyz_checks(&self) -> Vec<String> {
        self.health.check_names("readyz")
    }

    /// The names of the post-start hooks, in the order added.
    pub fn post_start_hooks(&self) -> Vec<String> {
        self.hooks.names()
    }

    /// Starts serving, then the post-start hooks, and returns at once.
    pub async fn start(self) -> Result<RunningServer, ServerError> {
        Ok(self.serve(false))
    }

    /// Serves until SIGTERM or SIGINT (or a post-start hook fails).
    pub async fn run(self) -> Result<(), ServerError> {
        super::set_logging_format(self.server.options.logging_format);
        let running = self.serve(true);
        if running.mode == Mode::Delegated {
            tracing::info!(addr = %running.addr, "serving, authentication and authorization delegated");
            return running.wait().await;
        }
        tracing::info!(addr = %running.addr, kubeconfig = %running.kubeconfig.display(), "serving");
        let kubeconfig =
            std::fs::canonicalize(&running.kubeconfig).unwrap_or(running.kubeconfig.clone());
        tracing::info!(
            "point kubectl at it: export KUBECONFIG={}",
            kubeconfig.display()
        );
        running.wait().await
    }

    /// Serving, the upkeep beside it, then the hooks (the port already listens).
    fn serve(self, os_signals: bool) -> RunningServer {
        let shutdown = self.stop.disarm();
        let server = &self.server;
        server.spawn_upkeep(&self.tls, &self.backend, self.aggregator.clone(), &shutdown);
        let serving = server.spawn_serving(
            self.listener,
            self.tls.config.clone(),
            self.router,
            (shutdown.clone(), self.initiated),
            os_signals,
            self.audit,
        );
        let context = extensions::post_start_context(shutdown.clone(), self.storage);
        let failure = self.hooks.run(context);
        RunningServer {
            addr: self.addr,
            kubeconfig: self.kubeconfig,
            mode: self.mode,
            serving_certificate: self.tls.serving,
            shutdown,
            task: tokio::spawn(served(serving, failure, self.tracing)),
            aggregator: self.aggregator,
        }
    }
}

/// What the serving task ended with: a post-start hook's failure first (it stopped the
/// server).
async fn served(
    serving: tokio::task::JoinHandle<Result<(), ServerError>>,
    failure: HookFailure,
    tracing: Option<TracingExport>,
) -> Result<(), ServerError> {
    let served = serving.await;
    if let Some(export) = tracing {
        export.finish().await;
    }
    let served = served?;
    let failed = failure
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    match failed {
        Some(e) => Err(e),
        None => served,
    }
}

/// Triggers the shutdown signal when dropped, unless [`disarm`](Self::disarm)ed.
struct StopOnDrop(Option<ShutdownSignal>);

impl StopOnDrop {
    fn signal(&self) -> &ShutdownSignal {
        self.0.as_ref().expect("armed until disarmed")
    }

    /// The signal, no longer triggered on drop.
    fn disarm(mut self) -> ShutdownSignal {
        self.0.take().expect("armed until disarmed")
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(signal) = &self.0 {
            signal.trigger();
        }
    }
}

/// Two checks of one endpoint with one name could not be told apart (`/readyz/{name}`,
/// `?exclude`).
fn unique_check_names(health: &HealthState) -> Result<(), ServerError> {
    for endpoint in ["healthz", "livez", "readyz"] {
        let mut seen = std::collections::HashSet::new();
        for name in health.check_names(endpoint) {
            if !seen.insert(name.clone()) {
                return Err(ServerError::Config(format!(
                    "two {endpoint} checks are named {name:?}"
                )));
            }
        }
    }
    Ok(())
}

impl APIServer {
    /// A server with options from the command line; `--help` starts with [`DEFAULT_ABOUT`]
    /// (see [`from_args_about`](Self::from_args_about) to describe your own server).
    ///
    /// Besides the server's flags this understands the `manifests` subcommand
    /// ([`Command`]); [`run`](Self::run) then prints the manifests instead of serving.
    pub fn from_args() -> Self {
        Self::from_args_about(DEFAULT_ABOUT)
    }

    /// [`from_args`](Self::from_args) with `about` as the first paragraph of `--help`, e.g.
    /// your crate's description: `APIServer::from_args_about(env!("CARGO_PKG_DESCRIPTION"))`.
    pub fn from_args_about(about: &str) -> Self {
        Self::from_cli(parse_cli(about, std::env::args_os()))
    }

    /// The command line [`from_args`](Self::from_args) parses, as a `clap::Command`: every
    /// flag of [`ServerOptions`] and [`AggregatorOptions`] and the `manifests` subcommand
    /// ([`Command`]), with their value names, defaults and help. For documentation generated
    /// from the definitions themselves (the book's flag reference is), shell completions or
    /// man pages.
    pub fn cli() -> clap::Command {
        cli_command(DEFAULT_ABOUT)
    }

    fn from_cli(cli: Cli) -> Self {
        // The server's flags come after `migrate-storage`: they say which storage it opens.
        let options = match &cli.command {
            Some(Command::MigrateStorage(migrate)) => migrate.server.clone(),
            _ => cli.options,
        };
        let mut server = Self::new(options).aggregator_options(cli.aggregator);
        server.command = cli.command;
        server
    }

    /// A server with these options.
    pub fn new(options: ServerOptions) -> Self {
        Self {
            options,
            aggregator: AggregatorOptions::default(),
            command: None,
            groups: Vec::new(),
            backend: None,
            openapi: OpenAPIInfo::default(),
            malloc_arena_max: Some(super::malloc::DEFAULT_MALLOC_ARENA_MAX),
            version: VersionInfo::default(),
            admission_plugins: Vec::new(),
            logging: true,
            extensions: Extensions::default(),
            metrics: MetricsAPIs::default(),
        }
    }

    /// Leaves logging to the program: [`run`](Self::run) then installs no log subscriber.
    /// Without it, `run` installs the server's own (stderr, filtered by `RUST_LOG`, default
    /// `info`, in the `--logging-format` of the options), unless the program installed one
    /// first ([`init_logging`](crate::server::init_logging) or its own).
    pub fn without_logging(mut self) -> Self {
        self.logging = false;
        self
    }

    /// The core API and APIService registration options (`--kubeconfig`,
    /// `--register-apiservice`, ...).
    pub fn aggregator_options(mut self, options: AggregatorOptions) -> Self {
        self.aggregator = options;
        self
    }

    /// Registers one APIService per group version at start, pointing at the Service
    /// `namespace/name` (as `--register-apiservice --apiservice-service-namespace
    /// --apiservice-service-name`).
    pub fn register_apiservice(mut self, namespace: &str, name: &str) -> Self {
        self.aggregator.register_apiservice = true;
        self.aggregator.service_namespace = Some(namespace.into());
        self.aggregator.service_name = Some(name.into());
        self
    }

    /// Runs `command` from [`run`](Self::run) instead of serving.
    pub fn command(mut self, command: Option<Command>) -> Self {
        self.command = command;
        self
    }

    /// Adds an API group: for what a type does not say (several versions of a resource
    /// converted to one another, computed resources, storage of your own, priorities).
    pub fn group(mut self, group: APIGroup) -> Self {
        self.groups.push(group);
        self
    }

    /// Serves `T` with the generic store in the group and version its type names
    /// (`T::INFO`, from `#[resource(group = …, version = …)]`): the group is added, or the one
    /// of that name extended, so neither is repeated as a string. Versions come in the order
    /// their first resource was added, the first preferred.
    ///
    /// ```no_run
    /// use extension_apiserver::prelude::*;
    ///
    /// #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
    /// struct Widget {
    ///     #[serde(default)]
    ///     metadata: ObjectMeta,
    /// }
    ///
    /// # async fn run() -> Result<(), ServerError> {
    /// APIServer::from_args().resource::<Widget>().run().await
    /// # }
    /// ```
    pub fn resource<T: Strategy>(mut self) -> Self {
        match self.groups.iter_mut().find(|g| g.name() == T::INFO.group) {
            Some(group) => group.serve::<T>(),
            None => {
                let mut group = APIGroup::new(T::INFO.group);
                group.serve::<T>();
                self.groups.push(group);
            }
        }
        self
    }

    /// The `info` of the OpenAPI documents (title and version).
    pub fn openapi_info(mut self, title: impl Into<String>, version: impl Into<String>) -> Self {
        self.openapi = OpenAPIInfo {
            title: title.into(),
            version: version.into(),
        };
        self
    }

    /// One APIService per served group version, for registration and `manifests`.
    fn apiservice_versions(&self) -> Vec<APIServiceVersion> {
        let groups = self.groups.iter().flat_map(APIGroup::apiservice_versions);
        groups.chain(self.metrics.apiservice_versions()).collect()
    }

    /// What `/version` answers (`kubectl version` prints it); by default the Kubernetes
    /// release the framework follows ([`VersionInfo::default`]).
    pub fn version_info(mut self, version: VersionInfo) -> Self {
        self.version = version;
        self
    }

    /// Adds an admission plugin, made by `make` when the server starts (its storage opened,
    /// the core API connected). Plugins run after the built-in ones, in the order they are
    /// added, each on unless `--disable-admission-plugins` names it. `make` is given the
    /// in-process reader of the server's resources, the way kube hands plugins informers:
    ///
    /// ```no_run
    /// # use extension_apiserver::prelude::*;
    /// # use extension_apiserver::admission::{AdmissionPlugin, Attributes, Plugin};
    /// # use extension_apiserver::registry::store::Reader;
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Policy")]
    /// # pub struct Policy { #[serde(default)] pub metadata: ObjectMeta }
    /// struct NeedsPolicy(Reader<Policy>);
    ///
    /// #[extension_apiserver::async_trait]
    /// impl AdmissionPlugin for NeedsPolicy {
    ///     fn name(&self) -> &str { "NeedsPolicy" }
    ///     async fn validate(&self, attributes: &Attributes) -> extension_apiserver::Result<()> {
    ///         if self.0.list(None).await?.is_empty() {
    ///             return Err(attributes.forbidden("no policy is defined yet"));
    ///         }
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let server = APIServer::new(ServerOptions::default())
    ///     .admission_plugin(|ctx| Plugin::validating(NeedsPolicy(ctx.storage.reader::<Policy>())));
    /// ```
    pub fn admission_plugin<F>(mut self, make: F) -> Self
    where
        F: Fn(&PluginContext<'_>) -> Plugin + Send + Sync + 'static,
    {
        self.admission_plugins.push(Box::new(make));
        self
    }

    /// Uses this backend instead of the one the options name.
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// How many glibc malloc arenas [`run`](Self::run) allows the process (default
    /// [`DEFAULT_MALLOC_ARENA_MAX`](super::malloc::DEFAULT_MALLOC_ARENA_MAX)), with glibc's
    /// fast bins off and the memory a load freed given back once the server is quiet
    /// (`malloc_trim`); `None` leaves the allocator as it is. The default cap itself is set as
    /// the process starts, before any thread (glibc applies a cap only to arenas made after
    /// it), so another number here caps only the arenas made after `run`. `MALLOC_ARENA_MAX`
    /// and `GLIBC_TUNABLES` in the environment always win. See
    /// [`server::malloc`](super::malloc) for why.
    pub fn malloc_arena_max(mut self, max: Option<u32>) -> Self {
        self.malloc_arena_max = max;
        self
    }

    /// Runs until SIGTERM or SIGINT, with logs to stderr unless
    /// [`without_logging`](Self::without_logging) said otherwise.
    pub async fn run(self) -> Result<(), ServerError> {
        if self.logging {
            super::init_logging();
        }
        super::set_logging_format(self.options.logging_format);
        if let Some(Command::Manifests(options)) = &self.command {
            print!(
                "{}",
                crate::aggregator::manifests(options, &self.apiservice_versions())
            );
            return Ok(());
        }
        if let Some(Command::MigrateStorage(options)) = &self.command {
            let print = &mut |report: &MigrationReport| println!("{report}");
            if let Some(kubeconfig) = &options.server_kubeconfig {
                return self
                    .migrate_through_api(kubeconfig, &options.resources, print)
                    .await
                    .map(drop);
            }
            return self.migrate(&options.resources, print).await.map(drop);
        }
        // Gives back what a burst of requests freed once the server is quiet (stopped with the
        // server).
        let _trim = self.malloc_arena_max.map(|max| {
            super::malloc::limit_arenas(max);
            super::malloc::Trimmer::spawn()
        });
        self.build().await?.run().await
    }

    /// What the `migrate-storage` subcommand does: opens the storage as
    /// [`start`](Self::start) would (the given [`backend`](Self::backend), or the one the
    /// options name) and rewrites, in its storage version, every object of `resources`
    /// (`{plural}.{group}`; every stored resource when empty) stored in an older version
    /// ([`StorageMigrator`]). Safe while servers of the new storage version run.
    ///
    /// ```no_run
    /// # use extension_apiserver::prelude::*;
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v2", kind = "Widget")]
    /// # pub struct WidgetV2 { #[serde(default)] pub metadata: ObjectMeta }
    /// # async fn run() -> Result<(), extension_apiserver::server::ServerError> {
    /// let server = APIServer::new(ServerOptions::default())
    ///     .group(APIGroup::new("example.com").version("v2", |v| v.resource::<WidgetV2>()));
    /// for report in server.migrate_storage(&[]).await? {
    ///     println!("{report}"); // widgets.example.com: 40 objects, 12 rewritten
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn migrate_storage(
        &self,
        resources: &[String],
    ) -> Result<Vec<MigrationReport>, ServerError> {
        self.migrate(resources, &mut |_| {}).await
    }

    async fn migrate(
        &self,
        resources: &[String],
        progress: &mut dyn FnMut(&MigrationReport),
    ) -> Result<Vec<MigrationReport>, ServerError> {
        let backend = match self.backend.clone() {
            Some(b) => b,
            None => open_backend(&self.options).await?,
        };
        let migrators = self.migrators(backend, resources)?;
        super::migrate::run(&migrators, progress).await
    }

    /// `migrate-storage --server-kubeconfig`: the resources this server stores, migrated
    /// through the API of the running server `kubeconfig` reaches (nothing of the storage is
    /// opened here; the groups are built on memory only to learn their storage versions).
    async fn migrate_through_api(
        &self,
        kubeconfig: &std::path::Path,
        resources: &[String],
        progress: &mut dyn FnMut(&MigrationReport),
    ) -> Result<Vec<MigrationReport>, ServerError> {
        let memory: Arc<dyn Backend> = Arc::new(crate::storage::MemoryBackend::new());
        let migrators = self.migrators(memory, resources)?;
        super::migrate::run_through_api(kubeconfig, &migrators, progress).await
    }

    /// The migrators of `resources` (all stored ones when empty), from the groups built on
    /// `backend` without watch caches (each object is read once, from the backend).
    fn migrators(
        &self,
        backend: Arc<dyn Backend>,
        resources: &[String],
    ) -> Result<Vec<StorageMigrator>, ServerError> {
        let shutdown = ShutdownSignal::new();
        let config = StorageConfig::new(backend, &self.options.storage_prefix, false, shutdown);
        let built = build_groups(&self.groups, &config);
        // Ends what building started (computed resources' upkeep).
        config.shutdown().trigger();
        built?;
        super::migrate::select(config.migrators(), resources)
    }

    /// Starts serving and returns at once (for tests and embedding): [`build`](Self::build),
    /// then [`BuiltServer::start`].
    pub async fn start(self) -> Result<RunningServer, ServerError> {
        self.build().await?.start().await
    }

    /// Everything [`start`](Self::start) does before accepting connections: checks what was
    /// added (hooks, checks and routes: [`ServerError::Config`]), opens the storage and builds
    /// the groups' stores, loads the serving certificate, sets up authentication and
    /// authorization, binds the secure port (and with a core API registers the APIServices),
    /// and makes the routes. The [`BuiltServer`] can be inspected, then
    /// [`start`](BuiltServer::start)ed or [`run`](BuiltServer::run); dropped, it stops what
    /// building started.
    ///
    /// ```no_run
    /// # use extension_apiserver::prelude::*;
    /// # async fn t() -> Result<(), ServerError> {
    /// let built = APIServer::new(ServerOptions::default())
    ///     .readyz_check("warm", || async { Ok(()) })
    ///     .build()
    ///     .await?;
    /// assert!(built.readyz_checks().contains(&"warm".to_string()));
    /// println!("will serve on {}", built.addr());
    /// let running = built.start().await?;
    /// running.shutdown().await
    /// # }
    /// ```
    pub async fn build(mut self) -> Result<BuiltServer, ServerError> {
        self.extensions.validate()?;
        filters::goaway::validate_chance(self.options.goaway_chance)
            .map_err(ServerError::Config)?;
        self.check_metrics_groups()?;
        let tracing = self.options.tracing_config_file.as_deref();
        let tracing = tracing.map(TracingConfiguration::load).transpose()?;
        crate::tls::install_crypto_provider();
        // Dropped on an error or with the unstarted server: ends what building started
        // (computed resources' upkeep, the authentication ConfigMap's watch).
        let stop = StopOnDrop(Some(ShutdownSignal::new()));
        let shutdown = stop.signal().clone();
        let initiated = ShutdownSignal::new();
        let (storage, groups) = self.open_storage(&shutdown).await?;
        // Shared with the post-start hooks.
        let storage = Arc::new(storage);
        let backend = storage.backend().clone();
        let tls = ServingTls::load(&self.options)?;
        let client_ca = tls.certs.client_ca();
        let auth = delegating::build(&self.options.auth, &client_ca, shutdown.clone()).await?;
        let auth = self.extensions.wrap_auth(auth);
        let mode = auth.mode;
        let admission_authorizer = admission_authorizer(auth.authorizer.clone());
        let bound = self
            .bind_and_wire(&tls, &storage, &shutdown, admission_authorizer)
            .await?;
        let (checks, hooks) = self.extensions.take_checks_and_hooks();
        let health = self.health_state(
            backend.clone(),
            (shutdown.clone(), initiated.clone()),
            bound.wiring.readyz.clone(),
            checks,
        );
        unique_check_names(&health)?;
        let audit = bound.audit;
        let state = APIState {
            resources: InstalledResources::new(&groups),
            max_body_bytes: endpoints::MAX_REQUEST_BODY_BYTES,
            shutdown: health.shutdown.clone(),
            admission: bound.admission,
            stores: storage.stores(),
        };
        let overload = (bound.flow_control.clone(), audit.clone());
        let router = self.build_router(&groups, state, health.clone(), auth, overload);
        Ok(BuiltServer {
            server: self,
            tls,
            listener: bound.listener,
            addr: bound.addr,
            kubeconfig: bound.kubeconfig,
            mode,
            router,
            backend,
            storage,
            aggregator: bound.wiring.handle,
            audit,
            initiated,
            health,
            hooks,
            stop,
            tracing: tracing
                .map(|config| TracingExport::start(&config))
                .transpose()?,
        })
    }

    /// A metrics API and an ordinary group of the same name would answer the same paths.
    fn check_metrics_groups(&self) -> Result<(), ServerError> {
        let metrics = self.metrics.group_names();
        match self.groups.iter().find(|g| metrics.contains(&g.name())) {
            Some(group) => Err(ServerError::Config(format!(
                "{} is served by a metrics provider; it cannot also be served as a group of resources",
                group.name()
            ))),
            None => Ok(()),
        }
    }

    /// The storage (the backend given, or opened from the options) and the groups' storage on
    /// it.
    async fn open_storage(
        &self,
        shutdown: &ShutdownSignal,
    ) -> Result<(StorageConfig, Vec<APIGroupInfo>), ServerError> {
        let backend = match self.backend.clone() {
            Some(b) => b,
            None => open_backend(&self.options).await?,
        };
        let backend = Instrumented::wrap(backend, &self.options.storage_prefix);
        // Outside the timing: a refused object is no request to the backend.
        let backend = SizeLimited::wrap(backend, self.options.max_object_size_bytes);
        let cacher_options = CacherOptions {
            window_bytes: self.options.watch_cache_window_bytes,
            ..CacherOptions::default()
        };
        let config = StorageConfig::new(
            backend,
            &self.options.storage_prefix,
            self.options.watch_cache,
            shutdown.clone(),
        )
        .with_watch_cache_options(cacher_options);
        let groups = build_groups(&self.groups, &config)?;
        Ok((config, groups))
    }

    /// Binds the secure port, writes the admin kubeconfig, and connects to the core API:
    /// registration and diagnostics, then the admission chain.
    async fn bind_and_wire(
        &self,
        tls: &ServingTls,
        storage: &StorageConfig,
        shutdown: &ShutdownSignal,
        authorizer: crate::admission::AdmissionAuthorizer,
    ) -> Result<Bound, ServerError> {
        let options = &self.options;
        let listener = TcpListener::bind((options.bind_address, options.secure_port)).await?;
        let addr = listener.local_addr()?;
        let kubeconfig = tls.certs.write_kubeconfig(addr.port())?;
        let serving_info = crate::aggregator::ServingInfo {
            chain: tls.serving.chain(),
            self_signed_ca: tls.self_signed_ca.clone(),
            secure_port: addr.port(),
            versions: self.apiservice_versions(),
        };
        let wiring =
            crate::aggregator::wire(&self.aggregator, serving_info, shutdown.clone()).await?;
        let context = PluginContext {
            storage,
            core: wiring.core.as_ref(),
            shutdown,
        };
        let own = self.admission_plugins.iter().map(|make| make(&context));
        let admission = crate::admission::build(
            &options.admission,
            wiring.core.as_ref(),
            shutdown,
            own.collect(),
            authorizer,
            storage.own_objects(),
        )?;
        let audit = options.audit.build(shutdown).await?;
        let flow_control = self.flow_control(wiring.core.as_ref(), shutdown);
        Ok(Bound {
            listener,
            addr,
            kubeconfig,
            wiring,
            admission,
            audit,
            flow_control,
        })
    }

    /// Priority and fairness, following the core cluster's configuration, when enabled and
    /// there is a core API; its seats are the sum of the two max-in-flight limits, as
    /// `k8s.io/apiserver`'s recommended options make them (0: no limit, nothing to share).
    fn flow_control(
        &self,
        core: Option<&kube::Client>,
        shutdown: &ShutdownSignal,
    ) -> Option<Arc<FlowControl>> {
        let options = &self.options;
        let total = options.max_requests_inflight + options.max_mutating_requests_inflight;
        let total = u32::try_from(total).unwrap_or(u32::MAX);
        match core {
            Some(client) if options.enable_priority_and_fairness && total > 0 => {
                Some(FlowControl::follow(client.clone(), total, shutdown.clone()))
            }
            _ => None,
        }
    }

    /// What runs beside serving until shutdown: the serving certificate's reload (and the
    /// APIServices' caBundle following it), and storage compaction.
    fn spawn_upkeep(
        &self,
        tls: &ServingTls,
        backend: &Arc<dyn Backend>,
        aggregator: Option<AggregatorHandle>,
        shutdown: &ShutdownSignal,
    ) {
        if let Some(handle) = aggregator {
            let ca = tls.self_signed_ca.clone();
            follow_serving_certificate(&tls.serving, handle, ca, shutdown.clone());
        }
        if self.options.compaction_interval_seconds > 0 {
            crate::storage::compactor::spawn(
                backend.clone(),
                Duration::from_secs(self.options.compaction_interval_seconds),
                shutdown.clone(),
            );
        }
        tls.serving
            .spawn_reloader(RELOAD_INTERVAL, shutdown.clone());
    }

    /// Serves `router` on `listener` until `shutdown` (or SIGTERM/SIGINT with `os_signals`).
    /// A signal first sets `initiated` (`/readyz` fails) and keeps serving for
    /// `--shutdown-delay-duration`; then the listener closes, watches end, in-flight requests
    /// drain; last, the audit events still buffered are sent.
    fn spawn_serving(
        &self,
        listener: TcpListener,
        tls_config: Arc<rustls::ServerConfig>,
        router: Router,
        (shutdown, initiated): (ShutdownSignal, ShutdownSignal),
        os_signals: bool,
        audit: Option<Arc<crate::audit::Auditor>>,
    ) -> tokio::task::JoinHandle<Result<(), ServerError>> {
        let serve_options = ServeOptions {
            signal: shutdown,
            max_concurrent_streams: match self.options.http2_max_streams_per_connection {
                0 => DEFAULT_HTTP2_MAX_STREAMS,
                n => n,
            },
            idle_timeout: self.options.http_idle_timeout,
            read_header_timeout: self.options.http_read_header_timeout,
            goaway: self.options.goaway_chance > 0.0,
            ..ServeOptions::default()
        };
        let delay = self.options.shutdown_delay_duration;
        tokio::spawn(async move {
            let stop = async move {
                if os_signals {
                    shutdown_signal().await
                } else {
                    std::future::pending::<()>().await
                }
                initiated.trigger();
                if !delay.is_zero() {
                    tracing::info!(
                        ?delay,
                        "/readyz fails; serving until the shutdown delay ends"
                    );
                    tokio::time::sleep(delay).await;
                }
            };
            let served = serve_tls_with(listener, tls_config, router, stop, serve_options).await;
            if let Some(audit) = audit {
                // Shutdown has been signalled: the webhook sends what it holds, bounded.
                let flushed = tokio::time::timeout(AUDIT_FLUSH_TIMEOUT, audit.flushed());
                if flushed.await.is_err() {
                    tracing::warn!("audit events still buffered at exit were not sent");
                }
            }
            served?;
            Ok(())
        })
    }

    /// Health, discovery, OpenAPI and the resources, behind the filters.
    fn build_router(
        &self,
        groups: &[APIGroupInfo],
        state: APIState,
        health: HealthState,
        auth: AuthSetup,
        (flow_control, audit): (Option<Arc<FlowControl>>, Option<Arc<crate::audit::Auditor>>),
    ) -> Router {
        let state = Arc::new(state);
        let served: Vec<_> = groups.iter().map(APIGroupInfo::served).collect();
        let router = Router::new()
            .merge(health::router(health))
            .merge(
                DiscoveryDocuments::with_dynamic(&served, self.metrics.discovery_groups()).router(),
            )
            .merge(
                OpenAPIDocuments::build_with(&served, self.metrics.openapi_paths(), &self.openapi)
                    .router(),
            )
            .merge(self.metrics.router());
        // Resource paths, and 404 for anything else, are the fallback: no route parameters
        // to decode for every request.
        let router = self
            .extensions
            .routes(router)
            .fallback_service(endpoints::resource_fallback(state));
        let router = self.extensions.layers(router);
        let config = FilterConfig {
            authenticator: auth.authenticator,
            authorizer: auth.authorizer,
            always_allow_paths: auth.always_allow_paths,
            anonymous: auth.anonymous,
            request_timeout: Duration::from_secs(self.options.request_timeout_seconds),
            inflight: Arc::new(InflightLimits::new(
                self.options.max_requests_inflight,
                self.options.max_mutating_requests_inflight,
            )),
            flow_control,
            audit,
            long_running: filters::timeout::LongRunningSubresources::new(groups),
            goaway_chance: self.options.goaway_chance,
        };
        filters::apply(router, config)
    }

    /// What `/healthz`, `/livez`, `/readyz` and `/version` answer from.
    fn health_state(
        &self,
        backend: Arc<dyn Backend>,
        (shutdown, shutdown_initiated): (ShutdownSignal, ShutdownSignal),
        readyz: Vec<Arc<dyn ReadyzCheck>>,
        checks: HealthChecks,
    ) -> HealthState {
        let storage_check = match self.options.storage_backend {
            StorageBackendKind::Etcd3 => "etcd",
            StorageBackendKind::Postgres => "postgres",
            _ => "storage",
        };
        HealthState {
            backend,
            storage_check,
            shutdown,
            shutdown_initiated,
            readyz,
            version: Arc::new(self.version.clone()),
            checks,
        }
    }
}

/// Every group's storage on `config`: first what each group says its stores may find in
/// their keys (so a store another group reads is made knowing it), then the groups.
fn build_groups(
    groups: &[APIGroup],
    config: &StorageConfig,
) -> Result<Vec<APIGroupInfo>, ServerError> {
    for group in groups {
        group.declare(config);
    }
    groups.iter().map(|g| g.build(config)).collect()
}

/// Parses `args` with `about` as the description. Set after clap's derive has run: a
/// flattened option group's doc comment would otherwise stand as the server's description.
fn parse_cli(about: &str, args: impl IntoIterator<Item = std::ffi::OsString>) -> Cli {
    let matches = cli_command(about).get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn cli_command(about: &str) -> clap::Command {
    Cli::command().about(about.to_string()).long_about(None)
}

/// Re-registers the APIServices (new caBundle) and re-runs the deployment checks whenever the
/// serving certificate is replaced, until shutdown.
fn follow_serving_certificate(
    serving: &ServingCertificate,
    handle: AggregatorHandle,
    self_signed_ca: Option<String>,
    shutdown: ShutdownSignal,
) {
    let mut changes = serving.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            let chain = changes.borrow_and_update().cert.clone();
            if let Err(e) = handle
                .serving_certificate_changed(chain, self_signed_ca.clone())
                .await
            {
                tracing::warn!(error = %e, "re-registering APIServices after a serving certificate change");
            }
        }
    });
}

/// Admission CEL's `authorizer` asks the server's own authorizer (always-allowed groups, then
/// SubjectAccessReview in delegated mode), as kube hands admission its authorizer; kube's
/// library asks of any API version (`*`).
fn admission_authorizer(
    authorizer: Arc<dyn crate::auth::Authorizer>,
) -> crate::admission::AdmissionAuthorizer {
    use extension_apiserver_machinery::cel::authz::Decision;
    Arc::new(move |user, check| {
        let authorizer = authorizer.clone();
        Box::pin(async move {
            let attributes = crate::auth::authorizer::Attributes {
                user: &user,
                verb: &check.verb,
                resource_request: check.path.is_empty(),
                api_group: &check.group,
                api_version: "*",
                resource: &check.resource,
                subresource: &check.subresource,
                namespace: &check.namespace,
                name: &check.name,
                path: &check.path,
            };
            match authorizer.authorize(&attributes).await {
                Ok(answer) => Decision {
                    allowed: answer.is_allowed(),
                    reason: answer.reason,
                    error: String::new(),
                },
                Err(e) => Decision {
                    error: e.to_string(),
                    ..Decision::default()
                },
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::computed::{ComputedOptions, Provider};
    use crate::registry::rest::RestStorage;
    use crate::registry::store::Reader;
    use crate::registry::strategy::Strategy;
    use crate::runtime::Resource;

    #[test]
    fn help_starts_with_what_the_server_is() {
        for help in [
            cli_command("The wardle server").render_help(),
            cli_command("The wardle server").render_long_help(),
        ] {
            let help = help.to_string();
            assert!(help.starts_with("The wardle server\n"), "{help}");
            assert!(!help.contains("How the server finds"), "{help}");
            assert!(help.contains("--kubeconfig"), "{help}");
        }
        let default = cli_command(DEFAULT_ABOUT).render_long_help().to_string();
        assert!(default.starts_with(DEFAULT_ABOUT), "{default}");
    }

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use crate::registry::context::RequestContext;
    use crate::registry::options::WriteOptions;
    use crate::registry::rest::Creater;
    use crate::runtime::ResourceInfo;
    use crate::test_kinds::TEST_INFO;

    use crate::test_kinds::Flunder;

    impl Strategy for Flunder {}

    fn config() -> StorageConfig {
        let backend = Arc::new(crate::storage::MemoryBackend::new());
        StorageConfig::new(backend, "/registry", true, ShutdownSignal::new())
    }

    #[tokio::test]
    async fn storage_config_reads_the_stores_it_serves() {
        let config = config();
        let flunder =
            serde_json::json!({"metadata": {"name": "f", "namespace": "ns"}, "spec": {"x": 1}});
        let ctx = RequestContext::namespaced("ns");
        let store = config.store::<Flunder>();
        assert!(store.has_watch_cache());
        store
            .create(&ctx, flunder, &WriteOptions::default())
            .await
            .unwrap();
        let reader = config.reader::<Flunder>();
        let read = reader
            .get(Some("ns"), "f")
            .await
            .unwrap()
            .expect("the flunder");
        assert_eq!(read.spec["x"], 1);
        assert!(read.metadata.resource_version.is_some());
        assert!(reader.get(Some("ns"), "g").await.unwrap().is_none());
        assert_eq!(reader.list(None).await.unwrap().len(), 1);
        assert!(reader.list(Some("other")).await.unwrap().is_empty());
    }

    /// Flunders computed: the one `f` of namespace `ns`.
    struct Flunders;

    #[async_trait::async_trait]
    impl Provider for Flunders {
        type Object = Flunder;
        async fn list(&self, _: Option<&str>) -> crate::Result<Vec<Flunder>> {
            let mut flunder = Flunder::default();
            flunder.metadata.name = Some("f".into());
            flunder.metadata.namespace = Some("ns".into());
            Ok(vec![flunder])
        }
    }

    fn computed_group() -> APIGroup {
        APIGroup::new(TEST_INFO.group).version(TEST_INFO.version, |v| v.computed(Flunders))
    }

    /// One fischer per flunder, computed from the computed flunders.
    #[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    struct Fischer {
        #[serde(default)]
        metadata: ObjectMeta,
    }

    impl Resource for Fischer {
        const INFO: ResourceInfo = ResourceInfo {
            kind: "Fischer",
            plural: "fischers",
            singular: "fischer",
            ..TEST_INFO
        };
        fn metadata(&self) -> &ObjectMeta {
            &self.metadata
        }
        fn metadata_mut(&mut self) -> &mut ObjectMeta {
            &mut self.metadata
        }
    }

    struct Fischers(Reader<Flunder>);

    #[async_trait::async_trait]
    impl Provider for Fischers {
        type Object = Fischer;
        async fn list(&self, namespace: Option<&str>) -> crate::Result<Vec<Fischer>> {
            let flunders = self.0.list(namespace).await?;
            let fischer = |f: Flunder| Fischer {
                metadata: f.metadata,
            };
            Ok(flunders.into_iter().map(fischer).collect())
        }
    }

    #[tokio::test]
    async fn storage_config_reads_a_computed_kind_from_its_provider() {
        let config = config();
        // Fischers read flunders, whose factory runs after theirs.
        let group = APIGroup::new(TEST_INFO.group).version(TEST_INFO.version, |v| {
            v.computed_with(ComputedOptions::default(), |config| {
                Fischers(config.reader::<Flunder>())
            })
            .computed(Flunders)
        });
        build_groups(&[group], &config).unwrap();
        let fischers = config.reader::<Fischer>().list(None).await.unwrap();
        assert_eq!(fischers[0].metadata.name.as_deref(), Some("f"));
        let reader = config.reader::<Flunder>();
        assert_eq!(reader.list(None).await.unwrap().len(), 1);
        assert!(reader.get(Some("ns"), "f").await.unwrap().is_some());
        // The same reader for the strategies of every store.
        let from_set = config.stores().reader::<Flunder>().unwrap();
        assert_eq!(from_set.list(Some("ns")).await.unwrap().len(), 1);
        assert!(
            config.stores().get::<Flunder>().is_none(),
            "no store of its own"
        );
    }

    #[tokio::test]
    #[should_panic(
        expected = "flunders.wardle.example.com is computed (served with `computed`), it has no store; read it with `reader::<Flunder>()`"
    )]
    async fn a_computed_kind_has_no_store() {
        let config = config();
        build_groups(&[computed_group()], &config).unwrap();
        let _ = config.store::<Flunder>();
    }

    #[tokio::test]
    async fn a_kind_computed_by_two_providers_is_refused() {
        let group = APIGroup::new(TEST_INFO.group).version(TEST_INFO.version, |v| {
            v.computed(Flunders).computed(Flunders)
        });
        let Err(ServerError::Config(message)) = build_groups(&[group], &config()) else {
            panic!("two providers of flunders must be refused");
        };
        assert!(
            message.contains("flunders.wardle.example.com is served by two sources"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_storage_of_another_version_is_refused() {
        let info = ResourceInfo {
            version: "v2",
            ..TEST_INFO
        };
        let group = APIGroup::new(TEST_INFO.group).version(TEST_INFO.version, |v| {
            v.storage_with("flunders", move |_| RestStorage::new::<Flunder>(info))
        });
        let Err(ServerError::Config(message)) = group.build(&config()) else {
            panic!("a v2 storage under v1alpha1 must be refused");
        };
        assert!(message.contains("a resource of wardle.example.com/v2 was registered under wardle.example.com/v1alpha1"), "{message}");
    }
}
