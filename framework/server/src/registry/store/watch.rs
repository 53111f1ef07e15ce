//! Watch: initial state when asked, then the backend's events, filtered by selectors, with
//! bookmarks and a timeout. A watch served by the watch cache is a stream over the cache's
//! broadcast, polled by the response body itself: no task or channel per watcher between
//! the cache and the connection; the cache ends a watcher whose client stops reading
//! (`storage/cacher.rs`, kube's "Forcing watcher close due to unresponsiveness"). A watch
//! of the backend's own watch runs as a task writing into a bounded channel, with the same
//! bound and timeout.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;

use super::Inner;
use super::codec::{decode_cached, set_type_meta};
use super::filter::Filter;
use super::list::{cache_reaches, consistent_revision, parse_resource_version};
use crate::error::{Error, Result};
use crate::registry::context::{RequestContext, WatchInitialization};
use crate::registry::options::ListOptions;
use crate::registry::rest::{CachedJson, Object};
use crate::registry::rest::{WatchEvent, WatchEventType, WatchStream};
use crate::runtime::object::set_meta;
use crate::storage::cacher::{BLOCK_TIMEOUT, CacheItem, CacheWatch, CachedEvent, WATCHER_BUFFER};
use crate::storage::{Event, EventType, ListRequest, Revision, StorageError, WatchItem};

/// How often a watch that allows bookmarks gets one (kube-apiserver: about a minute).
pub(crate) const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// How long before its timeout a watch gets its last bookmark (the cacher's 2 s).
const PRE_TIMEOUT_BOOKMARK: Duration = Duration::from_secs(2);

/// Without `timeoutSeconds`, a watch ends after a random time in [30 min, 60 min), as
/// kube-apiserver's `--min-request-timeout` does, to spread reconnects.
const MIN_REQUEST_TIMEOUT: u64 = 1800;

/// No watch deadline is set later than this from now (tokio's own "far future": later
/// instants overflow on some systems). kube's `time.Duration(s) * time.Second` overflows
/// past 292 years; this server's timeout saturates.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 86_400);

/// A client's `timeoutSeconds` as a duration: a negative one is already past, as Go's
/// timer of a negative duration; a huge one is [`FAR_FUTURE`].
fn watch_timeout(seconds: i64) -> Duration {
    Duration::from_secs(seconds.max(0).unsigned_abs()).min(FAR_FUTURE)
}

/// Events buffered per watcher of the backend's watch before the watcher's task waits for
/// the client: as many as a watcher of the cache may have waiting.
const CHANNEL_CAPACITY: usize = WATCHER_BUFFER;

// A backend watcher's task waits for room in its full channel for the cache's
// `BLOCK_TIMEOUT`, then ends the watch, as kube's `cacheWatcher.add` closes a watcher still
// full when the dispatch's timer fires. What the watch holds meanwhile is bounded: its
// channel's events and the connection's flow-control window.

struct WatchPlan {
    filter: Filter,
    bookmarks: bool,
    initial_events_end: bool,
    timeout: Duration,
}

