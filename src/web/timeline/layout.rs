//! The layout core: time to x, the terms visible in the window, holders
//! and their lanes, then bars, refusal markers, gaps and shades.

use std::collections::HashMap;

use super::bars::{flush_run, term_bar};
use super::colours::lane_hues;
use super::leaderless::leaderless_shades;
use super::scale::{Scale, Visible};
use super::ticks::ticks;
use super::*;
use crate::history::short_time;
use crate::web::text::truncate;

/// Lays out one election's timeline. See the module documentation.
pub fn layout(input: &Input<'_>) -> Timeline {
    let gutter = if input.width < NARROW {
        GUTTER_NARROW
    } else {
        GUTTER
    };
    let label_chars = ((gutter - 14.0) / LANE_CHAR_W).floor().max(4.0) as usize;
    let width = input.width.max(gutter + RIGHT + 100.0);
    let from = input.from_ms;
    let to = input.to_ms.max(from + 1);
    let scale = Scale {
        from,
        to,
        left: gutter,
        right: width - RIGHT,
    };
    let visible = visible_terms(input, from, to);
    let (holders, other_holders) = lane_holders(&visible);
    let (mut lanes, lane_of) = holder_lanes(&holders, other_holders, label_chars);
    let (bars, terms_merged, token_lane) = term_bars(&visible, &lanes, &lane_of, &scale);
    let refusals = refusal_markers(input, &token_lane, &mut lanes, &scale);

    let lanes_top = AXIS - 4.0;
    let lanes_bottom = lane_y(lanes.len().max(1)) - LANE_GAP + 4.0;
    let height = lanes_bottom + BOTTOM;
    let (leaderless, leaderless_ms) = leaderless_shades(&visible, input, &scale);
    let acting = super::acting::acting_bars(input.terms, &bars, &lanes, &scale, input.now_ms);
    Timeline {
        width: Px(width),
        height: Px(height),
        plot_left: Px(scale.left),
        plot_right: Px(scale.right),
        lanes_top: Px(lanes_top),
        lanes_bottom: Px(lanes_bottom),
        axis_y: Px(AXIS - 10.0),
        ticks: ticks(from, to, &scale),
        lanes,
        bars,
        acting,
        leaderless,
        no_data: no_data_shade(input, &scale),
        not_watched: not_watched_shade(input, &scale),
        refusals,
        gaps: gap_markers(input, &scale, lanes_top),
        cluster: Vec::new(),
        now_x: (input.now_ms >= from && input.now_ms <= to).then(|| Px(scale.x(input.now_ms))),
        terms_drawn: visible.len(),
        terms_merged,
        other_holders,
        leaderless_ms,
    }
}

/// The top of lane `i`.
fn lane_y(i: usize) -> f64 {
    AXIS + i as f64 * (LANE_H + LANE_GAP)
}

/// Terms clipped to the window `from..=to`, by start (an open term runs to
/// now).
fn visible_terms<'a>(input: &Input<'a>, from: i64, to: i64) -> Vec<Visible<'a>> {
    let mut visible: Vec<Visible<'a>> = input
        .terms
        .iter()
        .filter_map(|term| {
            let open = term.ended_at_ms.is_none();
            let real_end = term
                .ended_at_ms
                .unwrap_or(input.now_ms)
                .max(term.started_at_ms);
            if real_end < from || term.started_at_ms > to {
                return None;
            }
            Some(Visible {
                term,
                start: term.started_at_ms.max(from),
                end: real_end.min(to),
                open,
            })
        })
        .collect();
    visible.sort_by_key(|v| (v.start, v.term.started_revision, v.term.token));
    visible
}

