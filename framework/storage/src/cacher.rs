//! The watch cache: the current objects of one resource and a window of its recent events,
//! kept in memory from one backend watch, so that many watchers and most lists cost the
//! backend nothing.
//!
//! A [`Cacher`] lists its prefix once, then follows it with one
//! [`watch_with_progress`](Backend::watch_with_progress). Objects are kept as the bytes a
//! client receives (made once per write by the [`EncodeFn`] its owner gives), so neither a
//! list nor a fan-out to a thousand watchers encodes an object again. Watchers subscribe to a
//! bounded broadcast of events: one that falls more than its capacity behind is told so and
//! its watch ends, without slowing the others or holding memory for it. A watcher whose
//! client stops reading is ended too, once it has [`CacherOptions::watcher_buffer`] events
//! waiting and takes none for [`CacherOptions::block_timeout`] (kube's cacher: "Forcing
//! watcher close due to unresponsiveness"), by the cache's own check, since nothing polls
//! the watch of a client that does not read.
//!
//! When the backend watch fails (etcd gone, history compacted under a stalled cache) the cache
//! stops serving, ends every watch that followed it, and starts over with a fresh list. While
//! it is not ready, callers read the backend directly.

use std::any::TypeId;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::ops::Bound;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::BroadcastStream;

use super::arena::Arena;
use super::backend::{
    Backend, EventType, KeyValue, ListRequest, Revision, StorageError, WatchItem,
};
use super::keyset::{self, OrderedSet};
pub use super::repeated::Encoded;
use super::repeated::{Common, Commons, Split};
use crate::metrics::{WriteStage, WriteVerb, write_stage};

/// Makes the bytes a client receives for a stored key-value (its `resourceVersion` set from
/// the key-value's `mod_revision`), with the parts of them that other objects may repeat
/// ([`Encoded`]; the cache keeps those once). Called once per write and once per object at
/// each list of the backend.
pub type EncodeFn = Arc<dyn Fn(&KeyValue) -> Result<Encoded, StorageError> + Send + Sync>;

/// Sizes of a cache.
#[derive(Clone, Copy, Debug)]
pub struct CacherOptions {
    /// How many recent events are kept for watches that resume from an older revision
    /// (kube-apiserver's default window is 100 events; it grows to 100 × 1024 under load).
    pub window: usize,
    /// How many bytes the window's events may weigh together (each its new state and the
    /// state before; `--watch-cache-window-bytes`): the oldest go first, so large objects
    /// written often cannot fill memory with past states. 0: no bound but `window`.
    pub window_bytes: usize,
    /// How many events a watcher may fall behind before its watch is ended.
    pub watcher_lag: usize,
    /// How many events a watcher may have waiting before it counts as blocked: kube's
    /// `cacheWatcher` input buffer.
    pub watcher_buffer: usize,
    /// How long a blocked watcher may take no event before its watch is ended and counted
    /// in `apiserver_terminated_watchers_total`. kube's dispatcher waits 100 ms shared by
    /// every blocked watcher of an event, since it waits for them; here no watcher holds up
    /// another, so its client gets longer to catch up.
    pub block_timeout: Duration,
}

/// [`CacherOptions::watcher_buffer`]'s default.
pub const WATCHER_BUFFER: usize = 256;

/// [`CacherOptions::block_timeout`]'s default.
pub const BLOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// [`CacherOptions::window_bytes`]' default: a window of 1,024 events of objects of a few
/// kilobytes fits many times over; one of objects near the size limit (1.5 MiB) keeps the
/// last twenty or so updates.
pub const DEFAULT_WINDOW_BYTES: usize = 64 << 20;

impl Default for CacherOptions {
    fn default() -> Self {
        Self {
            window: 1024,
            window_bytes: DEFAULT_WINDOW_BYTES,
            watcher_lag: 1024,
            watcher_buffer: WATCHER_BUFFER,
            block_timeout: BLOCK_TIMEOUT,
        }
    }
}

/// One object as the cache keeps it: one byte string holding its revision, its key (after
/// the cache's prefix) and the bytes a client receives, packed with others into the cache's
/// shared buffers (see `storage/arena.rs`), and, when it has parts other objects of the cache
/// repeat (its JSON's beginning, its `managedFields`), a reference to them, kept once for all
/// (see `storage/repeated.rs`). Cheap to clone (reference counts).
///
/// One string (and at most one reference), not a struct of a key, a byte buffer and their
/// headers, because the cache holds one per stored object: what it costs per object is what
/// the cache costs.
#[derive(Clone)]
pub struct CachedObject {
    packed: Bytes,
    /// The parts shared with other objects. With them, the packed string has after its key
    /// where the repeated part goes in the object's own bytes (4 bytes, little-endian).
    common: Option<Arc<Common>>,
}

/// `mod_revision` (8 bytes) and the key's length (4 bytes), little-endian, before the key.
const HEADER: usize = 12;

/// The offset of the repeated part in an object's own bytes, after the key when it shares parts.
const AT: usize = 4;

impl CachedObject {
    fn new(arena: &mut Arena, key: &str, split: Split<'_>, mod_revision: Revision) -> Self {
        let revision = mod_revision.to_le_bytes();
        let key_len = (key.len() as u32).to_le_bytes();
        let at = (split.own.0.len() as u32).to_le_bytes();
        let at: &[u8] = if split.common.is_some() { &at } else { &[] };
        let packed = arena.pack(&[
            &revision,
            &key_len,
            key.as_bytes(),
            at,
            split.own.0,
            split.own.1,
        ]);
        Self {
            packed,
            common: split.common,
        }
    }

    /// The same object in `arena` (a copy of its bytes; its shared parts stay shared).
    fn copy_into(&self, arena: &mut Arena) -> Self {
        Self {
            packed: arena.pack(&[&self.packed]),
            common: self.common.clone(),
        }
    }

    /// Bytes the cache holds for this object alone.
    fn size(&self) -> usize {
        self.packed.len()
    }

