//! The time axis: "nice" steps aligned to UTC, and their labels.

use super::scale::Scale;
use super::*;
use crate::history::format_ms;

/// Tick steps, in ms.
const STEPS: [i64; 26] = [
    1_000,
    2_000,
    5_000,
    10_000,
    15_000,
    30_000,
    60_000,
    2 * 60_000,
    5 * 60_000,
    10 * 60_000,
    15 * 60_000,
    30 * 60_000,
    3_600_000,
    2 * 3_600_000,
    3 * 3_600_000,
    6 * 3_600_000,
    12 * 3_600_000,
    DAY,
    2 * DAY,
    7 * DAY,
    14 * DAY,
    30 * DAY,
    61 * DAY,
    91 * DAY,
    182 * DAY,
    365 * DAY,
];
pub(super) const DAY: i64 = 86_400_000;

pub(super) fn ticks(from: i64, to: i64, scale: &Scale) -> Vec<Tick> {
    let max_ticks = (((scale.right - scale.left) / TICK_SPACING).floor() as i64).max(2);
    let span = to - from;
    let step = STEPS
        .iter()
        .copied()
        .find(|s| span / s <= max_ticks)
        .unwrap_or_else(|| {
            // Beyond a year per tick: whole years.
            let years = span / (365 * DAY) / max_ticks + 1;
            years * 365 * DAY
        });
    let mut t = from.div_euclid(step) * step;
    if t < from {
        t += step;
    }
    let mut out = Vec::new();
    while t <= to && out.len() <= max_ticks as usize + 1 {
        let stamp = format_ms(t); // YYYY-MM-DDTHH:MM:SS.mmmZ
        let midnight = t.rem_euclid(DAY) == 0;
        let label = if step >= 300 * DAY {
            stamp[..4].to_owned()
        } else if step >= 28 * DAY {
            stamp[..7].to_owned()
        } else if step >= DAY || midnight {
            stamp[5..10].to_owned()
        } else if step < 60_000 {
            stamp[11..19].to_owned()
        } else {
            stamp[11..16].to_owned()
        };
        out.push(Tick {
            x: Px(scale.x(t)),
            at_ms: t,
            label,
            major: midnight && step < DAY,
        });
        t += step;
    }
    out
}
