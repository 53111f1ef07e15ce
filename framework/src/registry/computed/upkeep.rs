//! What keeps the mirror current between requests: the provider's pushed changes, and a
//! re-list at an interval while anyone watches (nobody else would see a change before the
//! next read, and a read syncs by itself).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;

use super::mirror::Mirror;
use super::provider::{ChangeStream, Provider};
use crate::lifecycle::ShutdownSignal;

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
