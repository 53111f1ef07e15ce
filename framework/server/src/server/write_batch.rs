//! An HTTP/2 connection's writes, batched: hyper's frames go into a buffer, and the buffer
//! goes to TLS once the connection's task has let the other tasks woken by the same event
//! run. One write to a cache wakes every watch's task, each of which hands its stream one
//! event; written as they come, each frame would cost its own TLS record and system call.
//! kube-apiserver's Go server batches too: x/net/http2's `serverConn.scheduleFrameWrite`
//! writes frames into a buffered writer and flushes only when no frame is left to write.
//!
//! A write of a full TLS record or more (a large body's DATA frames) is not copied into the
//! buffer: it is encrypted at once into records the TLS stream keeps ([`Seal`]), which go to
//! the socket with the rest of the batch, in one system call. Only what does not fill a
//! whole record is buffered, so small frames still share records.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes buffered or sealed before a write waits for the socket: a few TLS records' worth,
/// enough for one event to a hundred watches of a connection.
const LIMIT: usize = 256 * 1024;

/// Buffer capacity an idle connection keeps: a burst of events for its watches.
const KEEP: usize = 64 * 1024;

/// The plaintext of a full TLS record (`max_fragment_size`'s default): a write that fills
/// one is sealed rather than buffered, in whole records.
const RECORD: usize = 16 * 1024;

