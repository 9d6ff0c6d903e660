//! What one election's timeline page is built from: its query as given,
//! the window, what the history and etcd said. `election.rs` loads it,
//! `election_view.rs` shows it; both import this, and it imports neither.

use crate::election::LeaderStatus;
use crate::events::cluster::ClusterEvent;
use crate::events::Event;
use crate::history::{ElectionSummary, RefusalRow, TermRow};
use crate::web::replays::ReplayMark;
use crate::web::timeline::GapMark;
use crate::web::AppState;

use super::urls::query_pairs;

/// A quiet election's default window ends this long after its last event.
pub const STALE_PAD: i64 = 5 * 60_000;
/// The most rows a table shows.
pub const MAX_ROWS: usize = 5000;

/// The query parameters of the timeline page, as given.
#[derive(Debug, Default, Clone)]
pub(super) struct Params {
    pub(super) from: Option<String>,
    pub(super) to: Option<String>,
    pub(super) limit: Option<String>,
}

impl Params {
    pub(super) fn parse(raw: Option<&str>) -> Params {
        let mut p = Params::default();
        for (k, v) in query_pairs(raw) {
            match k {
                "from" => p.from = Some(v),
                "to" => p.to = Some(v),
                "limit" => p.limit = Some(v),
                _ => {}
            }
        }
        p
    }
}

/// The window shown and how it was chosen.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) from_ms: i64,
    pub(super) to_ms: i64,
    /// No `from`/`to` given and the election was quiet for the last hour.
    pub(super) quiet: bool,
    /// No `from`/`to` given and the election's history is younger than an
    /// hour: the window starts shortly before its first term.
    pub(super) young: bool,
}

/// What the history says about one election in one window.
pub(super) struct History {
    pub(super) summary: Option<ElectionSummary>,
    pub(super) window: Window,
    pub(super) terms: Vec<TermRow>,
    /// The newest events of the window (at least `limit` when there are
    /// that many), oldest first.
    pub(super) events: Vec<Event>,
    /// `events` is every event of the window.
    pub(super) events_complete: bool,
    /// The watcher gaps of the whole window.
    pub(super) gaps: Vec<GapMark>,
    /// What was replayed in the window: those changes' times are bounds.
    pub(super) replays: Vec<ReplayMark>,
    pub(super) refusals: Vec<RefusalRow>,
    pub(super) known_since_ms: Option<i64>,
    /// etcd's own events in the window.
    pub(super) cluster: Vec<ClusterEvent>,
    /// No watcher has been live since then (`None`: one is live now).
    pub(super) unwatched_since: Option<i64>,
}

/// etcd's view of the current leader, or why the page goes without it.
pub(super) struct EtcdAnswer {
    /// `None`: nobody leads, or etcd did not answer (`note` says which).
    pub(super) leader: Option<LeaderStatus>,
    /// What the page says when etcd did not answer.
    pub(super) note: Option<String>,
    /// Not asked: another system's election (tenure's own only are read
    /// from etcd by name).
    pub(super) foreign: bool,
}

impl EtcdAnswer {
    /// etcd did not answer: the page says `note`.
    pub(super) fn missing(note: String) -> Self {
        EtcdAnswer {
            leader: None,
            note: Some(note),
            foreign: false,
        }
    }

    pub(super) fn answered(&self) -> bool {
        self.note.is_none()
    }
}

/// Everything the timeline page is built from.
pub(super) struct PageInput<'a> {
    pub(super) state: &'a AppState,
    pub(super) name: &'a crate::web::Target,
    pub(super) params: &'a Params,
    /// Rows per table.
    pub(super) limit: usize,
    pub(super) now: i64,
    pub(super) history: History,
    pub(super) etcd: EtcdAnswer,
    /// Patroni's members, read live (a Patroni scope only).
    pub(super) members: Option<super::members::MembersView>,
    /// A Kubernetes Lease's renewals, as its cluster's watcher last said.
    pub(super) lease: Option<crate::events::LeaseNow>,
}
