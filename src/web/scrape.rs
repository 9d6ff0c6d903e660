//! `GET /metrics`: the whole scrape, or a part of it for a very large fleet:
//! `?scope=fleet` (the process and fleet-wide families alone,
//! no series per election) or `?match=GLOB` (the per-election series of
//! the elections the glob matches, with the fleet-wide families). Rendered
//! on a blocking thread: 100,000 elections take ~0.1 s of CPU.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::pages::urls::query_pairs;
use super::shared::glob::Glob;
use super::AppState;
use crate::telemetry::CONTENT_TYPE;

/// Which series a scrape asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScrapeScope {
    /// Everything (no query).
    All,
    /// The process and fleet-wide families: no `election` label at all.
    Fleet,
    /// The fleet-wide families and the elections the glob matches.
    Matching(String),
}

impl ScrapeScope {
    /// Parses `/metrics`' query; an unknown `scope` is an error that says
    /// what is accepted.
    pub fn parse(raw: Option<&str>) -> Result<ScrapeScope, String> {
        let mut scope = ScrapeScope::All;
        let mut fleet = false;
        for (k, v) in query_pairs(raw) {
            match k {
                "scope" => match v.as_str() {
                    "fleet" => fleet = true,
                    "all" => {}
                    other => {
                        return Err(format!(
                            "unknown scope {other:?}: use scope=fleet (no series per election), \
                             scope=all, or match=GLOB (the elections the glob matches)"
                        ))
                    }
                },
                "match" => scope = ScrapeScope::Matching(v.chars().take(256).collect()),
                // One cluster's elections.
                "cluster" => {
                    scope = ScrapeScope::Matching(crate::events::qualify(
                        &v.chars().take(64).collect::<String>(),
                        "*",
                    ))
                }
                _ => {}
            }
        }
        if fleet {
            if scope != ScrapeScope::All {
                return Err("scope=fleet and match=GLOB exclude each other".to_owned());
            }
            return Ok(ScrapeScope::Fleet);
        }
        Ok(scope)
    }
}

/// The metrics' query, as documented (parsed by [`ScrapeScope::parse`]).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(super) struct ScrapeQuery {
    /// `fleet`: no series per election; `all` (the default): every series.
    #[param(pattern = "^(fleet|all)?$")]
    scope: Option<String>,
    /// Only the elections this glob matches, and the fleet-wide families (not with
    /// `scope=fleet`).
    r#match: Option<String>,
}

/// Prometheus' text format: the process, the fleet, each election.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    params(ScrapeQuery),
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "The metrics", content_type = "text/plain", body = String),
        (status = 400, description = "An unknown `scope`, or `scope=fleet` with `match`", content_type = "text/plain", body = String),
        (status = 401, description = "`--read-token` is set and not sent", body = super::api::ErrorBody),
    ))]
pub(super) async fn metrics(State(s): State<Arc<AppState>>, RawQuery(raw): RawQuery) -> Response {
    let scope = match ScrapeScope::parse(raw.as_deref()) {
        Ok(scope) => scope,
        Err(message) => return (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response(),
    };
    // A filtered scrape matches every name: one at a time, so scrapes
    // that loop on costly globs take one core at most, never both from
    // the recorder. Unfiltered ones need no match and do not wait.
    static MATCHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let turn = match &scope {
        ScrapeScope::Matching(_) => MATCHING.acquire().await.ok(),
        _ => None,
    };
    // The turn goes with the work: a client that hangs up does not free
    // it while the match still runs.
    let text = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        if !s.clusters.is_empty() {
            // Several clusters: each its own, labelled.
            return match &scope {
                ScrapeScope::All => super::clusters::render_metrics(&s, None),
                ScrapeScope::Fleet => super::clusters::render_metrics(&s, Some(&|_| false)),
                ScrapeScope::Matching(pattern) => {
                    let glob = Glob::new(pattern);
                    super::clusters::render_metrics(&s, Some(&|name| glob.matches(name)))
                }
            };
        }
        let metrics = &s.metrics;
        match &scope {
            ScrapeScope::All => metrics.render(),
            ScrapeScope::Fleet => metrics.render_fleet(),
            ScrapeScope::Matching(pattern) => {
                let glob = Glob::new(pattern);
                metrics.render_matching(&|name| glob.matches(name))
            }
        }
    })
    .await;
    match text {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("rendering the metrics failed: {e}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::ScrapeScope;

    #[test]
    fn the_scope_of_a_scrape() {
        assert_eq!(ScrapeScope::parse(None), Ok(ScrapeScope::All));
        assert_eq!(
            ScrapeScope::parse(Some("scope=fleet")),
            Ok(ScrapeScope::Fleet)
        );
        assert_eq!(
            ScrapeScope::parse(Some("match=team%2F*")),
            Ok(ScrapeScope::Matching("team/*".into()))
        );
        assert!(ScrapeScope::parse(Some("scope=nope")).is_err());
        assert!(ScrapeScope::parse(Some("scope=fleet&match=a*")).is_err());
    }
}
