use std::time::{Duration, Instant};

use crate::actors::*;
use crate::common::*;
use crate::oracle::*;
use etcd_client::Client as EtcdClient;

// ---------------------------------------------------------------------------
// 5. The etcd leader partitioned with iptables in a network namespace: the
//    watch moves to the majority, the history is unchanged.
// ---------------------------------------------------------------------------

/// The member every answering member of `among` names as leader.
async fn leader_among(
    cluster: &crate::support::netns::NsCluster,
    among: &[usize],
    within: Duration,
) -> Option<usize> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let mut views = Vec::new();
        for &i in among {
            let opts = etcd_client::ConnectOptions::new()
                .with_connect_timeout(Duration::from_millis(300))
                .with_timeout(Duration::from_millis(500));
            if let Ok(mut c) = EtcdClient::connect([cluster.endpoint(i)], Some(opts)).await {
                if let Ok(Ok(s)) =
                    tokio::time::timeout(Duration::from_millis(800), c.status()).await
                {
                    views.push((
                        i,
                        s.header().map(|h| h.member_id()).unwrap_or(0),
                        s.leader(),
                    ));
                }
            }
        }
        if views.len() == among.len() {
            let l = views[0].2;
            if l != 0 && views.iter().all(|v| v.2 == l) {
                if let Some(v) = views.iter().find(|v| v.1 == l) {
                    return Some(v.0);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

async fn partition_in_netns(scenario: &'static str, rounds: usize) {
    let cluster = crate::support::netns::NsCluster::start(3).await;
    let eps = cluster.endpoints();
    let mut raw = raw_client(&eps).await;
    // Every term below starts after the watcher's first snapshot.
    let (serve, db, start_rev, _dir) = record(&eps, &mut raw).await;
    let client = tenure_client(&eps).await;
    let churn = Churn::start(&client, "partition", 3, Duration::from_millis(50));
    let mut results = Vec::new();
    for _ in 0..rounds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let leader = cluster.leader_index().await;
        let majority: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
        cluster.partition(leader);
        let cut = Instant::now();
        let new_leader = leader_among(&cluster, &majority, Duration::from_secs(30))
            .await
            .expect("the majority elects a leader");
        let elected = cut.elapsed();
        // A revision the majority certainly writes after the cut (and
        // after its election), and when tenure has processed it.
        let mut maj = raw_client(
            &majority
                .iter()
                .map(|&i| cluster.endpoint(i))
                .collect::<Vec<_>>(),
        )
        .await;
        watch_reaches_a_later_revision(
            &serve,
            &mut maj,
            (cut, Duration::from_secs(60)),
            Duration::from_millis(20),
            "the watch never moved to the majority",
        )
        .await;
        let moved = cut.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.heal(leader);
        results.push((leader, new_leader, elected, moved));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tally = churn.stop().await;
    let head = head_revision(&mut raw).await;
    serve.caught_up(head).await;
    let m = serve.metrics().await;
    assert_eq!(serve.stop().await, Some(0));
    let v = verify_history(&mut raw, &db, start_rev, &|_| None, 0, false).await;
    for (leader, new_leader, elected, moved) in &results {
        figure(
            scenario,
            format!(
                "etcd leader m{leader} (127.0.0.{}) cut off by iptables: majority elected m{new_leader} after \
                 {} ms; tenure processed the majority's writes {} ms after the cut",
                leader + 1,
                elected.as_millis(),
                moved.as_millis()
            ),
        );
    }
    figure(scenario, format!("churn: {}", tally.summary()));
    restarts_figure(scenario, &m, &["stream_error", "stalled", "cancelled"]);
    figure(scenario, v.summary());
    v.assert_none(scenario);
}

#[test]
#[ignore = "needs root, iptables, iproute2, util-linux: cargo test --test faults -- --ignored --nocapture"]
fn s05_full_etcd_leader_partitioned_watch_moves_history_unchanged() {
    crate::support::netns::require("scenario 5 (partition)", crate::support::netns::TOOLS);
    crate::support::netns::in_netns(|| partition_in_netns("5 etcd leader partitioned", 3));
}
