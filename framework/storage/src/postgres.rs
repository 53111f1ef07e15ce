//! A [`Backend`] on PostgreSQL, through tokio-postgres and a deadpool pool (feature `postgres`).
//!
//! The layout is the SQLite backend's (and kine's `sqllog`): one `log` table with a row per
//! revision, `live` pointing each existing key at its latest row, `meta` holding the schema
//! version and the compacted revision. Every table lives in a PostgreSQL schema of the
//! server's own, so several servers (or tenants) share one database.
//!
//! Revisions: a write takes a transaction-level advisory lock of the schema, reads
//! `MAX(revision)`, and writes `MAX + 1`. The lock is held until the commit is visible, so
//! commit order equals revision order and a reader that sees revision `R` sees every revision
//! below it: a watcher reading `revision > last` can never miss a later-committed lower
//! revision (what a sequence would allow).
//!
//! Writes: one task per server commits them (`write_loop`), every write waiting at that
//! moment in one transaction (group commit), each checked in turn against what the writes
//! before it left and given the next revision. A lock held through each commit's flush of the
//! WAL would otherwise bound a server to one write per flush.
//!
//! Watches: every watcher reads the log after its last revision (the loop the SQLite backend
//! uses too); it is woken by this server's own writes, by a `NOTIFY` that
//! every write sends on commit (other servers' writes), and by a poll of `MAX(revision)`
//! every [`PostgresOptions::poll_interval`], so a notification lost while the listening
//! connection reconnects delays an event but never loses it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use futures::future::BoxFuture;
use rustls::pki_types::CertificateDer;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::config::{SslMode, TargetSessionAttrs};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Config, IsolationLevel, Row};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::backend::{
    Backend, Event, EventType, KeyValue, ListRequest, ListResult, ProgressStream, Revision,
    StorageError,
};
use super::mvcc::{self, KeyRange, LogRow, Pending, Write};
use super::notify::{EventBatch, EventSource, Notifier, SCAN_WINDOW};
use super::shared_read::SharedRounds;
use crate::tls::certs::{CertKey, parse_certs_pem};
use crate::tls::{TlsError, crypto_provider, root_store};

const SCHEMA_VERSION: i64 = 1;

/// The tables, created in the server's schema (the connections' `search_path`).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS log (
    revision BIGINT PRIMARY KEY,
    key BYTEA NOT NULL,
    value BYTEA,
    create_revision BIGINT NOT NULL,
    prev_revision BIGINT,
    deleted BOOLEAN NOT NULL
);
CREATE INDEX IF NOT EXISTS log_key_revision ON log (key, revision);
CREATE TABLE IF NOT EXISTS live (
    key BYTEA PRIMARY KEY,
    revision BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
";

const LOCK: &str = "SELECT pg_advisory_xact_lock($1)";
const MAX_REVISION: &str = "SELECT COALESCE(MAX(revision), 0)::BIGINT FROM log";
const COMPACTED: &str = "SELECT value FROM meta WHERE name = 'compacted'";
const GET: &str = "SELECT c.key, l.value, l.create_revision, l.revision
    FROM live c JOIN log l ON l.revision = c.revision WHERE c.key = $1";
const LIST_LATEST: &str = "SELECT c.key, l.value, l.create_revision, l.revision
    FROM live c JOIN log l ON l.revision = c.revision
    WHERE c.key >= $1 AND c.key < $2 ORDER BY c.key LIMIT $3";
const COUNT_LATEST: &str = "SELECT COUNT(*) FROM live WHERE key >= $1 AND key < $2";
/// A key's row visible at `$3`: its newest row at or before `$3`, unless that is a delete.
macro_rules! visible_at {
    () => {
        "l.key >= $1 AND l.key < $2 AND l.revision <= $3 AND NOT l.deleted
        AND NOT EXISTS (SELECT 1 FROM log n
            WHERE n.key = l.key AND n.revision > l.revision AND n.revision <= $3)"
    };
}
const LIST_AT: &str = concat!(
    "SELECT l.key, l.value, l.create_revision, l.revision FROM log l WHERE ",
    visible_at!(),
    " ORDER BY l.key LIMIT $4"
);
const COUNT_AT: &str = concat!("SELECT COUNT(*) FROM log l WHERE ", visible_at!());
/// What a batch of writes reads under the lock, in one round trip: the store's revision and
/// the latest row of each of the keys `$1` (NULLs for a key that has none), a row per key. A
/// statement of its own after the lock, so that its snapshot sees the previous writer's
/// commit.
const READ_FOR_WRITES: &str = "SELECT (SELECT COALESCE(MAX(revision), 0)::BIGINT FROM log),
        k.key, l.value, l.create_revision, l.revision
    FROM UNNEST($1::BYTEA[]) AS k (key) LEFT JOIN live c ON c.key = k.key
    LEFT JOIN log l ON l.revision = c.revision";
/// A put, in one statement: the log row and the key's live row.
const WRITE_PUT: &str = "WITH logged AS (INSERT INTO log
        (revision, key, value, create_revision, prev_revision, deleted)
        VALUES ($1, $2, $3, $4, $5, $6))
    INSERT INTO live (key, revision) VALUES ($2, $1)
        ON CONFLICT (key) DO UPDATE SET revision = excluded.revision";
/// A delete, as [`WRITE_PUT`] but removing the live row.
const WRITE_DELETE: &str = "WITH logged AS (INSERT INTO log
        (revision, key, value, create_revision, prev_revision, deleted)
        VALUES ($1, $2, $3, $4, $5, $6))
    DELETE FROM live WHERE key = $2";
/// The notification the listeners get when a batch commits (`$1` channel, `$2` its last
/// revision).
const NOTIFY: &str = "SELECT pg_notify($1, $2)";
const EVENTS: &str = "SELECT l.revision, l.key, l.value, l.create_revision, l.deleted,
        p.value, p.create_revision, p.revision
    FROM log l LEFT JOIN log p ON p.revision = l.prev_revision
    WHERE l.revision > $1 AND l.revision <= $2 AND l.key >= $3 AND l.key < $4
    ORDER BY l.revision LIMIT $5";
/// Keeps, below the compacted revision `$1`, only each key's newest row: reads at `$1` need
/// it, and so does the key's first later event (as its previous value). As SQLite's.
const COMPACT: [&str; 3] = [
    "DELETE FROM log WHERE revision < $1 AND EXISTS (SELECT 1 FROM log n
        WHERE n.key = log.key AND n.revision > log.revision AND n.revision < $1)",
    "DELETE FROM log WHERE revision < $1 AND deleted",
    "INSERT INTO meta (name, value) VALUES ('compacted', $1)
        ON CONFLICT (name) DO UPDATE SET value = excluded.value",
];

