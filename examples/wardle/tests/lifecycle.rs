//! The wardle binary as a user runs it (README's first command), SIGTERM, and history
//! compaction as clients see it (410 Expired, then a relist).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apiserver::testing::TestServer;

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

#[test]
fn binary_serves_kubectl_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join(".apiserver-local");
    // README's first command, with any free port, run from a fresh directory.
    let child = Command::new(env!("CARGO_BIN_EXE_wardle"))
        .current_dir(dir.path())
        // Standalone even when the tests run in a pod (its service account would select
        // delegated mode).
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args([
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--cert-dir=.apiserver-local",
        ])
        .arg("--sqlite-path=.apiserver-local/wardle.db")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    // The log line "serving addr=127.0.0.1:PORT" says the server is up.
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let serving = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("the server logs that it is serving within 30 s");
        if line.contains("serving addr=") {
            break line;
        }
    };
    assert!(serving.contains("127.0.0.1:"), "{serving}");
    let kubeconfig = certs.join("kubeconfig");
    let out = kubectl(&kubeconfig, &["get", "flunders", "-A"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let pid = child.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compacted_history_is_410_expired() {
    let dir = tempfile::tempdir().unwrap();
    // Storage's history is what is compacted; the watch cache keeps a window of events of its
    // own (as kube-apiserver's does) and would serve this watch from it.
    let options = apiserver::server::ServerOptions {
        compaction_interval_seconds: 1,
        watch_cache: false,
        ..TestServer::options(dir.path())
    };
    let server = TestServer::start_with_options(options, vec![wardle::api_group()]).await;
    let make = |name: &str| {
        let yaml = format!("apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata: {{name: {name}, namespace: default}}\n");
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
    let path = format!("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?watch=1&resourceVersion={old_rv}&timeoutSeconds=1");
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

    let list = format!("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?resourceVersion={old_rv}&resourceVersionMatch=Exact");
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
    let options = apiserver::server::ServerOptions {
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