pub(crate) async fn watch(
    inner: Arc<Inner>,
    ctx: &RequestContext,
    options: &ListOptions,
) -> Result<WatchStream> {
    let prefix = inner.list_prefix(ctx);
    let (plan, start) = plan(&inner, options)?;
    let cached = from_cache(&inner, &prefix, start).await?;
    let from_cache = cached.is_some();
    let (initial, from, steps) = match cached {
        Some(watch) => cached_steps(&plan.filter, watch),
        None => backend_steps(&inner, &prefix, start, &plan.filter).await?,
    };
    let initial = Initial {
        events: initial,
        initialized: ctx.take_watch_initialization(),
    };
    let deadline = Instant::now() + plan.timeout;
    let events = events(inner.clone(), plan, initial, from, steps, deadline);
    if from_cache {
        // Read by the response body directly: the cache bounds what it waits for.
        return Ok(Box::pin(events));
    }
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    tokio::spawn(forward(inner, events, tx, deadline));
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// What a watch sends (selectors, bookmarks, timeout) and where it starts, from its options.
fn plan(inner: &Inner, options: &ListOptions) -> Result<(WatchPlan, Start)> {
    let filter = Filter::new(&inner.info, options)?;
    let rv = options
        .resource_version
        .as_deref()
        .filter(|s| !s.is_empty() && *s != "0");
    let send_initial = options.send_initial_events.unwrap_or(rv.is_none());
    let timeout = match options.timeout_seconds {
        // kube's `if timeout == 0 && minRequestTimeout > 0`: no timeout given.
        None | Some(0) => Duration::from_secs(
            rand::rng().random_range(MIN_REQUEST_TIMEOUT..2 * MIN_REQUEST_TIMEOUT),
        ),
        Some(seconds) => watch_timeout(seconds),
    };
    let plan = WatchPlan {
        filter,
        bookmarks: options.allow_watch_bookmarks,
        initial_events_end: options.send_initial_events == Some(true),
        timeout,
    };
    let start = match rv {
        Some(rv) if !send_initial => Start::After(parse_resource_version(rv)?),
        Some(rv) => Start::StateNotOlderThan(parse_resource_version(rv)?),
        None if options.resource_version.as_deref() == Some("0") => Start::AnyState,
        None => Start::LatestState,
    };
    Ok((plan, start))
}

/// A watch served by the watch cache: the selected initial objects, the revision they are
/// at, and the cache's replay and live events after it.
fn cached_steps(filter: &Filter, watch: CacheWatch) -> (Vec<WatchEvent>, Revision, Steps) {
    let from = watch.revision;
    let within = Arc::clone(&watch.relative_prefix);
    let initial = watch
        .initial
        .iter()
        .filter(|object| filter.selects(object).unwrap_or(false))
        .map(|object| WatchEvent {
            type_: WatchEventType::Added,
            object: Object::Cached(CachedJson::new(object.clone())),
        })
        .collect();
    let filter = filter.clone();
    let replay = futures::stream::iter(watch.replay.into_iter().map(CacheItem::Event));
    // The live events end when the watcher lags too far behind or stops reading; its
    // client resumes from the last event it got, as from any ended watch.
    let steps = replay.chain(watch.live).filter_map(move |item| {
        std::future::ready(match item {
            CacheItem::Progress(at) => Some(Step::Advance(at, None)),
            CacheItem::Event(event) if event.revision() <= from => None,
            CacheItem::Event(event) if !event.object.key_suffix().starts_with(&*within) => {
                Some(Step::Advance(event.revision(), None))
            }
            CacheItem::Event(event) => Some(Step::Advance(
                event.revision(),
                translate_cached(&filter, &event),
            )),
        })
    });
    (initial, from, Box::pin(steps))
}

/// A watch served by the backend's own watch: the initial state read at a revision (none
/// when resuming after one), then the backend's events after it.
async fn backend_steps(
    inner: &Arc<Inner>,
    prefix: &str,
    start: Start,
    filter: &Filter,
) -> Result<(Vec<WatchEvent>, Revision, Steps)> {
    let (initial, from) = match start {
        Start::After(from) => (Vec::new(), from),
        _ => initial_state(inner, prefix, filter).await?,
    };
    let steps: Steps = match inner.backend.watch_with_progress(prefix, from).await {
        Err(e) => Box::pin(futures::stream::iter([Step::Fail(error_event(inner, e))])),
        Ok(items) => {
            let (filter, failing) = (filter.clone(), inner.clone());
            Box::pin(items.map(move |item| match item {
                Ok(WatchItem::Progress(at)) => Step::Advance(at, None),
                Ok(WatchItem::Event(event)) => match translate(&failing, &filter, &event) {
                    Ok(shown) => Step::Advance(event.revision(), shown),
                    Err(e) => Step::Fail(WatchEvent {
                        type_: WatchEventType::Error,
                        object: e.to_json().into(),
                    }),
                },
                Err(e) => Step::Fail(error_event(&failing, e)),
            }))
        }
    };
    Ok((initial, from, steps))
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug)]
enum Start {
    /// After this revision, without initial state.
    After(Revision),
    /// With the state at a revision not older than this one.
    StateNotOlderThan(Revision),
    /// With any recent state (`resourceVersion=0`).
    AnyState,
    /// With the latest state (no `resourceVersion`).
    LatestState,
}

/// The cache's watch, when it can serve this one.
async fn from_cache(inner: &Inner, prefix: &str, start: Start) -> Result<Option<CacheWatch>> {
    let Some(cache) = &inner.cache else {
        return Ok(None);
    };
    let after = match start {
        Start::After(after) => Some(after),
        Start::AnyState => None,
        Start::StateNotOlderThan(at) => match cache_reaches(inner, cache, at).await {
            true => None,
            false => return Ok(None),
        },
        Start::LatestState => match consistent_revision(inner, cache).await? {
            true => None,
            false => return Ok(None),
        },
    };
    Ok(cache.watch(prefix, after).ok())
}

/// What a watch's task forwards: progress, with the event it shows this watcher if any, or
/// the error that ends the watch.
enum Step {
    Advance(Revision, Option<WatchEvent>),
    Fail(WatchEvent),
}

type Steps = std::pin::Pin<Box<dyn futures::Stream<Item = Step> + Send>>;

