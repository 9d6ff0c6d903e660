//! The Patroni harness (tests/support/patroni.rs) against real Patroni 4.1.x
//! and the harness etcd, and what Patroni writes there that issue 21 (tenure
//! watching Patroni's leader election) relies on; docs/patroni-facts.md says
//! the same, key by key. Every put and delete under `/service/<scope>/` is
//! recorded by one etcd watch from revision 1 ([`DcsLog`]), independent of
//! the harness's own view (the REST API), through bootstrap, a planned
//! switchover, the leader's Patroni restarted within the TTL, and a kill -9
//! of the leader's Patroni (failover after the TTL, the old primary's
//! PostgreSQL still a primary).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::patroni::dcs::{DcsEvent, DcsLog};
use support::patroni::{
    PatroniCluster, PatroniOptions, LOOP_WAIT, READY_TIMEOUT, RETRY_TIMEOUT, TTL,
};
use support::{etcd_version, Etcd};

const SCOPE: &str = "pgsvc";
/// The reason of the `history` entry a promotion adds, after a switchover
/// and after a failover alike: PostgreSQL's own words in the timeline
/// history file (no `recovery_target_*` set), which Patroni copies.
const PROMOTION_REASON: &str = "no recovery target specified";

/// The granted TTL of `lease`.
async fn lease_ttl(etcd: &Etcd, lease: i64) -> i64 {
    etcd.client()
        .await
        .lease_time_to_live(lease, None)
        .await
        .expect("lease time-to-live")
        .granted_ttl()
}

