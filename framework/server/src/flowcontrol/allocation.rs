//! The fair division of the server's seats between priority levels, as kube's `conc_alloc.go`
//! (`computeConcurrencyAllocation`): every level gets the same multiple (the *fair fraction*)
//! of its target, except that no level goes below its lower bound nor above its upper bound.

/// One level's part of the problem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Item {
    /// What the level would like (its smoothed seat demand, at least its lower bound).
    pub(crate) target: f64,
    pub(crate) lower: f64,
    pub(crate) upper: f64,
}

/// kube's `MinTarget`: a zero target is taken as this, so that it can be divided by.
const MIN_TARGET: f64 = 0.001;
/// kube's `epsilon`: the slack of floating-point sums.
const EPSILON: f64 = 0.000_000_1;

/// Allocations summing to `required`, each within its item's bounds and otherwise the same
/// multiple of its target, and that multiple; or why there are none (the bounds cannot
/// reach `required`).
pub(crate) fn allocate(required: u64, items: &[Item]) -> Result<(Vec<f64>, f64), String> {
    let required = required as f64;
    let (mut low_sum, mut high_sum, mut target_sum) = (0.0, 0.0, 0.0);
    let mut relative = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if item.lower < 0.0 {
            return Err(format!("lower bound {i} is {} (negative)", item.lower));
        }
        if item.target < item.lower {
            return Err(format!(
                "target {i} is {} below its lower bound",
                item.target
            ));
        }
        if item.upper < item.lower {
            return Err(format!("upper bound {i} is {} below its lower", item.upper));
        }
        let target = item.target.max(MIN_TARGET);
        low_sum += item.lower;
        high_sum += item.upper;
        target_sum += target;
        relative.push(Relative {
            target,
            lower: item.lower / target,
            upper: item.upper / target,
        });
    }
    let lowest_lower = relative.iter().map(|r| r.lower).fold(f64::MAX, f64::min);
    let highest_upper = relative.iter().map(|r| r.upper).fold(f64::MIN, f64::max);
    let highest_lower = relative.iter().map(|r| r.lower).fold(f64::MIN, f64::max);
    let lowest_upper = relative.iter().map(|r| r.upper).fold(f64::MAX, f64::min);
    if low_sum - required > EPSILON {
        return Err(format!("lower bounds sum to {low_sum}, above {required}"));
    }
    if required - high_sum > EPSILON {
        return Err(format!("upper bounds sum to {high_sum}, below {required}"));
    }
    if required == 0.0 {
        return Ok((vec![0.0; items.len()], 0.0));
    }
    if low_sum - required > -EPSILON {
        return Ok((items.iter().map(|i| i.lower).collect(), lowest_lower));
    }
    if required - high_sum > -EPSILON {
        return Ok((items.iter().map(|i| i.upper).collect(), highest_upper));
    }
    let fair = required / target_sum;
    if highest_lower <= fair && fair <= lowest_upper {
        return Ok((relative.iter().map(|r| r.target * fair).collect(), fair));
    }
    let fair = bounded_fraction(&relative, required, low_sum, lowest_lower)?;
    let allocs = items
        .iter()
        .zip(&relative)
        .map(|(item, r)| (fair * r.target).clamp(item.lower, item.upper))
        .collect();
    Ok((allocs, fair))
}

/// An item with its bounds divided by its target.
struct Relative {
    target: f64,
    lower: f64,
    upper: f64,
}

