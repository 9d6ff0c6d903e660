//! etcd's own events on a real etcd: alarms and members, once each.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use crate::support::{self, Serve};

async fn wait_events(serve: &Serve, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let url = serve.url("/api/v1/cluster/events?from=1h");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = get_json(&url).await;
        let events = v["events"].as_array().cloned().unwrap_or_default();
        if done(&events) {
            return events;
        }
        assert!(Instant::now() < deadline, "{what}: {events:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// Alarms and membership changes on a real etcd are recorded once each, with
/// their time bounded by the poll; a restarted serve records none of them
/// again, only its own stop and start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarms_and_members_recorded_once_across_a_serve_restart() {
    use etcd_client::{AlarmAction, AlarmOptions, AlarmType, MemberAddOptions};
    let etcd = support::Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("h.db");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let first = wait_events(&serve, "leader and member recorded", |e| {
        count(e, "leader_changed") == 1 && count(e, "member_added") == 1
    })
    .await;
    let mut c = etcd.client().await;
    let me = c.member_list().await.expect("members").members()[0].id();
    assert_eq!(
        first
            .iter()
            .find(|e| e["type"] == "member_added")
            .and_then(|e| e["member_id"].as_str()),
        Some(format!("{me:x}").as_str())
    );

    // The live feed carries etcd's events too (`event: cluster`), even to a
    // subscriber of one election.
    let mut feed = http()
        .get(serve.url("/api/v1/events?election=some%2Felection"))
        .send()
        .await
        .expect("SSE");
    assert!(feed.status().is_success());

    // NOSPACE raised, then cleared.
    let mut on = AlarmOptions::new();
    on.with_member(me);
    c.alarm(AlarmAction::Activate, AlarmType::Nospace, Some(on.clone()))
        .await
        .expect("raise NOSPACE");
    let raised = wait_events(&serve, "alarm raised", |e| count(e, "alarm_raised") == 1).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut text = String::new();
    while !(text.contains("event: cluster") && text.contains("\"type\":\"alarm_raised\"")) {
        let chunk = tokio::time::timeout_at(deadline, feed.chunk())
            .await
            .unwrap_or_else(|_| panic!("no alarm on the live feed: {text}"))
            .expect("feed")
            .expect("feed open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(feed);
    let a = raised
        .iter()
        .find(|e| e["type"] == "alarm_raised")
        .expect("raised");
    assert_eq!(a["alarm"], "nospace");
    assert_eq!(a["member_id"].as_str(), Some(format!("{me:x}").as_str()));
    assert!(
        a["not_before_ms"].as_i64().is_some(),
        "bounded by the previous poll: {a}"
    );
    c.alarm(AlarmAction::Deactivate, AlarmType::Nospace, Some(on))
        .await
        .expect("clear NOSPACE");
    wait_events(&serve, "alarm cleared", |e| count(e, "alarm_cleared") == 1).await;

    // A learner added (never started), then removed.
    let peer = format!("http://127.0.0.1:{}", support::free_port());
    let added = c
        .member_add(
            [peer.as_str()],
            Some(MemberAddOptions::new().with_is_learner()),
        )
        .await
        .expect("add a learner");
    let learner = added.member().expect("the new member").id();
    wait_events(&serve, "learner added", |e| count(e, "member_added") == 2).await;
    c.member_remove(learner).await.expect("remove the learner");
    let events = wait_events(&serve, "learner removed", |e| {
        count(e, "member_removed") == 1
    })
    .await;
    let removed = events
        .iter()
        .find(|e| e["type"] == "member_removed")
        .expect("removed");
    assert_eq!(
        removed["member_id"].as_str(),
        Some(format!("{learner:x}").as_str())
    );

    // Restart serve on the same history: nothing recorded twice.
    assert_eq!(serve.stop().await, Some(0));
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let after = wait_events(&serve, "second start", |e| count(e, "serve_started") == 2).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after2 = wait_events(&serve, "still", |_| true).await;
    assert_eq!(after.len(), after2.len(), "{after2:#?}");
    for (kind, n) in [
        ("leader_changed", 1),
        ("member_added", 2),
        ("member_removed", 1),
        ("alarm_raised", 1),
        ("alarm_cleared", 1),
        ("serve_started", 2),
        ("serve_stopped", 1),
    ] {
        assert_eq!(count(&after2, kind), n, "{kind}: {after2:#?}");
    }
    serve.stop().await;
}

/// A watch reconnect is recorded once the new stream exists, naming the
/// etcd member that serves it: after the member the watcher used is
/// killed, that is one of the others, never the dead one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_reconnect_names_the_member_that_serves_the_new_stream() {
    let mut cluster = support::EtcdCluster::start().await;
    let ids: Vec<String> = (0..cluster.len())
        .map(|i| format!("{:x}", cluster.member_id(i)))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("h.db");
    let serve = Serve::start(&cluster.endpoints(), &db, &[], &[]).await;
    serve.ready().await;
    let url = serve.url("/api/v1/cluster/events?from=1h");
    let reconnects = || async {
        let v = get_json(&url).await;
        v["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["type"] == "watch_reconnected")
            .collect::<Vec<Value>>()
    };
    assert!(reconnects().await.is_empty(), "no reconnect yet");
    // The watcher's stream is on one member; kill each in turn until the
    // stream breaks (the others' kills change nothing for it).
    for i in 0..cluster.len() {
        let killed_at = tenure::events::now_ms();
        cluster.kill(i).await;
        let deadline = Instant::now() + Duration::from_secs(12);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            seen = reconnects().await;
            if !seen.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if let Some(e) = seen.first() {
            println!("[figure] member {} killed: {e}", ids[i]);
            assert_eq!(seen.len(), 1, "recorded once: {seen:#?}");
            let member = e["member_id"]
                .as_str()
                .expect("the serving member is named");
            assert_ne!(member, ids[i], "not the dead member: {e}");
            assert!(
                ids.iter().any(|m| m == member),
                "a member of the cluster: {e}"
            );
            assert!(
                e["at_ms"].as_i64().expect("at") >= killed_at,
                "recorded after the break, when the new stream exists: {e}"
            );
            serve.stop().await;
            return;
        }
        cluster.restart(i).await;
    }
    panic!("no member's death broke the watch: it was on none of them");
}
