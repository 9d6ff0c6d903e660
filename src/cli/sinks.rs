//! The serve loop's sinks: every watcher's updates and etcd's own events,
//! applied in order to each cluster's metrics and readiness, the traces,
//! the history (named by the cluster) and the live feeds; then, at a stop,
//! the history closed with the stop recorded.

use std::sync::Arc;

use anyhow::Context;
use tokio::sync::{broadcast, mpsc};

use super::replica::History;
use crate::events::cluster::{ClusterEvent, ClusterEventKind};
use crate::events::{Event, Update};
use crate::feed::pipeline::{Inbox, Member, Running};
use crate::feed::{in_cluster, qualified};
use crate::telemetry;

/// A batch of at least this many events (a mass change) is handed to the
/// history before the metrics are updated from it.
const HISTORY_FIRST_EVENTS: usize = 10_000;

/// Records serve's start, applies every update until `stop` or a watcher
/// stops, keeps what the watchers had already produced, and closes the
/// history. The exit code: 0 at `stop`, 1 when every watcher stopped.
pub(super) async fn run(
    mut sinks: Sinks,
    mut inbox: Inbox,
    mut crx: mpsc::Receiver<ClusterEvent>,
    running: Running,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<i32> {
    let pid = std::process::id();
    sinks
        .store
        .cluster_event(serve_event(ClusterEventKind::ServeStarted {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid,
        }))
        .await
        .context("writing history")?;
    let code = sinks.serve(&mut inbox, &mut crx, stop).await?;
    // Whatever the watchers already produced is complete: keep it.
    running.stop();
    for (i, u) in inbox.rest().await {
        sinks.apply(i, &u).await?;
    }
    let Sinks { members, store, .. } = sinks;
    close_history(store, &members, pid).await?;
    Ok(code)
}

/// Where every update goes, in order.
pub(super) struct Sinks {
    pub members: Vec<Member>,
    pub store: History,
    pub live: broadcast::Sender<Arc<Event>>,
    pub cluster_live: broadcast::Sender<Arc<ClusterEvent>>,
    pub lease_live: broadcast::Sender<Arc<crate::events::LeaseNow>>,
}

impl Sinks {
    /// The watchers' updates and etcd's own events to the sinks, until
    /// `stop` (exit code 0) or every feed's watcher has stopped (1). A
    /// batch also tells its cluster's token floor keeper of resets.
    async fn serve(
        &mut self,
        inbox: &mut Inbox,
        crx: &mut mpsc::Receiver<ClusterEvent>,
        stop: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<i32> {
        tokio::pin!(stop);
        let mut ended = vec![false; self.members.len()];
        loop {
            tokio::select! {
                next = inbox.recv() => match next {
                    Some((i, Some(u))) => self.apply(i, &u).await?,
                    Some((i, None)) => {
                        self.watcher_stopped(i);
                        if let Some(e) = ended.get_mut(i) {
                            *e = true;
                        }
                        // The others go on recording; with none left,
                        // serve stops.
                        if ended.iter().all(|e| *e) {
                            return Ok(1);
                        }
                    }
                    None => return Ok(1),
                },
                Some(e) = crx.recv() => record_cluster(&self.store, &self.cluster_live, e).await?,
                _ = &mut stop => return Ok(0),
            }
        }
    }

    /// Says that feed `i`'s watcher stopped.
    fn watcher_stopped(&self, i: usize) {
        let m = self.members.get(i);
        let name = m.and_then(|m| m.scope.clone());
        // Leases through the API: no etcd cluster to name.
        let what = match m.map(|m| m.readiness.source()) {
            Some(source) if name.is_none() && source != "etcd" => source.to_owned(),
            _ => in_cluster(&name),
        };
        eprintln!("tenure: the watcher of {what} stopped");
        // Not ready, and said why, while the others go on.
        if let Some(m) = m.filter(|m| m.readiness.connect_problem().is_none()) {
            m.readiness.set_connect_problem(Some(format!(
                "the watcher of {what} stopped; nothing of it is shown or recorded until serve \
                 restarts (see tenure's log)"
            )));
        }
    }

    /// One update of cluster `i`: its metrics and readiness, the traces,
    /// the history (named by the cluster) and the live feed.
    async fn apply(&mut self, i: usize, u: &Update) -> anyhow::Result<()> {
        let Some(m) = self.members.get_mut(i) else {
            return Ok(());
        };
        if let (Update::Batch(b), Some(floors)) = (u, m.floors()) {
            floors.on_batch(b);
        }
        // The first batch (the snapshot) makes /readyz say ready once the
        // pages can show it: after it is committed, not when it arrives.
        let first_load = matches!(u, Update::Batch(_)) && !m.readiness.is_loaded();
        if !first_load {
            m.readiness.apply(u);
        }
        // The history, the live feed and the traces name elections as the
        // pages do: `CLUSTER/NAME` with several clusters.
        let named = match u {
            Update::Batch(b) => Some(qualified(m.scope.as_deref(), b)),
            _ => None,
        };
        for mut e in crate::events::cluster::from_update(u, crate::events::now_ms()) {
            e.cluster = m.scope.as_deref().map(str::to_owned);
            record_cluster(&self.store, &self.cluster_live, e).await?;
        }
        let store = &self.store;
        if let Update::Cluster { cluster_id } = u {
            store
                .set_cluster(&m.scope, *cluster_id)
                .await
                .context("writing history")?;
        }
        store
            .heartbeat(&m.scope, u)
            .await
            .context("writing history")?;
        // A mass change goes to the history first: its thread commits while
        // this one updates the metrics (a deletion of 100,000 elections
        // costs them about 0.3 s, which the pages reading the history no
        // longer wait for). Any other batch reaches the metrics first, so a
        // scrape is never behind what the pages and the API show.
        let history_first = named
            .as_ref()
            .is_some_and(|b| b.events.len() >= HISTORY_FIRST_EVENTS);
        if !history_first {
            m.metrics.apply(u);
        }
        let mut live = Vec::new();
        if let Some(b) = named {
            if self.live.receiver_count() > 0 {
                live = b.events.iter().map(|e| Arc::new(e.clone())).collect();
            }
            // Spans cost nothing unless a subscriber wants them.
            telemetry::record_batch(&b);
            store.write(&m.scope, b).await.context("writing history")?;
        }
        if history_first {
            m.metrics.apply(u);
        }
        for e in live {
            // No subscribers is fine.
            let _ = self.live.send(e);
        }
        if first_load {
            store.flush().await.context("writing history")?;
            m.readiness.apply(u);
        }
        if let Update::Renewing { changed, .. } = u {
            live_leases(&self.lease_live, m.scope.as_deref(), changed);
        }
        Ok(())
    }
}

/// A Lease's renewals and lapses to the live feed, named as the pages name
/// them (`CLUSTER/NAME` with several clusters), once the readiness that
/// the pages read has them.
fn live_leases(
    live: &broadcast::Sender<Arc<crate::events::LeaseNow>>,
    scope: Option<&str>,
    changed: &[crate::events::LeaseNow],
) {
    if live.receiver_count() == 0 {
        return;
    }
    for l in changed {
        let mut l = l.clone();
        if let Some(cluster) = scope {
            l.election = crate::events::qualify(cluster, &l.election);
        }
        // No subscribers is fine.
        let _ = live.send(Arc::new(l));
    }
}

/// The stop recorded (watched until now, for each cluster whose watcher
/// was live; serve stopped) and the history closed, everything committed.
async fn close_history(store: History, members: &[Member], pid: u32) -> anyhow::Result<()> {
    for m in members {
        if m.readiness.is_ready() {
            // Watched until this stop.
            store
                .watched(&m.scope, crate::events::now_ms())
                .await
                .context("writing history")?;
        }
    }
    store
        .cluster_event(serve_event(ClusterEventKind::ServeStopped { pid }))
        .await
        .context("writing history")?;
    let reader = store.reader();
    let revision = store.close().await.context("closing the history")?;
    if members.iter().all(|m| m.scope.is_none()) {
        eprintln!("tenure: history committed up to revision {revision}");
        return Ok(());
    }
    for m in members {
        let (reader, scope) = (reader.clone(), m.scope.clone());
        let resume = tokio::task::spawn_blocking(move || reader.resume_point_of(scope.as_deref()))
            .await?
            .context("reading the history's resume revisions")?;
        eprintln!(
            "tenure: history of {} committed up to revision {}",
            in_cluster(&m.scope),
            resume.map_or(0, |r| r.revision)
        );
    }
    Ok(())
}

/// Stores one of etcd's events and tells the live feed.
async fn record_cluster(
    store: &History,
    live: &broadcast::Sender<Arc<ClusterEvent>>,
    e: ClusterEvent,
) -> anyhow::Result<()> {
    store
        .cluster_event(e.clone())
        .await
        .context("writing history")?;
    // No subscribers is fine.
    let _ = live.send(Arc::new(e));
    Ok(())
}

fn serve_event(kind: ClusterEventKind) -> ClusterEvent {
    let now = crate::events::now_ms();
    ClusterEvent {
        at_ms: now,
        not_before_ms: Some(now),
        cluster: None,
        kind,
    }
}
