//! Term bars: one per term wide enough to see, one dense bar per run of
//! narrower neighbours.

use super::scale::{Scale, Visible};
use super::*;
use crate::history::{format_duration_ms, short_time};

/// Emits a run of narrow terms: one term bar if it is alone, else one
/// dense bar. Returns how many terms went into a dense bar.
pub(super) fn flush_run(
    run: &mut Vec<&Visible<'_>>,
    lane: &Lane,
    l: usize,
    scale: &Scale,
    bars: &mut Vec<Bar>,
) -> usize {
    let merged = match run.as_slice() {
        [] => 0,
        [one] => {
            bars.push(term_bar(one, lane, l, scale));
            0
        }
        [first, .., last] => {
            let x0 = scale.x(first.start);
            let x1 = run.iter().map(|v| scale.x(v.end)).fold(x0, f64::max);
            let holders = {
                let mut h: Vec<&str> = run.iter().map(|v| v.term.holder.as_str()).collect();
                h.sort_unstable();
                h.dedup();
                h.len()
            };
            let who = if holders == 1 {
                first.term.holder.clone()
            } else {
                format!("{holders} holders")
            };
            bars.push(Bar {
                lane: l,
                kind: BarKind::Dense,
                x: Px(x0),
                y: Px(lane.y.0 + 3.0),
                w: Px((x1 - x0).max(MIN_BAR)),
                h: Px(lane.h.0 - 6.0),
                token: last.term.token,
                count: run.len(),
                hue: lane.hue,
                title: format!(
                    "{} short terms ({who}), tokens {}..{}\n{} → {}\nzoom in to see them one by one",
                    run.len(),
                    first.term.token,
                    last.term.token,
                    short_time(first.start),
                    short_time(last.end),
                ),
                label: None,
                clipped_left: false,
                clipped_right: false,
            });
            run.len()
        }
    };
    run.clear();
    merged
}

/// A replayed duration as the range it is known to lie in.
fn bounded_duration([least, most]: [Option<f64>; 2]) -> String {
    let ms = |s: f64| format_duration_ms((s * 1000.0).round() as i64);
    match (least, most) {
        (Some(l), Some(m)) => format!("{}–{} (replayed)", ms(l), ms(m)),
        (Some(l), None) => format!("≥ {} (replayed)", ms(l)),
        (None, Some(m)) => format!("≤ {} (replayed)", ms(m)),
        (None, None) => "unknown (replayed)".to_owned(),
    }
}

pub(super) fn term_bar(v: &Visible<'_>, lane: &Lane, l: usize, scale: &Scale) -> Bar {
    let t = v.term;
    let x0 = scale.x(v.start);
    let x1 = scale.x(v.end);
    let min = if v.open { 2.0 } else { MIN_BAR };
    let w = (x1 - x0).max(min);
    let cause = match (v.open, t.end_cause) {
        (true, _) => "leading".to_owned(),
        (false, Some(c)) => c.as_str().to_owned(),
        (false, None) => "ended".to_owned(),
    };
    let long_label = format!("#{} · {cause}", t.token);
    let short_label = format!("#{}", t.token);
    let fits = |s: &str| (s.chars().count() as f64) * CHAR_W + 8.0 <= w;
    let label = if fits(&long_label) {
        Some(long_label)
    } else if fits(&short_label) {
        Some(short_label)
    } else {
        None
    };
    let end_ms = t.ended_at_ms;
    let duration = end_ms.unwrap_or(v.end).saturating_sub(t.started_at_ms);
    let title = format!(
        "{holder}\ntoken {token} · {cause}\nstart {start}{snap}\nend   {end}\nduration {dur}{ongoing}",
        holder = t.holder,
        token = t.token,
        start = short_time(t.started_at_ms),
        snap = if t.from_snapshot {
            " (first seen; began earlier)"
        } else {
            ""
        },
        end = end_ms.map_or_else(|| "(still leading)".to_owned(), short_time),
        dur = match t.duration_bounds_seconds {
            None => format_duration_ms(duration),
            Some(bounds) => bounded_duration(bounds),
        },
        ongoing = if v.open { " so far" } else { "" },
    );
    Bar {
        lane: l,
        kind: if v.open { BarKind::Open } else { BarKind::Term },
        x: Px(x0),
        y: Px(lane.y.0 + 1.0),
        w: Px(w),
        h: Px(lane.h.0 - 2.0),
        token: t.token,
        count: 1,
        hue: lane.hue,
        title,
        label,
        clipped_left: t.started_at_ms < scale.from,
        clipped_right: t.ended_at_ms.is_some_and(|e| e > scale.to) || (v.open && v.end >= scale.to),
    }
}
