//! The leadership endpoints: campaign, renew, fence, resign and the history
//! reads of one term; queued HTTP campaigns lead in order, and a caller that
//! hangs up leaves the queue.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::Etcd;
use crate::{code, get, http, post, serve, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_renew_fence_resign_and_history_endpoints() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&etcd, &dir, &["--api-token", TOKEN]).await;
    let t = Some(TOKEN);
    let base = "/api/v1/elections/team%2Fdb";

    let (st, a) = post(
        &s,
        &format!("{base}/campaign"),
        json!({"candidate": "alpha", "ttl_seconds": 5}),
        t,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{a}");
    let (t_a, lease_a) = (
        a["token"].as_i64().expect("token"),
        a["lease_id"].as_i64().expect("lease"),
    );
    assert_eq!(a["ttl_seconds"], 5);

    let (st, held) = post(
        &s,
        &format!("{base}/campaign"),
        json!({"candidate": "beta", "ttl_seconds": 5}),
        t,
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT, "{held}");
    assert_eq!(code(&held), "held");
    assert_eq!(held["error"]["holder"], "alpha");
    assert_eq!(held["error"]["token"], t_a);

    let (st, r) = post(
        &s,
        &format!("{base}/renew"),
        json!({"lease_id": lease_a, "token": t_a}),
        t,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{r}");
    assert!(
        r["ttl_remaining_seconds"].as_i64().is_some_and(|x| x >= 4),
        "{r}"
    );

    let (st, f) = post(
        &s,
        &format!("{base}/fence"),
        json!({"resource": "orders", "token": t_a}),
        t,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{f}");
    assert_eq!(f["accepted"], true);

    let (st, d) = get(&s, base).await;
    assert_eq!(st, StatusCode::OK, "{d}");
    assert_eq!(d["holder"], "alpha");
    assert_eq!(d["token"], t_a);
    assert_eq!(d["lease_id"], lease_a);
    assert!(d["ttl_remaining_seconds"].as_i64().is_some(), "{d}");

    // A waiting campaign takes over once alpha resigns.
    let waiter = {
        let url = s.url(&format!("{base}/campaign"));
        tokio::spawn(async move {
            let resp = http()
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"candidate": "beta", "ttl_seconds": 5, "wait_seconds": 15}))
                .send()
                .await
                .expect("request");
            (
                resp.status(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        })
    };
    let (st, wrong) = post(
        &s,
        &format!("{base}/resign"),
        json!({"token": t_a + 1000}),
        t,
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT, "{wrong}");
    assert_eq!(code(&wrong), "not_holder");
    let (st, ok) = post(&s, &format!("{base}/resign"), json!({"token": t_a}), t).await;
    assert_eq!(st, StatusCode::OK, "{ok}");
    let (st, b) = waiter.await.expect("waiter");
    assert_eq!(st, StatusCode::OK, "{b}");
    let t_b = b["token"].as_i64().expect("token");
    assert!(t_b > t_a);

    // The old term is gone: renew says so, and its token is fenced off.
    let (st, gone) = post(
        &s,
        &format!("{base}/renew"),
        json!({"lease_id": lease_a, "token": t_a}),
        t,
    )
    .await;
    assert_eq!(st, StatusCode::GONE, "{gone}");
    let (st, f) = post(
        &s,
        &format!("{base}/fence"),
        json!({"resource": "orders", "token": t_a}),
        t,
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT, "{f}");
    assert_eq!(f["accepted"], false);
    assert_eq!(f["reason"], "term_ended");

    // History endpoints see all of it once the watcher has.
    let mut raw = etcd.client().await;
    let rev = raw
        .get("x", None)
        .await
        .expect("get")
        .header()
        .expect("h")
        .revision();
    s.caught_up(rev).await;
    let (st, terms) = get(&s, &format!("{base}/terms")).await;
    assert_eq!(st, StatusCode::OK);
    let tokens: Vec<i64> = terms["terms"]
        .as_array()
        .expect("terms")
        .iter()
        .map(|t| t["token"].as_i64().expect("token"))
        .collect();
    assert_eq!(tokens, vec![t_a, t_b]);
    let (st, events) = get(&s, &format!("{base}/events?limit=100")).await;
    assert_eq!(st, StatusCode::OK);
    let types: Vec<&str> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert!(
        types.contains(&"fence_refused") && types.contains(&"term_ended"),
        "{types:?}"
    );
    let (st, list) = get(&s, "/api/v1/elections").await;
    assert_eq!(st, StatusCode::OK);
    let row = &list["elections"][0];
    assert_eq!(
        (
            row["name"].as_str(),
            row["holder"].as_str(),
            row["changes_last_hour"].as_i64()
        ),
        (Some("team/db"), Some("beta"), Some(2))
    );

    let csv = http()
        .get(s.url(&format!("{base}/export?format=csv")))
        .send()
        .await
        .expect("export");
    assert_eq!(csv.status(), StatusCode::OK);
    assert!(csv.headers()["content-disposition"]
        .to_str()
        .expect("header")
        .contains("attachment"));
    let csv = csv.text().await.expect("csv");
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let (st, doc) = get(&s, &format!("{base}/export?format=json&from=1h")).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(doc["terms"].as_array().map(Vec::len), Some(2));
    assert_eq!(doc["refusals"].as_array().map(Vec::len), Some(1));
    let (st, bad) = get(&s, &format!("{base}/export?format=xml")).await;
    assert_eq!(
        (st, code(&bad)),
        (StatusCode::BAD_REQUEST, "invalid_format")
    );
    let (st, bad) = get(&s, &format!("{base}/terms?from=yesterday-ish")).await;
    assert_eq!((st, code(&bad)), (StatusCode::BAD_REQUEST, "invalid_time"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_http_campaigns_lead_in_order_and_a_caller_that_hangs_up_leaves_the_queue() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&etcd, &dir, &["--api-token", TOKEN]).await;
    let t = Some(TOKEN);
    let base = "/api/v1/elections/jobs%2Fqueue";
    let (st, a) = post(
        &s,
        &format!("{base}/campaign"),
        json!({"candidate": "first", "ttl_seconds": 10, "queue": true}),
        t,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{a}");
    let t_a = a["token"].as_i64().expect("token");
    let lease_a = a["lease_id"].as_i64().expect("lease");
    // The term's key is the queued one, named by its lease.
    let mut raw = etcd.client().await;
    let key = format!("election/jobs/queue/{lease_a:x}");
    let kv = raw.get(key.as_str(), None).await.expect("get");
    assert_eq!(kv.kvs().first().map(|kv| kv.create_revision()), Some(t_a));
    // Renew and fence with a queue token.
    let (st, r) = post(
        &s,
        &format!("{base}/renew"),
        json!({"lease_id": lease_a, "token": t_a}),
        t,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{r}");
    let (st, f) = post(
        &s,
        &format!("{base}/fence"),
        json!({"resource": "db", "token": t_a}),
        t,
    )
    .await;
    assert_eq!(
        (st, f["accepted"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{f}"
    );

    // A caller that hangs up while queued: its key leaves the queue at once.
    let count = |raw: &mut etcd_client::Client| {
        let mut raw = raw.clone();
        async move {
            raw.get(
                "election/jobs/queue/",
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .expect("count")
            .count()
        }
    };
    let quitter = {
        let url = s.url(&format!("{base}/campaign"));
        tokio::spawn(async move {
            let _ = http()
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"candidate": "quitter", "ttl_seconds": 30, "queue": true, "wait_seconds": 30}))
                .send()
                .await;
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while count(&mut raw).await < 2 {
        assert!(std::time::Instant::now() < deadline, "quitter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    quitter.abort();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while count(&mut raw).await > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the hung-up caller's key stayed queued (its 30 s lease was not revoked)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A waiting queued candidate takes over when first resigns.
    let waiter = {
        let url = s.url(&format!("{base}/campaign"));
        tokio::spawn(async move {
            let resp = http()
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"candidate": "second", "ttl_seconds": 10, "queue": true, "wait_seconds": 15}))
                .send()
                .await
                .expect("request");
            (
                resp.status(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while count(&mut raw).await < 2 {
        assert!(std::time::Instant::now() < deadline, "second never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Who waits, in order: the API and the election page show it.
    let (st, d) = get(&s, base).await;
    assert_eq!(st, StatusCode::OK, "{d}");
    assert_eq!(d["holder"], "first");
    assert_eq!(d["waiting"][0]["holder"], "second", "{d}");
    assert_eq!(d["waiting"].as_array().map(Vec::len), Some(1), "{d}");
    let page = http()
        .get(s.url("/elections/jobs%2Fqueue"))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    let queue = page
        .split("id=\"queue\"")
        .nth(1)
        .expect("the page lists the queue");
    assert!(queue.contains("second"), "{queue}");
    let (st, r) = post(&s, &format!("{base}/resign"), json!({"token": t_a}), t).await;
    assert_eq!(st, StatusCode::OK, "{r}");
    let (st, b) = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("second answered")
        .expect("task");
    assert_eq!(st, StatusCode::OK, "{b}");
    assert!(b["token"].as_i64().expect("token") > t_a);
}