/// How to reach PostgreSQL and where to keep the data.
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// A libpq connection URL or key=value string (`postgres://user@host:5432/db`). Whatever
    /// it leaves out comes from the usual environment, as libpq takes it: `PGHOST`, `PGPORT`,
    /// `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGAPPNAME`, `PGSSLMODE`, `PGCONNECT_TIMEOUT`.
    /// `None`: the environment alone.
    pub url: Option<String>,
    /// The PostgreSQL schema holding this server's tables, created when missing. Servers
    /// that share it share their data (replicas); servers with schemas of their own share
    /// only the database. Lowercase letters, digits and `_`, at most 48 characters.
    pub schema: String,
    /// At most this many connections in the pool (one more listens for notifications).
    pub pool_size: usize,
    /// TLS to the database. Without it the connection is in plain text (`sslmode=disable`).
    pub tls: Option<PostgresTls>,
    /// How long to wait for a connection (TCP, TLS and authentication).
    pub connect_timeout: Duration,
    /// How long one read or write may take (waiting for a pooled connection included)
    /// before it fails with [`StorageError::Unavailable`] (HTTP 503).
    pub request_timeout: Duration,
    /// How long one statement may run on the database (PostgreSQL's `statement_timeout`, set
    /// on every connection) before the database itself cancels it and the call fails with
    /// [`StorageError::Timeout`] (HTTP 504). Without it a statement the server gave up on
    /// (past [`request_timeout`](Self::request_timeout)) would go on running, holding locks
    /// and a connection. `ZERO`: no limit. While it is set, the server waits for the
    /// database's own answer a second longer than the larger of the two, so that a statement
    /// too slow gets the 504 and only a database that does not answer at all the 503.
    pub statement_timeout: Duration,
    /// How long a list may take, in place of both timeouts above: a page of a large
    /// collection, or its count, may take longer than one key (kube-apiserver reads under the
    /// request's deadline, 60 s by default). `None`: as any other call.
    pub list_timeout: Option<Duration>,
    /// How long the readiness check (`/readyz`) waits for the database.
    pub ready_timeout: Duration,
    /// How often the store's revision is polled, for writes whose notification was lost
    /// (the listening connection was down).
    pub poll_interval: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            url: None,
            schema: "apiserver".to_owned(),
            pool_size: 16,
            tls: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            list_timeout: Some(Duration::from_secs(60)),
            ready_timeout: Duration::from_secs(2),
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// TLS to PostgreSQL: the CA bundle the server's certificate is verified against (with its
/// host name, as libpq's `sslmode=verify-full`) and, for a server that asks for one
/// (`clientcert=verify-full` in `pg_hba.conf`), a client certificate and key. All PEM.
#[derive(Clone)]
pub struct PostgresTls {
    ca: Vec<CertificateDer<'static>>,
    identity: Option<CertKey>,
}

impl std::fmt::Debug for PostgresTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresTls")
            .field("ca_certificates", &self.ca.len())
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

impl PostgresTls {
    /// From PEM data: the CA bundle, and an optional client certificate chain with its key.
    pub fn from_pem(ca_pem: &[u8], identity: Option<(&[u8], &[u8])>) -> Result<Self, TlsError> {
        let ca = parse_certs_pem(ca_pem)?;
        root_store(&ca)?;
        let identity = identity
            .map(|(cert, key)| CertKey::from_pem(cert, key))
            .transpose()?;
        Ok(Self { ca, identity })
    }

    /// Reads `--postgres-cafile`, `--postgres-certfile` and `--postgres-keyfile`. A
    /// certificate needs its key and the other way round; a file that cannot be read or
    /// parsed is an error naming it.
    pub fn from_files(
        ca_file: &Path,
        cert_file: Option<&Path>,
        key_file: Option<&Path>,
    ) -> Result<Self, TlsError> {
        let read = |path: &Path| std::fs::read(path).map_err(|e| TlsError::io(path, e));
        let ca_pem = read(ca_file)?;
        let identity = match (cert_file, key_file) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            (None, None) => None,
            _ => {
                return Err(TlsError::Invalid(
                    "a client certificate for PostgreSQL needs both a certificate and a key file"
                        .into(),
                ));
            }
        };
        let ca = parse_certs_pem(&ca_pem).map_err(named(ca_file))?;
        root_store(&ca).map_err(named(ca_file))?;
        let identity = match (&identity, cert_file) {
            (Some((cert, key)), Some(cert_file)) => {
                Some(CertKey::from_pem(cert, key).map_err(named(cert_file))?)
            }
            _ => None,
        };
        Ok(Self { ca, identity })
    }

    fn connector(&self) -> Result<MakeRustlsConnect, TlsError> {
        let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(root_store(&self.ca)?);
        let config = match &self.identity {
            Some(identity) => builder
                .with_client_auth_cert(identity.cert_chain.clone(), identity.key.clone_key())?,
            None => builder.with_no_client_auth(),
        };
        Ok(MakeRustlsConnect::new(config))
    }
}

/// Names the file a TLS error came from.
fn named(path: &Path) -> impl Fn(TlsError) -> TlsError + '_ {
    move |e| TlsError::Invalid(format!("{}: {e}", path.display()))
}

/// A storage backend on PostgreSQL.
#[derive(Debug)]
pub struct PostgresBackend {
    db: Arc<Db>,
    notifier: Notifier,
    ready_timeout: Duration,
    /// The writer's queue ([`write_loop`]).
    writes: mpsc::UnboundedSender<Pending>,
    /// The reads of the revision, shared by the consistent reads waiting for one.
    reads: Arc<SharedRounds<Revision>>,
    /// The listener, the poller and the writer, stopped when the backend is dropped.
    _tasks: Vec<AbortOnDrop>,
}

