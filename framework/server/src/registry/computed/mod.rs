//! Computed and external resources: a [`Provider`] says what the objects are now; the
//! framework serves them with the semantics of a stored resource.
//!
//! The provider's objects are mirrored into an in-memory backend of their own, and the
//! generic [`Store`] (with its watch cache) serves `get`, `list` and `watch` from it: the
//! same code that serves stored resources gives `apiVersion`/`kind`, label and field
//! selectors, `limit`/`continue` (410 once a token's revision is compacted), tables,
//! resourceVersion and watch events with bookmarks. Each read first writes the diff of the
//! provider's answer to the mirror, so reads are fresh and a resourceVersion moves only when
//! an object changes (and never goes back, across restarts too); watches see the provider's
//! pushed changes, or the diff of a re-list at an interval. Only `get`, `list` and `watch`
//! are served: writes are 405. In process, a [`Reader`] reads the same objects
//! ([`ComputedStorage::reader`]).
//!
//! Serve one with [`VersionBuilder::computed`](crate::server::VersionBuilder::computed), and
//! its other versions with [`VersionBuilder::converted`](crate::server::VersionBuilder::converted);
//! the book's "Computed and external resources" chapter walks through it.

mod diff;
mod mirror;
mod provider;
mod upkeep;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use crate::error::Result;
use crate::lifecycle::ShutdownSignal;
use crate::registry::context::RequestContext;
use crate::registry::options::{GetOptions, ListOptions};
use crate::registry::rest::{
    Getter, Lister, Object, ObjectList, RestStorage, WatchStream, Watcher,
};
use crate::registry::store::{Reader, Store};
use crate::runtime::Resource;
use crate::storage::{Backend, MemoryBackend, Revision};

use mirror::Mirror;
use upkeep::{Follower, Upkeep, Watching};

pub use provider::{Change, ChangeStream, Provider};

/// How often a provider without a change stream is re-listed while anyone watches, unless
/// [`ComputedOptions::relist_interval`] says otherwise.
pub const DEFAULT_RELIST_INTERVAL: Duration = Duration::from_secs(10);

/// How long the mirror keeps history (kube-apiserver compacts etcd every 5 minutes): a
/// `continue` token or a watch's resourceVersion older than this may get 410 Expired.
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(300);

/// How a computed resource is kept and served.
///
/// ```
/// use std::time::Duration;
/// use extension_apiserver::registry::computed::ComputedOptions;
///
/// let options = ComputedOptions::default().relist_interval(Duration::from_secs(2));
/// ```
#[derive(Clone, Debug)]
pub struct ComputedOptions {
    relist_interval: Option<Duration>,
    compaction_interval: Duration,
    bookmark_interval: Option<Duration>,
    watch_cache: bool,
}

impl Default for ComputedOptions {
    fn default() -> Self {
        Self {
            relist_interval: None,
            compaction_interval: DEFAULT_COMPACTION_INTERVAL,
            bookmark_interval: None,
            watch_cache: true,
        }
    }
}

impl ComputedOptions {
    /// Re-list the provider every `interval` while anyone watches, and send watchers what
    /// changed. Default: [`DEFAULT_RELIST_INTERVAL`] when the provider has no
    /// [change stream](Provider::changes), never when it has one (set it to also re-list
    /// then, as a safety net for changes the stream may miss).
    pub fn relist_interval(mut self, interval: Duration) -> Self {
        self.relist_interval = Some(interval.max(Duration::from_millis(10)));
        self
    }

    /// Forget the mirror's history older than about `interval` (default
    /// [`DEFAULT_COMPACTION_INTERVAL`]): older `continue` tokens and watch resourceVersions
    /// get 410 Expired, as from kube-apiserver after its etcd compaction.
    pub fn compaction_interval(mut self, interval: Duration) -> Self {
        self.compaction_interval = interval.max(Duration::from_millis(10));
        self
    }

