//! Reliability of the real `wardle` binary on a persistent backend (SQLite, and etcd3 with the
//! `etcd` feature), with `kill -9` in the middle of the traffic:
//!
//! - every write answered 2xx before a `kill -9` is there after the restart;
//! - read-modify-write with resourceVersion loses no update: N clients racing on one object
//!   either succeed or get 409 Conflict, and the successes are exactly the final count;
//! - a watcher that reconnects from its last resourceVersion across a restart sees every
//!   change exactly once and in order (or gets 410 Gone, and a relist shows the final state).
//!
//! Each case is bounded (a fixed number of operations, and deadlines on every wait) and
//! asserts what happened, never how fast. A restart must find the objects again, so these
//! cases run on SQLite and etcd3 only: the memory backend forgets everything by design.

use crate::common::*;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

backend_tests! {
    persistent: [
        acknowledged_writes_survive_kill_9,
        read_modify_write_loses_no_update,
        watch_resumes_across_kill_9,
    ],
}

const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";
/// The annotation the cases count and number their changes in.
const SEQ: &str = "reliability.example.com/seq";

/// The storage flags (README's) for `backend`; the same flags after a restart find the same
/// objects.
fn storage_args(backend: Backend, dir: &Path) -> Vec<String> {
    match backend {
        Backend::Memory => panic!("reliability cases restart the server: persistent backends only"),
        Backend::Sqlite => vec![
            "--storage-backend=sqlite".into(),
            format!("--sqlite-path={}", dir.join("wardle.db").display()),
        ],
        #[cfg(feature = "etcd")]
        Backend::Etcd3 => vec![
            "--storage-backend=etcd3".into(),
            format!("--etcd-servers={}", etcd_endpoint()),
            format!("--etcd-prefix={}", etcd_prefix()),
            // Compaction is etcd-wide; other tests on the same etcd watch from old revisions.
            "--etcd-compaction-interval=0".into(),
        ],
        #[cfg(feature = "postgres")]
        Backend::Postgres => vec![
            "--storage-backend=postgres".into(),
            format!("--postgres-url={}", postgres_url()),
            format!("--postgres-schema={}", postgres_schema()),
        ],
    }
}

/// One run of the `wardle` binary. Dropping it kills the process.
struct Wardle {
    child: Child,
    port: u16,
    kubeconfig: PathBuf,
    /// The last lines the server logged, for failure messages.
    log: Arc<Mutex<VecDeque<String>>>,
}

impl Wardle {
    /// Starts `wardle` with its certificates in `dir/certs`, on `port` (0: any free one), and
    /// waits (at most 60 s) until it logs that it serves.
    async fn start(dir: &Path, storage: &[String], port: u16) -> Wardle {
        #[cfg(feature = "etcd")]
        if let Some(servers) = storage
            .iter()
            .find_map(|a| a.strip_prefix("--etcd-servers="))
        {
            etcd_ready(&[servers.to_string()]).await;
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_wardle"))
            .current_dir(dir)
            // Standalone even in a pod (its service account would select delegated mode).
            .env_remove("KUBERNETES_SERVICE_HOST")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg("--cert-dir=certs")
            .args(storage)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the wardle binary runs");
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, rx) = mpsc::channel();
        let kept = Arc::clone(&log);
        // Reads the log to its end (so the server never blocks on a full pipe), keeping the
        // last lines and passing on the one that says where it serves.
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if line.contains("serving addr=") {
                    let _ = tx.send(line.clone());
                }
                let mut kept = kept.lock().unwrap();
                if kept.len() == 40 {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        let mut wardle = Wardle {
            child,
            port,
            kubeconfig: dir.join("certs").join("kubeconfig"),
            log,
        };
        let serving = tokio::task::block_in_place(|| rx.recv_timeout(Duration::from_secs(60)))
            .unwrap_or_else(|_| panic!("wardle did not serve within 60 s; {}", wardle.logs()));
        // "serving addr=127.0.0.1:PORT kubeconfig=..."
        let addr = serving
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .unwrap_or_else(|| panic!("no address in {serving:?}"));
        wardle.port = addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {serving:?}"));
        wardle
    }

    /// `kill -9`: SIGKILL, nothing flushed, no graceful shutdown. Returns the port it served on.
    fn kill_9(mut self) -> u16 {
        self.child.kill().expect("SIGKILL");
        tokio::task::block_in_place(|| self.child.wait()).expect("reaped");
        self.port
    }

    /// An admin client (from the kubeconfig the server writes) that never retries on its own,
    /// so every request the cases count was sent once.
    async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
        config.default_retry = false;
        Client::try_from(config).unwrap()
    }

