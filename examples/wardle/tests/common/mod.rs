//! Helpers shared by the wardle end-to-end tests, and [`backend_tests!`], which runs each
//! test on every storage backend.
#![allow(dead_code, unused_imports, unused_macros)] // each test file uses its own subset

use std::path::Path;

use extension_apiserver::server::{ServerOptions, StorageBackendKind};
use extension_apiserver_testing::{KubectlOutput, TestServer};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use wardle::{Flunder, FlunderSpec};

#[cfg(feature = "postgres")]
pub mod postgres_cluster;

/// The storage backend a test's server runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// In memory: gone with the server.
    Memory,
    /// A fresh SQLite file in the test's directory.
    Sqlite,
    /// A fresh key prefix on the etcd named by `APISERVER_TEST_ETCD`.
    #[cfg(feature = "etcd")]
    Etcd3,
    /// A fresh schema in the PostgreSQL named by `APISERVER_TEST_POSTGRES`.
    #[cfg(feature = "postgres")]
    Postgres,
}

/// The PostgreSQL the postgres variants use: `APISERVER_TEST_POSTGRES`, default
/// `postgres://postgres@127.0.0.1:54320/apiserver` (where `.ci/postgres.sh start` runs one).
#[cfg(feature = "postgres")]
pub fn postgres_url() -> String {
    std::env::var("APISERVER_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:54320/apiserver".into())
}

/// A PostgreSQL schema no other test (in this run or an earlier one) uses.
pub fn postgres_schema() -> String {
    format!("wardle_e2e_{}", uuid::Uuid::new_v4().simple())
}

/// The etcd the etcd3 variants use: `APISERVER_TEST_ETCD`, default `http://127.0.0.1:23790`
/// (where `.ci/etcd.sh start` runs one).
#[cfg(feature = "etcd")]
pub fn etcd_endpoint() -> String {
    std::env::var("APISERVER_TEST_ETCD").unwrap_or_else(|_| "http://127.0.0.1:23790".into())
}

impl Backend {
    /// The server options of a test in `dir`: loopback, any free port, certificates (and the
    /// SQLite file) in `dir`. On etcd the keys live under a prefix of their own, so tests
    /// sharing one etcd never see each other's objects; a server restarted with the same
    /// options (clone them) finds its objects again.
    pub fn options(self, dir: &Path) -> ServerOptions {
        let options = TestServer::options(dir);
        match self {
            Backend::Memory => ServerOptions {
                storage_backend: StorageBackendKind::Memory,
                ..options
            },
            Backend::Sqlite => ServerOptions {
                storage_backend: StorageBackendKind::Sqlite,
                ..options
            },
            #[cfg(feature = "etcd")]
            Backend::Etcd3 => ServerOptions {
                storage_backend: StorageBackendKind::Etcd3,
                etcd_servers: vec![etcd_endpoint()],
                storage_prefix: etcd_prefix(),
                // Compaction is etcd-wide: one test server's compactor would take the history
                // other tests on the same etcd still watch from.
                compaction_interval_seconds: 0,
                ..options
            },
            // A schema of its own: its own revisions and compaction, shared with no other test.
            #[cfg(feature = "postgres")]
            Backend::Postgres => ServerOptions {
                storage_backend: StorageBackendKind::Postgres,
                postgres_url: Some(postgres_url()),
                postgres_schema: postgres_schema(),
                postgres_pool_size: 4,
                ..options
            },
        }
    }
}

/// A key prefix no other test (in this run or an earlier one on the same etcd) uses.
pub fn etcd_prefix() -> String {
    format!("/wardle-e2e/{}", uuid::Uuid::new_v4())
}

/// The wardle server on `backend`, certificates (and the SQLite file) in `dir`.
pub async fn start(backend: Backend, dir: &Path) -> TestServer {
    serve(backend.options(dir)).await
}

/// The wardle server with these options. On etcd3 it first checks that etcd answers, and
/// fails the test saying so when it does not: a skipped etcd variant would hide the gap.
pub async fn serve(options: ServerOptions) -> TestServer {
    #[cfg(feature = "etcd")]
    if options.storage_backend == StorageBackendKind::Etcd3 {
        etcd_ready(&options.etcd_servers).await;
    }
    #[cfg(feature = "postgres")]
    if options.storage_backend == StorageBackendKind::Postgres {
        postgres_ready(&options).await;
    }
    TestServer::start_configured(options, wardle::configure).await
}

/// Panics with a clear message unless the etcd at `endpoints` answers.
#[cfg(feature = "etcd")]
pub async fn etcd_ready(endpoints: &[String]) {
    use extension_apiserver::storage::{Backend as _, Etcd3Backend, Etcd3Options};
    let backend = Etcd3Backend::connect(endpoints, Etcd3Options::default())
        .await
        .unwrap_or_else(|e| panic!("no etcd client for {endpoints:?}: {e}"));
    if let Err(e) = backend.ready().await {
        panic!(
            "etcd at {endpoints:?} (APISERVER_TEST_ETCD) is not ready: {e}; \
             `bash .ci/etcd.sh start` runs one on 127.0.0.1:23790"
        );
    }
}

