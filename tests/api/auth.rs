//! Who may call: reads behind `--read-token`, the bearer scheme in any
//! case, and without auth no call by a foreign name or from a foreign page.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::{Etcd, Serve};
use crate::{code, http, post, serve, TOKEN};

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
