//! A priority level's seat demand (the seats its executing and waiting requests want), as
//! kube measures it for borrowing: integrated over time (`fairqueuing/integrator.go`) and,
//! every adjustment period, summarised and smoothed (`seatDemandStats` of
//! `apf_controller.go`).

use std::time::Instant;

/// kube's `seatDemandSmoothingCoefficient`: smoothed demand decays with a half-life of about
/// five minutes of 10 s periods.
const SMOOTHING: f64 = 0.977;

/// The time integral of a value, with its extremes, since the last reset.
#[derive(Debug, Clone)]
pub(crate) struct Integrator {
    last: Instant,
    x: f64,
    /// ∫dt, ∫x dt, ∫x² dt.
    moments: [f64; 3],
    min: f64,
    max: f64,
}

/// What an integration found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Integrated {
    /// Seconds integrated over.
    pub(crate) duration: f64,
    /// Time-weighted average; NaN over no time.
    pub(crate) average: f64,
    /// Time-weighted standard deviation; NaN over no time.
    pub(crate) deviation: f64,
    pub(crate) max: f64,
}

impl Integrator {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            last: now,
            x: 0.0,
            moments: [0.0; 3],
            min: 0.0,
            max: 0.0,
        }
    }

    /// The value is `x` from `now` on.
    pub(crate) fn set(&mut self, x: f64, now: Instant) {
        self.update(now);
        self.x = x;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }

    fn update(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.moments[0] += dt;
        self.moments[1] += self.x * dt;
        self.moments[2] += self.x * self.x * dt;
    }

    /// The results until `now`, and a new integration from `now` (kube's `Reset`).
    pub(crate) fn reset(&mut self, now: Instant) -> Integrated {
        self.update(now);
        let [elapsed, x, xx] = self.moments;
        let (average, deviation) = if elapsed <= 0.0 {
            (f64::NAN, f64::NAN)
        } else {
            let average = x / elapsed;
            let variance = xx / elapsed - average * average;
            // Rounding can make a constant's variance slightly negative: kube's NaN.
            let deviation = if variance >= 0.0 {
                variance.sqrt()
            } else {
                f64::NAN
            };
            (average, deviation)
        };
        let results = Integrated {
            duration: elapsed,
            average,
            deviation,
            max: self.max,
        };
        self.moments = [0.0; 3];
        self.min = self.x;
        self.max = self.x;
        results
    }
}

/// kube's `seatDemandStats`: the last period's average, deviation and high watermark, and
/// the smoothed demand borrowing aims at.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct DemandStats {
    pub(crate) average: f64,
    pub(crate) deviation: f64,
    pub(crate) high_watermark: u32,
    pub(crate) smoothed: f64,
}

impl DemandStats {
    /// Takes in one period: `smoothed` becomes `max(envelope, A × smoothed + (1 − A) ×
    /// envelope)` where the envelope is the average plus the deviation.
    pub(crate) fn update(&mut self, period: Integrated) {
        self.high_watermark = round_seats(period.max);
        if period.duration <= 0.0 {
            return;
        }
        let deviation = if period.deviation.is_nan() {
            0.0
        } else {
            period.deviation
        };
        self.average = period.average;
        self.deviation = deviation;
        let envelope = period.average + deviation;
        let decayed = SMOOTHING * self.smoothed + (1.0 - SMOOTHING) * envelope;
        self.smoothed = envelope.max(decayed);
    }
}

/// Seats from a real number, rounded as Go's `math.Round` (half away from zero), at least 0.
pub(crate) fn round_seats(x: f64) -> u32 {
    let rounded = x.round();
    if rounded <= 0.0 || rounded.is_nan() {
        0
    } else if rounded >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        rounded as u32
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn demand_is_averaged_over_time_and_smoothed_across_periods() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut demand = Integrator::new(start);
        demand.set(10.0, start);
        demand.set(30.0, at(5));
        let period = demand.reset(at(10));
        assert_eq!(period.duration, 10.0);
        assert_eq!(period.average, 20.0);
        assert_eq!(period.deviation, 10.0);
        assert_eq!(period.max, 30.0);
        let mut stats = DemandStats::default();
        stats.update(period);
        assert_eq!((stats.high_watermark, stats.smoothed), (30, 30.0));
        // Idle since: the high watermark starts from the value at the reset, then falls; the
        // smoothed demand decays slowly.
        demand.set(0.0, at(10));
        stats.update(demand.reset(at(20)));
        assert_eq!(stats.high_watermark, 30);
        stats.update(demand.reset(at(30)));
        assert_eq!(stats.high_watermark, 0);
        assert!(stats.smoothed > 28.0 && stats.smoothed < 30.0, "{stats:?}");
    }
}
