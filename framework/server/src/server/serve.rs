//! The secure port's accept loop, the first stage of every request: TCP accept, TLS handshake,
//! HTTP/1.1 or HTTP/2 by hyper, connection facts put in the request extensions, then the
//! router (with its filter layers). Also graceful shutdown, which long-running handlers observe.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::idle::{Activity, IdleTimeouts, TrackedBody, TrackedIo};
use super::write_batch::{self, Batched};
use crate::filters::goaway::ConnectionGoaway;
use crate::lifecycle::ShutdownSignal;
use crate::tls::PeerCertificates;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tower::ServiceExt as _;

/// Tuning of [`serve_tls_with`].
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long in-flight requests may take to finish after shutdown starts; connections
    /// still open then are closed.
    pub grace_period: Duration,
    /// Bound on the TLS handshake, so idle or stalled sockets do not pile up.
    pub handshake_timeout: Duration,
    /// HTTP/2 streams allowed at once per connection (`--http2-max-streams-per-connection`;
    /// 1000 by default, as `k8s.io/apiserver` recommends for aggregated servers, whose
    /// aggregator multiplexes many users' requests and watches over one connection).
    pub max_concurrent_streams: u32,
    /// How long a connection may stay without a request in flight (`--http-idle-timeout`):
    /// an HTTP/1.1 connection between requests, an HTTP/2 connection without streams (closed
    /// with a GOAWAY). 90 s, as kube-apiserver sets Go's `IdleTimeout`; zero: never closed.
    pub idle_timeout: Duration,
    /// How long an HTTP/1.1 client may take to send a request's header, from the connection's
    /// start or the first byte of the request (`--http-read-header-timeout`). 32 s, as
    /// kube-apiserver sets Go's `ReadHeaderTimeout`; zero: no limit.
    pub read_header_timeout: Duration,
    /// The most bytes of request line and header fields accepted: Go's `MaxHeaderBytes`,
    /// 1 MiB in kube-apiserver; HTTP/2 advertises it as its header list size.
    pub max_header_bytes: usize,
    /// The signal given to handlers; triggering it shuts the server down as well.
    pub signal: ShutdownSignal,
    /// Whether requests may ask for their HTTP/2 connection's GOAWAY (`--goaway-chance`
    /// above 0). Off, no connection carries the handle, so no request pays for it.
    pub goaway: bool,
}

/// `idle_timeout`'s default: kube-apiserver's `IdleTimeout` (Go's and x/net/http2's), which
/// matches `http.DefaultTransport`'s keep-alive so clients, not the server, close first.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// `read_header_timeout`'s default: kube-apiserver's `ReadHeaderTimeout`.
pub const DEFAULT_READ_HEADER_TIMEOUT: Duration = Duration::from_secs(32);

/// `max_header_bytes`' default: kube-apiserver's `MaxHeaderBytes` (Go's
/// `http.DefaultMaxHeaderBytes`).
pub const DEFAULT_MAX_HEADER_BYTES: usize = 1 << 20;

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            grace_period: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            max_concurrent_streams: 1000,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            read_header_timeout: DEFAULT_READ_HEADER_TIMEOUT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            signal: ShutdownSignal::new(),
            goaway: false,
        }
    }
}

/// Serves `router` over TLS on `listener` until `shutdown` resolves, with default
/// [`ServeOptions`]; then drains in-flight requests for up to 30 s.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: axum::Router,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    serve_tls_with(listener, tls, router, shutdown, ServeOptions::default()).await
}

