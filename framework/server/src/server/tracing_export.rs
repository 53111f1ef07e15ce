//! `--tracing-config-file`: kube-apiserver's `TracingConfiguration`, and the export of the
//! request spans over OTLP (gRPC) it asks for, with the `otlp` cargo feature.
//!
//! ```yaml
//! apiVersion: apiserver.config.k8s.io/v1
//! kind: TracingConfiguration
//! endpoint: localhost:4317          # the collector's OTLP gRPC endpoint (the default)
//! samplingRatePerMillion: 10000     # 1% of requests that carry no sampled traceparent
//! ```
//!
//! As kube-apiserver's: a request whose `traceparent` is sampled is traced whatever the rate
//! (the sampler is parent-based); the spans are `request` with the request's verb, resource,
//! user and code, and under it `authentication`, `authorization`, `admission` and `storage`.
//! They go to the collector in batches; what is buffered is sent when the server stops.

use std::path::Path;

use serde::Deserialize;

use super::ServerError;

/// The API versions kube-apiserver reads `TracingConfiguration` in.
const API_VERSIONS: [&str; 3] = [
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1beta1",
    "apiserver.config.k8s.io/v1alpha1",
];

/// The most `samplingRatePerMillion` can be.
const MILLION: i64 = 1_000_000;

/// kube's `TracingConfiguration`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TracingConfiguration {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`: `TracingConfiguration`.
    pub kind: String,
    /// The collector's OTLP gRPC endpoint, `host:port` (default `localhost:4317`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// How many of a million requests without a sampled parent are traced (default 0).
    #[serde(default)]
    pub sampling_rate_per_million: Option<i64>,
}

impl TracingConfiguration {
    /// Reads and checks the file, as kube-apiserver does at start.
    pub fn load(path: &Path) -> Result<Self, ServerError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ServerError::Config(format!("--tracing-config-file {}: {e}", path.display()))
        })?;
        Self::parse(&text).map_err(|e| {
            ServerError::Config(format!("--tracing-config-file {}: {e}", path.display()))
        })
    }

    /// Parses and checks a configuration (YAML or JSON).
    pub fn parse(text: &str) -> Result<Self, TracingConfigError> {
        Self::parse_text(text).map_err(TracingConfigError)
    }

    fn parse_text(text: &str) -> Result<Self, String> {
        let config: Self = serde_norway::from_str(text).map_err(|e| e.to_string())?;
        if !API_VERSIONS.contains(&config.api_version.as_str())
            || config.kind != "TracingConfiguration"
        {
            return Err(format!(
                "expected kind TracingConfiguration of {}, got {} {}",
                API_VERSIONS.join(", "),
                config.kind,
                config.api_version
            ));
        }
        let rate = config.sampling_rate();
        if !(0..=MILLION).contains(&rate) {
            return Err(format!(
                "samplingRatePerMillion: Invalid value: {rate}: samplingRatePerMillion must be between 0 and 1000000"
            ));
        }
        if config.endpoint().is_empty() {
            return Err("endpoint: Invalid value: \"\": endpoint must not be empty".into());
        }
        Ok(config)
    }

    /// The endpoint, `localhost:4317` when not given.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_deref().unwrap_or("localhost:4317")
    }

    /// The sampling rate per million, 0 when not given.
    pub fn sampling_rate(&self) -> i64 {
        self.sampling_rate_per_million.unwrap_or(0)
    }
}

/// The export of spans while the server runs; [`finish`](Self::finish) sends what is
/// buffered.
pub struct TracingExport {
    _private: (),
}

impl std::fmt::Debug for TracingExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracingExport").finish_non_exhaustive()
    }
}

impl TracingExport {
    /// Starts exporting as `config` says, through the subscriber
    /// [`init_logging`](super::init_logging) installed.
    #[cfg(feature = "otlp")]
    pub fn start(config: &TracingConfiguration) -> Result<Self, ServerError> {
        use opentelemetry_otlp::WithExportConfig;

        let endpoint = match config.endpoint() {
            e if e.contains("://") => e.to_string(),
            e => format!("http://{e}"),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
            .map_err(|e| ServerError::Config(format!("OTLP exporter: {e}")))?;
        if !super::logging::installed() {
            tracing::warn!(
                "--tracing-config-file: spans are not exported: the log subscriber is not the \
                 one extension_apiserver::server::init_logging installs"
            );
        }
        let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter).build();
        super::otel::start(processor, config.sampling_rate() as u64);
        Ok(Self { _private: () })
    }

    /// Without the `otlp` feature there is nothing to export to: an error at start.
    #[cfg(not(feature = "otlp"))]
    pub fn start(_config: &TracingConfiguration) -> Result<Self, ServerError> {
        Err(ServerError::Config(
            "--tracing-config-file: this server was built without the `otlp` feature of the \
             apiserver crate, which exports traces"
                .into(),
        ))
    }

    /// Stops exporting; sends the spans still buffered (bounded by the exporter's timeout).
    pub async fn finish(self) {
        #[cfg(feature = "otlp")]
        if let Some(processor) = super::otel::stop() {
            use opentelemetry_sdk::trace::SpanProcessor;
            let flushed = tokio::task::spawn_blocking(move || processor.shutdown()).await;
            if let Ok(Err(e)) = flushed {
                tracing::warn!(error = %e, "the last spans were not exported");
            }
        }
    }
}

/// Why a tracing configuration was refused: it does not parse, is of another kind, or a value is
/// out of range (kube's validation message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TracingConfigError(String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_tracing_configuration_is_read_and_checked() {
        let config = TracingConfiguration::parse(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nsamplingRatePerMillion: 250\n",
        )
        .unwrap();
        assert_eq!(
            (config.endpoint(), config.sampling_rate()),
            ("localhost:4317", 250)
        );
        let wrong_kind = "apiVersion: apiserver.config.k8s.io/v1\nkind: Tracing\n";
        assert!(TracingConfiguration::parse(wrong_kind).is_err());
        let too_many = "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: TracingConfiguration\nsamplingRatePerMillion: 1000001\n";
        let message = TracingConfiguration::parse(too_many).unwrap_err();
        let message = message.to_string();
        assert!(
            message.starts_with("samplingRatePerMillion: Invalid value: 1000001"),
            "{message}"
        );
        let unknown =
            "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpont: x:1\n";
        assert!(TracingConfiguration::parse(unknown).is_err());
    }

    #[cfg(not(feature = "otlp"))]
    #[test]
    fn without_the_feature_the_flag_is_refused() {
        let config = TracingConfiguration::parse(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\n",
        )
        .unwrap();
        let refused = TracingExport::start(&config).unwrap_err().to_string();
        assert!(refused.contains("`otlp` feature"), "{refused}");
    }
}
