//! The SVG timeline's layout: pure (no I/O, no clock), so it can be tested
//! and measured on its own. [`layout`] turns the terms, refusals and
//! watcher gaps of one election in a time window into lanes, bars, markers
//! and axis ticks, in SVG user units; `templates/timeline.svg` draws them
//! (askama escapes every string, holders included).
//!
//! Layout rules:
//! - x is linear in time over `[from_ms, to_ms]`, between a left gutter
//!   (lane labels) and a right margin. Everything is clamped into the plot.
//! - One lane per holder, ordered by the first visible start. With more than
//!   [`MAX_LANES`] holders, the `MAX_LANES - 1` holders with the most
//!   visible time keep their lanes and the rest share one "other" lane (last).
//! - A term is a bar from its start to its end; an open term ends at `now`
//!   (or at the window's end if that comes first). Terms outside the window
//!   are not drawn; terms crossing its edges are clipped (and say so).
//! - Bars narrower than [`MIN_BAR`] that sit next to each other in a lane
//!   are merged into one "dense" bar carrying a count, so 10,000 terms in an
//!   hour do not become 10,000 rects. An isolated narrow term, and any open
//!   term, is still drawn on its own, widened to [`MIN_BAR`].
//! - Leaderless time is the part of `[max(from, known_since), min(to, now)]`
//!   that no term covers; it is shaded across all lanes. Before
//!   `known_since` (the earliest term the history holds) the history simply
//!   has no data, which is shaded differently. Sub-pixel leaderless gaps next
//!   to each other are merged the same way as bars.
//! - A fence refusal is a red marker at its time, in the lane of the term
//!   whose token was refused (the deposed leader writing after its term),
//!   else in a "fence" lane added at the bottom. Markers closer than
//!   [`MARKER_MERGE`] in one lane are merged (with a count).
//! - A watcher gap (compacted history) is a dashed vertical line at the time
//!   the watcher resynced.
//! - Colours: one of [`HUES`] buckets per lane (the stylesheet maps bucket
//!   `cN` to a hue, red excluded: red is for refusals), from a hash of the
//!   holder, spread apart when two lanes of one drawing would look alike.
//! - Ticks: the smallest "nice" step (1 s … 1 year) that gives at most one
//!   tick per [`TICK_SPACING`] units, aligned to UTC multiples of the step;
//!   labels `HH:MM:SS`, `HH:MM`, `MM-DD` or `YYYY-MM` depending on the step,
//!   with the date shown at UTC midnights.

use std::collections::HashMap;

use crate::history::{format_ms, RefusalRow, TermRow};

/// Default width of the drawing, in SVG user units.
pub const WIDTH: f64 = 1000.0;
/// The most lanes drawn; further holders share an "other" lane.
pub const MAX_LANES: usize = 12;
/// Narrowest bar drawn; narrower neighbours are merged into a dense bar.
pub const MIN_BAR: f64 = 1.0;
/// Refusal markers closer than this (in one lane) are merged.
pub const MARKER_MERGE: f64 = 4.0;
/// At most one tick per this many units.
pub const TICK_SPACING: f64 = 100.0;
/// Number of distinct colours (hue buckets) the stylesheet defines.
pub const HUES: u16 = 24;

/// Width of the lane-label gutter: 150 units, or 84 in a narrow drawing
/// (under [`NARROW`] units, for phones).
const GUTTER: f64 = 150.0;
const GUTTER_NARROW: f64 = 84.0;
/// Drawings narrower than this get the narrow gutter.
pub const NARROW: f64 = 700.0;
/// Width of the phone drawing the pages render next to the wide one.
pub const NARROW_WIDTH: f64 = 420.0;
const RIGHT: f64 = 14.0;
const AXIS: f64 = 26.0;
const LANE_H: f64 = 22.0;
const LANE_GAP: f64 = 6.0;
const BOTTOM: f64 = 16.0;
/// Approximate width of one character of a bar label (11 px font).
const CHAR_W: f64 = 6.6;
/// Approximate width of one character of a lane label (13 px font).
const LANE_CHAR_W: f64 = 7.4;

