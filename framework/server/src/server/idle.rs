//! When a connection of the secure port counts as idle, and how long it may stay so: Go's
//! `http.Server` `ReadHeaderTimeout` and `IdleTimeout` and x/net/http2's `IdleTimeout`, which
//! kube-apiserver sets (`k8s.io/apiserver` `secure_serving.go`).
//!
//! A connection is busy while a request is in flight: from the moment hyper hands it to the
//! router until its response body is dropped (sent in full, or its stream reset). A watch,
//! however quiet, and a long response in progress are never idle.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a connection may wait; zero means no limit (as Go's zero).
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdleTimeouts {
    /// No request in flight (HTTP/1 keep-alive between requests, HTTP/2 without streams).
    pub idle: Duration,
    /// HTTP/1: from the connection's start, or from the first byte of the next request, to
    /// the end of the request's header.
    pub read_header: Duration,
}

/// The activity of one connection, shared by its requests, its IO and its watchdog
/// ([`Activity::expired`]).
pub(crate) struct Activity {
    timeouts: IdleTimeouts,
    http2: bool,
    state: Mutex<State>,
    /// Set while an HTTP/1 connection waits for its next request: the next byte read starts
    /// that request's header (checked on every read, so an atomic rather than the lock).
    awaiting_bytes: AtomicBool,
    /// Told when the deadline may have moved later or appeared (the watchdog sleeps on the
    /// one it saw; one that moved earlier is found when it wakes).
    changed: Notify,
}

struct State {
    in_flight: usize,
    /// When the connection started, the last request ended, or the next one's first byte came.
    since: Instant,
    /// HTTP/1 only: a request's header is expected (or being read) since `since`.
    reading_header: bool,
    /// The server shuts down: close as soon as no request is in flight.
    closing: bool,
}