/// The fair fraction when some bounds matter: the fraction rises from the lowest relative
/// bound, past each bound in turn (a lower bound makes its item follow the fraction, an upper
/// bound stops it), until the allocations sum to `required`.
fn bounded_fraction(
    relative: &[Relative],
    required: f64,
    low_sum: f64,
    lowest_lower: f64,
) -> Result<f64, String> {
    // Every bound, ascending: (relative bound, whether it is a lower one, the item's target).
    let mut bounds: Vec<(f64, bool, f64)> = relative
        .iter()
        .flat_map(|r| [(r.lower, true, r.target), (r.upper, false, r.target)])
        .collect();
    bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut sum = low_sum;
    let mut fair = lowest_lower;
    let mut sensitive_targets = 0.0;
    let mut sensitive = 0i64;
    let (mut delta_targets, mut delta) = (0.0, 0i64);
    let mut next = 0;
    while sum < required {
        let next_bound = loop {
            sensitive_targets += delta_targets;
            sensitive += delta;
            let Some(&(bound, lower, target)) = bounds.get(next) else {
                return Err("ran out of bounds in a bound-constrained problem".into());
            };
            (delta, delta_targets) = if lower { (1, target) } else { (-1, -target) };
            next += 1;
            if bound > fair {
                break bound;
            }
        };
        if sensitive == 0 {
            fair = next_bound;
            continue;
        }
        let reach = fair + (required - sum) / sensitive_targets;
        if reach <= next_bound {
            return Ok(reach);
        }
        sum += (next_bound - fair) * sensitive_targets;
        fair = next_bound;
    }
    Ok(fair)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(target: f64, lower: f64, upper: f64) -> Item {
        Item {
            target,
            lower,
            upper,
        }
    }

    /// What kube's `TestConcAlloc` checks of every solution.
    fn check(required: u64, items: &[Item]) -> Vec<f64> {
        let (allocs, fair) = allocate(required, items).unwrap();
        let sum: f64 = allocs.iter().sum();
        assert!(
            (sum - required as f64).abs() < 1e-9,
            "{allocs:?} sum to {sum}"
        );
        for (item, alloc) in items.iter().zip(&allocs) {
            let proportional = fair * item.target.max(MIN_TARGET);
            let expected = proportional.clamp(item.lower, item.upper);
            assert!(
                (alloc - expected).abs() < 1e-9,
                "{item:?}: {alloc} ≠ {expected}"
            );
        }
        allocs
    }

    #[test]
    fn seats_are_shared_in_proportion_to_targets_within_the_bounds() {
        // No bound matters: proportional to the targets.
        assert_eq!(
            check(30, &[item(10.0, 0.0, 100.0), item(20.0, 0.0, 100.0)]),
            [10.0, 20.0]
        );
        assert_eq!(
            check(60, &[item(10.0, 0.0, 100.0), item(20.0, 0.0, 100.0)]),
            [20.0, 40.0]
        );
        // An upper bound stops one; the rest goes to the other.
        assert_eq!(
            check(60, &[item(10.0, 0.0, 15.0), item(20.0, 0.0, 100.0)]),
            [15.0, 45.0]
        );
        // A lower bound holds one up; the other gets what is left.
        assert_eq!(
            check(30, &[item(25.0, 25.0, 100.0), item(20.0, 0.0, 100.0)]),
            [25.0, 5.0]
        );
        // An idle level (target 0) gets nothing beyond its lower bound.
        let allocs = check(50, &[item(0.0, 0.0, 100.0), item(10.0, 10.0, 100.0)]);
        assert!(allocs[0] < 0.01 && allocs[1] > 49.99, "{allocs:?}");
        // No wiggle room: the bounds.
        assert_eq!(
            check(20, &[item(10.0, 10.0, 30.0), item(10.0, 10.0, 30.0)]),
            [10.0, 10.0]
        );
        assert_eq!(
            check(60, &[item(10.0, 10.0, 30.0), item(10.0, 10.0, 30.0)]),
            [30.0, 30.0]
        );
        assert!(allocate(10, &[item(20.0, 20.0, 30.0)]).is_err());
        assert!(allocate(40, &[item(20.0, 20.0, 30.0)]).is_err());
    }

    #[test]
    fn random_problems_are_solved_as_kube_checks_them() {
        // A small linear congruential generator: kube's test draws 10,000 random problems.
        let mut seed = 1_234_567_890u64;
        let mut random = move || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..2000 {
            let n = 1 + (random() * 8.0) as usize;
            let items: Vec<Item> = (0..n)
                .map(|_| {
                    let lower = (random() * 5.0 - 1.0).max(0.0);
                    let target = if random() < 0.2 {
                        lower
                    } else {
                        lower + 2.0 * random()
                    };
                    item(target, lower, lower + 3.0 * random())
                })
                .collect();
            let low: f64 = items.iter().map(|i| i.lower).sum();
            let high: f64 = items.iter().map(|i| i.upper).sum();
            let required = (low + (high - low) * random()).round();
            if required < low || required > high {
                continue;
            }
            check(required as u64, &items);
        }
    }
}
