//! The wardle binary as a user runs it (README's first command), SIGTERM, and history
//! compaction as clients see it (410 Expired, then a relist).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use extension_apiserver_testing::TestServer;

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .args(["60", "kubectl", "--kubeconfig"])
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

/// Kills the server if the test fails before it stops it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The wardle binary as the README runs it, in `dir`, with `extra` flags; returns once it logs
/// that it serves.
fn spawn_wardle(dir: &std::path::Path, extra: &[&str]) -> KillOnDrop {
    spawn_wardle_logging(dir, extra, "info").0
}

/// [`spawn_wardle`] with `RUST_LOG=rust_log`, and the log lines that follow "serving".
fn spawn_wardle_logging(
    dir: &std::path::Path,
    extra: &[&str],
    rust_log: &str,
) -> (KillOnDrop, std::sync::mpsc::Receiver<String>) {
    let child = Command::new(env!("CARGO_BIN_EXE_wardle"))
        .current_dir(dir)
        // Standalone even when the tests run in a pod (its service account would select
        // delegated mode).
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args([
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--cert-dir=.apiserver-local",
        ])
        .arg("--sqlite-path=.apiserver-local/wardle.db")
        .args(extra)
        .env("RUST_LOG", rust_log)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    // The log line "serving addr=127.0.0.1:PORT" says the server is up.
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    // Read to the end, so the server never writes its log into a closed pipe.
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let serving = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("the server logs that it is serving within 30 s");
        if line.contains("serving addr=") || line.contains("\"serving\"") {
            break line;
        }
    };
    assert!(serving.contains("127.0.0.1:"), "{serving}");
    (child, rx)
}

/// Sends SIGTERM to the server.
fn terminate(child: &KillOnDrop) {
    let pid = child.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
}

/// Waits (at most `limit`) for the server to exit, and asserts it exited cleanly.
fn exits_cleanly(child: &mut KillOnDrop, limit: Duration) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status}");
}

#[test]
fn binary_serves_kubectl_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    // README's first command, with any free port, run from a fresh directory.
    let mut child = spawn_wardle(dir.path(), &[]);
    let kubeconfig = dir.path().join(".apiserver-local/kubeconfig");
    let out = kubectl(&kubeconfig, &["get", "flunders", "-A"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    terminate(&child);
    exits_cleanly(&mut child, Duration::from_secs(20));
}

/// `--logging-format=json`: one JSON object per line, and a request's line carries its span:
/// verb, resource, user, code and the W3C `traceparent` the client sent.
#[test]
fn json_logs_carry_the_request_span_and_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let rust_log = "info,extension_apiserver::filters=debug";
    let (mut child, logs) = spawn_wardle_logging(dir.path(), &["--logging-format=json"], rust_log);
    let certs = dir.path().join(".apiserver-local");
    let kubeconfig = std::fs::read_to_string(certs.join("kubeconfig")).unwrap();
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_string();
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "20"])
        .arg("--cacert")
        .arg(certs.join("serving-ca.crt"))
        .arg("--cert")
        .arg(certs.join("admin.crt"))
        .arg("--key")
        .arg(certs.join("admin.key"))
        .args([
            "-H",
            &format!("traceparent: 00-{trace}-00f067aa0ba902b7-01"),
        ])
        .arg(format!(
            "{server}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let line = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = logs.recv_timeout(left).expect("the request's log line");
        let parsed: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if parsed["fields"]["message"] == "served" {
            break parsed;
        }
    };
    let span = &line["span"];
    assert_eq!(span["name"], "request", "{line}");
    assert_eq!(span["verb"], "list", "{line}");
    assert_eq!(span["resource"], "flunders");
    assert_eq!(span["user"], "admin");
    assert_eq!(span["trace_id"], trace);
    assert_eq!(span["parent_span_id"], "00f067aa0ba902b7");
    assert_eq!(line["fields"]["code"], 200);
    terminate(&child);
    exits_cleanly(&mut child, Duration::from_secs(20));
}

