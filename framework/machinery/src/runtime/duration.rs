//! Human-readable durations as kubectl shows them in the AGE column (`5s`, `3m20s`,
//! `2d3h`, `3y45d`), identical to kube's `util/duration` so our tables match kube's, plus
//! the age of a timestamp as kube's table convertors render it.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const YEAR: i64 = 365 * DAY;

/// The AGE form, ~2–3 significant figures: `70s`, `3m10s`, `70m`, `7h59m`, `47h`,
/// `2d1h`, `367d`, `2y1d`, `8y`.
///
/// ```
/// use std::time::Duration;
/// use extension_apiserver_machinery::runtime::duration::human_duration;
/// assert_eq!(human_duration(Duration::from_secs(200)), "3m20s");
/// assert_eq!(human_duration(Duration::from_secs(51 * 3600)), "2d3h");
/// ```
pub fn human_duration(d: Duration) -> String {
    human_duration_signed(to_signed(d))
}

/// The one-unit form: `59s`, `1m`, `23h`, `364d`, `2y`.
pub fn short_human_duration(d: Duration) -> String {
    short_human_duration_signed(to_signed(d))
}

fn to_signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

/// Clock skew: kube calls up to two seconds in the future "now" (`0s`), and anything
/// further `<invalid>`. Returns the whole seconds otherwise (truncated, as Go's `int()`).
fn checked_seconds(d: SignedDuration) -> Result<i64, &'static str> {
    match d.as_secs() {
        s if s < -1 => Err("<invalid>"),
        s if s < 0 => Err("0s"),
        s => Ok(s),
    }
}

/// [`human_duration`] for a duration that may be negative (a timestamp in the future).
pub fn human_duration_signed(d: SignedDuration) -> String {
    match checked_seconds(d) {
        Err(text) => text.to_string(),
        Ok(secs) if secs < 2 * MINUTE => format!("{secs}s"),
        Ok(secs) if secs < 3 * HOUR => minutes_text(secs),
        Ok(secs) if secs < 2 * DAY => hours_text(secs),
        Ok(secs) if secs < 2 * YEAR => days_text(secs),
        Ok(secs) => years_text(secs),
    }
}

/// Two units below ten minutes (`9m59s`), whole minutes up to three hours.
fn minutes_text(secs: i64) -> String {
    let minutes = secs / MINUTE;
    if minutes >= 10 {
        return format!("{minutes}m");
    }
    with_remainder(minutes, "m", secs % MINUTE, "s")
}

/// Two units below eight hours (`7h59m`), whole hours up to two days.
fn hours_text(secs: i64) -> String {
    let hours = secs / HOUR;
    if hours >= 8 {
        return format!("{hours}h");
    }
    with_remainder(hours, "h", secs / MINUTE % 60, "m")
}

/// Two units below eight days (`7d23h`), whole days up to two years.
fn days_text(secs: i64) -> String {
    let days = secs / DAY;
    if days >= 8 {
        return format!("{days}d");
    }
    with_remainder(days, "d", secs / HOUR % 24, "h")
}

/// Two units below eight years (`7y364d`), whole years beyond.
fn years_text(secs: i64) -> String {
    let years = secs / YEAR;
    if years >= 8 {
        return format!("{years}y");
    }
    with_remainder(years, "y", secs / DAY % 365, "d")
}

fn with_remainder(big: i64, big_unit: &str, small: i64, small_unit: &str) -> String {
    if small == 0 {
        return format!("{big}{big_unit}");
    }
    format!("{big}{big_unit}{small}{small_unit}")
}

/// [`short_human_duration`] for a duration that may be negative.
pub fn short_human_duration_signed(d: SignedDuration) -> String {
    match checked_seconds(d) {
        Err(text) => text.to_string(),
        Ok(secs) if secs < MINUTE => format!("{secs}s"),
        Ok(secs) if secs < HOUR => format!("{}m", secs / MINUTE),
        Ok(secs) if secs < DAY => format!("{}h", secs / HOUR),
        Ok(secs) if secs < YEAR => format!("{}d", secs / DAY),
        Ok(secs) => format!("{}y", secs / YEAR),
    }
}

/// The age of an RFC 3339 timestamp at `now`, as kube renders a `date` cell or the AGE
/// of `creationTimestamp`: `<unknown>` when empty or `"null"` (Go's zero time),
/// `<invalid>` when it does not parse, else [`human_duration_signed`] of `now - ts`.
pub fn human_age(timestamp: &str, now: Timestamp) -> String {
    if timestamp.is_empty() || timestamp == "null" {
        return "<unknown>".to_string();
    }
    match parse_rfc3339(timestamp) {
        Some(ts) => human_duration_signed(now.duration_since(ts)),
        None => "<invalid>".to_string(),
    }
}

/// Parses the strict RFC 3339 form Go's `time.RFC3339` accepts
/// (`2006-01-02T15:04:05[.frac](Z|±hh:mm)`); jiff alone would also take looser forms.
pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && valid_zone(&s[19..]);
    if !shape {
        return None;
    }
    s.parse().ok()
}

