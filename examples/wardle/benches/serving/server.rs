//! The server under test: the release `wardle` binary as a child process on a free loopback
//! port, with its own certificate directory and storage, so its resident memory is its own.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::client::Error;

/// The binary under test: `WARDLE_BENCH_BINARY` when set (an older build, to compare on the
/// same machine in the same hour), else the one cargo built.
fn wardle() -> String {
    std::env::var("WARDLE_BENCH_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_wardle").into())
}

/// A storage backend of the server, with what it needs to run.
#[derive(Debug, Clone)]
pub enum Backend {
    /// `--storage-backend=memory`.
    Memory,
    /// `--storage-backend=sqlite`, a fresh database in the run's directory.
    Sqlite,
    /// `--storage-backend=etcd3` against these endpoints, under a fresh key prefix.
    Etcd3(String),
    /// `--storage-backend=postgres` on the database at this URL, in a fresh schema.
    Postgres(String),
}

impl Backend {
    /// The name `--storage-backend` takes.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Etcd3(_) => "etcd3",
            Backend::Postgres(_) => "postgres",
        }
    }
}

/// A running `wardle`; killed when dropped.
pub struct Wardle {
    child: Child,
    /// The secure port on 127.0.0.1.
    pub port: u16,
    /// `--cert-dir`: serving CA and certificate, client CA, admin client certificate.
    pub cert_dir: PathBuf,
    /// The etcd key prefix of this run, if on etcd (removed by the caller when done).
    pub etcd_prefix: Option<String>,
    /// The etcd endpoints, if on etcd.
    pub etcd_servers: Option<String>,
    /// The PostgreSQL URL and schema of this run, if on PostgreSQL (dropped by the caller).
    pub postgres_schema: Option<(String, String)>,
}

impl Wardle {
    /// Starts the server in `dir` on `backend`; `watch_cache: Some(false)` passes
    /// `--watch-cache=false`, `None` passes nothing (a binary without the flag).
    pub fn start(dir: &Path, backend: &Backend, watch_cache: Option<bool>) -> Result<Self, Error> {
        Self::start_in(dir, backend, watch_cache, None)
    }

    /// [`start`](Self::start) on the objects an earlier server left: `store` is its etcd key
    /// prefix or PostgreSQL schema (on SQLite, the database in `dir` is reused anyway).
    pub fn start_in(
        dir: &Path,
        backend: &Backend,
        watch_cache: Option<bool>,
        store: Option<&str>,
    ) -> Result<Self, Error> {
        let fresh = || format!("{}_{}", std::process::id(), unique());
        let cert_dir = dir.join("certs");
        let mut command = Command::new(wardle());
        command
            // Standalone even in a pod (its service account would select delegated mode).
            .env_remove("KUBERNETES_SERVICE_HOST")
            .args(["--bind-address=127.0.0.1", "--secure-port=0"])
            .arg(format!("--cert-dir={}", cert_dir.display()))
            .arg(format!("--storage-backend={}", backend.name()));
        let (mut etcd_prefix, mut etcd_servers, mut postgres_schema) = (None, None, None);
        match backend {
            Backend::Memory => {}
            Backend::Sqlite => {
                command.arg(format!("--sqlite-path={}", dir.join("wardle.db").display()));
            }
            Backend::Etcd3(servers) => {
                let prefix = store.map_or_else(|| format!("/bench-{}", fresh()), str::to_owned);
                command.arg(format!("--etcd-servers={servers}"));
                command.arg(format!("--etcd-prefix={prefix}"));
                etcd_prefix = Some(prefix);
                etcd_servers = Some(servers.clone());
            }
            Backend::Postgres(url) => {
                let schema = store.map_or_else(|| format!("bench_{}", fresh()), str::to_owned);
                command.arg(format!("--postgres-url={url}"));
                command.arg(format!("--postgres-schema={schema}"));
                postgres_schema = Some((url.clone(), schema));
            }
        }
        if let Some(on) = watch_cache {
            command.arg(format!("--watch-cache={on}"));
        }
        // More flags for the server, to compare figures with and without a feature
        // (e.g. `--disable-admission-plugins=BanFlunder`).
        if let Ok(extra) = std::env::var("WARDLE_BENCH_ARGS") {
            command.args(extra.split_whitespace());
        }
        // Only the line that says where it serves; no per-request logging in the way.
        command.env("RUST_LOG", "warn,extension_apiserver::server::builder=info");
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", wardle()))?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let mut wardle = Self {
            child,
            port: 0,
            cert_dir,
            etcd_prefix,
            etcd_servers,
            postgres_schema,
        };
        wardle.port = serving_port(stderr)?.port();
        Ok(wardle)
    }

    /// Where this server keeps its objects, for [`start_in`](Self::start_in): the etcd key
    /// prefix or the PostgreSQL schema (`None` on memory and SQLite).
    pub fn store(&self) -> Option<&str> {
        let schema = self.postgres_schema.as_ref().map(|(_, schema)| schema);
        self.etcd_prefix.as_ref().or(schema).map(String::as_str)
    }

    /// CPU time the server's threads have used so far.
    pub fn cpu(&self) -> Result<Duration, Error> {
        cpu_of(self.child.id())
    }

    /// The server's resident memory (VmRSS) in bytes.
    pub fn rss(&self) -> Result<u64, Error> {
        rss_of(self.child.id())
    }

    /// The highest resident memory since the start (VmHWM), in bytes.
    pub fn rss_peak(&self) -> Result<u64, Error> {
        memory_of(self.child.id(), "VmHWM:")
    }
}