/// An IO that encrypts what it is given into records it keeps until its next flush: a TLS
/// stream whose session buffers its records without a limit (see [`split`]).
pub(crate) trait Seal {
    /// Encrypts `bufs`, or as much of them as the session takes, into records sent by the
    /// next flush; how many bytes it took.
    fn seal(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
}

impl<IO> Seal for tokio_rustls::server::TlsStream<IO> {
    fn seal(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        io::Write::write_vectored(&mut self.get_mut().1.writer(), bufs)
    }
}

/// Seals all of `bufs` (`seal` may take them in parts).
fn seal_all<T: Seal>(io: &mut T, bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    let mut bufs = bufs;
    while !bufs.is_empty() {
        let n = io.seal(bufs)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// The IO under one connection and the bytes written to it but not yet sent.
struct Shared<T> {
    io: T,
    /// Bytes not yet given to the IO: less than a [`RECORD`] since the last seal.
    pending: Vec<u8>,
    /// Bytes sealed since the IO's last flush.
    sealed: usize,
}

impl<T: AsyncWrite + Seal + Unpin> Shared<T> {
    fn unsent(&self) -> usize {
        self.pending.len() + self.sealed
    }

    /// Seals the pending bytes, then flushes the IO, which sends every sealed record.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.pending.is_empty() {
            seal_all(&mut self.io, &mut [IoSlice::new(&self.pending)])?;
            self.sealed += self.pending.len();
            self.pending.clear();
            // A large response's buffer is not kept for the connection's life.
            if self.pending.capacity() > KEEP {
                self.pending = Vec::new();
            }
        }
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        self.sealed = 0;
        Poll::Ready(Ok(()))
    }

    /// Takes `bufs`: copied into the buffer while it stays under a record; else the buffer
    /// and the whole records that follow it in `bufs` are sealed as they are, and the rest
    /// is buffered.
    fn write(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|buf| buf.len()).sum();
        let whole = (self.pending.len() + total) / RECORD * RECORD;
        if whole == 0 {
            for buf in bufs {
                self.pending.extend_from_slice(buf);
            }
            return Ok(total);
        }
        // The first `whole - pending` bytes of `bufs`, after the buffer.
        let mut left = whole - self.pending.len();
        let mut slices = Vec::with_capacity(bufs.len() + 1);
        if !self.pending.is_empty() {
            slices.push(IoSlice::new(&self.pending));
        }
        let mut rest: &[IoSlice<'_>] = bufs;
        let mut tail: &[u8] = &[];
        while left > 0 {
            let (buf, more) = rest
                .split_first()
                .expect("`whole` is within the bytes given");
            let taken = buf.len().min(left);
            slices.push(IoSlice::new(&buf[..taken]));
            tail = &buf[taken..];
            left -= taken;
            rest = more;
        }
        seal_all(&mut self.io, &mut slices)?;
        self.sealed += whole;
        self.pending.clear();
        self.pending.extend_from_slice(tail);
        for buf in rest {
            self.pending.extend_from_slice(buf);
        }
        Ok(total)
    }
}

/// Splits `io` into the IO hyper serves the connection on, whose flushes only mark the
/// batch, and the handle [`Batched`] sends the batch with. A TLS `io`'s session should hold
/// its records without a limit (`set_buffer_limit(None)`): the batch flushes it once
/// [`LIMIT`] bytes are sealed or buffered.
pub(crate) fn split<T>(io: T) -> (BatchedIo<T>, WriteBatch<T>) {
    let shared = Arc::new(Mutex::new(Shared {
        io,
        pending: Vec::new(),
        sealed: 0,
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

impl<T: AsyncWrite + Seal + Unpin> BatchedIo<T> {
    /// Room for more bytes: the buffer is under [`LIMIT`], or is sent until it is.
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<io::Result<MutexGuard<'_, Shared<T>>>> {
        let mut shared = lock(&self.shared);
        if shared.unsent() >= LIMIT {
            ready!(shared.poll_send(cx))?;
        }
        Poll::Ready(Ok(shared))
    }
}

impl<T: AsyncWrite + Seal + Unpin> AsyncWrite for BatchedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut shared = ready!(self.poll_room(cx))?;
        Poll::Ready(shared.write(&[IoSlice::new(buf)]))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut shared = ready!(self.poll_room(cx))?;
        Poll::Ready(shared.write(bufs))
    }

    /// A frame's header and payload in one call: they share a record.
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

impl<T: AsyncWrite + Seal + Unpin> WriteBatch<T> {
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
                shared.sealed = 0;
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

impl<C: Future, T: AsyncWrite + Seal + Unpin> Future for Batched<C, T> {
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

    /// What an IO was asked to do.
    #[derive(Debug, PartialEq)]
    enum Call {
        /// Bytes sealed, in one call.
        Seal(usize),
        Flush,
        Shutdown,
    }

    /// An IO that records what it is asked to do, and the bytes sealed.
    #[derive(Default)]
    struct Recording {
        calls: Vec<Call>,
        bytes: Vec<u8>,
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
            _: &[u8],
        ) -> Poll<io::Result<usize>> {
            unreachable!("the batch seals what it writes")
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().calls.push(Call::Flush);
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().calls.push(Call::Shutdown);
            Poll::Ready(Ok(()))
        }
    }

    impl Seal for Recording {
        fn seal(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let before = self.bytes.len();
            for buf in bufs {
                self.bytes.extend_from_slice(buf);
            }
            let n = self.bytes.len() - before;
            self.calls.push(Call::Seal(n));
            Ok(n)
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
        assert!(lock(&shared).io.calls.is_empty(), "sent before the yield");
        assert!(poll(&mut batched).is_pending());
        assert_eq!(lock(&shared).io.calls, [Call::Seal(500), Call::Flush]);
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
        assert_eq!(
            lock(&shared).io.calls,
            [Call::Seal(10), Call::Flush, Call::Shutdown]
        );
    }

    #[test]
    fn a_full_batch_is_sent_before_more_is_taken() {
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
        let half = Call::Seal(LIMIT / 2);
        assert_eq!(
            lock(&shared).io.calls,
            [
                Call::Seal(LIMIT / 2),
                Call::Seal(LIMIT / 2),
                Call::Flush,
                half
            ]
        );
    }

    /// A body's DATA frames (a header and a payload of a full record) are sealed as they
    /// come, in whole records, across the frames' bounds; only the rest is copied, and the
    /// bytes go out in the order written.
    #[test]
    fn large_frames_are_sealed_in_whole_records_small_ones_buffered() {
        let (mut io, batch) = split(Recording::default());
        let shared = batch.shared.clone();
        let frames: Vec<(Vec<u8>, Vec<u8>)> = (0..3u8)
            .map(|i| (vec![i; 9], vec![i + 100; RECORD]))
            .collect();
        let mut expected = b"headers".to_vec();
        for (head, payload) in &frames {
            expected.extend_from_slice(head);
            expected.extend_from_slice(payload);
        }
        let conn = async move {
            io.write_all(b"headers").await?;
            for (head, payload) in &frames {
                let bufs = [IoSlice::new(head), IoSlice::new(payload)];
                let n = io.write_vectored(&bufs).await?;
                assert_eq!(n, head.len() + payload.len(), "a frame taken whole");
                io.flush().await?;
            }
            std::future::pending::<io::Result<()>>().await
        };
        let mut batched = Batched::new(Box::pin(conn), batch);
        assert!(poll(&mut batched).is_pending());
        assert_eq!(
            lock(&shared).io.calls,
            [Call::Seal(RECORD), Call::Seal(RECORD), Call::Seal(RECORD)],
            "nothing sent before the yield but whole records"
        );
        assert!(poll(&mut batched).is_pending());
        let written = &lock(&shared).io;
        assert_eq!(written.calls[3..], [Call::Seal(7 + 3 * 9), Call::Flush]);
        assert!(written.bytes == expected, "bytes out of order");
    }
}