impl PostgresBackend {
    /// Connects, creates or migrates the schema and its tables, and starts listening for
    /// other servers' writes.
    ///
    /// A database that does not answer yet is waited for, as etcd is: this succeeds, and
    /// every call (and [`Backend::ready`]) fails with [`StorageError::Unavailable`] until it
    /// answers; the first call that reaches it creates the tables. One that answers and
    /// refuses (a bad password or certificate, a schema newer than this build's) is an error
    /// here.
    pub async fn connect(options: PostgresOptions) -> Result<Self, StorageError> {
        check_schema_name(&options.schema)?;
        let mut config = config_from(options.url.as_deref(), env_var)?;
        config.connect_timeout(
            *config
                .get_connect_timeout()
                .unwrap_or(&options.connect_timeout),
        );
        // Every statement below names tables without a schema: the search path picks ours.
        // The name is checked above to need no quoting. And the statement timeout, so that
        // the database stops what the server gave up on.
        let session = format!(
            "-c search_path={} -c statement_timeout={}",
            options.schema,
            options.statement_timeout.as_millis()
        );
        let all = match config.get_options() {
            Some(given) if !given.is_empty() => format!("{given} {session}"),
            _ => session,
        };
        config.options(all);
        let tls = match &options.tls {
            Some(tls) => {
                if config.get_ssl_mode() == SslMode::Prefer {
                    config.ssl_mode(SslMode::Require);
                }
                tls.connector()
                    .map_err(|e| StorageError::Internal(format!("postgres TLS: {e}")))?
            }
            None if config.get_ssl_mode() == SslMode::Require => {
                return Err(StorageError::Internal(
                    "postgres: sslmode=require needs the CA that signed the server's \
                     certificate (--postgres-cafile)"
                        .into(),
                ));
            }
            None => {
                config.ssl_mode(SslMode::Disable);
                // Never used: no TLS is negotiated.
                PostgresTls::plain_connector()
            }
        };
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.request_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| StorageError::Internal(format!("postgres pool: {e}")))?;
        let deadline = if options.statement_timeout.is_zero() {
            options.request_timeout
        } else {
            options.request_timeout.max(options.statement_timeout) + Duration::from_secs(1)
        };
        // A list's own limit, where it is longer than another call's: the wait for it and,
        // when statements are limited at all, the statements of its transaction.
        let list = options
            .list_timeout
            .filter(|limit| *limit > options.request_timeout.max(options.statement_timeout));
        let list_deadline = list.map_or(deadline, |limit| limit + Duration::from_secs(1));
        let list_statement_timeout = list.filter(|_| !options.statement_timeout.is_zero());
        let db = Arc::new(Db {
            pool,
            deadline,
            list_deadline,
            list_statement_timeout,
            lock: lock_key(&options.schema),
            channel: format!("apiserver_{}", options.schema),
            schema: options.schema.clone(),
            migrated: tokio::sync::OnceCell::new(),
        });
        // An unreachable database is waited for, as etcd is: the server starts, `/readyz`
        // fails and requests get 503 until it answers (and the schema is made then). One
        // that answers and refuses (authentication, a newer schema) stops the start.
        let revision = match db.call(db.max_revision()).await {
            Ok(revision) => revision,
            Err(StorageError::Unavailable(reason)) => {
                tracing::warn!(%reason, "postgres does not answer yet; retrying in the background");
                0
            }
            Err(error) => return Err(error),
        };
        let notifier = Notifier::new(revision);
        let (writes, queue) = mpsc::unbounded_channel();
        let tasks = vec![
            AbortOnDrop(tokio::spawn(write_loop(
                Arc::clone(&db),
                notifier.clone(),
                queue,
            ))),
            AbortOnDrop(tokio::spawn(listen(
                config,
                tls,
                db.channel.clone(),
                Arc::clone(&db),
                notifier.clone(),
                options.poll_interval,
            ))),
            AbortOnDrop(tokio::spawn(poll(
                Arc::clone(&db),
                notifier.clone(),
                options.poll_interval,
            ))),
        ];
        Ok(Self {
            db,
            notifier,
            ready_timeout: options.ready_timeout,
            writes,
            reads: Arc::new(SharedRounds::new(1)),
            _tasks: tasks,
        })
    }

    /// Hands the write to the writer ([`write_loop`]) and waits for its commit, within the
    /// deadline of a call: one that passes while the write still waits is never made.
    async fn write(&self, key: &str, write: Write) -> Result<KeyValue, StorageError> {
        let (pending, answer) = Pending::new(key, write);
        let stopped = || StorageError::Unavailable("postgres: the writer stopped".into());
        self.writes.send(pending).map_err(|_| stopped())?;
        match tokio::time::timeout(self.db.deadline, answer).await {
            Ok(Ok(result)) => result.map(|event| event.kv),
            Ok(Err(_)) => Err(stopped()),
            Err(_) => Err(StorageError::Unavailable(format!(
                "postgres did not answer within {:?}",
                self.db.deadline
            ))),
        }
    }
}

impl PostgresTls {
    /// A connector for configurations that never negotiate TLS (`sslmode=disable`).
    fn plain_connector() -> MakeRustlsConnect {
        let config = rustls::ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .expect("the provider supports the default versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        MakeRustlsConnect::new(config)
    }
}

#[async_trait]
impl Backend for PostgresBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        self.db
            .call(async {
                let client = self.db.client().await?;
                let statement = client.prepare_cached(GET).await?;
                let row = client.query_opt(&statement, &[&key.as_bytes()]).await?;
                row.as_ref().map(key_value).transpose()
            })
            .await
    }

    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        let db = &self.db;
        db.call_within(db.list_deadline, list(db, request)).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StorageError> {
        self.write(key, Write::Create(value)).await
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        self.write(key, Write::Update(value, expected)).await
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<KeyValue, StorageError> {
        self.write(key, Write::Delete(expected)).await
    }

    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
    ) -> Result<ProgressStream, StorageError> {
        self.notifier.watch(self.db.clone(), prefix, after).await
    }

    /// Reads the store's revision (other servers write too), and wakes this server's
    /// watchers up to it.
    async fn request_progress(&self) {
        if let Ok(revision) = self.current_revision().await {
            self.notifier.publish(revision);
        }
    }

    /// One read of the database's revision serves every caller that asked before it began
    /// (`shared_read.rs`), so that concurrent consistent reads do not each take a pooled
    /// connection and a round trip for it.
    async fn current_revision(&self) -> Result<Revision, StorageError> {
        let fetch = |db: Arc<Db>| async move { db.call(db.max_revision()).await };
        let revision = self.reads.read_from(&self.db, fetch).await?;
        self.notifier.publish(revision);
        Ok(revision)
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        self.db.call(compact(&self.db, revision)).await
    }

    /// Whether the database answers a query within [`PostgresOptions::ready_timeout`].
    async fn ready(&self) -> Result<(), StorageError> {
        let check = async {
            let client = self.db.client().await?;
            client.simple_query("SELECT 1").await?;
            Ok::<_, Fail>(())
        };
        match tokio::time::timeout(self.ready_timeout, check).await {
            Ok(result) => result.map_err(StorageError::from),
            Err(_) => Err(StorageError::Unavailable(format!(
                "postgres did not answer within {:?}",
                self.ready_timeout
            ))),
        }
    }
}

/// The pool and the names shared by every server of the schema; the watchers' [`EventSource`].
#[derive(Debug)]
struct Db {
    pool: Pool,
    /// How long a call waits for the database (see [`PostgresOptions::statement_timeout`]).
    deadline: Duration,
    /// How long a list waits for it ([`PostgresOptions::list_timeout`]).
    list_deadline: Duration,
    /// The `statement_timeout` of a list's transaction, when it differs from the session's.
    list_statement_timeout: Option<Duration>,
    /// The advisory lock every write of the schema holds until it commits.
    lock: i64,
    /// The `NOTIFY` channel of the schema.
    channel: String,
    schema: String,
    /// Set once the schema and its tables are known to be there, in this build's version.
    migrated: tokio::sync::OnceCell<()>,
}

impl Db {
    /// Runs one call with the request deadline: a database that stopped answering (no
    /// reset, only silence) fails the call with `Unavailable` instead of hanging it.
    async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, Fail>>,
    ) -> Result<T, StorageError> {
        self.call_within(self.deadline, call).await
    }

    /// [`call`](Self::call) with the deadline `limit`.
    async fn call_within<T>(
        &self,
        limit: Duration,
        call: impl Future<Output = Result<T, Fail>>,
    ) -> Result<T, StorageError> {
        match tokio::time::timeout(limit, call).await {
            Ok(result) => result.map_err(StorageError::from),
            Err(_) => Err(StorageError::Unavailable(format!(
                "postgres did not answer within {limit:?}"
            ))),
        }
    }

    /// A pooled connection; the first one that can be had creates or migrates the schema.
    async fn client(&self) -> Result<deadpool_postgres::Client, Fail> {
        let mut client = self.pool.get().await.map_err(Fail::Pool)?;
        if !self.migrated.initialized() {
            self.migrated
                .get_or_try_init(|| migrate(self, &mut client))
                .await?;
        }
        Ok(client)
    }

    async fn max_revision(&self) -> Result<Revision, Fail> {
        let client = self.client().await?;
        let statement = client.prepare_cached(MAX_REVISION).await?;
        Ok(client.query_one(&statement, &[]).await?.get(0))
    }
}