/// A coordinate or length in SVG user units; displays with one decimal.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Px(pub f64);

impl std::fmt::Display for Px {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1}", self.0)
    }
}

/// A watcher gap: etcd compacted `from_revision..=to_revision` before the
/// watcher saw them; it resynced at `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapMark {
    pub at_ms: i64,
    pub from_revision: i64,
    pub to_revision: i64,
}

/// What to lay out.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Terms overlapping the window, in any order.
    pub terms: &'a [TermRow],
    pub refusals: &'a [RefusalRow],
    pub gaps: &'a [GapMark],
    pub from_ms: i64,
    pub to_ms: i64,
    pub now_ms: i64,
    /// The earliest time the history covers for this election (the start
    /// of its first stored term); `None`: no term is known at all.
    pub known_since_ms: Option<i64>,
    /// Width of the drawing in SVG user units (see [`WIDTH`]).
    pub width: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    /// One ended term.
    Term,
    /// One open term (drawn to now).
    Open,
    /// Several terms too narrow to draw one by one.
    Dense,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub lane: usize,
    pub kind: BarKind,
    pub x: Px,
    pub y: Px,
    pub w: Px,
    pub h: Px,
    /// The term's token; for a dense bar, the token of its last term.
    pub token: i64,
    /// How many terms the bar stands for (1 unless dense).
    pub count: usize,
    /// Colour bucket (`c0`..`c23` in the stylesheet).
    pub hue: u16,
    /// Hover text (plain text: the template escapes it).
    pub title: String,
    /// Text drawn on the bar when it is wide enough.
    pub label: Option<String>,
    /// The term started before the window / ends after it.
    pub clipped_left: bool,
    pub clipped_right: bool,
}

impl Bar {
    /// The CSS classes of the rect.
    pub fn class(&self) -> String {
        let kind = match self.kind {
            BarKind::Term => "term",
            BarKind::Open => "term open",
            BarKind::Dense => "dense",
        };
        format!("{kind} c{}", self.hue)
    }

    pub fn is_term(&self) -> bool {
        self.kind != BarKind::Dense
    }

    /// Where the label text starts.
    pub fn label_x(&self) -> Px {
        Px(self.x.0 + 4.0)
    }