    /// The revision of the write that produced this state (for a deleted object, the delete).
    pub fn mod_revision(&self) -> Revision {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&self.packed[..8]);
        Revision::from_le_bytes(bytes)
    }

    fn key_len(&self) -> usize {
        let mut bytes = [0; 4];
        bytes.copy_from_slice(&self.packed[8..HEADER]);
        u32::from_le_bytes(bytes) as usize
    }

    /// The key after the cache's prefix, as bytes (UTF-8; byte order is key order).
    fn key_bytes(&self) -> &[u8] {
        &self.packed[HEADER..HEADER + self.key_len()]
    }

    /// The object's key after the cache's prefix ([`Cacher::relative`] gives a prefix of keys
    /// in the same terms).
    pub fn key_suffix(&self) -> &str {
        std::str::from_utf8(self.key_bytes()).unwrap_or_default()
    }

    /// Where the object's own bytes start in the packed string.
    fn own_start(&self) -> usize {
        HEADER + self.key_len() + if self.common.is_some() { AT } else { 0 }
    }

    /// What a client receives, in the order it goes: the shared beginning, the object's own
    /// bytes up to the repeated part, the repeated part, and the rest of its own (the shared
    /// ones empty when it shares none).
    pub fn parts(&self) -> [&[u8]; 4] {
        let own = &self.packed[self.own_start()..];
        let Some(common) = &self.common else {
            return [&[], own, &[], &[]];
        };
        let start = HEADER + self.key_len();
        let mut at = [0; 4];
        at.copy_from_slice(&self.packed[start..start + AT]);
        let (before, after) = own.split_at((u32::from_le_bytes(at) as usize).min(own.len()));
        [&common.head, before, &common.repeated, after]
    }

    /// The length of what a client receives.
    pub fn json_len(&self) -> usize {
        self.parts().iter().map(|part| part.len()).sum()
    }

    /// Appends what a client receives (JSON with `metadata.resourceVersion`) to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let parts = self.parts();
        out.reserve(parts.iter().map(|part| part.len()).sum());
        parts.iter().for_each(|part| out.extend_from_slice(part));
    }

    /// What a client receives, whole: borrowed when the object shares no part, else copied
    /// together.
    pub fn to_json(&self) -> Cow<'_, [u8]> {
        match self.parts() {
            [[], own, [], []] => Cow::Borrowed(own),
            _ => {
                let mut json = Vec::new();
                self.write_json(&mut json);
                Cow::Owned(json)
            }
        }
    }

    /// Calls `read` with what a client receives, whole, put together (when the object shares
    /// parts) in a buffer of the thread's, so that reading many objects (a list with
    /// selectors) allocates nothing per object.
    pub fn with_json<R>(&self, read: impl FnOnce(&[u8]) -> R) -> R {
        thread_local! {
            static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
        }
        if self.common.is_none() {
            return read(&self.packed[self.own_start()..]);
        }
        // Taken out while `read` runs: a `read` that reads another object gets a new buffer.
        let mut scratch = SCRATCH.take();
        scratch.clear();
        self.write_json(&mut scratch);
        let result = read(&scratch);
        if scratch.capacity() <= 1 << 16 {
            SCRATCH.set(scratch);
        }
        result
    }

    /// At least [`CachedObject::json_len`], known without reading the object's bytes:
    /// sizing a list of many objects by their exact lengths would load each one's header
    /// from memory once more.
    pub fn json_len_bound(&self) -> usize {
        self.packed.len() - HEADER
            + self
                .common
                .as_ref()
                .map_or(0, |common| common.head.len() + common.repeated.len())
    }

    /// Starts loading the object's bytes into the CPU's cache without waiting for them: a
    /// walk that copies many objects (a list) asks for the next few while it copies one,
    /// instead of stalling on each object's first byte. (Shared parts are read by many
    /// objects, so they are in the cache already.)
    pub fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        for line in self.packed.chunks(64) {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: a prefetch only hints the cache; it reads nothing and never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }

    /// What a client receives, as `Bytes` for a response body: sharing the cache's buffer
    /// (no copy) when the object shares no part, else copied together.
    pub fn encoded(&self) -> Bytes {
        match self.common {
            None => self.packed.slice(self.own_start()..),
            Some(_) => {
                let mut json = Vec::with_capacity(self.json_len());
                self.write_json(&mut json);
                Bytes::from(json)
            }
        }
    }
}

impl PartialEq for CachedObject {
    fn eq(&self, other: &Self) -> bool {
        self.mod_revision() == other.mod_revision()
            && self.key_bytes() == other.key_bytes()
            && self.to_json() == other.to_json()
    }
}

impl Eq for CachedObject {}

impl std::fmt::Debug for CachedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedObject")
            .field("key", &self.key_suffix())
            .field("mod_revision", &self.mod_revision())
            .field("bytes", &self.json_len())
            .finish()
    }
}

/// A cached object in the cache's ordered set, found by its key suffix.
#[derive(Clone)]
struct ByKey(CachedObject);

impl std::borrow::Borrow<[u8]> for ByKey {
    fn borrow(&self) -> &[u8] {
        self.0.key_bytes()
    }
}

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key_bytes() == other.0.key_bytes()
    }
}

impl Eq for ByKey {}

impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key_bytes().cmp(other.0.key_bytes())
    }
}

/// The cache's objects in key order. A counted set (`storage/keyset.rs`): the rank of a key
/// costs O(log n), so a range knows how many objects it holds without walking them
/// ([`CachedRange`]), and blocks filled by keys in order stay full (32 B an object).
type Objects = OrderedSet<ByKey>;

/// Cached objects of a range of keys, in key order, that knows how many it has not yielded
/// yet without reading them: a page's `remainingItemCount` costs the page, not the rest of
/// the collection (a walk of a million objects by pages of 500 counted 500,000 keys a page
/// on average with an uncounted tree).
pub struct CachedRange<'a> {
    objects: keyset::Iter<'a, ByKey>,
    left: usize,
}

impl<'a> CachedRange<'a> {
    /// The objects whose key (relative to the cache's prefix) starts with `prefix`, from
    /// `start` on, in key order.
    fn under(objects: &'a Objects, prefix: &[u8], start: Bound<&[u8]>) -> Self {
        let from = match start {
            Bound::Included(key) => objects.rank(key),
            Bound::Excluded(key) => objects.rank(key) + usize::from(objects.contains(key)),
            Bound::Unbounded => 0,
        };
        let to = match prefix_end(prefix) {
            Some(end) => objects.rank(end.as_slice()),
            None => objects.len(),
        }
        .max(from);
        CachedRange {
            objects: objects.range_idx(from..to),
            left: to - from,
        }
    }
}

impl<'a> Iterator for CachedRange<'a> {
    type Item = &'a CachedObject;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.objects.next()?;
        self.left -= 1;
        Some(&next.0)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }

    fn count(self) -> usize {
        self.left
    }
}

impl ExactSizeIterator for CachedRange<'_> {}

/// One change, as the cache hands it to watchers.
#[derive(Debug)]
pub struct CachedEvent {
    /// Put or delete.
    pub event_type: EventType,
    /// The new state; for a delete, the last state at the delete's revision.
    pub object: CachedObject,
    /// The state before (absent for a create).
    pub prev: Option<CachedObject>,
    /// Other encodings of `object` (another version of it), each made once for every watcher
    /// that asks, as kube's cacher keeps one serialization of an event per encoder.
    views: Mutex<Vec<(TypeId, Bytes)>>,
}

impl CachedEvent {
    /// A change to `object` (the state before it: `prev`).
    pub fn new(event_type: EventType, object: CachedObject, prev: Option<CachedObject>) -> Self {
        Self {
            event_type,
            object,
            prev,
            views: Mutex::default(),
        }
    }

    /// The encoding `id` of this event's object, made by `make` for the first watcher that
    /// asks and kept for the others (and for as long as the event is kept). A watcher asking
    /// while another makes it waits for that one; a failure is not kept.
    pub fn view<E>(
        &self,
        id: TypeId,
        make: impl FnOnce(&CachedObject) -> Result<Bytes, E>,
    ) -> Result<Bytes, E> {
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, bytes)) = views.iter().find(|(view, _)| *view == id) {
            return Ok(bytes.clone());
        }
        let bytes = make(&self.object)?;
        views.push((id, bytes.clone()));
        Ok(bytes)
    }

    /// The revision of the write.
    pub fn revision(&self) -> Revision {
        self.object.mod_revision()
    }

    /// What the event weighs in the window's byte bound: its new state and the state before,
    /// whether or not other events or the current objects share them (a watcher's view of
    /// the event in another version is about as large again).
    fn weight(&self) -> usize {
        self.object.size() + self.prev.as_ref().map_or(0, CachedObject::size)
    }

    /// The bytes of the states this event keeps that are not current: the state before, and
    /// a delete's last state. (A put's new state is current or the state before of a later
    /// event.)
    fn held_by_window(&self) -> usize {
        let deleted = match self.event_type {
            EventType::Delete => self.object.size(),
            EventType::Put => 0,
        };
        deleted + self.prev.as_ref().map_or(0, CachedObject::size)
    }
}

