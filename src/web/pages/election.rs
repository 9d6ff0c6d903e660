//! One election's timeline page (`/elections/{name}`): its query, the
//! window it shows, and what the history and etcd say about it. What the
//! page shows is built from that in [`super::election_view`].
//!
//! - History queries run on blocking threads. The current leader is read
//!   from etcd at the same time, bounded by [`ETCD_WAIT`]: when etcd does not
//!   answer, the page shows the history's view and says so; it never fails
//!   because etcd is down.
//! - The timeline's window comes from `from` and `to` (anything
//!   [`parse_time`] accepts: RFC 3339, unix seconds, `2h` for two hours
//!   ago). Without them: the last hour, except
//!   - when nothing happened in it: the hour that ends [`STALE_PAD`] after
//!     the election's last event (so an election that went quiet still
//!     shows its last changes), with a note and a link to the last hour;
//!   - when the election's history is younger than an hour: from a little
//!     before its first term ([`fitted_from`]: 10 % of the age and 2 s, at
//!     least [`MIN_DEFAULT_WINDOW_MS`] in all), so a new election is not a
//!     sliver at the right edge.
//! - Tables show the newest rows first, at most `limit` (default
//!   [`DEFAULT_ROWS`], at most [`MAX_ROWS`]), with "showing N of M".

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::election_input::{EtcdAnswer, History, PageInput, Params, Window};
pub use super::election_input::{MAX_ROWS, STALE_PAD};
use super::render;
use crate::events::{now_ms, Event, EventKind};
use crate::history::{self, format_ms, parse_time, Query, Reader};
use crate::web::replays;
use crate::web::shared::error_page;
use crate::web::shared::fit::{fitted_from, LAST_HOUR_MS, MIN_FITTED_MS};
use crate::web::timeline::GapMark;
use crate::web::AppState;
use crate::web::Target;

/// How long a page waits for etcd's view of the current leader.
pub const ETCD_WAIT: Duration = Duration::from_millis(1500);
/// Default window of the timeline.
pub const DEFAULT_WINDOW_MS: i64 = LAST_HOUR_MS;
/// The shortest default window (for an election younger than an hour).
pub const MIN_DEFAULT_WINDOW_MS: i64 = MIN_FITTED_MS;
/// Rows per table unless `limit` says otherwise.
pub const DEFAULT_ROWS: usize = 100;

enum PageError {
    BadRequest(String),
    History(String),
}

/// The window shown: the one asked for; else the last hour, or the hour
/// up to an election's last change when it has been quiet longer, or from
/// a little before a young election's first term.
fn window_of(
    summary: Option<&history::ElectionSummary>,
    known_since_ms: Option<i64>,
    from: Option<i64>,
    to: Option<i64>,
    now: i64,
) -> Window {
    let mut window = Window {
        to_ms: to.unwrap_or(now),
        from_ms: 0,
        quiet: false,
        young: false,
    };
    window.from_ms = from.unwrap_or(window.to_ms - DEFAULT_WINDOW_MS);
    if from.is_none() && to.is_none() {
        let last = summary.and_then(|s| {
            let open = s.current.as_ref().map(|c| c.started_at_ms);
            s.last_event_ms.max(open)
        });
        if let Some(last) = last.filter(|&l| l < now - DEFAULT_WINDOW_MS) {
            window.to_ms = (last + STALE_PAD).min(now);
            window.from_ms = window.to_ms - DEFAULT_WINDOW_MS;
            window.quiet = true;
        } else if let Some(first) = known_since_ms.filter(|&k| k > now - DEFAULT_WINDOW_MS) {
            // A young election: from a little before its first term.
            window.from_ms = fitted_from(Some(first), now);
            window.young = true;
        }
    }
    window
}

