//! Issue 22 live: a whole holder frozen past its TTL while a waiter takes
//! over, then resumed: its command acts on into the next term. A real
//! Prometheus scraping `tenure serve` fires `TenureLeadersOverlapped` and
//! `TenureActingMarginThin` (the rules as shipped, minutes read as seconds).

use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::read;
use crate::rules::fast_rules;
use crate::server::{await_alerts, Expected, Prometheus};
use crate::support::holder::{dead_at, live_members, Holder, KeyLog};
use crate::support::{Etcd, Serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_acting_into_the_next_term_fires_the_overlap_alerts() {
    let rules = fast_rules(&read("grafana/alerts.yaml"));
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = Serve::start(&[etcd.endpoint()], &dir.path().join("h.db"), &[], &[]).await;
    serve.ready().await;
    let prom = Prometheus::start(&[&serve.addr], &rules).await;
    prom.await_series(r#"tenure_overlap_seconds_total{job="tenure"} == 0"#)
        .await;
    let h = Holder::start(&etcd.endpoint(), "paused", dir.path(), &["--ttl", "2"]).await;
    let keylog = KeyLog::start(etcd.client().await, "election/paused").await;
    killpg(Pid::from_raw(h.pgid), Signal::SIGSTOP).expect("SIGSTOP group");
    kill(h.tenure_pid(), Signal::SIGSTOP).expect("SIGSTOP tenure");
    let dir2 = tempfile::tempdir().expect("tempdir");
    let mut next = Holder::start(
        &etcd.endpoint(),
        "paused",
        dir2.path(),
        &["--ttl", "4", "--wait"],
    )
    .await;
    keylog.created_after(h.token, Duration::from_secs(10)).await;
    // The command resumes first and acts into the next term; then its
    // guard and tenure end it.
    for pid in live_members(h.pgid).into_iter().filter(|p| *p != h.pgid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    kill(h.tenure_pid(), Signal::SIGCONT).expect("SIGCONT tenure");
    killpg(Pid::from_raw(h.pgid), Signal::SIGCONT).expect("SIGCONT group");
    dead_at(h.pgid, Duration::from_secs(5)).await;
    let instance = serve.addr.clone();
    let mut expected = [
        Expected::new("TenureLeadersOverlapped", &[("instance", &instance)]),
        Expected::new("TenureActingMarginThin", &[("instance", &instance)]),
    ];
    await_alerts(&prom, &mut expected, &[]).await;
    let _ = next.child.start_kill();
}
