//! The OpenTelemetry side of the log subscriber (the `otlp` feature): one layer installed
//! with the subscriber, whose spans go nowhere until `--tracing-config-file` starts an export
//! ([`start`]), and nowhere again once it [`stop`]s.
//!
//! The layer is not reloadable because tracing-opentelemetry finds it by downcasting through
//! the subscriber (to continue a caller's trace), which a reload layer does not allow. So it is
//! always there, filtered off while nothing is exported (an atomic load per span), and what
//! changes is behind it: the sampler's rate and the batch processor that sends to the
//! collector.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, PoisonError, RwLock};
use std::time::Duration;

use opentelemetry::trace::{Link, SpanKind, TraceId, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, Sampler, SamplingDecision, SamplingResult, SdkTracerProvider, ShouldSample,
    Span, SpanData, SpanProcessor,
};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{Filtered, filter_fn};
use tracing_subscriber::registry::LookupSpan;

/// The processor exports go through while on.
static PROCESSOR: RwLock<Option<BatchSpanProcessor>> = RwLock::new(None);
/// `samplingRatePerMillion` of the export on.
static RATE: AtomicU64 = AtomicU64::new(0);
/// The provider of the layer's tracer, for the life of the process.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The layer for the subscriber: spans to OpenTelemetry while an export is on.
pub(super) fn layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let provider = PROVIDER.get_or_init(|| {
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("apiserver")
            .build();
        SdkTracerProvider::builder()
            .with_span_processor(Relay)
            .with_sampler(Configured)
            .with_resource(resource)
            .build()
    });
    let tracer = provider.tracer("apiserver");
    let layer = tracing_opentelemetry::layer().with_tracer(tracer);
    let on: Filtered<_, _, S> = layer.with_filter(filter_fn(|_| crate::spans::exporting()));
    on
}

/// Sends spans to `processor`, sampling `rate_per_million` of the traces no caller sampled.
pub(super) fn start(processor: BatchSpanProcessor, rate_per_million: u64) {
    RATE.store(rate_per_million, Ordering::Relaxed);
    *PROCESSOR.write().unwrap_or_else(PoisonError::into_inner) = Some(processor);
    crate::spans::set_exporting(true);
}

/// Stops exporting; the processor (to shut down, which sends what it holds).
pub(super) fn stop() -> Option<BatchSpanProcessor> {
    crate::spans::set_exporting(false);
    PROCESSOR
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
}

/// Hands each span to the processor of the export on, if any.
#[derive(Debug)]
struct Relay;

impl SpanProcessor for Relay {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        let processor = PROCESSOR.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(processor) = processor.as_ref() {
            processor.on_start(span, cx);
        }
    }

    fn on_end(&self, span: SpanData) {
        let processor = PROCESSOR.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(processor) = processor.as_ref() {
            processor.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let processor = PROCESSOR.read().unwrap_or_else(PoisonError::into_inner);
        processor
            .as_ref()
            .map_or(Ok(()), SpanProcessor::force_flush)
    }

    /// The export's processor is shut down by [`stop`]'s caller, not with the provider.
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// kube-apiserver's sampler: parent-based, with `samplingRatePerMillion` for roots; nothing
/// while no export is on.
#[derive(Clone, Debug)]
struct Configured;

impl ShouldSample for Configured {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        if !crate::spans::exporting() {
            return SamplingResult {
                decision: SamplingDecision::Drop,
                attributes: Vec::new(),
                trace_state: Default::default(),
            };
        }
        let ratio = RATE.load(Ordering::Relaxed) as f64 / 1_000_000.0;
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)));
        sampler.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
    }
}
