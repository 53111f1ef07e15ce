//! Upgraded connections: WebSocket with kube's channel.k8s.io subprotocols (apimachinery's
//! `wsstream/conn.go`, `remotecommand/constants.go`). Each binary frame starts with its
//! channel: 0 stdin, 1 stdout, 2 stderr, 3 error (the exit `Status`, as the kubelet's
//! `remotecommand/exec.go` writes it), 4 resize (`{"Width","Height"}`); v5 adds the close
//! signal, a frame `[255, channel]` (the client's end of stdin). SPDY is not served: no
//! maintained Rust crate speaks it.

use std::sync::{Arc, Mutex};

use axum::extract::FromRequestParts;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use http::HeaderValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Call;
use crate::admission::Operation;
use crate::endpoints::request_info::Verb;
use crate::error::{Error, Result};
use crate::lifecycle::ShutdownSignal;
use crate::registry::subresource::erased_options_kind as options_kind;
use crate::registry::subresource::{
    Channels, ExitStatus, Output, ResizeEvents, Session, Stdin, Subresource, SubresourceRequest,
    TerminalSize,
};

/// `v5.channel.k8s.io`: v4 and the close signal.
pub const V5: &str = "v5.channel.k8s.io";
/// `v4.channel.k8s.io`: binary frames, the exit status as a JSON `Status`.
pub const V4: &str = "v4.channel.k8s.io";
/// The subprotocols served, for the error message.
const SUPPORTED: [&str; 2] = [V5, V4];
/// The close signal of v5 (`remotecommand.StreamClose`).
const STREAM_CLOSE: u8 = 255;
/// Chunks in flight per channel: a handler writing faster than the client reads waits.
const CHANNEL_DEPTH: usize = 16;

/// What the connection holds for as long as it lasts: the filters put the request's
/// long-running metric here, so that it counts the session, not the 101 answer.
#[derive(Clone, Default)]
pub struct HeldUntilClosed(Arc<Mutex<Vec<Box<dyn std::any::Any + Send>>>>);

impl HeldUntilClosed {
    /// Keeps `value` until the connection ends (dropped at once if it has ended).
    pub fn hold(&self, value: Box<dyn std::any::Any + Send>) {
        if Arc::strong_count(&self.0) > 1 {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(value);
        }
    }

