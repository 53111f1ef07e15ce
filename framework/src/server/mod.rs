//! The server: options, the builder, the serving certificate (reloaded when its files change), TLS,
//! health, and the accept loop every
//! request enters through.

pub mod builder;
pub mod health;
pub mod malloc;
pub mod migrate;
pub mod options;
pub mod serve;
pub mod serving_cert;
pub mod tls;
pub mod version;

pub use builder::{
    APIGroup, APIServer, Command, RunningServer, ServerError, StorageConfig, VersionBuilder,
};
pub use migrate::MigrateStorageOptions;
pub use options::{ServerOptions, StorageBackendKind};
pub use version::VersionInfo;

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}
