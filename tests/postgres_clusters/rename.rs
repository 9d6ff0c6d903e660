//! A history written without `--cluster` named: it becomes the cluster's
//! whose etcd it recorded (refused, and left as it was, for clusters none of
//! which is that etcd), and a replica still running unnamed writes nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use tenure::election::Client;

use crate::support::postgres::Postgres;
use crate::support::{Etcd, Serve};
use crate::{eventually, fence, fence_row, refused, revision};

/// A history written without `--cluster` becomes the named cluster's whose
/// etcd it recorded; served with clusters none of which is that etcd, it
/// is refused and left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_cluster_history_becomes_the_named_clusters_whose_etcd_it_recorded() {
    let (ea, eb, ec) = (
        Etcd::start().await,
        Etcd::start().await,
        Etcd::start().await,
    );
    let pg = Postgres::start();
    let db = "named";
    let url = pg.create_database(db);
    // Its poller records etcd's leader: a cluster event with a dedupe key.
    let one = Serve::start(
        &[ea.endpoint()],
        Path::new(&url),
        &["--writer-ttl", "2s", "--cluster-poll", "500ms"],
        &[],
    )
    .await;
    one.ready().await;
    // Its writer has loaded etcd's snapshot: what follows is recorded as it
    // happens.
    eventually(
        Duration::from_secs(30),
        "the writer's first commit",
        async || {
            let r = pg.psql(
                db,
                "SELECT COUNT(*) FROM watcher_state WHERE key = 'resume_revision'",
            );
            (r == "1").then_some(())
        },
    )
    .await;
    let c = Client::connect(&[ea.endpoint()], "")
        .await
        .expect("connect");
    let l = crate::support::fixtures::lead(&c, "load-0", "before", 30).await;
    l.resign().await.expect("resign");
    let upto = revision(&ea).await;
    eventually(Duration::from_secs(30), "recorded", async || {
        let r: i64 = pg
            .psql(
                db,
                "SELECT value FROM watcher_state WHERE key = 'resume_revision'",
            )
            .parse()
            .ok()?;
        (r >= upto).then_some(())
    })
    .await;
    let deduped = "SELECT COUNT(*) FROM cluster_events WHERE dedupe IS NOT NULL";
    eventually(
        Duration::from_secs(30),
        "etcd's leader recorded",
        async || (pg.psql(db, deduped) != "0").then_some(()),
    )
    .await;
    assert_eq!(one.stop().await, Some(0));
    let token_before = fence(&pg, db, "").expect("the unnamed cluster's writer").0;

    // b and c: neither is the etcd it recorded.
    let (b, cc) = (
        format!("b={}", eb.endpoint()),
        format!("c={}", ec.endpoint()),
    );
    let out = refused(&url, &["--cluster", &b, "--cluster", &cc]).await;
    assert!(
        out.contains("records one etcd cluster") && out.contains("0 of the configured clusters"),
        "{out}"
    );
    assert_eq!(
        fence(&pg, db, "").map(|f| f.0),
        Some(token_before),
        "left as it was"
    );

    let a = format!("a={}", ea.endpoint());
    let s = Serve::start(
        &[ea.endpoint()],
        Path::new(&url),
        &[
            "--cluster",
            &a,
            "--cluster",
            &b,
            "--writer-ttl",
            "2s",
            "--cluster-poll",
            "0",
        ],
        &[],
    )
    .await;
    s.ready().await;
    // It is a's now: its rows, its state, its fence row (tokens go on).
    let rows = pg.psql(
        db,
        "SELECT COUNT(*) FROM terms WHERE election NOT LIKE 'a/%' AND election NOT LIKE 'b/%'",
    );
    assert_eq!(rows, "0", "every term named under a");
    let holder = "before";
    let got = pg.psql(
        db,
        &format!("SELECT COUNT(*) FROM terms WHERE election = 'a/load-0' AND holder = '{holder}'"),
    );
    assert_eq!(
        got,
        "1",
        "{}",
        pg.psql(db, "SELECT election, epoch, token, holder FROM terms")
    );
    let keys = pg.psql(
        db,
        "SELECT key FROM watcher_state WHERE key LIKE 'resume_revision%' ORDER BY key",
    );
    assert!(keys.lines().any(|k| k == "resume_revision@a"), "{keys}");
    // etcd's own events are a's too, their dedupe keys as a's watcher
    // writes them (`a@…`), so a fact seen again is not stored twice (b's
    // are its own: `b@…`).
    let unnamed = pg.psql(
        db,
        "SELECT dedupe FROM cluster_events WHERE dedupe IS NOT NULL \
         AND dedupe NOT LIKE 'a@%' AND dedupe NOT LIKE 'b@%'",
    );
    assert_eq!(unnamed, "", "dedupe keys not a's");
    assert!(!keys.lines().any(|k| k == "resume_revision"), "{keys}");
    let (token_a, _) = eventually(Duration::from_secs(30), "a written", async || {
        fence(&pg, db, "a")
    })
    .await;
    assert!(token_a >= token_before, "{token_a} after {token_before}");
    assert_eq!(fence(&pg, db, ""), None, "no unnamed fence row any more");
    // And its page reads it back under its name.
    let r = reqwest::get(s.url("/api/v1/elections/a%2Fload-0/terms"))
        .await
        .expect("GET");
    assert!(r.status().is_success(), "{}", r.status());
    let body: serde_json::Value = r.json().await.expect("JSON");
    assert_eq!(body["terms"].as_array().expect("terms").len(), 1, "{body}");
    assert_eq!(s.stop().await, Some(0));
}

