//! The window of the incident view: the filter (`from`, `to`, a name
//! glob) and what the history holds of it, busiest elections first.

use super::MAX_WINDOW_MS;
use crate::events::cluster::ClusterEvent;
use crate::events::{Event, EventKind};
use crate::history::window::Activity;
use crate::history::{
    self, format_duration_ms, format_ms, parse_time, HistoryError, Query, Reader, RefusalRow,
    TermRow,
};
use crate::web::replays::{self, ReplayMark};
use crate::web::timeline::GapMark;

/// The default window: the last hour.
const DEFAULT_WINDOW_MS: i64 = 3_600_000;

// ---------------------------------------------------------------------------
// Loading a window.
// ---------------------------------------------------------------------------

/// The window and the filter, parsed.
#[derive(Debug, Clone)]
pub struct Selection {
    pub from_ms: i64,
    pub to_ms: i64,
    pub glob: Option<String>,
}

#[derive(Debug)]
pub enum SelectError {
    Bad(String),
}

pub(super) fn select(
    from: Option<&str>,
    to: Option<&str>,
    glob: Option<&str>,
    now: i64,
) -> Result<Selection, SelectError> {
    let parse = |what: &str, v: Option<&str>| {
        v.filter(|s| !s.trim().is_empty())
            .map(|s| parse_time(s.trim()))
            .transpose()
            .map_err(|e| SelectError::Bad(format!("{what}: {e}")))
    };
    let to_ms = parse("to", to)?.unwrap_or(now);
    let from_ms = parse("from", from)?.unwrap_or(to_ms - DEFAULT_WINDOW_MS);
    if from_ms >= to_ms {
        return Err(SelectError::Bad(format!(
            "from ({}) must be before to ({})",
            format_ms(from_ms),
            format_ms(to_ms)
        )));
    }
    if to_ms - from_ms > MAX_WINDOW_MS {
        return Err(SelectError::Bad(format!(
            "the window is {}; at most {} per request: narrow from/to",
            format_duration_ms(to_ms - from_ms),
            format_duration_ms(MAX_WINDOW_MS)
        )));
    }
    let glob = glob
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|g| g.chars().take(256).collect());
    Ok(Selection {
        from_ms,
        to_ms,
        glob,
    })
}

/// One election's share of the window.
#[derive(Debug, Clone)]
pub struct Lane {
    pub activity: Activity,
    pub terms: Vec<TermRow>,
    pub refusals: Vec<RefusalRow>,
    pub known_since_ms: Option<i64>,
    /// The row budget ran out: `terms` or `refusals` are not all of the
    /// window's (leaderless time is then unknown).
    pub truncated: bool,
    /// Nothing of its cluster was watched since then (`None`: watched
    /// now); see [`Window::set_unwatched`].
    pub unwatched_since: Option<i64>,
}

/// Everything one view of the window needs.
#[derive(Debug, Clone)]
pub struct Window {
    pub sel: Selection,
    /// Elections selected in all (before paging).
    pub total: usize,
    pub lanes: Vec<Lane>,
    pub gaps: Vec<GapMark>,
    /// Revisions whose changes were replayed, not seen as they happened.
    pub replays: Vec<ReplayMark>,
    pub cluster: Vec<ClusterEvent>,
    /// No watcher has been live since then (`None`: one is live now): time
    /// after it was not watched (see `replays::not_watched`). With several
    /// clusters: the earliest of theirs; each lane has its own.
    pub unwatched_since: Option<i64>,
    /// Several clusters: the gaps and replays of each, by its
    /// fleet-wide name (`CLUSTER/`). Revisions are a cluster's own: a lane
    /// reads its own cluster's.
    pub clusters: std::collections::BTreeMap<String, FleetMarks>,
}

/// One cluster's fleet-wide marks.
#[derive(Debug, Clone, Default)]
pub struct FleetMarks {
    pub gaps: Vec<GapMark>,
    pub replays: Vec<ReplayMark>,
}

impl Window {
    /// When a term boundary recorded at (`revision`, `at_ms`) may really
    /// have happened: `None` if it was seen as it happened; else the
    /// earliest moment (`Some(None)`: unknown).
    pub fn replayed_since(&self, revision: i64, at_ms: i64) -> Option<Option<i64>> {
        replays::replayed_since(&self.replays, revision, at_ms)
    }

    /// [`Window::replayed_since`] of a boundary of `election`, by the
    /// marks of its cluster.
    pub fn replayed_since_in(
        &self,
        election: &str,
        revision: i64,
        at_ms: i64,
    ) -> Option<Option<i64>> {
        match self.clusters.get(crate::events::fleet_name_of(election)) {
            Some(m) => replays::replayed_since(&m.replays, revision, at_ms),
            None => self.replayed_since(revision, at_ms),
        }
    }

    /// Every gap, with its cluster's name when there are several.
    pub fn all_gaps(&self) -> impl Iterator<Item = (Option<&str>, &GapMark)> {
        let own = self.gaps.iter().map(|g| (None, g));
        let clusters = self.clusters.iter().flat_map(|(name, m)| {
            let cluster = name.strip_suffix('/').unwrap_or(name);
            m.gaps.iter().map(move |g| (Some(cluster), g))
        });
        own.chain(clusters)
    }