/// Every selected object at the latest revision, as ADDED events, and that revision.
async fn initial_state(
    inner: &Inner,
    prefix: &str,
    filter: &Filter,
) -> Result<(Vec<WatchEvent>, Revision)> {
    let request = ListRequest {
        prefix: prefix.to_string(),
        ..ListRequest::default()
    };
    let page = inner
        .backend
        .list(&request)
        .await
        .map_err(|e| inner.storage_error("", e))?;
    let mut events = Vec::new();
    for kv in &page.items {
        let object = inner.decode(kv)?;
        if filter.matches(&object) {
            events.push(WatchEvent {
                type_: WatchEventType::Added,
                object: object.into(),
            });
        }
    }
    Ok((events, page.revision))
}

/// A watch's initial events, and who is told once they are sent.
struct Initial {
    events: Vec<WatchEvent>,
    initialized: Option<WatchInitialization>,
}

/// What a watch sends: the initial events, the end of them when asked, then its steps with
/// bookmarks, until its timeout (at `deadline_at`).
fn events(
    inner: Arc<Inner>,
    plan: WatchPlan,
    initial: Initial,
    from: Revision,
    steps: Steps,
    deadline_at: Instant,
) -> impl Stream<Item = WatchEvent> + Send + 'static {
    let end = plan
        .initial_events_end
        .then(|| bookmark(&inner, from, true));
    let interval = inner.bookmark_interval;
    let due = plan
        .bookmarks
        .then(|| next_bookmark(Instant::now(), interval, deadline_at))
        .flatten();
    let live = Live {
        inner,
        steps,
        last: from,
        bookmark: due.map(|at| Box::pin(tokio::time::sleep_until(at))),
        deadline_at,
        done: false,
    };
    let initial = InitialEvents {
        events: initial.events.into_iter(),
        end,
        initialized: initial.initialized,
    };
    initial
        .chain(live)
        .take_until(tokio::time::sleep_until(deadline_at))
}

/// A watch's steps with its bookmarks: what follows its initial events.
struct Live {
    inner: Arc<Inner>,
    steps: Steps,
    /// The revision the watcher is known to have seen everything up to.
    last: Revision,
    /// When the next bookmark is due, for a watch that allows them (one timer for the watch's
    /// life, reset after each bookmark).
    bookmark: Option<Pin<Box<Sleep>>>,
    deadline_at: Instant,
    /// A failure was sent, or the steps ended.
    done: bool,
}

/// A watch's initial events and the bookmark that ends them, if asked.
struct InitialEvents {
    events: std::vec::IntoIter<WatchEvent>,
    end: Option<WatchEvent>,
    /// Told as the last of them is taken, as kube's cacher tells it once they are queued:
    /// priority and fairness frees the watch's seats. Dropped untold (the watch ended
    /// first), it frees them too.
    initialized: Option<WatchInitialization>,
}

impl Stream for InitialEvents {
    type Item = WatchEvent;

    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        let this = self.get_mut();
        let next = this.events.next().or_else(|| this.end.take());
        if this.events.len() == 0
            && this.end.is_none()
            && let Some(initialized) = this.initialized.take()
        {
            initialized.signal();
        }
        Poll::Ready(next)
    }
}

impl Stream for Live {
    type Item = WatchEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(timer) = &mut this.bookmark {
            if timer.as_mut().poll(cx).is_ready() {
                match next_bookmark(
                    Instant::now(),
                    this.inner.bookmark_interval,
                    this.deadline_at,
                ) {
                    Some(at) => timer.as_mut().reset(at),
                    None => this.bookmark = None,
                }
                return Poll::Ready(Some(bookmark(&this.inner, this.last, false)));
            }
        }
        loop {
            match std::task::ready!(this.steps.poll_next_unpin(cx)) {
                None => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Some(Step::Fail(error)) => {
                    this.done = true;
                    return Poll::Ready(Some(error));
                }
                Some(Step::Advance(at, shown)) => {
                    this.last = this.last.max(at);
                    if shown.is_some() {
                        return Poll::Ready(shown);
                    }
                }
            }
        }
    }
}

/// Runs a watch of the backend's own watch: hands its events to the channel the response
/// reads, until the client goes away or stops reading.
async fn forward(
    inner: Arc<Inner>,
    events: impl Stream<Item = WatchEvent>,
    tx: mpsc::Sender<WatchEvent>,
    deadline: Instant,
) {
    tokio::pin!(events);
    loop {
        let event = tokio::select! {
            _ = tx.closed() => return,
            event = events.next() => match event {
                Some(event) => event,
                None => return,
            },
        };
        if !deliver(&inner, &tx, event, deadline).await {
            return;
        }
    }
}