/// Serves `router` over TLS on `listener` until `shutdown` resolves or `options.signal` is
/// triggered: stops accepting, triggers the signal, asks every connection to close after its
/// current requests (HTTP/2 GOAWAY), and closes what is left after the grace period.
///
/// Handshake failures, plain-HTTP clients and garbage only affect their own connection. A
/// connection without a request in flight for `idle_timeout`, or whose HTTP/1.1 request
/// header takes longer than `read_header_timeout`, is closed, as Go's server closes it.
pub async fn serve_tls_with(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: axum::Router,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> io::Result<()> {
    let ctx = Arc::new(ConnContext {
        acceptor: TlsAcceptor::from(tls),
        http1: http1_builder(&options),
        http2: http2_builder(&options),
        router,
        signal: options.signal.clone(),
        handshake_timeout: options.handshake_timeout,
        goaway: options.goaway,
        timeouts: IdleTimeouts {
            idle: options.idle_timeout,
            read_header: options.read_header_timeout,
        },
    });
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = options.signal.cancelled() => break,
            accepted = listener.accept() => on_accept(accepted, &ctx, &mut conns).await,
            // Reap finished connections so the set does not grow without bound.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    options.signal.trigger();
    drain(conns, options.grace_period).await;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C): the `shutdown` future for a real server.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = interrupt => tracing::info!("received SIGINT, shutting down"),
        _ = terminate() => tracing::info!("received SIGTERM, shutting down"),
    }
}

#[cfg(unix)]
async fn terminate() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            term.recv().await;
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM");
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(not(unix))]
async fn terminate() {
    std::future::pending::<()>().await;
}

/// What every connection task needs, shared once rather than cloned field by field.
struct ConnContext {
    acceptor: TlsAcceptor,
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    router: axum::Router,
    signal: ShutdownSignal,
    handshake_timeout: Duration,
    /// [`ServeOptions::goaway`].
    goaway: bool,
    timeouts: IdleTimeouts,
}

/// Header fields of one HTTP/1.1 request, at most. Go counts only bytes
/// (`max_header_bytes`); hyper needs a count too, and its header map holds no more than
/// 24,576 fields. 300 `X-Remote-Group` lines of a user with many groups fit with room.
const MAX_HTTP1_HEADER_FIELDS: usize = 16_384;

/// What x/net/http2 adds to `MaxHeaderBytes` for the header list size it advertises
/// (`adjustHTTP1MaxHeaderSize`: ten typical fields' HPACK overhead of 32 bytes).
const HTTP2_HEADER_LIST_OVERHEAD: usize = 10 * 32;

/// What Go's HTTP/1 server reads past `MaxHeaderBytes` before it refuses a header (its
/// `bufio` slop).
const HTTP1_HEADER_SLOP: usize = 4096;

fn http1_builder(options: &ServeOptions) -> http1::Builder {
    // The header read timeout is the idle watchdog's (`idle.rs`), which, as Go, lets a
    // keep-alive connection wait `idle_timeout` for its next request; hyper's would start
    // the header's clock right after the previous response.
    let header_bytes = options
        .max_header_bytes
        .saturating_add(HTTP1_HEADER_SLOP)
        .max(MIN_HTTP1_BUFFER);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_headers(MAX_HTTP1_HEADER_FIELDS)
        .max_header_size(header_bytes)
        .max_buf_size(header_bytes);
    builder
}

fn http2_builder(options: &ServeOptions) -> http2::Builder<TokioExecutor> {
    let header_list = options
        .max_header_bytes
        .saturating_add(HTTP2_HEADER_LIST_OVERHEAD);
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_concurrent_streams)
        .max_header_list_size(u32::try_from(header_list).unwrap_or(u32::MAX));
    builder
}

/// hyper's smallest HTTP/1 read buffer (it panics below it).
const MIN_HTTP1_BUFFER: usize = 8192;