impl Activity {
    /// A connection that starts now; `http2` when the client chose `h2` by ALPN. An HTTP/1
    /// connection owes its first request's header from the start, as Go's server reads it;
    /// an HTTP/2 one is idle from the start, as x/net/http2 counts it.
    pub(crate) fn new(timeouts: IdleTimeouts, http2: bool) -> Self {
        Self {
            timeouts,
            http2,
            state: Mutex::new(State {
                in_flight: 0,
                since: Instant::now(),
                reading_header: !http2,
                closing: false,
            }),
            awaiting_bytes: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request reached the router; busy until the guard is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        let mut state = self.state();
        state.in_flight += 1;
        self.awaiting_bytes.store(false, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    fn finish(&self) {
        let mut state = self.state();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.since = Instant::now();
            state.reading_header = false;
            self.awaiting_bytes.store(!self.http2, Ordering::Relaxed);
            self.changed.notify_one();
        }
    }

    /// Bytes came in: the first of an idle HTTP/1 connection start a request's header (Go
    /// waits `IdleTimeout` for them, then `ReadHeaderTimeout` for the rest of the header).
    fn read(&self) {
        if !self.awaiting_bytes.load(Ordering::Relaxed)
            || !self.awaiting_bytes.swap(false, Ordering::AcqRel)
        {
            return;
        }
        let mut state = self.state();
        if state.in_flight == 0 {
            state.since = Instant::now();
            state.reading_header = true;
            self.changed.notify_one();
        }
    }

    /// The server shuts down: the connection is to close once no request is in flight (at
    /// once if none is), as Go's `Server.Shutdown` closes idle connections.
    pub(crate) fn close_when_idle(&self) {
        self.state().closing = true;
        self.changed.notify_one();
    }

    /// When the connection is to be closed if nothing changes; `None` while a request is in
    /// flight or the timeout that applies is zero.
    fn deadline(&self) -> Option<Instant> {
        let state = self.state();
        if state.in_flight > 0 {
            return None;
        }
        if state.closing {
            return Some(state.since);
        }
        let limit = if state.reading_header {
            self.timeouts.read_header
        } else {
            self.timeouts.idle
        };
        (!limit.is_zero()).then(|| state.since + limit)
    }

    /// Whether the connection speaks HTTP/2 (closed with a GOAWAY rather than at once).
    pub(crate) fn is_http2(&self) -> bool {
        self.http2
    }

    /// Resolves once the connection has been idle, or has kept a header waiting, too long.
    pub(crate) async fn expired(&self) {
        loop {
            // Made before the deadline is read, so a change in between is not missed.
            let changed = self.changed.notified();
            match self.deadline() {
                None => changed.await,
                Some(deadline) => {
                    tokio::select! {
                        _ = changed => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            if self.deadline().is_some_and(|d| d <= Instant::now()) {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A request in flight on its connection; dropped with the response body.
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// A response body that keeps its request in flight until hyper drops it.
pub(crate) struct TrackedBody<B> {
    inner: B,
    _in_flight: InFlight,
}

impl<B> TrackedBody<B> {
    pub(crate) fn new(inner: B, in_flight: InFlight) -> Self {
        Self {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl<B: Body + Unpin> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The connection's IO, telling its [`Activity`] when bytes come in.
pub(crate) struct TrackedIo<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> TrackedIo<T> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TrackedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TrackedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<T: super::write_batch::Seal> super::write_batch::Seal for TrackedIo<T> {
    fn seal(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.inner.seal(bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUTS: IdleTimeouts = IdleTimeouts {
        idle: Duration::from_secs(90),
        read_header: Duration::from_secs(32),
    };

    /// The timeout that applies now, as a duration after the phase's start.
    fn limit(activity: &Activity) -> Option<Duration> {
        let since = activity.state().since;
        activity.deadline().map(|d| d - since)
    }

    #[tokio::test]
    async fn http1_owes_its_first_header_then_waits_idle_then_a_header_again() {
        let activity = Arc::new(Activity::new(TIMEOUTS, false));
        assert_eq!(limit(&activity), Some(TIMEOUTS.read_header));
        let request = activity.start();
        assert_eq!(
            activity.deadline(),
            None,
            "busy while a request is in flight"
        );
        activity.read();
        assert_eq!(
            activity.deadline(),
            None,
            "a request's body is no new header"
        );
        drop(request);
        assert_eq!(limit(&activity), Some(TIMEOUTS.idle));
        activity.read();
        assert_eq!(limit(&activity), Some(TIMEOUTS.read_header));
        // Later bytes of the same header do not move its start.
        let first_byte = activity.state().since;
        activity.read();
        assert_eq!(activity.state().since, first_byte);
    }

    #[tokio::test]
    async fn http2_is_idle_without_streams_whatever_frames_come() {
        let activity = Arc::new(Activity::new(TIMEOUTS, true));
        assert_eq!(limit(&activity), Some(TIMEOUTS.idle));
        activity.read();
        assert_eq!(
            limit(&activity),
            Some(TIMEOUTS.idle),
            "pings are no activity"
        );
        let one = activity.start();
        let two = activity.start();
        drop(one);
        assert_eq!(activity.deadline(), None, "one stream still open");
        drop(two);
        assert_eq!(limit(&activity), Some(TIMEOUTS.idle));
        activity.read();
        assert_eq!(limit(&activity), Some(TIMEOUTS.idle));
    }

    #[tokio::test]
    async fn expires_once_idle_and_never_while_a_request_is_in_flight() {
        let short = IdleTimeouts {
            idle: Duration::from_millis(100),
            read_header: Duration::from_millis(100),
        };
        let activity = Arc::new(Activity::new(short, true));
        let watch = activity.start();
        let watchdog = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move { activity.expired().await }
        });
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!watchdog.is_finished(), "a quiet watch is not idle");
        drop(watch);
        tokio::time::timeout(Duration::from_secs(10), watchdog)
            .await
            .expect("idle connection expires")
            .unwrap();
    }

    #[tokio::test]
    async fn shutdown_closes_at_once_when_idle_else_when_the_last_request_ends() {
        let activity = Arc::new(Activity::new(TIMEOUTS, true));
        let request = activity.start();
        activity.close_when_idle();
        assert_eq!(
            activity.deadline(),
            None,
            "a request in flight finishes first"
        );
        drop(request);
        let closing = tokio::time::timeout(Duration::from_secs(10), activity.expired());
        closing.await.expect("closed once idle");
        let idle = Activity::new(TIMEOUTS, false);
        idle.close_when_idle();
        tokio::time::timeout(Duration::from_secs(10), idle.expired())
            .await
            .expect("an idle connection is closed at once");
    }

    #[tokio::test]
    async fn zero_means_no_limit() {
        let none = IdleTimeouts {
            idle: Duration::ZERO,
            read_header: Duration::ZERO,
        };
        assert_eq!(Activity::new(none, false).deadline(), None);
        assert_eq!(Activity::new(none, true).deadline(), None);
    }
}
