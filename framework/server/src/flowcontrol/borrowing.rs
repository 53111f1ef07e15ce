//! Seat borrowing between priority levels, as kube's `apf_controller.go`: a level's
//! `lendablePercent` of its nominal seats may go to others and its `borrowingLimitPercent`
//! (unbounded when unset) may come from them. Every [`BORROWING_ADJUSTMENT_PERIOD`], and
//! whenever the configuration changes, each level's current limit is recomputed from the seat
//! demand it had (`updateBorrowingLocked`): the Exempt level takes what it used; each limited
//! level is held at least at what it used up to its nominal limit, and the server's seats are
//! shared fairly by smoothed demand within the levels' bounds (`computeConcurrencyAllocation`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::allocation::{Item, allocate};
use super::demand::{DemandStats, round_seats};
use super::queueset::{Kind, Level};

/// kube's `borrowingAdjustmentPeriod`.
pub const BORROWING_ADJUSTMENT_PERIOD: Duration = Duration::from_secs(10);

/// A priority level's seats, as kube's `apiserver_flowcontrol_*_limit_seats` report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeatLimits {
    /// Its share of the server's seats: `ceil(server seats × nominalConcurrencyShares / sum of
    /// all shares)`.
    pub nominal: u32,
    /// The nominal seats less those it may lend (`lendablePercent`).
    pub lower: u32,
    /// The nominal seats plus those it may borrow (`borrowingLimitPercent`; the server's
    /// seats when unset).
    pub upper: u32,
    /// The seats it has now, as borrowing last set them.
    pub current: u32,
}

impl SeatLimits {
    /// The limits of a level of `nominal` seats, as kube's `finishQueueSetReconfigsLocked`
    /// derives them; a new level starts with half of what it may lend lent.
    pub(crate) fn new(
        nominal: u32,
        lendable_percent: Option<i32>,
        borrowing_limit_percent: Option<i32>,
        server_concurrency: u32,
    ) -> Self {
        let percent = |p: i32| round_seats(f64::from(nominal) * f64::from(p) / 100.0);
        let lendable = lendable_percent.map_or(0, percent).min(nominal);
        let borrowable = borrowing_limit_percent.map_or(server_concurrency, percent);
        Self {
            nominal,
            lower: nominal - lendable,
            upper: nominal.saturating_add(borrowable),
            current: nominal - lendable / 2,
        }
    }
}

/// What a level asked for in the period just ended.
struct Asked<'a> {
    level: &'a Arc<Level>,
    limits: SeatLimits,
    stats: DemandStats,
    /// The least it gets now: what it used, within its bounds.
    min_current: u32,
    /// Its place among the limited levels' allocation items.
    item: Option<usize>,
}

/// kube's `updateBorrowingLocked` at `now`: the current limits of `levels` from their demand
/// since the last adjustment.
pub(crate) fn adjust(levels: &BTreeMap<String, Arc<Level>>, now: Instant) {
    let nominal_sum: u64 = levels.values().map(|l| u64::from(l.limits().nominal)).sum();
    let mut remaining = i64::try_from(nominal_sum).unwrap_or(i64::MAX);
    let (mut lower_sum, mut min_current_sum) = (0i64, 0i64);
    let mut items = Vec::new();
    let asked: Vec<Asked<'_>> = levels
        .values()
        .map(|level| {
            let (limits, stats) = level.observe_demand(now);
            let used = stats.high_watermark;
            if level.kind == Kind::Exempt {
                let min_current = limits.lower.max(used);
                remaining -= i64::from(min_current);
                return Asked {
                    level,
                    limits,
                    stats,
                    min_current,
                    item: None,
                };
            }
            let min_current = limits.lower.max(limits.nominal.min(used));
            lower_sum += i64::from(limits.lower);
            min_current_sum += i64::from(min_current);
            items.push(Item {
                lower: f64::from(min_current),
                upper: f64::from(limits.upper),
                target: f64::from(min_current).max(stats.smoothed),
            });
            Asked {
                level,
                limits,
                stats,
                min_current,
                item: Some(items.len() - 1),
            }
        })
        .collect();
    if items.is_empty() {
        return;
    }
    let metrics = &crate::metrics::global().flowcontrol;
    // Not even the lower bounds fit (the Exempt level used much): each level its lower bound;
    // or only part of what was used above them fits: that part of it, to each.
    let share = if remaining <= lower_sum {
        Some(0.0)
    } else if remaining <= min_current_sum {
        Some((remaining - lower_sum) as f64 / (min_current_sum - lower_sum) as f64)
    } else {
        None
    };
    let allocations = match share {
        Some(_) => None,
        None => match allocate(nominal_sum, &items) {
            Ok(solved) => Some(solved),
            Err(error) => {
                tracing::error!(%error, "unable to derive new concurrency limits; keeping them");
                None
            }
        },
    };
    metrics
        .seat_fair_frac
        .set(allocations.as_ref().map_or(0.0, |(_, fair)| *fair));
    for asked in &asked {
        let limits = asked.limits;
        let current = match (asked.item, share, &allocations) {
            (None, _, _) => asked.min_current,
            (Some(_), Some(share), _) => {
                let above = f64::from(asked.min_current - limits.lower);
                limits.lower + round_seats(above * share)
            }
            (Some(i), None, Some((allocs, _))) => round_seats(allocs[i]),
            (Some(_), None, None) => limits.current,
        };
        let target = asked.item.map_or(f64::from(current), |i| items[i].target);
        note(&asked.level.name, &asked.stats, target, current);
        asked.level.set_current_limit(current, now);
    }
}

