//! The JSON API and the SSE feed of `tenure serve`, against a real etcd:
//! every endpoint, and every bad input with its status.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use reqwest::{Client as Http, StatusCode};
use serde_json::{json, Value};
use support::{Etcd, Serve};

const TOKEN: &str = "s3cret-token";

/// A ready `tenure serve`: its watcher has loaded the snapshot, so what the
/// test does next is seen as it happens.
async fn serve(etcd: &Etcd, dir: &tempfile::TempDir, args: &[&str]) -> Serve {
    let s = Serve::start(
        &[etcd.endpoint()],
        &dir.path().join("h.db"),
        args,
        &[("TENURE_TIMEOUT", "1")],
    )
    .await;
    s.ready().await;
    s
}

fn http() -> Http {
    Http::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("http client")
}

async fn post(s: &Serve, path: &str, body: Value, token: Option<&str>) -> (StatusCode, Value) {
    let mut req = http().post(s.url(path)).json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn get(s: &Serve, path: &str) -> (StatusCode, Value) {
    let resp = http().get(s.url(path)).send().await.expect("request");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<no error code>")
}

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
async fn bad_input_gets_the_right_status_and_changes_nothing() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&etcd, &dir, &["--api-token", TOKEN, "--campaign-rate", "5"]).await;
    let body = json!({"candidate": "x", "ttl_seconds": 5});
    let url = "/api/v1/elections/auth/campaign";

    let (st, v) = post(&s, url, body.clone(), None).await;
    assert_eq!((st, code(&v)), (StatusCode::UNAUTHORIZED, "unauthorized"));
    let (st, v) = post(&s, url, body.clone(), Some("wrong")).await;
    assert_eq!((st, code(&v)), (StatusCode::UNAUTHORIZED, "unauthorized"));
    // Credentials come before the body: a caller without them learns
    // nothing of its schema from a malformed one.
    for malformed in [json!({"candidat": "x"}), json!([1]), json!("x")] {
        let (st, v) = post(&s, url, malformed.clone(), None).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{malformed}"
        );
        assert!(!v.to_string().contains("candidate"), "{v}");
    }
    for bad in [
        "a%2F..%2Fb",
        "..%2Fx",
        "a%2F%2Fb",
        "a%20b",
        "%3Cscript%3E",
        "a%00b",
        &"x".repeat(10_000),
    ] {
        let (st, v) = post(
            &s,
            &format!("/api/v1/elections/{bad}/campaign"),
            body.clone(),
            Some(TOKEN),
        )
        .await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::BAD_REQUEST, "invalid_name"),
            "{bad}"
        );
    }
    // Four times the 16 KiB limit. (A 3 MiB body was refused as well, but
    // the server answers before reading it all, and on a busy machine the
    // client could fail writing the rest before it read the 413.)
    let huge = json!({"candidate": "x".repeat(64 * 1024), "ttl_seconds": 5});
    let (st, v) = post(&s, url, huge, Some(TOKEN)).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );
    let (st, v) = post(
        &s,
        url,
        json!({"candidate": "x", "ttl_seconds": 0}),
        Some(TOKEN),
    )
    .await;
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "invalid_ttl"));
    let (st, v) = post(
        &s,
        url,
        json!({"candidate": "x", "ttl_seconds": 999_999}),
        Some(TOKEN),
    )
    .await;
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "invalid_ttl"));
    let (st, v) = post(
        &s,
        url,
        json!({"candidate": "", "ttl_seconds": 5}),
        Some(TOKEN),
    )
    .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_candidate")
    );
    let (st, v) = post(&s, url, json!({"candidat": "x"}), Some(TOKEN)).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    let (st, v) = post(
        &s,
        "/api/v1/elections/auth/fence",
        json!({"resource": "../etc", "token": 3}),
        Some(TOKEN),
    )
    .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_resource")
    );
    let (st, v) = get(&s, "/api/v1/nowhere").await;
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"));

    // None of that wrote anything to etcd.
    let mut raw = etcd.client().await;
    let all = raw
        .get(
            "",
            Some(
                etcd_client::GetOptions::new()
                    .with_all_keys()
                    .with_count_only(),
            ),
        )
        .await
        .expect("get");
    assert_eq!(all.count(), 0);

    // Past the campaign rate: 429, and etcd's write count stays bounded.
    let mut statuses = Vec::new();
    for i in 0..40 {
        let (st, _) = post(
            &s,
            &format!("/api/v1/elections/rate-{i}/campaign"),
            body.clone(),
            Some(TOKEN),
        )
        .await;
        statuses.push(st);
    }
    let limited = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    let served = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert!(limited > 0, "{statuses:?}");
    let keys = raw
        .get(
            "election/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .expect("get");
    assert_eq!(
        keys.count() as usize,
        served,
        "only served campaigns wrote to etcd"
    );

    // No token configured: mutating calls are refused with how to enable them.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let closed = serve(&etcd, &dir2, &[]).await;
    let (st, v) = post(&closed, url, body, Some(TOKEN)).await;
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "api_disabled"));
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--api-token")),
        "{v}"
    );
}

