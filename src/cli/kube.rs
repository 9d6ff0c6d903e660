//! `tenure serve --kubeconfig FILE` and `--in-cluster`: Kubernetes' Leases
//! read through its API instead of etcd (`watch::kube`), into the same
//! serve loop, history and pages. No etcd is connected: the mutating API
//! answers 503 (`etcd_unavailable`), no token floor is kept, no etcd
//! poller runs. A PostgreSQL history is refused (its writer is elected in
//! etcd).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use super::clusters::{Connector, Watched};
use crate::history::Db;
use crate::watch::kube::{ApiConfig, KubeConfig};
use crate::watch::WatchConfig;

/// What to read: the kubeconfig's current context (`None`: the pod's
/// service account), heartbeat leases too or not.
pub fn config(
    db: &Path,
    kubeconfig: Option<&Path>,
    heartbeats: bool,
    max_elections: usize,
) -> anyhow::Result<Arc<KubeConfig>> {
    anyhow::ensure!(
        !matches!(Db::from_arg(db), Db::Postgres(_)),
        "--kubeconfig/--in-cluster with a PostgreSQL history is not supported: its replicas \
         elect their writer in etcd; give a SQLite history (--db FILE)"
    );
    let api = match kubeconfig {
        Some(path) => ApiConfig::from_kubeconfig(path)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?,
        None => ApiConfig::in_cluster()?,
    };
    eprintln!(
        "tenure: watching Leases through the Kubernetes API at {}",
        api.authority
    );
    Ok(Arc::new(KubeConfig {
        api,
        prefix: crate::layout::kubernetes::DEFAULT_PREFIX.to_owned(),
        heartbeats,
        max_elections,
        forget_after: WatchConfig::default().forget_after,
    }))
}

/// The one watched cluster: its Leases through `api`, no etcd.
pub fn watched(api: Arc<KubeConfig>) -> Watched {
    Watched {
        name: None,
        client: None,
        connector: Connector::none(),
        sources: Vec::new(),
        sources_only: true,
        api: Some(api),
        adopt: None,
    }
}