    /// Several clusters: each lane's cluster's own gaps and
    /// replays, read from the history (the fleet-wide ones of one cluster
    /// are under `CLUSTER/`).
    pub fn add_cluster_marks(&mut self, reader: &Reader) -> Result<(), HistoryError> {
        let q = Query {
            from_ms: Some(self.sel.from_ms),
            to_ms: Some(self.sel.to_ms),
            limit: Some(history::MAX_LIMIT),
        };
        for lane in &self.lanes {
            let name = crate::events::fleet_name_of(&lane.activity.election);
            if name.is_empty() || self.clusters.contains_key(name) {
                continue;
            }
            let events: Vec<Event> = reader
                .events(Some(name), &q)?
                .into_iter()
                .filter(|e| e.election == name)
                .collect();
            // Read once per cluster, marks or none.
            self.clusters.insert(name.to_owned(), fleet_marks(&events));
        }
        Ok(())
    }

    /// Since when each lane's election (and the window) was not watched:
    /// `of(election)` for each lane, the earliest for the window.
    pub fn set_unwatched(&mut self, of: impl Fn(&str) -> Option<i64>, any: Option<i64>) {
        for lane in &mut self.lanes {
            lane.unwatched_since = of(&lane.activity.election);
        }
        self.unwatched_since = any;
    }
}

/// Elections selected, busiest first, then by name.
fn selected(reader: &Reader, sel: &Selection) -> Result<Vec<Activity>, HistoryError> {
    let q = Query {
        from_ms: Some(sel.from_ms),
        to_ms: Some(sel.to_ms),
        limit: None,
    };
    let mut active = reader.activity(&q)?;
    if let Some(g) = &sel.glob {
        let g = crate::web::shared::glob::Glob::new(g);
        active.retain(|a| g.matches(&a.election));
        // Matching elections that were quiet in the window get a lane too.
        let known: std::collections::HashSet<String> =
            active.iter().map(|a| a.election.clone()).collect();
        for e in reader.elections()? {
            if !known.contains(&e.election) && g.matches(&e.election) {
                active.push(Activity {
                    election: e.election,
                    ..Activity::default()
                });
            }
        }
    }
    active.sort_by(|a, b| {
        b.busyness()
            .cmp(&a.busyness())
            .then_with(|| a.election.cmp(&b.election))
    });
    Ok(active)
}

/// The most terms and refusals one load reads, over all its lanes.
pub const LOAD_BUDGET: usize = 200_000;

/// Loads `sel`, keeping the elections `skip..skip+take` of the order.
pub fn load(
    reader: &Reader,
    sel: &Selection,
    skip: usize,
    take: usize,
) -> Result<Window, HistoryError> {
    let all = selected(reader, sel)?;
    let total = all.len();
    let q = Query {
        from_ms: Some(sel.from_ms),
        to_ms: Some(sel.to_ms),
        limit: Some(history::MAX_LIMIT),
    };
    let mut lanes = Vec::new();
    let mut budget = LOAD_BUDGET;
    for a in all.into_iter().skip(skip).take(take) {
        let limit = budget.clamp(1, history::MAX_LIMIT);
        let lq = Query {
            limit: Some(limit),
            ..q
        };
        let first = reader.terms(
            &a.election,
            &Query {
                limit: Some(1),
                ..Query::default()
            },
        )?;
        let terms = reader.terms(&a.election, &lq)?;
        let refusals = reader.refusals(Some(&a.election), &lq)?;
        let truncated = terms.len() >= limit || refusals.len() >= limit;
        budget = budget.saturating_sub(terms.len() + refusals.len());
        lanes.push(Lane {
            known_since_ms: first.first().map(|t| t.started_at_ms),
            terms,
            refusals,
            truncated,
            activity: a,
            unwatched_since: None,
        });
    }
    let fleet = reader.events(Some(""), &q)?;
    let own: Vec<Event> = fleet
        .into_iter()
        .filter(|e| e.election.is_empty())
        .collect();
    let FleetMarks { gaps, replays } = fleet_marks(&own);
    let cluster = reader.cluster_events(&q)?;
    Ok(Window {
        sel: sel.clone(),
        total,
        lanes,
        gaps,
        replays,
        cluster,
        unwatched_since: None,
        clusters: std::collections::BTreeMap::new(),
    })
}

/// The gaps and replays fleet-wide `events` record.
fn fleet_marks(events: &[Event]) -> FleetMarks {
    let gaps = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Gap {
                from_revision,
                to_revision,
            } => Some(GapMark {
                at_ms: e.at_ms,
                from_revision,
                to_revision,
            }),
            _ => None,
        })
        .collect();
    FleetMarks {
        gaps,
        replays: replays::marks(events),
    }
}

#[cfg(test)]
mod tests {
    use crate::web::shared::glob::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("*", "a/b"));
        assert!(glob_match("svc-*", "svc-1"));
        assert!(!glob_match("svc-*", "db-1"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("*/leader", "x/y/leader"));
        assert!(!glob_match("a*b", "acbd"));
        assert!(glob_match("a*b*", "acbd"));
    }
}
