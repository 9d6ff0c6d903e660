//! tenure's ingestion path as `tenure serve` wires it (src/cli/serve.rs):
//! `Watcher` → for each update, in order: metrics, readiness, traces,
//! history (queued to the writer thread), the live broadcast. The bare
//! baseline is an etcd-client watch on the same range with the same options.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use etcd_client::{Client as Etcd, WatchOptions, WatchStream};
use tenure::events::{Event, ResumePoint, Update};
use tenure::feed::readiness::Readiness;
use tenure::history::Store;
use tenure::telemetry::{self, Metrics};
use tenure::watch::kube::{KubeConfig, KubeWatcher};
use tenure::watch::{WatchConfig, Watcher};
use tokio::sync::{broadcast, mpsc};

use crate::common::{keys, tenure_client};

pub struct Pipeline {
    pub rx: mpsc::Receiver<Update>,
    pub metrics: Metrics,
    pub readiness: Readiness,
    pub store: Arc<Store>,
    live: broadcast::Sender<Arc<Event>>,
    watcher: tokio::task::JoinHandle<()>,
}

/// Everything opened, the watcher not started yet.
pub struct Prepared {
    client: tenure::election::Client,
    store: Store,
    metrics: Metrics,
}

impl Prepared {
    /// Starts the watcher after `after` (everything up to it counts as
    /// already stored; nothing was open), reading what `cfg` says.
    pub fn start_with(self, after: i64, cfg: WatchConfig) -> Pipeline {
        let client = self.client.clone();
        self.start(after, move |resume, tx| async move {
            let _ = Watcher::new(client, cfg).run(Some(resume), tx).await;
        })
    }

    /// [`Self::start_with`] reading Leases through the Kubernetes API
    /// (`serve --kubeconfig`'s watcher) after resourceVersion `after`.
    pub fn start_kube(self, after: i64, cfg: KubeConfig) -> Result<Pipeline> {
        let watcher = KubeWatcher::new(cfg).map_err(|e| anyhow!("Lease source: {e}"))?;
        Ok(self.start(after, move |resume, tx| async move {
            let _ = watcher.run(Some(resume), tx).await;
        }))
    }

    /// The watcher `run` spawned from `after` (everything up to it counts
    /// as already stored; nothing was open).
    fn start<F: std::future::Future<Output = ()> + Send + 'static>(
        self,
        after: i64,
        run: impl FnOnce(ResumePoint, mpsc::Sender<Update>) -> F,
    ) -> Pipeline {
        let (live, _) = broadcast::channel(1024);
        // Same capacity as serve's.
        let (tx, rx) = mpsc::channel::<Update>(4096);
        let resume = ResumePoint {
            revision: after,
            open_terms: vec![],
            cluster_id: None,
            live_at_ms: None,
            witnesses: Vec::new(),
        };
        let watcher = tokio::spawn(run(resume, tx));
        Pipeline {
            rx,
            metrics: self.metrics,
            readiness: Readiness::default(),
            store: Arc::new(self.store),
            live,
            watcher,
        }
    }
}

impl Pipeline {
    /// Connects and opens a fresh history at `db` (as serve does before
    /// it starts its watcher).
    pub async fn prepare(endpoint: &str, db: &Path) -> Result<Prepared> {
        let store = Store::open(db, Duration::from_secs(30 * 86_400))
            .map_err(|e| anyhow!("history at {}: {e}", db.display()))?;
        Self::prepare_with(endpoint, store).await
    }

    /// Connects, with a history already open (SQLite or PostgreSQL).
    pub async fn prepare_with(endpoint: &str, store: Store) -> Result<Prepared> {
        let client = tenure_client(endpoint).await?;
        let metrics = Metrics::new().map_err(|e| anyhow!("metrics: {e}"))?;
        Ok(Prepared {
            client,
            store,
            metrics,
        })
    }

    /// The next update, applied as serve applies it. `None` when the
    /// watcher stopped.
    pub async fn next(&mut self, limit: Duration) -> Result<Update> {
        let u = match tokio::time::timeout(limit, self.rx.recv()).await {
            Ok(Some(u)) => u,
            Ok(None) => bail!("the watcher stopped"),
            Err(_) => bail!("no update from the watcher within {limit:?}"),
        };
        self.metrics.apply(&u);
        self.readiness.apply(&u);
        telemetry::record(&u);
        if let Update::Batch(b) = &u {
            self.store
                .write(b.clone())
                .await
                .map_err(|e| anyhow!("history write: {e}"))?;
            for e in &b.events {
                let _ = self.live.send(Arc::new(e.clone()));
            }
        }
        Ok(u)
    }

    pub async fn flush(&self) -> Result<i64> {
        self.store
            .flush()
            .await
            .map_err(|e| anyhow!("history flush: {e}"))
    }

    /// Stops the watcher and closes the history.
    pub async fn stop(self) {
        self.watcher.abort();
        drop(self.rx);
        if let Ok(store) = Arc::try_unwrap(self.store) {
            let _ = store.close().await;
        }
    }
}

/// A bare etcd-client watch of tenure's watch range from `from`, as tenure
/// asks for it (without previous values, since issue 23's third round).
pub async fn bare_watch(etcd: &mut Etcd, from: i64) -> Result<WatchStream> {
    bare_watch_of(
        etcd,
        {
            let (s, e) = keys().watch_range();
            (s.into_bytes(), e.into_bytes())
        },
        from,
    )
    .await
}

/// A bare etcd-client watch of `[start, end)` from `from`.
pub async fn bare_watch_of(
    etcd: &mut Etcd,
    (start, end): (Vec<u8>, Vec<u8>),
    from: i64,
) -> Result<WatchStream> {
    let opts = WatchOptions::new()
        .with_range(end)
        .with_start_revision(from);
    let mut s = tokio::time::timeout(Duration::from_secs(10), etcd.watch(start, Some(opts)))
        .await
        .map_err(|_| anyhow!("watch not created within 10 s"))??;
    // The first response says the watch exists.
    match tokio::time::timeout(Duration::from_secs(10), s.message()).await {
        Ok(Ok(Some(r))) if r.created() => Ok(s),
        Ok(Ok(Some(_))) => bail!("first watch response is not the creation"),
        Ok(Ok(None)) => bail!("watch stream ended"),
        Ok(Err(e)) => bail!("watch: {e}"),
        Err(_) => bail!("watch creation not confirmed within 10 s"),
    }
}
