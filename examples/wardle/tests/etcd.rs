//! wardle on etcd processes of the tests' own, so they can stop and restart them: TLS to etcd
//! with client certificates (`--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`), and etcd
//! unreachable at start or while serving (readyz red, `Status` 503, nothing half-written,
//! recovery without a restart of the server).
//!
//! Needs the `etcd` binary (Debian's etcd-server; `bash .ci/etcd.sh start` installs it) and the
//! `etcd` feature: `cargo test -p wardle --features etcd --test etcd`.
#![cfg(feature = "etcd")]

use crate::common::*;

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use extension_apiserver::server::{APIServer, ServerOptions, StorageBackendKind};
use extension_apiserver_testing::TestServer;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::Value;
use wardle::Flunder;

const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";

/// A port nobody listens on right now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The files of etcd's TLS: its serving certificate and the CA that also signs clients.
struct EtcdTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// One etcd process on free loopback ports and a data directory that outlives restarts.
struct Etcd {
    /// The member's name, and the `--initial-cluster` it starts with (`name=peer-url,...`).
    name: String,
    initial_cluster: String,
    data_dir: PathBuf,
    log: PathBuf,
    client_port: u16,
    peer_port: u16,
    tls: Option<EtcdTls>,
    child: Option<Child>,
}

impl Etcd {
    /// An etcd that is not started yet, with its data and log in `dir`.
    fn new(dir: &Path, tls: Option<EtcdTls>) -> Etcd {
        let found = Command::new("etcd").arg("--version").output();
        assert!(
            found.is_ok_and(|out| out.status.success()),
            "the etcd binary is not on PATH: `bash .ci/etcd.sh start` installs Debian's etcd-server"
        );
        let peer_port = free_port();
        Etcd {
            name: "wardle-test".into(),
            initial_cluster: format!("wardle-test=http://127.0.0.1:{peer_port}"),
            data_dir: dir.join("etcd-data"),
            log: dir.join("etcd.log"),
            client_port: free_port(),
            peer_port,
            tls,
            child: None,
        }
    }

    fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// Starts (or restarts, on the same ports and data) the process.
    fn start(&mut self) {
        assert!(self.child.is_none(), "etcd runs already");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut command = Command::new("etcd");
        command
            .args(["--name", &self.name, "--data-dir"])
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &self.url()])
            .args(["--advertise-client-urls", &self.url()])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .arg(format!("--initial-cluster={}", self.initial_cluster))
            // A member back from a pause asks before it campaigns, instead of deposing a
            // leader that is doing fine (the default from etcd 3.5 on).
            .arg("--pre-vote");
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        let log = File::create(&self.log).unwrap();
        let child = command
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
    }

    /// Kills the process (SIGKILL: no goodbye to its clients) and waits for it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process.
    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("etcd runs").id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Panics with the log if the process has exited.
    fn assert_running(&mut self) {
        if let Some(child) = &mut self.child
            && let Some(status) = child.try_wait().unwrap()
        {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("etcd exited ({status}); its log:\n{log}");
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Options of a wardle server on `etcd` with certificates in `dir`.
fn options(dir: &Path, etcd: &Etcd) -> ServerOptions {
    ServerOptions {
        storage_backend: StorageBackendKind::Etcd3,
        etcd_servers: vec![etcd.url()],
        compaction_interval_seconds: 0,
        ..TestServer::options(dir)
    }
}

/// The server, and an admin client that does not retry (see [`no_retry_client`]).
async fn start(options: ServerOptions) -> (TestServer, Client) {
    let server = TestServer::start_with_options(options, vec![wardle::api_group()]).await;
    let client = no_retry_client(&server).await;
    (server, client)
}

/// Asserts `/readyz` fails on etcd, as kube-apiserver's does.
async fn assert_not_ready(client: &Client) {
    let reply = send(client, "GET", "/readyz?verbose", "").await;
    assert_eq!(reply.code, 500, "{}", reply.body);
    assert!(
        reply.body.contains("[-]etcd failed: reason withheld\n"),
        "{}",
        reply.body
    );
    assert!(
        reply.body.ends_with("readyz check failed\n"),
        "{}",
        reply.body
    );
    let reply = send(client, "GET", "/readyz/etcd", "").await;
    assert_eq!(reply.code, 500, "{}", reply.body);
}

/// Asserts a storage request got `Status` 503 `ServiceUnavailable` naming etcd.
#[track_caller]
fn assert_unavailable(reply: &Reply) {
    let status = reply.json();
    assert_eq!(reply.code, 503, "{status}");
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["code"], 503, "{status}");
    assert_eq!(status["reason"], "ServiceUnavailable", "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains("etcd"), "{status}");
}

/// Asserts a watch failed on storage: a 503 `Status`, or (once the stream has begun) a
/// 200 whose only event is an `ERROR` with that `Status`, as kube-apiserver may send either.
#[track_caller]
fn assert_watch_unavailable(reply: &Reply) {
    if reply.code != 200 {
        return assert_unavailable(reply);
    }
    let events: Vec<&str> = reply.body.lines().collect();
    assert_eq!(events.len(), 1, "{}", reply.body);
    let event: Value = serde_json::from_str(events[0]).unwrap();
    assert_eq!(event["type"], "ERROR", "{event}");
    let status = Reply {
        code: event["object"]["code"].as_u64().unwrap_or_default() as u16,
        body: event["object"].to_string(),
    };
    assert_unavailable(&status);
}

/// Polls `/readyz` until it is `ok` (at most 120 tries, half a second apart).
async fn wait_ready(client: &Client, etcd: &mut Etcd) {
    for _ in 0..120 {
        etcd.assert_running();
        let reply = send(client, "GET", "/readyz", "").await;
        if reply.code == 200 {
            assert_eq!(reply.body, "ok");
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = std::fs::read_to_string(&etcd.log).unwrap_or_default();
    panic!("the server did not become ready on etcd; etcd's log:\n{log}");
}

/// Watches flunders in `default` from `rv` until `name` is added (at most 20 events).
async fn watch_sees_added(api: &Api<Flunder>, rv: &str, name: &str, create: impl AsyncFnOnce()) {
    let params = WatchParams::default().timeout(30);
    let mut stream = api.watch(&params, rv).await.unwrap().boxed();
    create().await;
    for _ in 0..20 {
        let event = tokio::time::timeout(Duration::from_secs(60), stream.next())
            .await
            .expect("a watch event")
            .expect("the watch is open")
            .expect("a good event");
        match event {
            WatchEvent::Added(f) if f.metadata.name.as_deref() == Some(name) => return,
            WatchEvent::Error(e) => panic!("watch error: {e:?}"),
            _ => {}
        }
    }
    panic!("no ADDED event for {name}");
}

/// A CA, and certificates it signs, for etcd's TLS.
struct Pki {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "etcd-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let ca_pem = params.self_signed(&key).unwrap().pem();
        Pki {
            issuer: Issuer::new(params, key),
            ca_pem,
        }
    }

    /// A certificate for `cn` (and 127.0.0.1 / localhost) and its key, written as
    /// `dir/{stem}.crt` and `dir/{stem}.key`.
    fn leaf(&self, dir: &Path, stem: &str, cn: &str) -> (PathBuf, PathBuf) {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_file, key_file) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert_file, key_file)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serves_from_etcd_over_tls_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let ca = dir.path().join("etcd-ca.crt");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let (cert, key) = pki.leaf(dir.path(), "etcd-server", "etcd");
    let (client_cert, client_key) = pki.leaf(dir.path(), "apiserver-etcd-client", "apiserver");
    let tls = EtcdTls {
        ca: ca.clone(),
        cert,
        key,
    };
    let mut etcd = Etcd::new(dir.path(), Some(tls));
    etcd.start();

    let with_cert = ServerOptions {
        etcd_cafile: Some(ca.clone()),
        etcd_certfile: Some(client_cert.clone()),
        etcd_keyfile: Some(client_key.clone()),
        ..options(&dir.path().join("a"), &etcd)
    };
    let (server, client) = start(with_cert).await;
    wait_ready(&client, &mut etcd).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    api.create(&pp, &flunder("one", "x")).await.unwrap();
    assert_eq!(api.get("one").await.unwrap().metadata.name.unwrap(), "one");
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let rv = list.metadata.resource_version.unwrap();
    watch_sees_added(&api, &rv, "two", async || {
        api.create(&pp, &flunder("two", "x")).await.unwrap();
    })
    .await;
    server.stop().await;

    // Without a client certificate etcd refuses the handshake: not ready, and 503s.
    let without_cert = ServerOptions {
        etcd_cafile: Some(ca.clone()),
        ..options(&dir.path().join("b"), &etcd)
    };
    let (server, client) = start(without_cert).await;
    assert_not_ready(&client).await;
    assert_unavailable(&send(&client, "GET", FLUNDERS, "").await);
    assert_unavailable(&send(&client, "POST", FLUNDERS, &flunder_json("three")).await);
    server.stop().await;

    // Unreadable files and an https endpoint without a CA stop the start with a clear error.
    let missing = dir.path().join("no-such-ca.crt");
    let bad_ca = ServerOptions {
        etcd_cafile: Some(missing.clone()),
        ..options(&dir.path().join("c"), &etcd)
    };
    let error = APIServer::new(bad_ca)
        .start()
        .await
        .err()
        .expect("no start");
    let text = error.to_string();
    assert!(
        text.contains("no-such-ca.crt") && text.contains("etcd"),
        "{text}"
    );
    let not_pem = ServerOptions {
        etcd_cafile: Some(ca.clone()),
        etcd_certfile: Some(client_key.clone()),
        etcd_keyfile: Some(client_key.clone()),
        ..options(&dir.path().join("d"), &etcd)
    };
    let error = APIServer::new(not_pem)
        .start()
        .await
        .err()
        .expect("no start");
    assert!(error.to_string().contains("certificate"), "{error}");
    let no_ca = ServerOptions {
        etcd_certfile: Some(client_cert),
        etcd_keyfile: Some(client_key),
        ..options(&dir.path().join("e"), &etcd)
    };
    let error = APIServer::new(no_ca).start().await.err().expect("no start");
    assert!(error.to_string().contains("--etcd-cafile"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn starts_while_etcd_is_down_and_serves_once_it_is_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::new(dir.path(), None);
    let (server, client) = start(options(dir.path(), &etcd)).await;

    assert_not_ready(&client).await;
    assert_unavailable(&send(&client, "GET", FLUNDERS, "").await);
    assert_unavailable(&send(&client, "GET", &format!("{FLUNDERS}/one"), "").await);
    assert_unavailable(&send(&client, "POST", FLUNDERS, &flunder_json("one")).await);
    // Health that does not need storage stays green.
    assert_eq!(send(&client, "GET", "/livez", "").await.code, 200);

    etcd.start();
    wait_ready(&client, &mut etcd).await;
    let reply = send(&client, "POST", FLUNDERS, &flunder_json("one")).await;
    assert_eq!(reply.code, 201, "{}", reply.body);
    let reply = send(&client, "GET", FLUNDERS, "").await;
    assert_eq!(reply.code, 200, "{}", reply.body);
    assert_eq!(reply.json()["items"][0]["metadata"]["name"], "one");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovers_when_etcd_comes_back_after_dying() {
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::new(dir.path(), None);
    etcd.start();
    let (server, client) = start(options(dir.path(), &etcd)).await;
    wait_ready(&client, &mut etcd).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    api.create(&pp, &flunder("before", "x")).await.unwrap();

    etcd.kill();
    assert_not_ready(&client).await;
    assert_unavailable(&send(&client, "GET", FLUNDERS, "").await);
    assert_unavailable(&send(&client, "GET", &format!("{FLUNDERS}/before"), "").await);
    assert_unavailable(&send(&client, "POST", FLUNDERS, &flunder_json("lost")).await);
    let watch = format!("{FLUNDERS}?watch=1&resourceVersion=1");
    assert_watch_unavailable(&send(&client, "GET", &watch, "").await);
    assert_unavailable(&send(&client, "DELETE", &format!("{FLUNDERS}/before"), "").await);

    // The same data directory: what was written is there, the failed create is not.
    etcd.start();
    wait_ready(&client, &mut etcd).await;
    assert_eq!(
        api.get("before").await.unwrap().spec.reference.unwrap(),
        "x"
    );
    match api.get("lost").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404, "{s:?}"),
        other => panic!("the failed create left something behind: {other:?}"),
    }
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let rv = list.metadata.resource_version.unwrap();
    watch_sees_added(&api, &rv, "after", async || {
        api.create(&pp, &flunder("after", "x")).await.unwrap();
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answers_503_while_etcd_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::new(dir.path(), None);
    etcd.start();
    let (server, client) = start(options(dir.path(), &etcd)).await;
    wait_ready(&client, &mut etcd).await;
    let reply = send(&client, "POST", FLUNDERS, &flunder_json("one")).await;
    assert_eq!(reply.code, 201, "{}", reply.body);

    // A stopped etcd keeps its connections open and answers nothing: the request deadline,
    // not the server's 60 s request timeout (a 504), ends each request. (An unanswered
    // keep-alive ping would end it too, saying so: it goes out only after 10 s of silence.)
    etcd.signal("STOP");
    assert_not_ready(&client).await;
    let reply = send(&client, "GET", &format!("{FLUNDERS}/one"), "").await;
    assert_unavailable(&reply);
    assert!(reply.body.contains("did not answer"), "{}", reply.body);

    etcd.signal("CONT");
    wait_ready(&client, &mut etcd).await;
    let reply = send(&client, "GET", &format!("{FLUNDERS}/one"), "").await;
    assert_eq!(reply.code, 200, "{}", reply.body);
    server.stop().await;
}

/// Three etcd processes that form one cluster (members `m0`..`m2`, data and logs under
/// `dir/mN`), started.
fn start_cluster(dir: &Path) -> Vec<Etcd> {
    let mut members: Vec<Etcd> = (0..3)
        .map(|i| {
            let home = dir.join(format!("m{i}"));
            std::fs::create_dir_all(&home).unwrap();
            let mut etcd = Etcd::new(&home, None);
            etcd.name = format!("m{i}");
            etcd
        })
        .collect();
    let initial: Vec<String> = members
        .iter()
        .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
        .collect();
    for member in &mut members {
        member.initial_cluster = initial.join(",");
        member.start();
    }
    members
}

/// The index of the member that leads, as the running members report it (at most 60 tries,
/// half a second apart: an election may be under way).
async fn leader(members: &[Etcd]) -> usize {
    for _ in 0..60 {
        for (i, member) in members.iter().enumerate() {
            if member.child.is_none() {
                continue;
            }
            let status = async {
                let mut client = etcd_client::Client::connect([member.url()], None).await?;
                client.status().await
            };
            let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(5), status).await else {
                continue;
            };
            let me = status.header().map(|h| h.member_id());
            if status.leader() != 0 && me == Some(status.leader()) {
                return i;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("no etcd member leads");
}

/// Waits until `member` serves a linearizable read (it has joined the cluster, knows the
/// leader and has caught up), at most 60 tries half a second apart.
async fn wait_member_serves(member: &mut Etcd) {
    for _ in 0..60 {
        member.assert_running();
        let read = async {
            let mut client = etcd_client::Client::connect([member.url()], None).await?;
            client.get("health", None).await
        };
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(5), read).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("etcd member {} does not serve", member.name);
}

/// Polls `/readyz` until it is `ok` (at most 120 tries, half a second apart), checking that
/// the members that should run do.
async fn wait_cluster_ready(client: &Client, members: &mut [Etcd]) {
    for _ in 0..120 {
        members.iter_mut().for_each(Etcd::assert_running);
        let reply = send(client, "GET", "/readyz", "").await;
        if reply.code == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the server did not become ready on the etcd cluster");
}

/// Polls `/readyz` until it fails on etcd (at most 40 tries, half a second apart).
async fn wait_not_ready(client: &Client) {
    for _ in 0..40 {
        let reply = send(client, "GET", "/readyz?verbose", "").await;
        if reply.code == 500 && reply.body.contains("[-]etcd failed") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("/readyz stayed green without an etcd quorum");
}

/// Watches flunders from `rv` in the background, collecting the names added, until the watch
/// ends (the task then says why).
fn watch_added(
    client: &Client,
    rv: &str,
) -> (
    Arc<Mutex<std::collections::HashSet<String>>>,
    tokio::task::JoinHandle<String>,
) {
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    let seen = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let (names, rv) = (seen.clone(), rv.to_owned());
    let task = tokio::spawn(async move {
        let params = WatchParams::default().timeout(290);
        let mut stream = match api.watch(&params, &rv).await {
            Ok(stream) => stream.boxed(),
            Err(error) => return format!("no watch: {error}"),
        };
        // Bounded: the server ends the watch after 290 s at the latest.
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Added(f)) => {
                    names
                        .lock()
                        .unwrap()
                        .insert(f.metadata.name.unwrap_or_default());
                }
                Ok(WatchEvent::Error(e)) => return format!("error event: {e:?}"),
                Ok(_) => {}
                Err(error) => return format!("stream error: {error}"),
            }
        }
        "the watch ended".to_owned()
    });
    (seen, task)
}

/// Waits (at most 20 s) until the watch has seen every name in `names`.
async fn wait_seen(seen: &Mutex<std::collections::HashSet<String>>, names: &[String]) {
    for _ in 0..40 {
        let missing = {
            let seen = seen.lock().unwrap();
            names.iter().filter(|n| !seen.contains(*n)).count()
        };
        if missing == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let seen = seen.lock().unwrap();
    let missing: Vec<&String> = names.iter().filter(|n| !seen.contains(*n)).collect();
    panic!(
        "the watch missed {} writes: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

/// One request of the load: what it was, when it began and ended (since the load began),
/// and its answer.
struct Outcome {
    what: String,
    began: Duration,
    ended: Duration,
    reply: Reply,
}

impl Outcome {
    /// Whether it succeeded: 201 for a create (named `r…`), 200 for a read.
    fn ok(&self) -> bool {
        self.reply.code == if self.what.starts_with('r') { 201 } else { 200 }
    }
}

/// Writers creating flunders and readers getting one and listing, each request after the
/// last, until told to stop.
struct Load {
    stop: Arc<AtomicBool>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    start: Instant,
}

const WRITERS: usize = 8;
const READERS: usize = 4;

impl Load {
    /// Starts the load; `round` keeps names apart from earlier loads'.
    fn start(client: &Client, round: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for task in 0..WRITERS + READERS {
            let (client, stop, outcomes) = (client.clone(), stop.clone(), outcomes.clone());
            tasks.push(tokio::spawn(async move {
                // Bounded: a request takes at least a few milliseconds, and stop comes in seconds.
                for n in 0..100_000 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let (method, path, body, what) = match task {
                        t if t < WRITERS => {
                            let name = format!("r{round}-w{t}-{n}");
                            ("POST", FLUNDERS.to_owned(), flunder_json(&name), name)
                        }
                        _ if n % 2 == 0 => {
                            let path = format!("{FLUNDERS}/anchor");
                            ("GET", path, String::new(), "get".into())
                        }
                        _ => {
                            let path = format!("{FLUNDERS}?limit=5");
                            ("GET", path, String::new(), "list".into())
                        }
                    };
                    let began = start.elapsed();
                    let reply = send(&client, method, &path, &body).await;
                    let ended = start.elapsed();
                    let outcome = Outcome {
                        what,
                        began,
                        ended,
                        reply,
                    };
                    outcomes.lock().unwrap().push(outcome);
                    // Paced, so that etcd's heartbeats keep some CPU on a small machine.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }));
        }
        Load {
            stop,
            outcomes,
            tasks,
            start,
        }
    }

    /// Stops the load and hands back what every request got.
    async fn stop(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        std::mem::take(&mut *self.outcomes.lock().unwrap())
    }
}

/// How long after a member dies requests may still fail: the election of a new leader,
/// requests in flight to the dead member, and those that waited on the old leader.
const GRACE: Duration = Duration::from_secs(5);

/// Runs the load, kills member `victim` with SIGKILL, runs on for `GRACE` and a few seconds
/// more, and checks that every request that ended before the kill or began after the
/// grace succeeded. Returns the names of the flunders whose creation was acknowledged.
async fn kill_under_load(
    client: &Client,
    members: &mut [Etcd],
    victim: usize,
    round: usize,
) -> Vec<String> {
    let load = Load::start(client, round);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed_at = load.start.elapsed();
    members[victim].kill();
    tokio::time::sleep(GRACE + Duration::from_secs(4)).await;
    let outcomes = load.stop().await;

    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.ended < killed_at || o.began > killed_at + GRACE)
        .filter(|o| !o.ok())
        .map(|o| {
            format!(
                "{} at {:?} (kill at {killed_at:?}): {} {}",
                o.what, o.began, o.reply.code, o.reply.body
            )
        })
        .collect();
    // Each kind once: `r` a create, `g` a get, `l` a list, and the Status message.
    let in_grace: std::collections::BTreeSet<String> = outcomes
        .iter()
        .filter(|o| !o.ok() && o.began <= killed_at + GRACE)
        .map(|o| {
            format!(
                "{} {}",
                o.what.chars().next().unwrap_or('?'),
                o.reply.json()["message"]
            )
        })
        .collect();
    let in_grace_count = outcomes.iter().filter(|o| !o.ok()).count() - failed.len();
    eprintln!(
        "etcd member {victim} killed: {} requests, {in_grace_count} failed within the grace \
         ({in_grace:?}), {} after it",
        outcomes.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} requests failed outside the grace after member {victim} died:\n{}",
        failed.len(),
        failed[..failed.len().min(10)].join("\n")
    );
    let after_grace = outcomes
        .iter()
        .filter(|o| o.began > killed_at + GRACE)
        .count();
    assert!(
        after_grace >= WRITERS + READERS,
        "only {after_grace} requests after the grace"
    );
    created(&outcomes)
}

/// The names of the flunders whose creation was acknowledged.
fn created(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|o| o.what.starts_with('r') && o.reply.code == 201)
        .map(|o| o.what.clone())
        .collect()
}

/// Stops member `victim` (SIGSTOP: its connections stay open and nothing answers), waits for
/// the server's health probe (every second, 2 s timeout) to set it aside, then runs the load
/// for a few seconds: no request fails, none waits on the member that hangs. Returns the
/// names of the flunders created.
async fn hang_under_load(
    client: &Client,
    members: &mut [Etcd],
    victim: usize,
    round: usize,
) -> Vec<String> {
    members[victim].signal("STOP");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let load = Load::start(client, round);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let outcomes = load.stop().await;
    members[victim].signal("CONT");
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.ok())
        .map(|o| {
            format!(
                "{} at {:?}: {} {}",
                o.what, o.began, o.reply.code, o.reply.body
            )
        })
        .collect();
    eprintln!(
        "etcd member {victim} hangs: {} requests, {} failed",
        outcomes.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} requests failed while member {victim} hung:\n{}",
        failed.len(),
        failed[..failed.len().min(10)].join("\n")
    );
    assert!(
        outcomes.len() >= WRITERS + READERS,
        "only {} requests",
        outcomes.len()
    );
    created(&outcomes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serves_through_the_loss_of_an_etcd_member_and_recovers_from_quorum_loss() {
    let dir = tempfile::tempdir().unwrap();
    let mut members = start_cluster(dir.path());
    let options = ServerOptions {
        storage_backend: StorageBackendKind::Etcd3,
        etcd_servers: members.iter().map(Etcd::url).collect(),
        compaction_interval_seconds: 0,
        ..TestServer::options(&dir.path().join("server"))
    };
    for member in &mut members {
        wait_member_serves(member).await;
    }
    let (server, client) = start(options).await;
    wait_cluster_ready(&client, &mut members).await;
    let reply = send(&client, "POST", FLUNDERS, &flunder_json("anchor")).await;
    assert_eq!(reply.code, 201, "{}", reply.body);
    let rv = reply.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (seen, watch) = watch_added(&client, &rv);

    // A follower dies, then (once it is back) the leader: after the election no request fails.
    let first = leader(&members).await;
    let follower = (first + 1) % members.len();
    let mut acknowledged = kill_under_load(&client, &mut members, follower, 0).await;
    // Back in the cluster before the leader goes: else the leader's loss would be quorum's.
    members[follower].start();
    wait_member_serves(&mut members[follower]).await;
    wait_cluster_ready(&client, &mut members).await;
    // A follower hangs: the probe sets it aside, and then no request fails.
    let leading = leader(&members).await;
    let hung = (leading + 1) % members.len();
    acknowledged.extend(hang_under_load(&client, &mut members, hung, 2).await);
    wait_member_serves(&mut members[hung]).await;
    let leading = leader(&members).await;
    acknowledged.extend(kill_under_load(&client, &mut members, leading, 1).await);
    // The watch opened before either loss is still open and saw every write: the server's
    // etcd watch moved to a live member from where it was, instead of ending its watchers.
    wait_seen(&seen, &acknowledged).await;
    assert!(!watch.is_finished(), "the watch ended: {:?}", watch.await);

    // A second member dies: no quorum, so not ready, and requests get 503 (within the
    // request deadline, not the server's 60 s timeout).
    let second = (0..members.len())
        .find(|&i| members[i].child.is_some())
        .unwrap();
    members[second].kill();
    wait_not_ready(&client).await;
    let body = flunder_json("no-quorum");
    let (write, read) = tokio::join!(
        send(&client, "POST", FLUNDERS, &body),
        send(&client, "GET", FLUNDERS, ""),
    );
    assert_unavailable(&write);
    assert_unavailable(&read);

    // Both come back: ready again, and every acknowledged write is there.
    members[leading].start();
    members[second].start();
    wait_cluster_ready(&client, &mut members).await;
    let reply = send(&client, "POST", FLUNDERS, &flunder_json("after")).await;
    assert_eq!(reply.code, 201, "{}", reply.body);
    let list = send(&client, "GET", FLUNDERS, "").await;
    assert_eq!(list.code, 200, "{}", list.body);
    let names: std::collections::HashSet<String> = list.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|n| !names.contains(*n))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert!(
        acknowledged.len() > 50,
        "only {} writes acknowledged",
        acknowledged.len()
    );
    server.stop().await;
}