impl EventSource for Db {
    fn events_after(
        self: Arc<Self>,
        prefix: String,
        after: Revision,
        limit: usize,
    ) -> BoxFuture<'static, Result<EventBatch, StorageError>> {
        Box::pin(async move { self.call(events_after(&self, &prefix, after, limit)).await })
    }
}

/// Aborts a background task when dropped.
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A failure of a call: the driver's, the pool's, or a storage rule that refused the call.
#[derive(Debug)]
enum Fail {
    Postgres(tokio_postgres::Error),
    Pool(deadpool_postgres::PoolError),
    Storage(StorageError),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Self {
        Fail::Postgres(e)
    }
}

impl From<StorageError> for Fail {
    fn from(e: StorageError) -> Self {
        Fail::Storage(e)
    }
}

impl From<Fail> for StorageError {
    fn from(fail: Fail) -> Self {
        match fail {
            Fail::Storage(e) => e,
            Fail::Pool(deadpool_postgres::PoolError::Backend(e)) => Fail::Postgres(e).into(),
            Fail::Pool(e) => StorageError::Unavailable(format!("postgres: {e}")),
            Fail::Postgres(e) => match e.code() {
                // No code: the connection failed or closed (the server went away).
                None => StorageError::Unavailable(format!("postgres: {}", describe(&e))),
                // `statement_timeout` (or an operator's `pg_cancel_backend`): the database
                // answers, too slowly for this request.
                Some(&SqlState::QUERY_CANCELED) => {
                    StorageError::Timeout(format!("postgres: {}", describe(&e)))
                }
                Some(code) if unavailable(code) => {
                    StorageError::Unavailable(format!("postgres: {}", describe(&e)))
                }
                Some(_) => StorageError::Internal(format!("postgres: {}", describe(&e))),
            },
        }
    }
}