/// Hands `event` to the watch's channel; false when the watch is over: its client went away,
/// its deadline passed, or its channel stayed full for the cache's [`BLOCK_TIMEOUT`] (the
/// client stopped reading; the watch is ended and counted, as kube's cacher ends an
/// unresponsive watcher).
async fn deliver(
    inner: &Inner,
    tx: &mpsc::Sender<WatchEvent>,
    event: WatchEvent,
    deadline: Instant,
) -> bool {
    let event = match tx.try_send(event) {
        Ok(()) => return true,
        Err(mpsc::error::TrySendError::Closed(_)) => return false,
        Err(mpsc::error::TrySendError::Full(event)) => event,
    };
    tokio::select! {
        sent = tx.send(event) => sent.is_ok(),
        _ = tokio::time::sleep_until(deadline) => false,
        _ = tokio::time::sleep(BLOCK_TIMEOUT) => {
            let info = &inner.info;
            crate::metrics::global()
                .terminated_watchers
                .with_label_values(&[info.group, info.plural])
                .inc();
            tracing::info!(
                group = info.group,
                resource = info.plural,
                buffered = CHANNEL_CAPACITY,
                "forcing watcher close due to unresponsiveness"
            );
            false
        }
    }
}

/// When the next bookmark is due, as the cacher's `nextBookmarkTime`: every `interval`, and
/// once right before the watch times out (2 s before), so that a client resumes from a fresh
/// resourceVersion; `None` when no bookmark fits before the deadline any more.
fn next_bookmark(now: Instant, interval: Duration, deadline: Instant) -> Option<Instant> {
    let before_timeout = deadline.checked_sub(PRE_TIMEOUT_BOOKMARK)?;
    let at = (now + interval).min(before_timeout);
    (at > now).then_some(at)
}

/// A storage event as the watcher sees it through its selectors. An object that cannot be
/// read (in a version the store does not know) ends the watch with its error, as
/// kube-apiserver's watcher sends an ERROR event for an object it cannot decode.
fn translate(inner: &Inner, filter: &Filter, event: &Event) -> Result<Option<WatchEvent>> {
    let object = inner.decode(&event.kv)?;
    let previous = match &event.prev_kv {
        Some(prev) => inner.decode(prev).ok(),
        None => None,
    };
    Ok(seen_through(
        filter,
        event.event_type,
        object,
        previous,
        event.revision(),
    ))
}

/// A cached event as the watcher sees it: the event's own object (its encoded bytes as they
/// are, and the other versions of it made once for all watchers), or the last state the
/// watcher was shown when the object moved out of its selectors.
fn translate_cached(filter: &Filter, event: &Arc<CachedEvent>) -> Option<WatchEvent> {
    let type_ = if filter.is_everything() {
        match (event.event_type, &event.prev) {
            (EventType::Delete, _) => WatchEventType::Deleted,
            (EventType::Put, Some(_)) => WatchEventType::Modified,
            (EventType::Put, None) => WatchEventType::Added,
        }
    } else {
        let object = decode_cached(&event.object).ok()?;
        let previous = event.prev.as_ref().and_then(|o| decode_cached(o).ok());
        let seen = seen_through(filter, event.event_type, object, previous, event.revision())?;
        if event.event_type == EventType::Put && seen.type_ == WatchEventType::Deleted {
            return Some(seen);
        }
        seen.type_
    };
    let object = Object::Cached(CachedJson::of_event(Arc::clone(event)));
    Some(WatchEvent { type_, object })
}

/// What a change looks like through a watcher's selectors: an object moving out of the
/// selection is DELETED for it, one moving in is ADDED.
fn seen_through(
    filter: &Filter,
    event_type: EventType,
    object: Value,
    previous: Option<Value>,
    revision: Revision,
) -> Option<WatchEvent> {
    let now = filter.matches(&object);
    let previous = previous.filter(|o| filter.matches(o));
    let (type_, object) = match (event_type, previous, now) {
        (EventType::Delete, Some(_), _) => (WatchEventType::Deleted, object),
        (EventType::Delete, None, _) => return None,
        (EventType::Put, None, true) => (WatchEventType::Added, object),
        (EventType::Put, Some(_), true) => (WatchEventType::Modified, object),
        // As the cacher does: the watcher gets the last state it was shown (the one its
        // selector matched), at the event's resourceVersion so it can resume from there.
        (EventType::Put, Some(mut last), false) => {
            set_meta(&mut last, "resourceVersion", json!(revision.to_string()));
            (WatchEventType::Deleted, last)
        }
        (EventType::Put, None, false) => return None,
    };
    Some(WatchEvent {
        type_,
        object: object.into(),
    })
}

fn bookmark(inner: &Inner, revision: Revision, initial_events_end: bool) -> WatchEvent {
    let mut object = json!({"metadata": {"resourceVersion": revision.to_string()}});
    if initial_events_end {
        object["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    set_type_meta(&inner.info, &mut object);
    WatchEvent {
        type_: WatchEventType::Bookmark,
        object: object.into(),
    }
}

fn error_event(inner: &Inner, e: StorageError) -> WatchEvent {
    let error: Error = inner.storage_error("", e);
    let object: Value = error.to_json();
    WatchEvent {
        type_: WatchEventType::Error,
        object: object.into(),
    }
}
