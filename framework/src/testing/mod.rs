//! A harness for users' own tests: start a real server (TLS, real storage) on a loopback port
//! in a directory of the test's, and drive it with kubectl or any Kubernetes client.
//!
//! Behind the cargo feature `testing`, so production binaries do not carry it: list
//! `apiserver = { version = "…", features = ["testing"] }` under `[dev-dependencies]`.
//!
//! ```no_run
//! # async fn t(group: apiserver::APIGroup) {
//! use apiserver::testing::TestServer;
//! let dir = std::env::temp_dir().join("my-test");
//! let server = TestServer::start(&dir, vec![group]).await;
//! let out = server.kubectl(&["get", "flunders", "-A"]);
//! assert!(out.success, "{}", out.stderr);
//! server.stop().await;
//! # }
//! ```

pub mod fake_core;
pub mod openssl;
pub mod pki;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::server::{APIGroup, APIServer, RunningServer, ServerOptions, StorageBackendKind};

/// A server started for a test.
pub struct TestServer {
    /// Where it listens (127.0.0.1 and an ephemeral port).
    pub addr: SocketAddr,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    running: RunningServer,
}

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

impl TestServer {
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
        let mut server = APIServer::new(options);
        for g in groups {
            server = server.group(g);
        }
        let running = server.start().await.expect("server starts");
        TestServer {
            addr: running.addr,
            kubeconfig: running.kubeconfig.clone(),
            running,
        }
    }

    /// Runs kubectl against the server (blocking; at most 60 s, then it is killed).
    pub fn kubectl(&self, args: &[&str]) -> KubectlOutput {
        self.kubectl_with_env(args, &[])
    }

    /// Runs kubectl with extra environment variables (`KUBE_EDITOR`, ...).
    pub fn kubectl_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> KubectlOutput {
        kubectl(&self.kubeconfig, args, env)
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) {
        self.running.shutdown().await.expect("server stops cleanly");
    }
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
