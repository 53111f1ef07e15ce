//! wardle on PostgreSQL beyond the shared suites: two replicas on one schema (one data set, one
//! watch, read-your-writes across them); the database going away and coming back under load
//! (readyz red, `Status` 503, nothing acknowledged lost, a watch from before the outage with
//! every change in order and none twice), or away when the server starts; TLS with a CA and a
//! client certificate.
//!
//! The outage is made by a TCP relay of the test's own between the server and the CI's
//! PostgreSQL (`APISERVER_TEST_POSTGRES`; `bash .ci/postgres.sh start` runs one): cutting it
//! drops every connection and refuses new ones, as a restarting database does, without
//! disturbing other tests on the same database.
//! `cargo test -p wardle --features postgres --test wardle postgres_`.
#![cfg(feature = "postgres")]

use crate::common::*;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use extension_apiserver::server::ServerOptions;
use extension_apiserver_testing::TestServer;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use wardle::Flunder;

pub(crate) const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";

/// `host:port` of a `postgres://[user@]host:port/db` URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    rest[..end].to_owned()
}

/// A TCP relay on loopback to the test database that can be cut and mended.
struct Relay {
    port: u16,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Relay {
    async fn start() -> Relay {
        let upstream = host_port(&postgres_url());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = tokio::spawn({
            let (up, connections) = (Arc::clone(&up), Arc::clone(&connections));
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        // Down: the connection is closed at once, as by a database that is
                        // not there.
                        continue;
                    }
                    let upstream = upstream.clone();
                    let relay = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(&upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    let mut connections = connections.lock().unwrap();
                    connections.retain(|c| !c.is_finished());
                    connections.push(relay);
                }
            }
        });
        Relay {
            port,
            up,
            connections,
            accept,
        }
    }

    /// The test database's URL, through the relay.
    fn url(&self) -> String {
        let url = postgres_url();
        url.replacen(&host_port(&url), &format!("127.0.0.1:{}", self.port), 1)
    }

    /// Drops every relayed connection and refuses new ones.
    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    fn mend(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Server options on the PostgreSQL at `url`, in `schema`.
pub(crate) fn options(dir: &std::path::Path, url: &str, schema: &str) -> ServerOptions {
    ServerOptions {
        postgres_url: Some(url.to_owned()),
        postgres_schema: schema.to_owned(),
        ..Backend::Postgres.options(dir)
    }
}

/// The server (once the database answered), and an admin client that does not retry.
pub(crate) async fn start(options: ServerOptions) -> (TestServer, Client) {
    let server = serve(options).await;
    let client = no_retry_client(&server).await;
    (server, client)
}

/// `Status` 503 `ServiceUnavailable`, as kube-apiserver answers while etcd is away.
#[track_caller]
pub(crate) fn assert_unavailable(reply: &Reply) {
    let status = reply.json();
    assert_eq!(reply.code, 503, "{status}");
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["code"], 503, "{status}");
    assert_eq!(status["reason"], "ServiceUnavailable", "{status}");
}