/// Sets a level's configured limits in kube's metrics.
pub(crate) fn note_configuration(level: &str, limits: &SeatLimits) {
    let metrics = &crate::metrics::global().flowcontrol;
    let set = |gauge: &prometheus::IntGaugeVec, seats: u32| {
        gauge.with_label_values(&[level]).set(i64::from(seats));
    };
    set(&metrics.nominal_limit_seats, limits.nominal);
    set(&metrics.lower_limit_seats, limits.lower);
    set(&metrics.upper_limit_seats, limits.upper);
}

/// kube's `NotePriorityLevelConcurrencyAdjustment`.
fn note(level: &str, stats: &DemandStats, target: f64, current: u32) {
    let metrics = &crate::metrics::global().flowcontrol;
    let labels = [level];
    let float = |gauge: &prometheus::GaugeVec, value: f64| {
        gauge.with_label_values(&labels).set(value);
    };
    float(
        &metrics.demand_seats_high_watermark,
        f64::from(stats.high_watermark),
    );
    float(&metrics.demand_seats_average, stats.average);
    float(&metrics.demand_seats_stdev, stats.deviation);
    float(&metrics.demand_seats_smoothed, stats.smoothed);
    float(&metrics.target_seats, target);
    metrics
        .current_limit_seats
        .with_label_values(&labels)
        .set(i64::from(current));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flowcontrol::bootstrap::{mandatory_priority_levels, suggested_priority_levels};

    /// The levels of kube's `TestUpdateBorrowing`: exempt, workload-high, workload-low and
    /// catch-all, with 6 seats a share (870).
    fn kube_test_levels() -> BTreeMap<String, Arc<Level>> {
        let mut levels = mandatory_priority_levels();
        let suggested = suggested_priority_levels().into_iter();
        levels.extend(suggested.filter(|l| {
            let name = l.metadata.name.as_deref();
            matches!(name, Some("workload-high" | "workload-low"))
        }));
        let config = crate::flowcontrol::build(870, Vec::new(), levels, &BTreeMap::new());
        config.levels
    }

    fn current(levels: &BTreeMap<String, Arc<Level>>) -> [u32; 4] {
        ["exempt", "workload-high", "workload-low", "catch-all"].map(|l| levels[l].limits().current)
    }

    #[test]
    fn the_exempt_level_takes_what_it_used_from_the_others_as_kube_tests_it() {
        let levels = kube_test_levels();
        let limits = |l: &str| levels[l].limits();
        assert_eq!(limits("workload-high").nominal, 240);
        assert_eq!(limits("workload-high").lower, 120);
        assert_eq!(limits("workload-low").nominal, 600);
        assert_eq!(limits("workload-low").lower, 60);
        assert_eq!(limits("catch-all").nominal, 30);
        let start = Instant::now();
        let period = |n: u32| start + n * BORROWING_ADJUSTMENT_PERIOD;
        let demand = |level: &str, seats: u32, at: Instant| {
            levels[level].set_demand(f64::from(seats), at);
        };

        // Everybody wants more than the server has, the exempt level too: it gets what it
        // used, every other level its lower limit.
        for level in ["exempt", "workload-high", "workload-low", "catch-all"] {
            demand(level, 970, start);
        }
        adjust(&levels, period(1));
        assert_eq!(current(&levels), [970, 120, 60, 30]);

        // The exempt level leaves half of what the others used above their lower limits.
        demand("exempt", 330, period(1));
        adjust(&levels, period(2));
        adjust(&levels, period(3));
        assert_eq!(current(&levels), [330, 180, 330, 30]);

        // workload-low needs nothing: the exempt level borrows all it lends.
        demand("exempt", 540, period(3));
        demand("workload-low", 1, period(3));
        adjust(&levels, period(4));
        adjust(&levels, period(5));
        assert_eq!(current(&levels), [540, 240, 60, 30]);
    }

    #[test]
    fn a_level_borrows_from_idle_ones_and_gives_back_when_they_need_their_seats() {
        let mut all = mandatory_priority_levels();
        all.extend(suggested_priority_levels());
        let levels = crate::flowcontrol::build(600, Vec::new(), all, &BTreeMap::new()).levels;
        let start = Instant::now();
        let period = |n: u32| start + n * BORROWING_ADJUSTMENT_PERIOD;
        let limits = |l: &str| levels[l].limits();
        let nominal = limits("global-default").nominal;
        assert_eq!(nominal, 49);

        // global-default wants 200 seats while the others are idle: it borrows beyond its
        // nominal limit; the idle levels keep their lower limits at least.
        levels["global-default"].set_demand(200.0, start);
        adjust(&levels, period(1));
        let borrowing = limits("global-default").current;
        assert!(borrowing >= 200, "{:?}", limits("global-default"));
        for (name, level) in &levels {
            let l = level.limits();
            assert!(
                l.current >= l.lower && l.current <= l.upper,
                "{name}: {l:?}"
            );
        }

        // Every other level now needs its nominal seats: global-default gives back what it
        // borrowed, down to its nominal limit (it still uses that many).
        for (name, level) in &levels {
            if name != "global-default" {
                level.set_demand(f64::from(level.limits().nominal), period(1));
            }
        }
        adjust(&levels, period(2));
        adjust(&levels, period(3));
        for (name, level) in &levels {
            let l = level.limits();
            assert_eq!(l.current, l.nominal, "{name}: {l:?}");
        }
    }
}
