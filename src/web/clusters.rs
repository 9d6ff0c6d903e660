//! Several clusters in one server: which cluster an election's
//! name names (`CLUSTER/NAME`), whose client reads it live, whose
//! readiness says since when it was not watched; `/readyz` per cluster and
//! one `/metrics` of all. With one cluster (no `--cluster`) every name is
//! the one cluster's and nothing here changes what the pages did.
//!
//! Deliberately absent: a cluster is never guessed. A name whose first
//! segment names no configured cluster is refused (400), never read from
//! another cluster's etcd.

use std::sync::{Arc, OnceLock};

use super::AppState;
use crate::election::{Client, Error};
use crate::feed::readiness::Readiness;
use crate::layout::path::WatchedName;
use crate::layout::Sources;
use crate::telemetry::Metrics;

/// One watched cluster, as the server sees it.
pub struct ClusterView {
    pub name: Arc<str>,
    /// Set once serve has connected (a cluster unreachable at start is
    /// connected to later).
    pub client: Arc<OnceLock<Client>>,
    pub readiness: Arc<Readiness>,
    pub metrics: Arc<Metrics>,
    /// What its watcher reads, set with its client.
    pub sources: Arc<OnceLock<Sources>>,
    /// Whether its names that are no paths are Kubernetes Leases' (known
    /// from its configuration, before it connects).
    pub reads_leases: bool,
}

/// An election named in a URL: its name within its cluster, and its name
/// in the history (`CLUSTER/NAME`, or the same with one cluster).
#[derive(Debug, Clone)]
pub struct Target {
    /// The name within its cluster (what its etcd holds).
    pub name: WatchedName,
    /// The name the history, the pages and the API give it.
    pub full: String,
    /// Its cluster's index in [`AppState::clusters`] (`None`: the one).
    cluster: Option<usize>,
}

impl Target {
    pub fn as_str(&self) -> &str {
        &self.full
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.full)
    }
}

impl AppState {
    /// The election `raw` names: with several clusters, `CLUSTER/NAME` of a
    /// configured cluster, `NAME` valid there (a Lease's `NAMESPACE/NAME`
    /// where that cluster reads Leases).
    pub fn target(&self, raw: &str) -> Result<Target, Error> {
        if self.clusters.is_empty() {
            return Ok(Target {
                name: WatchedName::parse_in(raw, self.sources.reads_leases())?,
                full: raw.to_owned(),
                cluster: None,
            });
        }
        let found = raw.split_once('/').and_then(|(c, rest)| {
            let i = self.clusters.iter().position(|v| &*v.name == c)?;
            Some((i, rest))
        });
        let Some((i, rest)) = found else {
            return Err(Error::InvalidName {
                name: raw.chars().take(64).collect(),
                reason: "this server watches several clusters: an election is CLUSTER/NAME, \
                         CLUSTER one of those /readyz lists",
            });
        };
        // Known from its configuration: a cluster not connected yet reads
        // names as its sources will.
        let leases = self.clusters[i].reads_leases;
        Ok(Target {
            name: WatchedName::parse_in(rest, leases)?,
            full: raw.to_owned(),
            cluster: Some(i),
        })
    }

    fn view(&self, t: &Target) -> Option<&ClusterView> {
        t.cluster.and_then(|i| self.clusters.get(i))
    }

    /// The client of `t`'s cluster; `None` while serve has not connected
    /// to it (unreachable since serve started).
    pub fn client_of(&self, t: &Target) -> Option<&Client> {
        match self.view(t) {
            None => self.client.as_ref(),
            Some(v) => v.client.get(),
        }
    }

    /// [`AppState::client_of`], or why there is none, for the API.
    pub fn connected_client(&self, t: &Target) -> Result<&Client, super::api::ApiError> {
        self.client_of(t).ok_or_else(|| {
            super::api::ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "etcd_unavailable",
                format!(
                    "the etcd cluster of {} has not answered since serve started: try again \
                     once /readyz says it is watched",
                    t.full
                ),
            )
        })
    }

    /// The readiness of `t`'s cluster (its watcher's live word).
    pub fn readiness_of(&self, t: &Target) -> &Readiness {
        self.view(t).map_or(&*self.readiness, |v| &*v.readiness)
    }

    /// What `t`'s cluster's watcher reads (`None`: not connected yet).
    pub fn sources_of(&self, t: &Target) -> Option<&Sources> {
        match self.view(t) {
            None => Some(&self.sources),
            Some(v) => v.sources.get(),
        }
    }

    /// Since when nothing of `election`'s cluster has been watched (`None`:
    /// watched now); see [`Readiness::unwatched_since`]. Reads that cluster
    /// alone (a page of many lanes reads each once: [`AppState::unwatched`]).
    /// Blocking.
    pub fn unwatched_since_of(&self, election: &str) -> Option<i64> {
        if self.clusters.is_empty() {
            return self.readiness.unwatched_since(&self.history);
        }
        self.clusters
            .iter()
            .find(|v| Some(&*v.name) == cluster_of(election))
            .map_or(NOT_WATCHED_HERE, |v| {
                v.readiness.unwatched_since_in(&self.history, Some(&v.name))
            })
    }

    /// Since when each cluster has not been watched, each read once (a
    /// page asks it for every lane). Blocking.
    pub fn unwatched(&self) -> Unwatched {
        if self.clusters.is_empty() {
            return Unwatched {
                one: self.readiness.unwatched_since(&self.history),
                clusters: Vec::new(),
            };
        }
        let clusters = self
            .clusters
            .iter()
            .map(|v| {
                let since = v.readiness.unwatched_since_in(&self.history, Some(&v.name));
                (v.name.clone(), since)
            })
            .collect();
        Unwatched {
            one: None,
            clusters,
        }
    }
}

