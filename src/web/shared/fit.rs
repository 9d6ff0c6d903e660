//! The default window of the pages that draw a timeline (`/timeline`, an
//! election's page) when no `from` or `to` is given: the last hour, or,
//! when what they show was recorded for less than an hour, from a little
//! before its first record, so that a young history fills the drawing
//! instead of a sliver at its right edge. Pure.

/// The longest default window: the last hour.
pub const LAST_HOUR_MS: i64 = 3_600_000;
/// The shortest fitted window.
pub const MIN_FITTED_MS: i64 = 10_000;

/// Where the default window ending at `now` starts, when the first record
/// it must show is at `first_ms` (`None`: nothing recorded). The margin
/// before the first record is a tenth of the history's age plus 2 s.
pub fn fitted_from(first_ms: Option<i64>, now: i64) -> i64 {
    let span = match first_ms {
        Some(first) if first > now - LAST_HOUR_MS => {
            let age = (now - first).max(0);
            (age + age / 10 + 2_000).max(MIN_FITTED_MS)
        }
        _ => LAST_HOUR_MS,
    };
    now - span.min(LAST_HOUR_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 10_000_000;

    #[test]
    fn a_young_history_fills_the_window_with_a_margin() {
        // 100 s recorded: 112 s shown, the first record 12 s from the left.
        assert_eq!(fitted_from(Some(NOW - 100_000), NOW), NOW - 112_000);
        // 5 s recorded: the shortest window.
        assert_eq!(fitted_from(Some(NOW - 5_000), NOW), NOW - MIN_FITTED_MS);
    }

    #[test]
    fn an_old_or_empty_history_shows_the_last_hour() {
        assert_eq!(
            fitted_from(Some(NOW - 2 * LAST_HOUR_MS), NOW),
            NOW - LAST_HOUR_MS
        );
        assert_eq!(fitted_from(None, NOW), NOW - LAST_HOUR_MS);
        // 59 min recorded: the margin would pass the hour; capped.
        assert_eq!(fitted_from(Some(NOW - 3_540_000), NOW), NOW - LAST_HOUR_MS);
    }
}
