//! Times as the history shows and accepts them: unix milliseconds inside,
//! RFC 3339 (UTC, millisecond precision) outside.
//!
//! The calendar arithmetic is done here rather than with
//! `humantime::format_rfc3339*`, which panics on times before 1970 (a
//! corrupted or hand-edited row must not crash a query) and does not accept
//! UTC offsets.

use super::HistoryError;

const MS_PER_DAY: i64 = 86_400_000;

/// Formats unix milliseconds as RFC 3339 in UTC with milliseconds:
/// `2026-12-02T14:00:00.000Z`. Never panics.
pub fn format_ms(ms: i64) -> String {
    let days = ms.div_euclid(MS_PER_DAY);
    let rem = ms.rem_euclid(MS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// `2026-12-02 14:00:00.123` (UTC), for titles and tables.
pub fn short_time(ms: i64) -> String {
    let mut s = format_ms(ms);
    s.pop(); // the Z
    s.replace('T', " ")
}

/// A duration for people: `850ms`, `12.3s`, `3m 12s`, `2h 05m`, `3d 04h`.
pub fn format_duration_ms(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        return format!("{:.1}s", ms as f64 / 1000.0);
    }
    let s = ms / 1000;
    match s {
        s if s < 3600 => format!("{}m {:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h {:02}m", s / 3600, s / 60 % 60),
        s => format!("{}d {:02}h", s / 86_400, s / 3600 % 24),
    }
}

/// Parses a time given on the command line into unix milliseconds.
///
/// Accepted forms:
/// - RFC 3339: `2026-12-02T14:00:00Z`, `2026-12-02T14:00:00.250+01:00`
///   (a date alone, `2026-12-02`, is midnight UTC);
/// - unix seconds: `1796220000` (at most 12 digits);
/// - a duration meaning "that long ago": `90m`, `2h`, `7d`, `1h 30m`
///   (humantime syntax; a trailing ` ago` is allowed);
/// - `now`.
pub fn parse_time(s: &str) -> Result<i64, HistoryError> {
    let t = s.trim();
    let invalid = || {
        HistoryError::InvalidTime(format!(
            "{s:?}: expected an RFC 3339 time (2026-12-02T14:00:00Z), unix seconds \
             (1796220000), or a duration meaning that long ago (90m, 2h, 7d)"
        ))
    };
    if t.is_empty() {
        return Err(invalid());
    }
    if t == "now" {
        return Ok(crate::events::now_ms());
    }
    // Unix seconds: at most 12 digits (past the year 30,000 is a typo).
    if t.bytes().all(|b| b.is_ascii_digit()) {
        if t.len() > 12 {
            return Err(invalid());
        }
        return t
            .parse::<i64>()
            .ok()
            .and_then(|secs| secs.checked_mul(1000))
            .ok_or_else(invalid);
    }
    if let Some(ms) = parse_rfc3339(t) {
        return Ok(ms);
    }
    let ago = t.strip_suffix(" ago").unwrap_or(t).trim_end();
    if let Ok(d) = humantime::parse_duration(ago) {
        let d = i64::try_from(d.as_millis()).map_err(|_| invalid())?;
        return crate::events::now_ms().checked_sub(d).ok_or_else(invalid);
    }
    Err(invalid())
}

/// `YYYY-MM-DD[(T|t| )HH:MM:SS[.fraction](Z|z|±HH:MM)]` → unix ms.
fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = b.get(from..to)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let sep = |at: usize, c: u8| b.get(at) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-')) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let date_ms = days_from_civil(year, month, day) * MS_PER_DAY;
    if b.len() == 10 {
        return Some(date_ms);
    }
    if !matches!(b[10], b'T' | b't' | b' ') || !sep(13, b':') || !sep(16, b':') {
        return None;
    }
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    // 60 is a leap second; it is counted as the next second.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0;
    if sep(i, b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..(start + 3).min(i)];
        millis = digits.parse::<i64>().ok()? * 10_i64.pow(3 - digits.len() as u32);
    }
    let offset_ms = match b.get(i)? {
        b'Z' | b'z' if b.len() == i + 1 => 0,
        sign @ (b'+' | b'-') if b.len() == i + 6 && sep(i + 3, b':') => {
            let (oh, om) = (num(i + 1, i + 3)?, num(i + 4, i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let off = (oh * 60 + om) * 60_000;
            if *sign == b'+' {
                off
            } else {
                -off
            }
        }
        _ => return None,
    };
    Some(date_ms + ((hour * 60 + minute) * 60 + second) * 1000 + millis - offset_ms)
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_edges() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            parse_rfc3339("2000-02-29T12:34:56.789Z"),
            Some(951_827_696_789)
        );
        assert_eq!(format_ms(951_827_696_789), "2000-02-29T12:34:56.789Z");
        for ms in [0, 1, -86_400_001, 1_796_220_000_123, 4_102_444_800_000] {
            assert_eq!(parse_rfc3339(&format_ms(ms)), Some(ms), "{ms}");
        }
        assert_eq!(parse_rfc3339("2001-02-29"), None);
        assert_eq!(parse_rfc3339("2000-02-29T12:34:56.Z"), None);
        assert_eq!(parse_rfc3339("2000-02-29T12:34:56+0100"), None);
        assert!(parse_time("999999999999").is_ok());
        assert!(parse_time("0000000000000").is_err(), "13 digits");
        // Extreme values must not panic.
        let _ = format_ms(i64::MIN);
        let _ = format_ms(i64::MAX);
    }
}
