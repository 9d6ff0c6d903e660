//! Beside the scenario, what the API's sizes and connections may do: a
//! tenant's huge Leases beside another namespace's, a hung watch, 100 Leases
//! per etcd transaction.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::kube::{self, KubeApiserver, LeaseLog, Recorded};
use crate::support::{Etcd, Serve};
use crate::{gaps, reader, KEY, NAME};

/// A tenant who may create Leases in one namespace (`default`) writes 55
/// of them, each held by a 1.3 MB holderIdentity (kube-apiserver accepts
/// it; etcd's default request limit is 1.5 MiB): one list of them all
/// passes 64 MiB. A controller renews its Lease in another namespace
/// (`kube-system/kcm`) throughout. `serve --kubeconfig` loads anyway,
/// records the controller's term and is ready; the tenant's Leases are
/// read one at a time, their holders cut as from etcd (256 bytes, `…`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_huge_leases_never_blind_the_record_of_another_namespace() {
    if !kube::available() {
        return;
    }
    let began = Instant::now();
    let etcd = Etcd::start().await;
    let api = KubeApiserver::start(&etcd.endpoint()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = reader(&api, dir.path()).await;
    api.create_big_leases("default", 55, 1_300_000).await;
    // And one the layout cannot read (a time before 1970): named, counted.
    let old = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"old","namespace":"default"},"spec":{"holderIdentity":"o","acquireTime":"1969-12-31T23:59:59.000000Z"}}"#;
    let path = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let (status, body) = api.curl("POST", path, Some(old)).await;
    assert_eq!(status, 201, "{body}");
    let renewer = kube::JsonRenewer::start(&etcd).await;
    eprintln!("55 Leases of 1.3 MB written after {:?}", began.elapsed());
    let args = ["--kubeconfig", kubeconfig.as_str()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    serve.ready().await;
    let loaded = began.elapsed();
    kube::renewing_read(&serve).await;
    let terms = kube::recorded(&serve, kube::RENEWED).await;
    assert!(
        matches!(terms.as_slice(), [(holder, _, None, None)] if holder == kube::RENEWER),
        "{terms:?}\n{}",
        serve.log_text()
    );
    // The tenant's own Leases are recorded too, their holders cut.
    let big = kube::recorded(&serve, "default/big-7").await;
    let cut = format!("{}…", "h".repeat(256));
    assert!(
        matches!(big.as_slice(), [(holder, _, None, None)] if *holder == cut),
        "{:?}",
        big.iter().map(|t| t.0.len()).collect::<Vec<_>>()
    );
    let said = "/registry/leases/default/old: a Lease whose spec cannot be read";
    assert!(serve.log_text().contains(said), "{}", serve.log_text());
    let ignored = serve.metric("tenure_watch_ignored_keys_total").await;
    assert!(ignored >= Some(1.0), "{ignored:?}");
    assert_eq!(kube::recorded(&serve, "default/old").await, []);
    renewer.stop().await;
    serve.stop().await;
    eprintln!(
        "ready after {loaded:?}, the test took {:?}",
        began.elapsed()
    );
}