/// What "not watched since" says of a name of no configured cluster:
/// this server never watched it.
const NOT_WATCHED_HERE: Option<i64> = Some(0);

/// The cluster part of a fleet name `CLUSTER/NAME` (several clusters).
fn cluster_of(election: &str) -> Option<&str> {
    election.split_once('/').map(|(c, _)| c)
}

/// Since when each cluster has not been watched (`None`: watched now).
pub struct Unwatched {
    /// The one cluster's, without `--cluster`.
    one: Option<i64>,
    clusters: Vec<(Arc<str>, Option<i64>)>,
}

impl Unwatched {
    /// `election`'s cluster's; a name of no configured cluster was not
    /// watched at all by this server.
    pub fn of(&self, election: &str) -> Option<i64> {
        if self.clusters.is_empty() {
            return self.one;
        }
        self.clusters
            .iter()
            .find(|(name, _)| Some(&**name) == cluster_of(election))
            .map_or(NOT_WATCHED_HERE, |(_, since)| *since)
    }

    /// The earliest of every cluster's (`None`: all are watched).
    pub fn any(&self) -> Option<i64> {
        if self.clusters.is_empty() {
            return self.one;
        }
        self.clusters.iter().filter_map(|(_, since)| *since).min()
    }
}

/// `/readyz` of several clusters: one line each, ready only when every
/// cluster is (a down cluster is named; the others keep recording), with
/// each cluster's writer lines.
pub(super) fn readyz(s: &AppState) -> (bool, String) {
    let mut ready = true;
    let mut lines = String::new();
    let (mut unwatched, mut refused) = (Vec::new(), Vec::new());
    for v in &s.clusters {
        let (ok, text) = super::readiness_verdict(&v.readiness);
        ready &= ok;
        if !ok {
            // Not ready: etcd refuses its writer campaign for good, or it
            // is not watched (whatever else its lines say).
            match v.readiness.writer_refused() {
                Some(_) => refused.push(&*v.name),
                None => unwatched.push(&*v.name),
            }
        }
        for (i, line) in text.lines().enumerate() {
            if i == 0 {
                lines.push_str(&format!("cluster {}: {line}\n", v.name));
            } else {
                lines.push_str(&format!("  {line}\n"));
            }
        }
        for line in v.readiness.writer_lines().into_iter().flatten() {
            lines.push_str(&format!("  {line}\n"));
        }
    }
    let head = if ready {
        format!("ready: {} clusters watched\n", s.clusters.len())
    } else {
        let mut why = Vec::new();
        if !unwatched.is_empty() {
            why.push(format!("cluster {} not watched", unwatched.join(", ")));
        }
        if !refused.is_empty() {
            why.push(format!(
                "this replica can never write the history of cluster {}",
                refused.join(", ")
            ));
        }
        format!("not ready: {}\n", why.join("; "))
    };
    (ready, format!("{head}{lines}"))
}

/// One exposition of every cluster's metrics (`cluster` label), with the
/// serve-wide families; `keep` selects elections by their full name.
pub(super) fn render_metrics(s: &AppState, keep: Option<&dyn Fn(&str) -> bool>) -> String {
    let parts: Vec<(&str, String)> = s
        .clusters
        .iter()
        .map(|v| {
            let text = match keep {
                None => v.metrics.render(),
                Some(k) => v
                    .metrics
                    .render_matching(&|n| k(&crate::events::qualify(&v.name, n))),
            };
            (&*v.name, text)
        })
        .collect();
    let serve = s.metrics.render_fleet();
    crate::telemetry::merge_clusters(&parts, &serve)
}

/// `cluster=NAME` of a page's or the report's query: the
/// elections of that cluster, matching `glob` within it when given.
pub fn within_cluster(cluster: Option<&str>, glob: Option<String>) -> Option<String> {
    match cluster {
        None => glob,
        Some(c) => Some(crate::events::qualify(c, glob.as_deref().unwrap_or("*"))),
    }
}
