//! Many elections: `/export` streams, the election list is one query, and a
//! full cap on elections is said on the overview and in `/readyz`.

use tenure::election::Client;
use tenure::events::{EndCause, EventKind};

use crate::revision;
use crate::support::fixtures::lead;
use crate::support::{Etcd, Serve};

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
