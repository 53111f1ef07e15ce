//! `--tracing-config-file` with the `otlp` feature: the request spans reach an OTLP gRPC
//! collector (the official trace service, served in the test on 127.0.0.1), continuing the
//! trace of the caller's `traceparent`, with the child spans under the request's.
#![cfg(feature = "otlp")]

use std::sync::{Arc, Mutex};

use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::{APIGroup, ServerOptions};
use extension_apiserver_testing::TestServer;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "trace.example.com",
    version = "v1",
    kind = "Probe",
    namespaced
)]
pub struct Probe {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans = request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans);
        self.0.lock().unwrap().extend(spans);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let value = span
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?;
    match value.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_spans_are_exported_over_otlp_in_the_callers_trace() {
    extension_apiserver::server::init_logging();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let collector = Collector::default();
    let service = TraceServiceServer::new(collector.clone());
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
    });

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tracing.yaml");
    // No sampling of its own: only requests whose caller sampled them are traced.
    let yaml = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: 127.0.0.1:{port}\nsamplingRatePerMillion: 0\n"
    );
    std::fs::write(&config, yaml).unwrap();
    let server = TestServer::builder()
        .group(APIGroup::new("trace.example.com").version("v1", |v| v.resource::<Probe>()))
        .options(move |o: &mut ServerOptions| o.tracing_config_file = Some(config))
        .start()
        .await;

    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let body = json!({"apiVersion": "trace.example.com/v1", "kind": "Probe",
                      "metadata": {"name": "p", "namespace": "default"}});
    let request = http::Request::post("/apis/trace.example.com/v1/namespaces/default/probes")
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{trace}-{parent}-01"))
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let response = server.client().send(request.map(Into::into)).await.unwrap();
    assert_eq!(response.status(), 201);
    // Unsampled by the caller, and the rate is 0: not exported.
    let untraced = http::Request::get("/apis/trace.example.com/v1/probes")
        .body(Vec::new())
        .unwrap();
    let response = server
        .client()
        .send(untraced.map(Into::into))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Stopping sends what is buffered.
    server.stop().await;

    let spans = collector.0.lock().unwrap().clone();
    assert!(!spans.is_empty(), "nothing exported");
    assert!(
        spans.iter().all(|s| hex(&s.trace_id) == trace),
        "only the caller's trace"
    );
    let root = spans
        .iter()
        .find(|s| s.name == "request")
        .expect("the request span");
    assert_eq!(hex(&root.parent_span_id), parent);
    assert_eq!(attribute(root, "verb").as_deref(), Some("create"));
    assert_eq!(attribute(root, "resource").as_deref(), Some("probes"));
    assert_eq!(attribute(root, "code").as_deref(), Some("201"));
    assert!(attribute(root, "user").is_some_and(|u| !u.is_empty()));
    for child in ["authentication", "authorization", "storage"] {
        let span = spans.iter().find(|s| s.name == child);
        let span = span.unwrap_or_else(|| panic!("no {child} span in {spans:#?}"));
        assert_eq!(
            span.parent_span_id, root.span_id,
            "{child} under the request"
        );
    }
}