/// `--read-token`: every read but the probes needs it (bearer or Basic's
/// password), the API token serves too, and nothing is shown without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_the_read_token_when_one_is_set() {
    const READ: &str = "r3ad-only";
    let etcd = Etcd::start().await;
    let mut c = etcd.client().await;
    c.put("election/secret-db", "db-host-7", None)
        .await
        .expect("put");
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&etcd, &dir, &["--api-token", TOKEN, "--read-token", READ]).await;
    let reads = [
        "/",
        "/api/v1/elections",
        "/api/v1/elections/secret-db",
        "/metrics",
        "/timeline",
        "/elections/secret-db",
        "/api/v1/report?format=md",
    ];
    for path in reads {
        let r = http().get(s.url(path)).send().await.expect("GET");
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "{path} without a token"
        );
        assert!(
            r.headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("Basic ")),
            "{path}: a browser is asked for the token"
        );
        let body = r.text().await.expect("body");
        assert!(
            !body.contains("secret-db") && !body.contains("db-host-7"),
            "{path}: {body}"
        );
        let r = http()
            .get(s.url(path))
            .bearer_auth("wrong")
            .send()
            .await
            .expect("GET");
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "{path} with a wrong token"
        );
        for (how, req) in [
            ("bearer", http().get(s.url(path)).bearer_auth(READ)),
            (
                "basic",
                http().get(s.url(path)).basic_auth("anyone", Some(READ)),
            ),
            ("api token", http().get(s.url(path)).bearer_auth(TOKEN)),
        ] {
            let r = req.send().await.expect("GET");
            assert!(
                r.status().is_success(),
                "{path} with the {how}: {}",
                r.status()
            );
        }
    }
    let r = http()
        .get(s.url("/api/v1/elections/secret-db"))
        .basic_auth("u", Some(READ))
        .send()
        .await
        .expect("GET");
    let v: Value = r.json().await.expect("json");
    assert!(
        v.to_string().contains("db-host-7"),
        "the reader sees the holder: {v}"
    );
    // Probes stay open; the read token does not allow mutating calls.
    for probe in ["/healthz", "/readyz"] {
        let r = http().get(s.url(probe)).send().await.expect("GET");
        assert_eq!(r.status(), StatusCode::OK, "{probe}");
    }
    let (st, v) = post(
        &s,
        "/api/v1/elections/secret-db/resign",
        json!({"token": 1}),
        Some(READ),
    )
    .await;
    assert_eq!((st, code(&v)), (StatusCode::UNAUTHORIZED, "unauthorized"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_gives_503_and_history_is_still_served() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&etcd, &dir, &["--no-auth"]).await;
    let (st, a) = post(
        &s,
        "/api/v1/elections/jobs/campaign",
        json!({"candidate": "a", "ttl_seconds": 30}),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{a}");
    s.caught_up(a["token"].as_i64().expect("token")).await;

    etcd.stop();
    let (st, v) = post(
        &s,
        "/api/v1/elections/jobs/campaign",
        json!({"candidate": "b", "ttl_seconds": 30}),
        None,
    )
    .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "etcd_unavailable"),
        "{v}"
    );
    let (st, v) = post(
        &s,
        "/api/v1/elections/jobs/fence",
        json!({"resource": "r", "token": 5}),
        None,
    )
    .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "etcd_unavailable"),
        "{v}"
    );
    let (st, terms) = get(&s, "/api/v1/elections/jobs/terms").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(terms["terms"][0]["holder"], "a");
    let (st, d) = get(&s, "/api/v1/elections/jobs").await;
    assert_eq!(st, StatusCode::OK, "{d}");
    assert_eq!(
        (d["etcd_reachable"].as_bool(), d["holder"].as_str()),
        (Some(false), Some("a"))
    );
    etcd.cont();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_delivers_an_event_after_an_etcd_write() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&etcd, &dir, &["--no-auth"]).await;
    let (st, v) = get(&s, "/api/v1/events?election=..").await;
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "invalid_name"));

    let mut resp = http()
        .get(s.url("/api/v1/events?election=live"))
        .send()
        .await
        .expect("sse");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"]
        .to_str()
        .expect("ct")
        .starts_with("text/event-stream"));
    // Another election's write must not reach this subscriber; ours must.
    let mut raw = etcd.client().await;
    raw.put("election/other", "x", None).await.expect("put");
    let put = raw
        .put("election/live", "holder-1", None)
        .await
        .expect("put");
    let revision = put.header().expect("header").revision();
    // etcd's own events (the cluster poller's first look: `event: cluster`)
    // come whatever the filter and may arrive first: skip them.
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        while !text.contains("\n\n") {
            let chunk = tokio::time::timeout_at(deadline, resp.chunk())
                .await
                .expect("an SSE message in time")
                .expect("read")
                .expect("open");
            text.push_str(&String::from_utf8_lossy(&chunk));
            text = text.trim_start_matches(":\n").to_owned();
        }
        if !text.starts_with("event: cluster\n") {
            break;
        }
        let rest = text.split_once("\n\n").map(|(_, r)| r.to_owned());
        text = rest
            .unwrap_or_default()
            .trim_start_matches(":\n")
            .to_owned();
    }
    assert!(text.contains("event: term_started"), "{text}");
    assert!(text.contains(&format!("id: {revision}")), "{text}");
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("data line");
    let event: Value = serde_json::from_str(data).expect("json");
    assert_eq!(
        (event["election"].as_str(), event["holder"].as_str()),
        (Some("live"), Some("holder-1"))
    );
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

