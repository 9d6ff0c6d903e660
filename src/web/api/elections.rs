//! `GET /api/v1/elections` (the elections the history knows, a page at a
//! time) and
//! `GET /api/v1/elections/{name}` (one election: etcd's leader, else the
//! history's).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ErrorBody;
use super::extract::{ApiQuery, ElectionPath};
use super::schema::NamePath;
use super::{blocking, ApiError};
use crate::election::{Error as ElectionError, Leader, LeaderStatus};
use crate::events::now_ms;
use crate::history::{self, format_ms, HistoryError, PageFrom};
use crate::text::fnv1a;
use crate::web::AppState;

pub(super) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(detail))
}

/// One election, as etcd and the history know it now.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ElectionView {
    name: String,
    holder: Option<String>,
    token: Option<i64>,
    lease_id: Option<i64>,
    since: Option<String>,
    since_ms: Option<i64>,
    ttl_remaining_seconds: Option<i64>,
    changes_last_hour: usize,
    /// False when etcd did not answer: the rest comes from history. `null`
    /// for another system's election (a key path): never read live, the
    /// rest is what the watcher recorded.
    etcd_reachable: Option<bool>,
    /// Candidates queued behind the leader (queue layout), next first;
    /// `null` when etcd did not answer (only etcd knows them).
    waiting: Option<Vec<WaiterJson>>,
}

/// A page of the elections the history knows, by name.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ElectionList {
    elections: Vec<ElectionRow>,
    /// How many elections the history knows.
    total: u64,
    limit: usize,
    /// Pass it back as `cursor` for the next page; `null` after the last.
    next_cursor: Option<String>,
}

/// One election of the list: its open term as recorded.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ElectionRow {
    name: String,
    holder: Option<String>,
    token: Option<i64>,
    lease_id: Option<i64>,
    /// RFC 3339, UTC.
    since: Option<String>,
    since_ms: Option<i64>,
    changes_last_hour: u64,
    refusals: u64,
}

/// The list's query as given: each field at most once, read as it is
/// (no value trimmed or skipped), then checked by [`ListParams::of`].
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ListQuery {
    /// Elections per page.
    #[param(value_type = Option<usize>, minimum = 1, maximum = 10000)]
    limit: Option<String>,
    /// The previous page's `next_cursor`, as given.
    cursor: Option<String>,
}

/// Elections in a page of the list unless `limit` says otherwise.
pub const LIST_PAGE: usize = 1000;
/// The most elections one page of the list holds.
pub const LIST_MAX_PAGE: usize = 10_000;

/// The list's query: `limit` (1 to [`LIST_MAX_PAGE`]) and `cursor` (the
/// `next_cursor` of the previous page).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListParams {
    limit: usize,
    /// The name the page starts after.
    after: Option<String>,
}

impl ListParams {
    fn of(q: &ListQuery) -> Result<ListParams, ApiError> {
        let pairs = [("limit", &q.limit), ("cursor", &q.cursor)];
        Self::from_pairs(pairs.into_iter().filter_map(|(k, v)| Some((k, v.clone()?))))
    }

    #[cfg(test)]
    fn parse(raw: Option<&str>) -> Result<ListParams, ApiError> {
        Self::from_pairs(crate::web::pages::urls::query_pairs(raw))
    }

    fn from_pairs<'a>(
        pairs: impl Iterator<Item = (&'a str, String)>,
    ) -> Result<ListParams, ApiError> {
        let mut p = ListParams {
            limit: LIST_PAGE,
            after: None,
        };
        for (k, v) in pairs {
            match k {
                "limit" => {
                    p.limit = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=LIST_MAX_PAGE).contains(n))
                        .ok_or_else(|| {
                            ApiError::new(
                                StatusCode::BAD_REQUEST,
                                "invalid_limit",
                                format!(
                                    "limit must be a number from 1 to {LIST_MAX_PAGE}, not {v:?}"
                                ),
                            )
                        })?
                }
                "cursor" => {
                    p.after = Some(decode_cursor(&v).ok_or_else(|| {
                        ApiError::new(
                            StatusCode::BAD_REQUEST,
                            "invalid_cursor",
                            "cursor is not one this API gave: pass the previous page's \
                             next_cursor as it is, or leave it out for the first page",
                        )
                    })?)
                }
                _ => {}
            }
        }
        Ok(p)
    }
}

/// A page's cursor: the last name of the page in hex (opaque, URL-safe),
/// then `.` and the 64-bit FNV-1a hash of the name (`crate::text`), so that a cursor this API
/// did not give (typed, cut, edited) is refused rather than read as a name:
/// a random one passes with a chance of one in 2^64. Not a secret: any
/// replica reads any replica's cursors.
fn encode_cursor(name: &str) -> String {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.{:016x}", fnv1a(name.as_bytes()))
}

