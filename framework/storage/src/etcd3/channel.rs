//! The gRPC channel to one etcd member: an HTTP/2 connection of h2's, called straight from
//! the caller's task, with request bodies that say they end with their last message.
//!
//! tonic's own channel puts every call through a buffer task (tower's `Buffer`) and a balancer
//! in front of its connection: a hop to another task, and its wake-up, per call. etcd-client
//! balances nothing here (each member has a client of its own, see `members.rs`), so
//! [`Direct`] sends each request on the connection from the calling task, as grpc-go's client
//! does. Measured on a create (the book's benchmarks, the side by side's thirteenth time):
//! 420,163 → 408,063 instructions, and about a tenth less of the server's CPU in the lab.
//!
//! hyper's HTTP/2 client, which carried the calls at first, spawns two tasks for each of
//! them: one that awaits the response and hands it over through a channel, and one that
//! sends the request body whenever its stream has no send window reserved yet (each unary
//! call's). The calling task here sends the body itself and awaits the response from h2
//! directly: the connection's task wakes it when the response comes, with no task between.
//! Only a body that must wait for more (a watch's requests) is sent on from a task of its
//! own. Keep-alive pings are the connection task's, as hyper's were: one goes out when
//! nothing was heard from the member for a while, and a member that does not answer it has
//! its connection closed, failing its calls with that reason (see [`Link`]).
//!
//! tonic's request body learns that it ended only when it is polled once more after its
//! last message, so a plain pipe sends every unary call (a range, a transaction) as HEADERS,
//! DATA, and then an empty DATA frame with END_STREAM, often in a write (and a TCP segment,
//! and a read on etcd's side) of its own. Looking one frame ahead ([`KnownEnd`]) lets the
//! last DATA frame carry END_STREAM itself, as grpc-go's client sends it. The bytes on the
//! stream are otherwise the same; streaming calls (watches) look ahead without waiting.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::Channel;
use h2::client::SendRequest;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, Uri};
use http_body::{Body, Frame, SizeHint};
use tonic::Status;
use tower::util::BoxCloneSyncService;

/// How a member's connection is made: what tonic's endpoint would have been told.
#[derive(Clone, Debug)]
pub(super) struct Dial {
    /// How long the TCP connection and the TLS handshake may take.
    pub connect_timeout: Duration,
    /// HTTP/2 keep-alive pings (interval, timeout): a ping goes out once nothing was heard
    /// from the member for an interval, whether calls are open or not.
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

/// The HTTP/2 settings of a member's connection: hyper's client defaults, which the
/// connection had while hyper made it.
mod settings {
    /// Each stream's receive window (hyper's `DEFAULT_STREAM_WINDOW`).
    pub(super) const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
    /// The connection's receive window (`DEFAULT_CONN_WINDOW`).
    pub(super) const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
    /// The largest frame received (`DEFAULT_MAX_FRAME_SIZE`).
    pub(super) const MAX_FRAME: u32 = 16 * 1024;
    /// The largest header list received (`DEFAULT_MAX_HEADER_LIST_SIZE`).
    pub(super) const MAX_HEADER_LIST: u32 = 16 * 1024;
    /// What a stream may buffer to send (`DEFAULT_MAX_SEND_BUF_SIZE`).
    pub(super) const MAX_SEND_BUFFER: usize = 1024 * 1024;
    /// Streams opened before the server's settings say how many it takes
    /// (`DEFAULT_INITIAL_MAX_SEND_STREAMS`).
    pub(super) const INITIAL_MAX_SEND_STREAMS: usize = 100;
}

/// An open connection: its sender, and what its calls share with the task driving it.
#[derive(Clone)]
struct Open {
    sender: SendRequest<Bytes>,
    link: Arc<Link>,
}

/// What the calls on one connection and the task driving it tell each other.
#[derive(Default)]
struct Link {
    /// Something was read from the member since the keep-alive last looked: no ping needed.
    heard: AtomicBool,
    /// Set as the connection's task ends (the next call connects again): why the connection
    /// was given up, when the member was not the one to close it.
    ended: OnceLock<Option<Lost>>,
}

impl Link {
    /// Notes that the member answered something.
    fn hear(&self) {
        // Read first: most frames find it already set, and a store would take the cache
        // line from the keep-alive's core each time.
        if !self.heard.load(Ordering::Relaxed) {
            self.heard.store(true, Ordering::Relaxed);
        }
    }

    fn closed(&self) -> bool {
        self.ended.get().is_some()
    }

