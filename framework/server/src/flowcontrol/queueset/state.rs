//! A level's queues and fair queuing in seat-seconds, as kube's `queueset.go`: the progress
//! meter R advances with real time at the rate each busy queue would be served
//! (`getVirtualTimeRatioLocked`); a request waits for the queue whose head would finish
//! first in virtual time; dispatching charges its queue the request's seats times kube's
//! estimated service duration, and finishing corrects that by the real duration
//! (`finishRequestLocked`), so a flow of long requests gets fewer dispatches than one of short
//! ones; a queue's next dispatch never precedes its head's arrival (kube's anti-windup).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{Kind, Labels, Level, Seat};
use crate::flowcontrol::SeatLimits;
use crate::flowcontrol::demand::{DemandStats, Integrator};
use crate::flowcontrol::seat_seconds::{
    HIGH_R, R_DECREMENT, SeatSeconds, seats_times, signed_seats_times,
};

/// kube's `estimatedServiceDuration`: what a request is first taken to last.
const ESTIMATED_SERVICE_DURATION: Duration = Duration::from_millis(3);

#[derive(Debug)]
pub(super) struct State {
    pub(super) limits: SeatLimits,
    /// The seat demand (seats executing and waiting) over time, and what borrowing made of
    /// the past periods.
    pub(super) demand: Integrator,
    pub(super) stats: DemandStats,
    /// Seats held by executing requests.
    pub(super) in_use: u32,
    /// Requests executing.
    executing: usize,
    /// Requests waiting, and the seats they want.
    pub(super) waiting: usize,
    waiting_seats: u32,
    queues: Vec<Queue>,
    /// Queues with requests waiting or executing.
    busy_queues: usize,
    /// kube's `currentR`: seat-seconds given to each busy queue so far.
    current_r: SeatSeconds,
    /// When `current_r` was last advanced.
    last_real_time: Instant,
    /// The queue dispatched from last: the search for the next starts after it.
    robin_index: usize,
    next_id: u64,
    /// Requests enqueued so far: where the next hand is first looked at.
    enqueues: usize,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<Waiter>,
    /// Seats its waiting requests want.
    waiting_seats: u32,
    /// kube's `nextDispatchR`: R at which its next request starts in the virtual world.
    next_dispatch_r: SeatSeconds,
    /// Seats and requests of its executing requests.
    seats_in_use: u32,
    executing: usize,
    /// Counted in `busy_queues`.
    busy: bool,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    width: u32,
    /// R when it arrived.
    arrival_r: SeatSeconds,
    ready: oneshot::Sender<Seat>,
    labels: Labels,
}

/// The virtual work of a request of `width` seats, before it is measured.
fn work(width: u32) -> SeatSeconds {
    seats_times(f64::from(width), ESTIMATED_SERVICE_DURATION)
}

impl State {
    pub(super) fn new(queues: usize, limits: SeatLimits, now: Instant) -> Self {
        Self {
            limits,
            demand: Integrator::new(now),
            stats: DemandStats::default(),
            in_use: 0,
            executing: 0,
            waiting: 0,
            waiting_seats: 0,
            queues: (0..queues).map(|_| Queue::default()).collect(),
            busy_queues: 0,
            current_r: 0,
            last_real_time: now,
            robin_index: 0,
            next_id: 0,
            enqueues: 0,
        }
    }

