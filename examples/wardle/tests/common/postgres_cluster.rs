//! A throw-away PostgreSQL cluster of one test's own, for the faults the shared CI database
//! (`.ci/postgres.sh`, which other tests use at the same time) must not suffer: restarts,
//! crashes, a standby promoted to primary.
//!
//! Made as `.ci/postgres.sh` makes the shared one: Debian's binaries
//! (`/usr/lib/postgresql/*/bin`), `initdb` into a temporary directory owned by the `postgres`
//! user (the server refuses to run as root), trust authentication on loopback, the socket in
//! that directory, a free 127.0.0.1 port. The binaries missing fail the test: it is never
//! skipped.

use std::path::{Path, PathBuf};
use std::process::Output;

/// One PostgreSQL server (a primary or a standby) in a temporary directory, stopped
/// (immediately) when dropped.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// Settings (`-c name=value`) given on every start.
    settings: Vec<String>,
}

impl PgCluster {
    /// A new cluster, started, with `settings` (`name=value`) on top of the defaults.
    pub async fn primary(settings: &[&str]) -> PgCluster {
        let cluster = PgCluster::new(settings);
        cluster
            .run(
                "initdb",
                &[
                    "-D",
                    &cluster.data(),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                    "--no-sync",
                ],
            )
            .await;
        cluster.start().await;
        cluster
    }

    /// A hot standby of `primary` streaming its WAL: a base backup with `-R` (which writes
    /// `primary_conninfo` and `standby.signal`), started. Named `standby` in
    /// `application_name`, which `synchronous_standby_names` may name.
    pub async fn standby_of(primary: &PgCluster, settings: &[&str]) -> PgCluster {
        let mut all = vec!["hot_standby=on"];
        all.extend_from_slice(settings);
        let cluster = PgCluster::new(&all);
        let from = format!(
            "host=127.0.0.1 port={} user=postgres application_name=standby",
            primary.port
        );
        cluster
            .run(
                "pg_basebackup",
                &[
                    "-D",
                    &cluster.data(),
                    "-d",
                    &from,
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "--no-sync",
                ],
            )
            .await;
        cluster.start().await;
        cluster
    }

    fn new(settings: &[&str]) -> PgCluster {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("wardle-pg-")
            .tempdir()
            .unwrap();
        if is_root() {
            let status = std::process::Command::new("chown")
                .args(["postgres:", &dir.path().to_string_lossy()])
                .status()
                .unwrap();
            assert!(status.success(), "chown of {} failed", dir.path().display());
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        PgCluster {
            dir,
            bin,
            port,
            settings: settings.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the server and waits until it accepts connections (a standby: read-only ones).
    pub async fn start(&self) {
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=100",
            self.port,
            self.dir.path().display()
        );
        for setting in &self.settings {
            options.push_str(&format!(" -c {setting}"));
        }
        let (data, log) = (self.data(), self.log());
        self.run(
            "pg_ctl",
            &[
                "-D", &data, "-l", &log, "-w", "-t", "60", "-o", &options, "start",
            ],
        )
        .await;
    }

    /// `pg_ctl stop -m MODE`: `fast` (sessions ended, a checkpoint) or `immediate` (a crash:
    /// the processes quit at once and the next start recovers from the WAL).
    pub async fn stop(&self, mode: &str) {
        let data = self.data();
        self.run(
            "pg_ctl",
            &["-D", &data, "-m", mode, "-w", "-t", "60", "stop"],
        )
        .await;
    }

    /// `pg_ctl promote`: a standby becomes a primary, waiting until it takes writes.
    pub async fn promote(&self) {
        let data = self.data();
        self.run("pg_ctl", &["-D", &data, "-w", "-t", "60", "promote"])
            .await;
    }

    /// The answer of `psql -tA` to one statement, trimmed.
    pub async fn query(&self, sql: &str) -> String {
        let port = self.port.to_string();
        let args = [
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-d",
            "postgres",
        ];
        let output = self
            .run("psql", &[&args[..], &["-tAc", sql]].concat())
            .await;
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    fn data(&self) -> String {
        self.dir.path().join("data").to_string_lossy().into_owned()
    }

    fn log(&self) -> String {
        self.dir.path().join("log").to_string_lossy().into_owned()
    }

    /// Runs one of the server's programs as `postgres`, failing the test (with the server's
    /// log) when it fails.
    async fn run(&self, program: &str, args: &[&str]) -> Output {
        let program_path = self.bin.join(program);
        let output = tokio::process::Command::from(as_postgres(&program_path))
            .args(args)
            .current_dir(self.dir.path())
            .kill_on_drop(true)
            .output()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", program_path.display()));
        if !output.status.success() {
            let log = std::fs::read_to_string(self.log()).unwrap_or_default();
            panic!(
                "{program} {args:?}: {}\n{}{}\nserver log:\n{log}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
            );
        }
        output
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if !Path::new(&self.data()).join("postmaster.pid").exists() {
            return;
        }
        let data = self.data();
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .args(["-D", data.as_str(), "-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// The newest installed server's binaries (Debian keeps them out of `PATH`).
fn bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin; \
             `bash .ci/postgres.sh start` installs them"
        )
    })
}

/// A command running `program` as the `postgres` user (as ourselves when not root).
fn as_postgres(program: &Path) -> std::process::Command {
    if is_root() {
        let mut command = std::process::Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        std::process::Command::new(program)
    }
}

/// Whether the test runs as root (then the server's programs run as `postgres`): `/proc/self`
/// belongs to the process's effective user.
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
