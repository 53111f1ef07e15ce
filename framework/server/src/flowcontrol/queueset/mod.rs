//! One priority level's seats and queues, after kube's `fairqueuing/queueset`: a request of a
//! flow is dealt a hand of queues by shuffle sharding the flow's hash, joins the one of them
//! with the least work waiting (or is rejected `queue-full`), and waits until the level
//! dispatches it or its wait limit passes (`time-out`). Dispatch is fair across queues by
//! virtual finish time in seat-seconds, as kube's: each request is first taken to last kube's
//! estimated service duration, and its queue's virtual time is corrected by how long it really
//! ran when it finishes ([`state`]). The level's current limit is what borrowing between
//! levels gives it (`borrowing`).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use prometheus::{Histogram, IntCounter, IntGauge};
use tokio::sync::oneshot;

use super::demand::DemandStats;
use super::retry_after::DroppedRequests;
use crate::flowcontrol::SeatLimits;
use state::State;
#[cfg(test)]
pub(crate) use state::deal;

mod state;

/// How a priority level limits (`spec.type` and `limitResponse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Never limited, never queued.
    Exempt,
    /// Limited; a request finding no free seat is rejected.
    Reject,
    /// Limited, with `queues` queues of at most `queue_length_limit` requests each, a flow
    /// dealt `hand_size` of them.
    Queue {
        queues: usize,
        hand_size: usize,
        queue_length_limit: usize,
    },
}

/// Why a request was not served, as kube's `reason` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Its queue was full.
    QueueFull,
    /// A level without queues had no free seat.
    ConcurrencyLimit,
    /// It waited past its wait limit.
    TimeOut,
}

impl Rejection {
    /// kube's label value.
    pub fn reason(self) -> &'static str {
        match self {
            Rejection::QueueFull => "queue-full",
            Rejection::ConcurrencyLimit => "concurrency-limit",
            Rejection::TimeOut => "time-out",
        }
    }
}

/// One priority level.
#[derive(Debug)]
pub(crate) struct Level {
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) kind: Kind,
    state: Mutex<State>,
    dropped: DroppedRequests,
}

/// The metric series of a flow schema and its priority level (the `flow_schema` and
/// `priority_level` labels), resolved once a configuration rather than once a request.
#[derive(Debug, Clone)]
pub(crate) struct Labels(Arc<Series>);

#[derive(Debug)]
struct Series {
    names: [String; 2],
    dispatched: IntCounter,
    inqueue: IntGauge,
    executing: IntGauge,
    executing_seats: IntGauge,
    /// Waits that ended in execution, and in refusal.
    waited: [Histogram; 2],
}

impl Labels {
    pub(crate) fn new(flow_schema: &str, priority_level: &str) -> Self {
        let metrics = &crate::metrics::global().flowcontrol;
        let names = [flow_schema, priority_level];
        let waited = |execute| {
            let values = [flow_schema, priority_level, execute];
            metrics.wait_duration.with_label_values(&values)
        };
        Self(Arc::new(Series {
            dispatched: metrics.dispatched.with_label_values(&names),
            inqueue: metrics.inqueue.with_label_values(&names),
            executing: metrics.executing.with_label_values(&names),
            executing_seats: metrics.executing_seats.with_label_values(&names),
            waited: [waited("true"), waited("false")],
            names: names.map(String::from),
        }))
    }
}

/// Seats held while a request executes; released when dropped.
#[derive(Debug)]
pub struct Seat {
    /// `None` once released.
    level: Option<Arc<Level>>,
    /// The queue it was dispatched from; `None` for a level without queues.
    queue: Option<usize>,
    width: u32,
    labels: Labels,
    /// When it began to execute: its real service time is measured from here.
    started: Instant,
}

/// What [`Level::enter`] found.
pub(crate) enum Entry {
    Now(Seat),
    Queued {
        queue: usize,
        id: u64,
        receiver: oneshot::Receiver<Seat>,
    },
    Refused(Rejection),
}

impl Level {
    pub(crate) fn new(name: &str, uid: &str, kind: Kind, limits: SeatLimits) -> Arc<Self> {
        let queues = match kind {
            Kind::Queue { queues, .. } => queues,
            _ => 0,
        };
        Arc::new(Self {
            name: name.into(),
            uid: uid.into(),
            kind,
            state: Mutex::new(State::new(queues, limits, Instant::now())),
            dropped: DroppedRequests::default(),
        })
    }

