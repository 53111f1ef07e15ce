//! Subresources beyond status and scale over the server's own TLS: an action answering its
//! parent, one answering a `Status`, a computed view of another kind, a chunked stream read
//! while it is written and dropped with its client, WebSocket connections with the
//! channel.k8s.io v5 and v4 subprotocols, CONNECT admission, authorization per subresource
//! through delegated SubjectAccessReviews, bad options, discovery. Loopback only; every wait
//! is bounded.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use extension_apiserver::admission::{AdmissionPlugin, Attributes, Operation, Plugin};
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status};
use extension_apiserver::registry::subresource::{
    Action, ActionVerb, ByteStream, Channels, Connecter, ExitStatus, NoOptions, Session, Streamer,
    SubresourceRequest, View,
};
use extension_apiserver::server::{APIGroup, APIServer, ServerOptions, StorageBackendKind};
use extension_apiserver::{Error, Resource, async_trait};
use extension_apiserver_testing::fake_core::{AuthenticationConfig, FakeCore, Rule, TokenUser};
use extension_apiserver_testing::pki::TestCa;
use extension_apiserver_testing::{TestServer, eventually};
use futures::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use kube::api::{Api, PostParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

const WAIT: Duration = Duration::from_secs(30);
const GROUP: &str = "runner.test.example.com";
const RUNS: &str = "/apis/runner.test.example.com/v1/namespaces/default/runs";

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "runner.test.example.com",
    version = "v1",
    kind = "Run",
    namespaced
)]
pub struct Run {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: RunSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct RunSpec {
    #[serde(default)]
    pub command: Vec<String>,
}

/// The computed view of a run: another kind, served nowhere else.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "runner.test.example.com",
    version = "v1",
    kind = "RunSummary",
    namespaced
)]
pub struct RunSummary {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub lines: i64,
}

/// `cancel`: POST, answers the parent as stored.
struct Cancel {
    runs: extension_apiserver::registry::store::Reader<Run>,
}

#[async_trait]
impl Action for Cancel {
    type Parent = Run;
    type Options = NoOptions;
    type Body = Value;
    type Output = Run;

    async fn act(
        &self,
        _: ActionVerb,
        request: SubresourceRequest<NoOptions>,
        _: Option<Value>,
    ) -> extension_apiserver::Result<Run> {
        let namespace = request.namespace.as_deref();
        match self.runs.get(namespace, &request.name).await? {
            Some(run) => Ok(run),
            None => Err(Error::not_found(&Run::INFO, &request.name)),
        }
    }
}

/// The body of `evict`, as policy/v1 Eviction's.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Eviction {
    #[serde(default)]
    pub delete_options: Option<Value>,
}

/// `evict`: POST with a body, answers a `Status` as pods/eviction does.
struct Evict;

#[async_trait]
impl Action for Evict {
    type Parent = Run;
    type Options = NoOptions;
    type Body = Eviction;
    type Output = Status;

    async fn act(
        &self,
        _: ActionVerb,
        _: SubresourceRequest<NoOptions>,
        body: Option<Eviction>,
    ) -> extension_apiserver::Result<Status> {
        let body = body.ok_or_else(|| Error::bad_request("an Eviction body is required"))?;
        Ok(Status {
            status: Some("Success".into()),
            code: Some(201),
            message: Some(format!(
                "evicted, options {:?}",
                body.delete_options.is_some()
            )),
            ..Status::default()
        })
    }
}

struct Summary;

#[async_trait]
impl View for Summary {
    type Parent = Run;
    type Options = NoOptions;
    type Output = RunSummary;