    fn logs(&self) -> String {
        let log = self.log.lock().unwrap();
        format!(
            "its last log lines:\n{}",
            log.iter().cloned().collect::<Vec<_>>().join("\n")
        )
    }
}

impl Drop for Wardle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one request got: an answer (code and body), or none (the connection failed or broke).
#[derive(Debug)]
enum Answer {
    Code(u16, Value),
    None(String),
}

/// Sends one request (at most 30 s) and reads the whole answer.
async fn request(client: &Client, method: &str, path: &str, body: Option<&Value>) -> Answer {
    let body = body
        .map(|b| serde_json::to_vec(b).unwrap())
        .unwrap_or_default();
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(kube::client::Body::from(body))
        .unwrap();
    let exchange = async {
        let response = client.send(request).await.map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let body = body.collect_bytes().await.map_err(|e| e.to_string())?;
        let body = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        Ok::<_, String>(Answer::Code(parts.status.as_u16(), body))
    };
    match tokio::time::timeout(Duration::from_secs(30), exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Answer::None(e),
        Err(_) => Answer::None("no answer within 30 s".into()),
    }
}

/// The body of an answer with this code, or a panic saying what came instead.
#[track_caller]
fn expect_code(answer: Answer, code: u16, what: &str) -> Value {
    match answer {
        Answer::Code(c, body) if c == code => body,
        other => panic!("{what}: expected {code}, got {other:?}"),
    }
}

fn flunder_json(name: &str, seq: u64) -> Value {
    json!({
        "apiVersion": "wardle.example.com/v1alpha1",
        "kind": "Flunder",
        "metadata": {"name": name, "annotations": {SEQ: seq.to_string()}},
        "spec": {"reference": "r"},
    })
}

fn seq_of(object: &Value) -> u64 {
    object["metadata"]["annotations"][SEQ]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no {SEQ} annotation in {object}"))
}

fn str_of<'a>(object: &'a Value, field: &str) -> &'a str {
    object["metadata"][field]
        .as_str()
        .unwrap_or_else(|| panic!("no metadata.{field} in {object}"))
}

/// Every object in `default` (one list; the cases stay well under a page's worth).
async fn list_all(client: &Client) -> Vec<Value> {
    let list = expect_code(request(client, "GET", FLUNDERS, None).await, 200, "list");
    list["items"].as_array().unwrap().clone()
}

