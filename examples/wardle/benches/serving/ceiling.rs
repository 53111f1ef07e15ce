//! Ceilings measured beside the server in the same run: a bare axum server behind the very
//! same TLS configuration returning the bytes wardle returned (reads), and raw stores of the
//! same object bytes (writes): etcd-client puts, SQLite inserts and PostgreSQL inserts.

use std::net::TcpListener as StdListener;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use bytes::Bytes;
use extension_apiserver::server::tls::server_config;
use extension_apiserver::tls::certs::{CertKey, parse_certs_pem};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;

use crate::client::{Error, Sample};

/// Response bodies wardle gave, served again by the bare server.
#[derive(Debug, Default)]
pub struct Canned {
    /// `GET /get`: one Flunder.
    pub get: Bytes,
    /// `GET /list`: the full list.
    pub list: Bytes,
    /// `GET /page?i=N`: the pages of the `limit` walk, in order.
    pub pages: Vec<Bytes>,
    /// `POST /create` (201): a created Flunder.
    pub created: Bytes,
}

#[derive(serde::Deserialize)]
struct PageQuery {
    i: usize,
}

/// A bare axum server on its own runtime (as the server under test has its own process).
pub struct BareServer {
    /// The port on 127.0.0.1.
    pub port: u16,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BareServer {
    /// Serves `canned` with the serving certificate and client CA of wardle's `cert_dir`, the
    /// framework's rustls `ServerConfig` (ALPN h2 and http/1.1) and the same HTTP/2 stream limit.
    pub fn start(cert_dir: &Path, canned: Canned) -> Result<Self, Error> {
        let serving = CertKey::from_files(
            &cert_dir.join("apiserver.crt"),
            &cert_dir.join("apiserver.key"),
        )?;
        let client_ca = parse_certs_pem(&std::fs::read(cert_dir.join("client-ca.crt"))?)?;
        let acceptor = TlsAcceptor::from(server_config(&serving, Some(&client_ca))?);
        let listener = StdListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let router = Router::new()
            .route(
                "/get",
                get(|State(c): State<Arc<Canned>>| async move { json(&c.get) }),
            )
            .route(
                "/list",
                get(|State(c): State<Arc<Canned>>| async move { json(&c.list) }),
            )
            .route("/page", get(page))
            .route("/create", post(create))
            .with_state(Arc::new(canned));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name(THREAD_NAME)
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else {
                    return;
                };
                accept_loop(listener, acceptor, router, stopped).await;
            });
        });
        Ok(Self {
            port,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// The name of the bare server's threads (so that their CPU time can be told from the
/// client's, in the same process).
const THREAD_NAME: &str = "bare-server";

impl BareServer {
    /// CPU time the bare server's threads have used so far.
    pub fn cpu(&self) -> Result<Duration, Error> {
        crate::server::threads_cpu("/proc/self/task", Some(THREAD_NAME))
    }
}

impl Drop for BareServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn json(body: &Bytes) -> impl IntoResponse + use<> {
    ([(header::CONTENT_TYPE, "application/json")], body.clone())
}

async fn page(State(c): State<Arc<Canned>>, Query(q): Query<PageQuery>) -> impl IntoResponse {
    json(c.pages.get(q.i).unwrap_or(&c.get))
}

async fn create(State(c): State<Arc<Canned>>, _body: Bytes) -> impl IntoResponse {
    (StatusCode::CREATED, json(&c.created))
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http2().max_concurrent_streams(1000);
    let http = Arc::new(http);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (tcp, _) = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => continue,
            },
        };
        let (acceptor, router, http) = (acceptor.clone(), router.clone(), http.clone());
        connections.spawn(async move {
            let _ = tcp.set_nodelay(true);
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = TowerToHyperService::new(router);
            let _ = http.serve_connection(TokioIo::new(tls), service).await;
        });
    }
}

/// What a raw etcd write ceiling sends per key.
#[cfg(feature = "etcd")]
#[derive(Clone, Copy)]
pub enum EtcdWrite {
    /// A plain put.
    Put,
    /// A create transaction (compare `create_revision = 0`, then put): what the etcd3 backend
    /// sends for a create. Beside the puts it tells etcd's own price of a create from the
    /// server's.
    CreateTxn,
}

