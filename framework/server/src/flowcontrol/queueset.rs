//! One priority level's seats and queues, after kube's `fairqueuing/queueset`: a request of a
//! flow is dealt a hand of queues by shuffle sharding the flow's hash, joins the one of them
//! with the fewest seats waiting (or is rejected `queue-full`), and waits until
//! the level dispatches it or its wait limit passes (`time-out`). Dispatch is fair across
//! queues by virtual finish time, as kube's, with one simplification: every request is taken
//! to last the same (one unit of virtual time per seat), where kube measures how long requests
//! really run.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use prometheus::{Histogram, IntCounter, IntGauge};

use super::retry_after::DroppedRequests;
use tokio::sync::oneshot;

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

#[derive(Debug, Default)]
struct State {
    /// Seats of the level (its nominal concurrency limit).
    limit: u32,
    /// Seats held by executing requests.
    in_use: u32,
    queues: Vec<Queue>,
    /// The start tag of the request dispatched last.
    virtual_time: u64,
    next_id: u64,
    /// Requests enqueued so far: where the next hand is first looked at.
    enqueues: usize,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<Waiter>,
    /// Virtual time at which the queue's next request would start.
    next_dispatch: u64,
    /// Seats held by this queue's executing requests.
    executing: u32,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    width: u32,
    ready: oneshot::Sender<Seat>,
    labels: Labels,
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
    /// `None`: an exempt level's, which counts nothing.
    level: Option<Arc<Level>>,
    queue: Option<usize>,
    width: u32,
    labels: Labels,
}

