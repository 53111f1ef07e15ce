//! Timeout: a request that is not long-running (a watch; a stream or connection
//! subresource, as kube-apiserver's `BasicLongRunningRequestCheck` names `log`, `attach`,
//! `exec` among its long-running subresources) gets 504 `Timeout` after the bound.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};

use crate::endpoints::{RequestInfo, Verb};
use crate::error::Error;
use crate::registry::group::APIGroupInfo;
use crate::registry::subresource::SubresourceKind;

/// The installed subresources that are long-running: streams and connections, keyed by
/// group, resource and subresource (kube's check is by subresource name, for every
/// resource; ours by what is installed).
#[derive(Clone, Debug, Default)]
pub struct LongRunningSubresources {
    map: HashMap<(String, String, String), SubresourceKind>,
}

impl LongRunningSubresources {
    /// The streams and connections of `groups`.
    pub fn new(groups: &[APIGroupInfo]) -> Self {
        let mut map = HashMap::new();
        for group in groups {
            for resources in group.storage.values() {
                for (path, storage) in resources {
                    let Some(sub) = &storage.subresource else {
                        continue;
                    };
                    let Some((resource, name)) = path.split_once('/') else {
                        continue;
                    };
                    if matches!(
                        sub.kind(),
                        SubresourceKind::Stream | SubresourceKind::Connect
                    ) {
                        let key = (group.name.clone(), resource.into(), name.into());
                        map.insert(key, sub.kind());
                    }
                }
            }
        }
        Self { map }
    }

    /// The kind of the long-running subresource `info` names, if it is one.
    pub fn kind(&self, info: &RequestInfo) -> Option<SubresourceKind> {
        if info.subresource.is_empty() {
            return None;
        }
        let key = (
            info.api_group.clone(),
            info.resource.clone(),
            info.subresource.clone(),
        );
        self.map.get(&key).copied()
    }
}

/// Whether the request runs without the bound (a watch, a stream, a connection), from its
/// [`RequestInfo`].
pub fn is_long_running(request: &Request, subresources: &LongRunningSubresources) -> bool {
    request
        .extensions()
        .get::<RequestInfo>()
        .is_some_and(|i| i.verb == Verb::Watch || subresources.kind(i).is_some())
}

/// Runs `serve` (the rest of the request's path) for at most `limit`; then 504.
pub async fn bound(limit: Duration, serve: impl Future<Output = Response>) -> Response {
    match tokio::time::timeout(limit, serve).await {
        Ok(response) => response,
        Err(_) => {
            Error::timeout("request did not complete within the allowed duration").into_response()
        }
    }
}
