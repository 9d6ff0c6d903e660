//! `tenure serve` end to end: watcher → metrics, history; exactly-once
//! history across restarts; an explicit gap after compaction.

mod support;

use etcd_client::CompactionOptions;
use support::{Etcd, Serve};
use tenure::election::{CampaignOptions, Campaigned, Client, ElectionName, Leadership, Ttl};
use tenure::events::{EndCause, EventKind};
use tenure::history::{Query, Reader};

fn name(s: &str) -> ElectionName {
    ElectionName::new(s).expect("name")
}

async fn lead(c: &Client, n: &str, id: &str) -> Leadership {
    let opts = CampaignOptions::new(Ttl::from_secs(30).expect("ttl"));
    match c.campaign(&name(n), id, &opts).await.expect("campaign") {
        Campaigned::Leader(l) => l,
        Campaigned::Held(h) => panic!("held by {h:?}"),
    }
}

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

    let a = lead(&c, "orders", "a").await;
    let t_a = a.token();
    assert!(a.fence("db").await.expect("fence").accepted);
    a.resign().await.expect("resign");
    let b = lead(&c, "orders", "b").await;
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
    assert_eq!(
        v(r#"tenure_election_term_ends_total{cause="resigned",election="orders"}"#),
        Some(1.0)
    );
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
    let cc = lead(&c, "orders", "c").await;
    c.depose(&name("orders")).await.expect("depose");
    drop(cc);
    let d = lead(&c, "orders", "d").await;

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
    let a = lead(&c, "jobs", "a").await;
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.caught_up(revision(&etcd).await).await;
    assert_eq!(serve.stop().await, Some(0));

    let t_a = a.token();
    a.resign().await.expect("resign");
    let b = lead(&c, "jobs", "b").await;
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