/// The holders that get a lane of their own, in order of their first term,
/// and how many others share the "other" lane: beyond [`MAX_LANES`], the
/// holders with the most visible time (then the latest start) keep theirs.
fn lane_holders<'a>(visible: &[Visible<'a>]) -> (Vec<&'a str>, usize) {
    struct HolderStat {
        first: usize,
        visible_ms: i64,
        last_start: i64,
    }
    let mut stats: HashMap<&str, HolderStat> = HashMap::new();
    for (i, v) in visible.iter().enumerate() {
        let s = stats.entry(v.term.holder.as_str()).or_insert(HolderStat {
            first: i,
            visible_ms: 0,
            last_start: v.start,
        });
        s.visible_ms += v.end - v.start;
        s.last_start = s.last_start.max(v.start);
    }
    let mut holders: Vec<(&str, HolderStat)> = stats.into_iter().collect();
    let other_holders;
    if holders.len() > MAX_LANES {
        holders.sort_by(|a, b| {
            (b.1.visible_ms, b.1.last_start, a.0).cmp(&(a.1.visible_ms, a.1.last_start, b.0))
        });
        other_holders = holders.len() - (MAX_LANES - 1);
        holders.truncate(MAX_LANES - 1);
    } else {
        other_holders = 0;
    }
    holders.sort_by_key(|(_, s)| s.first);
    (holders.into_iter().map(|(h, _)| h).collect(), other_holders)
}

/// A lane per holder (its hue), then the "other" lane when some holders
/// have none; which lane each holder's terms go to.
fn holder_lanes<'a>(
    holders: &[&'a str],
    other_holders: usize,
    label_chars: usize,
) -> (Vec<Lane>, LaneOf<'a>) {
    let mut lanes: Vec<Lane> = Vec::new();
    let mut own: HashMap<&str, usize> = HashMap::new();
    for (holder, hue) in holders.iter().zip(lane_hues(holders)) {
        own.insert(holder, lanes.len());
        lanes.push(Lane {
            label: truncate(holder, label_chars),
            title: (*holder).to_owned(),
            y: Px(lane_y(lanes.len())),
            h: Px(LANE_H),
            hue,
            kind: LaneKind::Holder((*holder).to_owned()),
        });
    }
    let other = (other_holders > 0).then(|| {
        lanes.push(Lane {
            label: format!("other ({other_holders})"),
            title: format!("{other_holders} more holders, each with less time in this window"),
            y: Px(lane_y(lanes.len())),
            h: Px(LANE_H),
            hue: 0,
            kind: LaneKind::Other(other_holders),
        });
        lanes.len() - 1
    });
    (lanes, LaneOf { own, other })
}

/// Which lane a holder's terms go to: its own, else the "other" lane.
struct LaneOf<'a> {
    own: HashMap<&'a str, usize>,
    other: Option<usize>,
}

impl LaneOf<'_> {
    fn get(&self, holder: &str) -> Option<usize> {
        self.own.get(holder).copied().or(self.other)
    }
}

