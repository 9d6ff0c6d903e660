//! Issue 20.1 and 20.2: etcd restored from a snapshot. Tokens are etcd
//! revisions; a restore puts the revision back, so without care etcd hands
//! out again tokens tenure handed out (and fences accepted) before.
//!
//! - With the documented procedure (`etcdutl snapshot restore
//!   --bump-revision N --mark-compacted`) the next token is above every
//!   earlier one, and the old timeline's keys that came back with the
//!   snapshot cannot fence: `serve` sees etcd contradict its history and
//!   raises tenure's token floor.
//! - Without it, `serve` records the reset, raises the floor, and every
//!   campaign and fence refuses a token at or below it with one line that
//!   names the fix: nothing of the old range is handed out or accepted.
//! - A restore while `serve` was down, whose new timeline passed the
//!   stored revision (same cluster id): at resume etcd's state at that
//!   revision contradicts the history, and that is the reset it is.
//!
//! The restore is the operator's (tests/support: `Etcd::restore`, same
//! member name, so the same cluster id). Run against 3.5.30 (its own
//! etcdutl) and 3.4.23 (3.5.30's etcdutl: 3.4 has none).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use support::fixtures::{lead, name, run, tenure, text};
use support::{Etcd, Serve};
use tenure::election::{Client, Error};
use tenure::events::{EndCause, EventKind};
use tenure::history::{Query, Reader};

async fn revision(etcd: &Etcd) -> i64 {
    let mut raw = etcd.client().await;
    raw.get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

async fn cluster_id(etcd: &Etcd) -> u64 {
    let mut raw = etcd.client().await;
    raw.get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .cluster_id()
}

/// Moves etcd's revision on by `n` writes of a key no election reads.
async fn write(etcd: &Etcd, n: usize) {
    let mut raw = etcd.client().await;
    for i in 0..n {
        raw.put(format!("other/{i}"), "x", None).await.expect("put");
    }
}

/// The value of the fence key `fence/x/db`, as a token.
async fn fence_value(etcd: &Etcd) -> Option<i64> {
    let mut raw = etcd.client().await;
    let resp = raw.get("fence/x/db", None).await.expect("get");
    resp.kvs()
        .first()
        .and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok())
}

/// The resets the history recorded: (from revision, previous cluster id,
/// cluster id), in order.
fn resets(reader: &Reader) -> Vec<(i64, Option<u64>, u64)> {
    let events = reader.events(None, &Query::default()).expect("events");
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Reset {
                from_revision,
                previous_cluster_id,
                cluster_id,
                ..
            } => Some((*from_revision, *previous_cluster_id, *cluster_id)),
            _ => None,
        })
        .collect()
}

