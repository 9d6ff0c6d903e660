//! The shared history's writer fence across an etcd that starts over (a
//! restore from a snapshot, or a new cluster on the same endpoints): its
//! revisions, and so the writer tokens, fall below the token the fence
//! holds. The next writer resets the fence by itself (it sees etcd's
//! revision below the stored token, which no token of one etcd timeline can
//! be), records the new timeline, and a writer of the old timeline stays
//! refused whatever its token.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::postgres::{revision_at, Postgres};
use support::{Etcd, Serve};
use tenure::election::KeyLayout;
use tenure::events::{Batch, Event, EventKind};
use tenure::history::Store;

async fn until(what: &str, within: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn started(revision: i64, election: &str, token: i64) -> Batch {
    Batch {
        revision,
        events: vec![Event {
            revision,
            at_ms: tenure::events::now_ms(),
            election: election.into(),
            kind: EventKind::TermStarted {
                token,
                holder: "stale".into(),
                lease_id: 1,
                layout: KeyLayout::Single,
                previous_holder: None,
                from_snapshot: false,
            },
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_etcd_timeline_resets_the_writer_fence_and_the_old_timeline_stays_refused() {
    let pg = Postgres::start();
    let url = pg.create_database("restore");
    let db = Path::new(&url);
    let args = ["--writer-ttl", "2s"];

    // The first timeline: revisions well past what the second will reach.
    let old = Etcd::start().await;
    {
        let mut c = old.client().await;
        for i in 0..200 {
            c.put(format!("filler/{i}"), "x", None).await.expect("put");
        }
    }
    let first = Serve::start(&[old.endpoint()], db, &args, &[]).await;
    first.ready().await;
    until("the first writer", Duration::from_secs(20), async || {
        first.metric("tenure_history_writer").await == Some(1.0)
    })
    .await;
    let stored: i64 = pg
        .psql("restore", "SELECT token FROM history_writer")
        .parse()
        .expect("token");
    assert!(stored > 200, "the first writer's token {stored}");
    first.crash().await;

    // A writer of the old timeline that won after it, still alive
    // somewhere (paused): it claims with a higher token, and has not
    // written yet.
    let stale_url = url.clone();
    let stale = tokio::task::spawn_blocking(move || {
        Store::open_postgres(
            &stale_url,
            Duration::ZERO,
            stored + 5,
            "stale",
            revision_at(stored + 5),
        )
    })
    .await
    .expect("join")
    .expect("the stale writer claims the fence");

    // etcd starts over: a new cluster on new endpoints, adopted by the
    // operator (a restore looks the same to the fence: revisions below the
    // stored token).
    let new = Etcd::start().await;
    let new_id = new
        .client()
        .await
        .get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .cluster_id();
    // Another etcd cluster id than the history recorded: refused, the
    // fence row untouched, until the operator adopts it (issue 43.1).
    let row = pg.psql("restore", "SELECT token, generation FROM history_writer");
    let out = tokio::process::Command::new(support::tenure_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--db", &url])
        .args(args)
        .env("TENURE_ENDPOINTS", new.endpoint())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--adopt-etcd"),
        "{err}"
    );
    assert_eq!(
        pg.psql("restore", "SELECT token, generation FROM history_writer"),
        row,
        "the refused serve claimed nothing"
    );
    let adopt = format!("{new_id:x}");
    let second = Serve::start(
        &[new.endpoint()],
        db,
        &["--writer-ttl", "2s", "--adopt-etcd", &adopt],
        &[],
    )
    .await;
    second.ready().await;
    let took = Instant::now();
    until(
        "the second timeline's writer",
        Duration::from_secs(20),
        async || second.metric("tenure_history_writer").await == Some(1.0),
    )
    .await;
    println!(
        "[figure] writer of the new etcd timeline writing {} ms after its serve was ready",
        took.elapsed().as_millis()
    );
    let row = pg.psql("restore", "SELECT token, generation FROM history_writer");
    let (token, generation) = row.split_once('|').expect("token|generation");
    let token: i64 = token.parse().expect("token");
    assert!(
        token < stored,
        "the fence holds the new timeline's token: {row}"
    );
    assert_eq!(generation, "1", "a new generation: {row}");
    let logs = second.log_text();
    assert!(
        logs.contains("etcd was restored from a snapshot or replaced"),
        "{logs}"
    );

    // The new timeline is recorded.
    let c = tenure::election::Client::connect(&[new.endpoint()], "")
        .await
        .expect("connect");
    // The new etcd's revisions repeat the old one's: serve raised tenure's
    // token floor (issue 20.1), so a campaign is refused until etcd's
    // revision has passed it (an operator restores with --bump-revision).
    let deadline = Instant::now() + Duration::from_secs(20);
    let floor = loop {
        if let Some(f) = c.floor().await.expect("floor") {
            break f;
        }
        assert!(Instant::now() < deadline, "no token floor raised");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(floor >= stored, "the floor {floor} covers the old timeline");
    let opts = tenure::election::CampaignOptions::new(support::fixtures::ttl(10));
    let mut raw = new.client().await;
    let l = loop {
        match c
            .campaign(&support::fixtures::name("after-restore"), "b", &opts)
            .await
        {
            Ok(tenure::election::Campaigned::Leader(l)) => break l,
            Err(tenure::election::Error::BelowFloor { .. }) => {
                raw.put("filler", "x", None).await.expect("put");
            }
            Ok(tenure::election::Campaigned::Held(h)) => panic!("held by {h:?}"),
            Err(e) => panic!("{e}"),
        }
    };
    assert!(l.token() > floor);
    second.caught_up(l.token()).await;
    until(
        "the new term recorded",
        Duration::from_secs(20),
        async || {
            pg.psql(
                "restore",
                "SELECT count(*) FROM terms WHERE election = 'after-restore'",
            ) == "1"
        },
    )
    .await;

    // The old timeline's writer wakes and commits: refused, nothing stored,
    // although its token is above the one the fence holds now.
    assert!(stored + 5 > token);
    stale
        .write(started(stored + 6, "stale-write", stored + 6))
        .await
        .ok();
    let flushed = stale.flush().await;
    assert!(flushed.is_err(), "the stale writer's commit is refused");
    assert_eq!(stale.refused_commits(), 1);
    assert_eq!(
        pg.psql(
            "restore",
            "SELECT count(*) FROM events WHERE election = 'stale-write'"
        ),
        "0",
        "nothing of the refused commit is stored"
    );
    let _ = stale.close().await;
    // A writer of the old timeline that won there but had not claimed yet
    // (paused before its first transaction) claims now: its token is above
    // the new etcd's revision, a term of a timeline etcd no longer has.
    let current = new
        .client()
        .await
        .get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision();
    let late_url = url.clone();
    let late = tokio::task::spawn_blocking(move || {
        Store::open_postgres(
            &late_url,
            Duration::ZERO,
            stored + 10,
            "late",
            revision_at(current),
        )
    })
    .await
    .expect("join");
    assert!(
        late.as_ref().is_err_and(|e| e.is_fenced()),
        "an old timeline's term claims nothing"
    );
    let row_after = pg.psql("restore", "SELECT token, generation FROM history_writer");
    assert_eq!(row_after, row, "the fence is the new writer's");
    drop(l);
    second.stop().await;
}

/// The claim's rules, with etcd's revision as it would be read with the
/// fence row locked: in one etcd timeline a lower token never resets the
/// fence (the revision is at or above every stored token); a token above
/// etcd's revision is a term of a timeline etcd no longer has; a stored
/// token above the revision means etcd started over: reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_resets_only_for_a_new_timeline_and_refuses_old_terms() {
    let pg = Postgres::start();
    let url = pg.create_database("same");
    let open = |token: i64, revision: i64| {
        let u = url.clone();
        tokio::task::spawn_blocking(move || {
            Store::open_postgres(&u, Duration::ZERO, token, "w", revision_at(revision))
        })
    };
    let newer = open(50, 60).await.expect("join").expect("claim");
    assert_eq!(newer.fence_reset(), None);
    // Stale writers of the same timeline: refused, nothing changed.
    for (token, revision) in [(40, 50), (40, 60), (49, 1_000)] {
        let r = open(token, revision).await.expect("join");
        assert!(
            r.as_ref().is_err_and(|e| e.is_fenced()),
            "token {token} at revision {revision}"
        );
    }
    assert_eq!(
        pg.psql("same", "SELECT token, generation FROM history_writer"),
        "50|0"
    );
    // A term of a timeline etcd no longer has (its token above etcd's
    // revision), even with a token above the stored one: refused.
    let r = open(70, 60).await.expect("join");
    assert!(r.as_ref().is_err_and(|e| e.is_fenced()));
    assert_eq!(
        pg.psql("same", "SELECT token, generation FROM history_writer"),
        "50|0"
    );
    // etcd started over (revision 49, below the stored 50): reset.
    let fresh = open(3, 49).await.expect("join").expect("reset and claim");
    assert_eq!(fresh.fence_reset(), Some((50, 1)));
    assert_eq!(
        pg.psql("same", "SELECT token, generation FROM history_writer"),
        "3|1"
    );
    // The writer of the old generation is refused from now on.
    newer.write(started(51, "x", 50)).await.ok();
    assert!(newer.flush().await.is_err());
    assert_eq!(newer.refused_commits(), 1);
    let _ = newer.close().await;
    let _ = fresh.close().await;
}

/// A history of schema version 1 (before the fence had a generation) is
/// migrated at the next writer's start: the fence keeps its token, in
/// generation 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_fence_is_migrated_with_its_token() {
    let pg = Postgres::start();
    let url = pg.create_database("v1");
    let u = url.clone();
    let w = tokio::task::spawn_blocking(move || {
        Store::open_postgres(&u, Duration::ZERO, 7, "w", revision_at(i64::MAX))
    })
    .await
    .expect("join")
    .expect("claim");
    let _ = w.close().await;
    // Back to what version 1 had: one fence row, `id = 1`, no generation.
    pg.psql(
        "v1",
        "DROP TABLE elections; DROP TABLE writer_lease; DROP INDEX terms_seen_starting; \
         ALTER TABLE history_writer DROP COLUMN generation; \
         ALTER TABLE history_writer DROP COLUMN cluster; \
         ALTER TABLE history_writer ADD COLUMN id INTEGER NOT NULL DEFAULT 1 PRIMARY KEY \
           CHECK (id = 1); \
         UPDATE tenure_schema SET version = 1",
    );
    let u = url.clone();
    let w = tokio::task::spawn_blocking(move || {
        Store::open_postgres(&u, Duration::ZERO, 9, "w", revision_at(i64::MAX))
    })
    .await
    .expect("join")
    .expect("migrate and claim");
    assert_eq!(
        pg.psql("v1", "SELECT version FROM tenure_schema"),
        tenure::history::PG_SCHEMA_VERSION.to_string()
    );
    // The one row is the unnamed cluster's (schema 5: a row per cluster).
    assert_eq!(
        pg.psql(
            "v1",
            "SELECT token, generation, cluster FROM history_writer"
        ),
        "9|0|"
    );
    // A lower token is still refused after the migration.
    let u = url.clone();
    let low = tokio::task::spawn_blocking(move || {
        Store::open_postgres(&u, Duration::ZERO, 8, "x", revision_at(i64::MAX))
    })
    .await
    .expect("join");
    assert!(low.is_err_and(|e| e.is_fenced()));
    let _ = w.close().await;
}
