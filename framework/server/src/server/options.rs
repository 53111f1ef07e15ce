//! Command-line options, with `k8s.io/apiserver`'s flag names where one exists.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::tls::{TlsVersion, parse_cipher_suite};

/// Which storage backend holds the objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StorageBackendKind {
    /// SQLite in one file: the embedded, persistent default.
    Sqlite,
    /// In memory: gone when the process ends. For tests and demos.
    Memory,
    /// An etcd v3 cluster (--etcd-servers). Needs the `etcd` feature of the `extension-apiserver` crate.
    Etcd3,
    /// A PostgreSQL database (--postgres-url). Needs the `postgres` feature of the `extension-apiserver` crate.
    Postgres,
}

/// `--http2-max-streams-per-connection`'s default: what `k8s.io/apiserver`'s
/// `RecommendedOptions` set for aggregated API servers.
pub const DEFAULT_HTTP2_MAX_STREAMS: u32 = 1000;

/// Options of the secure serving, storage, and authentication and authorization.
///
/// Flatten it into your own `clap` parser, or let [`APIServer::from_args`](crate::APIServer::from_args) parse it.
#[derive(Clone, Debug, Args)]
pub struct ServerOptions {
    /// The port to serve HTTPS on.
    #[arg(long = "secure-port", default_value_t = 8443)]
    pub secure_port: u16,

    /// The IP address to listen on.
    #[arg(long = "bind-address", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,