/// Writers create objects as fast as they can; the server is killed with SIGKILL while they
/// do. After a restart on the same storage, every create that was answered 2xx is there with
/// the uid the answer named. (A create that got no answer may or may not have happened.)
async fn acknowledged_writes_survive_kill_9(backend: Backend) {
    const WRITERS: usize = 4;
    /// Each writer stops after this many creates, if the kill has not stopped it before.
    const MAX_PER_WRITER: usize = 2_000;
    /// The kill comes once this many creates were acknowledged (or after 30 s).
    const KILL_AFTER: usize = 150;

    let dir = tempfile::tempdir().unwrap();
    let storage = storage_args(backend, dir.path());
    let server = Wardle::start(dir.path(), &storage, 0).await;
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = server.client().await;
        let acknowledged = Arc::clone(&acknowledged);
        let stop = Arc::clone(&stop);
        writers.push(tokio::spawn(async move {
            // (name, uid) of each acknowledged create, what other answers came, and why the
            // writer stopped.
            let mut created = Vec::new();
            let mut refused = Vec::new();
            let mut ended = "stopped".to_string();
            for i in 0..MAX_PER_WRITER {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let name = format!("w{w}-{i}");
                match request(&client, "POST", FLUNDERS, Some(&flunder_json(&name, 0))).await {
                    Answer::Code(201, body) => {
                        created.push((name, str_of(&body, "uid").to_string()));
                        acknowledged.fetch_add(1, Ordering::SeqCst);
                    }
                    Answer::Code(code, body) => refused.push(format!("{name}: {code} {body}")),
                    // The server is gone: this writer is done.
                    Answer::None(error) => {
                        ended = error;
                        break;
                    }
                }
            }
            (created, refused, ended)
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while acknowledged.load(Ordering::SeqCst) < KILL_AFTER && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The writers are mid-stream: some creates are in flight as the process dies.
    let port = server.kill_9();
    stop.store(true, Ordering::SeqCst);
    let mut created = Vec::new();
    for writer in writers {
        let (mine, refused, ended) = writer.await.unwrap();
        assert!(
            refused.is_empty(),
            "creates refused before the kill: {refused:?}"
        );
        eprintln!(
            "a writer had {} creates acknowledged, then: {ended}",
            mine.len()
        );
        created.extend(mine);
    }
    assert!(
        !created.is_empty(),
        "no create was acknowledged before the kill"
    );

    let server = Wardle::start(dir.path(), &storage, port).await;
    let client = server.client().await;
    let stored: HashMap<String, String> = list_all(&client)
        .await
        .iter()
        .map(|o| (str_of(o, "name").to_string(), str_of(o, "uid").to_string()))
        .collect();
    let lost: Vec<_> = created
        .iter()
        .filter(|(name, uid)| stored.get(name) != Some(uid))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged creates are missing (or have another uid) after kill -9: {lost:?}",
        lost.len(),
        created.len()
    );
    // Besides those, at most the one create each writer had in flight.
    assert!(stored.len() <= created.len() + WRITERS, "{stored:?}");
    eprintln!(
        "{} creates acknowledged before kill -9, {} objects after the restart",
        created.len(),
        stored.len()
    );
}

/// N clients each do a fixed number of read-modify-write increments of one counter, sending
/// the resourceVersion they read. Every attempt gets 200 or 409 Conflict, and the final
/// counter equals the number of 200s: no update was lost.
async fn read_modify_write_loses_no_update(backend: Backend) {
    const CLIENTS: usize = 8;
    const ATTEMPTS: usize = 15;

    let dir = tempfile::tempdir().unwrap();
    let storage = storage_args(backend, dir.path());
    let server = Wardle::start(dir.path(), &storage, 0).await;
    let client = server.client().await;
    let created = request(&client, "POST", FLUNDERS, Some(&flunder_json("counter", 0))).await;
    expect_code(created, 201, "create the counter");

    let path = format!("{FLUNDERS}/counter");
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = server.client().await;
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut conflicts, mut other) = (0u64, 0u64, Vec::new());
            for _ in 0..ATTEMPTS {
                let read = expect_code(request(&client, "GET", &path, None).await, 200, "get");
                let mut next = read.clone();
                next["metadata"]["annotations"][SEQ] = json!((seq_of(&read) + 1).to_string());
                // `next` carries the resourceVersion `read` had: a precondition.
                match request(&client, "PUT", &path, Some(&next)).await {
                    Answer::Code(200, _) => ok += 1,
                    Answer::Code(409, body) if body["reason"] == "Conflict" => conflicts += 1,
                    answer => other.push(format!("{answer:?}")),
                }
            }
            (ok, conflicts, other)
        }));
    }
    let (mut ok, mut conflicts) = (0, 0);
    for task in tasks {
        let (o, c, other) = task.await.unwrap();
        assert!(
            other.is_empty(),
            "answers other than 200 and 409: {other:?}"
        );
        ok += o;
        conflicts += c;
    }
    let last = expect_code(request(&client, "GET", &path, None).await, 200, "get");
    assert_eq!(ok + conflicts, (CLIENTS * ATTEMPTS) as u64);
    assert!(ok > 0, "no update succeeded");
    eprintln!("{ok} updates succeeded, {conflicts} got 409 Conflict");
    assert_eq!(
        seq_of(&last),
        ok,
        "{ok} updates succeeded ({conflicts} conflicts), but the counter is {}",
        seq_of(&last)
    );
    drop(server);
}

