//! `tenure serve` keeps tenure's token floor (`P election/~floor`, see
//! `election::floor`): when its watcher records a reset (etcd restored from
//! a snapshot, or replaced) it raises the floor to the old timeline's
//! highest recorded revision, and on start to the highest of every reset
//! the history holds (a serve that stopped before it could raise it, or a
//! later reset). In the background, retrying: recording never waits for
//! it. Until it succeeds, `/readyz` answers 503 with the reason and the log
//! says it, with the grant a read-only role lacks.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::readiness::Readiness;
use crate::election::{Client, Error};
use crate::events::{Batch, EventKind};

pub struct FloorKeeper {
    client: Client,
    readiness: Arc<Readiness>,
    /// Off for `tenure dev`, whose etcd is new at every start.
    enabled: bool,
    /// Which cluster, for the log (empty with one).
    label: String,
    tasks: JoinSet<()>,
}

impl FloorKeeper {
    pub fn new(client: Client, readiness: Arc<Readiness>, enabled: bool) -> Self {
        Self {
            client,
            readiness,
            enabled,
            label: String::new(),
            tasks: JoinSet::new(),
        }
    }

    /// Names the cluster in what it logs.
    pub fn of_cluster(mut self, name: Option<&str>) -> Self {
        self.label = name.map(|n| format!("cluster {n}: ")).unwrap_or_default();
        self
    }

    /// Raises the floor for every reset of `batch`.
    pub fn on_batch(&mut self, batch: &Batch) {
        for e in &batch.events {
            if let EventKind::Reset { from_revision, .. } = e.kind {
                self.raise(from_revision);
            }
        }
    }

    /// Raises the floor to at least `to`, in the background until done.
    pub fn raise(&mut self, to: i64) {
        self.raise_if(to, std::future::ready(true));
    }

    /// [`FloorKeeper::raise`] once `gate` says yes (never when it says
    /// no): an etcd not yet known to be the recorded one gets no floor.
    pub fn raise_if(
        &mut self,
        to: i64,
        gate: impl std::future::Future<Output = bool> + Send + 'static,
    ) {
        if !self.enabled {
            return;
        }
        let (client, readiness, label) = (
            self.client.clone(),
            self.readiness.clone(),
            self.label.clone(),
        );
        crate::task::spawn_in(&mut self.tasks, "token floor", async move {
            if gate.await {
                keep(client, readiness, to, label).await;
            }
        });
    }
}

async fn keep(client: Client, readiness: Arc<Readiness>, to: i64, label: String) {
    let key = client.keys().floor_key();
    let mut wait = Duration::from_secs(1);
    let mut said = String::new();
    loop {
        match client.raise_floor(to).await {
            Ok(floor) => {
                readiness.set_floor_problem(None);
                tracing::warn!(
                    floor,
                    cluster = %label,
                    "etcd started over (restored from a snapshot, or replaced): tenure's token \
                     floor is {floor}; campaigns and fences refuse tokens at or below it \
                     (docs/operations.md, Restoring etcd)"
                );
                return;
            }
            Err(e) => {
                let why = match e {
                    Error::PermissionDenied { .. } => {
                        let role = client
                            .user_roles()
                            .await
                            .and_then(|r| r.first().cloned())
                            .unwrap_or_else(|| "ROLE".to_owned());
                        format!(
                            "etcd denied writing {key:?}: grant it with `etcdctl role \
                             grant-permission {role} readwrite '{key}'`"
                        )
                    }
                    e => e.to_string(),
                };
                let problem = format!(
                    "etcd started over, and tenure's token floor could not be raised to {to} \
                     ({why}); until it is, campaigns and fences do not refuse the tokens etcd \
                     hands out again"
                );
                if problem != said {
                    eprintln!("tenure: {label}{problem}; retrying");
                    said.clone_from(&problem);
                }
                readiness.set_floor_problem(Some(problem));
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    }
}