/// The resident memory (VmRSS) of process `pid`, in bytes.
pub fn rss_of(pid: u32) -> Result<u64, Error> {
    memory_of(pid, "VmRSS:")
}

/// The CPU time of process `pid`'s threads ([`threads_cpu`]).
pub fn cpu_of(pid: u32) -> Result<Duration, Error> {
    threads_cpu(&format!("/proc/{pid}/task"), None)
}

/// A memory figure of `/proc/<pid>/status` (`field` with its colon), in bytes.
fn memory_of(pid: u32, field: &str) -> Result<u64, Error> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| format!("no {field} in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// CPU time of the threads under `tasks` (a `/proc/<pid>/task` directory), of those named
/// `name` when given: the sum of each thread's on-CPU nanoseconds (`schedstat`).
pub fn threads_cpu(tasks: &str, name: Option<&str>) -> Result<Duration, Error> {
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir(tasks)? {
        let dir = task?.path();
        if let Some(name) = name {
            // A thread that ended since the listing is skipped.
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.trim_end() != name {
                continue;
            }
        }
        let Ok(schedstat) = std::fs::read_to_string(dir.join("schedstat")) else {
            continue;
        };
        let ns = schedstat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .ok_or("unreadable schedstat")?;
        total += Duration::from_nanos(ns);
    }
    Ok(total)
}

impl Drop for Wardle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether this `wardle` build has the `--watch-cache` flag.
pub fn has_watch_cache_flag() -> Result<bool, Error> {
    let help = Command::new(wardle()).arg("--help").output()?;
    Ok(String::from_utf8_lossy(&help.stdout).contains("--watch-cache"))
}

/// Reads the log until "serving addr=…" (bounded to 5 minutes: a server on a million objects
/// may read its store first), then keeps forwarding warnings
/// and errors to our stderr so the pipe never fills.
fn serving_port(stderr: std::process::ChildStderr) -> Result<SocketAddr, Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut announced = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !announced {
                announced = line.contains("serving addr=");
                if tx.send(line).is_err() {
                    return;
                }
            } else if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("wardle: {line}");
            }
        }
    });
    let mut seen = Vec::new();
    loop {
        let line = rx.recv_timeout(Duration::from_secs(300)).map_err(|_| {
            format!(
                "wardle did not announce 'serving addr=' (exited, or not within 5 minutes); it said:\n{}",
                seen.join("\n")
            )
        })?;
        if let Some(rest) = line.split("serving addr=").nth(1) {
            let addr = rest.split_whitespace().next().unwrap_or_default();
            return Ok(addr.parse()?);
        }
        seen.push(line);
    }
}

/// A number unique to this moment, for names that must not collide across runs.
pub fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}
