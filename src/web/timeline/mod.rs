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
//! - Under a term drawn on its own, a thin bar shows when its holder acted,
//!   red where it acted on after the next term began.
//! - A watcher gap (compacted history) is a dashed vertical line at the time
//!   the watcher resynced.
//! - Colours: one of [`HUES`] buckets per lane (the stylesheet maps bucket
//!   `cN` to a hue, red excluded: red is for refusals), from a hash of the
//!   holder, spread apart when two lanes of one drawing would look alike.
//! - Ticks: the smallest "nice" step (1 s … 1 year) that gives at most one
//!   tick per [`TICK_SPACING`] units, aligned to UTC multiples of the step;
//!   labels `HH:MM:SS`, `HH:MM`, `MM-DD` or `YYYY-MM` depending on the step,
//!   with the date shown at UTC midnights.
//!
//! By job: this file holds the constants and what a layout returns;
//! `layout` (the layout core: the scale, visible terms, lanes, refusal
//! markers, gaps), `bars` (term bars and dense runs), `leaderless` (the
//! stretches no term covers, [`uncovered`]), `ticks` (the time axis),
//! `colours` (hue buckets per lane), `acting` (when holders acted, and
//! their overlaps).

use crate::history::{RefusalRow, TermRow};

mod acting;
mod bars;
mod colours;
mod layout;
mod leaderless;
mod scale;
mod ticks;

pub use acting::margin_text;
pub use colours::hue_of;
pub use layout::layout;
pub use leaderless::uncovered;

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
    /// No watcher has been live since then (`None`: one is live now): the
    /// rest of the window was not watched, and whether the election had a
    /// leader there is unknown (`replays::not_watched`).
    pub unwatched_since_ms: Option<i64>,
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

/// When a term's holder acted, at the bottom of its lane.
#[derive(Debug, Clone, PartialEq)]
pub struct ActingBar {
    pub x: Px,
    pub y: Px,
    pub w: Px,
    pub h: Px,
    /// The end is a bound (a guard's deadline) or not known (drawn to now).
    pub bounded: bool,
    /// The part after the next term began (x, width): two holders acting.
    pub overlap: Option<(Px, Px)>,
    /// The overlap's length in words, written beside it.
    pub overlap_label: Option<OverlapLabel>,
    pub title: String,
}

/// "overlap 3.2s", right of the red bar, or left of the acting bar where
/// the drawing ends too soon.
#[derive(Debug, Clone, PartialEq)]
pub struct OverlapLabel {
    pub x: Px,
    /// `start` or `end` (SVG's `text-anchor`).
    pub anchor: &'static str,
    pub text: String,
}

impl ActingBar {
    pub fn class(&self) -> &'static str {
        if self.bounded {
            "acting bounded"
        } else {
            "acting"
        }
    }
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

/// One of etcd's own events, a vertical line across the lanes.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterMarker {
    pub x: Px,
    /// The event's `type` (a CSS class suffix).
    pub kind: &'static str,
    pub title: String,
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
    /// When each term's holder acted, where it reported it.
    pub acting: Vec<ActingBar>,
    pub leaderless: Vec<Shade>,
    /// The part of the window before the history's first term.
    pub no_data: Option<Shade>,
    /// The part of the window after the last moment a watcher was live,
    /// when none is now: not watched, not leaderless (shaded as no data).
    pub not_watched: Option<Shade>,
    pub refusals: Vec<Marker>,
    pub gaps: Vec<Marker>,
    /// etcd's own events: set by the page after layout
    /// ([`crate::web::shared::marks::cluster_markers`]); empty from [`layout`].
    pub cluster: Vec<ClusterMarker>,
    /// Where "now" is, when it is inside the window.
    pub now_x: Option<Px>,
    /// Terms that overlap the window (drawn one by one or in dense bars).
    pub terms_drawn: usize,
    /// Terms inside dense bars.
    pub terms_merged: usize,
    /// Holders sharing the "other" lane.
    pub other_holders: usize,
    /// Total leaderless time in the window, ms (in the part watched: with
    /// `not_watched`, a lower bound).
    pub leaderless_ms: i64,
}

impl Timeline {
    pub fn lanes_height(&self) -> Px {
        Px(self.lanes_bottom.0 - self.lanes_top.0)
    }
}

#[cfg(test)]
mod tests;
