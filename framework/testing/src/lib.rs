//! # extension-apiserver-testing
//!
//! The test kit of [extension-apiserver](https://docs.rs/extension-apiserver), for users' own
//! tests: start a real server (TLS, real storage) on a loopback port and drive it with kube-rs
//! or kubectl ([`TestServer`]), stand a fake core kube-apiserver beside it ([`fake_core`]) and fakes of your own
//! ([`TlsEndpoint`]),
//! make certificates ([`pki`]), read manifests strictly ([`manifests`]), and check a resource against the Kubernetes API conventions
//! with one macro call ([`conformance!`](crate::conformance!), see
//! [`conformance`](mod@conformance)).
//!
//! A crate of its own, so production binaries never carry it: list it under
//! `[dev-dependencies]` beside `extension-apiserver` under `[dependencies]`.
//!
//! ```no_run
//! # async fn t(group: extension_apiserver::APIGroup) {
//! use extension_apiserver_testing::TestServer;
//! let server = TestServer::builder().group(group).start().await; // in memory
//! let client: kube::Client = server.client();
//! let out = server.kubectl(&["get", "flunders", "-A"]);
//! assert!(out.success, "{}", out.stderr);
//! server.stop().await;
//! # }
//! ```

pub mod conformance;
mod endpoint;
pub mod fake_core;
pub mod manifests;
pub mod openssl;
mod server;

pub use extension_apiserver::tls::pki;

use std::path::Path;
use std::process::Command;

pub use endpoint::TlsEndpoint;
pub use server::{TestServer, TestServerBuilder};

/// What a kubectl run printed.
#[derive(Debug, Clone)]
pub struct KubectlOutput {
    /// Exit status was zero.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Retries `check` every 50 ms until it holds, for at most 20 s (400 tries); false if it never
/// does. For what a server does asynchronously: following the core API, reloading files.
pub async fn eventually<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..400 {
        if check().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

/// Runs kubectl with `kubeconfig` (never `$KUBECONFIG`) and extra environment variables
/// (blocking; at most 60 s, then it is killed): for a kubeconfig of the test's own, such as
/// one with a token or without credentials.
pub fn kubectl(kubeconfig: &Path, args: &[&str], env: &[(&str, &str)]) -> KubectlOutput {
    let mut command = Command::new("timeout");
    command
        .arg("60")
        .arg("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args);
    command.env_remove("KUBECONFIG");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("kubectl runs");
    KubectlOutput {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A `kubectl` that keeps running (`get -w`), its output lines collected as they come; killed
/// when dropped.
pub struct KubectlWatch {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl KubectlWatch {
    /// Starts kubectl with `kubeconfig` and `args` (e.g. `["get", "fl", "-w",
    /// "--output-watch-events", "--no-headers"]`).
    pub fn start(kubeconfig: &Path, args: &[&str]) -> Self {
        use std::io::BufRead;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kubectl runs");
        let stdout = child.stdout.take().expect("kubectl's stdout is piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// Waits (at most 20 s) for a line whose first whitespace-separated words are `words`,
    /// skipping others; panics with the lines seen if none comes.
    pub fn expect_line(&self, words: &[&str]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut seen = Vec::new();
        while std::time::Instant::now() < deadline {
            let Ok(line) = self
                .lines
                .recv_timeout(std::time::Duration::from_millis(200))
            else {
                continue;
            };
            let parts: Vec<&str> = line.split_whitespace().collect();
            if words
                .iter()
                .enumerate()
                .all(|(i, w)| parts.get(i) == Some(w))
            {
                return;
            }
            seen.push(line);
        }
        panic!("no line starting with {words:?}; saw {seen:?}");
    }
}

impl Drop for KubectlWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