/// A replica still running without `--cluster` when another one names its
/// history's cluster can no longer write it: no unnamed row appears after
/// the rename (the unnamed fence row is left with a generation no writer
/// claims), its /readyz says it is not ready, and once it stops, the named
/// cluster's writer records what happened meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_left_without_cluster_after_the_rename_writes_nothing() {
    let ea = Etcd::start().await;
    let pg = Postgres::start();
    let db = "renamed";
    let url = pg.create_database(db);
    let args = ["--writer-ttl", "2s", "--cluster-poll", "0"];
    let one = Serve::start(&[ea.endpoint()], Path::new(&url), &args, &[]).await;
    one.ready().await;
    let committed = "SELECT COUNT(*) FROM watcher_state WHERE key = 'resume_revision'";
    eventually(Duration::from_secs(30), "one's first commit", async || {
        (pg.psql(db, committed) == "1").then_some(())
    })
    .await;
    let a = format!("a={}", ea.endpoint());
    let named = [&["--cluster", a.as_str()][..], &args[..]].concat();
    let s = Serve::start(&[ea.endpoint()], Path::new(&url), &named, &[]).await;
    eventually(Duration::from_secs(30), "the rename", async || {
        let renamed = "SELECT COUNT(*) FROM watcher_state WHERE key = 'resume_revision@a'";
        (pg.psql(db, renamed) == "1").then_some(())
    })
    .await;
    // A term in a while `one` still holds a's writer term in etcd.
    let c = Client::connect(&[ea.endpoint()], "")
        .await
        .expect("connect");
    let l = crate::support::fixtures::lead(&c, "during", "meanwhile", 30).await;
    l.resign().await.expect("resign");
    // The unnamed replica tried to record it, and was refused.
    eventually(
        Duration::from_secs(30),
        "one's commit refused",
        async || {
            let refused = one.metric("tenure_history_commits_refused_total").await?;
            (refused >= 1.0).then_some(())
        },
    )
    .await;
    let unnamed = "SELECT COUNT(*) FROM terms WHERE election NOT LIKE 'a/%'";
    assert_eq!(pg.psql(db, unnamed), "0", "an unnamed row after the rename");
    assert!(
        fence_row(&pg, db, "").ends_with("|-1"),
        "{}",
        fence_row(&pg, db, "")
    );
    // Its /readyz says why it records nothing (within the recording
    // poll's takeover allowance).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, ready) = loop {
        let r = reqwest::get(one.url("/readyz")).await.expect("GET /readyz");
        let status = r.status().as_u16();
        let ready = r.text().await.expect("text");
        if status == 503 || Instant::now() > deadline {
            break (status, ready);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status, 503, "{ready}\n{}", one.log_text());
    eprintln!("the unnamed replica's /readyz: {ready}");
    // Once it stops, a's writer takes over and records the term.
    let code = one.stop().await;
    eprintln!("the unnamed replica exited with {code:?}");
    eventually(Duration::from_secs(30), "a/during recorded", async || {
        let during = "SELECT COUNT(*) FROM terms WHERE election = 'a/during'";
        (pg.psql(db, during) == "1").then_some(())
    })
    .await;
    assert_eq!(pg.psql(db, unnamed), "0");
    assert_eq!(s.stop().await, Some(0));
}
