//! The all-elections drawing: every lane laid out by the per-election
//! [`timeline::layout`] and flattened into one row, etcd's events across
//! them, and its SVG.

use askama::Template;

use super::window::Window;
use crate::history::{format_duration_ms, short_time};
use crate::web::shared::marks::{cluster_title, not_watched_text};
use crate::web::shared::urls::election_href;
use crate::web::text::truncate;
use crate::web::timeline::{self, Input, Px};

/// Height of one election's row in the drawing.
const ROW_H: f64 = 22.0;
const ROW_GAP: f64 = 4.0;
const AXIS: f64 = 26.0;
const BOTTOM: f64 = 18.0;

// ---------------------------------------------------------------------------
// Layout: every lane by timeline::layout, flattened into one row each.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Row {
    pub election: String,
    pub href: String,
    pub label: String,
    pub y: Px,
    pub label_y: Px,
    pub changes: u64,
    pub refusals: u64,
    pub leaderless: String,
    pub leaderless_ms: i64,
    pub bars: Vec<timeline::Bar>,
    /// Where a holder acted on after the next term began: red
    /// across the row.
    pub overlaps: Vec<timeline::ActingBar>,
    pub shades: Vec<timeline::Shade>,
    /// The part of the window not watched (see `timeline::Timeline`).
    pub not_watched: Option<timeline::Shade>,
    pub marks: Vec<timeline::Marker>,
}

/// One of etcd's events, drawn across every row.
#[derive(Debug, Clone)]
pub struct ClusterMark {
    pub x: Px,
    pub kind: &'static str,
    pub title: String,
}

#[derive(Debug, Clone)]
pub struct Drawing {
    pub width: Px,
    pub height: Px,
    pub plot_left: Px,
    pub axis_y: Px,
    pub rows_top: Px,
    pub rows_bottom: Px,
    pub ticks: Vec<timeline::Tick>,
    pub rows: Vec<Row>,
    pub gaps: Vec<ClusterMark>,
    pub cluster: Vec<ClusterMark>,
    pub now_x: Option<Px>,
}

impl Drawing {
    pub fn rows_height(&self) -> Px {
        Px(self.rows_bottom.0 - self.rows_top.0)
    }
}

/// Lays the window out (pure).
pub fn layout(w: &Window, now: i64, width: f64) -> Drawing {
    let empty = timeline::layout(&Input {
        terms: &[],
        refusals: &[],
        gaps: &[],
        from_ms: w.sel.from_ms,
        to_ms: w.sel.to_ms,
        now_ms: now,
        known_since_ms: None,
        unwatched_since_ms: w.unwatched_since,
        width,
    });
    let (left, right) = (empty.plot_left.0, empty.plot_right.0);
    let span = (w.sel.to_ms - w.sel.from_ms).max(1) as f64;
    let x = |t: i64| {
        left + (t.clamp(w.sel.from_ms, w.sel.to_ms) - w.sel.from_ms) as f64 / span * (right - left)
    };
    let top = AXIS;
    let rows = w
        .lanes
        .iter()
        .enumerate()
        .map(|(i, lane)| row(w, lane, top + i as f64 * (ROW_H + ROW_GAP), now, width))
        .collect();
    let bottom = top + w.lanes.len().max(1) as f64 * (ROW_H + ROW_GAP);
    let mark = |at: i64, kind: &'static str, title: String| ClusterMark {
        x: Px(x(at)),
        kind,
        title,
    };
    let cluster = w
        .cluster
        .iter()
        .filter(|e| !matches!(e.kind.name(), "gap"))
        .map(|e| mark(e.at_ms, e.kind.name(), cluster_title(e)))
        .collect();
    let gaps = w
        .all_gaps()
        .map(|(cluster, g)| mark(g.at_ms, "gap", gap_title(cluster, g)))
        .collect();
    Drawing {
        width: empty.width,
        height: Px(bottom + BOTTOM),
        plot_left: empty.plot_left,
        axis_y: Px(top - 4.0),
        rows_top: Px(top),
        rows_bottom: Px(bottom),
        ticks: empty.ticks,
        rows,
        gaps,
        cluster,
        now_x: (now >= w.sel.from_ms && now <= w.sel.to_ms).then(|| Px(x(now))),
    }
}

/// A gap's mark's title: its cluster, the revisions compacted unseen.
fn gap_title(cluster: Option<&str>, g: &timeline::GapMark) -> String {
    let of = cluster
        .map(|c| format!("cluster {c}: "))
        .unwrap_or_default();
    format!(
        "{of}watcher gap: revisions {}..={} compacted unseen\nresynced {}",
        g.from_revision,
        g.to_revision,
        short_time(g.at_ms)
    )
}

/// One election's row at height `y`: its terms' bars, overlaps,
/// leaderless shades and refusal marks, laid out as its own timeline.
fn row(w: &Window, lane: &super::window::Lane, y: f64, now: i64, width: f64) -> Row {
    let t = timeline::layout(&Input {
        terms: &lane.terms,
        refusals: &lane.refusals,
        gaps: &[],
        from_ms: w.sel.from_ms,
        to_ms: w.sel.to_ms,
        now_ms: now,
        // Not every term was read: what looks leaderless may not be.
        known_since_ms: lane.known_since_ms.filter(|_| !lane.truncated),
        unwatched_since_ms: lane.unwatched_since,
        width,
    });
    let election = &lane.activity.election;
    let bars = t
        .bars
        .into_iter()
        .map(|mut b| {
            b.y = Px(y + 1.0);
            b.h = Px(ROW_H - 2.0);
            b.label = None;
            b.title = format!("{election}\n{}", b.title);
            b
        })
        .collect();
    let overlaps = t
        .acting
        .into_iter()
        .filter(|a| a.overlap.is_some())
        .map(|mut a| {
            a.y = Px(y + ROW_H - 6.0);
            a.h = Px(6.0);
            a.title = format!("{election}\n{}", a.title);
            a
        })
        .collect();
    let marks = t
        .refusals
        .into_iter()
        .map(|mut m| {
            m.y = Px(y + ROW_H / 2.0);
            m
        })
        .collect();
    Row {
        href: election_href(election),
        label: truncate(election, 20),
        election: election.clone(),
        y: Px(y),
        label_y: Px(y + ROW_H / 2.0 + 4.0),
        changes: lane.activity.started,
        refusals: lane.activity.refusals,
        leaderless: match (&t.not_watched, lane.truncated) {
            (_, true) => "unknown (too many terms: narrow the window)".to_owned(),
            (Some(nw), false) => not_watched_text(t.leaderless_ms, nw.from_ms),
            (None, false) => format_duration_ms(t.leaderless_ms),
        },
        leaderless_ms: t.leaderless_ms,
        bars,
        overlaps,
        shades: t.leaderless,
        not_watched: t.not_watched,
        marks,
    }
}

// ---------------------------------------------------------------------------
// The page.
// ---------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "incident.svg")]
struct SvgTemplate<'a> {
    d: &'a Drawing,
    title: &'a str,
}

/// Renders the drawing as SVG (every string escaped by askama).
pub fn render_svg(d: &Drawing, title: &str) -> String {
    SvgTemplate { d, title }.render().unwrap_or_else(|e| {
        format!(
            "<!-- timeline rendering failed: {} -->",
            e.to_string().replace("--", "- -")
        )
    })
}