impl Level {
    pub(crate) fn new(name: &str, uid: &str, kind: Kind, limit: u32) -> Arc<Self> {
        let queues = match kind {
            Kind::Queue { queues, .. } => queues,
            _ => 0,
        };
        Arc::new(Self {
            name: name.into(),
            uid: uid.into(),
            kind,
            state: Mutex::new(State {
                limit,
                queues: (0..queues).map(|_| Queue::default()).collect(),
                ..State::default()
            }),
            dropped: DroppedRequests::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Requests waiting in the queues, and seats in use.
    #[cfg(test)]
    pub(crate) fn load(&self) -> (usize, u32) {
        let state = self.lock();
        let waiting = state.queues.iter().map(|q| q.waiting.len()).sum();
        (waiting, state.in_use)
    }

    /// Seats of the level.
    pub(crate) fn limit(&self) -> u32 {
        self.lock().limit
    }

    /// A new limit, from a new configuration: waiting requests that now fit are dispatched.
    pub(crate) fn set_limit(self: &Arc<Self>, limit: u32) {
        let mut state = self.lock();
        state.limit = limit;
        state.dispatch(self);
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
        let (queue, id, mut receiver) = match self.enter(flow, width, &labels) {
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
            Err(_) if self.leave(queue, id, &labels) => None,
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

    /// A seat now, a place in a queue, or a refusal.
    fn enter(self: &Arc<Self>, flow: u64, width: u32, labels: &Labels) -> Entry {
        let (hand_size, queue_length_limit) = match self.kind {
            Kind::Exempt => return Entry::Now(Seat::executing(None, None, width, labels.clone())),
            Kind::Reject => (0, 0),
            Kind::Queue {
                hand_size,
                queue_length_limit,
                ..
            } => (hand_size, queue_length_limit),
        };
        let mut state = self.lock();
        let width = width.clamp(1, state.limit.max(1));
        if self.kind == Kind::Reject {
            // A seat now or never.
            if state.in_use == 0 || state.in_use + width <= state.limit {
                state.in_use += width;
                return Entry::Now(Seat::executing(
                    Some(self.clone()),
                    None,
                    width,
                    labels.clone(),
                ));
            }
            return Entry::Refused(Rejection::ConcurrencyLimit);
        }
        let queue = state.choose_queue(flow, hand_size);
        if state.queues[queue].waiting.len() >= queue_length_limit {
            return Entry::Refused(Rejection::QueueFull);
        }
        let (ready, receiver) = oneshot::channel();
        let id = state.next_id;
        state.next_id += 1;
        let virtual_time = state.virtual_time;
        let q = &mut state.queues[queue];
        if q.waiting.is_empty() {
            q.next_dispatch = q.next_dispatch.max(virtual_time);
        }
        q.waiting.push_back(Waiter {
            id,
            width,
            ready,
            labels: labels.clone(),
        });
        labels.0.inqueue.inc();
        state.dispatch(self);
        Entry::Queued {
            queue,
            id,
            receiver,
        }
    }

    /// Takes request `id` out of `queue`; false when it is no longer there (dispatched).
    fn leave(&self, queue: usize, id: u64, labels: &Labels) -> bool {
        let mut state = self.lock();
        let q = &mut state.queues[queue];
        let Some(at) = q.waiting.iter().position(|w| w.id == id) else {
            return false;
        };
        q.waiting.remove(at);
        labels.0.inqueue.dec();
        true
    }
}

/// What [`Level::enter`] found.
enum Entry {
    Now(Seat),
    Queued {
        queue: usize,
        id: u64,
        receiver: oneshot::Receiver<Seat>,
    },
    Refused(Rejection),
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

impl State {
    /// The queue of `flow`'s hand with the fewest seats waiting, as kube's
    /// `shuffleShardLocked`: the hand is visited from an offset that turns with every enqueue,
    /// so flows with overlapping hands do not all favour the same queue.
    fn choose_queue(&mut self, flow: u64, hand_size: usize) -> usize {
        let mut hand = Vec::with_capacity(hand_size);
        deal(flow, self.queues.len(), hand_size, |queue| hand.push(queue));
        let offset = self.enqueues % hand.len().max(1);
        self.enqueues = self.enqueues.wrapping_add(1);
        let mut best: Option<(u64, usize)> = None;
        for i in 0..hand.len() {
            let queue = hand[(offset + i) % hand.len()];
            let waiting = self.queues[queue].waiting.iter();
            let load = waiting.map(|w| u64::from(w.width)).sum::<u64>();
            if best.is_none_or(|(least, _)| load < least) {
                best = Some((load, queue));
            }
        }
        best.map_or(0, |(_, queue)| queue)
    }

    /// Dispatches waiting requests while seats allow: each time the head of the queue with the
    /// smallest virtual start, as fair queuing does; one request always runs, however wide.
    fn dispatch(&mut self, level: &Arc<Level>) {
        loop {
            let next = (0..self.queues.len())
                .filter(|&q| !self.queues[q].waiting.is_empty())
                .min_by_key(|&q| (self.queues[q].next_dispatch, q));
            let Some(queue) = next else {
                return;
            };
            let head = &self.queues[queue].waiting[0];
            let width = head.width.min(self.limit.max(1));
            if self.in_use > 0 && self.in_use + width > self.limit {
                return;
            }
            let Some(waiter) = self.queues[queue].waiting.pop_front() else {
                return;
            };
            waiter.labels.0.inqueue.dec();
            let q = &mut self.queues[queue];
            self.virtual_time = q.next_dispatch;
            q.next_dispatch += u64::from(width);
            q.executing += width;
            self.in_use += width;
            let seat = Seat::executing(Some(level.clone()), Some(queue), width, waiter.labels);
            if let Err(mut seat) = waiter.ready.send(seat) {
                // Its request is gone (the client left): give the seats back here, under the
                // lock the seat's drop would take.
                self.in_use -= width;
                self.queues[queue].executing -= width;
                seat.level = None;
            }
        }
    }
}

impl Seat {
    fn executing(
        level: Option<Arc<Level>>,
        queue: Option<usize>,
        width: u32,
        labels: Labels,
    ) -> Self {
        labels.0.dispatched.inc();
        labels.0.executing.inc();
        labels.0.executing_seats.add(i64::from(width));
        Self {
            level,
            queue,
            width,
            labels,
        }
    }

    /// Seats held.
    pub fn width(&self) -> u32 {
        self.width
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.labels.0.executing.dec();
        self.labels.0.executing_seats.sub(i64::from(self.width));
        let Some(level) = self.level.take() else {
            return;
        };
        let mut state = level.lock();
        state.in_use -= self.width;
        if let Some(queue) = self.queue {
            state.queues[queue].executing -= self.width;
        }
        state.dispatch(&level);
    }
}

/// kube's shuffle-sharding `Dealer.Deal`: `hand_size` distinct cards of a deck of `deck_size`
/// from `hash`, each handed to `pick` in order.
pub(crate) fn deal(mut hash: u64, deck_size: usize, hand_size: usize, mut pick: impl FnMut(usize)) {
    let hand_size = hand_size.clamp(1, deck_size.max(1));
    let mut remainders = Vec::with_capacity(hand_size);
    for i in 0..hand_size {
        let size = (deck_size - i) as u64;
        let next = hash / size;
        remainders.push((hash - size * next) as usize);
        hash = next;
    }
    for i in 0..hand_size {
        let mut card = remainders[i];
        for j in (1..=i).rev() {
            if card >= remainders[j - 1] {
                card += 1;
            }
        }
        pick(card);
    }
}