/// Waits for tenure's token floor to be at least `at_least`; returns how
/// long after `since` it was seen.
async fn floor_raised(c: &Client, at_least: i64, since: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if c.floor()
            .await
            .ok()
            .flatten()
            .is_some_and(|f| f >= at_least)
        {
            return since.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "the token floor never reached {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The old timeline: A leads `x` and fences `db`, the snapshot is taken,
/// A resigns, B leads and fences `db`, twenty times. Returns (A's token,
/// B's token, the snapshot's revision, the old timeline's last revision);
/// serve has recorded all of it (its last event is B's last fence write,
/// so the floor it raises is that revision).
async fn old_timeline(
    etcd: &Etcd,
    c: &Client,
    serve: &Serve,
    snap: &std::path::Path,
) -> (i64, i64, i64, i64) {
    let a = lead(c, "x", "a", 30).await;
    assert!(a.fence("db").await.expect("fence").accepted);
    let t_a = a.token();
    let at = etcd.snapshot_save(snap).await;
    a.resign().await.expect("a resigns");
    let b = lead(c, "x", "b", 30).await;
    let t_b = b.token();
    for _ in 0..20 {
        assert!(b.fence("db").await.expect("fence").accepted);
    }
    let old = revision(etcd).await;
    serve.caught_up(old).await;
    // B's process is gone with the old timeline (its lease is not in the
    // snapshot); nothing of it runs on.
    std::mem::forget(b);
    (t_a, t_b, at, old)
}

/// Issue 20.1, without the documented flags: A resigned and exited, B led
/// with a higher token and fenced `db`; etcd is restored from a snapshot
/// taken while A led. Before: `tenure leader x` named A again, the fence
/// key was back at A's token, and the next campaign won with a token B's
/// timeline had already passed, which the fence accepted. Now serve
/// records the reset and raises the floor; the campaign and the fence
/// refuse with the fix in one line, and the fence accepts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_without_bump_revision_is_refused_until_it_is_redone() {
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, snap) = (dir.path().join("history.db"), dir.path().join("snap.db"));
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &["--timeout", "2"], &[]).await;
    serve.ready().await;
    let id = cluster_id(&etcd).await;
    let (t_a, t_b, at, old) = old_timeline(&etcd, &c, &serve, &snap).await;

    etcd.restore(&snap, None).await;
    let restarted = Instant::now();
    assert_eq!(cluster_id(&etcd).await, id, "the same cluster id");
    assert!(revision(&etcd).await < old, "the revision went back");
    let took = floor_raised(&c, old, restarted).await;
    println!(
        "[figure] restore without --bump-revision under a running serve: token floor {old} \
         raised {} ms after etcd was back",
        took.as_millis()
    );
    // A's term came back with the snapshot (its lease too).
    let leader = c.leader(&name("x")).await.expect("leader").expect("leads");
    assert_eq!(
        (leader.leader.holder.as_str(), leader.leader.token),
        ("a", t_a)
    );
    assert_eq!(
        fence_value(&etcd).await,
        Some(t_a),
        "the fence is back at A's token"
    );
    // `tenure leader` names A, and says its term is from before the restore.
    let out = run(&etcd, &["leader", "x"]).await;
    assert!(
        text(&out.stdout).starts_with("a leads x"),
        "{}",
        text(&out.stdout)
    );
    let note = text(&out.stderr);
    assert!(
        note.contains(&format!(
            "token {t_a} is at or below tenure's token floor {old}"
        )),
        "{note}"
    );

    // The fence: A's token, B's, and a term the restored timeline made
    // (by a client that does not read the floor) are all refused.
    let out = run(&etcd, &["fence", "x", "db", "--token", &t_a.to_string()]).await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("--bump-revision") && err.contains(&format!("floor {old}")),
        "{err}"
    );
    c.depose(&name("x")).await.expect("depose the restored A");
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(30, None).await.expect("grant");
    let put = raw
        .put(
            "election/x",
            "c",
            Some(etcd_client::PutOptions::new().with_lease(lease.id())),
        )
        .await
        .expect("put");
    let t_c = put.header().expect("header").revision();
    assert!(t_c > t_a && t_c <= old, "a token of the old range: {t_c}");
    for token in [t_a, t_b, t_c] {
        match c.fence(&name("x"), "db", token).await {
            Err(Error::BelowFloor { floor, .. }) => assert_eq!(floor, old),
            other => panic!("token {token}: {other:?}"),
        }
    }
    assert_eq!(fence_value(&etcd).await, Some(t_a), "nothing accepted");
    raw.lease_revoke(lease.id()).await.expect("revoke");
    let _ = at;

    // A campaign, waiting or not: refused, writing nothing.
    let before = revision(&etcd).await;
    let out = tenure(&etcd)
        .args([
            "campaign",
            "x",
            "--wait",
            "--wait-timeout",
            "10",
            "--",
            "true",
        ])
        .output()
        .await
        .expect("run");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("etcdutl snapshot restore --bump-revision"),
        "{err}"
    );
    assert_eq!(
        revision(&etcd).await,
        before,
        "the refused campaign wrote nothing"
    );
    let out = run(&etcd, &["campaign", "x", "--queue", "--", "true"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(revision(&etcd).await, before, "nor in the queue layout");

    // Redone the documented way (from a snapshot of now): the next token is
    // above every earlier one, and it fences.
    let snap2 = dir.path().join("now.db");
    etcd.snapshot_save(&snap2).await;
    etcd.restore(&snap2, Some(1_000_000_000)).await;
    let d = lead(&c, "x", "d", 30).await;
    assert!(d.token() > old, "{} > {old}", d.token());
    assert!(d.fence("db").await.expect("fence").accepted);
    serve.caught_up(d.token()).await;
    assert_eq!(serve.stop().await, Some(0));
}

/// Issue 20.1, the documented procedure: `etcdutl snapshot restore
/// --bump-revision 1000000000 --mark-compacted` (same member name). The
/// next campaign's token is above every token of the old timeline; the
/// term that came back with the snapshot (A's) cannot fence: serve sees
/// the restored state contradict its history and raises the floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_restore_keeps_every_token_above_the_earlier_ones() {
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, snap) = (dir.path().join("history.db"), dir.path().join("snap.db"));
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &["--timeout", "2"], &[]).await;
    serve.ready().await;
    let id = cluster_id(&etcd).await;
    let (t_a, t_b, _, old) = old_timeline(&etcd, &c, &serve, &snap).await;

    etcd.restore(&snap, Some(1_000_000_000)).await;
    let restarted = Instant::now();
    assert_eq!(cluster_id(&etcd).await, id, "the same cluster id");
    let took = floor_raised(&c, old, restarted).await;
    println!(
        "[figure] restore with --bump-revision under a running serve: token floor {old} raised \
         {} ms after etcd was back",
        took.as_millis()
    );
    // A's term came back; its token may not fence any more.
    let leader = c.leader(&name("x")).await.expect("leader").expect("leads");
    assert_eq!(leader.leader.token, t_a);
    match c.fence(&name("x"), "db", t_a).await {
        Err(Error::BelowFloor { floor, .. }) => assert_eq!(floor, old),
        other => panic!("A's token: {other:?}"),
    }
    assert_eq!(fence_value(&etcd).await, Some(t_a), "nothing accepted");
    c.depose(&name("x")).await.expect("depose the restored A");
    let d = lead(&c, "x", "d", 30).await;
    assert!(
        d.token() > old && d.token() > t_b,
        "the next token {} is above every earlier one ({t_a}, {t_b}, the old timeline's last \
         revision {old})",
        d.token()
    );
    assert!(d.fence("db").await.expect("fence").accepted);
    serve.caught_up(d.token()).await;
    assert_eq!(serve.stop().await, Some(0));
    let reader = Reader::open(&db).expect("reader");
    let resets = reader
        .events(None, &Query::default())
        .expect("events")
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::Reset { .. }))
        .count();
    assert_eq!(resets, 1, "the restore is recorded as a reset");
}

