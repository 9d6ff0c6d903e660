//! A Lease renewed by the test itself, JSON values written straight into
//! etcd as kube-apiserver writes them, and the wait for serve to read its
//! renewals live.

use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use super::{Etcd, Serve};

/// The election a [`JsonRenewer`]'s Lease is (kube-system's `kcm`).
pub const RENEWED: &str = "kube-system/kcm";

/// The holder a [`JsonRenewer`] writes: client-go's `hostname_uuid`, as
/// kube-controller-manager's pod `kcm-0` would.
pub const RENEWER: &str = "kcm-0_4e3a3c38-5d6a-4b8f-9f2a-0123456789ab";

/// The `leaseTransitions` a [`JsonRenewer`] writes.
pub const RENEWER_TRANSITIONS: i64 = 3;

/// A holder ([`RENEWER`]) renewing a Lease written straight into etcd as
/// JSON, with client-go's cadence: every 500 ms, a 2 s lease, until
/// stopped.
pub struct JsonRenewer {
    renewing: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl JsonRenewer {
    pub async fn start(etcd: &Etcd) -> Self {
        use std::sync::atomic::Ordering;
        let renewing = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (mut raw, on) = (etcd.client().await, renewing.clone());
        let task = tokio::spawn(async move {
            let t = |ms: i64| {
                let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).expect("time"));
                humantime::format_rfc3339_micros(at).to_string()
            };
            let acquired = tenure::events::now_ms();
            while on.load(Ordering::SeqCst) {
                let lease = serde_json::json!({
                    "kind": "Lease",
                    "apiVersion": "coordination.k8s.io/v1",
                    "metadata": {"name": "kcm", "namespace": "kube-system"},
                    "spec": {"holderIdentity": RENEWER, "leaseDurationSeconds": 2,
                             "acquireTime": t(acquired), "renewTime": t(tenure::events::now_ms()),
                             "leaseTransitions": RENEWER_TRANSITIONS}
                });
                raw.put("/registry/leases/kube-system/kcm", lease.to_string(), None)
                    .await
                    .expect("renew the Lease");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Self { renewing, task }
    }

    /// Stops renewing; returns once the last renewal was written.
    pub async fn stop(self) {
        self.renewing
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.task.await.expect("renewer");
    }
}

/// Waits until `serve`'s watcher gave its word on the renewed Lease: its
/// `tenure_election_lease_lapsed` series reads 0 (renewing, not lapsed).
pub async fn renewing_read(serve: &Serve) {
    let series = format!("tenure_election_lease_lapsed{{election=\"{RENEWED}\"}}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while serve.metric(&series).await != Some(0.0) {
        assert!(
            Instant::now() < deadline,
            "the Lease never read: {}",
            serve.metrics().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