/// Polls `/readyz` until it is `ok` (at most 120 tries, half a second apart).
pub(crate) async fn wait_ready(client: &Client) {
    for _ in 0..120 {
        let reply = send(client, "GET", "/readyz", "").await;
        if reply.code == 200 {
            assert_eq!(reply.body, "ok");
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the server did not become ready again on PostgreSQL");
}

/// Polls `/readyz?verbose` until the postgres check fails (at most 60 tries).
pub(crate) async fn wait_not_ready(client: &Client) {
    for _ in 0..60 {
        let reply = send(client, "GET", "/readyz?verbose", "").await;
        if reply.code == 500 {
            assert!(reply.body.contains("[-]postgres failed"), "{}", reply.body);
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("/readyz stayed green with the database away");
}

/// Two servers on one schema are replicas: what one writes the other reads at once (a
/// consistent read asks the database for its revision), both give one object the same
/// resourceVersion, and a watch through one sees the other's writes in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_replicas_share_data_and_watches_with_read_your_writes() {
    let (one_dir, two_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let schema = postgres_schema();
    let (one, one_client) = start(options(one_dir.path(), &postgres_url(), &schema)).await;
    let (two, two_client) = start(options(two_dir.path(), &postgres_url(), &schema)).await;
    let (on_one, on_two): (Api<Flunder>, Api<Flunder>) = (
        Api::namespaced(one_client, "default"),
        Api::namespaced(two_client, "default"),
    );
    let start_rv = list_rv(&on_two).await;
    let params = WatchParams::default().timeout(60);
    let mut watch = on_two.watch(&params, &start_rv).await.unwrap().boxed();

    let pp = PostParams::default();
    let mut written = Vec::new();
    for i in 0..10 {
        let (writer, reader) = if i % 2 == 0 {
            (&on_one, &on_two)
        } else {
            (&on_two, &on_one)
        };
        let name = format!("f{i}");
        let created = writer.create(&pp, &flunder(&name, "x")).await.unwrap();
        let rv = created.metadata.resource_version.clone().unwrap();
        // Read your writes on the other replica: a get and a consistent list see it.
        let got = reader.get(&name).await.unwrap();
        assert_eq!(got.metadata.resource_version.as_deref(), Some(rv.as_str()));
        let list = reader.list(&ListParams::default()).await.unwrap();
        assert!(
            list.items
                .iter()
                .any(|f| f.metadata.name.as_deref() == Some(&name)),
            "{name} missing from the other replica's list"
        );
        written.push((name, rv));
    }

    for (name, rv) in &written {
        let event = tokio::time::timeout(Duration::from_secs(60), watch.next())
            .await
            .expect("a watch event in time")
            .expect("the watch is open")
            .expect("a good event");
        match event {
            WatchEvent::Added(f) => {
                assert_eq!(f.metadata.name.as_ref(), Some(name));
                assert_eq!(f.metadata.resource_version.as_ref(), Some(rv));
            }
            other => panic!("expected ADDED {name}, got {other:?}"),
        }
    }
    one.stop().await;
    two.stop().await;
}

/// The database goes away under a stream of creates and comes back: `/readyz` fails on
/// `postgres` and requests get `Status` 503 meanwhile, the server recovers by itself, every
/// acknowledged create is there afterwards, and a watch from before the outage sees every one
/// of them, in order, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_outage_under_load_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start().await;
    let (server, client) = start(options(dir.path(), &relay.url(), &postgres_schema())).await;
    wait_ready(&client).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    // Something stored first: a watch from resourceVersion 0 would mean "from any state".
    let pp = PostParams::default();
    api.create(&pp, &flunder("first", "x")).await.unwrap();
    let start_rv = list_rv(&api).await;
    let params = WatchParams::default().timeout(120);
    let live = api.watch(&params, &start_rv).await.unwrap().boxed();

    let creates = Creates::start(&client, 1);
    tokio::time::sleep(Duration::from_secs(1)).await;

    relay.cut();
    assert_away(&client).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    relay.mend();
    wait_ready(&client).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    creates.finish_after_outage(&api, &start_rv, live, 2).await;
    server.stop().await;
}

/// While the database is away: `/readyz` fails on `postgres`, storage requests get `Status`
/// 503 (a create of `lost` among them), health without storage stays green.
pub(crate) async fn assert_away(client: &Client) {
    wait_not_ready(client).await;
    assert_unavailable(&send(client, "GET", &format!("{FLUNDERS}/first"), "").await);
    assert_unavailable(&send(client, "POST", FLUNDERS, &flunder_json("lost")).await);
    assert_eq!(send(client, "GET", "/livez", "").await.code, 200);
}

/// Creates from concurrent clients, each one after another, until [`Creates::finish`]: a 201
/// is acknowledged, a 503 (storage away) must be kube's `Status`, anything else fails.
pub(crate) struct Creates {
    stop: Arc<AtomicBool>,
    writers: Vec<JoinHandle<(Vec<String>, usize)>>,
}

impl Creates {
    pub(crate) fn start(client: &Client, writers: usize) -> Creates {
        let stop = Arc::new(AtomicBool::new(false));
        let writers = (0..writers)
            .map(|writer| {
                let (client, stop) = (client.clone(), Arc::clone(&stop));
                tokio::spawn(async move {
                    let (mut acknowledged, mut failed) = (Vec::new(), 0);
                    for i in 0..100_000 {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let name = format!("load-{writer}-{i}");
                        let reply = send(&client, "POST", FLUNDERS, &flunder_json(&name)).await;
                        match reply.code {
                            201 => acknowledged.push(name),
                            503 => {
                                assert_unavailable(&reply);
                                failed += 1;
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            code => panic!("create {name}: {code} {}", reply.body),
                        }
                    }
                    (acknowledged, failed)
                })
            })
            .collect();
        Creates { stop, writers }
    }

    /// Stops the writers once the database is back, and checks what the outage left: some
    /// creates met it (503), more than `min` got through, every acknowledged one is stored and
    /// seen once, in order, by the watch kept open through it and by a new one from
    /// `start_rv` ([`assert_stored_and_watched`]), and `lost` (refused meanwhile) is not
    /// stored. The stored names with their resourceVersions.
    pub(crate) async fn finish_after_outage(
        self,
        api: &Api<Flunder>,
        start_rv: &str,
        live: WatchStream,
        min: usize,
    ) -> BTreeMap<String, u64> {
        let (acknowledged, failed) = self.finish().await;
        assert!(failed > 0, "no create met the outage");
        assert!(
            acknowledged.len() > min,
            "too few creates: {acknowledged:?}"
        );
        let stored = assert_stored_and_watched(api, &acknowledged, start_rv, live).await;
        assert!(!stored.contains_key("lost"));
        stored
    }

    /// Stops the writers: the names acknowledged, and how many creates failed with 503.
    async fn finish(self) -> (Vec<String>, usize) {
        self.stop.store(true, Ordering::SeqCst);
        let (mut acknowledged, mut failed) = (Vec::new(), 0);
        for writer in self.writers {
            let (names, failures) = writer.await.unwrap();
            acknowledged.extend(names);
            failed += failures;
        }
        (acknowledged, failed)
    }
}

/// After an outage: every acknowledged create is stored, and the watch kept open through it
/// and a new one from `start_rv` each see every object stored since once, in resourceVersion
/// order. The stored names with their resourceVersions.
async fn assert_stored_and_watched(
    api: &Api<Flunder>,
    acknowledged: &[String],
    start_rv: &str,
    live: WatchStream,
) -> BTreeMap<String, u64> {
    let list = api.list(&ListParams::default()).await.unwrap();
    let stored: BTreeMap<String, u64> = list
        .items
        .iter()
        .map(|f| {
            let rv = f.metadata.resource_version.as_deref().unwrap();
            (f.metadata.name.clone().unwrap(), rv.parse().unwrap())
        })
        .collect();
    for name in acknowledged {
        assert!(stored.contains_key(name), "acknowledged {name} was lost");
    }
    let start: u64 = start_rv.parse().unwrap();
    let since: BTreeMap<String, u64> = stored
        .iter()
        .filter(|(_, rv)| **rv > start)
        .map(|(name, rv)| (name.clone(), *rv))
        .collect();
    let through = watch_added(api, start_rv, Some(live), since.len()).await;
    assert_eq!(through, since, "the watch kept open through the outage");
    let seen = watch_added(api, start_rv, None, since.len()).await;
    assert_eq!(seen, since, "a watch from before the outage");
    stored
}

/// Reads `count` ADDED events from `watch` (or a new watch from `from`), checking that their
/// resourceVersions only grow. When the server ends the watch or sends an ERROR (as it may
/// while storage is away), it is opened again from the last resourceVersion received, as a
/// client does; a 410 there would mean a gap, and fails.
pub(crate) async fn watch_added(
    api: &Api<Flunder>,
    from: &str,
    watch: Option<WatchStream>,
    count: usize,
) -> BTreeMap<String, u64> {
    let params = WatchParams::default().timeout(120);
    let mut last: u64 = from.parse().unwrap();
    let mut watch = match watch {
        Some(watch) => watch,
        None => api.watch(&params, from).await.unwrap().boxed(),
    };
    let mut seen = BTreeMap::new();
    let mut reopened = 0;
    while seen.len() < count {
        let event = tokio::time::timeout(Duration::from_secs(60), watch.next())
            .await
            .expect("a watch event in time");
        match event {
            Some(Ok(WatchEvent::Added(f))) => {
                let rv: u64 = f.metadata.resource_version.unwrap().parse().unwrap();
                assert!(rv > last, "out of order or twice: {rv} after {last}");
                last = rv;
                let name = f.metadata.name.unwrap();
                assert!(seen.insert(name.clone(), rv).is_none(), "{name} twice");
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            Some(Ok(WatchEvent::Error(e))) if e.code != 410 => {}
            None | Some(Err(_)) | Some(Ok(WatchEvent::Error(_))) if reopened < 10 => {
                reopened += 1;
                watch = api.watch(&params, &last.to_string()).await.unwrap().boxed();
            }
            other => panic!("expected ADDED events, got {other:?}"),
        }
    }
    seen
}

pub(crate) type WatchStream =
    futures::stream::BoxStream<'static, kube::Result<WatchEvent<Flunder>>>;

/// Where `.ci/postgres.sh start` leaves the CA and the client certificate of the TLS role:
/// `APISERVER_TEST_POSTGRES_TLS`, default `/tmp/apiserver-ci-postgres-tls`.
fn tls_dir() -> std::path::PathBuf {
    std::env::var_os("APISERVER_TEST_POSTGRES_TLS")
        .map_or_else(|| "/tmp/apiserver-ci-postgres-tls".into(), Into::into)
}

/// The test database as the role that may log in only over TLS with a client certificate.
fn tls_url() -> String {
    let url = postgres_url();
    let after_host = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
    let database = after_host
        .split_once('/')
        .map_or("apiserver", |(_, db)| db.split('?').next().unwrap_or(db));
    format!("postgres://apiserver_tls@{}/{database}", host_port(&url))
}

/// `--postgres-cafile`, `--postgres-certfile` and `--postgres-keyfile`: the server verifies
/// PostgreSQL's certificate against the CA and logs in with its client certificate (the
/// role's only way in); without the certificate, or without TLS, it cannot connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_over_tls_with_a_client_certificate() {
    use extension_apiserver::storage::{PostgresBackend, PostgresOptions, PostgresTls};
    let tls = tls_dir();
    let (ca, cert, key) = (
        tls.join("ca.crt"),
        tls.join("client.crt"),
        tls.join("client.key"),
    );
    assert!(
        ca.exists() && cert.exists() && key.exists(),
        "no TLS files in {} (APISERVER_TEST_POSTGRES_TLS); `bash .ci/postgres.sh start` makes them",
        tls.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        postgres_cafile: Some(ca.clone()),
        postgres_certfile: Some(cert),
        postgres_keyfile: Some(key),
        ..options(dir.path(), &tls_url(), &postgres_schema())
    };
    let (server, client) = start(options).await;
    let api: Api<Flunder> = Api::namespaced(client, "default");
    let created = api
        .create(&PostParams::default(), &flunder("secure", "x"))
        .await
        .unwrap();
    let got = api.get("secure").await.unwrap();
    assert_eq!(
        got.metadata.resource_version,
        created.metadata.resource_version
    );
    server.stop().await;

    // The same role without its certificate, or without TLS, is turned away.
    let connect = |tls: Option<PostgresTls>| {
        PostgresBackend::connect(PostgresOptions {
            url: Some(tls_url()),
            schema: postgres_schema(),
            pool_size: 1,
            tls,
            ..PostgresOptions::default()
        })
    };
    let ca_only = PostgresTls::from_files(&ca, None, None).unwrap();
    assert!(connect(Some(ca_only)).await.is_err());
    assert!(connect(None).await.is_err());
}

/// As on etcd: the server starts while the database does not answer, `/readyz` fails on
/// `postgres` and storage requests get `Status` 503; once it answers the server creates its
/// tables and serves, with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_starts_while_the_database_is_away_and_serves_once_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start().await;
    relay.cut();
    let options = options(dir.path(), &relay.url(), &postgres_schema());
    // Not `serve`: its check that the database answers would fail, as it should.
    let server = TestServer::start_configured(options, wardle::configure).await;
    let client = no_retry_client(&server).await;

    wait_not_ready(&client).await;
    assert_unavailable(&send(&client, "GET", FLUNDERS, "").await);
    assert_unavailable(&send(&client, "POST", FLUNDERS, &flunder_json("early")).await);
    assert_eq!(send(&client, "GET", "/livez", "").await.code, 200);

    relay.mend();
    wait_ready(&client).await;
    let reply = send(&client, "POST", FLUNDERS, &flunder_json("one")).await;
    assert_eq!(reply.code, 201, "{}", reply.body);
    let reply = send(&client, "GET", FLUNDERS, "").await;
    assert_eq!(reply.code, 200, "{}", reply.body);
    let list = reply.json();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| item["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["one"]);
    server.stop().await;
}

/// `--postgres-statement-timeout`: a create waiting on a lock longer than that is cancelled by
/// the database itself, so nothing of it goes on running or waiting there, and the client
/// gets kube's 504 `Timeout` Status; nothing was written, and once the lock is gone creates
/// work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_statement_timeout_stops_what_the_request_gave_up_on() {
    let dir = tempfile::tempdir().unwrap();
    let schema = postgres_schema();
    let options = ServerOptions {
        postgres_statement_timeout_seconds: Some(1),
        ..options(dir.path(), &postgres_url(), &schema)
    };
    let (server, client) = start(options).await;
    let reply = send(&client, "POST", FLUNDERS, &flunder_json("before")).await;
    assert_eq!(reply.code, 201, "{}", reply.body);

    // Another session holds the table every write (and read) goes through.
    let (locker, connection) = lock_live(&schema).await;
    let started = std::time::Instant::now();
    let reply = send(&client, "POST", FLUNDERS, &flunder_json("blocked")).await;
    let status = reply.json();
    assert_eq!(reply.code, 504, "{status}");
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["reason"], "Timeout", "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("statement timeout"),
        "{status}"
    );
    // Not stalled until the server's own request timeout (60 s).
    assert!(started.elapsed() < Duration::from_secs(30), "{status}");
    // The database stopped it: no one waits on the lock any more.
    let waiting: i64 = locker
        .query_one(
            &format!(
                "SELECT COUNT(*) FROM pg_locks WHERE relation = '{schema}.live'::regclass \
                 AND NOT granted"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(waiting, 0);

    locker.batch_execute("ROLLBACK").await.unwrap();
    drop(locker);
    connection.await.unwrap().unwrap();
    assert_eq!(
        send(&client, "GET", &format!("{FLUNDERS}/blocked"), "")
            .await
            .code,
        404
    );
    let reply = send(&client, "POST", FLUNDERS, &flunder_json("after")).await;
    assert_eq!(reply.code, 201, "{}", reply.body);
    server.stop().await;
}

/// A list reads under a deadline of its own (`PostgresOptions::list_timeout`; in a server the
/// request's, 60 s by default), as kube-apiserver's lists read under the request's: a page of a
/// large collection may take longer than one key. While another session holds the table, a
/// get gives up at the statement timeout with `Timeout` (504), and a list waits and is answered
/// once the table is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_list_may_take_longer_than_one_key() {
    use extension_apiserver::storage::{
        Backend, ListRequest, PostgresBackend, PostgresOptions, StorageError,
    };
    let schema = postgres_schema();
    let backend = PostgresBackend::connect(PostgresOptions {
        url: Some(postgres_url()),
        schema: schema.clone(),
        pool_size: 4,
        request_timeout: Duration::from_secs(1),
        statement_timeout: Duration::from_secs(1),
        list_timeout: Some(Duration::from_secs(30)),
        ..PostgresOptions::default()
    })
    .await
    .unwrap();
    backend
        .create("/flunders/default/a", bytes::Bytes::from_static(b"{}"))
        .await
        .unwrap();

    let (locker, connection) = lock_live(&schema).await;
    let locked = std::time::Instant::now();
    let unlock = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(4)).await;
        locker.batch_execute("ROLLBACK").await.unwrap();
    });
    let got = backend.get("/flunders/default/a").await;
    assert!(matches!(got, Err(StorageError::Timeout(_))), "{got:?}");
    let request = ListRequest {
        prefix: "/flunders/".into(),
        ..ListRequest::default()
    };
    let list = backend.list(&request).await.unwrap();
    assert!(locked.elapsed() >= Duration::from_secs(3));
    let keys: Vec<&str> = list.items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/flunders/default/a"]);
    unlock.await.unwrap();
    connection.await.unwrap().unwrap();
}

/// Another session that holds the `live` table of `schema` (which every write and read goes
/// through) until it rolls back, and its connection's task.
async fn lock_live(
    schema: &str,
) -> (
    tokio_postgres::Client,
    JoinHandle<Result<(), tokio_postgres::Error>>,
) {
    let (locker, connection) = tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    locker
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {schema}.live IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
    (locker, connection)
}