    /// Where the self-signed serving certificate, client CA and standalone kubeconfig are
    /// kept (ignored for serving when --tls-cert-file is given).
    #[arg(
        long = "cert-dir",
        default_value = "apiserver.local.config/certificates"
    )]
    pub cert_dir: PathBuf,

    /// PEM file with the serving certificate (and intermediates). Re-read when it changes:
    /// new connections get the new certificate; a pair that does not load is logged and the
    /// previous one kept.
    #[arg(long = "tls-cert-file", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM file with the serving certificate's private key (re-read with --tls-cert-file).
    #[arg(long = "tls-private-key-file", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// Extra host names and IPs for the self-signed serving certificate.
    #[arg(long = "tls-sni-hosts", value_delimiter = ',')]
    pub extra_hosts: Vec<String>,

    /// Minimum TLS version supported: VersionTLS12 or VersionTLS13 (Go's names).
    #[arg(long = "tls-min-version", default_value_t = TlsVersion::Tls12)]
    pub tls_min_version: TlsVersion,

    /// Comma-separated TLS 1.2 cipher suites for the server, by Go/IANA name (e.g.
    /// TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); empty means all supported ones. TLS 1.3
    /// suites are always enabled. Insecure, CBC and unknown names are refused.
    #[arg(long = "tls-cipher-suites", value_delimiter = ',', value_parser = parse_cipher_suite)]
    pub tls_cipher_suites: Vec<String>,

    /// The most HTTP/2 streams (requests and watches) a client may have open at once on one
    /// connection; the aggregator multiplexes many users over one. 0 means the default.
    #[arg(long = "http2-max-streams-per-connection", default_value_t = DEFAULT_HTTP2_MAX_STREAMS)]
    pub http2_max_streams_per_connection: u32,

    /// To keep HTTP/2 clients from sticking to one replica behind a load balancer, the chance
    /// that a request closes its connection gracefully (a GOAWAY after its response: the
    /// other requests in flight finish, the client reconnects, likely to another replica).
    /// Watches never do. As kube-apiserver's flag: 0 (off) to 0.02 (one request in fifty);
    /// 0.001 is a good start. Single replicas and servers without a load balancer should
    /// leave it off.
    #[arg(long = "goaway-chance", default_value_t = 0.0, value_name = "FRACTION")]
    pub goaway_chance: f64,

    /// How long a connection may stay without a request in flight before the server closes
    /// it: HTTP/1.1 keep-alive between requests, HTTP/2 without streams (GOAWAY). A watch
    /// or a response in progress is never idle. As kube-apiserver's Go `IdleTimeout`; 0s:
    /// never.
    #[arg(long = "http-idle-timeout", default_value = "90s",
          value_parser = crate::auth::options::parse_duration, value_name = "DURATION")]
    pub http_idle_timeout: std::time::Duration,

    /// How long an HTTP/1.1 client may take to send a request's header, from the
    /// connection's start (after TLS) or the request's first byte; then the connection is
    /// closed. As kube-apiserver's Go `ReadHeaderTimeout`; 0s: no limit.
    #[arg(long = "http-read-header-timeout", default_value = "32s",
          value_parser = crate::auth::options::parse_duration, value_name = "DURATION")]
    pub http_read_header_timeout: std::time::Duration,

    /// The storage backend.
    #[arg(long = "storage-backend", value_enum, default_value_t = StorageBackendKind::Sqlite)]
    pub storage_backend: StorageBackendKind,

    /// The SQLite database file (with --storage-backend=sqlite).
    #[arg(long = "sqlite-path", default_value = "apiserver.db")]
    pub sqlite_path: PathBuf,

    /// The etcd endpoints, comma separated (with --storage-backend=etcd3).
    #[cfg(feature = "etcd")]
    #[arg(
        long = "etcd-servers",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    pub etcd_servers: Vec<String>,

    /// SSL Certificate Authority file used to secure etcd communication: etcd's serving
    /// certificate is verified against it. Needed for `https://` etcd servers.
    #[cfg(feature = "etcd")]
    #[arg(long = "etcd-cafile")]
    pub etcd_cafile: Option<PathBuf>,

    /// SSL certification file used to secure etcd communication: the client certificate for
    /// an etcd with `--client-cert-auth`.
    #[cfg(feature = "etcd")]
    #[arg(long = "etcd-certfile", requires = "etcd_keyfile")]
    pub etcd_certfile: Option<PathBuf>,

    /// SSL key file used to secure etcd communication: the key of --etcd-certfile.
    #[cfg(feature = "etcd")]
    #[arg(long = "etcd-keyfile", requires = "etcd_certfile")]
    pub etcd_keyfile: Option<PathBuf>,

    /// The PostgreSQL database (with --storage-backend=postgres), as a libpq URL
    /// (`postgres://user@host:5432/db?sslmode=require`) or key=value string. What it leaves out
    /// comes from the usual environment: PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE,
    /// PGSSLMODE, PGAPPNAME, PGCONNECT_TIMEOUT, PGTARGETSESSIONATTRS. Several hosts (a
    /// primary and its standbys: `postgres://user@db1:5432,db2:5432/db`) are tried in turn
    /// for one that takes writes (target_session_attrs=read-write unless the URL says
    /// otherwise). A database that does not answer yet is waited for, with /readyz failing.
    #[arg(long = "postgres-url", value_name = "URL")]
    pub postgres_url: Option<String>,

    /// CA file that PostgreSQL's serving certificate (and host name) is verified against;
    /// with it the connection is TLS (sslmode=require at least), without it plain text.
    #[arg(long = "postgres-cafile", value_name = "FILE")]
    pub postgres_cafile: Option<PathBuf>,

    /// Client certificate for PostgreSQL (`clientcert=verify-full` in pg_hba.conf), with
    /// --postgres-keyfile and --postgres-cafile.
    #[arg(long = "postgres-certfile", value_name = "FILE", requires_all = ["postgres_keyfile", "postgres_cafile"])]
    pub postgres_certfile: Option<PathBuf>,

    /// The key of --postgres-certfile.
    #[arg(
        long = "postgres-keyfile",
        value_name = "FILE",
        requires = "postgres_certfile"
    )]
    pub postgres_keyfile: Option<PathBuf>,

    /// The most connections to PostgreSQL this server holds at once (one more listens for
    /// other servers' writes).
    #[arg(long = "postgres-pool-size", default_value_t = 16)]
    pub postgres_pool_size: usize,

    /// How many seconds one statement may run on PostgreSQL before the database cancels it
    /// (its `statement_timeout`, on every connection) and the request gets 504 `Timeout`: a
    /// statement must not go on running after the request that issued it gave up. Unset: the
    /// storage deadline of a request, 5 seconds or --request-timeout when shorter, and for a
    /// list's statements --request-timeout. Set: every statement, lists too. 0: no limit.
    #[arg(long = "postgres-statement-timeout", value_name = "SECONDS")]
    pub postgres_statement_timeout_seconds: Option<u64>,

    /// The PostgreSQL schema of this server's tables, created when missing: replicas of one
    /// server share it, different servers on one database each need their own. Lowercase
    /// letters, digits and _.
    #[arg(
        long = "postgres-schema",
        default_value = "apiserver",
        value_name = "SCHEMA"
    )]
    pub postgres_schema: String,

    /// The prefix of every storage key, as kube-apiserver's --etcd-prefix.
    #[arg(long = "etcd-prefix", default_value = "/registry")]
    pub storage_prefix: String,

    /// How often old revisions are compacted away, in seconds (0: never).
    #[arg(long = "etcd-compaction-interval", default_value_t = 300)]
    pub compaction_interval_seconds: u64,

    /// Serve watches, and lists that allow it, from an in-memory cache of each resource
    /// (`--watch-cache=false` reads storage for every request).
    #[arg(long = "watch-cache", default_value_t = true, action = clap::ArgAction::Set)]
    pub watch_cache: bool,

    /// The most bytes of recent events each resource's watch cache keeps for watches that
    /// resume from an older resourceVersion (each event counts its object and the state
    /// before); the oldest go first, and a watch from before them is read from storage or
    /// gets 410 Expired. 0: only the count of events bounds it.
    #[arg(long = "watch-cache-window-bytes", default_value_t = crate::storage::cacher::DEFAULT_WINDOW_BYTES, value_name = "BYTES")]
    pub watch_cache_window_bytes: usize,

    /// The largest object stored, in bytes as stored (JSON): a create or update of a
    /// larger one is refused with etcd's answer through kube-apiserver (500 "etcdserver:
    /// request is too large") and nothing changes. The default is etcd's default
    /// --max-request-bytes (1.5 MiB), so every backend keeps etcd's limit. 0: no limit.
    #[arg(long = "max-object-size-bytes", default_value_t = crate::storage::DEFAULT_MAX_OBJECT_BYTES, value_name = "BYTES")]
    pub max_object_size_bytes: usize,

    /// Requests that are not watches fail with 504 after this many seconds.
    #[arg(long = "request-timeout", default_value_t = 60)]
    pub request_timeout_seconds: u64,

    /// How long the server keeps serving after SIGTERM, with `/readyz` failing, so that load
    /// balancers and the aggregator stop sending before connections close (as
    /// kube-apiserver's flag); then in-flight requests drain and watches end.
    #[arg(long = "shutdown-delay-duration", default_value = "0s",
          value_parser = crate::auth::options::parse_duration, value_name = "DURATION")]
    pub shutdown_delay_duration: std::time::Duration,

    /// API Priority and Fairness (as kube-apiserver's flag): requests are classified by the
    /// core cluster's FlowSchemas and PriorityLevelConfigurations and queued fairly within
    /// the sum of the two max-in-flight limits. Without a core API, or `=false`, the
    /// max-in-flight limits apply instead.
    #[arg(long = "enable-priority-and-fairness", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value_t = true, value_name = "BOOL",
          action = clap::ArgAction::Set)]
    pub enable_priority_and_fairness: bool,

    /// The most read-only requests served at once per class (system components, everyone
    /// else; one user at most half of everyone else's); more are refused with 429 and
    /// `Retry-After`. Watches, health, discovery and `system:masters` are not counted. 0: no
    /// limit. Under priority and fairness, with `--max-mutating-requests-inflight`, the
    /// server's total concurrency limit.
    #[arg(long = "max-requests-inflight", default_value_t = 400)]
    pub max_requests_inflight: usize,

    /// As `--max-requests-inflight`, for requests that change objects.
    #[arg(long = "max-mutating-requests-inflight", default_value_t = 200)]
    pub max_mutating_requests_inflight: usize,

    /// Delegated authentication and authorization (and `--anonymous-auth`).
    #[command(flatten)]
    pub auth: crate::auth::DelegatingOptions,

    /// How logs are written: `text`, or `json` (one object per line, with the request's
    /// fields) for log collectors. Applies to the log subscriber `init_logging` installed.
    #[arg(long = "logging-format", value_enum, default_value_t = crate::server::LoggingFormat::Text)]
    pub logging_format: crate::server::LoggingFormat,

    /// A `TracingConfiguration` (`apiserver.config.k8s.io/v1`): the OTLP gRPC endpoint to
    /// export request spans to and the sampling rate, as kube-apiserver's flag. Needs the
    /// `otlp` feature of the apiserver crate.
    #[arg(long = "tracing-config-file", value_name = "FILE")]
    pub tracing_config_file: Option<std::path::PathBuf>,

    /// Which admission plugins run (`--enable-admission-plugins`,
    /// `--disable-admission-plugins`).
    #[command(flatten)]
    pub admission: crate::admission::AdmissionOptions,

    /// Audit policy, log and webhook (`--audit-policy-file`, `--audit-log-path`,
    /// `--audit-webhook-config-file`, ...).
    #[command(flatten)]
    pub audit: crate::audit::AuditOptions,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            secure_port: 8443,
            bind_address: IpAddr::from([0, 0, 0, 0]),
            cert_dir: PathBuf::from("apiserver.local.config/certificates"),
            tls_cert_file: None,
            tls_private_key_file: None,
            extra_hosts: Vec::new(),
            tls_min_version: TlsVersion::Tls12,
            tls_cipher_suites: Vec::new(),
            http2_max_streams_per_connection: DEFAULT_HTTP2_MAX_STREAMS,
            goaway_chance: 0.0,
            http_idle_timeout: crate::server::serve::DEFAULT_IDLE_TIMEOUT,
            http_read_header_timeout: crate::server::serve::DEFAULT_READ_HEADER_TIMEOUT,
            storage_backend: StorageBackendKind::Sqlite,
            sqlite_path: PathBuf::from("apiserver.db"),
            #[cfg(feature = "etcd")]
            etcd_servers: vec!["http://127.0.0.1:2379".into()],
            #[cfg(feature = "etcd")]
            etcd_cafile: None,
            #[cfg(feature = "etcd")]
            etcd_certfile: None,
            #[cfg(feature = "etcd")]
            etcd_keyfile: None,
            postgres_url: None,
            postgres_cafile: None,
            postgres_certfile: None,
            postgres_keyfile: None,
            postgres_pool_size: 16,
            postgres_schema: "apiserver".into(),
            postgres_statement_timeout_seconds: None,
            storage_prefix: "/registry".into(),
            compaction_interval_seconds: 300,
            watch_cache: true,
            watch_cache_window_bytes: crate::storage::cacher::DEFAULT_WINDOW_BYTES,
            max_object_size_bytes: crate::storage::DEFAULT_MAX_OBJECT_BYTES,
            request_timeout_seconds: 60,
            shutdown_delay_duration: std::time::Duration::ZERO,
            enable_priority_and_fairness: true,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            logging_format: crate::server::LoggingFormat::Text,
            tracing_config_file: None,
            auth: crate::auth::DelegatingOptions::default(),
            admission: crate::admission::AdmissionOptions::default(),
            audit: crate::audit::AuditOptions::default(),
        }
    }
}