/// Issue 20.2: etcd restored while serve was down, its new timeline past
/// the revision history stored, the same cluster id. Before: serve resumed
/// at the stored revision as if nothing happened: the old timeline's terms
/// stayed open, the new ones were not recorded, no reset, /readyz ready.
/// Now the state at the stored revision contradicts the history: a reset
/// is recorded, the new terms are recorded, the floor raised, /readyz
/// ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_while_serve_is_down_is_recorded_as_a_reset() {
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, snap) = (dir.path().join("history.db"), dir.path().join("snap.db"));
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let id = cluster_id(&etcd).await;
    let (t_a, t_b, _, old) = old_timeline(&etcd, &c, &serve, &snap).await;
    assert_eq!(serve.stop().await, Some(0));

    etcd.restore(&snap, None).await;
    // The new timeline: the restored A is deposed, C leads (no serve runs:
    // nothing raised a floor), and it goes past the stored revision.
    c.depose(&name("x")).await.expect("depose the restored A");
    let cc = lead(&c, "x", "c", 30).await;
    let t_c = cc.token();
    assert!(
        t_c > t_a && t_c <= old,
        "C has a token of the old range: {t_c}"
    );
    write(&etcd, (old - revision(&etcd).await + 10) as usize).await;
    let now = revision(&etcd).await;
    assert!(now > old);
    assert_eq!(cluster_id(&etcd).await, id, "the same cluster id");

    let started = Instant::now();
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let took = floor_raised(&c, old, started).await;
    println!(
        "[figure] restore while serve was down, new timeline {} revisions past the stored one: \
         reset recorded and floor raised {} ms after serve started",
        now - old,
        took.as_millis()
    );
    // C's term is of the old range: its fence is refused now.
    match cc.fence("db").await {
        Err(Error::BelowFloor { floor, .. }) => assert_eq!(floor, old),
        other => panic!("C's token {t_c}: {other:?}"),
    }
    serve.caught_up(now).await;
    let ready = reqwest::get(serve.url("/readyz")).await.expect("readyz");
    assert_eq!(ready.status(), 200, "{:?}", ready.text().await);
    assert_eq!(serve.stop().await, Some(0));

    let reader = Reader::open(&db).expect("reader");
    assert_eq!(resets(&reader), [(old, Some(id), id)]);
    let terms: Vec<_> = reader
        .terms("x", &Query::default())
        .expect("terms")
        .into_iter()
        .map(|t| (t.holder, t.token, t.end_cause))
        .collect();
    assert_eq!(
        terms,
        [
            ("a".to_owned(), t_a, Some(EndCause::Resigned)),
            ("b".to_owned(), t_b, Some(EndCause::Unknown)),
            ("c".to_owned(), t_c, None),
        ],
        "the old timeline's open term ended at the reset, the new one's recorded"
    );
}

