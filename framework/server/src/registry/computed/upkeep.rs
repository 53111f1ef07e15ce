//! What keeps the mirror current between requests: the provider's pushed changes, and a
//! re-list at an interval while anyone watches (nobody else would see a change before the
//! next read, and a read syncs by itself).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::watch;

use super::ComputedStorage;
use super::mirror::Mirror;
use super::provider::{ChangeStream, Provider};
use crate::error::Result;
use crate::lifecycle::ShutdownSignal;
use crate::registry::store::Source;

/// Applies the provider's changes as they come, until the stream ends or `stop`.
pub(crate) async fn follow<P: Provider>(
    mirror: Arc<Mirror<P>>,
    mut changes: ChangeStream<P::Object>,
    stop: ShutdownSignal,
) {
    loop {
        let change = tokio::select! {
            _ = stop.cancelled() => return,
            change = changes.next() => change,
        };
        let Some(change) = change else {
            tracing::warn!(resource = %kind::<P>(), "the provider's change stream ended; watches now see changes at re-lists");
            return;
        };
        if let Err(e) = mirror.apply(change).await {
            tracing::warn!(resource = %kind::<P>(), error = %e, "applying a pushed change");
        }
    }
}

/// Re-lists every `interval` while `watchers` counts at least one watch, until `stop`.
pub(crate) async fn relist<P: Provider>(
    mirror: Arc<Mirror<P>>,
    interval: Duration,
    mut watchers: watch::Receiver<usize>,
    stop: ShutdownSignal,
) {
    loop {
        let watched = async { watchers.wait_for(|n| *n > 0).await.is_ok() };
        tokio::select! {
            _ = stop.cancelled() => return,
            ok = watched => if !ok { return },
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        if *watchers.borrow() == 0 {
            continue;
        }
        if let Err(e) = mirror.sync_list(None).await {
            tracing::warn!(resource = %kind::<P>(), error = %e, "re-listing the provider");
        }
    }
}

fn kind<P: Provider>() -> String {
    <P::Object as crate::runtime::Resource>::INFO.group_resource()
}

/// Counts one watch for as long as it lives.
pub(crate) struct Watching(Arc<watch::Sender<usize>>);

impl Watching {
    pub(crate) fn start(watchers: &Arc<watch::Sender<usize>>) -> Self {
        watchers.send_modify(|n| *n += 1);
        Self(watchers.clone())
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Ends the background work when the last handle of a computed storage is dropped.
pub(crate) struct Upkeep(pub(crate) ShutdownSignal);

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.0.trigger();
    }
}

/// What a computed resource's [`Reader`](crate::registry::store::Reader) reads through: each
/// read syncs the mirror as a request does, and the first read of the cache makes the reader
/// count as a watch for as long as it lives, so that re-lists keep the mirror current (pushed
/// changes do anyway), as an informer keeps a Go plugin's cache.
pub(crate) struct Follower<P: Provider> {
    /// Keeps the background work alive while the reader lives.
    storage: ComputedStorage<P>,
    following: OnceLock<Watching>,
}

impl<P: Provider> Follower<P> {
    pub(crate) fn new(storage: ComputedStorage<P>) -> Self {
        Self {
            storage,
            following: OnceLock::new(),
        }
    }
}

#[async_trait]
impl<P: Provider> Source for Follower<P> {
    async fn sync_list(&self, namespace: Option<&str>) -> Result<()> {
        self.storage.mirror.sync_list(namespace).await
    }

    async fn sync_get(&self, namespace: Option<&str>, name: &str) -> Result<()> {
        self.storage.mirror.sync_get(namespace, name).await
    }

    fn follow(&self) -> bool {
        let mirror = &self.storage.mirror;
        self.following.get_or_init(|| {
            // The first full list at once, not at the first re-list; without a runtime here,
            // the re-list (or a list through the reader) brings it.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let mirror = mirror.clone();
                runtime.spawn(async move {
                    if let Err(e) = mirror.sync_list(None).await {
                        tracing::warn!(resource = %kind::<P>(), error = %e, "listing the provider for a reader's cache");
                    }
                });
            }
            Watching::start(&self.storage.watchers)
        });
        mirror.listed_all()
    }
}