/// What a watcher receives from the cache.
#[derive(Clone, Debug)]
pub enum CacheItem {
    /// A change under the cache's prefix.
    Event(Arc<CachedEvent>),
    /// Nothing more up to this revision.
    Progress(Revision),
}

/// Why a watch cannot be served from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMiss {
    /// The cache is (re)loading.
    NotReady,
    /// The start revision is older than the window of events; the backend may still have it.
    TooOld,
}

/// A watch served by the cache: what to send first, then what follows.
pub struct CacheWatch {
    /// The revision the watch starts from: the snapshot's, or the one asked for.
    pub revision: Revision,
    /// For a watch without a start revision: every object under the prefix, in key order.
    pub initial: Vec<CachedObject>,
    /// For a watch from a revision: the events after it still in the window, in order.
    pub replay: Vec<Arc<CachedEvent>>,
    /// Everything after `revision`. Items at or below it may repeat and must be skipped.
    /// Events of the whole cache: the watcher keeps those whose
    /// [`CachedObject::key_suffix`] starts with `relative_prefix`.
    pub live: LiveEvents,
    /// The watch's prefix after the cache's, in the terms of [`CachedObject::key_suffix`].
    pub relative_prefix: Arc<str>,
}

/// The cache's items for one watcher, in order, read straight from the cache's broadcast
/// (no task or channel of the watcher's own). Ends when the watcher falls more than
/// [`CacherOptions::watcher_lag`] items behind, when the cache reloads, or when the cache
/// ended it for taking nothing while blocked ([`CacherOptions::block_timeout`]).
pub struct LiveEvents {
    items: BroadcastStream<CacheItem>,
    cursor: Arc<Cursor>,
}

/// How far one watcher has read, as the cache's check of unresponsive watchers sees it.
struct Cursor {
    /// Items of the broadcast the watcher has taken (or lost by lagging), in the terms of
    /// `Shared::sent`.
    taken: AtomicU64,
    /// The cache ended the watch.
    ended: AtomicBool,
}

impl Stream for LiveEvents {
    type Item = CacheItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<CacheItem>> {
        let this = self.get_mut();
        if this.cursor.ended.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        match ready!(this.items.poll_next_unpin(cx)) {
            Some(Ok(item)) => {
                this.cursor.taken.fetch_add(1, Ordering::Relaxed);
                Poll::Ready(Some(item))
            }
            // Lagged past the broadcast, or the cache reloaded: either way the watcher
            // resumes from the last event it got, as from any ended watch.
            Some(Err(_)) | None => {
                this.cursor.ended.store(true, Ordering::Relaxed);
                Poll::Ready(None)
            }
        }
    }
}