async fn on_accept(
    accepted: io::Result<(TcpStream, SocketAddr)>,
    ctx: &Arc<ConnContext>,
    conns: &mut JoinSet<()>,
) {
    match accepted {
        Ok((stream, addr)) => {
            conns.spawn(serve_connection(ctx.clone(), stream, addr));
        }
        Err(e) if is_connection_error(&e) => tracing::debug!(error = %e, "accept"),
        Err(e) => {
            // Out of file descriptors and the like: retrying at once would spin.
            tracing::error!(error = %e, "accept failed; retrying in 1s");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Errors of one connection that died before it was accepted, not of the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

async fn serve_connection(ctx: Arc<ConnContext>, stream: TcpStream, addr: SocketAddr) {
    let _ = stream.set_nodelay(true);
    keep_alive(&stream);
    let mut tls = match tokio::time::timeout(ctx.handshake_timeout, handshake(&ctx, stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return tracing::debug!(%addr, error = %e, "TLS handshake failed"),
        Err(_) => return tracing::debug!(%addr, "TLS handshake timed out"),
    };
    let peer = peer_certificates(&tls);
    // HTTP/2 only when the client chose it by ALPN, as Go's server (`TLSNextProto`).
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let activity = Arc::new(Activity::new(ctx.timeouts, h2));
    // Only HTTP/2 connections can be asked to go away, and only with `--goaway-chance`.
    let goaway = (h2 && ctx.goaway).then(ConnectionGoaway::new);
    let facts = ConnFacts {
        addr,
        peer,
        activity: activity.clone(),
        goaway: goaway.clone(),
    };
    let service = request_service(ctx.clone(), facts);
    if h2 {
        // The write batch bounds what the session holds ([`write_batch::Seal`]).
        tls.get_mut().1.set_buffer_limit(None);
    }
    let io = TrackedIo::new(tls, activity.clone());
    let ends = Ends {
        signal: &ctx.signal,
        activity: &activity,
        goaway: goaway.as_ref(),
    };
    let served = if h2 {
        // The frames of the streams one event wakes share a TLS write (`write_batch.rs`).
        // HTTP/1.1 has one response at a time, and an upgraded connection leaves hyper.
        let (io, batch) = write_batch::split(io);
        let conn = ctx.http2.serve_connection(TokioIo::new(io), service);
        let conn = Batched::new(conn, batch);
        drive(conn, |c| c.conn().graceful_shutdown(), ends).await
    } else {
        let io = TokioIo::new(io);
        let conn = ctx.http1.serve_connection(io, service).with_upgrades();
        drive(conn, |c| c.graceful_shutdown(), ends).await
    };
    if let Err(e) = served {
        tracing::debug!(%addr, error = %e, "connection closed with an error");
    }
}

/// TCP keep-alive probes every 3 minutes, as kube-apiserver's listener sets them
/// (`defaultKeepAlivePeriod`): a peer that vanished without closing (a watch's client
/// powered off) is found and its connection closed.
fn keep_alive(stream: &TcpStream) {
    const PERIOD: Duration = Duration::from_secs(3 * 60);
    let probes = socket2::TcpKeepalive::new()
        .with_time(PERIOD)
        .with_interval(PERIOD);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&probes) {
        tracing::debug!(error = %e, "cannot set TCP keep-alive");
    }
}

/// How long an idle HTTP/2 connection has to close after its GOAWAY before it is dropped
/// (x/net/http2's `goAwayTimeout`).
const GOAWAY_TIMEOUT: Duration = Duration::from_secs(1);

/// What ends a connection besides its client: shutdown, idleness, and (HTTP/2) a request
/// that drew `--goaway-chance`.
struct Ends<'a> {
    signal: &'a ShutdownSignal,
    activity: &'a Activity,
    goaway: Option<&'a ConnectionGoaway>,
}

/// Runs a connection to its end. When shutdown starts, it is asked to finish its requests
/// and close (HTTP/2: GOAWAY), and is closed once none is in flight. When a request drew
/// `--goaway-chance`, an HTTP/2 connection gets a GOAWAY and ends after its streams. When it
/// has been idle too long ([`Activity::expired`]) it is closed: an HTTP/2 connection after a
/// GOAWAY, an HTTP/1.1 one at once (it has no request in flight, or only part of a header),
/// as Go's server closes a connection whose deadline passed.
async fn drive<C>(
    conn: C,
    graceful_shutdown: impl Fn(Pin<&mut C>),
    ends: Ends<'_>,
) -> hyper::Result<()>
where
    C: Future<Output = hyper::Result<()>>,
{
    let Ends {
        signal,
        activity,
        goaway,
    } = ends;
    tokio::pin!(conn);
    let mut shutting_down = false;
    let mut going_away = goaway.is_none();
    let goaway_requested = async {
        match goaway {
            Some(goaway) => goaway.requested().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(goaway_requested);
    loop {
        tokio::select! {
            result = conn.as_mut() => return result,
            _ = signal.cancelled(), if !shutting_down => {
                shutting_down = true;
                // The GOAWAY a request drew would be this one again: h2 sends one
                // graceful GOAWAY per connection and ignores a second request.
                going_away = true;
                activity.close_when_idle();
                graceful_shutdown(conn.as_mut());
            }
            // hyper's graceful shutdown of HTTP/2 is x/net/http2's: a GOAWAY, a PING, then
            // the GOAWAY naming the last stream it serves; those finish, then it closes.
            _ = &mut goaway_requested, if !going_away => {
                going_away = true;
                graceful_shutdown(conn.as_mut());
            }
            _ = activity.expired() => break,
        }
    }
    if activity.is_http2() {
        graceful_shutdown(conn.as_mut());
        if let Ok(result) = tokio::time::timeout(GOAWAY_TIMEOUT, conn.as_mut()).await {
            return result;
        }
    }
    Ok(())
}

/// First byte of a TLS record carrying a handshake (the ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The TLS handshake; a client speaking plain HTTP gets Go's helpful 400 instead.
async fn handshake(ctx: &ConnContext, mut stream: TcpStream) -> io::Result<TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    if first[0] != TLS_HANDSHAKE_RECORD && first[0].is_ascii_uppercase() {
        let reply =
            b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
        stream.write_all(reply).await?;
        let _ = stream.shutdown().await;
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "plain HTTP request",
        ));
    }
    ctx.acceptor.accept(stream).await
}

fn peer_certificates(tls: &TlsStream<TcpStream>) -> Option<PeerCertificates> {
    let chain = tls.get_ref().1.peer_certificates()?;
    (!chain.is_empty()).then(|| PeerCertificates::new(chain.to_vec()))
}

/// A response whose body keeps its request in flight on its connection.
type TrackedResponse = http::Response<TrackedBody<axum::body::Body>>;

/// The response of the per-connection service.
type ServiceResult = Result<TrackedResponse, std::convert::Infallible>;

/// What one connection's requests learn of it.
struct ConnFacts {
    addr: SocketAddr,
    peer: Option<PeerCertificates>,
    activity: Arc<Activity>,
    /// HTTP/2 only: where a request asks for the connection's GOAWAY.
    goaway: Option<ConnectionGoaway>,
}

/// The per-connection hyper service: adds the connection facts to each request's
/// extensions and hands it to the router; the connection is busy until the response body
/// is dropped.
fn request_service(
    ctx: Arc<ConnContext>,
    facts: ConnFacts,
) -> impl hyper::service::Service<
    http::Request<Incoming>,
    Response = TrackedResponse,
    Error = std::convert::Infallible,
    Future = impl Future<Output = ServiceResult> + Send,
> + Clone {
    let facts = Arc::new(facts);
    hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
        let in_flight = facts.activity.start();
        let extensions = req.extensions_mut();
        extensions.insert(ConnectInfo(facts.addr));
        extensions.insert(ctx.signal.clone());
        if let Some(peer) = &facts.peer {
            extensions.insert(peer.clone());
        }
        if let Some(goaway) = &facts.goaway {
            extensions.insert(goaway.clone());
        }
        let response = ctx.router.clone().oneshot(req);
        async move {
            let response = response.await?;
            Ok(response.map(|body| TrackedBody::new(body, in_flight)))
        }
    })
}

/// Waits for the open connections, which the triggered signal asked to close, for at most
/// `grace`; then closes those left.
async fn drain(mut conns: JoinSet<()>, grace: Duration) {
    tracing::info!(open = conns.len(), "shutting down: draining connections");
    let all_closed = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, all_closed).await.is_err() {
        tracing::warn!(?grace, "grace period over: closing remaining connections");
    }
    conns.shutdown().await;
}
