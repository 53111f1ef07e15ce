//! Watch: initial state when asked, then the backend's events, filtered by selectors, with
//! bookmarks and a timeout. Each watch runs as a task writing into a bounded channel, so a
//! client that stops reading stops only its own watch; one whose channel stays full is ended
//! (kube's cacher: "Forcing watcher close due to unresponsiveness").

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::{BroadcastStream, ReceiverStream};

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
use crate::storage::cacher::{CacheItem, CacheWatch, CachedEvent};
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

/// Events buffered per watcher before the watcher's task waits for the client.
const CHANNEL_CAPACITY: usize = 256;

/// How long a watcher's task waits for room in its full channel before it ends the watch. As
/// kube's `cacheWatcher.add`, which blocks on a full watcher only until the dispatch's timer
/// (`blockTimeout`) fires, then closes it and counts it in
/// `apiserver_terminated_watchers_total`; kube's budget is 100 ms shared by every watcher of
/// the event, because its dispatcher waits, while here only the slow watcher's own task does,
/// so the client gets longer to catch up. What the watch holds meanwhile is bounded: its
/// channel's events (shared with the cache) and the connection's flow-control window.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(5);

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
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    let initialized = ctx.take_watch_initialization();
    let (initial, from, steps) = match from_cache(&inner, &prefix, start).await? {
        Some(watch) => cached_steps(&plan.filter, watch),
        None => backend_steps(&inner, &prefix, start, &plan.filter).await?,
    };
    let initial = Initial {
        events: initial,
        initialized,
    };
    tokio::spawn(run(inner, plan, initial, from, steps, tx));
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
    let replay = futures::stream::iter(watch.replay.into_iter().map(CacheItem::Event).map(Ok));
    let live = BroadcastStream::new(watch.live);
    let steps = replay
        .chain(live)
        // A watcher that lags too far behind is ended; its client resumes from the last
        // event it got, as from any ended watch.
        .take_while(|item| std::future::ready(item.is_ok()))
        .filter_map(move |item| {
            std::future::ready(match item {
                Err(_) => None,
                Ok(CacheItem::Progress(at)) => Some(Step::Advance(at, None)),
                Ok(CacheItem::Event(event)) if event.revision() <= from => None,
                Ok(CacheItem::Event(event)) if !event.object.key_suffix().starts_with(&*within) => {
                    Some(Step::Advance(event.revision(), None))
                }
                Ok(CacheItem::Event(event)) => Some(Step::Advance(
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

/// A watch's initial events, and who is told once they are queued.
struct Initial {
    events: Vec<WatchEvent>,
    initialized: Option<WatchInitialization>,
}

async fn run(
    inner: Arc<Inner>,
    plan: WatchPlan,
    initial: Initial,
    from: Revision,
    mut steps: Steps,
    tx: mpsc::Sender<WatchEvent>,
) {
    let deadline_at = Instant::now() + plan.timeout;
    let deadline = tokio::time::sleep_until(deadline_at);
    tokio::pin!(deadline);
    let deliver = |event| deliver(&inner, &tx, event, deadline_at);
    for event in initial.events {
        if !deliver(event).await {
            return;
        }
    }
    let mut last = from;
    if plan.initial_events_end && !deliver(bookmark(&inner, last, true)).await {
        return;
    }
    // kube's cacher: the watch is initialized once its initial events are queued; priority
    // and fairness frees its seats (dropped unsignalled on the returns above, it frees them
    // too).
    if let Some(initialized) = initial.initialized {
        initialized.signal();
    }
    let interval = inner.bookmark_interval;
    let next_after = |now| next_bookmark(now, interval, deadline_at);
    let mut due = plan.bookmarks.then(|| next_after(Instant::now())).flatten();
    loop {
        let out = tokio::select! {
            _ = &mut deadline => return,
            _ = tx.closed() => return,
            _ = tokio::time::sleep_until(due.unwrap_or(deadline_at)), if due.is_some() => {
                due = next_after(Instant::now());
                Some(bookmark(&inner, last, false))
            }
            next = steps.next() => match next {
                None => return,
                Some(Step::Fail(error)) => { let _ = tx.send(error).await; return; }
                Some(Step::Advance(at, shown)) => {
                    last = last.max(at);
                    shown
                }
            },
        };
        if let Some(out) = out {
            if !deliver(out).await {
                return;
            }
        }
    }
}

/// Hands `event` to the watch's channel; false when the watch is over: its client went away,
/// its deadline passed, or its channel stayed full for [`BLOCK_TIMEOUT`] (the client stopped
/// reading; the watch is ended and counted, as kube's cacher ends an unresponsive watcher).
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