impl std::fmt::Debug for LiveEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveEvents")
            .field("taken", &self.cursor.taken.load(Ordering::Relaxed))
            .field("ended", &self.cursor.ended.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A watch cache of one prefix. Cheap to clone; the cache stops with its last clone.
#[derive(Clone)]
pub struct Cacher {
    shared: Arc<Shared>,
    _task: Arc<(TaskGuard, TaskGuard)>,
}

impl std::fmt::Debug for Cacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cacher")
            .field("prefix", &self.shared.prefix)
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

struct TaskGuard(JoinHandle<()>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Shared {
    backend: Arc<dyn Backend>,
    prefix: String,
    encode: EncodeFn,
    options: CacherOptions,
    state: RwLock<State>,
    /// The cache's revision while it is ready; `None` while it is not.
    revision: watch::Sender<Option<Revision>>,
    metrics: CacheMetrics,
    /// Items sent on the broadcast, in all (counted under the state's write lock, so a
    /// watcher subscribing under its read lock knows where it starts).
    sent: AtomicU64,
    /// Watchers opened since the last check of unresponsive watchers ([`reap`]).
    opened: Mutex<Vec<Weak<Cursor>>>,
}

/// kube's watch-cache metrics of one resource, and `apiserver_storage_objects`, which the
/// cache knows without asking the backend.
struct CacheMetrics {
    objects: prometheus::IntGauge,
    events: prometheus::IntCounter,
    revision: prometheus::IntGauge,
    /// `apiserver_terminated_watchers_total` of the resource.
    terminated: prometheus::IntCounter,
}

impl CacheMetrics {
    fn new(prefix: &str) -> Self {
        let metrics = crate::metrics::global();
        let resource = crate::metrics::group_resource_of_prefix(prefix);
        // `{plural}.{group}`: a plural has no dot.
        let (plural, group) = resource.split_once('.').unwrap_or((&resource, ""));
        let terminated = metrics
            .terminated_watchers
            .with_label_values(&[group, plural]);
        let resource = [resource.as_str()];
        Self {
            objects: metrics.storage_objects_of(resource[0]),
            events: metrics.watch_cache_events.with_label_values(&resource),
            revision: metrics.watch_cache_revision.with_label_values(&resource),
            terminated,
        }
    }

    fn record(&self, state: &State) {
        self.objects.set(state.objects.len() as i64);
        self.revision.set(state.revision);
    }
}

struct State {
    ready: bool,
    revision: Revision,
    objects: Objects,
    /// Where `objects` (and the window's) are kept.
    packed: Packed,
    /// The bytes of `objects`.
    live_bytes: usize,
    /// The bytes of the states only the window holds ([`CachedEvent::held_by_window`]).
    /// With `live_bytes`: what `arena` would hold without dead objects.
    window_bytes: usize,
    /// What the window's events weigh ([`CachedEvent::weight`]), bounded by
    /// [`CacherOptions::window_bytes`].
    window_weight: usize,
    /// How many times `arena` was compacted (for tests and logs).
    compactions: u64,
    window: VecDeque<Arc<CachedEvent>>,
    /// Every event after this revision is in the window.
    window_start: Revision,
    live: broadcast::Sender<CacheItem>,
}

/// Where a cache's objects are kept: their own bytes packed in an arena, the parts they share
/// once (`storage/repeated.rs`).
#[derive(Default)]
struct Packed {
    arena: Arena,
    commons: Commons,
}

/// How long the cache waits before listing again after a failure, at most.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Cacher {
    /// Starts a cache of everything under `prefix` on `backend`. Must be called within a tokio
    /// runtime; the cache loads in the background ([`Cacher::is_ready`]).
    pub fn new(
        backend: Arc<dyn Backend>,
        prefix: &str,
        encode: EncodeFn,
        options: CacherOptions,
    ) -> Self {
        let (live, _) = broadcast::channel(options.watcher_lag.max(1));
        let shared = Arc::new(Shared {
            backend,
            prefix: prefix.to_owned(),
            encode,
            options,
            state: RwLock::new(State {
                ready: false,
                revision: 0,
                objects: Objects::new(),
                packed: Packed::default(),
                live_bytes: 0,
                window_bytes: 0,
                window_weight: 0,
                compactions: 0,
                window: VecDeque::new(),
                window_start: 0,
                live,
            }),
            revision: watch::Sender::new(None),
            metrics: CacheMetrics::new(prefix),
            sent: AtomicU64::new(0),
            opened: Mutex::default(),
        });
        let task = tokio::spawn(run(Arc::clone(&shared)));
        let reaper = tokio::spawn(reap(Arc::downgrade(&shared)));
        Self {
            shared,
            _task: Arc::new((TaskGuard(task), TaskGuard(reaper))),
        }
    }

    /// The prefix this cache holds.
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// `prefix` (a key or a prefix of keys under the cache's prefix) after the cache's prefix:
    /// the terms of `CachedObject::key_suffix`.
    pub fn relative<'a>(&self, prefix: &'a str) -> &'a str {
        self.shared.suffix(prefix)
    }

    /// Whether the cache is loaded and following the backend.
    pub fn is_ready(&self) -> bool {
        self.revision().is_some()
    }

    /// The revision the cache is current at; `None` while it is not ready.
    pub fn revision(&self) -> Option<Revision> {
        *self.shared.revision.borrow()
    }

    /// Waits until the cache is ready and current at `revision` or later; false after
    /// `timeout`.
    pub async fn wait_for(&self, revision: Revision, timeout: Duration) -> bool {
        let mut current = self.shared.revision.subscribe();
        let reached = async move {
            current
                .wait_for(|r| r.is_some_and(|r| r >= revision))
                .await
                .is_ok()
        };
        tokio::time::timeout(timeout, reached)
            .await
            .unwrap_or(false)
    }

    /// Every object whose key starts with `prefix` (which must start with the cache's), in key
    /// order, and the revision they are current at; `None` while the cache is not ready.
    pub fn snapshot(&self, prefix: &str) -> Option<(Vec<CachedObject>, Revision)> {
        self.visit(prefix, |objects, revision| {
            (objects.cloned().collect(), revision)
        })
    }

    /// Hands `visit` the objects whose key starts with `prefix` (which must start with the
    /// cache's), in key order, and the revision they are current at, and returns what it
    /// returns; `None` while the cache is not ready. `visit` runs under the cache's read lock:
    /// it takes what it needs (a page) and returns.
    pub fn visit<R>(
        &self,
        prefix: &str,
        visit: impl FnOnce(&mut CachedRange<'_>, Revision) -> R,
    ) -> Option<R> {
        let state = self.shared.state.read().ok()?;
        if !state.ready {
            return None;
        }
        let prefix = self.shared.suffix(prefix).as_bytes();
        let mut objects = CachedRange::under(&state.objects, prefix, Bound::Included(prefix));
        Some(visit(&mut objects, state.revision))
    }

    /// The object at `key` when the cache is ready and current at `revision` or later:
    /// `Some(None)` when there is none. `None` when the cache cannot answer.
    pub fn get_at_least(&self, key: &str, revision: Revision) -> Option<Option<CachedObject>> {
        let state = self.shared.state.read().ok()?;
        if !state.ready || state.revision < revision {
            return None;
        }
        let found = state.objects.get(self.shared.suffix(key).as_bytes());
        Some(found.map(|entry| entry.0.clone()))
    }

    /// Hands `visit` the objects under `prefix` (which must start with the cache's) whose keys
    /// sort after `start_after`, in key order, when the cache can tell that they are the state
    /// at `revision`: it has every event after `revision`, and none of them is under `prefix`.
    /// `None` otherwise (the caller reads the backend at `revision`). `visit` runs under the
    /// cache's read lock, as for [`Cacher::visit`].
    pub fn visit_unchanged_since<R>(
        &self,
        prefix: &str,
        start_after: &str,
        revision: Revision,
        visit: impl FnOnce(&mut CachedRange<'_>) -> R,
    ) -> Option<R> {
        let state = self.shared.state.read().ok()?;
        if !state.ready || revision < state.window_start || revision > state.revision {
            return None;
        }
        let prefix = self.shared.suffix(prefix).as_bytes();
        let start_after = self.shared.suffix(start_after).as_bytes();
        let changed = state
            .window
            .iter()
            .rev()
            .take_while(|e| e.revision() > revision)
            .any(|e| e.object.key_bytes().starts_with(prefix));
        if changed {
            return None;
        }
        let mut objects = CachedRange::under(&state.objects, prefix, Bound::Excluded(start_after));
        Some(visit(&mut objects))
    }

    /// Opens a watch of the keys under `prefix`: from the current state when `after` is
    /// `None`, else from the events after revision `after`.
    pub fn watch(&self, prefix: &str, after: Option<Revision>) -> Result<CacheWatch, CacheMiss> {
        // Under the read lock no event is applied, so the snapshot or replay and the
        // subscription meet exactly.
        let state = self.shared.state.read().map_err(|_| CacheMiss::NotReady)?;
        if !state.ready {
            return Err(CacheMiss::NotReady);
        }
        let live = self.shared.subscribe(&state);
        let prefix = self.shared.suffix(prefix);
        match after {
            None => Ok(CacheWatch {
                revision: state.revision,
                initial: objects_under(&state.objects, prefix),
                replay: Vec::new(),
                live,
                relative_prefix: prefix.into(),
            }),
            Some(after) if after < state.window_start => Err(CacheMiss::TooOld),
            Some(after) => Ok(CacheWatch {
                revision: after,
                initial: Vec::new(),
                replay: state
                    .window
                    .iter()
                    .filter(|e| {
                        e.revision() > after && e.object.key_bytes().starts_with(prefix.as_bytes())
                    })
                    .cloned()
                    .collect(),
                live,
                relative_prefix: prefix.into(),
            }),
        }
    }
}

/// The objects whose key (relative to the cache's prefix) starts with `prefix`, in key order.
fn objects_under(objects: &Objects, prefix: &str) -> Vec<CachedObject> {
    let prefix = prefix.as_bytes();
    CachedRange::under(objects, prefix, Bound::Included(prefix))
        .cloned()
        .collect()
}

/// The first key after every key that starts with `prefix`: the prefix with its last byte
/// below 0xFF incremented and what follows it dropped (`None`: no key bounds them).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A watcher as the check of unresponsive watchers follows it.
struct Watched {
    cursor: Weak<Cursor>,
    /// Since when it has had a full buffer, and what it had taken then.
    blocked: Option<(Instant, u64)>,
}

/// Ends the watchers whose client stopped reading, until the cache is dropped. As kube's
/// `cacheWatcher.add`: a watcher with a full buffer that takes no event before the timeout
/// is closed and counted. Checked on a timer, since a watch whose client does not read is
/// not polled: its HTTP/2 stream has no window left (or its HTTP/1.1 socket is full).
async fn reap(shared: Weak<Shared>) {
    let period = match shared.upgrade() {
        Some(shared) => (shared.options.block_timeout / 5)
            .clamp(Duration::from_millis(10), Duration::from_secs(1)),
        None => return,
    };
    let mut watched = Vec::new();
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.end_unresponsive(&mut watched, Instant::now());
    }
}

