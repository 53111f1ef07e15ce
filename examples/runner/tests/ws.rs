//! A WebSocket client of the channel.k8s.io subprotocols for the tests, over kube-rs's
//! connection (its TLS and credentials), offering exactly the subprotocol a test names:
//! kube-rs's own `connect` always offers v5 then v4.

use futures::{SinkExt as _, StreamExt as _};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{Message, protocol::Role};

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
/// v5's close signal: `[255, channel]`.
pub const CLOSE: u8 = 255;

pub struct Channels {
    pub protocol: String,
    stream: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
}

/// What a connection received until the server closed it.
#[derive(Debug, Default)]
pub struct Received {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub error: Vec<u8>,
}

impl Received {
    pub fn status(&self) -> serde_json::Value {
        serde_json::from_slice(&self.error).expect("a Status on the error channel")
    }
}

/// Opens `path` (with its query) offering `protocol`; the server's answer when it refuses.
pub async fn connect(
    client: &kube::Client,
    path: &str,
    protocol: &str,
) -> Result<Channels, http::Response<kube::client::Body>> {
    let key = tokio_tungstenite::tungstenite::handshake::client::generate_key();
    let request = http::Request::get(path)
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::SEC_WEBSOCKET_VERSION, "13")
        .header(http::header::SEC_WEBSOCKET_KEY, key)
        .header(http::header::SEC_WEBSOCKET_PROTOCOL, protocol)
        .body(kube::client::Body::empty())
        .unwrap();
    let response = client.send(request).await.expect("the request is sent");
    if response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        return Err(response);
    }
    let protocol = response.headers()[http::header::SEC_WEBSOCKET_PROTOCOL]
        .to_str()
        .unwrap()
        .to_string();
    let upgraded = hyper::upgrade::on(response).await.expect("upgraded");
    let stream = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;
    Ok(Channels { protocol, stream })
}

impl Channels {
    pub async fn send(&mut self, channel: u8, data: &[u8]) {
        let mut frame = vec![channel];
        frame.extend_from_slice(data);
        self.stream.send(Message::binary(frame)).await.unwrap();
    }

    /// v5: no more stdin.
    pub async fn close_stdin(&mut self) {
        self.stream
            .send(Message::binary(vec![CLOSE, STDIN]))
            .await
            .unwrap();
    }

    /// The next data frame: its channel and bytes (empty frames, which open a channel, are
    /// skipped); `None` once the server closed the connection.
    pub async fn next(&mut self) -> Option<(u8, Vec<u8>)> {
        while let Some(message) = self.stream.next().await {
            match message.ok()? {
                Message::Binary(data) if data.len() > 1 => {
                    return Some((data[0], data[1..].to_vec()));
                }
                Message::Close(_) => return None,
                _ => {}
            }
        }
        None
    }

    /// Reads until stdout holds `expected` (bounded by the server closing).
    pub async fn read_stdout_until(&mut self, expected: &[u8], into: &mut Received) {
        while !into.stdout.windows(expected.len()).any(|w| w == expected) {
            let Some((channel, data)) = self.next().await else {
                panic!("closed before {expected:?}: {into:?}");
            };
            into.take(channel, data);
        }
    }

    /// Everything until the server closes.
    pub async fn read_to_end(mut self, mut into: Received) -> Received {
        while let Some((channel, data)) = self.next().await {
            into.take(channel, data);
        }
        into
    }
}

impl Received {
    fn take(&mut self, channel: u8, data: Vec<u8>) {
        match channel {
            STDOUT => self.stdout.extend(data),
            STDERR => self.stderr.extend(data),
            ERROR => self.error.extend(data),
            other => panic!("data on channel {other}"),
        }
    }
}
