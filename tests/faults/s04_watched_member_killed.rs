use std::time::{Duration, Instant};

use crate::actors::*;
use crate::common::*;
use crate::oracle::*;
use crate::support::prom::etcd_watchers;
use crate::support::EtcdCluster;

// ---------------------------------------------------------------------------
// 4. The member tenure watches is killed (kill -9) and restarted.
// ---------------------------------------------------------------------------

/// The member serving tenure's watch: the only one with a watcher.
async fn watched_member(cluster: &EtcdCluster, down: &[usize]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut with = Vec::new();
        for i in (0..cluster.len()).filter(|i| !down.contains(i)) {
            if etcd_watchers(&cluster.endpoint(i)).await.unwrap_or(0.0) >= 1.0 {
                with.push(i);
            }
        }
        if with.len() == 1 {
            return with[0];
        }
        assert!(
            Instant::now() < deadline,
            "cannot tell which member tenure watches: {with:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn watched_member_killed(scenario: &str, rounds: usize) {
    let mut cluster = EtcdCluster::start().await;
    let eps = cluster.endpoints();
    let mut raw = cluster.client().await;
    // Every term below starts after the watcher's first snapshot.
    let (serve, db, start_rev, _dir) = record(&eps, &mut raw).await;
    let client = tenure_client(&eps).await;
    let churn = Churn::start(&client, "member", 3, Duration::from_millis(20));
    let mut reconnects = Vec::new();
    for _ in 0..rounds {
        let victim = watched_member(&cluster, &[]).await;
        cluster.kill(victim).await;
        let killed = Instant::now();
        // A revision certainly written after the kill, through the others.
        let mut others = cluster
            .client_for(&(0..3).filter(|&i| i != victim).collect::<Vec<_>>())
            .await;
        watch_reaches_a_later_revision(
            &serve,
            &mut others,
            (killed, Duration::from_secs(30)),
            Duration::from_millis(10),
            "the watch never came back",
        )
        .await;
        let reconnect = killed.elapsed();
        let moved_to = watched_member(&cluster, &[victim]).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.restart(victim).await;
        reconnects.push((victim, moved_to, reconnect));
    }
    let tally = churn.stop().await;
    let head = head_revision(&mut raw).await;
    serve.caught_up(head).await;
    let m = serve.metrics().await;
    assert_eq!(serve.stop().await, Some(0));
    let v = verify_history(&mut raw, &db, start_rev, &|_| None, 0, false).await;
    for (victim, moved_to, took) in &reconnects {
        figure(
            scenario,
            format!(
                "watched member m{victim} killed with SIGKILL: watch moved to m{moved_to}, first \
                 post-kill revision processed {} ms after the kill",
                took.as_millis()
            ),
        );
    }
    figure(scenario, format!("churn: {}", tally.summary()));
    restarts_figure(scenario, &m, &["stream_error", "stalled", "compacted"]);
    figure(scenario, v.summary());
    v.assert_none(scenario);
    for (_, _, took) in &reconnects {
        assert!(*took < Duration::from_secs(12), "reconnect took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s04_watched_member_killed_and_restarted_nothing_missed() {
    watched_member_killed("4 watched member killed", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full run (6 kills): cargo test --test faults -- --ignored --nocapture"]
async fn s04_full_watched_member_killed_6_rounds() {
    watched_member_killed("4 watched member killed (full)", 6).await;
}