/// The driver's error with what caused it: the server's message for a database error
/// (tokio-postgres says only "db error"), the I/O or TLS failure for a connection.
fn describe(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// The server's errors that say "not now" rather than "never": shutting down, starting up,
/// out of connections, a read-only standby, a transaction to try again.
fn unavailable(code: &SqlState) -> bool {
    [
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::TOO_MANY_CONNECTIONS,
        SqlState::READ_ONLY_SQL_TRANSACTION,
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
    ]
    .contains(code)
}

fn check_schema_name(schema: &str) -> Result<(), StorageError> {
    let valid = !schema.is_empty()
        && schema.len() <= 48
        && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !schema.starts_with("pg_");
    if valid {
        Ok(())
    } else {
        Err(StorageError::Internal(format!(
            "postgres schema {schema:?}: lowercase letters, digits and _, starting with a \
             letter or _, at most 48 characters, not pg_…"
        )))
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The connection settings of `url`, completed from the environment as libpq completes them.
fn config_from(
    url: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, StorageError> {
    let invalid =
        |e: tokio_postgres::Error| StorageError::Internal(format!("postgres connection URL: {e}"));
    let mut config: Config = match url {
        Some(url) => url.parse().map_err(invalid)?,
        None => Config::new(),
    };
    // Lists, as libpq's: `PGHOST=primary,standby`, and one port for all or one for each.
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        let hosts = env("PGHOST").unwrap_or_else(|| "localhost".to_owned());
        for host in hosts.split(',') {
            config.host(host.trim());
        }
    }
    if config.get_ports().is_empty()
        && let Some(ports) = env("PGPORT")
    {
        for port in ports.split(',') {
            let port = port.trim().parse().map_err(|_| {
                StorageError::Internal(format!("postgres: PGPORT {ports:?} is not a port list"))
            })?;
            config.port(port);
        }
    }
    if config.get_user().is_none() {
        let user = env("PGUSER")
            .or_else(|| env("USER"))
            .unwrap_or_else(|| "postgres".into());
        config.user(user);
    }
    if config.get_password().is_none()
        && let Some(password) = env("PGPASSWORD")
    {
        config.password(password);
    }
    if config.get_dbname().is_none()
        && let Some(dbname) = env("PGDATABASE")
    {
        config.dbname(dbname);
    }
    if config.get_application_name().is_none() {
        config.application_name(env("PGAPPNAME").unwrap_or_else(|| "extension-apiserver".into()));
    }
    if config.get_connect_timeout().is_none()
        && let Some(seconds) = env("PGCONNECT_TIMEOUT").and_then(|s| s.parse().ok())
    {
        config.connect_timeout(Duration::from_secs(seconds));
    }
    // Several hosts (a primary and its standbys): this server writes and reads at the
    // primary's revision, so it connects only where writes are allowed, unless told
    // otherwise. libpq's `primary` is tokio-postgres' `read-write`.
    let url_attrs = url.is_some_and(|url| url.contains("target_session_attrs"));
    if !url_attrs {
        let attrs = match env("PGTARGETSESSIONATTRS").as_deref() {
            None if config.get_hosts().len() + config.get_hostaddrs().len() > 1 => {
                Some(TargetSessionAttrs::ReadWrite)
            }
            None => None,
            Some("any") => Some(TargetSessionAttrs::Any),
            Some("read-write" | "primary") => Some(TargetSessionAttrs::ReadWrite),
            Some("read-only") => Some(TargetSessionAttrs::ReadOnly),
            Some(other) => {
                return Err(StorageError::Internal(format!(
                    "postgres: PGTARGETSESSIONATTRS {other:?}: any, read-write, primary or \
                     read-only"
                )));
            }
        };
        if let Some(attrs) = attrs {
            config.target_session_attrs(attrs);
        }
    }
    // Only when the URL names no mode: the URL's `sslmode` wins, as in libpq.
    let url_mode = url.is_some_and(|url| url.contains("sslmode"));
    if !url_mode && let Some(mode) = env("PGSSLMODE") {
        config.ssl_mode(match mode.as_str() {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            // verify-ca and verify-full: rustls always verifies the chain and the host name.
            "require" | "verify-ca" | "verify-full" => SslMode::Require,
            other => {
                return Err(StorageError::Internal(format!(
                    "postgres: PGSSLMODE {other:?} is not a mode"
                )));
            }
        });
    }
    Ok(config)
}

/// The advisory lock of a schema: the same number in every server of it (FNV-1a of its name,
/// stable across builds and machines, unlike std's hasher).
fn lock_key(schema: &str) -> i64 {
    let name = format!("extension-apiserver/{schema}");
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// Creates the schema and its tables, or checks that an existing one is not newer than this
/// build; servers starting together take turns on the schema's lock.
async fn migrate(db: &Db, client: &mut deadpool_postgres::Client) -> Result<(), Fail> {
    // Made already, in this version: nothing to write, so a read-only standby serves reads.
    if schema_version(&***client).await? == Some(SCHEMA_VERSION) {
        return Ok(());
    }
    let tx = client.transaction().await?;
    tx.execute(LOCK, &[&db.lock]).await?;
    tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {}", db.schema))
        .await?;
    tx.batch_execute(SCHEMA).await?;
    if let Some(version) = schema_version(&*tx).await?
        && version > SCHEMA_VERSION
    {
        let message = format!("postgres: schema version {version} is newer than this build's");
        return Err(StorageError::Internal(message).into());
    }
    tx.execute(
        "INSERT INTO meta (name, value) VALUES ('schema_version', $1)
            ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        &[&SCHEMA_VERSION],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The version recorded in the schema; `None` when it has no tables yet.
async fn schema_version(client: &impl tokio_postgres::GenericClient) -> Result<Option<i64>, Fail> {
    let exists = client
        .query_one("SELECT to_regclass('meta') IS NOT NULL", &[])
        .await?;
    if !exists.get::<_, bool>(0) {
        return Ok(None);
    }
    let row = client
        .query_opt("SELECT value FROM meta WHERE name = 'schema_version'", &[])
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// The one task that commits this server's writes: it takes every write waiting (a batch,
/// [`mvcc::take_batch`]) and commits them in one transaction
/// ([`commit_writes`]), so that writes that arrive together share the lock's round trips and
/// one flush of the WAL (group commit). Each commit must hold the schema's lock through its
/// flush, which otherwise bounds a server to one write per flush.
async fn write_loop(db: Arc<Db>, notifier: Notifier, mut queue: mpsc::UnboundedReceiver<Pending>) {
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(pending) => pending,
            None => match queue.recv().await {
                Some(pending) => pending,
                None => return,
            },
        };
        let (batch, rest) = mvcc::take_batch(first, || queue.try_recv().ok());
        next = rest;
        if batch.is_empty() {
            continue;
        }
        let (writes, replies) = mvcc::split(batch);
        let outcome = db.call(commit_writes(&db, writes)).await;
        if let Some(last) = mvcc::last_revision(&outcome) {
            notifier.publish(last);
        }
        // The database did not answer in time, or is gone: what waits would fail the same
        // way behind this batch (a transaction of its own each would have waited on the same
        // lock or connection), and gets the answer now.
        if let Err(failed @ (StorageError::Unavailable(_) | StorageError::Timeout(_))) = &outcome {
            let waiting = next.take().into_iter();
            let waiting = waiting.chain(std::iter::from_fn(|| queue.try_recv().ok()));
            mvcc::answer(waiting.map(|p| p.reply).collect(), Err(failed.clone()));
        }
        mvcc::answer(replies, outcome);
    }
}

/// A write's row, borrowed from its event, as its statement takes it.
struct Written<'a> {
    revision: Revision,
    key: &'a [u8],
    value: Option<&'a [u8]>,
    create_revision: Revision,
    prev_revision: Option<Revision>,
    deleted: bool,
}

/// Commits `writes` in one transaction under the schema's lock, in their order: each is
/// checked against its key's value after the writes before it (as if each had a transaction
/// of its own), and those that may proceed take consecutive revisions. Returns each write's
/// event or the rule it broke; fails as a whole when the database does.
async fn commit_writes(
    db: &Db,
    writes: Vec<(String, Write)>,
) -> Result<Vec<Result<Event, StorageError>>, Fail> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    // Prepared (or found in the cache) before the lock, which is held from here to the
    // commit: two round trips (the read, sent with the lock, then the writes and the commit).
    let (lock, read) = (
        tx.prepare_cached(LOCK).await?,
        tx.prepare_cached(READ_FOR_WRITES).await?,
    );
    let (put, delete, notify) = (
        tx.prepare_cached(WRITE_PUT).await?,
        tx.prepare_cached(WRITE_DELETE).await?,
        tx.prepare_cached(NOTIFY).await?,
    );
    // Held until the commit is visible: the next writer's MAX sees these revisions. The read
    // is pipelined behind the lock (tokio-postgres sends requests in the order they are
    // first polled): the server runs it as soon as it has the lock, in a snapshot of its
    // own taken then, without a round trip to us in between.
    let keys: Vec<&[u8]> = writes.iter().map(|(key, _)| key.as_bytes()).collect();
    let (lock_params, read_params): ([&(dyn ToSql + Sync); 1], [&(dyn ToSql + Sync); 1]) =
        ([&db.lock], [&keys]);
    let (_, rows) = futures::try_join!(
        tx.execute(&lock, &lock_params),
        tx.query(&read, &read_params)
    )?;
    let revision: Revision = match rows.first() {
        Some(row) => row.try_get(0)?,
        None => return Ok(Vec::new()),
    };
    let mut stored = HashMap::with_capacity(rows.len());
    for row in &rows {
        let key = key_at(row, 1)?;
        let value = key_value_at(row, &key, 2)?;
        stored.insert(key, value);
    }
    let read = |key: &str| Ok::<_, Fail>(stored.remove(key).flatten());
    let results = mvcc::apply_in_turn(writes, revision, read)?;
    let written: Vec<Written> = results
        .iter()
        .flatten()
        .map(|event| {
            let deleted = event.event_type == EventType::Delete;
            Written {
                revision: event.revision(),
                key: event.kv.key.as_bytes(),
                value: (!deleted).then_some(event.kv.value.as_ref()),
                create_revision: event.kv.create_revision,
                prev_revision: event.prev_kv.as_ref().map(|prev| prev.mod_revision),
                deleted,
            }
        })
        .collect();
    if let Some(last) = written.last() {
        let params: Vec<[&(dyn ToSql + Sync); 6]> = written
            .iter()
            .map(|row| -> [&(dyn ToSql + Sync); 6] {
                [
                    &row.revision,
                    &row.key,
                    &row.value,
                    &row.create_revision,
                    &row.prev_revision,
                    &row.deleted,
                ]
            })
            .collect();
        let payload = last.revision.to_string();
        let notify_params: [&(dyn ToSql + Sync); 2] = [&db.channel, &payload];
        // Sent one after another without waiting (pipelined, in this order), and the
        // notification with them: the listeners get it when the transaction commits.
        let statements = written
            .iter()
            .zip(&params)
            .map(|(row, params)| tx.execute(if row.deleted { &delete } else { &put }, params));
        futures::try_join!(
            futures::future::try_join_all(statements),
            tx.execute(&notify, &notify_params)
        )?;
    }
    tx.commit().await?;
    Ok(results)
}

/// A read-only transaction on one snapshot: the revision and the rows it reads agree.
async fn snapshot(
    client: &mut deadpool_postgres::Client,
) -> Result<deadpool_postgres::Transaction<'_>, Fail> {
    Ok(client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?)
}

async fn list(db: &Db, request: &ListRequest) -> Result<ListResult, Fail> {
    let mut client = db.client().await?;
    let tx = snapshot(&mut client).await?;
    if let Some(limit) = db.list_statement_timeout {
        let set = format!("SET LOCAL statement_timeout = {}", limit.as_millis());
        tx.batch_execute(&set).await?;
    }
    let current: Revision = tx
        .query_one(&tx.prepare_cached(MAX_REVISION).await?, &[])
        .await?
        .get(0);
    let revision = mvcc::read_revision(request.revision, current, compacted(&tx).await?)?;
    let range = KeyRange::new(&request.prefix, request.start_after.as_deref());
    let at = (revision < current).then_some(revision);
    if request.skip_count && request.limit > 0 {
        // One row past the page says whether more follow, without counting them all.
        let mut items = range_items(&tx, &range, at, request.limit + 1).await?;
        tx.commit().await?;
        let more = items.len() > request.limit;
        items.truncate(request.limit);
        return Ok(ListResult {
            items,
            revision,
            more,
            remaining: None,
        });
    }
    let items = range_items(&tx, &range, at, request.limit).await?;
    let remaining = match items.last() {
        Some(last) if items.len() == request.limit => {
            range_count(&tx, &range.after(&last.key), at).await?
        }
        _ => 0,
    };
    tx.commit().await?;
    Ok(ListResult {
        items,
        revision,
        more: remaining > 0,
        remaining: Some(remaining),
    })
}

/// The keys of `range` at the latest revision (`at: None`) or at an older one.
async fn range_items(
    tx: &deadpool_postgres::Transaction<'_>,
    range: &KeyRange,
    at: Option<Revision>,
    limit: usize,
) -> Result<Vec<KeyValue>, Fail> {
    // LIMIT NULL: no limit.
    let limit = (limit > 0).then_some(limit as i64);
    let rows = match at {
        None => {
            let statement = tx.prepare_cached(LIST_LATEST).await?;
            tx.query(&statement, &[&range.start, &range.end, &limit])
                .await?
        }
        Some(revision) => {
            let statement = tx.prepare_cached(LIST_AT).await?;
            tx.query(&statement, &[&range.start, &range.end, &revision, &limit])
                .await?
        }
    };
    rows.iter().map(key_value).collect()
}

async fn range_count(
    tx: &deadpool_postgres::Transaction<'_>,
    range: &KeyRange,
    at: Option<Revision>,
) -> Result<i64, Fail> {
    let row = match at {
        None => {
            let statement = tx.prepare_cached(COUNT_LATEST).await?;
            tx.query_one(&statement, &[&range.start, &range.end])
                .await?
        }
        Some(revision) => {
            let statement = tx.prepare_cached(COUNT_AT).await?;
            tx.query_one(&statement, &[&range.start, &range.end, &revision])
                .await?
        }
    };
    Ok(row.get(0))
}

async fn events_after(
    db: &Db,
    prefix: &str,
    after: Revision,
    limit: usize,
) -> Result<EventBatch, Fail> {
    let mut client = db.client().await?;
    let tx = snapshot(&mut client).await?;
    mvcc::check_watch_start(after, compacted(&tx).await?)?;
    let current: Revision = tx
        .query_one(&tx.prepare_cached(MAX_REVISION).await?, &[])
        .await?
        .get(0);
    let window_end = current.min(after.saturating_add(SCAN_WINDOW));
    let range = KeyRange::new(prefix, None);
    let rows = tx
        .query(
            &tx.prepare_cached(EVENTS).await?,
            &[
                &after,
                &window_end,
                &range.start,
                &range.end,
                &(limit as i64),
            ],
        )
        .await?;
    tx.commit().await?;
    let events = rows.iter().map(event).collect::<Result<Vec<_>, _>>()?;
    let scanned_to = match events.last() {
        Some(last) if events.len() == limit => last.revision(),
        _ => window_end.max(after),
    };
    Ok(EventBatch { events, scanned_to })
}

async fn compact(db: &Db, revision: Revision) -> Result<(), Fail> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    tx.execute(LOCK, &[&db.lock]).await?;
    let current: Revision = tx.query_one(MAX_REVISION, &[]).await?.get(0);
    if mvcc::compaction_needed(revision, current, compacted(&tx).await?)? {
        for sql in COMPACT {
            tx.execute(sql, &[&revision]).await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

async fn compacted(tx: &deadpool_postgres::Transaction<'_>) -> Result<Revision, Fail> {
    let row = tx
        .query_opt(&tx.prepare_cached(COMPACTED).await?, &[])
        .await?;
    Ok(row.map_or(0, |row| row.get(0)))
}

/// Listens for the schema's notifications on a connection of its own, reconnecting after a
/// failure; each (re)connection then reads the revision, for what it missed while down.
async fn listen(
    config: Config,
    tls: MakeRustlsConnect,
    channel: String,
    db: Arc<Db>,
    notifier: Notifier,
    retry: Duration,
) {
    loop {
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let (messages, mut received) = tokio::sync::mpsc::unbounded_channel();
                // The connection runs in its own task: the client's calls need it polled.
                let driver = AbortOnDrop(tokio::spawn(async move {
                    let mut stream =
                        futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(Ok(message)) = futures::StreamExt::next(&mut stream).await {
                        if messages.send(message).is_err() {
                            break;
                        }
                    }
                }));
                let listening = client.batch_execute(&format!("LISTEN {channel}")).await;
                if let Err(error) = listening {
                    tracing::warn!(%error, "postgres: LISTEN failed");
                } else {
                    if let Ok(revision) = db.call(db.max_revision()).await {
                        notifier.publish(revision);
                    }
                    while let Some(message) = received.recv().await {
                        if let AsyncMessage::Notification(notification) = message
                            && let Ok(revision) = notification.payload().parse()
                        {
                            notifier.publish(revision);
                        }
                    }
                    tracing::warn!("postgres: the notification connection closed; reconnecting");
                }
                drop(driver);
            }
            Err(error) => tracing::warn!(%error, "postgres: cannot listen for notifications"),
        }
        tokio::time::sleep(retry).await;
    }
}

/// Reads the revision every `interval`: the fallback for notifications that were lost.
async fn poll(db: Arc<Db>, notifier: Notifier, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // Committed before the query began, so its snapshot holds it.
        let seen = notifier.latest();
        if let Ok(revision) = db.call(db.max_revision()).await {
            if revision < seen {
                // Only a database that lost acknowledged commits does this: a switch to an
                // asynchronous standby that lacked them, a restore from a backup. Revisions
                // from `revision` on will be given again, so watches and the watch cache
                // would miss or confuse them until the server restarts.
                tracing::error!(
                    revision,
                    seen,
                    "postgres: the database's revision went back; was it switched to a standby \
                     that lacked acknowledged writes? Restart the server"
                );
            }
            notifier.publish(revision);
        }
    }
}

/// A row of (key, value, create_revision, mod_revision).
fn key_value(row: &Row) -> Result<KeyValue, Fail> {
    Ok(KeyValue {
        key: key_at(row, 0)?,
        value: Bytes::from(row.try_get::<_, Vec<u8>>(1)?),
        create_revision: row.try_get(2)?,
        mod_revision: row.try_get(3)?,
    })
}

/// A row of [`EVENTS`]: the log row, then its previous row's value, create and mod revision.
fn event(row: &Row) -> Result<Event, Fail> {
    let key = key_at(row, 1)?;
    let prev = key_value_at(row, &key, 5)?;
    let deleted: bool = row.try_get(4)?;
    let value = if deleted {
        None
    } else {
        Some(Bytes::from(row.try_get::<_, Vec<u8>>(2)?))
    };
    let log_row = LogRow {
        revision: row.try_get(0)?,
        key,
        value,
        create_revision: row.try_get(3)?,
        prev,
    };
    Ok(log_row.into_event()?)
}

/// `key`'s value, create and mod revision in the columns from `first` on, or `None` when the
/// mod revision is NULL (no such row: a key without a value, a write without a previous one).
fn key_value_at(row: &Row, key: &str, first: usize) -> Result<Option<KeyValue>, Fail> {
    let Some(mod_revision) = row.try_get::<_, Option<Revision>>(first + 2)? else {
        return Ok(None);
    };
    Ok(Some(KeyValue {
        key: key.to_owned(),
        value: Bytes::from(row.try_get::<_, Vec<u8>>(first)?),
        create_revision: row.try_get(first + 1)?,
        mod_revision,
    }))
}

fn key_at(row: &Row, index: usize) -> Result<String, Fail> {
    String::from_utf8(row.try_get(index)?)
        .map_err(|e| StorageError::Internal(format!("postgres: a key is not UTF-8: {e}")).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::tests;
    use futures::StreamExt;

    /// A backend on a schema of its own in the database of `APISERVER_TEST_POSTGRES` (default:
    /// the one `.ci/postgres.sh start` runs); fails when it does not answer.
    async fn on_postgres() -> PostgresBackend {
        on_postgres_with(test_options()).await
    }

    /// `APISERVER_TEST_POSTGRES`, or the database `.ci/postgres.sh start` runs.
    fn test_url() -> String {
        std::env::var("APISERVER_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:54320/apiserver".into())
    }

    /// [`on_postgres`]'s options: the test database, a schema of its own.
    fn test_options() -> PostgresOptions {
        PostgresOptions {
            url: Some(test_url()),
            schema: format!("unit_{:016x}", rand_suffix()),
            pool_size: 4,
            ..PostgresOptions::default()
        }
    }

    async fn on_postgres_with(options: PostgresOptions) -> PostgresBackend {
        let url = options.url.clone().unwrap_or_default();
        PostgresBackend::connect(options)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {url} (APISERVER_TEST_POSTGRES): {e}"))
    }

    fn rand_suffix() -> u64 {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(std::time::SystemTime::now())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lagging_watcher_is_compacted() {
        tests::lagging_watcher_is_compacted(&on_postgres().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn quiet_prefix_crosses_scan_windows() {
        tests::quiet_prefix_crosses_scan_windows(&on_postgres().await).await;
    }

    /// A second connect to the same schema finds the tables and the revision it left; a
    /// schema version newer than this build's is refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconnecting_keeps_data_and_refuses_a_newer_schema() {
        let first = on_postgres().await;
        first.create("/t/a", Bytes::from("1")).await.unwrap();
        let schema = first.db.schema.clone();
        let options = PostgresOptions {
            url: Some(test_url()),
            schema,
            pool_size: 2,
            ..PostgresOptions::default()
        };
        let second = PostgresBackend::connect(options.clone()).await.unwrap();
        assert_eq!(second.current_revision().await.unwrap(), 1);
        assert!(second.get("/t/a").await.unwrap().is_some());
        let client = second.db.client().await.unwrap();
        client
            .execute(
                "UPDATE meta SET value = $1 WHERE name = 'schema_version'",
                &[&(SCHEMA_VERSION + 1)],
            )
            .await
            .unwrap();
        assert!(matches!(
            PostgresBackend::connect(options).await,
            Err(StorageError::Internal(_))
        ));
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_environment_completes_the_url() {
        let vars = env(&[
            ("PGHOST", "db.internal"),
            ("PGPORT", "6432"),
            ("PGUSER", "api"),
            ("PGPASSWORD", "secret"),
            ("PGDATABASE", "objects"),
            ("PGSSLMODE", "verify-full"),
        ]);
        let config = config_from(None, &vars).unwrap();
        assert_eq!(
            config.get_hosts(),
            &[tokio_postgres::config::Host::Tcp("db.internal".into())]
        );
        assert_eq!(config.get_ports(), &[6432]);
        assert_eq!(config.get_user(), Some("api"));
        assert_eq!(config.get_password(), Some(&b"secret"[..]));
        assert_eq!(config.get_dbname(), Some("objects"));
        assert_eq!(config.get_ssl_mode(), SslMode::Require);

        // What the URL names wins; the rest still comes from the environment.
        let url = "postgres://owner@127.0.0.1:5432/mine?sslmode=disable";
        let config = config_from(Some(url), &vars).unwrap();
        assert_eq!(config.get_ports(), &[5432]);
        assert_eq!(config.get_user(), Some("owner"));
        assert_eq!(config.get_password(), Some(&b"secret"[..]));
        assert_eq!(config.get_dbname(), Some("mine"));
        assert_eq!(config.get_ssl_mode(), SslMode::Disable);

        assert!(config_from(None, env(&[("PGPORT", "many")])).is_err());

        // A primary and a standby: only a server that takes writes will do, unless the URL
        // or the environment says otherwise.
        let url = "postgres://api@10.0.0.1:5432,10.0.0.2:5433/objects";
        let config = config_from(Some(url), env(&[])).unwrap();
        assert_eq!(config.get_hosts().len(), 2);
        assert_eq!(config.get_ports(), &[5432, 5433]);
        assert_eq!(
            config.get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
        let any = config_from(Some(&format!("{url}?target_session_attrs=any")), env(&[]));
        assert_eq!(
            any.unwrap().get_target_session_attrs(),
            TargetSessionAttrs::Any
        );
        let vars = env(&[
            ("PGHOST", "10.0.0.1,10.0.0.2"),
            ("PGPORT", "5432,5433"),
            ("PGTARGETSESSIONATTRS", "primary"),
        ]);
        let config = config_from(None, &vars).unwrap();
        assert_eq!(
            config.get_hosts(),
            &[
                tokio_postgres::config::Host::Tcp("10.0.0.1".into()),
                tokio_postgres::config::Host::Tcp("10.0.0.2".into())
            ]
        );
        assert_eq!(config.get_ports(), &[5432, 5433]);
        assert_eq!(
            config.get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
        let single = config_from(Some("postgres://api@db/objects"), env(&[])).unwrap();
        assert_eq!(single.get_target_session_attrs(), TargetSessionAttrs::Any);
        assert!(config_from(None, env(&[("PGTARGETSESSIONATTRS", "standby")])).is_err());
        assert!(config_from(Some("postgres://[::"), env(&[])).is_err());
    }

    /// Nothing listens on the port: the backend is made all the same, and says it is not
    /// ready, as every call fails, with `Unavailable` (503), within the deadlines.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_database_is_unavailable_not_fatal() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let backend = PostgresBackend::connect(PostgresOptions {
            url: Some(format!("postgres://postgres@127.0.0.1:{port}/none")),
            ..PostgresOptions::default()
        })
        .await
        .expect("made without the database");
        assert!(matches!(
            backend.ready().await,
            Err(StorageError::Unavailable(_))
        ));
        assert!(matches!(
            backend.get("/t/a").await,
            Err(StorageError::Unavailable(_))
        ));
        assert!(matches!(
            backend.create("/t/a", Bytes::from("1")).await,
            Err(StorageError::Unavailable(_))
        ));
    }

    /// A standby (here: every transaction read-only) refuses writes with "read-only
    /// transaction": that is a 503 until the primary answers, never a 500.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_only_standby_is_unavailable() {
        let url = test_url();
        let primary = on_postgres().await;
        primary.create("/t/a", Bytes::from("1")).await.unwrap();
        let separator = if url.contains('?') { '&' } else { '?' };
        let standby = PostgresBackend::connect(PostgresOptions {
            url: Some(format!(
                "{url}{separator}options=-c%20default_transaction_read_only%3Don"
            )),
            schema: primary.db.schema.clone(),
            pool_size: 2,
            ..PostgresOptions::default()
        })
        .await
        .expect("connects");
        assert!(standby.get("/t/a").await.unwrap().is_some());
        assert!(matches!(
            standby.create("/t/b", Bytes::from("1")).await,
            Err(StorageError::Unavailable(_))
        ));
    }

    fn value(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    /// The writes of one batch are checked in their order, each against what the writes
    /// before it left (the batch's own included), and those that proceed take consecutive
    /// revisions; the ones refused change nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_checks_each_write_after_those_before_it() {
        let backend = on_postgres().await;
        backend.create("/other", value("x")).await.unwrap();
        let start = backend.current_revision().await.unwrap();
        let writes = vec![
            ("/b/a".to_owned(), Write::Create(value("1"))),
            ("/b/a".to_owned(), Write::Create(value("2"))),
            ("/b/a".to_owned(), Write::Update(value("3"), start + 1)),
            ("/b/c".to_owned(), Write::Delete(None)),
            ("/b/c".to_owned(), Write::Create(value("4"))),
            ("/b/c".to_owned(), Write::Delete(Some(start + 3))),
            ("/b/a".to_owned(), Write::Update(value("5"), start + 1)),
        ];
        let results = backend
            .db
            .call(commit_writes(&backend.db, writes))
            .await
            .unwrap();
        let revisions: Vec<_> = results
            .iter()
            .map(|result| result.as_ref().map(Event::revision).map_err(Clone::clone))
            .collect();
        assert_eq!(
            revisions,
            vec![
                Ok(start + 1),
                Err(StorageError::KeyExists("/b/a".into())),
                Ok(start + 2),
                Err(StorageError::NotFound("/b/c".into())),
                Ok(start + 3),
                Ok(start + 4),
                Err(StorageError::Conflict {
                    key: "/b/a".into(),
                    expected: start + 1,
                    actual: start + 2,
                }),
            ]
        );
        let a = backend.get("/b/a").await.unwrap().unwrap();
        assert_eq!(
            (a.value, a.create_revision, a.mod_revision),
            (value("3"), start + 1, start + 2)
        );
        assert_eq!(backend.get("/b/c").await.unwrap(), None);
        assert_eq!(backend.current_revision().await.unwrap(), start + 4);
        // The log holds the four, with their previous values, as four transactions would.
        let mut stream = backend.watch("/b/", start).await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < 4 {
            let item = tokio::time::timeout(Duration::from_secs(5), stream.next())
                .await
                .expect("an event within 5 s")
                .unwrap()
                .unwrap();
            seen.push((
                item.event_type,
                item.kv.key.clone(),
                item.revision(),
                item.prev_kv.map(|prev| prev.mod_revision),
            ));
        }
        assert_eq!(
            seen,
            vec![
                (EventType::Put, "/b/a".into(), start + 1, None),
                (EventType::Put, "/b/a".into(), start + 2, Some(start + 1)),
                (EventType::Put, "/b/c".into(), start + 3, None),
                (EventType::Delete, "/b/c".into(), start + 4, Some(start + 3)),
            ]
        );
    }

    /// A write whose caller stopped waiting before its turn came (a request cancelled while
    /// writes ahead of it held the lock) is never made.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_given_up_before_its_turn_is_not_made() {
        let backend = Arc::new(on_postgres().await);
        // Another session holds the schema's lock, as a writer of another server would.
        let holder = backend.db.pool.get().await.unwrap();
        holder
            .execute("SELECT pg_advisory_lock($1)", &[&backend.db.lock])
            .await
            .unwrap();
        let lock = backend.db.lock;
        let release = async move {
            holder
                .execute("SELECT pg_advisory_unlock($1)", &[&lock])
                .await
                .unwrap();
        };
        tests::a_write_given_up_before_its_turn_is_not_made(Arc::clone(&backend), release).await;
    }

    /// Writes queued behind a batch that waits out the statement timeout on a lock get its
    /// answer with it (504), as they would have waiting on the lock themselves, instead of
    /// each waiting out a timeout of its own after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_behind_a_timed_out_batch_fail_with_it() {
        let backend = Arc::new(
            on_postgres_with(PostgresOptions {
                statement_timeout: Duration::from_secs(1),
                ..test_options()
            })
            .await,
        );
        backend.create("/before", value("0")).await.unwrap();
        let holder = backend.db.pool.get().await.unwrap();
        holder
            .execute("SELECT pg_advisory_lock($1)", &[&backend.db.lock])
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let create = |key: &'static str| {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move { backend.create(key, value("1")).await })
        };
        let first = create("/first");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let second = create("/second");
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        let elapsed = started.elapsed();
        holder
            .execute("SELECT pg_advisory_unlock($1)", &[&backend.db.lock])
            .await
            .unwrap();
        assert!(matches!(first, Err(StorageError::Timeout(_))), "{first:?}");
        assert!(
            matches!(second, Err(StorageError::Timeout(_))),
            "{second:?}"
        );
        assert!(elapsed < Duration::from_millis(1700), "{elapsed:?}");
        assert_eq!(backend.get("/first").await.unwrap(), None);
        assert_eq!(backend.get("/second").await.unwrap(), None);
        backend.create("/after", value("2")).await.unwrap();
    }

    #[test]
    fn lock_keys_are_stable() {
        // FNV-1a of "extension-apiserver/apiserver": the same in every build and server.
        assert_eq!(lock_key("apiserver"), lock_key("apiserver"));
        assert_ne!(lock_key("apiserver"), lock_key("apiserver2"));
        assert_eq!(lock_key("apiserver"), 0x71e0_7a7d_8340_0190);
    }

    #[test]
    fn schema_names_need_no_quoting() {
        for good in ["apiserver", "wardle_1", "_x"] {
            assert!(check_schema_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Upper",
            "1st",
            "a-b",
            "a b",
            "x\"y",
            "pg_catalog",
            &"a".repeat(49),
        ] {
            assert!(check_schema_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tls_files_are_checked_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let ca = crate::tls::pki::TestCa::new("postgres-ca");
        let client = ca.client("apiserver", &[]);
        let (cert, key) = client.write(dir.path(), "client");
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, &ca.cert_pem).unwrap();
        assert!(PostgresTls::from_files(&ca_file, Some(&cert), Some(&key)).is_ok());
        assert!(PostgresTls::from_files(&ca_file, None, None).is_ok());
        assert!(PostgresTls::from_files(&ca_file, Some(&cert), None).is_err());
        assert!(PostgresTls::from_files(&key, None, None).is_err());
        assert!(PostgresTls::from_files(&dir.path().join("missing"), None, None).is_err());
    }
}
