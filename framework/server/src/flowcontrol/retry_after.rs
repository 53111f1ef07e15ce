//! The `Retry-After` of a priority level's refusals, as kube's `dropped_requests_tracker.go`:
//! 1 s to begin with; doubled (to at most 32 s) when the level refused at least three times
//! as many requests as the current value within that many seconds, and lowered by one each
//! second that it refused fewer than that value.

use std::sync::{Mutex, PoisonError};

/// kube's `maxRetryAfter`.
const MAX_RETRY_AFTER: i64 = 32;

/// The refusals of one level.
#[derive(Debug)]
pub(crate) struct DroppedRequests(Mutex<Stats>);

#[derive(Debug)]
struct Stats {
    /// Refusals by second, before the current one.
    history: Vec<(i64, i64)>,
    current_unix: i64,
    current_count: i64,
    retry_after: i64,
    retry_after_update_unix: i64,
}

impl Default for DroppedRequests {
    fn default() -> Self {
        Self(Mutex::new(Stats {
            history: Vec::new(),
            current_unix: 0,
            current_count: 0,
            retry_after: 1,
            retry_after_update_unix: 0,
        }))
    }
}

impl DroppedRequests {
    /// A refusal at `unix` (seconds).
    pub(crate) fn record(&self, unix: i64) {
        let mut stats = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if stats.current_unix == unix {
            stats.current_count += 1;
            return;
        }
        let (previous, count) = (stats.current_unix, stats.current_count);
        stats.update_history(previous, count);
        stats.current_unix = unix;
        stats.current_count = 1;
        stats.update_retry_after(unix);
    }

    /// The seconds a refused client should wait.
    pub(crate) fn retry_after(&self) -> i64 {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retry_after
    }
}

impl Stats {
    fn update_history(&mut self, unix: i64, count: i64) {
        self.history.push((unix, count));
        let keep = (2 * self.retry_after).min(MAX_RETRY_AFTER);
        let stale = self
            .history
            .iter()
            .take_while(|(at, _)| unix - at > keep)
            .count();
        self.history.drain(..stale);
    }

    fn update_retry_after(&mut self, unix: i64) {
        let retry_after = self.retry_after;
        let dropped: i64 = self
            .history
            .iter()
            .rev()
            .take_while(|(at, _)| unix - at <= retry_after)
            .filter(|(at, _)| *at < unix)
            .map(|(_, count)| count)
            .sum();
        if unix - self.retry_after_update_unix >= retry_after && dropped >= 3 * retry_after {
            self.retry_after = (retry_after * 2).min(MAX_RETRY_AFTER);
            self.retry_after_update_unix = unix;
        } else if dropped < retry_after && retry_after > 1 {
            self.retry_after = retry_after - 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_doubles_under_refusals_and_decays_without() {
        let dropped = DroppedRequests::default();
        assert_eq!(dropped.retry_after(), 1);
        for _ in 0..5 {
            dropped.record(100);
        }
        assert_eq!(
            dropped.retry_after(),
            1,
            "decided when the next second begins"
        );
        dropped.record(101);
        assert_eq!(dropped.retry_after(), 2, "5 refusals ≥ 3 × 1");
        for _ in 0..10 {
            dropped.record(102);
        }
        dropped.record(103);
        assert_eq!(dropped.retry_after(), 4, "11 refusals in 2 s ≥ 3 × 2");
        dropped.record(110);
        assert_eq!(dropped.retry_after(), 3, "a quiet while lowers it by one");
    }
}