/// Waits until `member`'s Patroni has been in touch with etcd `n` more
/// times (its HA loop ran: `dcs_last_seen` of `GET /patroni`, in seconds).
async fn loops(pg: &PatroniCluster, member: &str, n: i64) {
    let seen = |s: Option<Value>| s.and_then(|s| s["dcs_last_seen"].as_i64());
    let first = seen(pg.status(member).await).expect("dcs_last_seen");
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen(pg.status(member).await).is_none_or(|s| s < first + n) {
        assert!(
            Instant::now() < deadline,
            "{member}: {n} loops not within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The member key of `name` once it says `role`, `running` and a timeline
/// (it follows the REST API's state by up to a loop; `timeline` is missing
/// from some puts), checked for what issue 21 reads; and its lease.
async fn member_key(pg: &PatroniCluster, name: &str, role: &str) -> (Value, i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (v, k) = loop {
        let k = pg
            .key(&format!("members/{name}"))
            .await
            .expect("member key");
        let v: Value = serde_json::from_str(&k.value).expect("member key is JSON");
        if v["role"] == role && v["state"] == "running" && v["timeline"].is_i64() {
            break (v, k);
        }
        assert!(
            Instant::now() < deadline,
            "members/{name} never {role}, running, a timeline: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let api = format!("{}/patroni", pg.member_api_url(name));
    assert_eq!(v["api_url"], api, "members/{name}: {v}");
    let conn = format!("postgres://127.0.0.1:{}/postgres", pg.pg_port(name));
    assert_eq!(v["conn_url"], conn, "members/{name}: {v}");
    assert_ne!(
        k.lease, 0,
        "members/{name} is attached to its Patroni's lease"
    );
    (v, k.lease)
}

/// The roles `members/NAME` took in `events`, repeats collapsed.
fn roles(events: &[DcsEvent], name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events
        .iter()
        .filter(|e| e.key == format!("members/{name}") && !e.deleted)
    {
        let role = e.field("role").unwrap_or_default();
        if out.last() != Some(&role) {
            out.push(role);
        }
    }
    out
}

/// The member's roles went `from`, then `via`, then `to`. Patroni writes
/// its member key once per loop: `via` (a promotion or demotion in
/// progress) is missing when it ended between two loops (seen on a loaded
/// host), so it may be skipped, never replaced by something else.
fn passes(roles: &[String], from: &str, via: &str, to: &str, member: &str) {
    assert!(
        roles == [from, via, to] || roles == [from, to],
        "{member}: {roles:?}, expected {from} → ({via}) → {to}"
    );
}

/// Waits for a put of `history` with `n` entries; returns its last entry.
async fn history_entry(log: &DcsLog, n: usize) -> support::patroni::HistoryEntry {
    let e = log
        .wait_for(
            &format!("history with {n} entries"),
            Duration::from_secs(30),
            |e| {
                e.key == "history"
                    && support::patroni::parse_history(&e.value).is_some_and(|h| h.len() == n)
            },
        )
        .await;
    let mut h = support::patroni::parse_history(&e.value).expect("history");
    h.pop().expect("an entry")
}

/// Events after the first `skip` of the record.
fn since(log: &DcsLog, skip: usize) -> Vec<DcsEvent> {
    log.events().into_iter().skip(skip).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patroni_keys_through_bootstrap_switchover_restart_and_crash_failover() {
    let t0 = Instant::now();
    let etcd = Etcd::start().await;
    let log = DcsLog::start(etcd.client().await, &format!("/service/{SCOPE}/")).await;
    let mut summary = vec![format!("etcd: {}", etcd_version())];

    // --- Bootstrap: 3 members race for `initialize`; the winner runs initdb.
    let mut pg = PatroniCluster::start(3, &etcd, SCOPE).await;
    assert_eq!(pg.prefix(), format!("/service/{SCOPE}/"));
    let a = pg.wait_ready(READY_TIMEOUT).await;
    summary.push(format!(
        "bootstrap: {a} leads, all streaming after {:?}",
        t0.elapsed()
    ));
    let ev = log.events();
    let lead = ev.iter().find(|e| e.key == "leader").expect("a leader key");
    assert_eq!(
        (lead.value.as_str(), lead.create_revision),
        (a.as_str(), lead.revision)
    );
    let init: Vec<&DcsEvent> = ev.iter().filter(|e| e.key == "initialize").collect();
    let sysid = pg.status(&a).await.expect("status")["database_system_identifier"].clone();
    assert_eq!(
        init.len(),
        2,
        "initialize: taken empty, then the system id: {init:?}"
    );
    assert_eq!((init[0].value.as_str(), init[0].lease), ("", 0));
    assert_eq!((json!(init[1].value), init[1].lease), (sysid, 0));
    let config = ev.iter().find(|e| e.key == "config").expect("config key");
    assert!(init[1].revision < config.revision && config.revision < lead.revision);
    let cfg = config.json().expect("config is JSON");
    assert_eq!(
        (&cfg["ttl"], &cfg["loop_wait"], &cfg["retry_timeout"]),
        (&json!(TTL), &json!(LOOP_WAIT), &json!(RETRY_TIMEOUT))
    );
    let running_first = ev
        .iter()
        .find(|e| e.key == format!("members/{a}") && e.field("role").as_deref() == Some("primary"));
    assert!(
        running_first.is_some_and(|e| e.revision < lead.revision),
        "the bootstrap primary is up before the leader key exists"
    );
    let mut leases = Vec::new();
    for name in pg.names() {
        let first = ev
            .iter()
            .find(|e| e.key == format!("members/{name}"))
            .expect("member");
        assert_eq!(
            (
                first.field("role").as_deref(),
                first.field("state").as_deref()
            ),
            (Some("uninitialized"), Some("stopped"))
        );
        let role = if name == a { "primary" } else { "replica" };
        leases.push(member_key(&pg, &name, role).await.1);
    }
    leases.dedup();
    assert_eq!(leases.len(), 3, "one lease per Patroni");
    let term_a = pg.key("leader").await.expect("leader key");
    let (_, lease_a) = member_key(&pg, &a, "primary").await;
    assert_eq!(
        term_a.lease, lease_a,
        "the leader key is on the leader's member lease"
    );
    assert_eq!(
        lease_ttl(&etcd, term_a.lease).await,
        TTL as i64,
        "lease TTL = ttl"
    );
    assert!(pg.history().await.is_empty() && pg.key("failover").await.is_none());
    loops(&pg, &a, 3).await;
    assert_eq!(
        pg.key("leader").await,
        Some(term_a.clone()),
        "not rewritten within a term"
    );

    // --- Planned switchover a → b (patronictl, through a's REST API).
    let b = pg.names().into_iter().find(|n| *n != a).expect("a replica");
    let (mark, t) = (log.events().len(), Instant::now());
    pg.switchover(&a, &b).await;
    let call = t.elapsed();
    assert_eq!(pg.wait_ready(READY_TIMEOUT).await, b);
    let h = history_entry(&log, 1).await;
    summary.push(format!(
        "switchover {a} → {b}: patronictl {call:?}, all streaming {:?}",
        t.elapsed()
    ));
    let sw = since(&log, mark);
    let fo: Vec<&DcsEvent> = sw.iter().filter(|e| e.key == "failover").collect();
    assert_eq!(
        fo.len(),
        2,
        "failover key: the request, then cleared: {fo:?}"
    );
    assert_eq!(fo[0].json(), Some(json!({"leader": a, "member": b})));
    assert_eq!(
        (fo[0].lease, fo[1].value.as_str(), fo[1].lease),
        (0, "{}", 0)
    );
    let del = sw
        .iter()
        .find(|e| e.key == "leader" && e.deleted)
        .expect("leader deleted");
    assert_eq!(
        (del.value.as_str(), del.create_revision),
        (a.as_str(), term_a.create_revision)
    );
    let with_del: Vec<&DcsEvent> = sw.iter().filter(|e| e.revision == del.revision).collect();
    assert_eq!(
        with_del.len(),
        1,
        "{a} deletes its leader key alone: {with_del:?}"
    );
    let put = sw
        .iter()
        .find(|e| e.key == "leader" && !e.deleted)
        .expect("new leader key");
    let term_b = pg.key("leader").await.expect("leader key");
    assert_eq!(
        (put.value.as_str(), put.create_revision),
        (b.as_str(), put.revision)
    );
    assert_eq!(
        (term_b.create_revision, term_b.lease),
        (put.revision, put.lease)
    );
    assert!(fo[0].revision < del.revision && del.revision < put.revision);
    assert!(
        put.revision < fo[1].revision,
        "the new leader clears the failover key"
    );
    assert_eq!(put.lease, member_key(&pg, &b, "primary").await.1);
    member_key(&pg, &a, "replica").await;
    assert_eq!((h.timeline, h.reason.as_str()), (1, PROMOTION_REASON));
    assert_eq!(h.leader.as_deref(), Some(b.as_str()));
    assert!(h.at.is_some(), "{h:?}");
    passes(
        &roles(&since(&log, mark), &a),
        "primary",
        "demoted",
        "replica",
        &a,
    );
    passes(
        &roles(&since(&log, mark), &b),
        "replica",
        "promoted",
        "primary",
        &b,
    );
    let gap = put.at.saturating_duration_since(del.at);
    summary.push(format!(
        "  failover key {} → leader deleted +{:?} → {b}'s key +{gap:?} → failover {{}}",
        fo[0].value,
        del.at.saturating_duration_since(fo[0].at)
    ));

    // --- b's Patroni SIGKILLed and started again within the TTL: it takes
    // its own leader key over (same create revision, its new lease).
    let (mark, t) = (log.events().len(), Instant::now());
    pg.kill9(&b);
    pg.restart(&b);
    let retake = log
        .wait_for(
            "the leader key on a new lease",
            Duration::from_secs(60),
            |e| e.key == "leader" && e.revision > term_b.mod_revision,
        )
        .await;
    assert_eq!(pg.wait_ready(READY_TIMEOUT).await, b);
    let term_b2 = pg.key("leader").await.expect("leader key");
    assert!(!retake.deleted, "no delete: {retake:?}");
    assert_eq!(
        (retake.value.as_str(), retake.create_revision),
        (b.as_str(), term_b.create_revision)
    );
    assert_ne!(
        retake.lease, term_b.lease,
        "the restarted Patroni's new lease"
    );
    assert_eq!(term_b2.create_revision, term_b.create_revision);
    // Its member key follows onto the new lease on a later loop: for a
    // moment the two keys are on different leases.
    let moved = log
        .wait_for(
            "the member key on the new lease",
            Duration::from_secs(30),
            |e| e.key == format!("members/{b}") && e.lease == retake.lease,
        )
        .await;
    assert_eq!(term_b2.lease, member_key(&pg, &b, "primary").await.1);
    let rs = since(&log, mark);
    assert!(!rs.iter().any(|e| e.deleted), "nothing deleted: {rs:?}");
    summary.push(format!(
        "restart of {b}'s Patroni: leader key on its new lease after {:?}, member key r{} (leader r{})",
        retake.at - t,
        moved.revision,
        retake.revision
    ));

    // --- Crash failover: b's Patroni SIGKILLed for good.
    let (mark, killed_at) = (log.events().len(), Instant::now());
    let postmaster = pg.kill9(&b);
    assert!(
        !pg.pg_is_in_recovery(&b),
        "{b}'s PostgreSQL runs on as a primary"
    );
    let gone = log
        .wait_for("the leader key deleted", Duration::from_secs(60), |e| {
            e.key == "leader" && e.deleted && e.revision > term_b2.mod_revision
        })
        .await;
    let next = log
        .wait_for("a new leader key", Duration::from_secs(60), |e| {
            e.key == "leader" && !e.deleted && e.revision > gone.revision
        })
        .await;
    let c = next.value.clone();
    assert!(c != b && !c.is_empty(), "{next:?}");
    assert_eq!(pg.wait_ready(READY_TIMEOUT).await, c);
    let h = history_entry(&log, 2).await;
    let (to_delete, to_leader) = (gone.at - killed_at, next.at - killed_at);
    summary.push(format!(
        "kill -9 of {b}'s Patroni: leader key deleted after {to_delete:?}, {c}'s key after {to_leader:?}"
    ));
    let ttl = Duration::from_secs(TTL);
    assert!(
        to_delete >= ttl - Duration::from_secs(2) && to_delete <= ttl + Duration::from_secs(10),
        "the leader key goes with the lease, about one ttl after the last keepalive: {to_delete:?}"
    );
    assert_eq!(
        (gone.value.as_str(), gone.create_revision),
        (b.as_str(), term_b.create_revision)
    );
    let fs = since(&log, mark);
    let mut with_gone: Vec<&str> = fs
        .iter()
        .filter(|e| e.revision == gone.revision)
        .map(|e| e.key.as_str())
        .collect();
    with_gone.sort();
    let member_b = format!("members/{b}");
    assert_eq!(
        with_gone,
        ["leader", member_b.as_str()],
        "the lease's keys, in one revision"
    );
    assert_eq!(
        (next.create_revision, next.lease),
        (next.revision, member_key(&pg, &c, "primary").await.1)
    );
    assert!(
        !fs.iter().any(|e| e.key == "failover"),
        "no failover key in a crash failover"
    );
    assert_eq!((h.timeline, h.reason.as_str()), (2, PROMOTION_REASON));
    assert_eq!(h.leader.as_deref(), Some(c.as_str()));
    // Its member key says replica after the kill only if its data changed
    // before the promotion (a loaded host may not get that far): the
    // replica it was is taken as its first role.
    let c_roles: Vec<String> = std::iter::once("replica".to_owned())
        .chain(
            roles(&since(&log, mark), &c)
                .into_iter()
                .skip_while(|r| r == "replica"),
        )
        .collect();
    passes(&c_roles, "replica", "promoted", "primary", &c);
    assert!(
        !pg.pg_is_in_recovery(&b),
        "{b}'s PostgreSQL a primary still: two primaries"
    );
    assert!(!pg.pg_is_in_recovery(&c));
    assert_eq!(
        pg.postmaster_pid(&b),
        Some(postmaster),
        "the same postmaster throughout"
    );

    // --- The whole record: one create revision per term, terms in order.
    let terms = log.terms();
    let shape: Vec<(&str, i64, usize, usize)> = terms
        .iter()
        .map(|t| (t.leader.as_str(), t.create_revision, t.leases.len(), t.puts))
        .collect();
    let (ra, rb, rc) = (
        term_a.create_revision,
        term_b.create_revision,
        next.revision,
    );
    assert_eq!(
        shape,
        [
            (a.as_str(), ra, 1, 1),
            (b.as_str(), rb, 2, 2),
            (c.as_str(), rc, 1, 1)
        ]
    );
    let mut keys: Vec<String> = log
        .events()
        .iter()
        .map(|e| {
            if e.key.starts_with("members/") {
                "members/*".into()
            } else {
                e.key.clone()
            }
        })
        .collect();
    keys.sort();
    keys.dedup();
    let expected = [
        "config",
        "failover",
        "history",
        "initialize",
        "leader",
        "members/*",
        "status",
    ];
    assert_eq!(keys, expected, "the keys Patroni wrote");
    let status = log
        .of("status")
        .last()
        .and_then(DcsEvent::json)
        .expect("status JSON");
    assert!(
        status["optime"].is_u64() && status["slots"].is_object(),
        "{status}"
    );
    log.assert_open();
    summary.push(format!("status: {status}"));
    let roles_seen = ["uninitialized", "primary", "replica", "demoted", "promoted"];
    let states_seen = [
        "stopped",
        "initializing new cluster",
        "creating replica",
        "starting",
        "running",
        "stopping",
    ];
    for e in log
        .events()
        .iter()
        .filter(|e| e.key.starts_with("members/") && !e.deleted)
    {
        let v = e
            .json()
            .unwrap_or_else(|| panic!("{} is not JSON: {}", e.key, e.value));
        for f in ["api_url", "conn_url", "role", "state", "version"] {
            assert!(v[f].is_string(), "{}: no {f}: {v}", e.key);
        }
        assert!(
            roles_seen.contains(&v["role"].as_str().unwrap_or("")),
            "{}: {v}",
            e.key
        );
        assert!(
            states_seen.contains(&v["state"].as_str().unwrap_or("")),
            "{}: {v}",
            e.key
        );
        if v.get("timeline").is_some() {
            assert_eq!(v["state"], "running", "a timeline only while running: {v}");
        }
    }
    let mut shapes: Vec<String> = log
        .events()
        .iter()
        .filter(|e| e.key.starts_with("members/") && !e.deleted)
        .filter_map(|e| {
            let v = e.json()?;
            let mut fields: Vec<&String> = v.as_object()?.keys().collect();
            fields.sort();
            Some(format!("{}/{}: {fields:?}", v["role"], v["state"]))
        })
        .collect();
    shapes.sort();
    shapes.dedup();
    summary.push(format!(
        "member key fields by role/state:\n  {}",
        shapes.join("\n  ")
    ));
    for t in &terms {
        summary.push(format!(
            "term {}: create {} leases {:x?} puts {} ended {:?}",
            t.leader,
            t.create_revision,
            t.leases,
            t.puts,
            t.ended.map(|(r, _)| r)
        ));
    }
    summary.push(format!("all: {:?}", t0.elapsed()));
    eprintln!("{}\n{}", log.timeline(), summary.join("\n"));
}

/// A namespace other than `/service/`, one member: the keys go under it and
/// nothing under the default namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patroni_namespace_is_configurable() {
    let etcd = Etcd::start().await;
    let mut opts = PatroniOptions::new(1, "solo");
    opts.namespace = "tenure-test/patroni".into();
    let pg = PatroniCluster::start_with(opts, &[etcd.endpoint()]).await;
    assert_eq!(pg.prefix(), "/tenure-test/patroni/solo/");
    let leader = pg.wait_ready(READY_TIMEOUT).await;
    assert_eq!(pg.leader().await.as_deref(), Some(leader.as_str()));
    let mut client = etcd.client().await;
    let all = client
        .get(
            "",
            Some(
                etcd_client::GetOptions::new()
                    .with_all_keys()
                    .with_keys_only(),
            ),
        )
        .await
        .expect("get all keys");
    let keys: Vec<String> = all
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect();
    assert!(
        keys.contains(&"/tenure-test/patroni/solo/leader".to_owned()),
        "{keys:?}"
    );
    assert!(
        keys.iter()
            .all(|k| k.starts_with("/tenure-test/patroni/solo/")),
        "{keys:?}"
    );
    assert!(!pg.pg_is_in_recovery(&leader));
}
