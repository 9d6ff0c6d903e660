//! Leaderless time: the stretches of the window no term covers, shaded.

use super::layout::{Scale, Visible};
use super::*;
use crate::history::{format_duration_ms, short_time};

/// The complement of the union of the terms within
/// `[max(from, known_since), min(to, now)]`, as shades (sub-unit neighbours
/// merged), and the total leaderless time.
pub(super) fn leaderless_shades(
    visible: &[Visible<'_>],
    input: &Input<'_>,
    scale: &Scale,
) -> (Vec<Shade>, i64) {
    let Some(known) = input.known_since_ms else {
        return (Vec::new(), 0);
    };
    let lo = scale.from.max(known);
    // Only what was watched: after the last live moment nothing is known.
    let hi = scale
        .to
        .min(input.now_ms)
        .min(input.unwatched_since_ms.unwrap_or(i64::MAX));
    if lo >= hi {
        return (Vec::new(), 0);
    }
    // `visible` is sorted by start.
    let spans: Vec<(i64, i64)> = visible.iter().map(|v| (v.start, v.end)).collect();
    let holes = uncovered(&spans, lo, hi);
    let total = holes.iter().map(|(a, b)| b - a).sum();

    let mut shades: Vec<Shade> = Vec::new();
    for (a, b) in holes {
        let (x0, x1) = (scale.x(a), scale.x(b));
        if let Some(last) = shades.last_mut() {
            let last_narrow = last.w.0 < MIN_BAR;
            if (last_narrow || x1 - x0 < MIN_BAR) && x0 - (last.x.0 + last.w.0) < MIN_BAR {
                last.count += 1;
                last.to_ms = b;
                last.w = Px((x1 - last.x.0).max(MIN_BAR));
                continue;
            }
        }
        shades.push(Shade {
            x: Px(x0),
            w: Px((x1 - x0).max(MIN_BAR)),
            from_ms: a,
            to_ms: b,
            count: 1,
            title: String::new(),
        });
    }
    for s in &mut shades {
        s.title = if s.count == 1 {
            format!(
                "no leader for {}\n{} → {}",
                format_duration_ms(s.to_ms - s.from_ms),
                short_time(s.from_ms),
                short_time(s.to_ms)
            )
        } else {
            format!(
                "{} short leaderless stretches\n{} → {}",
                s.count,
                short_time(s.from_ms),
                short_time(s.to_ms)
            )
        };
    }
    (shades, total)
}

/// The stretches of `[lo, hi)` that no span covers, exactly (no merging):
/// leaderless time. `spans` must be sorted by start. The timeline's shading
/// and the incident report both use it.
pub fn uncovered(spans: &[(i64, i64)], lo: i64, hi: i64) -> Vec<(i64, i64)> {
    let mut holes: Vec<(i64, i64)> = Vec::new();
    let mut cursor = lo;
    for &(start, end) in spans {
        if start > cursor {
            holes.push((cursor, start.min(hi)));
        }
        cursor = cursor.max(end);
        if cursor >= hi {
            break;
        }
    }
    if cursor < hi {
        holes.push((cursor, hi));
    }
    holes.retain(|(a, b)| b > a);
    holes
}