/// A change as a watcher should see it: event type, object name, the `SEQ` annotation of
/// the object in the event, and the resourceVersion the write was answered with (none for a
/// delete, whose answer is the object as it was).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Change {
    kind: String,
    name: String,
    seq: u64,
    rv: Option<String>,
}

/// How a watch ended, and how many watch requests it took.
enum Resumed {
    /// Saw every change up to the last one.
    Complete(Vec<Change>, usize),
    /// Got 410 Gone after these changes; a relist is due.
    Gone(Vec<Change>, usize),
}

/// Watches flunders in `default` from `rv` until it sees `last` (ADDED), reconnecting from
/// the last resourceVersion it saw whenever the stream ends or the server is away (until
/// `deadline`). `progress` counts the changes seen.
async fn watch_until(
    client: Client,
    mut rv: String,
    last: String,
    deadline: Instant,
    progress: Arc<AtomicUsize>,
) -> Resumed {
    let mut seen = Vec::new();
    let mut connects = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "the watch did not see {last} in time; saw {seen:?}"
        );
        connects += 1;
        assert!(connects < 1_000, "too many reconnects; saw {seen:?}");
        let request = http::Request::builder()
            .uri(format!(
                "{FLUNDERS}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=30"
            ))
            .body(Vec::new())
            .unwrap();
        let stream =
            match tokio::time::timeout(Duration::from_secs(10), client.request_stream(request))
                .await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(kube::Error::Api(status))) if status.code == 410 => {
                    return Resumed::Gone(seen, connects);
                }
                // The server is down or not up yet: try again shortly.
                Ok(Err(_)) | Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
        let stream: std::pin::Pin<Box<dyn futures::AsyncBufRead + Send>> = Box::pin(stream);
        let mut lines = stream.lines();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match tokio::time::timeout(left, lines.next()).await {
                Ok(Some(Ok(line))) => line,
                // The stream ended or broke (timeoutSeconds, or the server died): reconnect.
                Ok(Some(Err(_))) | Ok(None) => break,
                Err(_) => panic!("the watch did not see {last} in time; saw {seen:?}"),
            };
            let event: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not a watch event ({e}): {line}"));
            let object = &event["object"];
            let kind = event["type"].as_str().unwrap_or_default().to_string();
            match kind.as_str() {
                "ERROR" if object["code"] == 410 => return Resumed::Gone(seen, connects),
                "ERROR" => panic!("watch error: {event}"),
                "BOOKMARK" => rv = str_of(object, "resourceVersion").to_string(),
                _ => {
                    rv = str_of(object, "resourceVersion").to_string();
                    let name = str_of(object, "name").to_string();
                    let done = kind == "ADDED" && name == last;
                    seen.push(Change {
                        rv: (kind != "DELETED").then(|| rv.clone()),
                        seq: seq_of(object),
                        kind,
                        name,
                    });
                    progress.fetch_add(1, Ordering::SeqCst);
                    if done {
                        return Resumed::Complete(seen, connects);
                    }
                }
            }
        }
    }
}

