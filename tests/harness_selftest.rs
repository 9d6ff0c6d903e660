//! Tests of the etcd test harness itself (tests/support).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use etcd_client::Client;
use support::{free_port, proc_state, tenure_bin, Etcd, EtcdCluster};

async fn get_value(client: &mut Client, key: &str) -> Option<Vec<u8>> {
    let resp = tokio::time::timeout(Duration::from_secs(5), client.get(key, None))
        .await
        .expect("get timed out")
        .expect("get");
    resp.kvs().first().map(|kv| kv.value().to_vec())
}

#[test]
fn free_port_is_bindable_and_tenure_bin_exists() {
    let port = free_port();
    assert_ne!(port, 0);
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("free port should be bindable");
    assert!(tenure_bin().is_file(), "{:?} missing", tenure_bin());
}

#[tokio::test]
async fn single_etcd_put_get_stop_kill_restart() {
    let mut etcd = Etcd::start().await;
    eprintln!(
        "etcd at {} ready after {:?}",
        etcd.endpoint(),
        etcd.last_ready_after()
    );
    assert!(etcd.endpoint().starts_with("http://127.0.0.1:"));
    assert!(etcd.data_dir().join("member").is_dir(), "data dir not used");
    let pid = etcd.pid().expect("running");

    let mut client = etcd.client().await;
    client.put("harness/k", "v1", None).await.expect("put");
    assert_eq!(
        get_value(&mut client, "harness/k").await.as_deref(),
        Some(&b"v1"[..])
    );

    // SIGSTOP really freezes it; SIGCONT brings it back.
    etcd.stop();
    assert_eq!(proc_state(pid), Some('T'));
    let frozen =
        tokio::time::timeout(Duration::from_millis(500), client.get("harness/k", None)).await;
    assert!(frozen.is_err(), "a stopped etcd answered: {frozen:?}");
    etcd.cont();
    assert_ne!(proc_state(pid), Some('T'));
    assert_eq!(
        get_value(&mut client, "harness/k").await.as_deref(),
        Some(&b"v1"[..])
    );

    etcd.kill().await;
    assert_eq!(etcd.pid(), None);
    assert!(
        std::fs::metadata(format!("/proc/{pid}")).is_err(),
        "killed etcd still exists"
    );
    let down = tokio::time::timeout(Duration::from_secs(3), client.get("harness/k", None)).await;
    assert!(
        !matches!(down, Ok(Ok(_))),
        "a killed etcd answered: {down:?}"
    );

    let t0 = Instant::now();
    etcd.restart().await;
    eprintln!("restart took {:?}", t0.elapsed());
    let new_pid = etcd.pid().expect("running again");
    assert_ne!(new_pid, pid);
    let mut client = etcd.client().await;
    assert_eq!(
        get_value(&mut client, "harness/k").await.as_deref(),
        Some(&b"v1"[..]),
        "data lost across restart"
    );
    assert!(etcd.recent_logs().len() > 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_and_member_restart() {
    let t0 = Instant::now();
    let mut cluster = EtcdCluster::start().await;
    eprintln!("cluster ready after {:?}", t0.elapsed());
    let eps = cluster.endpoints();
    assert_eq!(eps.len(), 3);
    assert!(eps[0] != eps[1] && eps[1] != eps[2] && eps[0] != eps[2]);
    let ids: Vec<u64> = (0..3).map(|i| cluster.member_id(i)).collect();
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);

    let leader = cluster.leader_index().await;
    let mut all = cluster.client().await;
    all.put("harness/c", "before", None).await.expect("put");

    // Freeze the leader; the other two elect a new one and accept writes.
    cluster.stop(leader);
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let mut client = cluster.client_for(&others).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let t_stop = Instant::now();
    loop {
        let put = tokio::time::timeout(
            Duration::from_secs(2),
            client.put("harness/c", "after", None),
        )
        .await;
        match put {
            Ok(Ok(_)) => break,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "no write accepted without the stopped leader: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    eprintln!("write accepted {:?} after SIGSTOP", t_stop.elapsed());
    let new_leader = cluster.leader_index().await;
    assert_ne!(new_leader, leader, "stopped member still counted as leader");
    assert!(others.contains(&new_leader));
    cluster.cont(leader);
    assert!(!cluster.is_stopped(leader));

    // Kill the old leader and restart it; it rejoins and serves the new value.
    let victim = leader;
    let old_pid = cluster.pid(victim).expect("running");
    cluster.kill(victim).await;
    assert_eq!(cluster.pid(victim), None);
    let t_restart = Instant::now();
    cluster.restart(victim).await;
    eprintln!("member restart took {:?}", t_restart.elapsed());
    assert_ne!(cluster.pid(victim), Some(old_pid));
    let mut only_victim = cluster.client_for(&[victim]).await;
    assert_eq!(
        get_value(&mut only_victim, "harness/c").await.as_deref(),
        Some(&b"after"[..])
    );
    // Still one agreed leader among three live members.
    let l = cluster.leader_index().await;
    assert!(l < 3);
}