    fn release(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// The subprotocol kube's handshake picks: the client's first that the server speaks.
fn negotiate(headers: &http::HeaderMap) -> Result<&'static str> {
    let requested: Vec<String> = headers
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .collect();
    requested
        .iter()
        .find_map(|p| SUPPORTED.into_iter().find(|s| s == p))
        .ok_or_else(|| {
            Error::bad_request(format!(
                "requested protocol(s) are not supported: {requested:?}; supports {SUPPORTED:?}"
            ))
        })
}

/// Upgrades the request and serves the session.
pub(super) async fn connect(
    mut call: Call,
    sub: Subresource,
    request: SubresourceRequest<Value>,
) -> Result<Response> {
    if !matches!(call.info.verb, Verb::Get | Verb::Create) {
        return Err(Error::method_not_allowed());
    }
    let handler = sub.handler().clone();
    let channels = handler.channels(&request.options)?;
    if !(channels.stdin || channels.stdout || channels.stderr) {
        return Err(Error::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    // kube's ConnectResource: CONNECT admission with the options as the object.
    let options_object = options_object(&call, &request.options);
    super::admit::admit(
        &mut call,
        &sub,
        Operation::Connect,
        Value::Null,
        Some(options_object),
    )
    .await?;
    handler.check(&request).await?;
    let is_upgrade = call
        .parts
        .headers
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !is_upgrade {
        return Err(Error::bad_request("Upgrade request required"));
    }
    let protocol = negotiate(&call.parts.headers)?;
    let mut upgrade = WebSocketUpgrade::from_request_parts(&mut call.parts, &())
        .await
        .map_err(|e| Error::bad_request(e.to_string()))?;
    upgrade.set_selected_protocol(HeaderValue::from_static(protocol));
    let held = HeldUntilClosed::default();
    let session = Connection {
        handler,
        request,
        channels,
        v5: protocol == V5,
        shutdown: call.state.shutdown.clone(),
        held: held.clone(),
    };
    let mut response = upgrade.on_upgrade(move |ws| session.run(ws));
    response.extensions_mut().insert(held);
    Ok(response)
}

/// The options as admission sees them: `{Parent}{Subresource}Options` of the group version,
/// as kube's `PodExecOptions`.
fn options_object(call: &Call, options: &Value) -> Value {
    let info = &call.resource.storage.info;
    let mut object = options.clone();
    if let Value::Object(map) = &mut object {
        let kind = options_kind(info.kind, &call.info.subresource);
        map.insert("apiVersion".into(), json!(info.api_version()));
        map.insert("kind".into(), json!(kind));
    }
    object
}

struct Connection {
    handler: Arc<dyn crate::registry::subresource::Erased>,
    request: SubresourceRequest<Value>,
    channels: Channels,
    v5: bool,
    shutdown: ShutdownSignal,
    held: HeldUntilClosed,
}

impl Connection {
    async fn run(self, ws: WebSocket) {
        let (mut sink, mut frames) = ws.split();
        let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
        let (stdout_tx, mut stdout_rx) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
        let (stderr_tx, mut stderr_rx) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
        let (resize_tx, resize_rx) = mpsc::channel::<TerminalSize>(CHANNEL_DEPTH);
        let channels = self.channels;
        let session = Session {
            stdin: channels.stdin.then(|| Stdin::new(stdin_rx)),
            stdout: Output::new(channels.stdout.then_some(stdout_tx)),
            stderr: Output::new((channels.stderr && !channels.tty).then_some(stderr_tx)),
            resize: ResizeEvents::new(resize_rx),
            tty: channels.tty,
        };
        let v5 = self.v5;
        let mut stdin_tx = channels.stdin.then_some(stdin_tx);
        // Frames from the client: stdin, resize, v5's close of stdin. Ends when the client
        // closes or goes away.
        let reader = async move {
            while let Some(Ok(message)) = frames.next().await {
                let data = match message {
                    Message::Binary(data) => data,
                    Message::Close(_) => break,
                    _ => continue,
                };
                match data.first().copied() {
                    // The close of stdin; other channels are the server's to close.
                    Some(STREAM_CLOSE) if v5 && data.get(1) == Some(&0) => stdin_tx = None,
                    Some(0) => {
                        if let Some(tx) = &stdin_tx {
                            if tx.send(data.slice(1..)).await.is_err() {
                                stdin_tx = None;
                            }
                        }
                    }
                    Some(4) => {
                        if let Ok(size) = serde_json::from_slice::<TerminalSize>(&data[1..]) {
                            let _ = resize_tx.try_send(size);
                        }
                    }
                    _ => {}
                }
            }
        };
        let handler = self.handler.clone();
        let served = async move {
            let exit = handler.connect(self.request, session);
            // stdout and stderr to the client until the handler has ended and both are
            // drained (every `Output` dropped).
            let writer = async {
                let (mut out_open, mut err_open) = (true, true);
                while out_open || err_open {
                    let (channel, data) = tokio::select! {
                        data = stdout_rx.recv(), if out_open => match data {
                            Some(data) => (1, data),
                            None => { out_open = false; continue }
                        },
                        data = stderr_rx.recv(), if err_open => match data {
                            Some(data) => (2, data),
                            None => { err_open = false; continue }
                        },
                    };
                    if sink
                        .send(Message::Binary(frame(channel, &data)))
                        .await
                        .is_err()
                    {
                        return None;
                    }
                }
                Some(sink)
            };
            let (exit, sink) = futures::join!(exit, writer);
            let Some(mut sink) = sink else { return };
            let status = exit_status(exit);
            let status = serde_json::to_vec(&status).unwrap_or_default();
            if sink.send(Message::Binary(frame(3, &status))).await.is_ok() {
                let _ = sink.close().await;
            }
        };
        tokio::select! {
            () = served => {}
            () = reader => {}
            () = self.shutdown.cancelled() => {}
        }
        self.held.release();
    }
}

fn frame(channel: u8, data: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(data.len() + 1);
    frame.put_u8(channel);
    frame.put_slice(data);
    frame.freeze()
}

/// The `Status` the kubelet writes on the error channel (`remotecommand/exec.go`).
fn exit_status(exit: Result<ExitStatus>) -> Value {
    match exit {
        Ok(ExitStatus::Success) => json!({"metadata": {}, "status": "Success"}),
        Ok(ExitStatus::Code(code)) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Ok(ExitStatus::Failed(message)) => internal(&message),
        Err(e) => internal(&e.to_string()),
    }
}

/// kube's `NewInternalError` of `error executing command in container: …`.
fn internal(message: &str) -> Value {
    let message = format!("error executing command in container: {message}");
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("Internal error occurred: {message}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    })
}
