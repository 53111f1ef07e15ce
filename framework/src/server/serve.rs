//! The secure port's accept loop, the first stage of every request: TCP accept, TLS handshake,
//! HTTP/1.1 or HTTP/2 by hyper, connection facts put in the request extensions, then the
//! router (with its filter layers). Also graceful shutdown, which long-running handlers observe.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::lifecycle::ShutdownSignal;
use crate::tls::PeerCertificates;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
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
    /// The signal given to handlers; triggering it shuts the server down as well.
    pub signal: ShutdownSignal,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            grace_period: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            max_concurrent_streams: 1000,
            signal: ShutdownSignal::new(),
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
/// Handshake failures, plain-HTTP clients and garbage only affect their own connection.
pub async fn serve_tls_with(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: axum::Router,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> io::Result<()> {
    let ctx = Arc::new(ConnContext {
        acceptor: TlsAcceptor::from(tls),
        http: http_builder(&options),
        router,
        signal: options.signal.clone(),
        handshake_timeout: options.handshake_timeout,
    });
    let graceful = GracefulShutdown::new();
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = options.signal.cancelled() => break,
            accepted = listener.accept() => on_accept(accepted, &ctx, &graceful, &mut conns).await,
            // Reap finished connections so the set does not grow without bound.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    options.signal.trigger();
    drain(graceful, conns, options.grace_period).await;
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
    use tokio::signal::unix::{signal, SignalKind};
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
    http: auto::Builder<TokioExecutor>,
    router: axum::Router,
    signal: ShutdownSignal,
    handshake_timeout: Duration,
}

fn http_builder(options: &ServeOptions) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The timer enforces HTTP/1's header read timeout against slow-loris clients.
    builder.http1().timer(TokioTimer::new());
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_concurrent_streams);
    builder
}

async fn on_accept(
    accepted: io::Result<(TcpStream, SocketAddr)>,
    ctx: &Arc<ConnContext>,
    graceful: &GracefulShutdown,
    conns: &mut JoinSet<()>,
) {
    match accepted {
        Ok((stream, addr)) => {
            // The watcher is taken now, so a shutdown during the handshake still reaches it.
            let watcher = graceful.watcher();
            conns.spawn(serve_connection(ctx.clone(), stream, addr, watcher));
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

async fn serve_connection(
    ctx: Arc<ConnContext>,
    stream: TcpStream,
    addr: SocketAddr,
    watcher: Watcher,
) {
    let _ = stream.set_nodelay(true);
    let tls = match tokio::time::timeout(ctx.handshake_timeout, handshake(&ctx, stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return tracing::debug!(%addr, error = %e, "TLS handshake failed"),
        Err(_) => return tracing::debug!(%addr, "TLS handshake timed out"),
    };
    let peer = peer_certificates(&tls);
    let service = request_service(ctx.clone(), addr, peer);
    let conn = ctx
        .http
        .serve_connection_with_upgrades(TokioIo::new(tls), service);
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(%addr, error = %e, "connection closed with an error");
    }
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

/// The response of the per-connection service.
type ServiceResult = Result<axum::response::Response, std::convert::Infallible>;

/// The per-connection hyper service: adds the connection facts to each request's
/// extensions and hands it to the router.
fn request_service(
    ctx: Arc<ConnContext>,
    addr: SocketAddr,
    peer: Option<PeerCertificates>,
) -> impl hyper::service::Service<
    http::Request<Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = ServiceResult> + Send,
> + Clone {
    hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
        let extensions = req.extensions_mut();
        extensions.insert(ConnectInfo(addr));
        extensions.insert(ctx.signal.clone());
        if let Some(peer) = &peer {
            extensions.insert(peer.clone());
        }
        ctx.router.clone().oneshot(req)
    })
}

/// Graceful shutdown of the open connections, bounded by `grace`.
async fn drain(graceful: GracefulShutdown, mut conns: JoinSet<()>, grace: Duration) {
    let open = graceful.count();
    tracing::info!(open, "shutting down: draining connections");
    let all_closed = async {
        graceful.shutdown().await;
        while conns.join_next().await.is_some() {}
    };
    if tokio::time::timeout(grace, all_closed).await.is_err() {
        tracing::warn!(?grace, "grace period over: closing remaining connections");
    }
    conns.shutdown().await;
}
