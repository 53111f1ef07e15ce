//! [`TestServer`]: the user's groups served in-process over TLS on a loopback port, on a
//! store of the test's own, with a kube-rs client and a kubeconfig for kubectl.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use extension_apiserver::server::{
    APIGroup, APIServer, RunningServer, ServerOptions, StorageBackendKind,
};
use extension_apiserver::storage::Backend;

use super::{KubectlOutput, kubectl};

/// A server started for a test.
///
/// ```no_run
/// # async fn t(group: extension_apiserver::APIGroup) {
/// use extension_apiserver_testing::TestServer;
/// // In memory, certificates in a temporary directory removed when the server is dropped.
/// let server = TestServer::builder().group(group).start().await;
/// let client = server.client(); // a kube::Client, admin in standalone mode
/// let out = server.kubectl(&["get", "flunders", "-A"]);
/// assert!(out.success, "{}", out.stderr);
/// server.stop().await;
/// # }
/// ```
pub struct TestServer {
    /// Where it listens (127.0.0.1 and an ephemeral port).
    pub addr: SocketAddr,
    /// The admin kubeconfig (for kubectl's `--kubeconfig`, or kube-rs).
    pub kubeconfig: PathBuf,
    running: RunningServer,
    backend: Arc<dyn Backend>,
    client: Option<kube::Client>,
    /// The temporary directory the builder made; removed on drop.
    _dir: Option<TempDir>,
}

/// How to start a [`TestServer`]: [`TestServer::builder`].
pub struct TestServerBuilder {
    groups: Vec<APIGroup>,
    backend: StorageBackendKind,
    dir: Option<PathBuf>,
    configure: Vec<Configure>,
    extend: Vec<Extend>,
}

/// A change to the options, from [`TestServerBuilder::options`].
type Configure = Box<dyn FnOnce(&mut ServerOptions) + Send>;

/// A change to the server, from [`TestServerBuilder::extend`].
type Extend = Box<dyn FnOnce(APIServer) -> APIServer + Send>;

impl TestServerBuilder {
    /// Adds an API group (as [`APIServer::group`]).
    pub fn group(mut self, group: APIGroup) -> Self {
        self.groups.push(group);
        self
    }

    /// Adds API groups.
    pub fn groups(mut self, groups: impl IntoIterator<Item = APIGroup>) -> Self {
        self.groups.extend(groups);
        self
    }

    /// Stores objects in memory (the default).
    pub fn memory(mut self) -> Self {
        self.backend = StorageBackendKind::Memory;
        self
    }

    /// Stores objects in a SQLite file in the server's directory, as a deployed server does
    /// by default.
    pub fn sqlite(mut self) -> Self {
        self.backend = StorageBackendKind::Sqlite;
        self
    }

    /// Keeps certificates (and the SQLite file) in `dir` instead of a temporary directory
    /// removed with the server: for a restart on the same store, or to look at them.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Changes the options [`TestServer::options`] gives (a backend chosen with
    /// [`memory`](Self::memory) or [`sqlite`](Self::sqlite) is set before this runs).
    pub fn options(mut self, configure: impl FnOnce(&mut ServerOptions) + Send + 'static) -> Self {
        self.configure.push(Box::new(configure));
        self
    }

    /// Changes the [`APIServer`] before it starts: to add what a server of yours adds
    /// (layers, routes, checks, hooks, authenticators).
    ///
    /// ```no_run
    /// # async fn t() {
    /// use extension_apiserver_testing::TestServer;
    /// use extension_apiserver::axum::routing::get;
    /// let server = TestServer::builder()
    ///     .extend(|server| server.route("/hello", get(|| async { "hello" })))
    ///     .start()
    ///     .await;
    /// assert_eq!(server.kubectl(&["get", "--raw", "/hello"]).stdout, "hello");
    /// # }
    /// ```
    pub fn extend(mut self, extend: impl FnOnce(APIServer) -> APIServer + Send + 'static) -> Self {
        self.extend.push(Box::new(extend));
        self
    }

    /// Starts the server; panics when it cannot (a test has nothing better to do).
    pub async fn start(self) -> TestServer {
        let (dir, temp) = match self.dir {
            Some(dir) => (dir, None),
            None => {
                let temp = TempDir::new();
                (temp.0.clone(), Some(temp))
            }
        };
        let mut options = ServerOptions {
            storage_backend: self.backend,
            ..TestServer::options(&dir)
        };
        for configure in self.configure {
            configure(&mut options);
        }
        let (groups, extend) = (self.groups, self.extend);
        let mut server = TestServer::start_configured(options, move |server| {
            let server = groups.into_iter().fold(server, APIServer::group);
            extend.into_iter().fold(server, |s, f| f(s))
        })
        .await;
        server._dir = temp;
        server
    }
}

