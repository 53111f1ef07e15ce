//! The channels of an upgraded connection as a [`Connecter`](super::Connecter) sees them:
//! byte streams and sinks, resize events and the exit status, never WebSocket frames.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::error::{Error, Result};

/// Which channels a connection has, from its options (kube's `stdin`, `stdout`, `stderr` and
/// `tty` parameters of `PodExecOptions` / `PodAttachOptions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Channels {
    /// The client sends stdin.
    pub stdin: bool,
    /// The client reads stdout.
    pub stdout: bool,
    /// The client reads stderr (never with a TTY, as in kube).
    pub stderr: bool,
    /// A terminal: resize events come on channel 4.
    pub tty: bool,
}

impl Default for Channels {
    /// stdout and stderr.
    fn default() -> Self {
        Self {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
        }
    }
}

/// A terminal's size, as the resize channel carries it (kube's `remotecommand.TerminalSize`,
/// `{"Width":80,"Height":24}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    /// Columns.
    #[serde(rename = "Width")]
    pub width: u16,
    /// Rows.
    #[serde(rename = "Height")]
    pub height: u16,
}

/// How a session ended, reported on the error channel as the kubelet does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exit code 0: a `Status` with `status: Success`.
    Success,
    /// A non-zero exit code: `Failure`, reason `NonZeroExitCode`, a cause `ExitCode` with the
    /// code as its message.
    Code(i32),
    /// Another failure: `Failure` with this message (reason `InternalError`).
    Failed(String),
}

/// The client's stdin: chunks as they arrive, ending at the client's close of the channel
/// (v5) or of the connection.
#[derive(Debug)]
pub struct Stdin {
    rx: mpsc::Receiver<Bytes>,
}

impl Stdin {
    pub(crate) fn new(rx: mpsc::Receiver<Bytes>) -> Self {
        Self { rx }
    }

    /// The next chunk; `None` at the end.
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.rx.recv().await
    }
}

impl Stream for Stdin {
    type Item = Bytes;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.rx.poll_recv(cx)
    }
}

/// stdout or stderr: what is written goes to the client in order. Bounded: a write waits
/// while the client is slow to read.
#[derive(Clone, Debug)]
pub struct Output {
    tx: Option<mpsc::Sender<Bytes>>,
}

impl Output {
    pub(crate) fn new(tx: Option<mpsc::Sender<Bytes>>) -> Self {
        Self { tx }
    }

    /// Whether the client asked for this channel; writes to a channel it did not ask for
    /// are dropped.
    pub fn is_open(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    /// Writes `data` to the client. An error when the client has gone away.
    pub async fn write(&self, data: impl Into<Bytes>) -> Result<()> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let data = data.into();
        if data.is_empty() {
            return Ok(());
        }
        tx.send(data)
            .await
            .map_err(|_| Error::internal("the client has gone away"))
    }
}

/// Resize events of a TTY session, in order.
#[derive(Debug)]
pub struct ResizeEvents {
    rx: mpsc::Receiver<TerminalSize>,
}

impl ResizeEvents {
    pub(crate) fn new(rx: mpsc::Receiver<TerminalSize>) -> Self {
        Self { rx }
    }

    /// The next size; `None` when the client can send no more.
    pub async fn recv(&mut self) -> Option<TerminalSize> {
        self.rx.recv().await
    }
}

impl Stream for ResizeEvents {
    type Item = TerminalSize;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TerminalSize>> {
        self.rx.poll_recv(cx)
    }
}

/// The channels of one connection.
#[derive(Debug)]
pub struct Session {
    /// stdin, when the client asked for it.
    pub stdin: Option<Stdin>,
    /// stdout.
    pub stdout: Output,
    /// stderr.
    pub stderr: Output,
    /// Terminal size changes (only with a TTY; otherwise it never yields).
    pub resize: ResizeEvents,
    /// Whether the client asked for a TTY.
    pub tty: bool,
}