    /// The label's baseline.
    pub fn label_y(&self) -> Px {
        Px(self.y.0 + self.h.0 / 2.0 + 4.0)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// Shown in the gutter (truncated holder, or "other (N)" / "fence").
    pub label: String,
    /// Full text (the untruncated holder).
    pub title: String,
    pub y: Px,
    pub h: Px,
    pub hue: u16,
    pub kind: LaneKind,
}

impl Lane {
    pub fn label_y(&self) -> Px {
        Px(self.y.0 + self.h.0 / 2.0 + 4.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneKind {
    Holder(String),
    /// The holders beyond [`MAX_LANES`]; how many.
    Other(usize),
    /// Refusals of tokens whose term is not in the window.
    Fence,
}

/// A shaded stretch of time across all lanes.
#[derive(Debug, Clone, PartialEq)]
pub struct Shade {
    pub x: Px,
    pub w: Px,
    pub from_ms: i64,
    pub to_ms: i64,
    /// Leaderless stretches merged into this one (1 when not merged).
    pub count: usize,
    pub title: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    pub x: Px,
    /// Vertical centre (refusals) or top (gaps).
    pub y: Px,
    pub lane: Option<usize>,
    pub count: usize,
    pub title: String,
}

impl Marker {
    /// A diamond around (x, y), as an SVG path.
    pub fn diamond(&self) -> String {
        format!("M{:.1} {:.1}l6 8l-6 8l-6-8z", self.x.0, self.y.0 - 8.0)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    pub x: Px,
    pub at_ms: i64,
    pub label: String,
    /// A UTC midnight (drawn stronger; its label is the date).
    pub major: bool,
}

/// The whole drawing.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub width: Px,
    pub height: Px,
    pub plot_left: Px,
    pub plot_right: Px,
    /// Top and bottom of the lane area (for grid lines and shades).
    pub lanes_top: Px,
    pub lanes_bottom: Px,
    pub axis_y: Px,
    pub ticks: Vec<Tick>,
    pub lanes: Vec<Lane>,
    pub bars: Vec<Bar>,
    pub leaderless: Vec<Shade>,
    /// The part of the window before the history's first term.
    pub no_data: Option<Shade>,
    pub refusals: Vec<Marker>,
    pub gaps: Vec<Marker>,
    /// Where "now" is, when it is inside the window.
    pub now_x: Option<Px>,
    /// Terms that overlap the window (drawn one by one or in dense bars).
    pub terms_drawn: usize,
    /// Terms inside dense bars.
    pub terms_merged: usize,
    /// Holders sharing the "other" lane.
    pub other_holders: usize,
    /// Total leaderless time in the window, ms.
    pub leaderless_ms: i64,
}

impl Timeline {
    pub fn lanes_height(&self) -> Px {
        Px(self.lanes_bottom.0 - self.lanes_top.0)
    }
}

/// Maps time to x.
#[derive(Debug, Clone, Copy)]
struct Scale {
    from: i64,
    to: i64,
    left: f64,
    right: f64,
}

impl Scale {
    fn x(&self, t: i64) -> f64 {
        let t = t.clamp(self.from, self.to);
        let span = (self.to - self.from).max(1) as f64;
        self.left + (t - self.from) as f64 / span * (self.right - self.left)
    }
}

/// A term clipped to the window.
struct Visible<'a> {
    term: &'a TermRow,
    start: i64,
    end: i64,
    open: bool,
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
        refusals,
        gaps,
        now_x: (input.now_ms >= from && input.now_ms <= to).then(|| Px(scale.x(input.now_ms))),
        terms_drawn: visible.len(),
        terms_merged,
        other_holders,
        leaderless_ms,
    }
}

/// Emits a run of narrow terms: one term bar if it is alone, else one
/// dense bar. Returns how many terms went into a dense bar.
fn flush_run(
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

fn term_bar(v: &Visible<'_>, lane: &Lane, l: usize, scale: &Scale) -> Bar {
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
        dur = format_duration_ms(duration),
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

/// The complement of the union of the terms within
/// `[max(from, known_since), min(to, now)]`, as shades (sub-unit neighbours
/// merged), and the total leaderless time.
fn leaderless_shades(
    visible: &[Visible<'_>],
    input: &Input<'_>,
    scale: &Scale,
) -> (Vec<Shade>, i64) {
    let Some(known) = input.known_since_ms else {
        return (Vec::new(), 0);
    };
    let lo = scale.from.max(known);
    let hi = scale.to.min(input.now_ms);
    if lo >= hi {
        return (Vec::new(), 0);
    }
    // `visible` is sorted by start.
    let mut holes: Vec<(i64, i64)> = Vec::new();
    let mut cursor = lo;
    for v in visible {
        if v.start > cursor {
            holes.push((cursor, v.start.min(hi)));
        }
        cursor = cursor.max(v.end);
        if cursor >= hi {
            break;
        }
    }
    if cursor < hi {
        holes.push((cursor, hi));
    }
    holes.retain(|(a, b)| b > a);
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
const DAY: i64 = 86_400_000;

fn ticks(from: i64, to: i64, scale: &Scale) -> Vec<Tick> {
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

/// Colour buckets for the lanes of one drawing: each holder's hash bucket
/// ([`hue_of`]) when those are already apart (at least `min(3, HUES/k)`
/// buckets for `k` lanes); otherwise spread evenly around the wheel in the
/// order of the hash buckets, starting at the first one, so that up to
/// [`MAX_LANES`] lanes stay at least two buckets (25°) apart.
fn lane_hues(holders: &[&str]) -> Vec<u16> {
    let k = holders.len();
    let n = usize::from(HUES);
    let preferred: Vec<usize> = holders.iter().map(|h| usize::from(hue_of(h))).collect();
    if k == 0 {
        return Vec::new();
    }
    let want = (n / k).min(3);
    let distance = |a: usize, b: usize| {
        let d = a.abs_diff(b) % n;
        d.min(n - d)
    };
    let apart = preferred
        .iter()
        .enumerate()
        .all(|(i, a)| preferred[i + 1..].iter().all(|b| distance(*a, *b) >= want));
    if apart {
        return preferred.iter().map(|&h| h as u16).collect();
    }
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by_key(|&i| (preferred[i], i));
    let anchor = preferred[order[0]];
    let mut out = vec![0u16; k];
    for (j, &i) in order.iter().enumerate() {
        out[i] = ((anchor + j * n / k) % n) as u16;
    }
    out
}

/// The colour bucket a holder gets when nothing collides (the overview
/// uses it, so a holder keeps its colour there).
pub fn hue_of(holder: &str) -> u16 {
    (fnv1a(holder.as_bytes()) % u64::from(HUES)) as u16
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max_chars - 1).collect();
        out.push('…');
        out
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::{FenceReason, Layout};
    use crate::events::EndCause;

    const T0: i64 = 1_796_220_000_000; // 2026-12-02T14:00:00Z
    const MIN: i64 = 60_000;
    const HOUR: i64 = 3_600_000;

    fn term(token: i64, holder: &str, start: i64, end: Option<i64>) -> TermRow {
        TermRow {
            election: "db".into(),
            token,
            holder: holder.into(),
            lease_id: token,
            layout: Some(Layout::Single),
            started_at: format_ms(start),
            ended_at: end.map(format_ms),
            started_at_ms: start,
            ended_at_ms: end,
            started_revision: token,
            ended_revision: end.map(|_| token + 1),
            end_cause: end.map(|_| EndCause::Expired),
            from_snapshot: false,
            duration_seconds: end.map(|e| (e - start) as f64 / 1000.0),
        }
    }

    fn refusal(token: i64, at: i64) -> RefusalRow {
        RefusalRow {
            election: "db".into(),
            resource: "orders".into(),
            token,
            reason: FenceReason::StaleToken,
            revision: token + 100,
            at_ms: at,
            at: format_ms(at),
            current_token: Some(token + 2),
            current_holder: Some("b".into()),
        }
    }

    fn input<'a>(terms: &'a [TermRow], from: i64, to: i64, now: i64) -> Input<'a> {
        Input {
            terms,
            refusals: &[],
            gaps: &[],
            from_ms: from,
            to_ms: to,
            now_ms: now,
            known_since_ms: terms.iter().map(|t| t.started_at_ms).min(),
            width: WIDTH,
        }
    }

    fn assert_inside(t: &Timeline) {
        for b in &t.bars {
            assert!(b.x.0 >= t.plot_left.0 - 1e-9, "{b:?}");
            assert!(b.x.0 + b.w.0 <= t.plot_right.0 + 2.0 + 1e-9, "{b:?}");
            assert!(b.w.0 > 0.0, "{b:?}");
        }
        for m in t.refusals.iter().chain(&t.gaps) {
            assert!(m.x.0 >= t.plot_left.0 && m.x.0 <= t.plot_right.0, "{m:?}");
        }
        for s in &t.leaderless {
            assert!(
                s.x.0 >= t.plot_left.0 && s.x.0 + s.w.0 <= t.plot_right.0 + MIN_BAR,
                "{s:?}"
            );
        }
    }

    #[test]
    fn bars_lanes_and_leaderless_gaps() {
        let terms = [
            term(10, "a", T0, Some(T0 + 10 * MIN)),
            term(12, "b", T0 + 12 * MIN, Some(T0 + 30 * MIN)),
            term(20, "a", T0 + 30 * MIN, Some(T0 + 40 * MIN)),
            term(25, "c", T0 + 45 * MIN, None),
        ];
        let t = layout(&input(&terms, T0, T0 + HOUR, T0 + 50 * MIN));
        assert_inside(&t);
        assert_eq!(t.lanes.len(), 3);
        let names: Vec<_> = t.lanes.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(t.bars.len(), 4);
        assert!(t.bars.iter().all(Bar::is_term));
        assert_eq!(t.bars.iter().filter(|b| b.lane == 0).count(), 2);
        // The window's first 10 min are a's: x from the plot's left edge,
        // a sixth of the plot wide.
        let plot = t.plot_right.0 - t.plot_left.0;
        let a = &t.bars[0];
        assert_eq!((a.token, a.lane), (10, 0));
        assert!((a.x.0 - t.plot_left.0).abs() < 1e-6);
        assert!((a.w.0 - plot / 6.0).abs() < 1e-6);
        // Open term: from 45 min to now (50 min), and no further.
        let open = t.bars.iter().find(|b| b.token == 25).expect("open bar");
        assert_eq!(open.kind, BarKind::Open);
        assert!((open.x.0 + open.w.0 - t.now_x.expect("now inside").0).abs() < 1e-6);
        assert!(open.title.contains("still leading"), "{}", open.title);
        // Leaderless: 10..12, 40..45 min; nothing after now is leaderless.
        let gaps: Vec<(i64, i64)> = t
            .leaderless
            .iter()
            .map(|s| (s.from_ms - T0, s.to_ms - T0))
            .collect();
        assert_eq!(gaps, [(10 * MIN, 12 * MIN), (40 * MIN, 45 * MIN)]);
        assert_eq!(t.leaderless_ms, 7 * MIN);
        assert!(
            t.leaderless[0].title.contains("no leader for 2m 00s"),
            "{}",
            t.leaderless[0].title
        );
        // Labels: token and cause on wide bars.
        assert_eq!(t.bars[0].label.as_deref(), Some("#10 · expired"));
        assert!(t.bars[0].title.contains("token 10 · expired"));
        assert!(t.no_data.is_none());
    }

    #[test]
    fn terms_outside_the_window_are_clipped_or_skipped() {
        let terms = [
            term(1, "old", T0 - 3 * HOUR, Some(T0 - 2 * HOUR)),
            term(2, "a", T0 - HOUR, Some(T0 + 10 * MIN)),
            term(3, "b", T0 + 50 * MIN, Some(T0 + 2 * HOUR)),
            term(4, "late", T0 + 3 * HOUR, None),
        ];
        let t = layout(&input(&terms, T0, T0 + HOUR, T0 + 4 * HOUR));
        assert_inside(&t);
        let tokens: Vec<i64> = t.bars.iter().map(|b| b.token).collect();
        assert_eq!(tokens, [2, 3]);
        assert_eq!(t.lanes.len(), 2);
        let (a, b) = (&t.bars[0], &t.bars[1]);
        assert!(a.clipped_left && !a.clipped_right);
        assert!(!b.clipped_left && b.clipped_right);
        assert!((a.x.0 - t.plot_left.0).abs() < 1e-6);
        assert!((b.x.0 + b.w.0 - t.plot_right.0).abs() < 1e-6);
        // The window is past: no now line.
        assert!(t.now_x.is_none());
        assert_eq!(t.terms_drawn, 2);
    }

    #[test]
    fn open_term_runs_to_now_or_to_the_window_end() {
        let terms = [term(7, "a", T0 + 10 * MIN, None)];
        let t = layout(&input(&terms, T0, T0 + HOUR, T0 + 30 * MIN));
        let bar = &t.bars[0];
        let plot = t.plot_right.0 - t.plot_left.0;
        assert!((bar.x.0 + bar.w.0 - (t.plot_left.0 + plot / 2.0)).abs() < 1e-6);
        // Window ended before now: the bar reaches the right edge, clipped.
        let t = layout(&input(&terms, T0, T0 + 20 * MIN, T0 + 5 * HOUR));
        let bar = &t.bars[0];
        assert!((bar.x.0 + bar.w.0 - t.plot_right.0).abs() < 1e-6);
        assert!(bar.clipped_right);
        // A term that started just now is still visible.
        let t = layout(&input(&terms, T0, T0 + HOUR, T0 + 10 * MIN));
        assert_eq!(t.bars.len(), 1);
        assert!(t.bars[0].w.0 >= 2.0);
    }

    #[test]
    fn no_data_before_the_first_term_is_not_leaderless() {
        let terms = [term(5, "a", T0 + 20 * MIN, Some(T0 + 30 * MIN))];
        let t = layout(&input(&terms, T0, T0 + HOUR, T0 + HOUR));
        let nd = t.no_data.as_ref().expect("no-data shade");
        assert_eq!((nd.from_ms, nd.to_ms), (T0, T0 + 20 * MIN));
        let gaps: Vec<(i64, i64)> = t
            .leaderless
            .iter()
            .map(|s| (s.from_ms - T0, s.to_ms - T0))
            .collect();
        assert_eq!(gaps, [(30 * MIN, 60 * MIN)]);
        // An election without terms: nothing is called leaderless.
        let t = layout(&input(&[], T0, T0 + HOUR, T0 + HOUR));
        assert!(t.leaderless.is_empty() && t.no_data.is_none() && t.bars.is_empty());
        assert_eq!(t.lanes.len(), 0);
        assert!(t.height.0 > 0.0);
    }

    #[test]
    fn overlapping_terms_leave_no_false_gap() {
        // A superseded term overlapping its successor (queue layout).
        let terms = [
            term(1, "a", T0, Some(T0 + 20 * MIN)),
            term(2, "b", T0 + 10 * MIN, Some(T0 + 15 * MIN)),
            term(3, "c", T0 + 18 * MIN, Some(T0 + 40 * MIN)),
        ];
        let t = layout(&input(&terms, T0, T0 + HOUR, T0 + HOUR));
        let gaps: Vec<(i64, i64)> = t
            .leaderless
            .iter()
            .map(|s| (s.from_ms - T0, s.to_ms - T0))
            .collect();
        assert_eq!(gaps, [(40 * MIN, 60 * MIN)]);
    }

    #[test]
    fn refusals_go_to_the_refused_terms_lane_or_the_fence_lane() {
        let terms = [
            term(451, "scene-01", T0, Some(T0 + 10 * MIN)),
            term(453, "scene-02", T0 + 11 * MIN, None),
        ];
        let refusals = [
            refusal(451, T0 + 12 * MIN),
            refusal(99, T0 + 13 * MIN),
            refusal(451, T0 - HOUR),
        ];
        let mut inp = input(&terms, T0, T0 + HOUR, T0 + 30 * MIN);
        inp.refusals = &refusals;
        let t = layout(&inp);
        assert_inside(&t);
        assert_eq!(t.refusals.len(), 2);
        assert_eq!(t.refusals[0].lane, Some(0));
        assert!(t.refusals[0].title.contains("token 451"));
        assert!(t.refusals[0].title.contains("stale_token"));
        assert_eq!(t.lanes.len(), 3);
        assert_eq!(t.lanes[2].kind, LaneKind::Fence);
        assert_eq!(t.refusals[1].lane, Some(2));
        // Many refusals at one moment: one marker with a count.
        let many: Vec<RefusalRow> = (0..500).map(|i| refusal(451, T0 + 12 * MIN + i)).collect();
        inp.refusals = &many;
        let t = layout(&inp);
        assert_eq!(t.refusals.len(), 1);
        assert_eq!(t.refusals[0].count, 500);
    }

    #[test]
    fn gaps_are_marked() {
        let terms = [term(1, "a", T0, None)];
        let gaps = [
            GapMark {
                at_ms: T0 + 5 * MIN,
                from_revision: 10,
                to_revision: 20,
            },
            GapMark {
                at_ms: T0 - 5 * MIN,
                from_revision: 1,
                to_revision: 2,
            },
        ];
        let mut inp = input(&terms, T0, T0 + HOUR, T0 + HOUR);
        inp.gaps = &gaps;
        let t = layout(&inp);
        assert_eq!(t.gaps.len(), 1);
        assert!(t.gaps[0].title.contains("10..20"));
    }

    #[test]
    fn tick_labels_for_15_minutes_and_7_days() {
        let t = layout(&input(&[], T0 + 7 * MIN, T0 + 22 * MIN, T0 + 22 * MIN));
        let labels: Vec<&str> = t.ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            ["14:08", "14:10", "14:12", "14:14", "14:16", "14:18", "14:20", "14:22"]
        );
        assert!(t.ticks.windows(2).all(|w| w[0].x < w[1].x));
        assert!(t
            .ticks
            .iter()
            .all(|k| k.x >= t.plot_left && k.x <= t.plot_right));

        let t = layout(&input(&[], T0 - 7 * DAY, T0, T0));
        let labels: Vec<&str> = t.ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            ["11-26", "11-27", "11-28", "11-29", "11-30", "12-01", "12-02"]
        );

        // A day: hours, with the date at midnight.
        let t = layout(&input(&[], T0 - DAY, T0, T0));
        assert!(t.ticks.len() <= 10 && t.ticks.len() >= 4, "{:?}", t.ticks);
        let midnight = t.ticks.iter().find(|k| k.major).expect("midnight tick");
        assert_eq!(midnight.label, "12-02");
        // Seconds for a one-minute window; a year of data: months.
        let t = layout(&input(&[], T0, T0 + MIN, T0));
        assert_eq!(t.ticks[0].label, "14:00:00");
        let t = layout(&input(&[], T0 - 365 * DAY, T0, T0));
        assert!(
            t.ticks.len() <= 9 && t.ticks[0].label.len() == 7,
            "{:?}",
            t.ticks
        );
        // Ten years: still bounded.
        let t = layout(&input(&[], T0 - 3650 * DAY, T0, T0));
        assert!(t.ticks.len() <= 10, "{}", t.ticks.len());
    }

    #[test]
    fn hundreds_of_holders_share_an_other_lane() {
        let terms: Vec<TermRow> = (0..300)
            .map(|i| {
                let start = T0 + i * 10_000;
                // Holder 0 leads much longer than the rest.
                let end = if i == 0 { start + 9_000 } else { start + 5_000 };
                term(i + 1, &format!("h{i:03}"), start, Some(end))
            })
            .collect();
        let t = layout(&input(&terms, T0, T0 + HOUR, T0 + HOUR));
        assert_inside(&t);
        assert_eq!(t.lanes.len(), MAX_LANES);
        assert_eq!(
            t.lanes.last().map(|l| &l.kind),
            Some(&LaneKind::Other(300 - (MAX_LANES - 1)))
        );
        assert_eq!(t.other_holders, 300 - (MAX_LANES - 1));
        assert!(t.lanes.iter().any(|l| l.label == "h000"));
        assert_eq!(t.terms_drawn, 300);
        // Every term is drawn, alone or inside a dense bar.
        let drawn: usize = t.bars.iter().map(|b| b.count).sum();
        assert_eq!(drawn, 300);
        // Distinct colours for the holder lanes.
        let mut hues: Vec<u16> = t
            .lanes
            .iter()
            .filter(|l| matches!(l.kind, LaneKind::Holder(_)))
            .map(|l| l.hue)
            .collect();
        hues.sort_unstable();
        hues.dedup();
        assert_eq!(hues.len(), MAX_LANES - 1);
        // ...and apart from each other: at least two buckets (25°).
        for (i, a) in hues.iter().enumerate() {
            for b in &hues[i + 1..] {
                let d = (i32::from(*a) - i32::from(*b)).rem_euclid(i32::from(HUES));
                assert!(d.min(i32::from(HUES) - d) >= 2, "{hues:?}");
            }
        }
    }

    #[test]
    fn lane_colours_come_from_the_hash_and_stay_apart() {
        // Holders whose hash buckets are apart keep them.
        let (a, b) = (
            "a",
            (0..)
                .map(|i| format!("h{i}"))
                .find(|h| {
                    let d = (i32::from(hue_of(h)) - i32::from(hue_of("a"))).rem_euclid(24);
                    d.min(24 - d) >= 3
                })
                .expect("a distant holder"),
        );
        assert_eq!(lane_hues(&[a, &b]), [hue_of(a), hue_of(&b)]);
        // Two holders in one bucket do not share a colour.
        let twin = (0..)
            .map(|i| format!("t{i}"))
            .find(|h| hue_of(h) == hue_of("a"))
            .expect("a twin");
        let hues = lane_hues(&["a", &twin]);
        assert_ne!(hues[0], hues[1]);
        assert!(hues.contains(&hue_of("a")));
        assert!(lane_hues(&[]).is_empty());
    }

    #[test]
    fn sub_unit_terms_are_merged_into_dense_bars() {
        // 10,000 terms of 300 ms, one every 360 ms: an hour, 1 unit ≈ 3.4 s.
        let terms: Vec<TermRow> = (0..10_000)
            .map(|i| {
                let start = T0 + i * 360;
                term(
                    i + 1,
                    if i % 2 == 0 { "a" } else { "b" },
                    start,
                    Some(start + 300),
                )
            })
            .collect();
        let t = layout(&input(&terms, T0, T0 + HOUR, T0 + HOUR));
        assert_inside(&t);
        assert_eq!(t.terms_drawn, 10_000);
        assert!(t.bars.len() < 100, "{} bars", t.bars.len());
        let drawn: usize = t.bars.iter().map(|b| b.count).sum();
        assert_eq!(drawn, 10_000);
        assert_eq!(t.terms_merged, 10_000);
        assert!(t.bars.iter().all(|b| b.kind == BarKind::Dense));
        // The leaderless slivers (60 ms each) are merged too.
        assert!(t.leaderless.len() < 100, "{}", t.leaderless.len());
        // An isolated short term stays a term bar.
        let lone = [term(1, "a", T0, Some(T0 + 100))];
        let t = layout(&input(&lone, T0, T0 + HOUR, T0 + HOUR));
        assert_eq!(t.bars.len(), 1);
        assert_eq!(t.bars[0].kind, BarKind::Term);
        assert!(t.bars[0].w.0 >= MIN_BAR);
    }

    #[test]
    fn narrow_drawings_keep_a_usable_plot() {
        let terms = [
            term(10, "a-rather-long-holder-name", T0, Some(T0 + 10 * MIN)),
            term(12, "b", T0 + 12 * MIN, None),
        ];
        let mut inp = input(&terms, T0, T0 + HOUR, T0 + 30 * MIN);
        inp.width = NARROW_WIDTH;
        let t = layout(&inp);
        assert_inside(&t);
        assert!(t.plot_right.0 - t.plot_left.0 > 300.0, "{t:?}");
        assert!(
            t.lanes[0].label.chars().count() <= 10,
            "{}",
            t.lanes[0].label
        );
        assert!(t.lanes[0].label.ends_with('…'));
        assert_eq!(t.lanes[0].title, "a-rather-long-holder-name");
        assert!(t.ticks.len() >= 2 && t.ticks.len() <= 4, "{:?}", t.ticks);
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(format_duration_ms(850), "850ms");
        assert_eq!(format_duration_ms(12_340), "12.3s");
        assert_eq!(format_duration_ms(192_000), "3m 12s");
        assert_eq!(format_duration_ms(2 * HOUR + 5 * MIN), "2h 05m");
        assert_eq!(format_duration_ms(3 * DAY + 4 * HOUR), "3d 04h");
        assert_eq!(format_duration_ms(-5), "0ms");
        assert_eq!(short_time(T0 + 123), "2026-12-02 14:00:00.123");
    }

    #[test]
    fn degenerate_windows_do_not_panic() {
        let terms = [term(1, "a", T0, None)];
        for (from, to) in [(T0, T0), (T0 + 10, T0), (i64::MIN / 4, i64::MAX / 4)] {
            let t = layout(&input(&terms, from, to, T0));
            assert_inside(&t);
        }
    }
}