fn decode_cursor(cursor: &str) -> Option<String> {
    let (hex, check) = cursor.split_once('.')?;
    if hex.len() % 2 != 0 || !hex.is_ascii() || check.len() != 16 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    if u64::from_str_radix(check, 16).ok()? != fnv1a(&bytes) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// `GET /api/v1/elections?limit=&cursor=`: elections the history knows, by
/// name, a page at a time (`total`: how many it knows; `next_cursor`: where
/// the next page starts, `null` after the last). Paging by name, not by
/// offset: an election added or removed between two requests neither
/// shifts nor repeats the others.
#[utoipa::path(get, path = "/api/v1/elections", tag = "elections",
    params(ListQuery),
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "A page of elections", body = ElectionList),
        (status = 400, description = "`invalid_limit`, `invalid_cursor`, `invalid_query` (a field twice)", body = ErrorBody),
        (status = 401, description = "`--read-token` is set and not sent", body = ErrorBody),
        (status = 500, description = "`history_error`", body = ErrorBody),
    ))]
pub(super) async fn list(
    State(s): State<Arc<AppState>>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<ElectionList>, ApiError> {
    let p = ListParams::of(&q)?;
    let reader = s.history.clone();
    let hour_ago = now_ms() - 3_600_000;
    let limit = p.limit;
    let (page, more, changes_by) = blocking(move || {
        let from = match &p.after {
            Some(name) => PageFrom::After(name),
            None => PageFrom::Offset(0),
        };
        // One more than the page: whether another page follows.
        let mut page = reader.elections_page(from, p.limit + 1)?;
        let more = page.elections.len() > p.limit;
        page.elections.truncate(p.limit);
        // One grouped query for the page's elections.
        let changes = match (page.elections.first(), page.elections.last()) {
            (Some(first), Some(last)) => {
                reader
                    .recent_between(hour_ago, &first.election, &last.election)?
                    .changes
            }
            _ => Default::default(),
        };
        Ok::<_, HistoryError>((page, more, changes))
    })
    .await?;
    let next_cursor = more
        .then(|| page.elections.last().map(|e| encode_cursor(&e.election)))
        .flatten();
    let elections = page
        .elections
        .into_iter()
        .map(|e| ElectionRow {
            changes_last_hour: changes_by.get(&e.election).copied().unwrap_or(0),
            holder: e.current.as_ref().map(|t| t.holder.clone()),
            token: e.current.as_ref().map(|t| t.token),
            lease_id: e.current.as_ref().map(|t| t.lease_id),
            since: e.current.as_ref().map(|t| format_ms(t.started_at_ms)),
            since_ms: e.current.as_ref().map(|t| t.started_at_ms),
            name: e.election,
            refusals: e.refusals,
        })
        .collect();
    Ok(Json(ElectionList {
        elections,
        total: page.total,
        limit,
        next_cursor,
    }))
}

/// One election: etcd's leader (and who waits), else the history's.
#[utoipa::path(get, path = "/api/v1/elections/{name}", tag = "elections",
    params(NamePath),
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "The election", body = ElectionView),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 401, description = "`--read-token` is set and not sent", body = ErrorBody),
        (status = 404, description = "`unknown_election`: nobody leads it and the history has none of it", body = ErrorBody),
        (status = 500, description = "`history_error`", body = ErrorBody),
        (status = 502, description = "`etcd_error`", body = ErrorBody),
        (status = 503, description = "`etcd_access`", body = ErrorBody),
    ))]