/// Bars, lane by lane (each lane's terms stay in start order): terms too
/// narrow to draw one by one merged into runs. Also how many terms were
/// merged, and each visible term's lane by token.
fn term_bars(
    visible: &[Visible<'_>],
    lanes: &[Lane],
    lane_of: &LaneOf<'_>,
    scale: &Scale,
) -> (Vec<Bar>, usize, HashMap<i64, usize>) {
    let mut per_lane: Vec<Vec<&Visible<'_>>> = vec![Vec::new(); lanes.len()];
    let mut token_lane: HashMap<i64, usize> = HashMap::new();
    for v in visible {
        if let Some(l) = lane_of.get(&v.term.holder) {
            per_lane[l].push(v);
            token_lane.insert(v.term.token, l);
        }
    }
    let mut bars = Vec::new();
    let mut terms_merged = 0;
    for (l, terms) in per_lane.iter().enumerate() {
        let lane = &lanes[l];
        let mut run: Vec<&Visible<'_>> = Vec::new();
        let mut run_end_x = f64::NEG_INFINITY;
        for v in terms {
            let x0 = scale.x(v.start);
            let x1 = scale.x(v.end);
            let narrow = !v.open && x1 - x0 < MIN_BAR;
            if narrow && (run.is_empty() || x0 - run_end_x < MIN_BAR) {
                run.push(v);
                run_end_x = run_end_x.max(x1);
                continue;
            }
            terms_merged += flush_run(&mut run, lane, l, scale, &mut bars);
            if narrow {
                run.push(v);
                run_end_x = x1;
            } else {
                bars.push(term_bar(v, lane, l, scale));
            }
        }
        terms_merged += flush_run(&mut run, lane, l, scale, &mut bars);
    }
    (bars, terms_merged, token_lane)
}

/// Refusals in the window: in the refused term's lane, else in a "fence"
/// lane (added to `lanes`); those close together in one lane merged.
fn refusal_markers(
    input: &Input<'_>,
    token_lane: &HashMap<i64, usize>,
    lanes: &mut Vec<Lane>,
    scale: &Scale,
) -> Vec<Marker> {
    let mut marks: Vec<(usize, f64, &RefusalRow)> = Vec::new();
    let mut fence_lane = None;
    for r in input.refusals {
        if r.at_ms < scale.from || r.at_ms > scale.to {
            continue;
        }
        let lane = match token_lane.get(&r.token) {
            Some(&l) => l,
            None => *fence_lane.get_or_insert_with(|| {
                lanes.push(Lane {
                    label: "fence".to_owned(),
                    title: "refusals of tokens whose term is not in this window".to_owned(),
                    y: Px(lane_y(lanes.len())),
                    h: Px(LANE_H),
                    hue: 0,
                    kind: LaneKind::Fence,
                });
                lanes.len() - 1
            }),
        };
        marks.push((lane, scale.x(r.at_ms), r));
    }
    marks.sort_by(|a, b| {
        (a.0, a.1)
            .partial_cmp(&(b.0, b.1))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut refusals: Vec<Marker> = Vec::new();
    for (lane, x, r) in marks {
        if let Some(last) = refusals.last_mut() {
            if last.lane == Some(lane) && x - last.x.0 < MARKER_MERGE {
                last.count += 1;
                last.title = format!(
                    "{} fence refusals here; the last:\n{}",
                    last.count,
                    refusal_title(r)
                );
                continue;
            }
        }
        let l = &lanes[lane];
        refusals.push(Marker {
            x: Px(x),
            y: Px(l.y.0 + l.h.0 / 2.0),
            lane: Some(lane),
            count: 1,
            title: refusal_title(r),
        });
    }
    refusals
}

/// The watcher's gaps in the window, above the lanes.
fn gap_markers(input: &Input<'_>, scale: &Scale, lanes_top: f64) -> Vec<Marker> {
    input
        .gaps
        .iter()
        .filter(|g| g.at_ms >= scale.from && g.at_ms <= scale.to)
        .map(|g| Marker {
            x: Px(scale.x(g.at_ms)),
            y: Px(lanes_top),
            lane: None,
            count: 1,
            title: format!(
                "watcher gap at {}: etcd compacted revisions {}..{} before the watcher saw them; \
                 transitions in between are not known one by one",
                short_time(g.at_ms),
                g.from_revision,
                g.to_revision
            ),
        })
        .collect()
}

/// The part of the window before the history knows of the election.
fn no_data_shade(input: &Input<'_>, scale: &Scale) -> Option<Shade> {
    let (from, to) = (scale.from, scale.to);
    input.known_since_ms.filter(|&k| k > from).map(|k| {
        let k = k.min(to);
        let (x0, x1) = (scale.x(from), scale.x(k));
        Shade {
            x: Px(x0),
            w: Px(x1 - x0),
            from_ms: from,
            to_ms: k,
            count: 1,
            title: "no history for this election before its first recorded term".to_owned(),
        }
    })
}

/// The part of the window no watcher of tenure was live for.
fn not_watched_shade(input: &Input<'_>, scale: &Scale) -> Option<Shade> {
    let until = scale.to.min(input.now_ms);
    crate::web::replays::not_watched(input.unwatched_since_ms, scale.from, until).map(|(a, b)| {
        let (x0, x1) = (scale.x(a), scale.x(b));
        Shade {
            x: Px(x0),
            w: Px((x1 - x0).max(MIN_BAR)),
            from_ms: a,
            to_ms: b,
            count: 1,
            title: format!(
                "not watched since {}: no watcher of tenure was live (stopped, or cut off from \
                 etcd); whether there was a leader is unknown until one replays this",
                short_time(a)
            ),
        }
    })
}

fn refusal_title(r: &RefusalRow) -> String {
    let leader = match (&r.current_holder, r.current_token) {
        (Some(h), Some(t)) => format!("\nleader then: {h} (token {t})"),
        (None, Some(t)) => format!("\nleader then: token {t}"),
        _ => "\nleader then: none known".to_owned(),
    };
    format!(
        "fence refused token {} at resource {}: {}\n{} (revision {}){leader}",
        r.token,
        r.resource,
        r.reason.as_str(),
        short_time(r.at_ms),
        r.revision
    )
}
