//! A Kubernetes Lease is called lapsed only by a watch that could have seen
//! a write: not while etcd is frozen, once it answers again.

use std::time::Duration;

use crate::support::{kube, Etcd, Serve};
use crate::WAIT;

/// A Lease is called lapsed only by a watch that was there to see a write:
/// while etcd is frozen (the watch silent, then reopening), a Lease renewed
/// until then, whose 2 s have long run out, is not counted lapsed; once
/// etcd answers again and shows that nothing was written, it is.
#[tokio::test]
async fn a_lease_is_called_lapsed_only_by_a_watch_that_could_see_a_write() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let args = ["--sources-only", "--source", "kubernetes:/registry/"];
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;
    // Its holder renews every 500 ms while etcd answers.
    let renewer = kube::JsonRenewer::start(&etcd).await;
    kube::renewing_read(&serve).await;
    // Its holder stops with etcd: nothing is written while it is frozen.
    renewer.stop().await;
    etcd.stop();
    let mut seen = Vec::new();
    for _ in 0..24 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        seen.push(serve.metric("tenure_leases_lapsed").await);
    }
    etcd.cont();
    assert!(
        seen.iter().all(|v| *v == Some(0.0)),
        "called lapsed while the watch could not see: {seen:?}"
    );
    // etcd answers again: nothing was written, so it lapsed.
    let series = format!(
        "tenure_election_lease_lapsed{{election=\"{}\"}}",
        kube::RENEWED
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while serve.metric(&series).await != Some(1.0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never lapsed once watched"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(serve.stop().await, Some(0));
}