/// Loads, follows, and on failure starts over, until the cache is dropped.
async fn run(shared: Arc<Shared>) {
    const FIRST_BACKOFF: Duration = Duration::from_millis(100);
    let mut backoff = FIRST_BACKOFF;
    loop {
        // `follow` only returns when it fails.
        if let Err(error) = follow(&shared).await {
            tracing::warn!(prefix = %shared.prefix, %error, "watch cache: reloading");
        }
        // A cache that was serving failed afresh: retry soon, not after the last outage's wait.
        if shared.revision.borrow().is_some() {
            backoff = FIRST_BACKOFF;
        }
        shared.unready();
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One life of the cache: list, then apply the watch until it fails.
async fn follow(shared: &Shared) -> Result<(), StorageError> {
    let (objects, arena, revision) = shared.load().await?;
    let mut items = shared
        .backend
        .watch_with_progress(&shared.prefix, revision)
        .await?;
    shared.ready(objects, arena, revision);
    while let Some(item) = items.next().await {
        match item? {
            WatchItem::Event(event) => shared.apply(event)?,
            WatchItem::Progress(revision) => shared.progress(revision),
        }
    }
    Err(StorageError::Unavailable(
        "the backend ended the watch".into(),
    ))
}

impl Shared {
    /// A new watcher of the live events, from the next item sent. Under the state's lock,
    /// so that no item is sent meanwhile.
    fn subscribe(&self, state: &State) -> LiveEvents {
        let cursor = Arc::new(Cursor {
            taken: AtomicU64::new(self.sent.load(Ordering::Relaxed)),
            ended: AtomicBool::new(false),
        });
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&cursor));
        LiveEvents {
            items: BroadcastStream::new(state.live.subscribe()),
            cursor,
        }
    }

    /// Sends `item` to every watcher (none is not an error: nobody watches right now).
    fn send(&self, state: &State, item: CacheItem) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let _ = state.live.send(item);
    }

    /// One check of the watchers: ends those that have had at least `watcher_buffer` items
    /// waiting, and took none, for `block_timeout`; forgets those that ended.
    fn end_unresponsive(&self, watched: &mut Vec<Watched>, now: Instant) {
        let opened =
            std::mem::take(&mut *self.opened.lock().unwrap_or_else(PoisonError::into_inner));
        watched.extend(opened.into_iter().map(|cursor| Watched {
            cursor,
            blocked: None,
        }));
        let sent = self.sent.load(Ordering::Relaxed);
        let buffer = self.options.watcher_buffer.max(1) as u64;
        watched.retain_mut(|watcher| {
            let Some(cursor) = watcher.cursor.upgrade() else {
                return false;
            };
            if cursor.ended.load(Ordering::Relaxed) {
                return false;
            }
            let taken = cursor.taken.load(Ordering::Relaxed);
            let waiting = sent.saturating_sub(taken);
            if waiting < buffer {
                watcher.blocked = None;
                return true;
            }
            match watcher.blocked {
                Some((since, then)) if then == taken => {
                    if now.duration_since(since) < self.options.block_timeout {
                        return true;
                    }
                    cursor.ended.store(true, Ordering::Relaxed);
                    self.metrics.terminated.inc();
                    tracing::info!(
                        prefix = %self.prefix,
                        waiting,
                        "forcing watcher close due to unresponsiveness"
                    );
                    false
                }
                _ => {
                    watcher.blocked = Some((now, taken));
                    true
                }
            }
        });
    }

    /// A key, or a prefix of keys, after the cache's prefix (every key the cache holds starts
    /// with it; it is kept once, not per object).
    fn suffix<'a>(&self, key: &'a str) -> &'a str {
        key.strip_prefix(self.prefix.as_str()).unwrap_or(key)
    }

    /// Every object under the prefix at one revision.
    async fn load(&self) -> Result<(Objects, Packed, Revision), StorageError> {
        let mut objects = Objects::new();
        let mut packed = Packed::default();
        let mut request = ListRequest {
            prefix: self.prefix.clone(),
            limit: 10_000,
            skip_count: true,
            ..ListRequest::default()
        };
        loop {
            let page = self.backend.list(&request).await?;
            request.revision = page.revision;
            for kv in &page.items {
                objects.replace(ByKey(self.encode(&mut packed, kv)?));
            }
            request.start_after = page.items.last().map(|kv| kv.key.clone());
            if !page.more || request.start_after.is_none() {
                return Ok((objects, packed, page.revision));
            }
        }
    }

    /// The object as the cache keeps it. An object that cannot be encoded (corrupt, or in a
    /// version its owner cannot read) fails the cache, as a decoding error fails
    /// kube-apiserver's cacher: while it is not ready, callers read the backend, whose
    /// answer is the object's error, instead of a cache that silently lacks the object.
    fn encode(&self, packed: &mut Packed, kv: &KeyValue) -> Result<CachedObject, StorageError> {
        let encoded = self.encoded(kv)?;
        Ok(self.cached(packed, kv, &encoded))
    }

    /// The object's bytes as clients receive them.
    fn encoded(&self, kv: &KeyValue) -> Result<Encoded, StorageError> {
        (self.encode)(kv).inspect_err(|error| {
            tracing::error!(key = %kv.key, %error, "watch cache: cannot encode a stored object");
        })
    }

    /// `encoded` as the cache keeps it: its own bytes copied into the arena, the parts it
    /// shares with other objects kept once.
    fn cached(&self, packed: &mut Packed, kv: &KeyValue, encoded: &Encoded) -> CachedObject {
        let split = packed.commons.split(encoded);
        CachedObject::new(
            &mut packed.arena,
            self.suffix(&kv.key),
            split,
            kv.mod_revision,
        )
    }

    fn ready(&self, objects: Objects, packed: Packed, revision: Revision) {
        let Ok(mut state) = self.state.write() else {
            return;
        };
        state.live_bytes = objects.iter().map(|entry| entry.0.size()).sum();
        state.window_bytes = 0;
        state.window_weight = 0;
        state.objects = objects;
        state.packed = packed;
        state.window.clear();
        state.window_start = revision;
        state.revision = revision;
        state.ready = true;
        self.metrics.record(&state);
        self.revision.send_replace(Some(revision));
    }

    /// Stops serving and ends every watch that followed the cache: replacing the broadcast
    /// drops its sender, so each receiver sees it closed once it has read what was sent.
    fn unready(&self) {
        let Ok(mut state) = self.state.write() else {
            return;
        };
        state.ready = false;
        state.objects = Objects::new();
        state.packed = Packed::default();
        state.live_bytes = 0;
        state.window_bytes = 0;
        state.window_weight = 0;
        state.window = VecDeque::new();
        state.live = broadcast::channel(self.options.watcher_lag.max(1)).0;
        self.revision.send_replace(None);
    }

    fn apply(&self, event: super::backend::Event) -> Result<(), StorageError> {
        let started = std::time::Instant::now();
        let key: &str = &event.kv.key;
        // Encoded before the lock is taken: readers wait only for the copy into the arena.
        let encoded = self.encoded(&event.kv)?;
        let Ok(mut guard) = self.state.write() else {
            return Ok(());
        };
        let state = &mut *guard;
        let revision = event.revision();
        let object = self.cached(&mut state.packed, &event.kv, &encoded);
        let prev = match event.event_type {
            EventType::Put => {
                state.live_bytes += object.size();
                state.objects.replace(ByKey(object.clone()))
            }
            EventType::Delete => state.objects.take(self.suffix(key).as_bytes()),
        };
        let prev = prev.map(|entry| entry.0);
        let created = prev.is_none();
        if let Some(prev) = &prev {
            state.live_bytes -= prev.size();
        }
        state.revision = revision;
        let cached = Arc::new(CachedEvent::new(event.event_type, object, prev));
        state.window_bytes += cached.held_by_window();
        state.window_weight += cached.weight();
        state.window.push_back(Arc::clone(&cached));
        self.evict(state);
        self.send(state, CacheItem::Event(cached));
        if state
            .packed
            .arena
            .needs_compaction(state.live_bytes + state.window_bytes)
        {
            state.compact();
        }
        self.metrics.events.inc();
        self.metrics.record(state);
        self.revision.send_replace(Some(revision));
        drop(guard);
        // A put of a key the cache did not hold is a create; the stage of a patch or an
        // apply is counted with the updates (the cache cannot tell them apart).
        let verb = match (event.event_type, created) {
            (EventType::Delete, _) => return Ok(()),
            (_, true) => WriteVerb::Create,
            (_, false) => WriteVerb::Update,
        };
        write_stage(verb, WriteStage::WatchCache, started);
        Ok(())
    }

    /// Drops the oldest events while the window is over its count or its bytes; a watch
    /// from a revision before the first one left is then `TooOld` (410 `Expired`, unless the
    /// backend still has it). An event heavier than the whole bound is not kept either.
    fn evict(&self, state: &mut State) {
        let (count, bytes) = (self.options.window.max(1), self.options.window_bytes);
        let over = |state: &State| {
            state.window.len() > count || (bytes > 0 && state.window_weight > bytes)
        };
        while over(state) {
            let Some(old) = state.window.pop_front() else {
                break;
            };
            state.window_start = old.revision();
            state.window_bytes -= old.held_by_window();
            state.window_weight -= old.weight();
        }
    }

    fn progress(&self, revision: Revision) {
        let Ok(mut state) = self.state.write() else {
            return;
        };
        if revision <= state.revision {
            return;
        }
        state.revision = revision;
        self.send(&state, CacheItem::Progress(revision));
        self.revision.send_replace(Some(revision));
    }
}