impl TestServer {
    /// A builder: no groups yet, in memory, in a temporary directory.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder {
            groups: Vec::new(),
            backend: StorageBackendKind::Memory,
            dir: None,
            configure: Vec::new(),
            extend: Vec::new(),
        }
    }

    /// Starts a server with `groups`, its SQLite file and certificates in `dir`.
    pub async fn start(dir: &Path, groups: Vec<APIGroup>) -> TestServer {
        Self::start_with(dir, groups, StorageBackendKind::Sqlite, 0).await
    }

    /// Starts a server on `backend`, on `port` (0: any free port).
    pub async fn start_with(
        dir: &Path,
        groups: Vec<APIGroup>,
        backend: StorageBackendKind,
        port: u16,
    ) -> TestServer {
        let options = ServerOptions {
            secure_port: port,
            storage_backend: backend,
            ..Self::options(dir)
        };
        Self::start_with_options(options, groups).await
    }

    /// The options [`TestServer::start`] uses: 127.0.0.1, any free port, certificates and
    /// the SQLite file in `dir`, standalone mode even inside a pod (give
    /// `auth.authentication_kubeconfig` / `auth.authorization_kubeconfig` for delegated mode).
    pub fn options(dir: &Path) -> ServerOptions {
        let mut options = ServerOptions {
            secure_port: 0,
            bind_address: [127, 0, 0, 1].into(),
            cert_dir: dir.join("certs"),
            sqlite_path: dir.join("apiserver.db"),
            ..ServerOptions::default()
        };
        options.auth.in_cluster = false;
        options
    }

    /// Starts a server with these options.
    pub async fn start_with_options(options: ServerOptions, groups: Vec<APIGroup>) -> TestServer {
        Self::start_configured(options, |server| {
            groups.into_iter().fold(server, APIServer::group)
        })
        .await
    }

    /// Starts a server with these options and what `configure` adds to it (groups,
    /// admission plugins, ...): e.g. the function a server's `main` also calls.
    pub async fn start_configured(
        options: ServerOptions,
        configure: impl FnOnce(APIServer) -> APIServer,
    ) -> TestServer {
        // The kit opens the backend itself to keep a handle on it (`compact`).
        let backend = extension_apiserver::server::open_backend(&options)
            .await
            .expect("the storage backend opens");
        let server = configure(APIServer::new(options).backend(backend.clone()));
        let running = server.start().await.expect("server starts");
        let client = admin_client(&running.kubeconfig).await;
        TestServer {
            addr: running.addr,
            kubeconfig: running.kubeconfig.clone(),
            running,
            backend,
            client,
            _dir: None,
        }
    }

    /// A kube-rs client for the server from its admin kubeconfig: over TLS, trusting the
    /// server's CA, with the admin's client certificate (trusted in standalone mode).
    pub fn client(&self) -> kube::Client {
        self.client
            .clone()
            .expect("a kube client from the admin kubeconfig")
    }

    /// The storage backend the server runs on.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Compacts storage at its current revision, as the compactor does after an interval:
    /// afterwards a `continue` token or a watch from an older resourceVersion that must be
    /// read from storage gets 410 `Expired`. On etcd3 this is etcd-wide.
    pub async fn compact(&self) {
        let revision = self
            .backend
            .current_revision()
            .await
            .expect("the current revision");
        self.backend
            .compact(revision)
            .await
            .expect("storage compacts");
    }

    /// Runs kubectl against the server (blocking; at most 60 s, then it is killed).
    pub fn kubectl(&self, args: &[&str]) -> KubectlOutput {
        self.kubectl_with_env(args, &[])
    }

    /// Runs kubectl with extra environment variables (`KUBE_EDITOR`, ...).
    pub fn kubectl_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> KubectlOutput {
        kubectl(&self.kubeconfig, args, env)
    }

    /// Starts a kubectl that keeps running against the server (`get -w`), to read its lines
    /// as they come.
    pub fn kubectl_watch(&self, args: &[&str]) -> super::KubectlWatch {
        super::KubectlWatch::start(&self.kubeconfig, args)
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) {
        self.running.shutdown().await.expect("server stops cleanly");
    }
}

/// The kube-rs client of `kubeconfig`; `None` when it cannot be built (reported by
/// [`TestServer::client`], since tests of delegated mode never ask for it).
async fn admin_client(kubeconfig: &Path) -> Option<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kubeconfig = Kubeconfig::read_from(kubeconfig).ok()?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .ok()?;
    kube::Client::try_from(config).ok()
}

/// A directory of the test's own under the system's temporary directory, removed on drop
/// (without a dependency on `tempfile` for this one use).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("apiserver-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a temporary directory for the test server");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