#[cfg(all(test, feature = "etcd"))]
mod tests {
    use clap::Parser;

    use super::ServerOptions;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: ServerOptions,
    }

    #[test]
    fn etcd_tls_flags_as_kube_apiserver_names_them() {
        let cli = Cli::try_parse_from([
            "server",
            "--storage-backend=etcd3",
            "--etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379",
            "--etcd-cafile=ca.crt",
            "--etcd-certfile=client.crt",
            "--etcd-keyfile=client.key",
        ])
        .unwrap();
        let options = cli.options;
        assert_eq!(options.etcd_servers.len(), 2);
        assert_eq!(options.etcd_cafile.unwrap().to_str(), Some("ca.crt"));
        assert_eq!(options.etcd_certfile.unwrap().to_str(), Some("client.crt"));
        assert_eq!(options.etcd_keyfile.unwrap().to_str(), Some("client.key"));
    }

    #[test]
    fn a_client_certificate_needs_its_key() {
        assert!(Cli::try_parse_from(["server", "--etcd-certfile=client.crt"]).is_err());
        assert!(Cli::try_parse_from(["server", "--etcd-keyfile=client.key"]).is_err());
        let only_ca = Cli::try_parse_from(["server", "--etcd-cafile=ca.crt"]).unwrap();
        assert!(only_ca.options.etcd_certfile.is_none());
    }
}