    async fn get(
        &self,
        request: SubresourceRequest<NoOptions>,
    ) -> extension_apiserver::Result<RunSummary> {
        Ok(RunSummary {
            metadata: ObjectMeta {
                name: Some(request.name),
                namespace: request.namespace,
                ..ObjectMeta::default()
            },
            lines: 2,
        })
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogOptions {
    pub follow: bool,
    pub tail_lines: Option<i64>,
}

/// What the test drives of `log`: the lines a follow writes, and whether its stream was
/// dropped.
#[derive(Clone, Default)]
struct LogFeed {
    /// `attach` sessions whose handler is still running.
    sessions: Arc<AtomicUsize>,
    lines: Arc<Mutex<Option<mpsc::Receiver<Bytes>>>>,
    dropped: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
}

impl LogFeed {
    /// A feed for one follow, and the sender of its lines.
    fn following() -> (LogFeed, mpsc::Sender<Bytes>) {
        let feed = LogFeed::default();
        let (lines, rx) = mpsc::channel(4);
        *feed.lines.lock().unwrap() = Some(rx);
        (feed, lines)
    }
}

/// Sends each line and reads it back from `body` before the next: a stream read while it is
/// written.
async fn read_as_written<B>(lines: &mpsc::Sender<Bytes>, body: &mut B, each: &[&'static str])
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    for line in each {
        lines.send(Bytes::from(*line)).await.unwrap();
        let frame = timeout(WAIT, body.frame()).await.unwrap().unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), *line);
    }
}

struct Log {
    feed: LogFeed,
}

/// Sets the flag when the stream holding it is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl Streamer for Log {
    type Parent = Run;
    type Options = LogOptions;