/// A kube-rs client from the server's kubeconfig that does not retry, so each answer counts.
async fn client(kubeconfig: &std::path::Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let options = kube::config::KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// The status code of a GET of `path`, or `None` when the server does not answer.
async fn status_of(client: &kube::Client, path: &str) -> Option<u16> {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    let response = client.send(request.map(Into::into)).await.ok()?;
    Some(response.status().as_u16())
}

/// SIGTERM under a steady load of creates: `/readyz` fails at once while writes are still
/// served for `--shutdown-delay-duration`, then the server stops taking connections, lets what
/// it accepted finish and exits 0. After a restart every write a client saw acknowledged is
/// there, and none that failed is: what failed was never accepted (a connection refused, or
/// closed idle as the client sent on it), no accepted request was cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_loses_no_acknowledged_write() {
    use kube::api::{Api, PostParams};
    use wardle::Flunder;

    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_wardle(dir.path(), &["--shutdown-delay-duration=2s"]);
    let kubeconfig = dir.path().join(".apiserver-local/kubeconfig");
    let client = client(&kubeconfig).await;
    let terminated = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..4 {
        let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
        let terminated = terminated.clone();
        writers.spawn(async move {
            let (mut acknowledged, mut after_sigterm, mut failed) = (Vec::new(), 0, Vec::new());
            // Bounded: at most 5,000 writes each, and it ends at the first refused connection.
            for i in 0..5_000 {
                let name = format!("w{writer}-{i}");
                let mut flunder = Flunder::default();
                flunder.metadata.name = Some(name.clone());
                match api.create(&PostParams::default(), &flunder).await {
                    Ok(_) => {
                        acknowledged.push(name);
                        if terminated.load(std::sync::atomic::Ordering::SeqCst) {
                            after_sigterm += 1;
                        }
                    }
                    Err(e) => {
                        assert!(
                            !matches!(e, kube::Error::Api(_)),
                            "only connection failures: {e}"
                        );
                        failed.push(name);
                        break;
                    }
                }
            }
            (acknowledged, after_sigterm, failed)
        });
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    terminate(&child);
    terminated.store(true, std::sync::atomic::Ordering::SeqCst);
    // Not ready at once, while still serving.
    let mut not_ready = false;
    for _ in 0..20 {
        if status_of(&client, "/readyz").await == Some(500) {
            not_ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(not_ready, "/readyz fails as soon as SIGTERM arrives");
    let (mut acknowledged, mut after_sigterm, mut failed) = (Vec::new(), 0, Vec::new());
    while let Some(done) = writers.join_next().await {
        let (names, after, failures) = done.unwrap();
        acknowledged.extend(names);
        after_sigterm += after;
        failed.extend(failures);
    }
    assert!(
        after_sigterm > 0,
        "writes are still served during the delay"
    );
    exits_cleanly(&mut child, Duration::from_secs(40));

    // The same storage, a new process: every acknowledged write is there.
    let _child = spawn_wardle(dir.path(), &[]);
    let client = self::client(&kubeconfig).await;
    let api: Api<Flunder> = Api::namespaced(client, "default");
    let stored: std::collections::BTreeSet<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|f| f.metadata.name)
        .collect();
    let missing: Vec<_> = acknowledged
        .iter()
        .filter(|n| !stored.contains(*n))
        .collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    let cut_off: Vec<_> = failed.iter().filter(|n| stored.contains(*n)).collect();
    assert!(
        cut_off.is_empty(),
        "stored but the client saw a failure: {cut_off:?}"
    );
    assert!(acknowledged.len() >= 10, "{} writes", acknowledged.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compacted_history_is_410_expired() {
    let dir = tempfile::tempdir().unwrap();
    // Storage's history is what is compacted; the watch cache keeps a window of events of its
    // own (as kube-apiserver's does) and would serve this watch from it.
    let options = extension_apiserver::server::ServerOptions {
        compaction_interval_seconds: 1,
        watch_cache: false,
        ..TestServer::options(dir.path())
    };
    let server = TestServer::start_with_options(options, vec![wardle::api_group()]).await;
    let make = |name: &str| {
        let yaml = format!(
            "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata: {{name: {name}, namespace: default}}\n"
        );
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        let out = server.kubectl(&["create", "-f", path.to_str().unwrap()]);
        assert!(out.success, "{}", out.stderr);
    };
    make("old");
    let page = server.kubectl(&[
        "get",
        "--raw",
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?limit=1",
    ]);
    let page: serde_json::Value = serde_json::from_str(&page.stdout).unwrap();
    let old_rv = page["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    make("newer");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    make("newest");
    // The compactor runs every second and compacts to what it saw one tick before; wait (a
    // bounded time) until the history after `old_rv` is gone.
    let path = format!(
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?watch=1&resourceVersion={old_rv}&timeoutSeconds=1"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let event = loop {
        let out = server.kubectl(&["get", "--raw", &path]);
        let event: serde_json::Value =
            serde_json::from_str(out.stdout.lines().next().unwrap_or("{}")).unwrap();
        if event["type"] == "ERROR" || std::time::Instant::now() > deadline {
            break event;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(event["type"], "ERROR", "{event}");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");

    let list = format!(
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?resourceVersion={old_rv}&resourceVersionMatch=Exact"
    );
    let out = server.kubectl(&["get", "--raw", &list]);
    assert!(!out.success);
    assert!(
        out.stderr.contains("Expired")
            || out.stderr.contains("410")
            || out.stderr.contains("too old"),
        "{}",
        out.stderr
    );
    // A relist works and sees everything.
    let out = server.kubectl(&["get", "fl", "-o", "name"]);
    assert_eq!(out.stdout.lines().count(), 3, "{}", out.stdout);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serves_a_given_certificate() {
    // Certificates made by one server's --cert-dir are "given" to another.
    let given = tempfile::tempdir().unwrap();
    let first = TestServer::start(given.path(), vec![wardle::api_group()]).await;
    first.stop().await;
    let certs = given.path().join("certs");
    let dir = tempfile::tempdir().unwrap();
    let options = extension_apiserver::server::ServerOptions {
        tls_cert_file: Some(certs.join("apiserver.crt")),
        tls_private_key_file: Some(certs.join("apiserver.key")),
        ..TestServer::options(dir.path())
    };
    let server = TestServer::start_with_options(options, vec![wardle::api_group()]).await;
    // The standalone kubeconfig trusts this server's own CA, not the given certificate's.
    let out = server.kubectl(&["get", "fl"]);
    assert!(!out.success, "the given certificate must be the one served");
    let ca = certs.join("serving-ca.crt");
    let out = server.kubectl(&["--certificate-authority", ca.to_str().unwrap(), "get", "fl"]);
    assert!(out.success, "{}", out.stderr);
    server.stop().await;
}
