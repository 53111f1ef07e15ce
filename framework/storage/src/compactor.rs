//! The compactor: forgets history older than one interval, as kube-apiserver compacts etcd.
//! At each tick it compacts to the revision it saw at the previous tick, so a watcher or a
//! paginated list always has at least one interval to catch up before it gets 410.

use std::sync::Arc;
use std::time::Duration;

use crate::Backend;
use crate::lifecycle::ShutdownSignal;

/// Starts compacting `backend` every `interval` until `shutdown`.
pub fn spawn(backend: Arc<dyn Backend>, interval: Duration, shutdown: ShutdownSignal) {
    tokio::spawn(async move {
        let mut previous = 0;
        let mut ticker = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            if previous > 0 {
                if let Err(e) = backend.compact(previous).await {
                    tracing::warn!(error = %e, revision = previous, "compaction failed");
                }
            }
            match backend.current_revision().await {
                Ok(r) => previous = r,
                Err(e) => tracing::warn!(error = %e, "cannot read the current revision"),
            }
        }
    });
}