    /// The level's state, its virtual time brought up to `now` (kube's `lockAndSyncTime`).
    fn lock(&self, now: Instant) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.sync_time(now);
        state
    }

    /// Requests waiting in the queues, and seats in use.
    #[cfg(test)]
    pub(crate) fn load(&self) -> (usize, u32) {
        let state = self.lock(Instant::now());
        (state.waiting, state.in_use)
    }

    /// The level's seat limits.
    pub(crate) fn limits(&self) -> SeatLimits {
        self.lock(Instant::now()).limits
    }

    /// New nominal, lower and upper limits, from a new configuration; the current limit is
    /// kept until borrowing next adjusts it, as kube keeps a retained level's.
    pub(crate) fn configure(&self, limits: SeatLimits) {
        let mut state = self.lock(Instant::now());
        state.limits = SeatLimits {
            current: state.limits.current,
            ..limits
        };
    }

    /// The limits, and the seat demand of the period ending at `now` taken into the
    /// statistics; a new period begins.
    pub(crate) fn observe_demand(&self, now: Instant) -> (SeatLimits, DemandStats) {
        let mut state = self.lock(now);
        let period = state.demand.reset(now);
        state.stats.update(period);
        (state.limits, state.stats)
    }

    /// The current limit borrowing gives the level: waiting requests that now fit are
    /// dispatched.
    pub(crate) fn set_current_limit(self: &Arc<Self>, current: u32, now: Instant) {
        let mut state = self.lock(now);
        state.limits.current = current;
        state.dispatch(self, now);
    }

    /// Sets the seat demand directly, as kube's borrowing tests do.
    #[cfg(test)]
    pub(crate) fn set_demand(&self, seats: f64, now: Instant) {
        self.lock(now).demand.set(seats, now);
    }

    /// Seats for a request of `width` seats of the flow hashed to `flow`, waiting at most
    /// `wait`.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        flow: u64,
        width: u32,
        wait: Duration,
        labels: Labels,
    ) -> Result<Seat, Rejection> {
        let arrived = Instant::now();
        let (queue, id, mut receiver) = match self.enter(flow, width, &labels, arrived) {
            Entry::Now(seat) => {
                observe_wait(&labels, arrived, true);
                return Ok(seat);
            }
            Entry::Refused(why) => return Err(self.refuse(&labels, arrived, why)),
            Entry::Queued {
                queue,
                id,
                receiver,
            } => (queue, id, receiver),
        };
        let seat = match tokio::time::timeout(wait, &mut receiver).await {
            Ok(Ok(seat)) => Some(seat),
            // The level went away with its waiters (never: levels outlive their waiters).
            Ok(Err(_)) => None,
            // Still queued: it leaves; else it was dispatched as the wait ended.
            Err(_) if self.leave(queue, id, &labels, Instant::now()) => None,
            Err(_) => receiver.try_recv().ok(),
        };
        match seat {
            Some(seat) => {
                observe_wait(&labels, arrived, true);
                Ok(seat)
            }
            None => Err(self.refuse(&labels, arrived, Rejection::TimeOut)),
        }
    }

    /// The `Retry-After` of the level's refusals, in seconds.
    pub(crate) fn retry_after(&self) -> i64 {
        self.dropped.retry_after()
    }

    /// Counts a refusal.
    fn refuse(&self, labels: &Labels, arrived: Instant, why: Rejection) -> Rejection {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let unix = now.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.dropped.record(unix);
        reject(labels, arrived, why)
    }

    /// A seat now, a place in a queue, or a refusal, for a request arriving at `now`.
    pub(crate) fn enter(
        self: &Arc<Self>,
        flow: u64,
        width: u32,
        labels: &Labels,
        now: Instant,
    ) -> Entry {
        let width = width.max(1);
        let mut state = self.lock(now);
        let (hand_size, queue_length_limit) = match self.kind {
            Kind::Queue {
                hand_size,
                queue_length_limit,
                ..
            } => (hand_size, queue_length_limit),
            // A seat now or never (an Exempt level always has one).
            Kind::Exempt | Kind::Reject => {
                if !state.can_accommodate(self.kind, width) {
                    return Entry::Refused(Rejection::ConcurrencyLimit);
                }
                state.start(None, width, now);
                let seat = Seat::executing(self.clone(), None, width, labels.clone(), now);
                return Entry::Now(seat);
            }
        };
        let queue = state.choose_queue(flow, hand_size);
        // kube's `rejectOrEnqueueToBoundLocked`: a full queue refuses only while every seat
        // is taken.
        let full = state.queue_len(queue) >= queue_length_limit;
        if full && state.in_use >= state.limits.current {
            return Entry::Refused(Rejection::QueueFull);
        }
        let (ready, receiver) = oneshot::channel();
        let id = state.enqueue(queue, width, ready, labels.clone(), now);
        labels.0.inqueue.inc();
        state.dispatch(self, now);
        Entry::Queued {
            queue,
            id,
            receiver,
        }
    }

    /// Takes request `id` out of `queue`; false when it is no longer there (dispatched).
    fn leave(&self, queue: usize, id: u64, labels: &Labels, now: Instant) -> bool {
        let left = self.lock(now).remove(queue, id, now);
        if left {
            labels.0.inqueue.dec();
        }
        left
    }

    /// A request of `width` seats dispatched from `queue` at `started` finished at `now`.
    fn finish(self: &Arc<Self>, queue: Option<usize>, width: u32, started: Instant, now: Instant) {
        let mut state = self.lock(now);
        let served = now.saturating_duration_since(started);
        state.finish(queue, width, served, now);
        state.dispatch(self, now);
    }
}

fn reject(labels: &Labels, arrived: Instant, why: Rejection) -> Rejection {
    let [fs, pl] = &labels.0.names;
    let values = [fs.as_str(), pl.as_str(), why.reason()];
    let metrics = &crate::metrics::global().flowcontrol;
    metrics.rejected.with_label_values(&values).inc();
    observe_wait(labels, arrived, false);
    why
}

fn observe_wait(labels: &Labels, arrived: Instant, execute: bool) {
    let waited = &labels.0.waited[usize::from(!execute)];
    waited.observe(arrived.elapsed().as_secs_f64());
}

impl Seat {
    fn executing(
        level: Arc<Level>,
        queue: Option<usize>,
        width: u32,
        labels: Labels,
        started: Instant,
    ) -> Self {
        labels.0.dispatched.inc();
        labels.0.executing.inc();
        labels.0.executing_seats.add(i64::from(width));
        Self {
            level: Some(level),
            queue,
            width,
            labels,
            started,
        }
    }

    /// Seats held.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Releases the seats as of `now` (a test's clock).
    #[cfg(test)]
    pub(crate) fn finish_at(mut self, now: Instant) {
        if let Some(level) = self.level.take() {
            level.finish(self.queue, self.width, self.started, now);
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.labels.0.executing.dec();
        self.labels.0.executing_seats.sub(i64::from(self.width));
        if let Some(level) = self.level.take() {
            level.finish(self.queue, self.width, self.started, Instant::now());
        }
    }
}