/// A restore while serve was down when no term was open at the revision
/// history stored: A and B led and resigned, serve stopped; etcd restored
/// from a snapshot taken while A led; bob and carol campaign, fence and
/// resign, and etcd passes the stored revision with no leader at it. No
/// open term tells, but the newest term history recorded (B's) was not
/// created at its token in the new timeline: a reset, the floor raised,
/// and what the fence accepted in the new timeline's old range refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_while_serve_is_down_is_a_reset_when_nothing_was_open() {
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, snap) = (dir.path().join("history.db"), dir.path().join("snap.db"));
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let id = cluster_id(&etcd).await;
    let a = lead(&c, "x", "a", 30).await;
    assert!(a.fence("db").await.expect("fence").accepted);
    etcd.snapshot_save(&snap).await;
    a.resign().await.expect("a resigns");
    let b = lead(&c, "x", "b", 30).await;
    for _ in 0..20 {
        assert!(b.fence("db").await.expect("fence").accepted);
    }
    b.resign().await.expect("b resigns");
    let old = revision(&etcd).await;
    serve.caught_up(old).await;
    assert_eq!(serve.stop().await, Some(0));

    etcd.restore(&snap, None).await;
    c.depose(&name("x")).await.expect("depose the restored A");
    let mut accepted = Vec::new();
    for who in ["bob", "carol"] {
        let l = lead(&c, "x", who, 30).await;
        assert!(l.fence("db").await.expect("fence").accepted);
        accepted.push(l.token());
        l.resign().await.expect("resign");
    }
    let quiet = revision(&etcd).await;
    assert!(
        quiet < old,
        "the new timeline has no leader at the stored revision {old} (it is at {quiet})"
    );
    write(&etcd, (old - quiet + 5) as usize).await;
    let now = revision(&etcd).await;
    assert_eq!(cluster_id(&etcd).await, id, "the same cluster id");

    let started = Instant::now();
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let took = floor_raised(&c, old, started).await;
    println!(
        "[figure] restore while serve was down, nothing open at the stored revision: reset \
         recorded and floor raised {} ms after serve started",
        took.as_millis()
    );
    serve.caught_up(now).await;
    assert_eq!(serve.stop().await, Some(0));
    // The new timeline's terms in the old range would have fenced with
    // tokens the old one had passed: a new campaign is above the floor.
    let d = lead(&c, "x", "dave", 30).await;
    assert!(d.token() > old && accepted.iter().all(|&t| t < d.token()));
    assert!(d.fence("db").await.expect("fence").accepted);

    let reader = Reader::open(&db).expect("reader");
    assert_eq!(resets(&reader), [(old, Some(id), id)]);
}