/// The API serve reads through a TCP proxy whose open connections then
/// stop forwarding (half-open: nothing closes, nothing arrives), and the
/// leader releases the Lease to the other candidate. The watch's silence
/// is noticed (a live one bookmarks or ends within 10 s), /readyz says so
/// meanwhile, and a new watch on a new connection records the handover
/// within 20 s, not as a gap (kube-apiserver still has the revisions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_watch_is_noticed_and_the_handover_recorded_within_20_s() {
    if !kube::available() {
        return;
    }
    let etcd = Etcd::start().await;
    let log = LeaseLog::start(etcd.client().await, KEY).await;
    let api = KubeApiserver::start(&etcd.endpoint()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = reader(&api, dir.path()).await;
    let target = format!("127.0.0.1:{}", api.port).parse().unwrap();
    let proxy = crate::support::proxy::Proxy::start(target).await;
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let through = text.replace(
        &format!("https://127.0.0.1:{}", api.port),
        &format!("https://{}", proxy.addr),
    );
    std::fs::write(&kubeconfig, through).unwrap();
    let mut cs = kube::candidates(&api, "default", "demo", &["a", "b"]);
    let long = Duration::from_secs(30);
    let first = log
        .wait_for("a holder", long, |w| !w.deleted && !w.holder.is_empty())
        .await;
    let args = ["--kubeconfig", kubeconfig.as_str()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    serve.ready().await;
    let one = settled_count(&serve, 1).await;
    assert_eq!(one[0].0, first.holder);

    let blackholed = proxy.blackhole_existing();
    assert!(blackholed >= 1, "no connection to blackhole");
    let released = Instant::now();
    kube::by_id(&mut cs, &first.holder).signal(Signal::SIGTERM);
    let watcher = {
        let url = serve.url("/readyz");
        tokio::spawn(async move {
            // Until it was not ready and is ready again, 30 s at most.
            let mut not_ready = 0;
            while released.elapsed() < Duration::from_secs(30) {
                if let Ok(r) = reqwest::get(&url).await {
                    match r.status().as_u16() {
                        503 => not_ready += 1,
                        200 if not_ready > 0 => break,
                        _ => {}
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            not_ready
        })
    };
    let two = settled_count(&serve, 2).await;
    let took = released.elapsed();
    assert!(
        two[0].3.as_deref() == Some("resigned") && two[1].0 != first.holder,
        "{two:?}\n{}",
        log.timeline()
    );
    assert!(took < Duration::from_secs(20), "the handover took {took:?}");
    assert_eq!(gaps(&serve).await, [], "{}", serve.log_text());
    // Noticed: the watch's silence, or (the connection went dead while a
    // watch was being opened) the answer that never came.
    let text = serve.log_text();
    assert!(
        text.contains("said nothing for 12 s") || text.contains("did not answer within 10s"),
        "{text}"
    );
    // /readyz said it, then ready again (polled 30 s at most).
    let not_ready = watcher.await.unwrap();
    assert!(not_ready > 0, "/readyz never said the watch stalled");
    serve.ready().await;
    eprintln!(
        "handover recorded {took:?} after the release; /readyz 503 for ~{} ms",
        not_ready * 50
    );
    serve.stop().await;
    drop(cs);
    drop(proxy);
}

/// Waits (25 s at most) until `serve` recorded `n` terms of the Lease, the
/// first `n - 1` ended; what it recorded.
async fn settled_count(serve: &Serve, n: usize) -> Vec<Recorded> {
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let got = kube::recorded(serve, NAME).await;
        let ended = got.iter().take(n - 1).all(|t| t.2.is_some());
        if (got.len() >= n && ended) || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Leases written 100 to an etcd transaction, straight into
/// kube-apiserver's etcd (JSON values, as `kube::JsonRenewer` writes):
/// every object of a revision reaches the API serve's record, though the
/// watch gives them one by one and the history takes one batch per
/// revision (80 of 8,000 were lost when a batch ended within a revision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lease_of_one_revision_is_recorded() {
    use etcd_client::{Txn, TxnOp};
    if !kube::available() {
        return;
    }
    let etcd = Etcd::start().await;
    let api = KubeApiserver::start(&etcd.endpoint()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = reader(&api, dir.path()).await;
    let args = ["--kubeconfig", kubeconfig.as_str()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    serve.ready().await;
    let (txns, per) = (60, 100);
    let mut raw = etcd.client().await;
    let now = kube::micro_time(kube::unix_us());
    for t in 0..txns {
        let ops: Vec<TxnOp> = (0..per)
            .map(|i| {
                let lease = serde_json::json!({
                    "kind": "Lease",
                    "apiVersion": "coordination.k8s.io/v1",
                    "metadata": {"name": format!("l-{t}-{i}"), "namespace": "batch"},
                    "spec": {"holderIdentity": format!("h{i}"), "leaseDurationSeconds": 3600,
                             "acquireTime": now, "renewTime": now}
                });
                let key = format!("/registry/leases/batch/l-{t}-{i}");
                TxnOp::put(key, lease.to_string(), None)
            })
            .collect();
        raw.txn(Txn::new().and_then(ops)).await.expect("txn");
    }
    let want = f64::from(txns * per);
    let written = Instant::now();
    let deadline = written + Duration::from_secs(60);
    let mut got = None;
    while Instant::now() < deadline {
        got = serve.metric("tenure_watch_elections").await;
        if got == Some(want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(got, Some(want), "{}", serve.log_text());
    eprintln!(
        "{want} Leases of {txns} revisions recorded {:?} after the last write",
        written.elapsed()
    );
    // And each as a term, in the history.
    for (t, i) in [(0, 0), (txns / 2, per - 1), (txns - 1, per / 2)] {
        let name = format!("batch/l-{t}-{i}");
        let terms = kube::recorded(&serve, &name).await;
        assert!(
            matches!(terms.as_slice(), [(h, _, None, None)] if *h == format!("h{i}")),
            "{name}: {terms:?}"
        );
    }
    serve.stop().await;
}
