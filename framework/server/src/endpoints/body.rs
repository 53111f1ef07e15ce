//! Reading request bodies under kube-apiserver's limit (3 MiB): a larger body is a 413
//! `RequestEntityTooLarge`, and the client must be able to read that answer.
//!
//! A client still uploading when the server ends the exchange often never sees the 413: over
//! HTTP/2 curl reports a framing error once the stream is reset under its upload, and over
//! HTTP/1.1 the connection's close can overtake the answer. So the rest of a too-large body
//! is read and thrown away, up to a bound in bytes and time, before the 413 is sent; past the
//! bound the server answers at once (HTTP/2 then ends the stream with `NO_ERROR` after the
//! complete answer, as Go's server does).

use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;

use crate::error::{Error, Result};

/// How much of a too-large body is read and dropped so the client sees the 413.
pub const DRAIN_BYTES: usize = 16 * 1024 * 1024;

/// How long draining a too-large body may take.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// The whole body, or 413 once it passes `limit` bytes.
pub async fn read_limited(mut body: Body, limit: usize) -> Result<Bytes> {
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| Error::bad_request(format!("failed to read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        len += data.len();
        if len > limit {
            drain(body, DRAIN_BYTES).await;
            return Err(Error::too_large(limit));
        }
        chunks.push(data);
    }
    Ok(concat(chunks, len))
}

/// One chunk is returned as it is (the common case: no copy).
fn concat(mut chunks: Vec<Bytes>, len: usize) -> Bytes {
    if chunks.len() == 1 {
        return chunks.pop().unwrap_or_default();
    }
    let mut all = BytesMut::with_capacity(len);
    for chunk in chunks {
        all.extend_from_slice(&chunk);
    }
    all.freeze()
}

/// Reads and drops up to `bound` bytes of `body`, for at most [`DRAIN_TIME`].
async fn drain(mut body: Body, bound: usize) {
    let read = async {
        let mut drained = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            drained += frame.data_ref().map_or(0, Bytes::len);
            if drained > bound {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::StreamExt as _;

    use super::*;

    /// A body of `chunks` chunks of 1 KiB, counting how many were read.
    fn counted(chunks: usize) -> (Body, Arc<AtomicUsize>) {
        let read = Arc::new(AtomicUsize::new(0));
        let counter = read.clone();
        let stream = futures::stream::iter(0..chunks).map(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; 1024]))
        });
        (Body::from_stream(stream), read)
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let (body, _) = counted(3);
        assert_eq!(read_limited(body, 4096).await.unwrap().len(), 3072);
        let one = read_limited(Body::from("{}"), 10).await.unwrap();
        assert_eq!(&one[..], b"{}");
    }

    #[tokio::test]
    async fn a_larger_body_is_413_after_the_rest_was_read() {
        let (body, read) = counted(100);
        let e = read_limited(body, 4096).await.unwrap_err();
        assert_eq!((e.code(), e.reason()), (413, "RequestEntityTooLarge"));
        assert_eq!(e.message(), "Request entity too large: limit is 4096");
        assert_eq!(read.load(Ordering::SeqCst), 100, "the rest was drained");
    }

    #[tokio::test]
    async fn draining_stops_at_its_bound() {
        let (body, read) = counted(100);
        drain(body, 10 * 1024).await;
        assert_eq!(read.load(Ordering::SeqCst), 11);
    }
}
