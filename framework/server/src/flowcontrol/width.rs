//! How many seats a request occupies, after kube's `request/width.go` and
//! `list_work_estimator.go`: one, except a list, which takes a seat for every 100 objects it
//! reads, at most the level's maximum (15% of its seats, and no more than its seats divided by
//! its hand size, as kube's `MaxSeats`), and at most 10.

/// kube's `objectsPerSeat`.
const OBJECTS_PER_SEAT: u64 = 100;

/// kube's `MaximumListSeatsLimit` (without the size-based estimate).
pub const MAXIMUM_LIST_SEATS: u32 = 10;

/// What the width of a list depends on.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListShape {
    /// The objects of the resource stored now; `None` when not known (kube then takes the
    /// minimum: the resource may be served elsewhere).
    pub stored: Option<u64>,
    /// `limit`, when given.
    pub limit: Option<u64>,
    /// A label or field selector is given.
    pub selector: bool,
    /// Read from storage rather than the watch cache (a `continue`, or
    /// `resourceVersionMatch=Exact`).
    pub from_storage: bool,
    /// The list names one object (`metadata.name=` field selector).
    pub single: bool,
}

/// kube's `seatsBasedOnObjectCount`, bounded by `max_seats`.
pub fn list_seats(shape: ListShape, max_seats: u32) -> u32 {
    let max_seats = max_seats.clamp(1, MAXIMUM_LIST_SEATS);
    let Some(stored) = shape.stored else {
        return 1;
    };
    let limit = match shape.limit {
        Some(limit) if limit > 0 && limit < stored => limit,
        _ => stored,
    };
    let objects = if shape.single {
        1
    } else if !shape.from_storage {
        stored
    } else if shape.selector {
        stored + limit
    } else {
        2 * limit
    };
    let seats = objects.div_ceil(OBJECTS_PER_SEAT);
    u32::try_from(seats).unwrap_or(u32::MAX).clamp(1, max_seats)
}

/// kube's per-level `MaxSeats`: `max(1, min(ceil(limit × 15%), limit / handSize))`.
pub(crate) fn max_seats(limit: u32, hand_size: Option<usize>) -> u32 {
    let fifteen_percent = (u64::from(limit) * 15).div_ceil(100);
    let per_hand = match hand_size {
        Some(hand) if hand > 0 => u64::from(limit) / hand as u64,
        _ => u64::from(limit),
    };
    u32::try_from(fifteen_percent.min(per_hand).max(1)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_takes_a_seat_per_hundred_objects_within_the_bounds() {
        let cached = |stored| ListShape {
            stored: Some(stored),
            ..ListShape::default()
        };
        assert_eq!(list_seats(cached(0), 10), 1);
        assert_eq!(list_seats(cached(250), 10), 3);
        assert_eq!(list_seats(cached(100_000), 10), 10);
        assert_eq!(list_seats(cached(100_000), 4), 4);
        assert_eq!(
            list_seats(ListShape::default(), 10),
            1,
            "unknown: the minimum"
        );
        let paged = ListShape {
            stored: Some(10_000),
            limit: Some(100),
            from_storage: true,
            ..ListShape::default()
        };
        assert_eq!(list_seats(paged, 10), 2, "2 × limit from storage");
        let single = ListShape {
            single: true,
            ..cached(100_000)
        };
        assert_eq!(list_seats(single, 10), 1);
        assert_eq!(max_seats(600, Some(6)), 90);
        assert_eq!(max_seats(20, Some(6)), 3);
        assert_eq!(max_seats(1, Some(6)), 1);
    }
}
