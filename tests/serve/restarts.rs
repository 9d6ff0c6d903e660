//! History exact across restarts of serve, metrics that match it and come
//! from it after a restart, and an explicit gap for a compaction while serve
//! was down.

use etcd_client::CompactionOptions;
use tenure::election::Client;
use tenure::events::{EndCause, EventKind};
use tenure::history::{Query, Reader};

use crate::revision;
use crate::support::fixtures::{lead, name};
use crate::support::{Etcd, Serve};

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
    let v = |s: &str| crate::support::metric_value(&m, s);
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

    let out = tokio::process::Command::new(crate::support::tenure_bin())
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
    let v = |s: &str| crate::support::metric_value(&m, s);
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
    let v = |s: &str| crate::support::metric_value(&m, s);
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