    /// Advances R to `now`, as if the queues had been as they are since it last moved.
    pub(super) fn sync_time(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last_real_time);
        self.last_real_time = self.last_real_time.max(now);
        let increment = seats_times(self.virtual_time_ratio(), elapsed);
        self.current_r = self.current_r.saturating_add(increment);
        if self.current_r >= HIGH_R {
            self.advance_epoch();
        }
    }

    /// kube's `getVirtualTimeRatioLocked`: the seats the busy queues could use (at most the
    /// limit), shared between them.
    fn virtual_time_ratio(&self) -> f64 {
        if self.busy_queues == 0 {
            return 0.0;
        }
        let requested = self.in_use.saturating_add(self.waiting_seats);
        f64::from(requested.min(self.limits.current)) / self.busy_queues as f64
    }

    /// kube's `advanceEpoch`: R and every reading of it wound back, long before `u64` ends.
    fn advance_epoch(&mut self) {
        self.current_r -= R_DECREMENT;
        for queue in &mut self.queues {
            if !queue.busy {
                queue.next_dispatch_r = 0;
                continue;
            }
            queue.next_dispatch_r = queue.next_dispatch_r.saturating_sub(R_DECREMENT);
            for waiter in &mut queue.waiting {
                waiter.arrival_r = waiter.arrival_r.saturating_sub(R_DECREMENT);
            }
        }
    }

    /// Counts `queue` in `busy_queues` or not, after a change to it.
    fn recount(&mut self, queue: usize) {
        let q = &mut self.queues[queue];
        let busy = !q.waiting.is_empty() || q.executing > 0;
        if busy != q.busy {
            q.busy = busy;
            if busy {
                self.busy_queues += 1;
            } else {
                self.busy_queues -= 1;
            }
        }
    }

    /// The demand changed at `now`.
    fn note_demand(&mut self, now: Instant) {
        let seats = self.in_use.saturating_add(self.waiting_seats);
        self.demand.set(f64::from(seats), now);
    }

    /// kube's `canAccommodateSeatsLocked`: a request wider than the limit runs alone.
    pub(super) fn can_accommodate(&self, kind: Kind, width: u32) -> bool {
        let limit = self.limits.current;
        match kind {
            Kind::Exempt => true,
            _ if width > limit => self.executing == 0,
            _ => self.in_use + width <= limit,
        }
    }

    /// Counts a request of `width` seats as executing from `queue` (none: a level without
    /// queues).
    pub(super) fn start(&mut self, queue: Option<usize>, width: u32, now: Instant) {
        self.in_use += width;
        self.executing += 1;
        if let Some(q) = queue {
            self.queues[q].seats_in_use += width;
            self.queues[q].executing += 1;
        }
        self.note_demand(now);
    }

    pub(super) fn queue_len(&self, queue: usize) -> usize {
        self.queues[queue].waiting.len()
    }

    /// The queue of `flow`'s hand with the least work waiting, as kube's
    /// `shuffleShardLocked`: the hand is visited from an offset that turns with every enqueue,
    /// so flows with overlapping hands do not all favour the same queue.
    pub(super) fn choose_queue(&mut self, flow: u64, hand_size: usize) -> usize {
        let mut hand = Vec::with_capacity(hand_size);
        deal(flow, self.queues.len(), hand_size, |queue| hand.push(queue));
        let offset = self.enqueues % hand.len().max(1);
        self.enqueues = self.enqueues.wrapping_add(1);
        let mut best: Option<(u32, usize)> = None;
        for i in 0..hand.len() {
            let queue = hand[(offset + i) % hand.len()];
            // Every waiting request's work is its seats × the same estimate.
            let load = self.queues[queue].waiting_seats;
            if best.is_none_or(|(least, _)| load < least) {
                best = Some((load, queue));
            }
        }
        best.map_or(0, |(_, queue)| queue)
    }

    /// Puts a request in `queue`; its id.
    pub(super) fn enqueue(
        &mut self,
        queue: usize,
        width: u32,
        ready: oneshot::Sender<Seat>,
        labels: Labels,
        now: Instant,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let current_r = self.current_r;
        let q = &mut self.queues[queue];
        if q.waiting.is_empty() && q.executing == 0 {
            // An idle queue starts at the present virtual time.
            q.next_dispatch_r = current_r;
        }
        q.waiting.push_back(Waiter {
            id,
            width,
            arrival_r: current_r,
            ready,
            labels,
        });
        q.waiting_seats += width;
        self.waiting += 1;
        self.waiting_seats += width;
        self.note_demand(now);
        self.bound_next_dispatch(queue);
        self.recount(queue);
        id
    }

    /// Takes request `id` out of `queue` (its wait is over); false when it is not there.
    pub(super) fn remove(&mut self, queue: usize, id: u64, now: Instant) -> bool {
        let q = &mut self.queues[queue];
        let Some(at) = q.waiting.iter().position(|w| w.id == id) else {
            return false;
        };
        if let Some(waiter) = q.waiting.remove(at) {
            self.forget_waiting(queue, waiter.width, now);
        }
        self.bound_next_dispatch(queue);
        self.recount(queue);
        true
    }

    fn forget_waiting(&mut self, queue: usize, width: u32, now: Instant) {
        self.queues[queue].waiting_seats -= width;
        self.waiting -= 1;
        self.waiting_seats -= width;
        self.note_demand(now);
    }

    /// A request dispatched from `queue` finished after being served for `served`: its seats
    /// are free, and its queue is charged what it really used rather than the estimate.
    pub(super) fn finish(
        &mut self,
        queue: Option<usize>,
        width: u32,
        served: Duration,
        now: Instant,
    ) {
        self.in_use -= width;
        self.executing -= 1;
        if let Some(q) = queue {
            let estimated = ESTIMATED_SERVICE_DURATION.as_secs_f64();
            let correction = signed_seats_times(f64::from(width), served.as_secs_f64() - estimated);
            let queue_state = &mut self.queues[q];
            queue_state.seats_in_use -= width;
            queue_state.executing -= 1;
            queue_state.next_dispatch_r = queue_state
                .next_dispatch_r
                .saturating_add_signed(correction);
            self.bound_next_dispatch(q);
            self.recount(q);
        }
        self.note_demand(now);
    }

    /// kube's anti-windup: a queue's next dispatch is never before its oldest request
    /// arrived.
    fn bound_next_dispatch(&mut self, queue: usize) {
        let q = &mut self.queues[queue];
        if let Some(head) = q.waiting.front() {
            q.next_dispatch_r = q.next_dispatch_r.max(head.arrival_r);
        }
    }

    /// kube's `dispatchAsMuchAsPossibleLocked`: while seats are free, the head of the queue
    /// whose head would finish first in virtual time.
    pub(super) fn dispatch(&mut self, level: &Arc<Level>, now: Instant) {
        while self.waiting > 0 && self.in_use < self.limits.current {
            if !self.dispatch_one(level, now) {
                return;
            }
        }
    }

    /// kube's `findDispatchQueueToBoundLocked` and `dispatchLocked`: false when nothing can
    /// be dispatched now.
    fn dispatch_one(&mut self, level: &Arc<Level>, now: Instant) -> bool {
        let Some(queue) = self.next_queue() else {
            return false;
        };
        let head = &self.queues[queue].waiting[0];
        if head.ready.is_closed() {
            // Its client left while it waited: it goes without running.
            if let Some(gone) = self.queues[queue].waiting.pop_front() {
                gone.labels.0.inqueue.dec();
                self.forget_waiting(queue, gone.width, now);
            }
            self.bound_next_dispatch(queue);
            self.recount(queue);
            return true;
        }
        if !self.can_accommodate(level.kind, head.width) {
            return false;
        }
        let Some(waiter) = self.queues[queue].waiting.pop_front() else {
            return false;
        };
        self.robin_index = queue;
        let width = waiter.width;
        waiter.labels.0.inqueue.dec();
        self.forget_waiting(queue, width, now);
        self.start(Some(queue), width, now);
        self.queues[queue].next_dispatch_r += work(width);
        self.bound_next_dispatch(queue);
        self.recount(queue);
        let seat = Seat::executing(level.clone(), Some(queue), width, waiter.labels, now);
        if let Err(mut seat) = waiter.ready.send(seat) {
            // It left just now: give the seats back here, under the lock the seat's drop
            // would take.
            seat.level = None;
            self.finish(Some(queue), width, ESTIMATED_SERVICE_DURATION, now);
            let q = &mut self.queues[queue];
            q.next_dispatch_r = q.next_dispatch_r.saturating_sub(work(width));
        }
        true
    }

    /// The queue whose oldest waiting request has the least virtual finish time, looking
    /// round-robin from the one after the last dispatched, so that ties go to the others.
    fn next_queue(&self) -> Option<usize> {
        let count = self.queues.len();
        let mut best: Option<(SeatSeconds, usize)> = None;
        for i in 1..=count {
            let index = (self.robin_index + i) % count;
            let queue = &self.queues[index];
            let Some(head) = queue.waiting.front() else {
                continue;
            };
            let finish = queue.next_dispatch_r.saturating_add(work(head.width));
            if best.is_none_or(|(least, _)| finish < least) {
                best = Some((finish, index));
            }
        }
        best.map(|(_, index)| index)
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