/// Panics with a clear message unless the PostgreSQL of `options` answers.
#[cfg(feature = "postgres")]
pub async fn postgres_ready(options: &ServerOptions) {
    use extension_apiserver::storage::{
        Backend as _, PostgresBackend, PostgresOptions, PostgresTls,
    };
    let url = options.postgres_url.clone();
    let tls = options.postgres_cafile.as_ref().map(|ca| {
        PostgresTls::from_files(
            ca,
            options.postgres_certfile.as_deref(),
            options.postgres_keyfile.as_deref(),
        )
        .unwrap_or_else(|e| panic!("PostgreSQL TLS files: {e}"))
    });
    let connect = PostgresBackend::connect(PostgresOptions {
        url: url.clone(),
        schema: options.postgres_schema.clone(),
        pool_size: 1,
        tls,
        ..PostgresOptions::default()
    });
    let ready = match connect.await {
        Ok(backend) => backend.ready().await,
        Err(e) => Err(e),
    };
    if let Err(e) = ready {
        panic!(
            "PostgreSQL at {url:?} (APISERVER_TEST_POSTGRES) does not answer: {e}; \
             `bash .ci/postgres.sh start` runs one on 127.0.0.1:54320"
        );
    }
}

/// Generates one `#[tokio::test]` per storage backend for each named `async fn(Backend)` of
/// the test file: `memory::NAME`, `sqlite::NAME`, with the `etcd` feature `etcd3::NAME` and
/// with the `postgres` feature `postgres::NAME`.
///
/// Tests under `persistent:` restart the server and expect their objects back, which only a
/// persistent backend can give: they run on SQLite, etcd3 and PostgreSQL, not in memory.
///
/// ```ignore
/// backend_tests! {
///     all: [create_and_get, watch],
///     persistent: [survives_restart],
/// }
/// ```
macro_rules! backend_tests {
    (
        $(all: [$($all:ident),* $(,)?] $(,)?)?
        $(persistent: [$($persistent:ident),* $(,)?] $(,)?)?
    ) => {
        mod memory {
            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $all() {
                    super::$all($crate::common::Backend::Memory).await
                }
            )*)?
        }
        mod sqlite {
            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $all() {
                    super::$all($crate::common::Backend::Sqlite).await
                }
            )*)?
            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $persistent() {
                    super::$persistent($crate::common::Backend::Sqlite).await
                }
            )*)?
        }
        #[cfg(feature = "etcd")]
        mod etcd3 {
            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $all() {
                    super::$all($crate::common::Backend::Etcd3).await
                }
            )*)?
            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $persistent() {
                    super::$persistent($crate::common::Backend::Etcd3).await
                }
            )*)?
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $all() {
                    super::$all($crate::common::Backend::Postgres).await
                }
            )*)?
            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $persistent() {
                    super::$persistent($crate::common::Backend::Postgres).await
                }
            )*)?
        }
    };
}
pub(crate) use backend_tests;

/// kube-rs configuration from the server's admin kubeconfig.
pub async fn config(server: &TestServer) -> Config {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).unwrap();
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap()
}

/// A kube-rs client authenticated as the admin.
pub async fn client(server: &TestServer) -> Client {
    Client::try_from(config(server).await).unwrap()
}

/// An admin client of `server` that does not retry: kube-rs retries 503s by default, which
/// would hide the answers the outage tests check.
pub async fn no_retry_client(server: &TestServer) -> Client {
    let mut config = config(server).await;
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

/// An answer: code and body.
pub struct Reply {
    pub code: u16,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Sends one request (a JSON body when not empty). The bound only keeps a broken server from
/// hanging the test; the outage tests tell a storage error (503) from the server's own 60 s
/// request timeout (a 504) by it.
pub async fn send(client: &Client, method: &str, path: &str, body: &str) -> Reply {
    use std::time::Duration;
    let mut request = http::Request::builder().method(method).uri(path);
    if !body.is_empty() {
        request = request.header("content-type", "application/json");
    }
    let request = request
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(90), client.send(request))
        .await
        .expect("an answer")
        .expect("request sent");
    let code = response.status().as_u16();
    let body = tokio::time::timeout(
        Duration::from_secs(90),
        response.into_body().collect_bytes(),
    )
    .await
    .expect("a body")
    .expect("body read");
    Reply {
        code,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A flunder in `default` as JSON, for [`send`].
pub fn flunder_json(name: &str) -> String {
    serde_json::to_string(&flunder(name, "other")).unwrap()
}

/// The resourceVersion of a list of flunders in `default`: where a watch of what follows
/// starts.
pub async fn list_rv(api: &kube::Api<Flunder>) -> String {
    api.list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

/// A flunder in no particular namespace referring to `reference`.
pub fn flunder(name: &str, reference: &str) -> Flunder {
    let mut f = Flunder {
        spec: FlunderSpec {
            reference: Some(reference.into()),
            reference_type: None,
        },
        ..Flunder::default()
    };
    f.metadata.name = Some(name.into());
    f
}

/// A flunder manifest in namespace `default`; `labels` is the inside of a YAML flow map.
pub fn flunder_yaml(name: &str, reference: &str, labels: &str) -> String {
    format!(
        "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{{labels}}}\nspec:\n  reference: {reference}\n"
    )
}

/// kubectl's stdout, after asserting it succeeded.
#[track_caller]
pub fn ok(out: KubectlOutput) -> String {
    assert!(
        out.success,
        "kubectl failed:\nstdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    out.stdout
}

/// Writes `body` to `dir/file` and returns the path.
pub fn write(dir: &Path, file: &str, body: &str) -> String {
    let path = dir.join(file);
    std::fs::write(&path, body).unwrap();
    path.to_string_lossy().into_owned()
}
