//! One cluster's etcd down for a minute and back, or restored from a
//! snapshot: that cluster's recording stops and resumes (a restore resets
//! its fence row only), the other cluster's history whole all along.

use std::time::{Duration, Instant};

use tenure::election::Client;

use crate::support::postgres::Postgres;
use crate::support::{Etcd, Serve};
use crate::{
    eventually, fence, fence_row, fence_stays, gaps, history_equals_etcd, replica, writer_of, Load,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clusters_etcd_down_and_back_the_other_clusters_history_whole() {
    let (mut ea, eb) = (Etcd::start().await, Etcd::start().await);
    let pg = Postgres::start();
    let db = "down";
    let url = pg.create_database(db);
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..3 {
        replicas.push(Some(replica(&ea.endpoint(), &eb.endpoint(), &url).await));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    writer_of(&pg, db, "a", &replicas).await;
    let b_before = {
        writer_of(&pg, db, "b", &replicas).await;
        fence(&pg, db, "b").expect("b's writer")
    };
    // Only b is loaded: a's etcd goes away under its writer.
    let load_b = Load::start(&[&eb]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let watched = |c: &str| -> i64 {
        pg.psql(
            db,
            &format!("SELECT value FROM watcher_state WHERE key = 'watched_at_ms@{c}'"),
        )
        .parse()
        .unwrap_or(0)
    };
    ea.kill().await;
    let down_at = tenure::events::now_ms();
    let down = Duration::from_secs(60);
    // All along, b's writer stays and b's watched-until keeps moving.
    fence_stays(&pg, db, "b", &b_before, down).await;
    let a_last = watched("a");
    let b_last = watched("b");
    assert!(
        a_last <= down_at + 500,
        "a is not recorded as watched while down"
    );
    assert!(
        b_last > down_at + down.as_millis() as i64 - 5_000,
        "b recorded all along: {b_last} vs {down_at}"
    );
    ea.restart().await;
    let back = Instant::now();
    eventually(Duration::from_secs(30), "a recorded again", async || {
        (watched("a") > a_last).then_some(())
    })
    .await;
    println!(
        "[figure] cluster a's etcd down {} s: a recorded again {} ms after it came back; \
         a's watched-until stayed {} ms before the kill, b's went on",
        down.as_secs(),
        back.elapsed().as_millis(),
        down_at - a_last
    );
    let load_a = Load::start(&[&ea]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    load_a.stop().await;
    load_b.stop().await;
    history_equals_etcd(&pg, db, "a", &ea).await;
    let nb = history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(fence(&pg, db, "b").as_ref(), Some(&b_before));
    assert_eq!(gaps(&pg, db, "b"), 0, "b has no gap");
    // The pages of every replica say when a was not watched.
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    println!(
        "[figure] etcd a down {} s: {nb} terms of b recorded exactly once meanwhile",
        down.as_secs()
    );
}

/// Cluster a's etcd restored from a snapshot (its revisions back below
/// the writer token its fence row holds): a's writer resets a's fence row
/// (a new generation), a's history records the reset and a's token floor
/// is raised; b's fence row, writer and history are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clusters_etcd_restored_resets_its_fence_only() {
    let (mut ea, eb) = (Etcd::start().await, Etcd::start().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = dir.path().join("a.db");
    let at = ea.snapshot_save(&snapshot).await;
    {
        let mut raw = ea.client().await;
        for i in 0..100 {
            raw.put(format!("filler/{i}"), "x", None)
                .await
                .expect("put");
        }
    }
    let pg = Postgres::start();
    let db = "restored";
    let url = pg.create_database(db);
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..2 {
        replicas.push(Some(replica(&ea.endpoint(), &eb.endpoint(), &url).await));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    writer_of(&pg, db, "a", &replicas).await;
    writer_of(&pg, db, "b", &replicas).await;
    let (old_a, _) = fence(&pg, db, "a").expect("a's writer");
    assert!(
        old_a > at + 100,
        "a's writer token {old_a} above the snapshot's {at}"
    );
    let b_before = fence_row(&pg, db, "b");
    let load_b = Load::start(&[&eb]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let restored = Instant::now();
    ea.restore(&snapshot, None).await;
    let row = eventually(Duration::from_secs(40), "a's fence reset", async || {
        let row = fence_row(&pg, db, "a");
        let f: Vec<&str> = row.split('|').collect();
        (f.len() == 3 && f[2] == "1").then_some(row)
    })
    .await;
    println!(
        "[figure] cluster a's etcd restored to revision {at}: a's fence row reset to {row} \
         {} ms after the restore; b's row {b_before} unchanged",
        restored.elapsed().as_millis()
    );
    let token: i64 = row
        .split('|')
        .next()
        .expect("token")
        .parse()
        .expect("token");
    assert!(
        token < old_a,
        "a's new timeline's token {token} below {old_a}"
    );
    fence_stays(
        &pg,
        db,
        "b",
        &fence(&pg, db, "b").expect("b"),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(fence_row(&pg, db, "b"), b_before, "b's fence row untouched");
    // a's history has its reset, b's none.
    let resets = |c: &str| -> String {
        pg.psql(
            db,
            &format!("SELECT COUNT(*) FROM events WHERE election = '{c}/' AND type = 'reset'"),
        )
    };
    eventually(Duration::from_secs(20), "a's reset recorded", async || {
        (resets("a") == "1").then_some(())
    })
    .await;
    assert_eq!(resets("b"), "0");
    // a's token floor is raised (tenure's, in a's etcd); b's is not.
    let ca = Client::connect(&[ea.endpoint()], "")
        .await
        .expect("connect");
    let cb = Client::connect(&[eb.endpoint()], "")
        .await
        .expect("connect");
    let floor = eventually(Duration::from_secs(20), "a's floor", async || {
        ca.floor().await.ok().flatten()
    })
    .await;
    assert!(floor >= old_a, "a's floor {floor} covers its old timeline");
    assert_eq!(
        cb.floor().await.expect("floor"),
        None,
        "b's floor untouched"
    );
    load_b.stop().await;
    let nb = history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(fence_row(&pg, db, "b"), b_before);
    println!("[figure] restore of a: {nb} terms of b recorded exactly once meanwhile");
}
