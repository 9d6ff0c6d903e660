//! What a replica that does not write does: says in `/readyz` why it cannot
//! (etcd refuses its writer campaign), records etcd's own events its poller
//! found while it stood by once it wins, and watches its cluster once,
//! whoever records it.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tenure::election::Client;

use crate::support::fixtures::lead;
use crate::support::postgres::Postgres;
use crate::support::{Etcd, Serve};
use crate::{eventually, replica, revision};

/// etcd refuses the writer campaign of a replica whose user may only read:
/// its `/readyz` answers 503, says so with the grant to give (and that it
/// cannot take over), and once the grant named there is given, it writes
/// and is ready. The independent record: etcd (as root) holds no writer
/// key while refused, and the fence row of PostgreSQL names it afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_etcd_user_cannot_write_the_writer_election_says_so_in_readyz() {
    use crate::support::secure::{enable_auth, etcdctl};
    let etcd = Etcd::start().await;
    let ep = etcd.endpoint();
    enable_auth(&ep, &[], &[("reader", "reader-pw", "tenure-ro", "read")]);
    let root = ["--user".to_owned(), "root:root-pw".to_owned()];
    let pg = Postgres::start();
    let url = pg.create_database("refused");
    let serve = Serve::start(
        std::slice::from_ref(&ep),
        Path::new(&url),
        &["--user", "reader:reader-pw"],
        &[],
    )
    .await;
    let key = "election/tenure/history-writer";
    let (status, text) = eventually(Duration::from_secs(20), "the refusal", async || {
        let r = reqwest::get(serve.url("/readyz")).await.ok()?;
        let status = r.status().as_u16();
        let text = r.text().await.ok()?;
        // Once its watcher is live too (else that is what it says first).
        let refused = text.starts_with("not ready: etcd refuses this replica's campaign");
        (refused && text.contains("this replica: cannot take over writing"))
            .then_some((status, text))
    })
    .await;
    println!("[figure] /readyz of a replica refused by etcd ({status}):\n{text}");
    assert_eq!(status, 503, "{text}");
    for said in ["permission denied", "\"reader\"", "grant-permission", key] {
        assert!(text.contains(said), "{said}: {text}");
    }
    assert!(!text.contains("standing by"), "{text}");
    assert!(
        text.contains("history writer: none has written yet"),
        "{text}"
    );
    // etcd's own word: no candidate of the writer election exists.
    let held = etcdctl(&ep, &root, &["get", "--prefix", key, "--keys-only"]);
    assert!(held.stdout.is_empty(), "{:?}", held);
    // The grants it names, given as root: the replica then writes.
    for k in [key, "election/~end/tenure/history-writer"] {
        etcdctl(
            &ep,
            &root,
            &[
                "role",
                "grant-permission",
                "tenure-ro",
                "--prefix=true",
                "readwrite",
                k,
            ],
        );
    }
    eventually(Duration::from_secs(20), "the writer, ready", async || {
        let r = reqwest::get(serve.url("/readyz")).await.ok()?;
        let ok = r.status().is_success();
        let text = r.text().await.ok()?;
        (ok && text.contains("this replica: writing (term token ")).then_some(())
    })
    .await;
    let fence = pg.psql(
        "refused",
        "SELECT holder FROM history_writer WHERE token > 0",
    );
    assert!(fence.contains(&format!("http {}", serve.addr)), "{fence}");
}