/// Raw etcd writes of `value` under a fresh prefix, `concurrency` in flight over one client
/// (as the etcd3 backend uses one). The keys stay until [`delete_etcd_writes`]: deleted
/// keys slow etcd 3.4's writes until the next compaction (create transactions took about a
/// tenth longer after 2,000 deletes, three and a half times as long after 10,000; book:
/// Benchmarks), so the ceilings are all measured before any of their keys are deleted.
#[cfg(feature = "etcd")]
pub async fn etcd_writes(
    servers: &str,
    write: EtcdWrite,
    value: Bytes,
    count: usize,
    concurrency: usize,
) -> Result<Sample, Error> {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let client = etcd_client::Client::connect([servers], None).await?;
    let prefix: Arc<str> = format!("{}{}/", ceiling_prefix(), crate::server::unique()).into();
    let kv = client.kv_client();
    let keys = prefix.clone();
    let sample = crate::client::drive(count, concurrency, move |i| {
        let (mut kv, key, value) = (kv.clone(), format!("{keys}{i:07}"), value.to_vec());
        async move {
            match write {
                EtcdWrite::Put => drop(kv.put(key, value, None).await?),
                EtcdWrite::CreateTxn => {
                    let txn = Txn::new()
                        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(key, value, None)]);
                    drop(kv.txn(txn).await?);
                }
            }
            Ok(())
        }
    })
    .await?;
    Ok(sample)
}

/// Where this process's [`etcd_writes`] put their keys.
#[cfg(feature = "etcd")]
fn ceiling_prefix() -> String {
    format!("/bench-ceiling-{}/", std::process::id())
}

/// Deletes the keys of this process's [`etcd_writes`].
#[cfg(feature = "etcd")]
pub async fn delete_etcd_writes(servers: &str) -> Result<(), Error> {
    let client = etcd_client::Client::connect([servers], None).await?;
    delete_prefix(client, &ceiling_prefix()).await
}

/// Deletes every etcd key under `prefix`, e.g. a bench run's.
#[cfg(feature = "etcd")]
pub async fn delete_prefix(mut client: etcd_client::Client, prefix: &str) -> Result<(), Error> {
    let all = etcd_client::DeleteOptions::new().with_prefix();
    client.delete(prefix, Some(all)).await?;
    Ok(())
}

/// Raw SQLite inserts of `value` into a fresh database at `path`, with the SQLite backend's
/// settings (WAL, `synchronous=FULL`, one transaction per write) and its shape: one writer
/// connection behind a lock, used from the blocking pool by `concurrency` callers.
///
/// The shape matters on virtual machines: a lone thread waiting in `fsync` lets the CPU go
/// idle and each wake-up adds latency, so a plain loop of inserts is slower than the server.
pub async fn sqlite_inserts(
    path: &Path,
    value: Bytes,
    count: usize,
    concurrency: usize,
) -> Result<Sample, Error> {
    let conn = rusqlite::Connection::open(path)?;
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!("sqlite journal mode {mode}, not wal").into());
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch("CREATE TABLE raw (key BLOB PRIMARY KEY, value BLOB NOT NULL)")?;
    let conn = Arc::new(Mutex::new(conn));
    crate::client::drive(count, concurrency, move |i| {
        let (conn, value) = (conn.clone(), value.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                let insert = "INSERT INTO raw (key, value) VALUES (?1, ?2)";
                let key = format!("f-{i:07}");
                conn.prepare_cached(insert)?
                    .execute(rusqlite::params![key.as_bytes(), &value[..]])?;
                Ok::<_, Error>(())
            })
            .await?
        }
    })
    .await
}

/// Raw PostgreSQL inserts of `value` into a table of a fresh schema (dropped afterwards), one
/// autocommitted statement each, `concurrency` in flight over as many connections as the
/// backend's default pool (16).
#[cfg(feature = "postgres")]
pub async fn postgres_inserts(
    url: &str,
    value: Bytes,
    count: usize,
    concurrency: usize,
) -> Result<Sample, Error> {
    let schema = format!(
        "bench_raw_{}_{}",
        std::process::id(),
        crate::server::unique()
    );
    let setup = postgres_connect(url).await?;
    setup
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.raw (key BYTEA PRIMARY KEY, value BYTEA NOT NULL)"
        ))
        .await?;
    let insert = format!("INSERT INTO {schema}.raw (key, value) VALUES ($1, $2)");
    let mut connections = Vec::new();
    for _ in 0..concurrency.clamp(1, 16) {
        let client = postgres_connect(url).await?;
        let statement = client.prepare(&insert).await?;
        connections.push((client, statement));
    }
    let connections = Arc::new(connections);
    let sample = crate::client::drive(count, concurrency, move |i| {
        let (connections, value) = (connections.clone(), value.clone());
        async move {
            let (client, statement) = &connections[i % connections.len()];
            let key = format!("f-{i:07}");
            client
                .execute(statement, &[&key.as_bytes(), &&value[..]])
                .await?;
            Ok::<_, Error>(())
        }
    })
    .await?;
    setup
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await?;
    Ok(sample)
}

/// Drops a run's PostgreSQL schema and everything in it.
#[cfg(feature = "postgres")]
pub async fn drop_schema(url: &str, schema: &str) -> Result<(), Error> {
    let client = postgres_connect(url).await?;
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await?;
    Ok(())
}

#[cfg(feature = "postgres")]
async fn postgres_connect(url: &str) -> Result<tokio_postgres::Client, Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}