    /// Send watch bookmarks every `interval` instead of kube-apiserver's minute.
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = Some(interval);
        self
    }

    /// Whether a watch cache serves lists and watches of the mirror (default: yes; the
    /// server turns it off with `--watch-cache=false`).
    pub fn watch_cache(mut self, on: bool) -> Self {
        self.watch_cache = on;
        self
    }

    /// Whether a watch cache is on.
    pub fn has_watch_cache(&self) -> bool {
        self.watch_cache
    }
}

/// The `get`, `list` and `watch` of a computed resource, from its [`Provider`].
///
/// Usually made by [`VersionBuilder::computed`](crate::server::VersionBuilder::computed);
/// by hand for a [`RestStorage`] of your own:
///
/// ```no_run
/// # use extension_apiserver::prelude::*;
/// # use extension_apiserver::registry::computed::{ComputedOptions, ComputedStorage, Provider};
/// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// # #[resource(group = "example.com", version = "v1", kind = "Clock")]
/// # struct Clock { #[serde(default)] metadata: ObjectMeta }
/// # struct Clocks;
/// # #[extension_apiserver::async_trait]
/// # impl Provider for Clocks {
/// #     type Object = Clock;
/// #     async fn list(&self, _: Option<&str>) -> extension_apiserver::Result<Vec<Clock>> { Ok(vec![]) }
/// # }
/// # async fn f() {
/// let storage = ComputedStorage::new(Clocks, ComputedOptions::default());
/// let rest = storage.rest_storage(); // get, list, watch
/// # }
/// ```
pub struct ComputedStorage<P: Provider> {
    mirror: Arc<Mirror<P>>,
    watchers: Arc<watch::Sender<usize>>,
    upkeep: Arc<Upkeep>,
}

impl<P: Provider> Clone for ComputedStorage<P> {
    fn clone(&self) -> Self {
        Self {
            mirror: self.mirror.clone(),
            watchers: self.watchers.clone(),
            upkeep: self.upkeep.clone(),
        }
    }
}

impl<P: Provider> ComputedStorage<P> {
    /// Serves `provider`'s objects. Must be called within a tokio runtime: the re-list, the
    /// provider's change stream and the mirror's compaction run in the background until the
    /// last clone of the storage (and of its [`rest_storage`](Self::rest_storage)) is dropped.
    pub fn new(provider: P, options: ComputedOptions) -> Self {
        Self::shared(Arc::new(provider), options)
    }

