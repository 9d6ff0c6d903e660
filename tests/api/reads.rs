//! What the history serves: with etcd down (a 503 for what needs etcd), and
//! a duration replayed at restart as its bounds.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::Etcd;
use crate::{code, get, http, post, serve};

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

/// A term that ended while serve was down is recorded by the replay at
/// restart: its end happened at or before the recorded moment, so its
/// duration is a range. The API says so (`duration_bounds_seconds`), and
/// the election page's events name the range, never one exact figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_duration_is_given_as_its_bounds() {
    use crate::support::fixtures::lead;
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
