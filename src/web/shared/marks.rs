//! What the per-election page borrows from the incident view: etcd's own
//! events as markers of a drawing, and the leaderless time of a window
//! partly not watched.

use crate::events::cluster::ClusterEvent;
use crate::history::{format_duration_ms, short_time};
use crate::web::timeline::{self, Px};

/// Leaderless time when part of the window was not watched: what was
/// watched is a lower bound, the rest unknown.
pub fn not_watched_text(watched_ms: i64, since_ms: i64) -> String {
    format!(
        "unknown (≥ {}; not watched since {})",
        format_duration_ms(watched_ms),
        short_time(since_ms)
    )
}

/// etcd's events as markers of a per-election drawing laid out for
/// `[from, to]`.
pub fn cluster_markers(
    t: &timeline::Timeline,
    events: &[ClusterEvent],
    from: i64,
    to: i64,
) -> Vec<timeline::ClusterMarker> {
    let (left, right) = (t.plot_left.0, t.plot_right.0);
    let span = (to - from).max(1) as f64;
    events
        .iter()
        .filter(|e| e.at_ms >= from && e.at_ms <= to && e.kind.name() != "gap")
        .map(|e| timeline::ClusterMarker {
            x: Px(left + (e.at_ms - from) as f64 / span * (right - left)),
            kind: e.kind.name(),
            title: cluster_title(e),
        })
        .collect()
}

/// Hover text of one cluster event: what, when, how sure.
pub fn cluster_title(e: &ClusterEvent) -> String {
    let when = match e.not_before_ms {
        Some(nb) if nb == e.at_ms => format!("at {}", short_time(e.at_ms)),
        Some(nb) => format!("between {} and {}", short_time(nb), short_time(e.at_ms)),
        None => format!("seen {} (when it happened: unknown)", short_time(e.at_ms)),
    };
    match &e.cluster {
        Some(c) => format!("cluster {c}: {}\n{when}", e.kind.describe()),
        None => format!("{}\n{when}", e.kind.describe()),
    }
}