/// `[.digits](Z|±hh:mm)`: the part after the seconds.
fn valid_zone(rest: &str) -> bool {
    let rest = match rest.strip_prefix('.') {
        Some(frac) => {
            let end = frac
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(frac.len());
            if end == 0 {
                return false;
            }
            &frac[end..]
        }
        None => rest,
    };
    let b = rest.as_bytes();
    rest == "Z"
        || (b.len() == 6
            && matches!(b[0], b'+' | b'-')
            && b[1..3].iter().all(u8::is_ascii_digit)
            && b[3] == b':'
            && b[4..6].iter().all(u8::is_ascii_digit))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;
    const S: i64 = 1_000_000_000;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;
    const D: i64 = 24 * H;
    const Y: i64 = 365 * D;

    fn human(nanos: i64) -> String {
        human_duration_signed(SignedDuration::from_nanos(nanos))
    }

    fn short(nanos: i64) -> String {
        short_human_duration_signed(SignedDuration::from_nanos(nanos))
    }

    #[test]
    fn human_duration_examples() {
        let cases = [
            (S, "1s"),
            (70 * S, "70s"),
            (190 * S, "3m10s"),
            (70 * M, "70m"),
            (47 * H, "47h"),
            (49 * H, "2d1h"),
            ((8 * 24 + 2) * H, "8d"),
            (367 * 24 * H, "367d"),
            ((365 * 2 * 24 + 25) * H, "2y1d"),
            ((365 * 8 * 24 + 2) * H, "8y"),
        ];
        for (nanos, want) in cases {
            assert_eq!(human(nanos), want, "{nanos}ns");
        }
    }

    #[test]
    fn human_duration_boundaries() {
        let cases = [
            (-2 * S, "<invalid>"),
            (-2 * S + 1, "0s"),
            (0, "0s"),
            (S - MS, "0s"),
            (2 * M - MS, "119s"),
            (2 * M, "2m"),
            (2 * M + S, "2m1s"),
            (10 * M - MS, "9m59s"),
            (10 * M, "10m"),
            (10 * M + S, "10m"),
            (3 * H - MS, "179m"),
            (3 * H, "3h"),
            (3 * H + M, "3h1m"),
            (8 * H - MS, "7h59m"),
            (8 * H, "8h"),
            (8 * H + 59 * M, "8h"),
            (2 * D - MS, "47h"),
            (2 * D, "2d"),
            (2 * D + H, "2d1h"),
            (8 * D - MS, "7d23h"),
            (8 * D, "8d"),
            (8 * D + 23 * H, "8d"),
            (2 * Y - MS, "729d"),
            (2 * Y, "2y"),
            (2 * Y + 23 * H, "2y"),
            (2 * Y + 23 * H + 59 * M, "2y"),
            (2 * Y + 24 * H - MS, "2y"),
            (2 * Y + 24 * H, "2y1d"),
            (3 * Y, "3y"),
            (4 * Y, "4y"),
            (5 * Y, "5y"),
            (6 * Y, "6y"),
            (7 * Y, "7y"),
            (8 * Y - MS, "7y364d"),
            (8 * Y, "8y"),
            (8 * Y + 364 * D, "8y"),
            (9 * Y, "9y"),
        ];
        for (nanos, want) in cases {
            assert_eq!(human(nanos), want, "{nanos}ns");
        }
    }

    #[test]
    fn short_human_duration_boundaries() {
        let cases = [
            (-2 * S, "<invalid>"),
            (-2 * S + 1, "0s"),
            (0, "0s"),
            (S - MS, "0s"),
            (S, "1s"),
            (2 * S - MS, "1s"),
            (M - MS, "59s"),
            (M, "1m"),
            (2 * M - MS, "1m"),
            (H - MS, "59m"),
            (H, "1h"),
            (2 * H - MS, "1h"),
            (D - MS, "23h"),
            (D, "1d"),
            (2 * D - MS, "1d"),
            (Y - MS, "364d"),
            (Y, "1y"),
            (2 * Y - MS, "1y"),
            (2 * Y, "2y"),
        ];
        for (nanos, want) in cases {
            assert_eq!(short(nanos), want, "{nanos}ns");
        }
    }

    #[test]
    fn unsigned_entry_points() {
        assert_eq!(human_duration(Duration::from_secs(5)), "5s");
        assert_eq!(human_duration(Duration::from_secs(200)), "3m20s");
        assert_eq!(
            human_duration(Duration::from_secs(3 * 365 * 86400 + 45 * 86400)),
            "3y45d"
        );
        assert_eq!(
            short_human_duration(Duration::from_secs(3 * 365 * 86400 + 45 * 86400)),
            "3y"
        );
        assert_eq!(
            human_duration(Duration::MAX),
            format!("{}y", i64::MAX / (365 * 86400))
        );
    }

    #[test]
    fn ages() {
        let now: Timestamp = "2024-03-01T12:00:00Z".parse().unwrap();
        assert_eq!(human_age("2024-03-01T11:59:55Z", now), "5s");
        assert_eq!(human_age("2024-03-01T13:59:55+02:00", now), "5s");
        assert_eq!(human_age("2024-03-01T11:59:54.5Z", now), "5s");
        assert_eq!(human_age("2024-02-28T09:00:00Z", now), "2d3h");
        assert_eq!(human_age("2024-03-01T12:00:01Z", now), "0s");
        assert_eq!(human_age("2024-03-01T12:00:05Z", now), "<invalid>");
        assert_eq!(human_age("", now), "<unknown>");
        assert_eq!(human_age("null", now), "<unknown>");
        for bad in [
            "yesterday",
            "2024-03-01",
            "2024-03-01 11:00:00Z",
            "2024-03-01T11:00:00",
            "2024-03-01t11:00:00z",
            "2024-03-01T11:00:00.Z",
            "2024-03-01T11:00:00+0100",
        ] {
            assert_eq!(human_age(bad, now), "<invalid>", "{bad}");
        }
    }
}
