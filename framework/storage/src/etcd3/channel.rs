//! The gRPC channel to one etcd member: an HTTP/2 connection of hyper's, called straight from
//! the caller's task, with request bodies that say they end with their last message.
//!
//! tonic's own channel puts every call through a buffer task (tower's `Buffer`) and a balancer
//! in front of its connection: a hop to another task, and its wake-up, per call. etcd-client
//! balances nothing here (each member has a client of its own, see `members.rs`), so
//! [`Direct`] hands each request to the connection's `SendRequest` from the calling task, as
//! grpc-go's client does. Measured on a create (the book's benchmarks, the side by side's
//! thirteenth time): 420,163 → 408,063 instructions, and about a tenth less of the server's CPU
//! in the lab.
//!
//! tonic's request body learns that it ended only when it is polled once more after its
//! last message, so hyper sends every unary call (a range, a transaction) as HEADERS, DATA,
//! and then an empty DATA frame with END_STREAM, often in a write (and a TCP segment, and a
//! read on etcd's side) of its own. Looking one frame ahead ([`KnownEnd`]) lets the last DATA
//! frame carry END_STREAM itself, as grpc-go's client sends it. The bytes on the stream are
//! otherwise the same; streaming calls (watches) look ahead without waiting.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::Channel;
use http::Uri;
use http_body::{Body, Frame, SizeHint};
use hyper::client::conn::http2::{Builder, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tonic::Status;
use tower::util::BoxCloneSyncService;

/// How a member's connection is made: what tonic's endpoint would have been told.
#[derive(Clone, Debug)]
pub(super) struct Dial {
    /// How long the TCP connection and the TLS handshake may take.
    pub connect_timeout: Duration,
    /// HTTP/2 keep-alive pings (interval, timeout), sent while idle too.
    pub keep_alive: Option<(Duration, Duration)>,
    /// TLS for `https://` endpoints.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for Dial {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            keep_alive: None,
            tls: None,
        }
    }
}

/// A connection to the member could not be made: the call never left, so a write may go to
/// another member (see `members::not_sent`).
#[derive(Debug, thiserror::Error)]
#[error("connecting to {endpoint}: {reason}")]
pub(super) struct ConnectError {
    endpoint: String,
    reason: String,
}

type Sender = SendRequest<tonic::body::Body>;

/// The channel to one member: its connection, made on the first call and again after it
/// closed.
#[derive(Clone)]
pub(super) struct Direct {
    endpoint: Arc<Endpoint>,
}

struct Endpoint {
    uri: Uri,
    /// The host and port, as `TcpStream::connect` takes them.
    address: String,
    dial: Dial,
    /// The open connection's sender, if any.
    open: Mutex<Option<Sender>>,
    /// Held while a connection is made, so that callers waiting for one share it.
    connecting: tokio::sync::Mutex<()>,
}

impl Direct {
    /// The channel to `endpoint` (`http://host:port`, `https://…`; without a scheme,
    /// `http://`), as etcd-client takes a channel of its own.
    pub(super) fn channel(endpoint: &str, dial: Dial) -> Result<Channel, etcd_client::Error> {
        let with_scheme = if endpoint.contains("://") {
            endpoint.to_owned()
        } else {
            format!("http://{endpoint}")
        };
        let uri: Uri = with_scheme.parse().map_err(|e| {
            etcd_client::Error::InvalidArgs(format!("etcd endpoint {endpoint}: {e}"))
        })?;
        let authority = uri.authority().ok_or_else(|| {
            etcd_client::Error::InvalidArgs(format!("etcd endpoint {endpoint}: no host"))
        })?;
        let https = uri.scheme_str() == Some("https");
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let address = format!("{}:{port}", authority.host());
        let direct = Direct {
            endpoint: Arc::new(Endpoint {
                uri,
                address,
                dial,
                open: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
            }),
        };
        Ok(Channel::Custom(BoxCloneSyncService::new(direct)))
    }

