//! An HTTP/2 connection's writes, batched: hyper's frames go into a buffer, and the buffer
//! goes to TLS once the connection's task has let the other tasks woken by the same event
//! run. One write to a cache wakes every watch's task, each of which hands its stream one
//! event; written as they come, each frame would cost its own TLS record and system call.
//! kube-apiserver's Go server batches too: x/net/http2's `serverConn.scheduleFrameWrite`
//! writes frames into a buffered writer and flushes only when no frame is left to write.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes buffered before a write waits for the socket: a few TLS records' worth, enough for
/// one event to a hundred watches of a connection.
const LIMIT: usize = 256 * 1024;

/// Buffer capacity an idle connection keeps: a burst of events for its watches.
const KEEP: usize = 64 * 1024;

/// The IO under one connection and the bytes written to it but not yet sent.
struct Shared<T> {
    io: T,
    pending: Vec<u8>,
    /// Bytes of `pending` already sent.
    sent: usize,
}

impl<T: AsyncWrite + Unpin> Shared<T> {
    fn unsent(&self) -> usize {
        self.pending.len() - self.sent
    }

    /// Sends the pending bytes, then flushes the IO.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.pending.clear();
        self.sent = 0;
        // A large response's buffer is not kept for the connection's life.
        if self.pending.capacity() > KEEP {
            self.pending = Vec::new();
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }
}

/// Splits `io` into the IO hyper serves the connection on, whose flushes only mark the
/// batch, and the handle [`Batched`] sends the batch with.
pub(crate) fn split<T>(io: T) -> (BatchedIo<T>, WriteBatch<T>) {
    let shared = Arc::new(Mutex::new(Shared {
        io,
        pending: Vec::new(),
        sent: 0,
    }));
    let batch = WriteBatch {
        shared: shared.clone(),
        yielded: false,
    };
    (BatchedIo { shared }, batch)
}

/// The connection's IO as hyper sees it: reads go through; writes are buffered; a flush
/// leaves the buffer to [`Batched`], which sends it after the other woken tasks have run.
pub(crate) struct BatchedIo<T> {
    shared: Arc<Mutex<Shared<T>>>,
}

/// Locks the connection's IO. Only the connection's own task uses it (hyper and
/// [`Batched`] poll it in turn), so the lock is never contended; a poisoned one is still
/// the same IO.
fn lock<T>(shared: &Mutex<Shared<T>>) -> MutexGuard<'_, Shared<T>> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<T: AsyncRead + Unpin> AsyncRead for BatchedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut lock(&self.shared).io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> BatchedIo<T> {
    /// Room for more bytes: the buffer is under [`LIMIT`], or is sent until it is.
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<io::Result<MutexGuard<'_, Shared<T>>>> {
        let mut shared = lock(&self.shared);
        if shared.unsent() >= LIMIT {
            ready!(shared.poll_send(cx))?;
        }
        Poll::Ready(Ok(shared))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for BatchedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut shared = ready!(self.poll_room(cx))?;
        shared.pending.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut shared = ready!(self.poll_room(cx))?;
        let mut n = 0;
        for buf in bufs {
            shared.pending.extend_from_slice(buf);
            n += buf.len();
        }
        Poll::Ready(Ok(n))
    }

    /// Copying slices into the buffer is what a vectored write is for here: h2 then hands
    /// a frame's header and payload in one call.
    fn is_write_vectored(&self) -> bool {
        true
    }

    /// The batch is [`Batched`]'s to send: hyper flushes after each frame it encodes.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = lock(&self.shared);
        ready!(shared.poll_send(cx))?;
        Pin::new(&mut shared.io).poll_shutdown(cx)
    }
}

/// The sending side of a connection's batch, polled by [`Batched`].
pub(crate) struct WriteBatch<T> {
    shared: Arc<Mutex<Shared<T>>>,
    /// The connection's task has yielded once since bytes were buffered.
    yielded: bool,
}