fn load_history(
    reader: &Reader,
    name: &str,
    from: Option<i64>,
    to: Option<i64>,
    limit: usize,
    now: i64,
) -> Result<History, history::HistoryError> {
    let summary = reader.election(name)?;
    let first = reader.terms(
        name,
        &Query {
            limit: Some(1),
            ..Query::default()
        },
    )?;
    let known_since_ms = first.first().map(|t| t.started_at_ms);
    let window = window_of(summary.as_ref(), known_since_ms, from, to, now);
    let q = Query {
        from_ms: Some(window.from_ms),
        to_ms: Some(window.to_ms),
        limit: Some(history::MAX_LIMIT),
    };
    let (events, events_complete) = newest_events(reader, name, &window, limit)?;
    // Fleet-wide events (gaps, resets, replay marks) have an empty election
    // name, or their cluster's `CLUSTER/`, so asking for that
    // name gives them alone (the events query adds them to any election's).
    let fleet_name = crate::events::fleet_name_of(name);
    let fleet: Vec<_> = reader
        .events(Some(fleet_name), &q)?
        .into_iter()
        .filter(|e| e.election.is_empty() || e.election == fleet_name)
        .collect();
    let replays = replays::marks(&fleet);
    let gaps = fleet
        .into_iter()
        .filter_map(|e| match e.kind {
            // A reset (etcd restored or replaced) is a gap too: what
            // happened between the two timelines is not known one by one.
            EventKind::Gap {
                from_revision,
                to_revision,
            }
            | EventKind::Reset {
                from_revision,
                to_revision,
                ..
            } => Some(GapMark {
                at_ms: e.at_ms,
                from_revision,
                to_revision,
            }),
            _ => None,
        })
        .collect();
    Ok(History {
        known_since_ms,
        terms: reader.terms(name, &q)?,
        events,
        events_complete,
        gaps,
        replays,
        refusals: reader.refusals(Some(name), &q)?,
        cluster: reader
            .cluster_events(&q)?
            .into_iter()
            .filter(|e| concerns(e, name))
            .collect(),
        summary,
        window,
        unwatched_since: None,
    })
}

/// The newest `limit` (or more) events of the window, oldest first, and
/// whether that is all of them. The events query returns the oldest rows
/// first, so instead of reading (and parsing) every event of a busy
/// window, this reads a slice at the window's end and widens it fourfold
/// until it holds more than `limit` events or covers the whole window.
fn newest_events(
    reader: &Reader,
    name: &str,
    w: &Window,
    limit: usize,
) -> Result<(Vec<Event>, bool), history::HistoryError> {
    let span = (w.to_ms - w.from_ms).max(1);
    let mut slice = (span / 64).max(1000);
    loop {
        let from = (w.to_ms - slice).max(w.from_ms);
        let q = Query {
            from_ms: Some(from),
            to_ms: Some(w.to_ms),
            limit: Some(history::MAX_LIMIT),
        };
        let events = reader.events(Some(name), &q)?;
        if from == w.from_ms {
            let complete = events.len() < history::MAX_LIMIT;
            return Ok((events, complete));
        }
        if events.len() > limit {
            return Ok((events, false));
        }
        slice = slice.saturating_mul(4);
    }
}

pub(super) async fn election_page(
    State(s): State<Arc<AppState>>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let name = match s.target(&raw) {
        Ok(n) => n,
        Err(e) => {
            return error_page(
                &s,
                StatusCode::BAD_REQUEST,
                "Not a valid election name",
                e.to_string(),
            );
        }
    };
    let params = Params::parse(query.as_deref());
    let now = now_ms();
    match timeline_page(&s, &name, &params, now).await {
        Ok(resp) => resp,
        Err(PageError::BadRequest(m)) => {
            error_page(&s, StatusCode::BAD_REQUEST, "Invalid time range", m)
        }
        Err(PageError::History(m)) => error_page(
            &s,
            StatusCode::SERVICE_UNAVAILABLE,
            "History unavailable",
            m,
        ),
    }
}

/// Whether etcd's event `e` concerns the election `name`: serve's own and
/// the one cluster's do; with several clusters, only its own
/// cluster's.
fn concerns(e: &crate::events::cluster::ClusterEvent, name: &str) -> bool {
    e.cluster
        .as_deref()
        .is_none_or(|c| name.split_once('/').is_some_and(|(first, _)| first == c))
}