pub(super) async fn detail(
    State(s): State<Arc<AppState>>,
    ElectionPath(name): ElectionPath,
) -> Result<Json<ElectionView>, ApiError> {
    // Another system's election is not read live (its layout is the
    // watcher's): what the watcher recorded is all there is.
    // Its cluster not connected yet: as etcd unreachable.
    let live = match (name.name.own(), s.client_of(&name)) {
        (Some(own), Some(client)) => Some(client.leader(own).await),
        _ => None,
    };
    let (open, changes, known) = recorded(&s, name.to_string()).await?;
    let Live {
        leader,
        ttl,
        reachable,
        waiting,
    } = Live::of(live)?;
    let read_live = name.name.own().is_some();
    if (reachable || !read_live) && leader.is_none() && !known {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_election",
            format!("nobody leads {name} and tenure has no history of it"),
        ));
    }
    // Since: history's start of the same term, when it knows it.
    let since_ms = match (&leader, &open) {
        (Some(l), Some(o)) if o.token == l.token => Some(o.started_at_ms),
        (None, Some(o)) if !reachable => Some(o.started_at_ms),
        _ => None,
    };
    let from_history = !reachable;
    Ok(Json(ElectionView {
        name: name.to_string(),
        holder: leader.as_ref().map(|l| l.holder.clone()).or_else(|| {
            open.as_ref()
                .filter(|_| from_history)
                .map(|o| o.holder.clone())
        }),
        token: leader
            .as_ref()
            .map(|l| l.token)
            .or_else(|| open.as_ref().filter(|_| from_history).map(|o| o.token)),
        lease_id: leader
            .as_ref()
            .map(|l| l.lease_id)
            .or_else(|| open.as_ref().filter(|_| from_history).map(|o| o.lease_id)),
        since: since_ms.map(format_ms),
        since_ms,
        ttl_remaining_seconds: ttl,
        changes_last_hour: changes,
        etcd_reachable: read_live.then_some(reachable),
        waiting: waiting.map(|w| {
            w.into_iter()
                .map(|c| WaiterJson {
                    holder: c.holder,
                    token: c.token,
                    key: c.key,
                })
                .collect()
        }),
    }))
}

/// What the history holds of election `n`: its open term, how many terms
/// began in the last hour (not counting ones first seen in a snapshot),
/// and whether it knows the election at all. Read as the list reads its
/// rows (the summary and the grouped counts), so the two agree.
async fn recorded(
    s: &AppState,
    n: String,
) -> Result<(Option<history::OpenTerm>, usize, bool), ApiError> {
    let reader = s.history.clone();
    let hour_ago = now_ms() - 3_600_000;
    let got = blocking(move || {
        let changes = reader
            .recent_between(hour_ago, &n, &n)?
            .changes
            .get(&n)
            .copied()
            .unwrap_or(0) as usize;
        let summary = reader.election(&n)?;
        let known = summary.is_some();
        Ok((summary.and_then(|e| e.current), changes, known))
    })
    .await?;
    Ok(got)
}

/// What etcd answered of an election (`None`: not asked, another
/// system's or its cluster not connected).
struct Live {
    leader: Option<Leader>,
    ttl: Option<i64>,
    reachable: bool,
    /// Only etcd knows who waits: `None` is unknown, not "nobody".
    waiting: Option<Vec<Leader>>,
}

impl Live {
    fn of(answer: Option<Result<Option<LeaderStatus>, ElectionError>>) -> Result<Self, ApiError> {
        let (leader, ttl, reachable, waiting) = match answer {
            None => (None, None, false, None),
            Some(Ok(Some(st))) => (
                Some(st.leader),
                st.ttl_remaining_seconds,
                true,
                Some(st.waiting),
            ),
            Some(Ok(None)) => (None, None, true, Some(Vec::new())),
            Some(Err(e)) if e.is_unavailable() => (None, None, false, None),
            Some(Err(e)) => return Err(e.into()),
        };
        Ok(Self {
            leader,
            ttl,
            reachable,
            waiting,
        })
    }
}

/// A candidate queued behind the leader, as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
struct WaiterJson {
    holder: String,
    token: i64,
    key: String,
}

#[cfg(test)]
mod tests {
    use super::{decode_cursor, encode_cursor, ListParams, LIST_PAGE};

    #[test]
    fn cursors_round_trip_and_bad_ones_are_refused() {
        for name in ["a", "team/db", "ünï/cödé", ""] {
            assert_eq!(decode_cursor(&encode_cursor(name)).as_deref(), Some(name));
        }
        for never_given in ["6", "zz", "7a", "61", "7a.0000000000000000", "", "."] {
            assert_eq!(decode_cursor(never_given), None, "{never_given}");
        }
        let not_utf8 = format!("ff.{:016x}", crate::text::fnv1a(&[0xff]));
        assert_eq!(decode_cursor(&not_utf8), None, "not UTF-8");
        let edited = encode_cursor("b").replacen("62", "61", 1);
        assert_eq!(decode_cursor(&edited), None, "an edited name");
        let p = ListParams::parse(Some(&format!("limit=5&cursor={}", encode_cursor("a"))))
            .expect("valid");
        assert_eq!((p.limit, p.after.as_deref()), (5, Some("a")));
        assert_eq!(ListParams::parse(None).expect("valid").limit, LIST_PAGE);
        for bad in ["limit=0", "limit=x", "limit=10001", "cursor=g", "cursor=7a"] {
            assert!(ListParams::parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
