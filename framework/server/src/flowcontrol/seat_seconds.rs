//! Work in seat-seconds, the unit of fair queuing's virtual time, in kube's fixed-point form
//! (`request/seat_seconds.go`): one unit is 10⁻⁸ seat-seconds, so a `u64` spans some years
//! of a busy level before the progress meter has to be wound back (kube's epochs).

use std::time::Duration;

/// Seat-seconds × 10⁸.
pub(crate) type SeatSeconds = u64;

/// kube's `ssScale`.
const SCALE: f64 = 1e8;

/// kube's `rDecrement`: how far the progress meter and every reading of it are wound back
/// when the meter reaches [`HIGH_R`].
pub(crate) const R_DECREMENT: SeatSeconds = u64::MAX / 2;

/// kube's `highR`.
pub(crate) const HIGH_R: SeatSeconds = R_DECREMENT + R_DECREMENT / 2;

/// `seats` held for `duration` (kube's `SeatsTimesDuration`).
pub(crate) fn seats_times(seats: f64, duration: Duration) -> SeatSeconds {
    signed_seats_times(seats, duration.as_secs_f64()) as SeatSeconds
}

/// `seats` held for `seconds`, which may be negative (a correction).
pub(crate) fn signed_seats_times(seats: f64, seconds: f64) -> i64 {
    (seats * seconds * SCALE).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_seats_times_duration_in_hundred_millionths() {
        assert_eq!(seats_times(1.0, Duration::from_millis(3)), 300_000);
        assert_eq!(seats_times(4.0, Duration::from_secs(2)), 800_000_000);
        assert_eq!(signed_seats_times(2.0, -0.001), -200_000);
    }
}