    /// `error`, or why the connection was given up when that is what ended the call: h2
    /// fails the streams of a dropped connection as a "broken pipe".
    fn explain(&self, error: h2::Error) -> tower::BoxError {
        match self.ended.get() {
            Some(Some(lost)) => Box::new(lost.clone()),
            _ => Box::new(error),
        }
    }
}

/// A connection given up because the member stopped answering its keep-alive pings.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{endpoint} {why}; its connection was closed")]
struct Lost {
    endpoint: String,
    why: String,
}

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
    /// The open connection, if any.
    open: Mutex<Option<Open>>,
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
        Ok(Channel::Custom(BoxCloneSyncService::new(Direct::new(
            uri, address, dial,
        ))))
    }

    fn new(uri: Uri, address: String, dial: Dial) -> Self {
        Direct {
            endpoint: Arc::new(Endpoint {
                uri,
                address,
                dial,
                open: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The open connection, or a new one.
    async fn sender(&self) -> Result<Open, ConnectError> {
        if let Some(open) = self.open() {
            return Ok(open);
        }
        let _connecting = self.endpoint.connecting.lock().await;
        // Made by the caller this one waited for.
        if let Some(open) = self.open() {
            return Ok(open);
        }
        let endpoint = &self.endpoint;
        let open = tokio::time::timeout(endpoint.dial.connect_timeout, self.connect())
            .await
            .unwrap_or_else(|_| Err("timed out".into()))
            .map_err(|reason| ConnectError {
                endpoint: endpoint.uri.to_string(),
                reason,
            })?;
        *endpoint.open.lock().unwrap_or_else(PoisonError::into_inner) = Some(open.clone());
        Ok(open)
    }

    /// The open connection, unless its task has ended.
    fn open(&self) -> Option<Open> {
        let open = self
            .endpoint
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        open.as_ref().filter(|open| !open.link.closed()).cloned()
    }

    /// A TCP connection (and TLS for `https://`), and HTTP/2 over it.
    async fn connect(&self) -> Result<Open, String> {
        let endpoint = &self.endpoint;
        let tcp = tokio::net::TcpStream::connect(&endpoint.address)
            .await
            .map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        if endpoint.uri.scheme_str() != Some("https") {
            return self.handshake(tcp).await;
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
        self.handshake(tls).await
    }

    /// HTTP/2 over `io`, its connection driven by a task of its own (which also sends the
    /// keep-alive pings) until it closes.
    async fn handshake<I>(&self, io: I) -> Result<Open, String>
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let mut http2 = h2::client::Builder::new();
        http2
            .initial_window_size(settings::STREAM_WINDOW)
            .initial_connection_window_size(settings::CONNECTION_WINDOW)
            .max_frame_size(settings::MAX_FRAME)
            .max_header_list_size(settings::MAX_HEADER_LIST)
            .max_send_buffer_size(settings::MAX_SEND_BUFFER)
            .initial_max_send_streams(settings::INITIAL_MAX_SEND_STREAMS)
            .enable_push(false);
        let (sender, mut connection) = http2
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| e.to_string())?;
        let pings = connection.ping_pong();
        let keep_alive = self.endpoint.dial.keep_alive;
        let link = Arc::new(Link::default());
        let (uri, shared) = (self.endpoint.uri.clone(), link.clone());
        tokio::spawn(async move {
            let outcome = match (keep_alive, pings) {
                (Some((interval, timeout)), Some(pings)) => tokio::select! {
                    done = &mut connection => done.map_err(|e| e.to_string()).err(),
                    why = keep_pinging(pings, &shared, interval, timeout) => {
                        let lost = Lost { endpoint: uri.to_string(), why };
                        let text = lost.to_string();
                        // Before the connection is dropped (below), which fails its calls:
                        // they tell why.
                        let _ = shared.ended.set(Some(lost));
                        Some(text)
                    }
                },
                _ => (&mut connection).await.map_err(|e| e.to_string()).err(),
            };
            // The next call sees the connection closed and connects again.
            let _ = shared.ended.set(None);
            drop(connection);
            if let Some(error) = outcome {
                tracing::debug!(endpoint = %uri, %error, "etcd connection closed");
            }
        });
        Ok(Open { sender, link })
    }
}

/// Pings the member once nothing was heard from it for an `interval` (so the last word was
/// between one and two intervals ago), whether calls are open or not, as grpc-go's and
/// hyper's keep-alive do; returns why the connection is taken for lost: a pong not back
/// within `timeout`.
async fn keep_pinging(
    mut pings: h2::PingPong,
    link: &Link,
    interval: Duration,
    timeout: Duration,
) -> String {
    loop {
        tokio::time::sleep(interval).await;
        if link.heard.swap(false, Ordering::Relaxed) {
            continue;
        }
        match tokio::time::timeout(timeout, pings.ping(h2::Ping::opaque())).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => return format!("failed a keep-alive ping: {error}"),
            Err(_) => return format!("did not answer a keep-alive ping within {timeout:?}"),
        }
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
            let Open { sender, link } = this.sender().await?;
            // tonic's clients send the path alone; the connection wants the origin too.
            let (mut parts, body) = request.into_parts();
            let mut uri = http::uri::Parts::default();
            uri.scheme = this.endpoint.uri.scheme().cloned();
            uri.authority = this.endpoint.uri.authority().cloned();
            uri.path_and_query = parts.uri.path_and_query().cloned();
            parts.uri = Uri::from_parts(uri)?;
            let body = KnownEnd::new(body);
            let mut sender = sender.ready().await?;
            let (response, stream) =
                sender.send_request(http::Request::from_parts(parts, ()), false)?;
            let mut pump = Pump { body, stream };
            // The frames ready now (a unary call's message, a watch's first request) are
            // sent from here; a body that must wait for more is sent on from a task.
            match poll_fn(|cx| Poll::Ready(pump.poll_send(cx))).await {
                Poll::Ready(Ok(())) => {}
                // The response says what became of the call: a member may answer one it
                // reset before reading all of it (a gRPC error), as hyper's pipe left it.
                Poll::Ready(Err(error)) => {
                    tracing::debug!(%error, "etcd request not sent whole");
                }
                Poll::Pending => {
                    tokio::spawn(async move {
                        if let Err(error) = poll_fn(|cx| pump.poll_send(cx)).await {
                            tracing::debug!(%error, "etcd request stream ended");
                        }
                    });
                }
            }
            let response = response.await.map_err(|error| link.explain(error))?;
            link.hear();
            Ok(response.map(|recv| tonic::body::Body::new(Incoming::new(recv, link))))
        })
    }
}