/// etcd's own events reach the history through its writer: what the
/// poller of a replica found while it stood by (here etcd's leader, found
/// at its first poll while another holds the writer term) is recorded once
/// that replica wins, as seen at takeover (`not_before_ms` unknown), not
/// lost because it was found before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_leader_found_while_standing_by_is_recorded_by_the_writer_that_wins_later() {
    let etcd = Etcd::start().await;
    let pg = Postgres::start();
    let db = "standby_poll";
    let url = pg.create_database(db);
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    // Another writer's term: the replica stands by.
    let other = lead(&c, "tenure/history-writer", "elsewhere", 30).await;
    let r = Serve::start(
        &[etcd.endpoint()],
        Path::new(&url),
        &["--writer-ttl", "2s", "--cluster-poll", "200ms"],
        &[],
    )
    .await;
    eventually(
        Duration::from_secs(20),
        "the replica standing by",
        async || {
            let body = reqwest::get(r.url("/readyz"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            body.contains("elsewhere").then_some(())
        },
    )
    .await;
    // Many polls, each finding the leader the history does not hold.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leaders = "SELECT COUNT(*) FROM cluster_events WHERE type = 'leader_changed'";
    assert_eq!(pg.psql(db, leaders), "0", "recorded with no writer");
    other.resign().await.expect("resign");
    eventually(
        Duration::from_secs(20),
        "etcd's leader recorded",
        async || (pg.psql(db, leaders) == "1").then_some(()),
    )
    .await;
    let json: Value = serde_json::from_str(&pg.psql(
        db,
        "SELECT json FROM cluster_events WHERE type = 'leader_changed'",
    ))
    .expect("JSON");
    assert!(json["not_before_ms"].is_null(), "{json}");
    assert!(json["raft_term"].as_u64() > Some(0), "{json}");
    assert_eq!(r.stop().await, Some(0));
}

/// etcd's count of watchers once it has not changed for a second.
async fn settled_watchers(etcd: &Etcd) -> f64 {
    let mut last = None;
    eventually(Duration::from_secs(30), "watchers settled", async || {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = crate::support::prom::etcd_watchers(&etcd.endpoint()).await?;
        let same = last == Some(now);
        last = Some(now);
        same.then_some(now)
    })
    .await
}

/// A cluster is watched once, whatever records it: the writing replica of
/// a shared history holds as many etcd watchers as a serve with a SQLite
/// history, plus what its held writer term holds (measured on a term held
/// by the election core itself), before and after a takeover; and what
/// changed meanwhile is recorded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_watched_once_whoever_records_it() {
    let etcd = Etcd::start().await;
    let pg = Postgres::start();
    let db = "watched_once";
    let url = pg.create_database(db);
    let none = settled_watchers(&etcd).await;
    // What one held term costs, as the election core holds it.
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let held = lead(&c, "held-once", "measure", 30).await;
    let term = settled_watchers(&etcd).await - none;
    held.resign().await.expect("resign");
    assert_eq!(settled_watchers(&etcd).await, none);

    let dir = tempfile::tempdir().expect("tempdir");
    let local = Serve::start(
        &[etcd.endpoint()],
        &dir.path().join("h.db"),
        &["--cluster-poll", "0"],
        &[],
    )
    .await;
    local.ready().await;
    let sqlite = settled_watchers(&etcd).await - none;
    assert!(sqlite >= 1.0, "a serve watches: {sqlite}");
    assert_eq!(local.stop().await, Some(0));
    assert_eq!(settled_watchers(&etcd).await, none);

    let first = replica(&etcd, &url).await;
    first.ready().await;
    eventually(Duration::from_secs(30), "the writer", async || {
        (first.metric("tenure_history_writer").await == Some(1.0)).then_some(())
    })
    .await;
    let writing = settled_watchers(&etcd).await - none;
    assert_eq!(
        writing,
        sqlite + term,
        "the writer: {sqlite} watcher(s) of a serve plus {term} of a held term"
    );
    // A takeover: the second replica's watcher was at the head when it won.
    let second = replica(&etcd, &url).await;
    second.ready().await;
    first.crash().await;
    let l = lead(&c, "during", "takeover", 30).await;
    let token = l.token();
    l.resign().await.expect("resign");
    eventually(Duration::from_secs(30), "the second writes", async || {
        (second.metric("tenure_history_writer").await == Some(1.0)).then_some(())
    })
    .await;
    let upto = revision(&etcd).await;
    second.caught_up(upto).await;
    eventually(Duration::from_secs(30), "the term recorded", async || {
        let n = pg.psql(
            db,
            &format!("SELECT COUNT(*) FROM terms WHERE election = 'during' AND token = {token}"),
        );
        (n == "1").then_some(())
    })
    .await;
    let after = settled_watchers(&etcd).await - none;
    assert_eq!(after, sqlite + term, "the new writer watches once too");
    let terms = pg.psql(db, "SELECT COUNT(*) FROM terms WHERE election = 'during'");
    assert_eq!(terms, "1", "recorded once");
    // Its serve loop applied the term once, though its watcher was started
    // again from before it.
    let changes = r#"tenure_election_leader_changes_total{election="during"}"#;
    assert_eq!(second.metric(changes).await, Some(1.0), "applied once");
    // A clean stop ends the term cleanly: serve's stop recorded, no error
    // noted for every replica's /readyz.
    let pid = second.pid();
    assert_eq!(second.stop().await, Some(0));
    let stopped = pg.psql(
        db,
        &format!(
            "SELECT COUNT(*) FROM cluster_events WHERE type = 'serve_stopped' \
             AND json LIKE '%\"pid\":{pid}%'"
        ),
    );
    assert_eq!(stopped, "1", "the writer recorded its own stop");
    let noted = pg.psql(
        db,
        "SELECT COALESCE(last_error, '') FROM history_writer WHERE cluster = ''",
    );
    assert_eq!(noted, "", "a clean stop is no error");
}