/// etcd's leader of `name`, bounded by [`ETCD_WAIT`]; or why the page shows
/// only what the history knows. Another system's election is not read
/// live: its layout is the watcher's, and what the watcher recorded is
/// shown.
async fn ask_etcd(s: &AppState, name: &Target) -> EtcdAnswer {
    let Some(own) = name.name.own() else {
        return EtcdAnswer {
            foreign: true,
            ..EtcdAnswer::missing(
                "Another system's election, as tenure's watcher recorded it (not read live)."
                    .to_owned(),
            )
        };
    };
    let Some(client) = s.client_of(name) else {
        return EtcdAnswer::missing(
            "etcd of this cluster has not answered since serve started: showing what the              history knows."
                .to_owned(),
        );
    };
    match tokio::time::timeout(ETCD_WAIT, client.leader(own)).await {
        Ok(Ok(leader)) => EtcdAnswer {
            leader,
            note: None,
            foreign: false,
        },
        Ok(Err(e)) if e.is_unavailable() => {
            EtcdAnswer::missing("etcd unreachable: showing what the history knows.".to_owned())
        }
        Ok(Err(e)) => EtcdAnswer::missing(format!("etcd: {e}. Showing what the history knows.")),
        Err(_) => EtcdAnswer::missing(format!(
            "etcd unreachable: no answer within {} ms. Showing what the history knows.",
            ETCD_WAIT.as_millis()
        )),
    }
}

/// The page's window and row limit, as its parameters give them: `from`
/// before `to` (now when not given), a positive limit (at most
/// `MAX_ROWS`).
fn window(params: &Params, now: i64) -> Result<(Option<i64>, Option<i64>, usize), PageError> {
    let parse = |what: &str, v: &Option<String>| {
        v.as_deref()
            .map(parse_time)
            .transpose()
            .map_err(|e| PageError::BadRequest(format!("{what}: {e}")))
    };
    let from = parse("from", &params.from)?;
    let to = parse("to", &params.to)?;
    if let (Some(f), Some(t)) = (from, to.or(Some(now))) {
        if f >= t {
            return Err(PageError::BadRequest(format!(
                "from ({}) must be before to ({})",
                format_ms(f),
                format_ms(t)
            )));
        }
    }
    let limit = match &params.limit {
        None => DEFAULT_ROWS,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| PageError::BadRequest(format!("limit: {l:?} is not a positive number")))?
            .min(MAX_ROWS),
    };
    Ok((from, to, limit))
}

async fn timeline_page(
    s: &Arc<AppState>,
    name: &Target,
    params: &Params,
    now: i64,
) -> Result<Response, PageError> {
    let (from, to, limit) = window(params, now)?;
    let reader = s.history.clone();
    let n = name.to_string();
    let state = s.clone();
    let history = tokio::task::spawn_blocking(move || {
        let mut h = load_history(&reader, &n, from, to, limit, now)?;
        h.unwatched_since = state.unwatched_since_of(&n);
        Ok::<_, history::HistoryError>(h)
    });
    let (history, etcd) = tokio::join!(history, ask_etcd(s, name));
    let h = match history {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => return Err(PageError::History(e.to_string())),
        Err(e) => return Err(PageError::History(e.to_string())),
    };
    if h.summary.is_none() && etcd.leader.is_none() {
        let old_lease = s
            .sources_of(name)
            .filter(|src| src.reads_leases())
            .and_then(|_| crate::layout::path::lease_name_of_path(name.name.as_str()));
        let msg = if let Some(now) = old_lease {
            format!(
                "tenure has no history of {name}: a Kubernetes Lease is named NAMESPACE/NAME \
                 ({now}), not by its etcd path"
            )
        } else if name.name.own().is_none() {
            format!("tenure has no history of {name}: is its prefix given with --source?")
        } else if etcd.answered() {
            format!("Nobody leads {name} and tenure has no history of it.")
        } else {
            format!("tenure has no history of {name}, and etcd could not be asked.")
        };
        return Ok(error_page(
            s,
            StatusCode::NOT_FOUND,
            "Unknown election",
            msg,
        ));
    }

    let holder = h
        .summary
        .as_ref()
        .and_then(|e| e.current.as_ref())
        .map(|t| t.holder.clone());
    let members = super::members::patroni_members(s, name, holder.as_deref(), ETCD_WAIT).await;
    let input = PageInput {
        state: s,
        name,
        params,
        limit,
        now,
        history: h,
        etcd,
        members,
        lease: s.readiness_of(name).leases.get(name.name.as_str()),
    };
    let page = input.build();
    Ok(render(StatusCode::OK, &page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_skip_empty_values() {
        let p = Params::parse(Some("from=2h&to=&limit=5&x=1"));
        assert_eq!(p.from.as_deref(), Some("2h"));
        assert_eq!(p.to, None);
        assert_eq!(p.limit.as_deref(), Some("5"));
    }
}
