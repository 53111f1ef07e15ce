//! The server: options, the builder and its extension points, the serving certificate (reloaded when its files change), TLS,
//! health, and the accept loop every
//! request enters through.

pub(crate) mod builder;
pub(crate) mod error;
pub(crate) mod extensions;
pub(crate) mod group;
pub(crate) mod health;
mod idle;
pub mod malloc;
pub(crate) mod migrate;
pub(crate) mod options;
#[cfg(feature = "otlp")]
mod otel;
mod own_objects;
pub(crate) mod plugins;
pub mod serve;
pub mod serving_cert;
pub(crate) mod storage_config;
pub mod tls;
pub(crate) mod tracing_export;
pub(crate) mod version;
mod write_batch;

// Each part's public items, under this module's name (the parts themselves are private).
pub use builder::*;
pub use builder::{APIServer, BuiltServer, Command, RunningServer};
pub use error::ServerError;
pub use extensions::{HookError, PostStartContext};
pub use group::{APIGroup, VersionBuilder};
pub use health::*;
pub use migrate::MigrateStorageOptions;
pub use options::*;
pub use options::{ServerOptions, StorageBackendKind};
pub use plugins::{AdmissionPluginFactory, PluginContext};
pub use storage_config::{StorageConfig, open_backend};
pub use tracing_export::*;
pub use version::VersionInfo;
pub use version::*;

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), as text until the server's
/// `--logging-format` says otherwise ([`set_logging_format`]).
pub fn init_logging() {
    logging::init();
}

pub use logging::{LoggingFormat, set_logging_format};

mod logging {
    //! The log subscriber, whose format the server's options may change once parsed.

    use std::sync::OnceLock;

    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, Registry, fmt, reload};

    /// How logs are written (`--logging-format`, as kube-apiserver's).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
    pub enum LoggingFormat {
        /// One line of text per event.
        #[default]
        Text,
        /// One JSON object per line, with the event's span fields (the request's verb,
        /// resource, user, trace id, …): for log collectors.
        Json,
    }

    type Formatter = Box<dyn Layer<Registry> + Send + Sync>;

    static FORMAT: OnceLock<reload::Handle<Formatter, Registry>> = OnceLock::new();

    fn formatter(format: LoggingFormat) -> Formatter {
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        match format {
            LoggingFormat::Text => fmt::layer()
                .with_ansi(ansi)
                .with_writer(std::io::stderr)
                .boxed(),
            LoggingFormat::Json => fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(false)
                .with_writer(std::io::stderr)
                .boxed(),
        }
    }

    pub(super) fn init() {
        let (layer, handle) = reload::Layer::new(formatter(LoggingFormat::Text));
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
        let formatted = tracing_subscriber::registry().with(layer);
        #[cfg(feature = "otlp")]
        let formatted = formatted.with(super::otel::layer());
        if formatted.with(filter).try_init().is_ok() {
            let _ = FORMAT.set(handle);
        }
    }

    /// Whether [`init_logging`](super::init_logging) installed the subscriber.
    #[cfg(feature = "otlp")]
    pub(super) fn installed() -> bool {
        FORMAT.get().is_some()
    }

    /// Writes logs in `format` from now on, if [`init_logging`](super::init_logging)
    /// installed the subscriber (a subscriber of your own is left alone).
    pub fn set_logging_format(format: LoggingFormat) {
        if let Some(handle) = FORMAT.get() {
            let _ = handle.reload(formatter(format));
        }
    }
}
