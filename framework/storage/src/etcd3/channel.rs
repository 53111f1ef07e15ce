//! The gRPC channel to one etcd member: tonic's, with request bodies that say they end with
//! their last message.
//!
//! tonic's request body learns that it ended only when it is polled once more after its
//! last message, so hyper sends every unary call (a range, a transaction) as HEADERS, DATA,
//! and then an empty DATA frame with END_STREAM, often in a write (and a TCP segment, and a
//! read on etcd's side) of its own. Looking one frame ahead lets the last DATA frame carry
//! END_STREAM itself, as grpc-go's client sends it. The bytes on the stream are otherwise
//! the same; streaming calls (watches) look ahead without waiting.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use etcd_client::{BalancedChannelBuilder, Channel};
use http_body::{Body, Frame, SizeHint};
use tonic::Status;
use tonic::transport::channel::Change;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

/// Where etcd-client sends the endpoints of the balanced channel.
type EndpointUpdates = tokio::sync::mpsc::Sender<Change<http::Uri, tonic::transport::Endpoint>>;

/// Builds the channel of [`etcd_client::Client::connect_with_balanced_channel`]: tonic's
/// balanced channel, each request's body wrapped in a [`KnownEnd`].
pub(super) struct KnownEndChannel;

impl BalancedChannelBuilder for KnownEndChannel {
    type Error = tonic::transport::Error;

    fn balanced_channel(
        self,
        buffer_size: usize,
    ) -> Result<(Channel, EndpointUpdates), Self::Error> {
        let (channel, updates) = tonic::transport::Channel::balance_channel(buffer_size);
        let channel = channel
            .map_request(|request: http::Request<tonic::body::Body>| {
                request.map(|body| tonic::body::Body::new(KnownEnd::new(body)))
            })
            // As etcd-client boxes the errors of its own tonic channel, so that the error
            // chains (a refused connection, a lost stream) read the same.
            .map_err(|error| Box::new(error) as tower::BoxError);
        Ok((Channel::Custom(BoxCloneSyncService::new(channel)), updates))
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
