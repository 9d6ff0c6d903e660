//! Acting bars: under each term bar drawn one by one, a thin bar
//! from when its holder began acting to when it stopped (or, only bounded,
//! to the bound, hatched), and in red the part it acted on after the next
//! term began: two holders acting at once.

use std::collections::HashMap;

use super::scale::Scale;
use super::*;
use crate::events::acting::ActingView;
use crate::history::{format_duration_ms, short_time};

/// Height of an acting bar, at the bottom of its lane.
const ACTING_H: f64 = 5.0;

/// The acting bars of the terms among `bars` drawn one by one.
pub(super) fn acting_bars(
    terms: &[TermRow],
    bars: &[Bar],
    lanes: &[Lane],
    scale: &Scale,
    now_ms: i64,
) -> Vec<ActingBar> {
    let mut by_token: HashMap<i64, Vec<&TermRow>> = HashMap::new();
    for t in terms {
        by_token.entry(t.token).or_default().push(t);
    }
    let mut out = Vec::new();
    for b in bars.iter().filter(|b| b.is_term()) {
        // Tokens repeat across etcd timelines (a restore): the bar's term
        // is the one of its token that starts where the bar does.
        let t = by_token.get(&b.token).and_then(|ts| {
            ts.iter()
                .min_by(|x, y| {
                    let dx = |t: &TermRow| (scale.x(t.started_at_ms) - b.x.0).abs();
                    dx(x).total_cmp(&dx(y))
                })
                .copied()
        });
        let (Some(t), Some(lane)) = (t, lanes.get(b.lane)) else {
            continue;
        };
        let a = &t.acting;
        let Some(start) = a.acting_started_ms else {
            continue;
        };
        let (end, bounded) = match (a.acting_stopped_ms, a.acting_stopped_by_ms) {
            (Some(e), _) => (e, false),
            (None, Some(by)) => (by, true),
            // Still acting, or its end was never reported.
            (None, None) => (t.ended_at_ms.map_or(now_ms, |_| now_ms.min(scale.to)), true),
        };
        if end < scale.from || start > scale.to {
            continue;
        }
        let y = lane.y.0 + lane.h.0 - ACTING_H;
        let x0 = scale.x(start);
        let x1 = scale.x(end).max(x0 + MIN_BAR);
        let overlap = a.overlap_ms.filter(|o| *o > 0).map(|o| {
            let from = scale.x(end.saturating_sub(o));
            (Px(from), Px((x1 - from).max(MIN_BAR)))
        });
        let overlap_label = a
            .overlap_ms
            .filter(|o| *o > 0)
            .map(|o| overlap_label(o, x0, x1, scale.right));
        out.push(ActingBar {
            x: Px(x0),
            y: Px(y),
            w: Px(x1 - x0),
            h: Px(ACTING_H),
            bounded,
            overlap,
            overlap_label,
            title: title(t, start, end, bounded),
        });
    }
    out
}

/// The overlap's length beside the acting bar `x0..x1`: after it when it
/// fits before `right`, else before it.
fn overlap_label(overlap_ms: i64, x0: f64, x1: f64, right: f64) -> OverlapLabel {
    let text = format!("overlap {}", format_duration_ms(overlap_ms));
    // About 6.5 px a character at the label's 11 px.
    let width = text.chars().count() as f64 * 6.5;
    if x1 + 4.0 + width <= right {
        OverlapLabel {
            x: Px(x1 + 4.0),
            anchor: "start",
            text,
        }
    } else {
        OverlapLabel {
            x: Px((x0 - 4.0).max(width)),
            anchor: "end",
            text,
        }
    }
}

fn title(t: &TermRow, start: i64, end: i64, bounded: bool) -> String {
    let a = &t.acting;
    let late = |l: bool| if l { " (reported late)" } else { "" };
    let stopped = a.stopped_text(t.ended_at_ms.is_some(), short_time);
    let margin = match a.margin_ms {
        Some(m) if m < 0 => format!("{} (acted past it)", margin_text(a)),
        _ => margin_text(a),
    };
    let overlap = match a.overlap_ms {
        Some(o) if o > 0 => format!("\nTWO HOLDERS ACTED AT ONCE for {}", format_duration_ms(o)),
        _ => String::new(),
    };
    format!(
        "{holder} acted as leader (token {token})\nfrom {from}{began_late}\nstopped {stopped}\nacted {dur}{bounded}\nmargin {margin}{overlap}",
        holder = t.holder,
        token = t.token,
        from = short_time(start),
        began_late = late(a.acting_started_late),
        dur = format_duration_ms(end.saturating_sub(start)),
        bounded = if bounded { " at most" } else { "" },
    )
}

/// A term's margin in words, as every view writes it: `+250ms`, `−572ms
/// ±3 ms` (its bound, when the margin needed placing on etcd's time), or
/// `unknown`.
pub fn margin_text(a: &ActingView) -> String {
    let Some(m) = a.margin_ms else {
        return "unknown".to_owned();
    };
    let sign = if m < 0 { "−" } else { "+" };
    let signed = format!("{sign}{}", format_duration_ms(m.saturating_abs()));
    match a.margin_bound_ms {
        Some(b) if b > 0 => format!("{signed} ±{b} ms"),
        _ => signed,
    }
}
