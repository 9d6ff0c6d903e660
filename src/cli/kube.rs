//! `tenure serve --kubeconfig FILE` and `--in-cluster`: Kubernetes' Leases
//! read through its API instead of etcd (`watch::kube`), into the same
//! serve loop, history and pages. No etcd is connected: the mutating API
//! answers 503 (`etcd_unavailable`), no token floor is kept, no etcd
//! poller runs. On a PostgreSQL history its writer is elected in the
//! database (`feed/in_database.rs`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use crate::watch::kube::{ApiConfig, KubeConfig};
use crate::watch::WatchConfig;

/// What to read: a kubeconfig's context (`None`: its current one) or,
/// without a kubeconfig, the pod's service account; heartbeat leases too
/// or not.
pub fn config(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    heartbeats: bool,
    max_elections: usize,
) -> anyhow::Result<Arc<KubeConfig>> {
    let api = match kubeconfig {
        Some(path) => ApiConfig::from_kubeconfig_context(path, context)
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