    /// The open connection's sender, or a new connection's.
    async fn sender(&self) -> Result<Sender, ConnectError> {
        if let Some(sender) = self.open() {
            return Ok(sender);
        }
        let _connecting = self.endpoint.connecting.lock().await;
        // Made by the caller this one waited for.
        if let Some(sender) = self.open() {
            return Ok(sender);
        }
        let endpoint = &self.endpoint;
        let sender = tokio::time::timeout(endpoint.dial.connect_timeout, self.connect())
            .await
            .unwrap_or_else(|_| Err("timed out".into()))
            .map_err(|reason| ConnectError {
                endpoint: endpoint.uri.to_string(),
                reason,
            })?;
        *endpoint.open.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender.clone());
        Ok(sender)
    }

    fn open(&self) -> Option<Sender> {
        let open = self
            .endpoint
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        open.as_ref().filter(|s| !s.is_closed()).cloned()
    }

    /// A TCP connection (and TLS for `https://`), and HTTP/2 over it.
    async fn connect(&self) -> Result<Sender, String> {
        let endpoint = &self.endpoint;
        let tcp = tokio::net::TcpStream::connect(&endpoint.address)
            .await
            .map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut http2 = Builder::new(TokioExecutor::new());
        http2.timer(TokioTimer::new());
        if let Some((interval, timeout)) = endpoint.dial.keep_alive {
            http2
                .keep_alive_interval(interval)
                .keep_alive_timeout(timeout)
                .keep_alive_while_idle(true);
        }
        if endpoint.uri.scheme_str() != Some("https") {
            return self.handshake(&http2, tcp).await;
        }
        let tls = endpoint
            .dial
            .tls
            .clone()
            .ok_or("https:// needs the CA that signed etcd's certificate")?;
        let host = endpoint.uri.host().unwrap_or_default();
        let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']))
            .map_err(|e| e.to_string())?
            .to_owned();
        let tls = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        self.handshake(&http2, tls).await
    }

    /// HTTP/2 over `io`, its connection driven by a task of its own until it closes.
    async fn handshake<I>(&self, http2: &Builder<TokioExecutor>, io: I) -> Result<Sender, String>
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, connection) = http2
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| e.to_string())?;
        let uri = self.endpoint.uri.clone();
        tokio::spawn(async move {
            // The next call sees the sender closed and connects again.
            if let Err(error) = connection.await {
                tracing::debug!(endpoint = %uri, %error, "etcd connection closed");
            }
        });
        Ok(sender)
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Direct {
    type Response = http::Response<tonic::body::Body>;
    type Error = tower::BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The connection is made (or found closed) by the call itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let mut sender = this.sender().await?;
            // tonic's clients send the path alone; the connection wants the origin too.
            let (mut parts, body) = request.into_parts();
            let mut uri = http::uri::Parts::default();
            uri.scheme = this.endpoint.uri.scheme().cloned();
            uri.authority = this.endpoint.uri.authority().cloned();
            uri.path_and_query = parts.uri.path_and_query().cloned();
            parts.uri = Uri::from_parts(uri)?;
            let body = tonic::body::Body::new(KnownEnd::new(body));
            sender.ready().await?;
            let response = sender
                .send_request(http::Request::from_parts(parts, body))
                .await?;
            Ok(response.map(tonic::body::Body::new))
        })
    }
}

/// A request body that reads one frame ahead after each DATA frame, so that
/// [`Body::is_end_stream`] is true as the last one is handed out.
pub(super) struct KnownEnd<B> {
    inner: B,
    /// A frame (or error) read ahead, handed out next.
    ahead: Option<Result<Frame<Bytes>, Status>>,
    /// The inner body has no more frames.
    ended: bool,
}

impl<B> KnownEnd<B> {
    pub(super) fn new(inner: B) -> Self {
        Self {
            inner,
            ahead: None,
            ended: false,
        }
    }
}

impl<B> KnownEnd<B>
where
    B: Body<Data = Bytes, Error = Status> + Unpin,
{
    /// Hands out `frame`; after a DATA frame, first polls the inner body once more, without
    /// waiting: its end (or its next frame) is known now if it is ready.
    fn hand_out(&mut self, frame: Frame<Bytes>, cx: &mut Context<'_>) -> Frame<Bytes> {
        if frame.is_data() {
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(None) => self.ended = true,
                Poll::Ready(Some(next)) => self.ahead = Some(next),
                Poll::Pending => {}
            }
        }
        frame
    }
}

impl<B> Body for KnownEnd<B>
where
    B: Body<Data = Bytes, Error = Status> + Unpin,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        let next = match this.ahead.take() {
            Some(next) => Some(next),
            None if this.ended => None,
            None => ready!(Pin::new(&mut this.inner).poll_frame(cx)),
        };
        Poll::Ready(match next {
            None => {
                this.ended = true;
                None
            }
            Some(Ok(frame)) => Some(Ok(this.hand_out(frame, cx))),
            Some(Err(error)) => Some(Err(error)),
        })
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_none() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match self.ahead {
            None if self.ended => SizeHint::with_exact(0),
            None => self.inner.size_hint(),
            Some(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use http_body_util::BodyExt;

    use super::*;

    /// A body handing out `frames`, answering `Pending` (and waking at once) where a frame
    /// is `None`, and learning its end only when polled after the last, as tonic's.
    struct Frames(VecDeque<Option<Bytes>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = Status;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            match self.0.pop_front() {
                None => Poll::Ready(None),
                Some(Some(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
                Some(None) => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            }
        }
    }

    /// Each frame, with whether the body said it ended right after handing it out.
    async fn read(body: Frames) -> Vec<(Bytes, bool)> {
        let mut body = KnownEnd::new(body);
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            frames.push((data, body.is_end_stream()));
        }
        assert!(body.is_end_stream());
        frames
    }

    #[tokio::test]
    async fn a_unary_body_ends_with_its_message() {
        let unary = Frames(VecDeque::from([Some(Bytes::from_static(b"txn"))]));
        assert_eq!(read(unary).await, [(Bytes::from_static(b"txn"), true)]);
    }

    #[tokio::test]
    async fn a_stream_hands_out_every_frame_in_order() {
        let (a, b, c) = (
            Bytes::from_static(b"a"),
            Bytes::from_static(b"b"),
            Bytes::from_static(b"c"),
        );
        let stream = Frames(VecDeque::from([
            Some(a.clone()),
            Some(b.clone()),
            None,
            Some(c.clone()),
            None,
        ]));
        // `b` was followed by a wait, so its end was not known; `c`'s was not either (the
        // wait after it), and the end came alone.
        assert_eq!(read(stream).await, [(a, false), (b, false), (c, false)]);
    }

    #[tokio::test]
    async fn an_empty_body_ends_at_once() {
        let mut body = KnownEnd::new(Frames(VecDeque::new()));
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
    }
}
