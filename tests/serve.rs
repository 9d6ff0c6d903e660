//! `tenure serve` end to end: watcher → metrics, history; exactly-once
//! history across restarts; an explicit gap after compaction.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use etcd_client::CompactionOptions;
use support::fixtures::{lead, name, ttl};
use support::{Etcd, Serve};
use tenure::election::Client;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_exact_across_restarts_and_metrics_match() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    // Watching before `a` leads: a term in the snapshot is no leader change.
    serve.ready().await;

    let a = lead(&c, "orders", "a", 30).await;
    let t_a = a.token();
    assert!(a.fence("db").await.expect("fence").accepted);
    a.resign().await.expect("resign");
    let b = lead(&c, "orders", "b", 30).await;
    assert!(b.fence("db").await.expect("fence").accepted);
    let refused = c.fence(&name("orders"), "db", t_a).await.expect("fence");
    assert!(!refused.accepted);
    serve.caught_up(revision(&etcd).await).await;

    let m = serve.metrics().await;
    let v = |s: &str| support::metric_value(&m, s);
    assert_eq!(
        v(r#"tenure_election_has_leader{election="orders"}"#),
        Some(1.0)
    );
    assert_eq!(
        v(r#"tenure_election_leader_changes_total{election="orders"}"#),
        Some(2.0)
    );
    assert_eq!(
        v(r#"tenure_election_fencing_token{election="orders"}"#),
        Some(b.token() as f64)
    );
    assert_eq!(v(r#"tenure_term_ends_total{cause="resigned"}"#), Some(1.0));
    assert_eq!(
        v(r#"tenure_fencing_refusals_total{election="orders",reason="stale_token"}"#),
        Some(1.0)
    );
    assert_eq!(
        v(r#"tenure_fencing_checks_total{election="orders",result="accepted"}"#),
        Some(2.0)
    );
    assert_eq!(
        v(r#"tenure_election_leader_info{election="orders",holder="b"}"#),
        Some(1.0)
    );
    assert!(
        !m.contains(r#"holder="a""#),
        "the old holder's series is gone"
    );
    assert_eq!(v("tenure_etcd_up"), Some(1.0));
    assert_eq!(
        reqwest::get(serve.url("/readyz"))
            .await
            .expect("readyz")
            .status(),
        200
    );
    assert_eq!(serve.stop().await, Some(0));

    // While tenure is down: b resigns, c leads and is deposed, d leads.
    let t_b = b.token();
    b.resign().await.expect("resign");
    let cc = lead(&c, "orders", "c", 30).await;
    c.depose(&name("orders")).await.expect("depose");
    drop(cc);
    let d = lead(&c, "orders", "d", 30).await;

    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    assert!(
        serve
            .logs()
            .iter()
            .any(|l| l.contains("resuming after revision")),
        "{:?}",
        serve.logs()
    );
    serve.caught_up(revision(&etcd).await).await;
    assert_eq!(serve.stop().await, Some(0));

    let out = tokio::process::Command::new(support::tenure_bin())
        .args(["history", "orders", "--json", "--db"])
        .arg(&db)
        .output()
        .await
        .expect("tenure history");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let terms: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let got: Vec<(i64, String, Option<String>)> = terms
        .as_array()
        .expect("array")
        .iter()
        .map(|t| {
            (
                t["token"].as_i64().expect("token"),
                t["holder"].as_str().expect("holder").to_owned(),
                t["end_cause"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let want = vec![
        (t_a, "a".to_owned(), Some("resigned".to_owned())),
        (t_b, "b".to_owned(), Some("resigned".to_owned())),
        (
            got.get(2).map(|g| g.0).unwrap_or(0),
            "c".to_owned(),
            Some("deleted".to_owned()),
        ),
        (d.token(), "d".to_owned(), None),
    ];
    assert_eq!(got, want, "each term exactly once, in order");
    for t in terms.as_array().expect("array") {
        for field in [
            "started_at",
            "started_revision",
            "ended_at",
            "ended_revision",
        ] {
            assert!(t.get(field).is_some(), "{field} missing in {t}");
        }
    }
    let reader = Reader::open(&db).expect("reader");
    let refusals = reader
        .refusals(Some("orders"), &Query::default())
        .expect("refusals");
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0].token, t_a);
    assert_eq!(refusals[0].current_token, Some(t_b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_down_records_an_explicit_gap() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let a = lead(&c, "jobs", "a", 30).await;
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.caught_up(revision(&etcd).await).await;
    assert_eq!(serve.stop().await, Some(0));

    let t_a = a.token();
    a.resign().await.expect("resign");
    let b = lead(&c, "jobs", "b", 30).await;
    let now = revision(&etcd).await;
    let mut raw = etcd.client().await;
    raw.compact(now, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");

    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.caught_up(now).await;
    assert_eq!(serve.metric("tenure_history_gaps_total").await, Some(1.0));
    assert_eq!(serve.stop().await, Some(0));

    let reader = Reader::open(&db).expect("reader");
    let events = reader.events(None, &Query::default()).expect("events");
    let gaps: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Gap { .. }))
        .collect();
    assert_eq!(gaps.len(), 1, "{events:#?}");
    assert!(matches!(gaps[0].kind, EventKind::Gap { to_revision, .. } if to_revision >= now));
    let terms = reader.terms("jobs", &Query::default()).expect("terms");
    assert_eq!(terms.len(), 2, "{terms:#?}");
    assert_eq!(
        (terms[0].token, terms[0].end_cause),
        (t_a, Some(EndCause::Unknown))
    );
    assert_eq!(
        (terms[1].token, terms[1].end_cause, terms[1].from_snapshot),
        (b.token(), None, true)
    );
}

fn etcdctl(etcd: &Etcd) -> std::process::Command {
    let mut cmd = std::process::Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd.endpoint()));
    cmd
}

/// `etcdctl snapshot restore` of an earlier snapshot puts etcd's revision
/// behind the stored one (and, with another cluster token, changes the
/// cluster id). History records an explicit reset, keeps every term of the
/// old timeline, and goes on recording the new one, where tokens repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_from_a_snapshot_is_recorded_as_a_reset() {
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let snap = dir.path().join("snap.db");
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    let a = lead(&c, "jobs", "a", 30).await;
    let t_a = a.token();
    serve.caught_up(revision(&etcd).await).await;
    let out = etcdctl(&etcd)
        .args(["snapshot", "save"])
        .arg(&snap)
        .output()
        .expect("etcdctl snapshot save");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snapshot_rev = revision(&etcd).await;

    // The old timeline goes on: three more terms.
    a.resign().await.expect("resign");
    let b = lead(&c, "jobs", "b", 30).await;
    let t_b = b.token();
    b.resign().await.expect("resign");
    let cc = lead(&c, "jobs", "c", 30).await;
    let t_c = cc.token();
    let old_rev = revision(&etcd).await;
    serve.caught_up(old_rev).await;
    assert_eq!(serve.stop().await, Some(0));
    drop(cc);

    // Restore the snapshot in place (another cluster token: another id).
    etcd.kill().await;
    let data = etcd.data_dir().to_owned();
    std::fs::remove_dir_all(&data).expect("remove data dir");
    let peer = format!("http://127.0.0.1:{}", etcd.peer_port());
    // etcdutl: 3.6 removed etcdctl's restore (3.4's server gets 3.5's).
    let out = std::process::Command::new(support::etcdutl_bin())
        .args(["snapshot", "restore"])
        .arg(&snap)
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--name",
            "m0",
            "--initial-cluster",
            &format!("m0={peer}"),
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster-token",
            "restored",
        ])
        .output()
        .expect("etcdctl snapshot restore");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    etcd.restart().await;
    let restored_rev = revision(&etcd).await;
    assert!(restored_rev < old_rev, "{restored_rev} < {old_rev}");
    assert_eq!(restored_rev, snapshot_rev);

    // The new timeline: a (restored) is deposed, d leads with a token the
    // old timeline gave b.
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    c.depose(&name("jobs")).await.expect("depose");
    let d = lead(&c, "jobs", "d", 30).await;
    assert_eq!(d.token(), t_b, "the new timeline repeats a token");

    // Another cluster token made another etcd cluster id: not taken for
    // this history's etcd until the operator adopts it (issue 43.1).
    let (before, now) = (
        Reader::open(&db)
            .expect("reader")
            .resume_point()
            .expect("resume"),
        c.etcd()
            .clone()
            .get("any", None)
            .await
            .expect("get")
            .header()
            .expect("header")
            .cluster_id(),
    );
    let recorded = before.as_ref().and_then(|r| r.cluster_id).expect("an id");
    let out = tokio::process::Command::new(support::tenure_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(&db)
        .env("TENURE_ENDPOINTS", etcd.endpoint())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {err}");
    assert!(
        err.contains(&format!("{recorded:x}")) && err.contains(&format!("--adopt-etcd {now:x}")),
        "{err}"
    );
    let after = Reader::open(&db)
        .expect("reader")
        .resume_point()
        .expect("resume");
    assert_eq!(
        after, before,
        "the refused serve left the history as it was"
    );
    let adopt = format!("{now:x}");
    let serve = Serve::start(&[etcd.endpoint()], &db, &["--adopt-etcd", &adopt], &[]).await;
    serve.caught_up(d.token()).await;
    serve.ready().await;
    let ready = reqwest::get(serve.url("/readyz"))
        .await
        .expect("readyz")
        .text()
        .await
        .expect("body");
    let at: i64 = ready
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("{ready}"));
    assert!(
        at >= d.token() && at < old_rev,
        "readyz reports the new timeline's revision: {ready}"
    );
    // Recording goes on in the new timeline. Its tokens repeat the old
    // one's: serve raised tenure's token floor (issue 20.1), so a campaign
    // is refused until etcd's revision passes it (here: by writes; an
    // operator restores with --bump-revision instead, tests/restore.rs).
    let t_d = d.token();
    d.resign().await.expect("resign");
    let e = above_the_floor(&etcd, &c, "e", old_rev).await;
    serve.caught_up(e.token()).await;
    assert_eq!(serve.metric("tenure_history_gaps_total").await, Some(1.0));
    // The timeline page marks the reset like a gap.
    let page = reqwest::get(serve.url("/elections/jobs"))
        .await
        .expect("page")
        .text()
        .await
        .expect("body");
    assert!(
        page.contains(r#"watcher gap: <b class="num">1</b>"#),
        "the reset is drawn as a gap"
    );
    assert_eq!(serve.stop().await, Some(0));

    let reader = Reader::open(&db).expect("reader");
    let events = reader.events(None, &Query::default()).expect("events");
    let resets: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Reset {
                from_revision,
                to_revision,
                previous_cluster_id,
                cluster_id,
            } => Some((
                *from_revision,
                *to_revision,
                *previous_cluster_id,
                *cluster_id,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(resets.len(), 1, "{events:#?}");
    let (from, to, previous, now) = resets[0];
    assert_eq!(from, old_rev);
    assert!(to >= restored_rev && to < old_rev, "{to}");
    assert!(
        previous.is_some() && previous != Some(now),
        "{previous:?} {now}"
    );
    let terms: Vec<_> = reader
        .terms("jobs", &Query::default())
        .expect("terms")
        .into_iter()
        .map(|t| (t.holder, t.token, t.end_cause))
        .collect();
    assert_eq!(
        terms,
        vec![
            ("a".to_owned(), t_a, Some(EndCause::Resigned)),
            ("b".to_owned(), t_b, Some(EndCause::Resigned)),
            ("c".to_owned(), t_c, Some(EndCause::Unknown)),
            // The restored a ended before serve saw the new timeline: like
            // terms inside a gap, it is not known one by one (the reset says
            // so). d was there when serve started: from the snapshot.
            ("d".to_owned(), t_d, Some(EndCause::Resigned)),
            ("e".to_owned(), e.token(), None),
        ],
        "every term of both timelines, none lost"
    );
}

/// The same restore under a running `tenure serve`, keeping the cluster id
/// (same token): only the revision tells. The watch reopens after etcd's
/// restart, sees etcd behind what it applied, records the reset and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_under_a_running_serve_is_recorded_as_a_reset() {
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let snap = dir.path().join("snap.db");
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &["--timeout", "2"], &[]).await;
    let a = lead(&c, "jobs", "a", 30).await;
    serve.caught_up(revision(&etcd).await).await;
    let out = etcdctl(&etcd)
        .args(["snapshot", "save"])
        .arg(&snap)
        .output()
        .expect("etcdctl snapshot save");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    a.resign().await.expect("resign");
    let b = lead(&c, "jobs", "b", 30).await;
    let t_b = b.token();
    let old_rev = revision(&etcd).await;
    serve.caught_up(old_rev).await;

    // b still leads when etcd dies: a drop before the kill revokes its
    // lease and publishes its acting record (issue 22) in the background,
    // and serve could see those writes first, so the old timeline would
    // end after `old_rev`. Dropped now, neither can land: etcd is down,
    // and the restored timeline has neither b's lease nor its key.
    etcd.kill().await;
    drop(b);
    let data = etcd.data_dir().to_owned();
    std::fs::remove_dir_all(&data).expect("remove data dir");
    let peer = format!("http://127.0.0.1:{}", etcd.peer_port());
    // etcdutl: 3.6 removed etcdctl's restore (3.4's server gets 3.5's).
    let out = std::process::Command::new(support::etcdutl_bin())
        .args(["snapshot", "restore"])
        .arg(&snap)
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--name",
            "m0",
            "--initial-cluster",
            &format!("m0={peer}"),
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster-token",
            etcd.cluster_token(),
        ])
        .output()
        .expect("etcdctl snapshot restore");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    etcd.restart().await;
    assert!(revision(&etcd).await < old_rev);

    // Recording goes on: once serve has the reset, a new term is recorded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while serve.metric("tenure_history_gaps_total").await != Some(1.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "no reset seen: {:?}",
            serve.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    c.depose(&name("jobs"))
        .await
        .expect("depose the restored a");
    // The new timeline would repeat b's token: serve raised tenure's
    // token floor (issue 20.1), so the campaign is refused until etcd's
    // revision passes it.
    let d = above_the_floor(&etcd, &c, "d", old_rev).await;
    serve.caught_up(d.token()).await;
    let h = serve
        .metric(r#"tenure_election_has_leader{election="jobs"}"#)
        .await;
    assert_eq!(h, Some(1.0));
    assert_eq!(serve.stop().await, Some(0));

    let reader = Reader::open(&db).expect("reader");
    let events = reader.events(None, &Query::default()).expect("events");
    let resets: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Reset {
                previous_cluster_id,
                cluster_id,
                from_revision,
                ..
            } => Some((*from_revision, *previous_cluster_id, *cluster_id)),
            _ => None,
        })
        .collect();
    assert_eq!(resets.len(), 1, "{events:#?}");
    assert_eq!(resets[0].0, old_rev);
    assert_eq!(resets[0].1, Some(resets[0].2), "same cluster id");
    let terms: Vec<_> = reader
        .terms("jobs", &Query::default())
        .expect("terms")
        .into_iter()
        .map(|t| (t.holder, t.token, t.end_cause))
        .collect();
    assert_eq!(
        terms,
        vec![
            ("a".to_owned(), a_token(&terms), Some(EndCause::Resigned)),
            ("b".to_owned(), t_b, Some(EndCause::Unknown)),
            ("a".to_owned(), a_token(&terms), Some(EndCause::Deleted)),
            ("d".to_owned(), d.token(), None),
        ],
    );
}

/// Once serve has raised tenure's token floor to `old_rev` (issue 20.1), a
/// campaign for `jobs` as `id` is refused while its token would be at or
/// below it; past it (here: by writes; an operator restores with
/// --bump-revision instead, tests/restore.rs) it leads with a token above
/// every earlier one.
async fn above_the_floor(
    etcd: &Etcd,
    c: &Client,
    id: &str,
    old_rev: i64,
) -> tenure::election::Leadership {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let floor = c.floor().await.expect("floor");
        if floor == Some(old_rev) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the floor is {floor:?}, not the old timeline's last revision {old_rev}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let opts = tenure::election::CampaignOptions::new(ttl(30));
    let mut raw = etcd.client().await;
    loop {
        match c.campaign(&name("jobs"), id, &opts).await {
            Ok(tenure::election::Campaigned::Leader(l)) => {
                assert!(l.token() > old_rev, "{} > {old_rev}", l.token());
                return l;
            }
            Err(tenure::election::Error::BelowFloor { floor, token, .. }) => {
                assert_eq!(floor, old_rev);
                assert!(token <= old_rev);
                raw.put("filler", "x", None).await.expect("put");
            }
            Ok(tenure::election::Campaigned::Held(h)) => panic!("held by {h:?}"),
            Err(e) => panic!("{e}"),
        }
    }
}

fn a_token(terms: &[(String, i64, Option<EndCause>)]) -> i64 {
    terms.first().map(|t| t.1).unwrap_or_default()
}

/// An election leading across a restart of `tenure serve` has its series
/// at once (from history), and after its term ends `fencing_token` stays the
/// last term's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_a_restart_come_from_history() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    let a = lead(&c, "jobs", "a", 30).await;
    serve.caught_up(revision(&etcd).await).await;
    assert_eq!(serve.stop().await, Some(0));

    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let m = serve.metrics().await;
    let v = |s: &str| support::metric_value(&m, s);
    assert_eq!(
        v(r#"tenure_election_has_leader{election="jobs"}"#),
        Some(1.0)
    );
    assert_eq!(
        v(r#"tenure_election_fencing_token{election="jobs"}"#),
        Some(a.token() as f64)
    );
    assert_eq!(
        v(r#"tenure_election_leader_info{election="jobs",holder="a"}"#),
        Some(1.0),
        "{m}"
    );
    let t_a = a.token();
    a.resign().await.expect("resign");
    serve.caught_up(revision(&etcd).await).await;
    let m = serve.metrics().await;
    let v = |s: &str| support::metric_value(&m, s);
    assert_eq!(
        v(r#"tenure_election_has_leader{election="jobs"}"#),
        Some(0.0)
    );
    assert_eq!(
        v(r#"tenure_election_fencing_token{election="jobs"}"#),
        Some(t_a as f64),
        "the last term's token, not 0"
    );
    assert_eq!(serve.stop().await, Some(0));
}

/// `/export` streams (chunked, no one big string) and stays valid JSON and
/// CSV; `/api/v1/elections` answers for many elections at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_streams_and_the_election_list_is_one_query() {
    use tenure::events::{Batch, Event};
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let now = tenure::events::now_ms();
    {
        // 3,000 ended terms of one election and 200 other elections, at
        // revision 1 (etcd's own, so serve resumes there).
        let store = tenure::history::Store::open(&db, std::time::Duration::ZERO).expect("store");
        let mut events = Vec::new();
        let term = |election: &str, token: i64, ended: bool| Event {
            revision: 1,
            at_ms: now - 1000 + token % 1000,
            election: election.to_owned(),
            kind: if ended {
                EventKind::TermEnded {
                    token,
                    holder: format!("h{token}"),
                    lease_id: 7,
                    cause: EndCause::Resigned,
                    started_revision: token,
                    started_at_ms: now - 2000,
                    renewals: None,
                }
            } else {
                EventKind::TermStarted {
                    token,
                    holder: format!("h{token}"),
                    lease_id: 7,
                    layout: tenure::election::KeyLayout::Single,
                    previous_holder: None,
                    from_snapshot: false,
                }
            },
        };
        for t in 1..=3000 {
            events.push(term("big", t, false));
            events.push(term("big", t, true));
        }
        for i in 0..200 {
            let e = format!("e{i}");
            events.push(term(&e, 1, false));
            events.push(term(&e, 1, true));
        }
        store
            .write(Batch {
                revision: 1,
                events,
            })
            .await
            .expect("write");
        store.close().await.expect("close");
    }
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let resp = reqwest::get(serve.url("/api/v1/elections/big/export?format=json&from=1h"))
        .await
        .expect("export");
    assert!(resp.status().is_success());
    assert!(
        resp.headers().get("content-length").is_none(),
        "streamed: {:?}",
        resp.headers()
    );
    let doc: serde_json::Value = resp.json().await.expect("valid JSON");
    assert_eq!(doc["election"], "big");
    assert_eq!(doc["terms"].as_array().map(Vec::len), Some(3000));
    assert_eq!(doc["events"].as_array().map(Vec::len), Some(6000));
    assert_eq!(doc["refusals"].as_array().map(Vec::len), Some(0));
    let csv = reqwest::get(serve.url("/api/v1/elections/big/export?format=csv&from=1h"))
        .await
        .expect("export")
        .text()
        .await
        .expect("body");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3001, "one header, one line per term");
    assert!(lines[0].starts_with("election,"), "{}", lines[0]);
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("election,")).count(),
        1,
        "the header once"
    );

    let list: serde_json::Value = reqwest::get(serve.url("/api/v1/elections"))
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    let list = list["elections"].as_array().cloned().unwrap_or_default();
    assert_eq!(list.len(), 201, "{list:?}");
    let big = list.iter().find(|e| e["name"] == "big").expect("big");
    assert_eq!(big["changes_last_hour"], 3000);
    assert_eq!(serve.stop().await, Some(0));
}

/// The cap on tracked elections (issue 23): once it is full, the overview
/// and /readyz's body say so, with what to do, not only the log; a serve
/// under its cap (the default is 100,000) says nothing of the kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cap_on_elections_is_said_on_the_overview_and_in_readyz() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let endpoints = [etcd.endpoint()];
    let roomy = Serve::start(&endpoints, &dir.path().join("roomy.db"), &[], &[]).await;
    let capped = Serve::start(
        &endpoints,
        &dir.path().join("capped.db"),
        &["--max-elections", "2"],
        &[],
    )
    .await;
    roomy.ready().await;
    capped.ready().await;
    let c = Client::connect(&endpoints, "").await.expect("connect");
    let _held: Vec<_> = lead_all(&c, &["cap/a", "cap/b", "cap/c"]).await;
    let rev = revision(&etcd).await;
    roomy.caught_up(rev).await;
    capped.caught_up(rev).await;
    let text = |url: String| async move {
        reqwest::get(url)
            .await
            .expect("GET")
            .text()
            .await
            .expect("body")
    };
    // The capped one: tracks two, says so in both places.
    assert_eq!(capped.metric("tenure_watch_elections").await, Some(2.0));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let ready = loop {
        let r = text(capped.url("/readyz")).await;
        if r.contains("--max-elections 2") || std::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(ready.starts_with("ready: watching at revision"), "{ready}");
    assert!(
        ready.contains("--max-elections 2") && ready.contains("ignored"),
        "readyz says the cap is reached: {ready}"
    );
    let overview = text(capped.url("/")).await;
    assert!(
        overview.contains("id=\"cap-reached\"") && overview.contains("--max-elections 2"),
        "the overview says the cap is reached:\n{overview}"
    );
    // The roomy one: all three, and no word of a cap.
    assert_eq!(roomy.metric("tenure_watch_elections").await, Some(3.0));
    let ready = text(roomy.url("/readyz")).await;
    assert!(!ready.contains("max-elections"), "{ready}");
    assert!(!text(roomy.url("/")).await.contains("cap-reached"));
    for serve in [roomy, capped] {
        assert_eq!(serve.stop().await, Some(0));
    }
}

async fn lead_all(c: &Client, names: &[&str]) -> Vec<tenure::election::Leadership> {
    let mut held = Vec::new();
    for n in names {
        held.push(lead(c, n, "h", 30).await);
    }
    held
}