/// A term that ended while serve was down is recorded by the replay at
/// restart: its end happened at or before the recorded moment, so its
/// duration is a range. The API says so (`duration_bounds_seconds`), and
/// the election page's events name the range, never one exact figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_duration_is_given_as_its_bounds() {
    use support::fixtures::lead;
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = tenure::election::Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let s = serve(&etcd, &dir, &[]).await;
    let live = lead(&c, "seen", "a", 30).await;
    let l = lead(&c, "replayed", "b", 30).await;
    let token = l.token();
    tokio::time::sleep(Duration::from_millis(300)).await;
    live.resign().await.expect("resign");
    let mut raw = etcd.client().await;
    let rev = raw
        .get("x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    s.caught_up(rev).await;
    assert_eq!(s.stop().await, Some(0));
    tokio::time::sleep(Duration::from_millis(300)).await;
    l.resign().await.expect("resign while serve is down");
    let s = serve(&etcd, &dir, &[]).await;
    let rev = raw
        .get("x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    s.caught_up(rev).await;

    let (st, v) = get(&s, "/api/v1/elections/replayed/terms").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let t = &v["terms"][0];
    assert_eq!(t["token"].as_i64(), Some(token), "{v}");
    let recorded = t["duration_seconds"].as_f64().expect("ended");
    let bounds = &t["duration_bounds_seconds"];
    let (least, most) = (bounds[0].as_f64(), bounds[1].as_f64());
    assert_eq!(
        most,
        Some(recorded),
        "the start was seen: at most the recorded figure; {v}"
    );
    assert!(
        least.is_some_and(|l| (0.0..recorded).contains(&l) && l >= 0.3),
        "the end was replayed: at least from the last moment serve watched (it resigned 0.3 s \
         after it had led that long); {v}"
    );
    let (_, seen) = get(&s, "/api/v1/elections/seen/terms").await;
    assert_eq!(
        seen["terms"][0]["duration_bounds_seconds"],
        Value::Null,
        "{seen}"
    );
    let page = http()
        .get(s.url("/elections/replayed"))
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("body");
    let ended = page
        .lines()
        .find(|l| l.contains(&format!("term {token} ended")))
        .unwrap_or_else(|| panic!("no end event on the page:\n{page}"));
    assert!(ended.contains('–'), "the event names the range: {ended}");
    s.stop().await;
}

/// A POST of `body` to `path` with this `Host` and `Origin` (`None`: the
/// client's own Host, no Origin) and no credential.
async fn post_from(
    s: &Serve,
    path: &str,
    body: Value,
    host: Option<&str>,
    origin: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = http().post(s.url(path)).json(&body);
    if let Some(h) = host {
        req = req.header(reqwest::header::HOST, h);
    }
    if let Some(o) = origin {
        req = req.header(reqwest::header::ORIGIN, o);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A serve without API auth (`--no-auth`, as `tenure dev` runs) takes a
/// mutating call addressed to its address or `localhost`, never one
/// addressed by a name a web page could have made resolve to it (DNS
/// rebinding: the browser sends `Host: evil.example`), nor one from
/// another site's page (a foreign `Origin`); `--allowed-host` names one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_a_call_by_a_foreign_name_or_from_a_foreign_page_changes_nothing() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&etcd, &dir, &["--no-auth", "--allowed-host", "tenure.test"]).await;
    let port = s
        .url("")
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let evil = format!("evil.example:{port}");
    let base = "/api/v1/elections/rebound";
    let calls = [
        ("campaign", json!({"candidate": "evil", "ttl_seconds": 5})),
        ("renew", json!({"lease_id": 1, "token": 1})),
        ("resign", json!({"token": 1})),
        ("fence", json!({"resource": "orders", "token": 1})),
    ];
    for (call, body) in &calls {
        let path = format!("{base}/{call}");
        let (st, v) = post_from(&s, &path, body.clone(), Some(&evil), None).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::FORBIDDEN, "host_not_allowed"),
            "{call}: {v}"
        );
        let said = v["error"]["message"].as_str().unwrap();
        assert!(said.contains("--allowed-host"), "{said}");
        // Its own Origin does not make a rebound name right.
        let origin = format!("http://{evil}");
        let (st, v) = post_from(&s, &path, body.clone(), Some(&evil), Some(&origin)).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::FORBIDDEN, "host_not_allowed"),
            "{call}: {v}"
        );
    }
    let mut raw = etcd.client().await;
    let held = raw.get("election/rebound", None).await.unwrap();
    assert!(held.kvs().is_empty(), "a refused campaign wrote its key");

    // Addressed by its address: taken.
    let (st, won) = post_from(
        &s,
        &format!("{base}/campaign"),
        calls[0].1.clone(),
        None,
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{won}");
    let token = won["token"].as_i64().unwrap();
    let fence = json!({"resource": "orders", "token": token});
    let fence_path = format!("{base}/fence");
    // From another site's page, with the right Host: refused.
    for origin in ["http://evil.example", "null", "https://127.0.0.1:1"] {
        let (st, v) = post_from(&s, &fence_path, fence.clone(), None, Some(origin)).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::FORBIDDEN, "origin_not_allowed"),
            "{origin}: {v}"
        );
    }
    let (st, v) = post_from(
        &s,
        &format!("{base}/resign"),
        json!({"token": token}),
        None,
        Some("http://evil.example"),
    )
    .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::FORBIDDEN, "origin_not_allowed"),
        "{v}"
    );
    // Its own origin, localhost and an --allowed-host name: taken.
    let own = format!("http://127.0.0.1:{port}");
    let localhost = format!("localhost:{port}");
    let named = format!("tenure.test:{port}");
    for (host, origin) in [
        (None, Some(own.as_str())),
        (Some(localhost.as_str()), None),
        (Some(named.as_str()), Some("http://tenure.test")),
        (Some(named.as_str()), Some(&format!("http://{named}")[..])),
    ] {
        let (st, v) = post_from(&s, &fence_path, fence.clone(), host, origin).await;
        assert_eq!(st, StatusCode::OK, "{host:?} {origin:?}: {v}");
        assert_eq!(v["accepted"], true);
    }
    let (st, v) = post_from(
        &s,
        &format!("{base}/resign"),
        json!({"token": token}),
        None,
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
}

/// The bearer scheme is case-insensitive (RFC 7235): `bearer TOKEN` is
/// the token, for a mutating call as for a read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_taken_in_any_case() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&etcd, &dir, &["--api-token", TOKEN, "--read-token", "r"]).await;
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let resp = http()
            .post(s.url("/api/v1/elections/cased/campaign"))
            .header(reqwest::header::AUTHORIZATION, format!("{scheme} {TOKEN}"))
            .json(&json!({"candidate": "c", "ttl_seconds": 5}))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(status, StatusCode::OK, "{scheme}: {v}");
        let token = v["token"].as_i64().unwrap();
        let resp = http()
            .post(s.url("/api/v1/elections/cased/resign"))
            .header(reqwest::header::AUTHORIZATION, format!("{scheme} {TOKEN}"))
            .json(&json!({"token": token}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{scheme}");
        let read = http()
            .get(s.url("/api/v1/elections"))
            .header(reqwest::header::AUTHORIZATION, format!("{scheme} r"))
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), StatusCode::OK, "{scheme}");
    }
}
