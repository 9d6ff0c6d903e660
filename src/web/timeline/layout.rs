//! The layout core: time to x, the terms visible in the window, holders
//! and their lanes, then bars, refusal markers, gaps and shades.

use std::collections::HashMap;

use super::bars::{flush_run, term_bar};
use super::colours::lane_hues;
use super::leaderless::leaderless_shades;
use super::ticks::ticks;
use super::*;
use crate::history::short_time;
use crate::web::text::truncate;

/// Maps time to x.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scale {
    pub(super) from: i64,
    pub(super) to: i64,
    pub(super) left: f64,
    pub(super) right: f64,
}

impl Scale {
    pub(super) fn x(&self, t: i64) -> f64 {
        let t = t.clamp(self.from, self.to);
        let span = (self.to - self.from).max(1) as f64;
        self.left + (t - self.from) as f64 / span * (self.right - self.left)
    }
}

/// A term clipped to the window.
pub(super) struct Visible<'a> {
    pub(super) term: &'a TermRow,
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) open: bool,
}

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

    // Terms clipped to the window, by start.
    let mut visible: Vec<Visible<'_>> = input
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

    // Holders and their lanes.
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

    let mut lanes: Vec<Lane> = Vec::new();
    let mut lane_of: HashMap<&str, usize> = HashMap::new();
    let lane_y = |i: usize| AXIS + i as f64 * (LANE_H + LANE_GAP);
    let hues = lane_hues(&holders.iter().map(|(h, _)| *h).collect::<Vec<_>>());
    for ((holder, _), hue) in holders.iter().zip(hues) {
        lane_of.insert(holder, lanes.len());
        lanes.push(Lane {
            label: truncate(holder, label_chars),
            title: (*holder).to_owned(),
            y: Px(lane_y(lanes.len())),
            h: Px(LANE_H),
            hue,
            kind: LaneKind::Holder((*holder).to_owned()),
        });
    }
    let other_lane = (other_holders > 0).then(|| {
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
    let lane_for = |holder: &str| lane_of.get(holder).copied().or(other_lane);

    // Bars, lane by lane (each lane's terms stay in start order).
    let mut per_lane: Vec<Vec<&Visible<'_>>> = vec![Vec::new(); lanes.len()];
    let mut token_lane: HashMap<i64, usize> = HashMap::new();
    for v in &visible {
        if let Some(l) = lane_for(&v.term.holder) {
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
            terms_merged += flush_run(&mut run, lane, l, &scale, &mut bars);
            if narrow {
                run.push(v);
                run_end_x = x1;
            } else {
                bars.push(term_bar(v, lane, l, &scale));
            }
        }
        terms_merged += flush_run(&mut run, lane, l, &scale, &mut bars);
    }

    // Refusals: in the refused term's lane, else in a "fence" lane.
    let mut marks: Vec<(usize, f64, &RefusalRow)> = Vec::new();
    let mut fence_lane = None;
    for r in input.refusals {
        if r.at_ms < from || r.at_ms > to {
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

    let lanes_top = AXIS - 4.0;
    let lanes_bottom = lane_y(lanes.len().max(1)) - LANE_GAP + 4.0;
    let height = lanes_bottom + BOTTOM;

    let gaps = input
        .gaps
        .iter()
        .filter(|g| g.at_ms >= from && g.at_ms <= to)
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
        .collect();

    let (leaderless, leaderless_ms) = leaderless_shades(&visible, input, &scale);
    let no_data = input.known_since_ms.filter(|&k| k > from).map(|k| {
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
    });

    let not_watched =
        crate::web::replays::not_watched(input.unwatched_since_ms, from, to.min(input.now_ms)).map(
            |(a, b)| {
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
            },
        );

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
        leaderless,
        no_data,
        not_watched,
        refusals,
        gaps,
        cluster: Vec::new(),
        now_x: (input.now_ms >= from && input.now_ms <= to).then(|| Px(scale.x(input.now_ms))),
        terms_drawn: visible.len(),
        terms_merged,
        other_holders,
        leaderless_ms,
    }
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