    async fn stream(
        &self,
        request: SubresourceRequest<LogOptions>,
    ) -> extension_apiserver::Result<ByteStream> {
        if request.options.tail_lines.is_some_and(|n| n < 0) {
            return Err(Error::new(422, "Invalid", "tailLines: must be >= 0"));
        }
        self.feed.opened.fetch_add(1, Ordering::SeqCst);
        if !request.options.follow {
            return Ok(Box::pin(futures::stream::iter([Ok(Bytes::from(
                "one\ntwo\n",
            ))])));
        }
        let lines = self.feed.lines.lock().unwrap().take().expect("one follow");
        let flag = DropFlag(self.feed.dropped.clone());
        // No task of its own: the stream holds the receiver and the flag.
        let stream = futures::stream::unfold((lines, flag), |(mut lines, flag)| async move {
            let line = lines.recv().await?;
            Some((Ok(line), (lines, flag)))
        });
        Ok(Box::pin(stream))
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct AttachOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// `attach`: says hello on stdout and stderr, reports resizes, echoes stdin upper-cased
/// until its end, then exits with 3 for run `fail`, 0 otherwise.
struct Attach {
    sessions: Arc<AtomicUsize>,
}

/// Counts a running session until it is dropped.
struct Live(Arc<AtomicUsize>);

impl Live {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Connecter for Attach {
    type Parent = Run;
    type Options = AttachOptions;

    fn channels(&self, o: &AttachOptions) -> Channels {
        Channels {
            stdin: o.stdin,
            stdout: o.stdout,
            stderr: o.stderr,
            tty: o.tty,
        }
    }

    async fn connect(
        &self,
        request: SubresourceRequest<AttachOptions>,
        mut session: Session,
    ) -> extension_apiserver::Result<ExitStatus> {
        let _live = Live::new(&self.sessions);
        session.stdout.write("hello\n").await?;
        session.stderr.write("warning\n").await?;
        if let Some(mut stdin) = session.stdin.take() {
            loop {
                tokio::select! {
                    chunk = stdin.recv() => match chunk {
                        Some(chunk) => {
                            let upper = String::from_utf8_lossy(&chunk).to_uppercase();
                            session.stdout.write(upper).await?;
                        }
                        None => break,
                    },
                    Some(size) = session.resize.recv() => {
                        let line = format!("resize {}x{}\n", size.width, size.height);
                        session.stdout.write(line).await?;
                    }
                }
            }
        }
        Ok(match request.name.as_str() {
            "fail" => ExitStatus::Code(3),
            _ => ExitStatus::Success,
        })
    }
}

fn group(feed: LogFeed) -> APIGroup {
    APIGroup::new(GROUP).version("v1", move |v| {
        let feed = feed.clone();
        let sessions = feed.sessions.clone();
        v.resource::<Run>()
            .action("cancel", |storage| Cancel {
                runs: storage.reader(),
            })
            .action("evict", |_| Evict)
            .view("summary", |_| Summary)
            .stream("log", move |_| Log { feed: feed.clone() })
            .connect("attach", move |_| Attach {
                sessions: sessions.clone(),
            })
    })
}

/// One call the admission plugin saw: operation, subresource, the object's kind.
type SeenCall = (Operation, String, Option<String>);

/// What the admission plugin saw.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<SeenCall>>>);

#[async_trait]
impl AdmissionPlugin for Seen {
    fn name(&self) -> &str {
        "Seen"
    }

    async fn validate(&self, a: &Attributes) -> extension_apiserver::Result<()> {
        let kind = a
            .object
            .as_ref()
            .and_then(|o| o.get("kind"))
            .and_then(Value::as_str)
            .map(String::from);
        self.0
            .lock()
            .unwrap()
            .push((a.operation, a.subresource.clone(), kind));
        Ok(())
    }
}

async fn start(feed: LogFeed, seen: Seen) -> TestServer {
    TestServer::builder()
        .group(group(feed))
        .extend(move |server: APIServer| {
            server.admission_plugin(move |_| Plugin::validating(seen.clone()))
        })
        .start()
        .await
}

async fn create_run(client: &kube::Client, name: &str) {
    let runs: Api<Run> = Api::namespaced(client.clone(), "default");
    let run = Run {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Run::default()
    };
    runs.create(&PostParams::default(), &run).await.unwrap();
}

/// `method path` with an optional JSON body: the status and the body as JSON (or text).
async fn call(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let response = timeout(WAIT, client.send(request.map(kube::client::Body::from)))
        .await
        .unwrap()
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

#[tokio::test]
async fn actions_views_options_and_unknown_subresources() {
    let seen = Seen::default();
    let server = start(LogFeed::default(), seen.clone()).await;
    let client = server.client();
    create_run(&client, "a").await;

    // An action answering its parent: POST is a create (201), admitted as CREATE.
    let (code, body) = call(&client, "POST", &format!("{RUNS}/a/cancel"), None).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["kind"], "Run");
    assert_eq!(body["apiVersion"], "runner.test.example.com/v1");
    assert_eq!(body["metadata"]["name"], "a");
    let (code, body) = call(&client, "POST", &format!("{RUNS}/missing/cancel"), None).await;
    assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));
    // An action cannot be dry run: refused, not done.
    let (code, body) = call(
        &client,
        "POST",
        &format!("{RUNS}/a/cancel?dryRun=All"),
        None,
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (400, Some("BadRequest")),
        "{body}"
    );
    // A method the action does not answer.
    let (code, body) = call(&client, "GET", &format!("{RUNS}/a/cancel"), None).await;
    assert_eq!(code, 405, "{body}");

    // An action with a body answering a Status, whose code it says.
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "deleteOptions": {}});
    let (code, body) = call(&client, "POST", &format!("{RUNS}/a/evict"), Some(eviction)).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        (body["kind"].as_str(), body["apiVersion"].as_str()),
        (Some("Status"), Some("v1"))
    );
    assert_eq!(body["status"], "Success");
    let (code, body) = call(&client, "POST", &format!("{RUNS}/a/evict"), None).await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
    {
        let seen = seen.0.lock().unwrap();
        let creates: Vec<_> = seen.iter().filter(|s| s.1 == "evict").collect();
        assert!(
            creates
                .iter()
                .any(|s| s.0 == Operation::Create && s.2.as_deref() == Some("Eviction")),
            "{creates:?}"
        );
    }

    // A view of another kind.
    let (code, body) = call(&client, "GET", &format!("{RUNS}/a/summary"), None).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (body["kind"].as_str(), body["lines"].as_i64()),
        (Some("RunSummary"), Some(2))
    );
    assert_eq!(body["metadata"]["name"], "a");

    // A stream without follow: the whole text.
    let (code, body) = call(&client, "GET", &format!("{RUNS}/a/log?timestamps=1"), None).await;
    assert_eq!((code, body.as_str()), (200, Some("one\ntwo\n")));
    // A value that does not convert is the framework's 400; a bad one the handler's 422.
    let (code, body) = call(&client, "GET", &format!("{RUNS}/a/log?tailLines=ten"), None).await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (400, Some("BadRequest")),
        "{body}"
    );
    assert_eq!(body["kind"], "Status");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(r#"parsing "ten": invalid syntax"#),
        "{body}"
    );
    let (code, body) = call(&client, "GET", &format!("{RUNS}/a/log?tailLines=-1"), None).await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );

    // An unknown subresource.
    let (code, body) = call(&client, "GET", &format!("{RUNS}/a/nope"), None).await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (404, Some("NotFound")),
        "{body}"
    );

    // Discovery lists each with its verbs and kind, as pods/log and pods/attach are.
    let (_, list) = call(&client, "GET", "/apis/runner.test.example.com/v1", None).await;
    let resources = list["resources"].as_array().unwrap();
    let find = |name: &str| {
        resources
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {list}"))
            .clone()
    };
    assert_eq!(find("runs/cancel")["verbs"], json!(["create"]));
    assert_eq!(find("runs/cancel")["kind"], "Run");
    assert_eq!(find("runs/evict")["kind"], "Status");
    assert_eq!(find("runs/summary")["verbs"], json!(["get"]));
    assert_eq!(find("runs/summary")["kind"], "RunSummary");
    assert_eq!(find("runs/log")["verbs"], json!(["get"]));
    assert_eq!(find("runs/log")["kind"], "Run");
    assert_eq!(find("runs/attach")["verbs"], json!(["create", "get"]));
    assert_eq!(find("runs/attach")["kind"], "RunAttachOptions");

    // OpenAPI: their paths, query options and answers.
    let (code, v2) = call(&client, "GET", "/openapi/v2", None).await;
    assert_eq!(code, 200);
    let item = |sub: &str| {
        let path = format!("/apis/{GROUP}/v1/namespaces/{{namespace}}/runs/{{name}}/{sub}");
        v2["paths"][&path].clone()
    };
    let log_item = item("log");
    let log = &log_item["get"];
    assert_eq!(
        log["operationId"], "readRunnerTestExampleComV1NamespacedRunLog",
        "{log}"
    );
    assert_eq!(log["produces"], json!(["text/plain"]));
    assert_eq!(log["responses"]["200"]["schema"], json!({"type": "string"}));
    // The parameters of an operation, or of its path when every operation shares them.
    let param = |item: &Value, op: &str, name: &str| {
        let shared = item["parameters"].as_array().cloned().unwrap_or_default();
        let own = item[op]["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        shared
            .iter()
            .chain(&own)
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {item}"))["type"]
            .clone()
    };
    assert_eq!(param(&log_item, "get", "follow"), "boolean");
    assert_eq!(param(&log_item, "get", "tailLines"), "integer");
    let attach = item("attach");
    // As kube names `connectCoreV1GetNamespacedPodAttach`.
    assert_eq!(
        attach["get"]["operationId"],
        "connectRunnerTestExampleComV1GetNamespacedRunAttach"
    );
    assert_eq!(attach["post"]["x-kubernetes-action"], "connect");
    assert_eq!(param(&attach, "get", "stdin"), "boolean");
    let summary = &item("summary")["get"]["responses"]["200"]["schema"]["$ref"];
    assert_eq!(
        summary,
        "#/definitions/com.example.test.runner.v1.RunSummary"
    );
    assert!(v2["definitions"]["com.example.test.runner.v1.RunSummary"].is_object());
    let evict = &item("evict")["post"];
    assert_eq!(
        evict["responses"]["201"]["schema"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Status"
    );
    assert_eq!(
        evict["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["in"] == "body")
            .unwrap()["schema"]["$ref"],
        "#/definitions/com.example.test.runner.v1.Eviction",
        "{evict}"
    );
    assert_eq!(
        item("cancel")["post"]["operationId"],
        "createRunnerTestExampleComV1NamespacedRunCancel"
    );
    let (code, v3) = call(
        &client,
        "GET",
        &format!("/openapi/v3/apis/{GROUP}/v1"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{v3}");
    let path = format!("/apis/{GROUP}/v1/namespaces/{{namespace}}/runs/{{name}}/log");
    let text = &v3["paths"][&path]["get"]["responses"]["200"]["content"]["text/plain"]["schema"];
    assert_eq!(text, &json!({"type": "string"}), "{}", v3["paths"][&path]);
    server.stop().await;
}

/// The value of `apiserver_longrunning_requests` for `runs/log` (0 when absent).
async fn long_running_logs(client: &kube::Client) -> f64 {
    long_running(client, "log").await
}

/// The value of `apiserver_longrunning_requests` for `runs/{sub}` (0 when absent).
async fn long_running(client: &kube::Client, sub: &str) -> f64 {
    let wanted = format!(r#"subresource="{sub}""#);
    let (_, text) = call(client, "GET", "/metrics", None).await;
    text.as_str()
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("apiserver_longrunning_requests{"))
        .filter(|l| l.contains(r#"resource="runs""#) && l.contains(&wanted))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `apiserver_longrunning_requests` is one registry for the process: the tests that hold a
/// `runs/log` stream open take turns.
static LOG_STREAMS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn a_followed_stream_is_read_as_written_and_dropped_with_its_client() {
    let _turn = LOG_STREAMS.lock().await;
    let (feed, lines) = LogFeed::following();
    let server = start(feed.clone(), Seen::default()).await;
    let client = server.client();
    create_run(&client, "a").await;

    let request = http::Request::get(format!("{RUNS}/a/log?follow=true"))
        .body(kube::client::Body::empty())
        .unwrap();
    let response = timeout(WAIT, client.send(request)).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/plain");
    let mut body = response.into_body();
    // Each line arrives while the stream is still open.
    read_as_written(&lines, &mut body, &["first\n", "second\n"]).await;
    assert_eq!(long_running_logs(&client).await, 1.0);
    assert!(!feed.dropped.load(Ordering::SeqCst));

    // The client goes away: the handler's stream is dropped, the request no longer counted.
    drop(body);
    assert!(eventually(|| async { feed.dropped.load(Ordering::SeqCst) }).await);
    assert!(eventually(|| async { long_running_logs(&client).await == 0.0 }).await);
    assert!(lines.is_closed());
    server.stop().await;
}

/// A WebSocket to `path` offering `protocols`: the protocol the server chose and the socket.
async fn websocket(
    client: &kube::Client,
    path: &str,
    protocols: &str,
) -> Result<(String, WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>), (u16, Value)> {
    let key = tokio_tungstenite::tungstenite::handshake::client::generate_key();
    let request = http::Request::get(path)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", key)
        .header("sec-websocket-protocol", protocols)
        .body(kube::client::Body::empty())
        .unwrap();
    let response = timeout(WAIT, client.send(request)).await.unwrap().unwrap();
    if response.status() != 101 {
        let code = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        return Err((code, serde_json::from_slice(&bytes).unwrap_or(Value::Null)));
    }
    let protocol = response.headers()["sec-websocket-protocol"]
        .to_str()
        .unwrap()
        .to_string();
    let upgraded = timeout(WAIT, hyper::upgrade::on(response))
        .await
        .unwrap()
        .unwrap();
    let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;
    Ok((protocol, socket))
}

/// Reads frames until the error channel's: what came on stdout and stderr, and the Status.
async fn read_until_exit(
    socket: &mut WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
    stdout_wanted: &str,
) -> (String, String, Value) {
    let (mut stdout, mut stderr) = (String::new(), String::new());
    loop {
        let message = timeout(WAIT, socket.next()).await.unwrap();
        let Some(Ok(Message::Binary(data))) = message else {
            panic!("no exit status; stdout {stdout:?} stderr {stderr:?}: {message:?}");
        };
        let text = String::from_utf8_lossy(&data[1..]).to_string();
        match data[0] {
            1 => stdout.push_str(&text),
            2 => stderr.push_str(&text),
            3 => return (stdout, stderr, serde_json::from_str(&text).unwrap()),
            other => panic!("channel {other}"),
        }
        let _ = stdout_wanted;
    }
}

async fn read_stdout(
    socket: &mut WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
    wanted: &str,
) -> String {
    let mut stdout = String::new();
    while !stdout.contains(wanted) {
        let message = timeout(WAIT, socket.next()).await.unwrap();
        let Some(Ok(Message::Binary(data))) = message else {
            panic!("stdout {stdout:?} then {message:?}");
        };
        if data[0] == 1 {
            stdout.push_str(&String::from_utf8_lossy(&data[1..]));
        }
    }
    stdout
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = vec![channel];
    bytes.extend_from_slice(data);
    Message::Binary(bytes.into())
}

#[tokio::test]
async fn websocket_v5_and_v4_carry_stdin_stdout_stderr_resize_and_the_exit_status() {
    let seen = Seen::default();
    let feed = LogFeed::default();
    let server = start(feed.clone(), seen.clone()).await;
    let client = server.client();
    create_run(&client, "ok").await;
    create_run(&client, "fail").await;
    let attach =
        |name: &str| format!("{RUNS}/{name}/attach?stdin=true&stdout=1&stderr=true&tty=true");

    // v5, the client's first choice: stdin, a resize, the close of stdin, exit 0.
    let offered = "v5.channel.k8s.io, v4.channel.k8s.io";
    let (protocol, mut socket) = websocket(&client, &attach("ok"), offered).await.unwrap();
    assert_eq!(protocol, "v5.channel.k8s.io");
    socket.send(frame(0, b"abc\n")).await.unwrap();
    read_stdout(&mut socket, "ABC\n").await;
    socket
        .send(frame(4, br#"{"Width":120,"Height":40}"#))
        .await
        .unwrap();
    read_stdout(&mut socket, "resize 120x40\n").await;
    // The session counts as a long-running request while it lasts, not only its 101.
    assert!(long_running(&client, "attach").await >= 1.0);
    socket
        .send(Message::Binary(vec![255, 0].into()))
        .await
        .unwrap();
    let (_, _, status) = read_until_exit(&mut socket, "").await;
    assert_eq!(status["status"], "Success", "{status}");

    // v4 alone; stderr; no close signal: the exit code 3 once the socket says stdin ended.
    let (protocol, mut socket) = websocket(&client, &attach("fail"), "v4.channel.k8s.io")
        .await
        .unwrap();
    assert_eq!(protocol, "v4.channel.k8s.io");
    socket.send(frame(0, b"xyz")).await.unwrap();
    let stdout = read_stdout(&mut socket, "XYZ").await;
    assert!(stdout.starts_with("hello\n"), "{stdout}");
    // v4 has no close signal: [255, 0] is not one (a frame of channel 255, ignored).
    socket
        .send(Message::Binary(vec![255, 0].into()))
        .await
        .unwrap();
    socket.send(frame(0, b"more")).await.unwrap();
    read_stdout(&mut socket, "MORE").await;
    // The client goes away while the handler waits on stdin: the handler is dropped.
    assert_eq!(feed.sessions.load(Ordering::SeqCst), 1);
    drop(socket);
    assert!(eventually(|| async { feed.sessions.load(Ordering::SeqCst) == 0 }).await);

    // Without stdin the handler ends at once; stderr comes on channel 2; exit 3.
    let path = format!("{RUNS}/fail/attach?stdout=true&stderr=true");
    let (_, mut socket) = websocket(&client, &path, "v4.channel.k8s.io")
        .await
        .unwrap();
    let (stdout, stderr, status) = read_until_exit(&mut socket, "").await;
    assert_eq!((stdout.as_str(), stderr.as_str()), ("hello\n", "warning\n"));
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "3");

    // No supported subprotocol, no channel, no upgrade: kube's 400s.
    let (code, body) = websocket(&client, &attach("ok"), "channel.k8s.io")
        .await
        .unwrap_err();
    assert_eq!(code, 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("not supported"),
        "{body}"
    );
    let (code, _) = websocket(&client, &format!("{RUNS}/ok/attach"), offered)
        .await
        .unwrap_err();
    assert_eq!(code, 400);
    let (code, _) = call(&client, "GET", &attach("ok"), None).await;
    assert_eq!(code, 400);

    // Admission saw CONNECT with the options as the object.
    let seen = seen.0.lock().unwrap().clone();
    assert!(
        seen.iter().any(|s| s.0 == Operation::Connect
            && s.1 == "attach"
            && s.2.as_deref() == Some("RunAttachOptions")),
        "{seen:?}"
    );
    server.stop().await;
}

const CALLER: &str = "system:serviceaccount:runner:apiserver";

/// A kube client for `server` that authenticates with `token`.
async fn token_client(server: &TestServer, token: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_string().into()),
        ..Default::default()
    };
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn each_subresource_is_authorized_with_its_name_through_delegated_reviews() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let ca = TestCa::new("client-ca");
    let proxy = TestCa::new("front-proxy-ca");
    core.set_authentication_config(&AuthenticationConfig::with_front_proxy(
        &ca.cert_pem,
        &proxy.cert_pem,
    ));
    let mut options = ServerOptions {
        storage_backend: StorageBackendKind::Memory,
        ..TestServer::options(dir.path())
    };
    let kubeconfig = core.kubeconfig(CALLER);
    options.auth.authentication_kubeconfig = Some(kubeconfig.clone());
    options.auth.authorization_kubeconfig = Some(kubeconfig);
    // Denials not cached: the test grants after a denial.
    options.auth.authorization_webhook_cache_unauthorized_ttl = Duration::ZERO;
    let server = TestServer::start_with_options(options, vec![group(LogFeed::default())]).await;
    for name in ["reader", "admin"] {
        let user = TokenUser {
            username: name.into(),
            uid: String::new(),
            groups: vec!["system:authenticated".into()],
            extra: Default::default(),
        };
        core.add_token(name, user);
    }
    core.allow(Rule::user("reader", &["get", "list"], GROUP, &["runs"]));
    core.allow(Rule::user("admin", &["*"], GROUP, &["*"]));
    let admin = token_client(&server, "admin").await;
    create_run(&admin, "a").await;
    let reader = token_client(&server, "reader").await;

    let (code, _) = call(&reader, "GET", &format!("{RUNS}/a"), None).await;
    assert_eq!(code, 200);
    let (code, body) = call(&reader, "GET", &format!("{RUNS}/a/log"), None).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(r#"cannot get resource "runs/log""#),
        "{body}"
    );
    let offered = "v5.channel.k8s.io";
    let (code, body) = websocket(&reader, &format!("{RUNS}/a/attach?stdout=1"), offered)
        .await
        .unwrap_err();
    assert_eq!(code, 403, "{body}");
    let (code, _) = call(&reader, "POST", &format!("{RUNS}/a/cancel"), None).await;
    assert_eq!(code, 403);

    // Allowed `get runs/attach` only: the WebSocket GET also needs `create`, as kube >= 1.30.
    core.allow(Rule::user(
        "reader",
        &["get"],
        GROUP,
        &["runs/attach", "runs/log"],
    ));
    let (code, _) = call(&reader, "GET", &format!("{RUNS}/a/log"), None).await;
    assert_eq!(code, 200);
    let (code, body) = websocket(&reader, &format!("{RUNS}/a/attach?stdout=1"), offered)
        .await
        .unwrap_err();
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("cannot create"),
        "{body}"
    );
    core.allow(Rule::user("reader", &["create"], GROUP, &["runs/attach"]));
    let (_, mut socket) = websocket(&reader, &format!("{RUNS}/a/attach?stdout=1"), offered)
        .await
        .unwrap();
    let (stdout, _, status) = read_until_exit(&mut socket, "").await;
    assert_eq!(
        (stdout.as_str(), status["status"].as_str()),
        ("hello\n", Some("Success"))
    );

    // The reviews named the subresource and the verb.
    let reviews = core.access_reviews();
    let asked = |verb: &str, sub: &str| {
        reviews.iter().any(|r| {
            let a = &r["resourceAttributes"];
            a["verb"] == verb && a["resource"] == "runs" && a["subresource"] == sub
        })
    };
    assert!(asked("get", "log"), "{reviews:?}");
    assert!(
        asked("get", "attach") && asked("create", "attach"),
        "{reviews:?}"
    );
    assert!(asked("create", "cancel"), "{reviews:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_follow_outlives_the_request_timeout_and_ends_at_shutdown() {
    let _turn = LOG_STREAMS.lock().await;
    let (feed, lines) = LogFeed::following();
    let group = group(feed.clone());
    let server = TestServer::builder()
        .group(group)
        .options(|o| o.request_timeout_seconds = 1)
        .start()
        .await;
    let client = server.client();
    create_run(&client, "a").await;
    let request = http::Request::get(format!("{RUNS}/a/log?follow=1"))
        .body(kube::client::Body::empty())
        .unwrap();
    let response = timeout(WAIT, client.send(request)).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    // Past the 1 s bound of ordinary requests: the stream is long-running, not cut.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    read_as_written(&lines, &mut body, &["late\n"]).await;

    // Shutdown ends the body (the stream is dropped), so the server stops.
    let stopping = tokio::spawn(server.stop());
    loop {
        match timeout(WAIT, body.frame()).await.unwrap() {
            None | Some(Err(_)) => break,
            Some(Ok(_)) => continue,
        }
    }
    timeout(WAIT, stopping).await.unwrap().unwrap();
    assert!(feed.dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_followed_stream_over_http2_is_read_as_written_and_reset_with_its_client() {
    let _turn = LOG_STREAMS.lock().await;
    let (feed, lines) = LogFeed::following();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .group(group(feed.clone()))
        .dir(dir.path())
        .start()
        .await;
    create_run(&server.client(), "a").await;
    let mut h2 = crate::aggregator_compat::h2(&server, dir.path()).await;
    let request = http::Request::get(format!("https://127.0.0.1{RUNS}/a/log?follow=true"))
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let response = timeout(WAIT, h2.send_request(request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    read_as_written(&lines, &mut body, &["over\n", "h2\n"]).await;
    // Dropping the body resets the stream: the handler's stream is dropped, the connection
    // stays for other requests.
    drop(body);
    assert!(eventually(|| async { feed.dropped.load(Ordering::SeqCst) }).await);
    let request = http::Request::get(format!("https://127.0.0.1{RUNS}/a/summary"))
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let response = timeout(WAIT, h2.send_request(request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    server.stop().await;
}
