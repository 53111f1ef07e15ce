//! `--audit-*` flags, with kube-apiserver's names and defaults, and the [`Auditor`] they make.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::log::{LogBackend, RotatingFile};
use super::webhook::{BatchConfig, WebhookBackend};
use super::{AuditBackend, AuditError, Auditor, Policy};
use crate::auth::options::parse_duration;
use crate::lifecycle::ShutdownSignal;

/// Audit options. Without `--audit-policy-file` nothing is audited, as in kube-apiserver.
#[derive(Clone, Debug, Args)]
pub struct AuditOptions {
    /// Path to the file that defines the audit policy configuration (`audit.k8s.io/v1`
    /// `Policy`).
    #[arg(long = "audit-policy-file", value_name = "FILE")]
    pub policy_file: Option<PathBuf>,

    /// If set, all requests coming to the apiserver will be logged to this file (one JSON
    /// event a line, rotated by --audit-log-maxsize). '-' means standard out.
    #[arg(long = "audit-log-path", value_name = "FILE")]
    pub log_path: Option<String>,

    /// The maximum number of days to retain old audit log files based on the timestamp
    /// encoded in their filename (0: no limit).
    #[arg(long = "audit-log-maxage", default_value_t = 0, value_name = "DAYS")]
    pub log_max_age: u64,

    /// The maximum number of old audit log files to retain (0: no limit).
    #[arg(
        long = "audit-log-maxbackup",
        default_value_t = 0,
        value_name = "COUNT"
    )]
    pub log_max_backups: usize,

    /// The maximum size in megabytes of the audit log file before it gets rotated (0: 100).
    #[arg(
        long = "audit-log-maxsize",
        default_value_t = 0,
        value_name = "MEGABYTES"
    )]
    pub log_max_size: u64,

    /// Format of saved audits: only "json" (one event per line; kube's "legacy" text format
    /// is not supported).
    #[arg(
        long = "audit-log-format",
        default_value = "json",
        value_name = "FORMAT"
    )]
    pub log_format: String,

    /// How events reach the log: "blocking" (written before the request goes on; also what
    /// "blocking-strict" does here).
    #[arg(
        long = "audit-log-mode",
        default_value = "blocking",
        value_name = "MODE"
    )]
    pub log_mode: String,

    /// Path to a kubeconfig formatted file that defines the audit webhook configuration.
    #[arg(long = "audit-webhook-config-file", value_name = "FILE")]
    pub webhook_config_file: Option<PathBuf>,

    /// How events reach the webhook: only "batch" (buffered, sent in the background; a
    /// request never waits for the webhook).
    #[arg(
        long = "audit-webhook-mode",
        default_value = "batch",
        value_name = "MODE"
    )]
    pub webhook_mode: String,

    /// The size of the buffer to store events before batching and writing; events past it
    /// are dropped and counted.
    #[arg(
        long = "audit-webhook-batch-buffer-size",
        default_value_t = 10_000,
        value_name = "COUNT"
    )]
    pub webhook_buffer_size: usize,

    /// The maximum size of a batch.
    #[arg(
        long = "audit-webhook-batch-max-size",
        default_value_t = 400,
        value_name = "COUNT"
    )]
    pub webhook_max_batch_size: usize,

    /// The amount of time to wait before force writing the batch that hadn't reached the max
    /// size.
    #[arg(long = "audit-webhook-batch-max-wait", default_value = "30s",
          value_parser = parse_duration, value_name = "DURATION")]
    pub webhook_max_batch_wait: Duration,

    /// Whether batching throttling is enabled.
    #[arg(long = "audit-webhook-batch-throttle-enable", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub webhook_throttle_enable: bool,

    /// Maximum average number of batches per second.
    #[arg(
        long = "audit-webhook-batch-throttle-qps",
        default_value_t = 10.0,
        value_name = "QPS"
    )]
    pub webhook_throttle_qps: f64,

    /// Maximum number of requests sent at the same moment if throttle-qps was not utilized
    /// before.
    #[arg(
        long = "audit-webhook-batch-throttle-burst",
        default_value_t = 15,
        value_name = "COUNT"
    )]
    pub webhook_throttle_burst: u32,

    /// API group and version used for serializing audit events written to webhook: only
    /// audit.k8s.io/v1.
    #[arg(long = "audit-webhook-version", default_value = super::types::API_VERSION, value_name = "VERSION")]
    pub webhook_version: String,
}

