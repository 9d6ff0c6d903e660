//! The pages with a real etcd.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tenure::events::{now_ms, Batch};

use crate::app::*;
use crate::html::*;
use crate::story::*;
use crate::support;

/// The current leader's TTL comes from etcd when it answers, and the note
/// about etcd disappears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_shows_etcds_leader_when_reachable() {
    let etcd = support::Etcd::start().await;
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(30, None).await.expect("grant").id();
    let put = raw
        .put(
            "election/team/db",
            "scene-03",
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    let token = put.header().expect("header").revision();

    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_store(&dir).await;
    let now = now_ms();
    write(
        &store,
        vec![Batch {
            revision: token,
            events: vec![ev(
                token,
                now - 5 * MIN,
                "team/db",
                started(token, "scene-03", None),
            )],
        }],
    )
    .await;
    let app = serve(&store, etcd.endpoint(), true).await;
    let (status, body) = app.get("/elections/team%2Fdb").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.contains("etcd unreachable"), "{body}");
    assert!(body.contains("etcd reachable"));
    assert!(body.contains("from etcd"), "{body}");
    assert!(body.contains(&format!("{lease:x}")), "the lease id, in hex");
    let ttl = body
        .split("<dt>TTL left</dt><dd class=\"num\">")
        .nth(1)
        .expect("ttl");
    let ttl: i64 = ttl
        .split(' ')
        .next()
        .expect("n")
        .parse()
        .expect("ttl number");
    assert!((1..=30).contains(&ttl), "{ttl}");
    assert_eq!(term_tokens(svg(&body)), [token]);

    // An election only etcd knows (the history has not caught up yet):
    // shown, not 404.
    raw.put("election/fresh", "newcomer", None)
        .await
        .expect("put");
    let (status, body) = app.get("/elections/fresh").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("newcomer"));
    assert!(body.contains("has not recorded token"));
    // Nobody leads and no history: 404.
    let (status, _) = app.get("/elections/nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// `<script>` as the value of a real leader key, through `tenure serve`
/// (watcher → history → pages): shown as text, never as markup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_holder_from_etcd_is_escaped_through_tenure_serve() {
    let etcd = support::Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = support::Serve::start(&[etcd.endpoint()], &dir.path().join("h.db"), &[], &[]).await;
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(60, None).await.expect("grant").id();
    let put = raw
        .put(
            "election/xss",
            XSS,
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    serve
        .caught_up(put.header().expect("header").revision())
        .await;

    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let resp = http().get(serve.url("/")).send().await.expect("GET /");
        let body = resp.text().await.expect("body");
        if body.contains("href=\"/elections/xss\"") {
            break body;
        }
        assert!(Instant::now() < deadline, "xss never listed: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        !body.contains(XSS) && !body.contains("<script>alert"),
        "{body}"
    );
    assert!(body.contains(XSS_ESCAPED), "{body}");
    let resp = http()
        .get(serve.url("/elections/xss"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.text().await.expect("body");
    assert!(
        !body.contains(XSS) && !body.contains("<script>alert"),
        "{body}"
    );
    assert!(body.contains(XSS_ESCAPED));
    assert!(body.contains("from etcd"), "{body}");
    assert_eq!(term_tokens(svg(&body)).len(), 1);
    serve.stop().await;
}

/// A control or bidirectional character a page or the report shows raw:
/// any C0 or C1 control or DEL but the line breaks and tabs the text lays
/// out itself, and the bidirectional marks, embeddings, overrides and
/// isolates (Unicode's list, not tenure's).
fn raw_hidden(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            let control = matches!(c, '\0'..='\u{1f}' | '\u{7f}'..='\u{9f}') && !matches!(c, '\n' | '\t');
            let bidi = matches!(
                c,
                '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
            );
            control || bidi
        })
        .collect()
}

/// NUL, ESC and U+202E (which reverses what follows it as displayed) in
/// the value of a real leader key, through `tenure serve` (watcher →
/// history → pages, report): each shown as its escape (`\u{1b}`), none
/// raw, on the overview, the election page (its SVG), /timeline and the
/// Markdown report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_with_controls_and_bidi_characters_is_shown_escaped_everywhere() {
    const HOLDER: &str = "adm\0in\u{1b}[2J\u{202e}evil\u{85}";
    let etcd = support::Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = support::Serve::start(&[etcd.endpoint()], &dir.path().join("h.db"), &[], &[]).await;
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(60, None).await.expect("grant").id();
    let put = raw
        .put(
            "election/ctl",
            HOLDER,
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    serve
        .caught_up(put.header().expect("header").revision())
        .await;
    let get = |path: String| {
        let url = serve.url(&path);
        async move {
            let resp = http().get(url).send().await.expect("GET");
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            resp.text().await.expect("body")
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !get("/".into()).await.contains("href=\"/elections/ctl\"") {
        assert!(Instant::now() < deadline, "ctl never listed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let from = now_ms() / 1000 - 600;
    let to = from + 1200;
    for path in [
        "/".to_owned(),
        "/elections/ctl?window=1h".to_owned(),
        format!("/timeline?from={from}&to={to}"),
        format!("/api/v1/report?from={from}&to={to}&format=md"),
    ] {
        let body = get(path.clone()).await;
        assert_eq!(raw_hidden(&body), Vec::<char>::new(), "{path}: {body}");
        for escaped in ["\\u{0}", "\\u{1b}", "\\u{202e}", "\\u{85}"] {
            assert!(body.contains(escaped), "{path} lacks {escaped}: {body}");
        }
    }
    serve.stop().await;
}