impl<T: AsyncWrite + Unpin> WriteBatch<T> {
    /// After the connection was polled: with bytes buffered, first yield once, so that the
    /// tasks woken with this one (other streams' bodies) hand over their frames too; then
    /// send them all in one write. An IO error is left for hyper's next read or write to
    /// meet.
    fn poll_send(&mut self, cx: &mut Context<'_>) {
        let mut shared = lock(&self.shared);
        if shared.unsent() == 0 {
            self.yielded = false;
            return;
        }
        if !self.yielded {
            self.yielded = true;
            // Woken while it runs, tokio's task goes to the back of its worker's run queue.
            cx.waker().wake_by_ref();
            return;
        }
        match shared.poll_send(cx) {
            Poll::Ready(Ok(())) => self.yielded = false,
            // The socket is full: its readiness wakes this task again.
            Poll::Pending => {}
            // The peer is gone: nothing more can be sent, and hyper learns of it from its
            // next read or write.
            Poll::Ready(Err(e)) => {
                tracing::debug!(error = %e, "connection write failed");
                shared.pending.clear();
                shared.sent = 0;
                self.yielded = false;
            }
        }
    }
}

/// A connection future whose writes go out in batches: see the module's documentation.
pub(crate) struct Batched<C, T> {
    conn: Pin<Box<C>>,
    batch: WriteBatch<T>,
}

impl<C, T> Batched<C, T> {
    pub(crate) fn new(conn: C, batch: WriteBatch<T>) -> Self {
        Self {
            conn: Box::pin(conn),
            batch,
        }
    }

    /// The connection itself, to start its graceful shutdown.
    pub(crate) fn conn(self: Pin<&mut Self>) -> Pin<&mut C> {
        self.get_mut().conn.as_mut()
    }
}

impl<C: Future, T: AsyncWrite + Unpin> Future for Batched<C, T> {
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = &mut *self;
        // A finished connection has shut its IO down, which sent what was left.
        if let Poll::Ready(output) = this.conn.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        this.batch.poll_send(cx);
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    /// An IO that records the size of each write it is given.
    #[derive(Default)]
    struct Recording {
        writes: Vec<usize>,
        flushes: usize,
        shut: bool,
    }

    impl AsyncRead for Recording {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    impl AsyncWrite for Recording {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().writes.push(buf.len());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().shut = true;
            Poll::Ready(Ok(()))
        }
    }

    fn poll<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        Pin::new(future).poll(&mut cx)
    }

    #[test]
    fn frames_flushed_one_by_one_go_out_in_one_write_after_a_yield() {
        let (mut io, batch) = split(Recording::default());
        let shared = batch.shared.clone();
        let conn = async move {
            for _ in 0..100 {
                io.write_all(b"frame").await?;
                io.flush().await?;
            }
            std::future::pending::<io::Result<()>>().await
        };
        let mut batched = Batched::new(Box::pin(conn), batch);
        assert!(poll(&mut batched).is_pending());
        assert!(lock(&shared).io.writes.is_empty(), "sent before the yield");
        assert!(poll(&mut batched).is_pending());
        let written = &lock(&shared).io;
        assert_eq!(
            (written.writes.as_slice(), written.flushes),
            (&[500][..], 1)
        );
    }

    #[test]
    fn a_shutdown_sends_what_is_buffered() {
        let (mut io, batch) = split(Recording::default());
        let shared = batch.shared.clone();
        let conn = async move {
            io.write_all(b"last frame").await?;
            io.shutdown().await
        };
        let mut batched = Batched::new(Box::pin(conn), batch);
        assert!(matches!(poll(&mut batched), Poll::Ready(Ok(()))));
        let written = &lock(&shared).io;
        assert_eq!((written.writes.as_slice(), written.shut), (&[10][..], true));
    }

    #[test]
    fn a_full_buffer_is_sent_before_more_is_taken() {
        let (mut io, batch) = split(Recording::default());
        let shared = batch.shared.clone();
        let frame = vec![0u8; LIMIT / 2];
        let conn = async move {
            for _ in 0..3 {
                io.write_all(&frame).await?;
            }
            std::future::pending::<io::Result<()>>().await
        };
        let mut batched = Batched::new(Box::pin(conn), batch);
        assert!(poll(&mut batched).is_pending());
        assert_eq!(lock(&shared).io.writes, [LIMIT]);
    }
}
