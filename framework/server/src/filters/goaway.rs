//! Probabilistic GOAWAY (`--goaway-chance`): after a request on an HTTP/2 connection, with
//! the configured chance, the connection is asked to close gracefully (a GOAWAY: the streams
//! in flight finish, new requests go to a new connection), so that clients behind a load
//! balancer spread over the replicas again. As kube-apiserver's `WithProbabilisticGoaway`
//! (`k8s.io/apiserver` `pkg/server/filters/goaway.go`), except that a watch or another
//! long-running request never draws: it would hold the connection open for its whole life.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::Request;
use tokio::sync::Notify;

/// The highest `--goaway-chance` kube-apiserver accepts (one request in fifty).
pub const MAX_GOAWAY_CHANCE: f64 = 0.02;

/// Checks a `--goaway-chance` as kube-apiserver's `ServerRunOptions.Validate`, with its
/// message.
///
/// ```
/// use extension_apiserver::filters::goaway::validate_chance;
/// assert!(validate_chance(0.001).is_ok());
/// assert!(validate_chance(0.5).is_err());
/// ```
pub fn validate_chance(chance: f64) -> Result<(), String> {
    if (0.0..=MAX_GOAWAY_CHANCE).contains(&chance) {
        Ok(())
    } else {
        Err("--goaway-chance can not be less than 0 or greater than 0.02".into())
    }
}

/// One HTTP/2 connection's request to close gracefully, shared by its requests (in their
/// extensions) and the task serving it, which sends the GOAWAY.
#[derive(Clone, Debug, Default)]
pub struct ConnectionGoaway(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    requested: AtomicBool,
    notify: Notify,
}

impl ConnectionGoaway {
    /// A connection not asked to close yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the connection to close after the streams in flight.
    pub fn request(&self) {
        if !self.0.requested.swap(true, Ordering::AcqRel) {
            self.0.notify.notify_one();
        }
    }

    /// Whether the connection was asked to close.
    pub fn is_requested(&self) -> bool {
        self.0.requested.load(Ordering::Acquire)
    }

    /// Resolves once the connection is asked to close.
    pub async fn requested(&self) {
        // `notify_one` keeps a permit when no one waits, so a request made before this
        // call is not missed.
        if !self.is_requested() {
            self.0.notify.notified().await;
        }
    }
}

/// Whether this request draws the GOAWAY of its connection: the handle to pull after its
/// response, when the request came over HTTP/2 (its connection put the handle in its
/// extensions), is not long-running, and the draw falls under `chance`.
pub(crate) fn draw(chance: f64, request: &Request, long_running: bool) -> Option<ConnectionGoaway> {
    if chance <= 0.0 || long_running || request.version() != http::Version::HTTP_2 {
        return None;
    }
    let handle = request.extensions().get::<ConnectionGoaway>()?;
    (rand::random::<f64>() < chance).then(|| handle.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h2_request(handle: &ConnectionGoaway) -> Request {
        let mut request = Request::new(axum::body::Body::empty());
        *request.version_mut() = http::Version::HTTP_2;
        request.extensions_mut().insert(handle.clone());
        request
    }

    #[test]
    fn kube_bounds_the_chance() {
        for ok in [0.0, 0.001, 0.02] {
            assert!(validate_chance(ok).is_ok(), "{ok}");
        }
        for bad in [-0.001, 0.021, 1.0, f64::NAN] {
            let message = validate_chance(bad).unwrap_err();
            assert_eq!(
                message,
                "--goaway-chance can not be less than 0 or greater than 0.02"
            );
        }
    }

    #[test]
    fn only_short_http2_requests_draw() {
        let handle = ConnectionGoaway::new();
        let request = h2_request(&handle);
        assert!(draw(1.0, &request, false).is_some());
        assert!(draw(0.0, &request, false).is_none());
        assert!(draw(1.0, &request, true).is_none(), "a watch never draws");
        let mut http1 = h2_request(&handle);
        *http1.version_mut() = http::Version::HTTP_11;
        assert!(draw(1.0, &http1, false).is_none());
        let bare = Request::new(axum::body::Body::empty());
        assert!(draw(1.0, &bare, false).is_none());
    }

    #[tokio::test]
    async fn a_request_made_before_the_wait_is_seen() {
        let handle = ConnectionGoaway::new();
        handle.request();
        handle.request();
        tokio::time::timeout(std::time::Duration::from_secs(5), handle.requested())
            .await
            .expect("requested");
    }
}