/// The writer makes a numbered sequence of creates, updates and deletes; halfway through, the
/// server is killed with SIGKILL and started again on the same storage and port. A watcher
/// that reconnects from the last resourceVersion it saw gets every change exactly once, in
/// order — or 410 Gone, and then a relist shows the final state.
async fn watch_resumes_across_kill_9(backend: Backend) {
    const OPERATIONS: u64 = 60;

    let dir = tempfile::tempdir().unwrap();
    let storage = storage_args(backend, dir.path());
    let mut server = Some(Wardle::start(dir.path(), &storage, 0).await);
    let client = server.as_ref().unwrap().client().await;
    let list = expect_code(request(&client, "GET", FLUNDERS, None).await, 200, "list");
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let last = "last".to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    let progress = Arc::new(AtomicUsize::new(0));
    let watcher = tokio::spawn(watch_until(
        server.as_ref().unwrap().client().await,
        from,
        last.clone(),
        deadline,
        Arc::clone(&progress),
    ));

    // Operation i: create o{i/3} on i%3 == 0, update it on 1, and on 2 delete it every other
    // time and update it otherwise. Each write stores SEQ = i.
    let mut expected = Vec::new();
    let mut current: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..=OPERATIONS {
        if i == OPERATIONS / 2 {
            // The watch is open (it has seen a change) when the server dies under it; it may
            // or may not have seen all the changes made so far.
            while progress.load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline, "the watch saw no change");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            eprintln!(
                "kill -9 after {} changes, the watcher has seen {}",
                expected.len(),
                progress.load(Ordering::SeqCst)
            );
            let port = server.take().unwrap().kill_9();
            server = Some(Wardle::start(dir.path(), &storage, port).await);
        }
        let client = server.as_ref().unwrap().client().await;
        let name = if i == OPERATIONS {
            last.clone()
        } else {
            format!("o{}", i / 3)
        };
        let one = format!("{FLUNDERS}/{name}");
        let change = |kind: &str, seq: u64, body: &Value| Change {
            kind: kind.into(),
            name: name.clone(),
            seq,
            rv: (kind != "DELETED").then(|| str_of(body, "resourceVersion").to_string()),
        };
        if i % 3 == 0 || i == OPERATIONS {
            let answer = request(&client, "POST", FLUNDERS, Some(&flunder_json(&name, i))).await;
            let body = expect_code(answer, 201, "create");
            expected.push(change("ADDED", i, &body));
            current.insert(name, i);
        } else if i % 3 == 2 && i % 2 == 0 {
            let body = expect_code(request(&client, "DELETE", &one, None).await, 200, "delete");
            let seq = current.remove(&name).unwrap();
            expected.push(change("DELETED", seq, &body));
        } else {
            let read = expect_code(request(&client, "GET", &one, None).await, 200, "get");
            let mut next = read.clone();
            next["metadata"]["annotations"][SEQ] = json!(i.to_string());
            let body = expect_code(request(&client, "PUT", &one, Some(&next)).await, 200, "put");
            expected.push(change("MODIFIED", i, &body));
            current.insert(name, i);
        }
    }

    match watcher.await.unwrap() {
        Resumed::Complete(seen, connects) => {
            eprintln!(
                "the watcher saw all {} changes in {connects} watches",
                seen.len()
            );
            assert!(
                connects >= 2,
                "the kill broke the watch, so it must have resumed"
            );
            assert_eq!(
                seen.len(),
                expected.len(),
                "every change exactly once:\nseen     {seen:?}\nexpected {expected:?}"
            );
            for (i, (s, e)) in seen.iter().zip(&expected).enumerate() {
                assert_eq!(s, e, "change {i} (in order, exactly once)");
            }
        }
        Resumed::Gone(seen, connects) => {
            eprintln!("410 after {} changes and {connects} watches", seen.len());
            // Allowed: the history the watcher needed is gone. What it saw was still a
            // prefix of the changes, and a relist shows the final state.
            assert_eq!(seen, expected[..seen.len()], "seen before 410");
            let client = server.as_ref().unwrap().client().await;
            let listed: BTreeMap<String, u64> = list_all(&client)
                .await
                .iter()
                .map(|o| (str_of(o, "name").to_string(), seq_of(o)))
                .collect();
            assert_eq!(listed, current, "the relist after 410");
        }
    }
}