impl Default for AuditOptions {
    fn default() -> Self {
        let batch = BatchConfig::default();
        Self {
            policy_file: None,
            log_path: None,
            log_max_age: 0,
            log_max_backups: 0,
            log_max_size: 0,
            log_format: "json".into(),
            log_mode: "blocking".into(),
            webhook_config_file: None,
            webhook_mode: "batch".into(),
            webhook_buffer_size: batch.buffer_size,
            webhook_max_batch_size: batch.max_batch_size,
            webhook_max_batch_wait: batch.max_batch_wait,
            webhook_throttle_enable: true,
            webhook_throttle_qps: 10.0,
            webhook_throttle_burst: 15,
            webhook_version: super::types::API_VERSION.into(),
        }
    }
}

impl AuditOptions {
    /// The auditor the options describe, `None` without a policy file or a backend; the
    /// webhook's task stops on `shutdown` after sending what it holds.
    pub async fn build(
        &self,
        shutdown: &ShutdownSignal,
    ) -> Result<Option<Arc<Auditor>>, AuditError> {
        self.check()?;
        let Some(policy_file) = &self.policy_file else {
            return Ok(None);
        };
        let policy = Policy::load(policy_file)?;
        let mut backends: Vec<Arc<dyn AuditBackend>> = Vec::new();
        if let Some(path) = &self.log_path {
            backends.push(Arc::new(self.log_backend(path)?));
        }
        if let Some(config) = &self.webhook_config_file {
            let batch = BatchConfig {
                buffer_size: self.webhook_buffer_size,
                max_batch_size: self.webhook_max_batch_size.max(1),
                max_batch_wait: self.webhook_max_batch_wait,
                throttle_qps: self
                    .webhook_throttle_enable
                    .then_some(self.webhook_throttle_qps),
                throttle_burst: self.webhook_throttle_burst,
                ..BatchConfig::default()
            };
            let webhook = WebhookBackend::start(config, batch, shutdown.clone()).await?;
            backends.push(Arc::new(webhook));
        }
        if backends.is_empty() {
            tracing::warn!("an audit policy but no audit backend: no events are written");
            return Ok(None);
        }
        Ok(Some(Arc::new(Auditor::new(policy, backends))))
    }

    fn check(&self) -> Result<(), AuditError> {
        let unsupported = |flag: &str, value: &str, supported: &str| {
            AuditError::Unsupported(format!(
                "--{flag}={value} is not supported (supported: {supported})"
            ))
        };
        if self.log_format != "json" {
            return Err(unsupported("audit-log-format", &self.log_format, "json"));
        }
        if !matches!(self.log_mode.as_str(), "blocking" | "blocking-strict") {
            return Err(unsupported(
                "audit-log-mode",
                &self.log_mode,
                "blocking, blocking-strict",
            ));
        }
        if self.webhook_mode != "batch" {
            return Err(unsupported(
                "audit-webhook-mode",
                &self.webhook_mode,
                "batch",
            ));
        }
        if self.webhook_version != super::types::API_VERSION {
            let supported = super::types::API_VERSION;
            return Err(unsupported(
                "audit-webhook-version",
                &self.webhook_version,
                supported,
            ));
        }
        Ok(())
    }

    fn log_backend(&self, path: &str) -> Result<LogBackend, AuditError> {
        if path == "-" {
            return Ok(LogBackend::new(Box::new(std::io::stdout())));
        }
        let file = RotatingFile::open(
            path.as_ref(),
            self.log_max_size,
            self.log_max_backups,
            self.log_max_age,
        )
        .map_err(|e| AuditError::Log {
            path: path.into(),
            reason: e.to_string(),
        })?;
        Ok(LogBackend::new(Box::new(file)))
    }
}