#[cfg(test)]
mod postgres_tests {
    use clap::Parser;

    use super::{ServerOptions, StorageBackendKind};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: ServerOptions,
    }

    #[test]
    fn postgres_flags() {
        let cli = Cli::try_parse_from([
            "server",
            "--storage-backend=postgres",
            "--postgres-url=postgres://api@db:5432/objects",
            "--postgres-cafile=ca.crt",
            "--postgres-certfile=client.crt",
            "--postgres-keyfile=client.key",
            "--postgres-pool-size=4",
            "--postgres-schema=wardle",
            "--postgres-statement-timeout=0",
        ])
        .unwrap();
        let options = cli.options;
        assert_eq!(options.storage_backend, StorageBackendKind::Postgres);
        assert_eq!(
            options.postgres_url.as_deref(),
            Some("postgres://api@db:5432/objects")
        );
        assert_eq!(options.postgres_pool_size, 4);
        assert_eq!(options.postgres_schema, "wardle");
        assert_eq!(options.postgres_statement_timeout_seconds, Some(0));
        let defaults = Cli::try_parse_from(["server"]).unwrap().options;
        assert_eq!(defaults.postgres_schema, "apiserver");
        assert!(defaults.postgres_url.is_none());
        assert_eq!(defaults.postgres_statement_timeout_seconds, None);
    }

    #[test]
    fn a_postgres_client_certificate_needs_its_key_and_a_ca() {
        let with = |flags: &[&str]| Cli::try_parse_from([&["server"], flags].concat());
        assert!(with(&["--postgres-certfile=c", "--postgres-cafile=ca"]).is_err());
        assert!(with(&["--postgres-keyfile=k", "--postgres-cafile=ca"]).is_err());
        assert!(with(&["--postgres-certfile=c", "--postgres-keyfile=k"]).is_err());
        assert!(with(&["--postgres-cafile=ca"]).is_ok());
    }
}