impl State {
    /// Copies the current objects, and those of the window's events, into a fresh arena, so
    /// that the old one's buffers, full of objects no longer current, are freed (once no list,
    /// watch or response still holds a view into them). A state held in several places (the
    /// set, an event's new state, the next event's state before) is copied once.
    fn compact(&mut self) {
        let mut arena = Arena::new();
        // In key order, so the new set's blocks are full (`storage/keyset.rs`).
        let objects: Objects = self
            .objects
            .iter()
            .map(|entry| ByKey(entry.0.copy_into(&mut arena)))
            .collect();
        // States only the window holds, by the address of their old bytes.
        let mut copies = std::collections::HashMap::new();
        let mut copy = |object: &CachedObject| match objects.get(object.key_bytes()) {
            Some(current) if current.0.mod_revision() == object.mod_revision() => current.0.clone(),
            _ => copies
                .entry(object.packed.as_ptr() as usize)
                .or_insert_with(|| object.copy_into(&mut arena))
                .clone(),
        };
        let window = self
            .window
            .iter()
            .map(|event| {
                let object = copy(&event.object);
                let prev = event.prev.as_ref().map(&mut copy);
                Arc::new(CachedEvent::new(event.event_type, object, prev))
            })
            .collect();
        self.compactions += 1;
        tracing::debug!(
            compactions = self.compactions,
            objects = objects.len(),
            live_bytes = self.live_bytes,
            freed = self
                .packed
                .arena
                .allocated()
                .saturating_sub(arena.allocated()),
            "watch cache: compacted"
        );
        self.objects = objects;
        self.window = window;
        self.packed.arena = arena;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    const WAIT: Duration = Duration::from_secs(10);

    fn plain() -> EncodeFn {
        Arc::new(|kv: &KeyValue| {
            Ok(Encoded::whole(Bytes::from(format!(
                "{}@{}",
                String::from_utf8_lossy(&kv.value),
                kv.mod_revision
            ))))
        })
    }

    fn cacher(backend: &Arc<MemoryBackend>, options: CacherOptions) -> Cacher {
        let backend: Arc<dyn Backend> = backend.clone();
        Cacher::new(backend, "/c/", plain(), options)
    }

    async fn ready_at(cache: &Cacher, backend: &MemoryBackend) {
        let current = backend.current_revision().await.unwrap();
        assert!(
            cache.wait_for(current, WAIT).await,
            "cache never reached {current}"
        );
    }

    /// A list sizes its buffer by the bound: never under the JSON it copies; over it by the
    /// key alone.
    #[test]
    fn the_json_length_bound_covers_the_json_and_the_key_only() {
        let mut arena = Arena::default();
        for (key, json) in [("/k", &b"{}"[..]), ("/ns/a-longer-name", &[b'x'; 700][..])] {
            let object = CachedObject::new(&mut arena, key, Split::whole(json), 3);
            object.prefetch();
            assert_eq!(object.to_json(), json);
            assert_eq!(object.json_len_bound(), json.len() + key.len());
        }
    }

    #[test]
    fn an_events_view_is_made_once_and_failures_are_not_kept() {
        let mut arena = Arena::default();
        let object = CachedObject::new(&mut arena, "/k", Split::whole(b"{}"), 3);
        let event = CachedEvent::new(EventType::Put, object, None);
        let made = std::cell::Cell::new(0);
        let make = |o: &CachedObject| -> Result<Bytes, ()> {
            made.set(made.get() + 1);
            Ok(Bytes::from(format!("v{}", o.mod_revision())))
        };
        struct V1;
        struct V2;
        assert_eq!(event.view(TypeId::of::<V1>(), make).unwrap(), "v3");
        assert_eq!(event.view(TypeId::of::<V1>(), make).unwrap(), "v3");
        assert_eq!(made.get(), 1, "the second watcher gets the first's");
        assert_eq!(
            event.view(TypeId::of::<V2>(), |_| Err::<Bytes, _>(())),
            Err(())
        );
        assert_eq!(event.view(TypeId::of::<V2>(), make).unwrap(), "v3");
        assert_eq!(made.get(), 2, "another view, and the failure was not kept");
    }

    fn text(object: &CachedObject) -> String {
        String::from_utf8(object.to_json().into_owned()).unwrap()
    }

    async fn next(live: &mut LiveEvents) -> Arc<CachedEvent> {
        loop {
            let item = tokio::time::timeout(WAIT, live.next()).await.unwrap();
            if let CacheItem::Event(event) = item.expect("the watch goes on") {
                return event;
            }
        }
    }

    #[test]
    fn a_prefix_ends_before_the_first_key_outside_it() {
        assert_eq!(prefix_end(b"ns/").as_deref(), Some(&b"ns0"[..]));
        assert_eq!(prefix_end(b"a\xff").as_deref(), Some(&b"b"[..]));
        assert_eq!(prefix_end(b""), None);
        assert_eq!(prefix_end(b"\xff\xff"), None);
    }

    #[test]
    fn a_range_knows_how_many_objects_it_has_left_without_reading_them() {
        // Enough keys for the counted tree to hold many nodes, some removed again, under
        // two prefixes and keys that only share a prefix's first bytes.
        let mut arena = Arena::default();
        let mut objects = Objects::new();
        let mut keys = std::collections::BTreeSet::new();
        for i in 0..5000 {
            for key in [
                format!("ns/{i:05}"),
                format!("ns-2/{i:05}"),
                format!("nt/{i}"),
            ] {
                objects.replace(ByKey(CachedObject::new(
                    &mut arena,
                    &key,
                    Split::whole(b"{}"),
                    1,
                )));
                keys.insert(key);
            }
        }
        for i in (0..5000).step_by(7) {
            let key = format!("ns/{i:05}");
            assert!(objects.take(key.as_bytes()).is_some());
            keys.remove(&key);
        }
        let expect = |prefix: &str, start: Bound<&str>| -> Vec<String> {
            keys.range::<str, _>((start, Bound::Unbounded))
                .take_while(|k| k.starts_with(prefix))
                .cloned()
                .collect()
        };
        for (prefix, start) in [
            ("ns/", Bound::Included("ns/")),
            ("ns/", Bound::Excluded("ns/02000")),
            ("ns/", Bound::Excluded("ns/02002")), // a removed key
            ("ns/", Bound::Excluded("ns/04999")),
            ("ns-2/", Bound::Included("ns-2/")),
            ("", Bound::Included("")),
            ("", Bound::Excluded("nt/999")),
            ("zz/", Bound::Included("zz/")),
        ] {
            let want = expect(prefix, start);
            let mut range =
                CachedRange::under(&objects, prefix.as_bytes(), start.map(str::as_bytes));
            assert_eq!(range.len(), want.len(), "{prefix} from {start:?}");
            let page: Vec<String> = range
                .by_ref()
                .take(500)
                .map(|o| o.key_suffix().to_owned())
                .collect();
            assert_eq!(page, want[..want.len().min(500)], "{prefix} from {start:?}");
            assert_eq!(range.len(), want.len().saturating_sub(500));
            assert_eq!(range.count(), want.len().saturating_sub(500));
        }
    }

    #[tokio::test]
    async fn loads_then_follows_with_encoded_objects() {
        let backend = Arc::new(MemoryBackend::new());
        backend.create("/c/a", Bytes::from("A")).await.unwrap();
        backend.create("/other/x", Bytes::from("X")).await.unwrap();
        let cache = cacher(&backend, CacherOptions::default());
        ready_at(&cache, &backend).await;
        let (objects, revision) = cache.snapshot("/c/").unwrap();
        assert_eq!(objects.iter().map(text).collect::<Vec<_>>(), ["A@1"]);
        assert_eq!(
            revision, 2,
            "progress carries the cache past other prefixes"
        );
        let mut watch = cache.watch("/c/", None).unwrap();
        assert_eq!(watch.initial.len(), 1);
        let b = backend.create("/c/b", Bytes::from("B")).await.unwrap();
        let event = next(&mut watch.live).await;
        assert_eq!(text(&event.object), "B@3");
        assert!(event.prev.is_none());
        backend
            .update("/c/b", Bytes::from("B2"), b.mod_revision)
            .await
            .unwrap();
        let event = next(&mut watch.live).await;
        assert_eq!(text(event.prev.as_ref().unwrap()), "B@3");
        backend.delete("/c/b", None).await.unwrap();
        let event = next(&mut watch.live).await;
        assert_eq!(event.event_type, EventType::Delete);
        assert_eq!(
            text(&event.object),
            "B2@5",
            "a delete shows the last state at its revision"
        );
        ready_at(&cache, &backend).await;
        let (objects, _) = cache.snapshot("/c/").unwrap();
        assert_eq!(objects.len(), 1);
    }

    /// An encoding that says which parts objects repeat: a value `own|repeated` is sent
    /// as `<h>own:repeated@revision`, its beginning `<h>` and `repeated` shared.
    fn with_parts() -> EncodeFn {
        Arc::new(|kv: &KeyValue| {
            let value = String::from_utf8_lossy(&kv.value).into_owned();
            let (own, repeated) = value.split_once('|').unwrap_or((&value, ""));
            let bytes = format!("<h>{own}:{repeated}@{}", kv.mod_revision);
            let start = 3 + own.len() + 1;
            Ok(Encoded {
                bytes: Bytes::from(bytes),
                head: 3,
                repeated: Some(start..start + repeated.len()),
                shorter: None,
            })
        })
    }

    /// Objects that repeat parts keep them once, and every reader gets their whole bytes.
    #[tokio::test]
    async fn repeated_parts_are_kept_once_and_read_whole() {
        let backend = Arc::new(MemoryBackend::new());
        let mf = "[a long entry that many objects have]";
        for (key, value) in [("a", mf), ("b", mf), ("c", mf), ("d", "[another]")] {
            let value = format!("{key}{key}|{value}");
            backend
                .create(&format!("/c/{key}"), value.into())
                .await
                .unwrap();
        }
        let cache = Cacher::new(
            backend.clone(),
            "/c/",
            with_parts(),
            CacherOptions::default(),
        );
        ready_at(&cache, &backend).await;
        let mut watch = cache.watch("/c/", None).unwrap();
        backend
            .create("/c/e", format!("ee|{mf}").into())
            .await
            .unwrap();
        let event = next(&mut watch.live).await;
        assert_eq!(text(&event.object), format!("<h>ee:{mf}@5"));

        let (objects, _) = cache.snapshot("/c/").unwrap();
        let want = [
            format!("<h>aa:{mf}@1"),
            format!("<h>bb:{mf}@2"),
            format!("<h>cc:{mf}@3"),
            "<h>dd:[another]@4".to_string(),
            format!("<h>ee:{mf}@5"),
        ];
        assert_eq!(objects.iter().map(text).collect::<Vec<_>>(), want);
        for (object, want) in objects.iter().zip(&want) {
            assert_eq!(object.encoded(), want.as_bytes());
            assert_eq!(object.json_len(), want.len());
            assert!(object.json_len_bound() >= want.len());
            let mut written = b"x".to_vec();
            object.write_json(&mut written);
            assert_eq!(&written[1..], want.as_bytes());
            object.with_json(|json| assert_eq!(json, want.as_bytes()));
            assert_eq!(object.key_suffix(), &want[3..4]);
        }
        // The first object saw both parts first; the second shares both, as do the third and
        // the event's; the fourth shares the beginning only.
        let common = |i: usize| objects[i].common.clone();
        assert!(common(0).is_none());
        let shared = common(1).unwrap();
        assert_eq!(
            (&*shared.head, &*shared.repeated),
            (&b"<h>"[..], mf.as_bytes())
        );
        for other in [
            common(2).unwrap(),
            common(4).unwrap(),
            event.object.common.clone().unwrap(),
        ] {
            assert!(Arc::ptr_eq(&shared, &other));
        }
        assert_eq!(&*common(3).unwrap().repeated, b"");
        assert!(objects[1].size() + mf.len() <= objects[0].size() + 4);
        assert_eq!(objects[4], event.object);
        assert_ne!(objects[0], objects[1]);
    }

    #[tokio::test]
    async fn updates_compact_the_arena_and_views_outlive_it() {
        let backend = Arc::new(MemoryBackend::new());
        let value =
            |i: usize, round: usize| Bytes::from(format!("{i}:{round}:{}", "x".repeat(4000)));
        for i in 0..10 {
            backend
                .create(&format!("/c/{i}"), value(i, 0))
                .await
                .unwrap();
        }
        let options = CacherOptions {
            window: 100,
            ..CacherOptions::default()
        };
        let cache = cacher(&backend, options);
        ready_at(&cache, &backend).await;
        let (before, _) = cache.snapshot("/c/").unwrap();
        let mut rv = before[0].mod_revision();
        // 1,000 updates of 4 KB: 4 MB written, while the set holds 40 KB and the window the
        // 100 states before its events (400 KB).
        let mut window_start = 0;
        for round in 1..=1000 {
            if round == 901 {
                window_start = rv;
            }
            rv = backend
                .update("/c/0", value(0, round), rv)
                .await
                .unwrap()
                .mod_revision;
        }
        ready_at(&cache, &backend).await;
        {
            let state = cache.shared.state.read().unwrap();
            let held = state.live_bytes + state.window_bytes;
            assert!(held > 440_000 && held < 450_000, "{held}");
            assert!(state.compactions >= 2, "{} compactions", state.compactions);
            let allocated = state.packed.arena.allocated();
            assert!(
                allocated < held + held / 2 + (1 << 20) + super::super::arena::FIRST_CHUNK,
                "{allocated} for {held}"
            );
        }

        let (objects, _) = cache.snapshot("/c/").unwrap();
        assert_eq!(objects.len(), 10);
        assert!(text(&objects[0]).starts_with("0:1000:"));
        assert!(text(&objects[9]).starts_with("9:0:"));
        assert_eq!(objects[0].mod_revision(), rv);
        // Taken before the compactions: still readable.
        assert!(text(&before[0]).starts_with("0:0:"));
        assert_eq!(before[0].encoded(), *before[0].to_json());

        // The window survived: its 100 updates, in order, each with the state before.
        let watch = cache.watch("/c/", Some(window_start)).unwrap();
        assert_eq!(watch.replay.len(), 100);
        for (round, event) in (901..).zip(&watch.replay) {
            assert!(text(&event.object).starts_with(&format!("0:{round}:")));
            let prev = text(event.prev.as_ref().unwrap());
            assert!(prev.starts_with(&format!("0:{}:", round - 1)));
        }
        // One state, one copy: the last event's object is the current one, and each event's
        // object is the next one's state before.
        let last = &watch.replay[99].object;
        assert_eq!(last.encoded().as_ptr(), objects[0].encoded().as_ptr());
        let (first, second) = (&watch.replay[0], &watch.replay[1]);
        assert_eq!(
            first.object.encoded().as_ptr(),
            second.prev.as_ref().unwrap().encoded().as_ptr()
        );
    }

    #[tokio::test]
    async fn the_window_stays_under_its_byte_bound_with_large_objects() {
        let backend = Arc::new(MemoryBackend::new());
        let bound = 1 << 20;
        let options = CacherOptions {
            window_bytes: bound,
            ..CacherOptions::default()
        };
        let cache = cacher(&backend, options);
        ready_at(&cache, &backend).await;
        // 200 KB objects: each update weighs its new state and the one before, ~400 KB.
        let big = |round: usize| Bytes::from(format!("{round}:{}", "x".repeat(200_000)));
        let mut big_rv = backend.create("/c/big", big(0)).await.unwrap().mod_revision;
        let mut rv = big_rv;
        for round in 1..=50 {
            let updated = backend.update("/c/big", big(round), big_rv).await.unwrap();
            big_rv = updated.mod_revision;
            let small = format!("/c/small{round}");
            rv = backend
                .create(&small, Bytes::from("s"))
                .await
                .unwrap()
                .mod_revision;
        }
        ready_at(&cache, &backend).await;
        {
            let state = cache.shared.state.read().unwrap();
            let weight: usize = state.window.iter().map(|e| e.weight()).sum();
            assert_eq!(weight, state.window_weight);
            assert!(weight <= bound, "{weight} bytes in the window");
            assert!(state.window_bytes <= bound);
            assert!(
                state.window.len() >= 2,
                "{} events kept",
                state.window.len()
            );
            assert!(
                state.window.len() < 10,
                "{} events kept",
                state.window.len()
            );
        }
        // The newest events are still replayed; a start before them is too old.
        let recent = cache.watch("/c/", Some(rv - 2)).unwrap();
        assert_eq!(recent.replay.len(), 2);
        assert!(text(&recent.replay[0].object).starts_with("50:"));
        assert_eq!(
            cache.watch("/c/", Some(rv - 20)).err(),
            Some(CacheMiss::TooOld)
        );
        // The current objects are all there.
        let (objects, _) = cache.snapshot("/c/").unwrap();
        assert_eq!(objects.len(), 51);
    }

    #[tokio::test]
    async fn replays_the_window_and_refuses_older_starts() {
        let backend = Arc::new(MemoryBackend::new());
        let options = CacherOptions {
            window: 3,
            watcher_lag: 16,
            ..CacherOptions::default()
        };
        let cache = cacher(&backend, options);
        ready_at(&cache, &backend).await;
        for i in 0..5 {
            backend
                .create(&format!("/c/{i}"), Bytes::from(i.to_string()))
                .await
                .unwrap();
        }
        ready_at(&cache, &backend).await;
        let watch = cache.watch("/c/", Some(2)).unwrap();
        let revisions: Vec<_> = watch.replay.iter().map(|e| e.revision()).collect();
        assert_eq!(revisions, [3, 4, 5]);
        assert_eq!(cache.watch("/c/", Some(1)).err(), Some(CacheMiss::TooOld));
        let narrow = cache.watch("/c/4", Some(2)).unwrap();
        assert_eq!(narrow.replay.len(), 1);
    }

    #[tokio::test]
    async fn a_lagging_watcher_is_ended_and_others_go_on() {
        let backend = Arc::new(MemoryBackend::new());
        let options = CacherOptions {
            window: 8,
            watcher_lag: 4,
            ..CacherOptions::default()
        };
        let cache = cacher(&backend, options);
        ready_at(&cache, &backend).await;
        let mut slow = cache.watch("/c/", None).unwrap().live;
        let mut fast = cache.watch("/c/", None).unwrap().live;
        for i in 0..10 {
            backend
                .create(&format!("/c/{i}"), Bytes::from("v"))
                .await
                .unwrap();
            assert_eq!(next(&mut fast).await.revision(), i + 1);
        }
        let ended = tokio::time::timeout(WAIT, async {
            let mut taken = 0;
            while slow.next().await.is_some() {
                taken += 1;
            }
            taken
        });
        assert!(ended.await.unwrap() < 10, "the slow watcher ends early");
    }

    #[tokio::test]
    async fn a_blocked_watcher_that_takes_nothing_is_ended_after_the_timeout() {
        let backend = Arc::new(MemoryBackend::new());
        let options = CacherOptions {
            watcher_lag: 64,
            watcher_buffer: 4,
            block_timeout: Duration::from_millis(500),
            ..CacherOptions::default()
        };
        let cache = cacher(&backend, options);
        ready_at(&cache, &backend).await;
        let mut stuck = cache.watch("/c/", None).unwrap().live;
        let mut slow = cache.watch("/c/", None).unwrap().live;
        for i in 0..8 {
            backend
                .create(&format!("/c/{i}"), Bytes::from("v"))
                .await
                .unwrap();
        }
        ready_at(&cache, &backend).await;
        // Both have 8 items waiting, over their buffer of 4; the slow one takes one every
        // 100 ms, the stuck one none: only the stuck one is ended, and not before the
        // timeout.
        let terminated = || cache.shared.metrics.terminated.get();
        let before = terminated();
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            next(&mut slow).await;
        }
        assert_eq!(terminated(), before, "not before the timeout");
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            next(&mut slow).await;
        }
        let ended = tokio::time::timeout(WAIT, async {
            while terminated() == before {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        assert!(ended.await.is_ok(), "the stuck watcher is ended");
        assert_eq!(terminated(), before + 1, "only the stuck one");
        assert!(stuck.next().await.is_none(), "the stuck watch is over");
        let later = backend.create("/c/late", Bytes::from("v")).await.unwrap();
        assert_eq!(next(&mut slow).await.revision(), later.mod_revision);
    }

    #[tokio::test]
    async fn reloading_ends_the_watches_that_followed() {
        let backend = Arc::new(MemoryBackend::new());
        let cache = cacher(&backend, CacherOptions::default());
        ready_at(&cache, &backend).await;
        let mut watch = cache.watch("/c/", None).unwrap();
        // What the cache does when its backend watch fails, before it lists again.
        backend.create("/c/a", Bytes::from("A")).await.unwrap();
        next(&mut watch.live).await;
        cache.shared.unready();
        let end =
            tokio::time::timeout(WAIT, async { while watch.live.next().await.is_some() {} }).await;
        assert!(end.is_ok(), "old watchers end when the cache reloads");
    }
}