    /// [`new`](Self::new) with a provider shared with other code.
    pub fn shared(provider: Arc<P>, options: ComputedOptions) -> Self {
        let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::starting_at(first_revision()));
        let mut store = Store::<P::Object>::new(backend.clone(), "");
        if let Some(interval) = options.bookmark_interval {
            store = store.with_bookmark_interval(interval);
        }
        if options.watch_cache {
            store = store.with_watch_cache();
        }
        let mirror = Arc::new(Mirror::new(provider.clone(), backend.clone(), store));
        let stop = ShutdownSignal::new();
        let watchers = Arc::new(watch::Sender::new(0));
        let changes = provider.changes();
        let relist = match (options.relist_interval, &changes) {
            (Some(interval), _) => Some(interval),
            (None, None) => Some(DEFAULT_RELIST_INTERVAL),
            (None, Some(_)) => None,
        };
        if let Some(changes) = changes {
            tokio::spawn(upkeep::follow(mirror.clone(), changes, stop.clone()));
        }
        if let Some(interval) = relist {
            let watching = watchers.subscribe();
            tokio::spawn(upkeep::relist(
                mirror.clone(),
                interval,
                watching,
                stop.clone(),
            ));
        }
        crate::storage::compactor::spawn(backend, options.compaction_interval, stop.clone());
        Self {
            mirror,
            watchers,
            upkeep: Arc::new(Upkeep(stop)),
        }
    }

    /// Ends the background work when `shutdown` fires too (the server's, say), not only when
    /// the storage is dropped.
    pub fn stop_on(&self, shutdown: ShutdownSignal) {
        let own = self.upkeep.0.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => own.trigger(),
                _ = own.cancelled() => {}
            }
        });
    }

    /// A typed reader of the provider's objects, in process: its `get` and `list` ask the
    /// provider first, as a request does; its `list_cached` and `get_cached` read the
    /// mirror's watch cache, which the first of them starts keeping current for as long as
    /// the reader (or a clone) lives, as an informer would (see [`Reader::list_cached`]).
    ///
    /// ```
    /// # use extension_apiserver::prelude::*;
    /// # use extension_apiserver::registry::computed::{ComputedOptions, ComputedStorage, Provider};
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Clock")]
    /// # struct Clock { #[serde(default)] metadata: ObjectMeta }
    /// struct Clocks;
    ///
    /// #[extension_apiserver::async_trait]
    /// impl Provider for Clocks {
    ///     type Object = Clock;
    ///     async fn list(&self, _: Option<&str>) -> extension_apiserver::Result<Vec<Clock>> {
    ///         let utc = ObjectMeta { name: Some("utc".into()), ..Default::default() };
    ///         Ok(vec![Clock { metadata: utc }])
    ///     }
    /// }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let clocks = ComputedStorage::new(Clocks, ComputedOptions::default()).reader();
    /// assert!(clocks.get(None, "utc").await?.is_some());
    /// assert_eq!(clocks.list(None).await?.len(), 1);
    /// # Ok::<(), extension_apiserver::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn reader(&self) -> Reader<P::Object> {
        let source = Arc::new(Follower::new(self.clone()));
        Reader::of_mirror(self.mirror.store.clone(), source)
    }

    /// `get`, `list` and `watch` of the resource, for its path (`{plural}`).
    pub fn rest_storage(&self) -> RestStorage {
        let me = Arc::new(self.clone());
        RestStorage::new::<P::Object>(<P::Object as Resource>::INFO)
            .with_getter(me.clone())
            .with_lister(me.clone())
            .with_watcher(me)
    }
}

/// Where a mirror's revisions start: the microseconds since the Unix epoch. The mirror is
/// rebuilt when the server restarts; starting above every revision the previous run gave out
/// (it would have to have made more than a million changes a second to reach this one), a
/// client resuming a watch or a list from one of those gets 410 Expired and lists again,
/// instead of silently missing the changes a reused revision would hide.
fn first_revision() -> Revision {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Revision::try_from(since_epoch.as_micros()).unwrap_or(Revision::MAX / 2)
}

#[async_trait]
impl<P: Provider> Getter for ComputedStorage<P> {
    async fn get(&self, ctx: &RequestContext, name: &str, options: &GetOptions) -> Result<Value> {
        self.mirror.sync_get(ctx.namespace.as_deref(), name).await?;
        self.mirror.store.get(ctx, name, options).await
    }

    async fn get_object(
        &self,
        ctx: &RequestContext,
        name: &str,
        options: &GetOptions,
    ) -> Result<Object> {
        self.mirror.sync_get(ctx.namespace.as_deref(), name).await?;
        self.mirror.store.get_object(ctx, name, options).await
    }
}

#[async_trait]
impl<P: Provider> Lister for ComputedStorage<P> {
    async fn list(&self, ctx: &RequestContext, options: &ListOptions) -> Result<ObjectList> {
        // A later page is read at its first page's revision: asking the provider again
        // would change nothing it shows.
        if options.continue_token.is_none() {
            self.mirror.sync_list(ctx.namespace.as_deref()).await?;
        }
        self.mirror.store.list(ctx, options).await
    }
}

#[async_trait]
impl<P: Provider> Watcher for ComputedStorage<P> {
    async fn watch(&self, ctx: &RequestContext, options: &ListOptions) -> Result<WatchStream> {
        self.mirror.sync_list(ctx.namespace.as_deref()).await?;
        let events = self.mirror.store.watch(ctx, options).await?;
        let watching = Watching::start(&self.watchers);
        // The count drops when the client's stream does.
        Ok(Box::pin(events.map(move |event| {
            let _counted = &watching;
            event
        })))
    }
}

#[cfg(test)]
mod tests;