/// A request body being sent on its stream.
struct Pump<B> {
    body: KnownEnd<B>,
    stream: SendStream<Bytes>,
}

impl<B> Pump<B>
where
    B: Body<Data = Bytes, Error = Status> + Unpin,
{
    /// Sends the frames the body has ready, the last with END_STREAM; `Pending` when it
    /// must wait for more. h2 holds what the stream's window does not take yet.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), tower::BoxError>> {
        loop {
            // The member reset the stream: nothing more to send.
            if let Poll::Ready(reset) = self.stream.poll_reset(cx) {
                return Poll::Ready(match reset {
                    Ok(reason) => Err(h2::Error::from(reason).into()),
                    Err(error) => Err(error.into()),
                });
            }
            let Some(frame) = ready!(Pin::new(&mut self.body).poll_frame(cx)) else {
                self.stream.send_data(Bytes::new(), true)?;
                return Poll::Ready(Ok(()));
            };
            let frame = match frame {
                Ok(frame) => frame,
                Err(status) => {
                    self.stream.send_reset(Reason::CANCEL);
                    return Poll::Ready(Err(status.into()));
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    let end = self.body.is_end_stream();
                    self.stream.send_data(data, end)?;
                    if end {
                        return Poll::Ready(Ok(()));
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        self.stream.send_trailers(trailers)?;
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
    }
}

/// A response body: the stream's DATA frames (their window given back as they are read),
/// then its trailers (a gRPC call's status).
struct Incoming {
    recv: RecvStream,
    /// The connection's: each frame read is word from the member.
    link: Arc<Link>,
    /// The DATA frames are all read.
    data_read: bool,
    /// The trailers are read as well.
    done: bool,
}

impl Incoming {
    fn new(recv: RecvStream, link: Arc<Link>) -> Self {
        Self {
            recv,
            link,
            data_read: false,
            done: false,
        }
    }
}

impl Body for Incoming {
    type Data = Bytes;
    type Error = tower::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tower::BoxError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if !this.data_read {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    this.link.hear();
                    // The window is given back as the data is read, as hyper's body does.
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                // A reset without an error after the whole response is its end (hyper's
                // reading too).
                Some(Err(error)) if error.reason() == Some(Reason::NO_ERROR) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Some(Err(error)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(this.link.explain(error))));
                }
                None => this.data_read = true,
            }
        }
        let trailers: Result<Option<HeaderMap>, h2::Error> = ready!(this.recv.poll_trailers(cx));
        this.done = true;
        Poll::Ready(match trailers {
            Ok(Some(trailers)) => Some(Ok(Frame::trailers(trailers))),
            Ok(None) => None,
            Err(error) if error.reason() == Some(Reason::NO_ERROR) => None,
            Err(error) => Some(Err(this.link.explain(error))),
        })
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.recv.is_end_stream()
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

    /// A member's side of one connection: answers the first call with `reply` and an OK
    /// status, and returns the call's path and its request frames, each with whether the
    /// stream ended with it.
    async fn answer_one_call(
        tcp: tokio::net::TcpStream,
        reply: &'static [u8],
    ) -> (String, Vec<(Bytes, bool)>) {
        let mut connection = h2::server::handshake(tcp).await.unwrap();
        let (request, mut respond) = connection.accept().await.unwrap().unwrap();
        // The connection is driven meanwhile (its frames read, the response written).
        tokio::spawn(async move { while connection.accept().await.is_some() {} });
        let (parts, mut body) = request.into_parts();
        let mut frames = Vec::new();
        while let Some(data) = body.data().await {
            let data = data.unwrap();
            let _ = body.flow_control().release_capacity(data.len());
            frames.push((data, body.is_end_stream()));
        }
        let mut stream = respond
            .send_response(http::Response::new(()), false)
            .unwrap();
        stream.send_data(Bytes::from_static(reply), false).unwrap();
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        stream.send_trailers(trailers).unwrap();
        (parts.uri.path().to_owned(), frames)
    }

    fn direct(address: std::net::SocketAddr, dial: Dial) -> Direct {
        let uri: Uri = format!("http://{address}").parse().unwrap();
        Direct::new(uri, address.to_string(), dial)
    }

    fn unary(path: &str, message: &'static [u8]) -> http::Request<tonic::body::Body> {
        let body = http_body_util::Full::new(Bytes::from_static(message));
        http::Request::post(path)
            .body(tonic::body::Body::new(body))
            .unwrap()
    }

    /// Reads a response: its DATA, and its trailers.
    async fn response(response: http::Response<tonic::body::Body>) -> (Bytes, HeaderMap) {
        let collected = response.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap_or_default();
        (collected.to_bytes(), trailers)
    }

    #[tokio::test]
    async fn a_unary_call_is_one_message_ended_with_it_and_its_answer_with_trailers() {
        use tower::Service;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let member = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            answer_one_call(tcp, b"reply").await
        });
        let mut channel = direct(address, Dial::default());
        let answer = channel
            .call(unary("/etcdserverpb.KV/Range", b"range"))
            .await
            .unwrap();
        let (data, trailers) = response(answer).await;
        assert_eq!(data, Bytes::from_static(b"reply"));
        assert_eq!(trailers["grpc-status"], "0");
        let (path, frames) = member.await.unwrap();
        assert_eq!(path, "/etcdserverpb.KV/Range");
        // The message's DATA frame carried END_STREAM: no empty frame after it.
        assert_eq!(frames, [(Bytes::from_static(b"range"), true)]);
    }

    #[tokio::test]
    async fn a_member_that_answers_no_ping_is_dropped_and_dialed_again() {
        use tower::Service;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (hung, hang) = tokio::sync::oneshot::channel();
        let member = tokio::spawn(async move {
            // The first connection is taken and its preface read, and then it is left
            // alone: no frame of it is read again, no ping answered.
            let (tcp, _) = listener.accept().await.unwrap();
            let first = h2::server::handshake(tcp).await.unwrap();
            hung.send(()).unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            let answered = answer_one_call(tcp, b"again").await;
            drop(first);
            answered
        });
        let keep_alive = Some((Duration::from_millis(50), Duration::from_millis(100)));
        let mut channel = direct(
            address,
            Dial {
                keep_alive,
                ..Dial::default()
            },
        );
        channel.sender().await.unwrap();
        hang.await.unwrap();
        assert!(channel.open().is_some());
        // A call on the hung connection fails when the ping goes unanswered, saying so.
        let error = channel
            .call(unary("/etcdserverpb.KV/Range", b"range"))
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "http://{address}/ did not answer a keep-alive ping within 100ms; \
                 its connection was closed"
            )
        );
        assert!(channel.open().is_none(), "the hung connection is closed");
        let answer = channel
            .call(unary("/etcdserverpb.KV/Range", b"range"))
            .await
            .unwrap();
        assert_eq!(response(answer).await.0, Bytes::from_static(b"again"));
        member.await.unwrap();
    }

    #[tokio::test]
    async fn an_empty_body_ends_at_once() {
        let mut body = KnownEnd::new(Frames(VecDeque::new()));
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
    }
}