/// The control of 20.2: the same stop, writes past the stored revision and
/// start, without a restore, records no reset and raises no floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_a_restore_records_no_reset() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, snap) = (dir.path().join("history.db"), dir.path().join("snap.db"));
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let (_, _, _, _) = old_timeline(&etcd, &c, &serve, &snap).await;
    assert_eq!(serve.stop().await, Some(0));
    // While serve is down: B's term ends, C leads, more writes.
    c.depose(&name("x")).await.expect("depose B");
    let cc = lead(&c, "x", "c", 30).await;
    write(&etcd, 30).await;
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    serve.caught_up(revision(&etcd).await).await;
    assert!(cc.fence("db").await.expect("fence").accepted);
    assert_eq!(serve.stop().await, Some(0));
    assert_eq!(c.floor().await.expect("floor"), None, "no floor");
    let reader = Reader::open(&db).expect("reader");
    let events = reader.events(None, &Query::default()).expect("events");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Reset { .. })),
        "{events:#?}"
    );
    let terms: Vec<_> = reader
        .terms("x", &Query::default())
        .expect("terms")
        .into_iter()
        .map(|t| (t.holder, t.end_cause))
        .collect();
    assert_eq!(
        terms,
        [
            ("a".to_owned(), Some(EndCause::Resigned)),
            ("b".to_owned(), Some(EndCause::Deleted)),
            ("c".to_owned(), None),
        ]
    );
}

/// Issue 20.1 with a read-only `serve` (the role the docs suggest for it):
/// it cannot write the floor. That is not silent: its log and `/readyz`
/// (503) say so, with the grant it needs; granted, it raises the floor and
/// is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_serve_says_it_cannot_raise_the_floor_and_what_to_grant() {
    use support::secure::{enable_auth, etcdctl};
    let mut etcd = Etcd::start().await;
    let ep = etcd.endpoint();
    enable_auth(&ep, &[], &[("reader", "reader-pw", "tenure-ro", "read")]);
    let root = ["--user".to_owned(), "root:root-pw".to_owned()];
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, snap) = (dir.path().join("history.db"), dir.path().join("snap.db"));
    let serve = Serve::start(
        std::slice::from_ref(&ep),
        &db,
        &["--user", "reader:reader-pw"],
        &[],
    )
    .await;
    serve.ready().await;
    let put = |value: &str| {
        let out = etcdctl(&ep, &root, &["put", "fence/x/db", value, "-w", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        v["header"]["revision"].as_i64().expect("revision")
    };
    put("00000000000000000001");
    etcdctl(
        &ep,
        &root,
        &["snapshot", "save", &snap.display().to_string()],
    );
    let mut old = 0;
    for i in 2..12 {
        old = put(&format!("{i:020}"));
    }
    serve.caught_up(old).await;

    etcd.restore(&snap, None).await;
    let restored = Instant::now();
    let deadline = restored + Duration::from_secs(30);
    let body = loop {
        let r = reqwest::get(serve.url("/readyz")).await.expect("readyz");
        let (status, body) = (r.status(), r.text().await.expect("body"));
        if status == 503 && body.contains("token floor") {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "readyz never said so: {status} {body}; {}",
            serve.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "[figure] read-only serve: /readyz 503 naming the missing grant {} ms after etcd was back",
        restored.elapsed().as_millis()
    );
    let grant = "etcdctl role grant-permission tenure-ro readwrite 'election/~floor'";
    assert!(body.contains(grant), "{body}");
    assert!(serve.log_text().contains(grant), "{}", serve.log_text());

    etcdctl(
        &ep,
        &root,
        &[
            "role",
            "grant-permission",
            "tenure-ro",
            "readwrite",
            "election/~floor",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let r = reqwest::get(serve.url("/readyz")).await.expect("readyz");
        if r.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "{:?}", r.text().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = etcdctl(
        &ep,
        &root,
        &["get", "election/~floor", "--print-value-only"],
    );
    assert_eq!(text(&out.stdout).trim(), format!("{old:020}"));
}
