//! The FIFO queue layout (issue 13) against a real etcd and etcd's own
//! candidates (`etcdctl elect`, which is Go's `concurrency.Election`):
//! tenure candidates queue together with them, in CreateRevision order,
//! across resign, expiry and a killed candidate; the fence takes queue
//! tokens; resign deletes only the term's own key.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use etcd_client::GetOptions;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::{tenure_bin, Etcd};
use tenure::election::{
    CampaignOptions, Client, ElectionName, FenceReason, KeyLayout, Leadership, Ttl,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

fn name(s: &str) -> ElectionName {
    ElectionName::new(s).expect("name")
}

async fn client(etcd: &Etcd) -> Client {
    Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect")
}

fn queued(ttl: u64) -> CampaignOptions {
    CampaignOptions::new(Ttl::from_secs(ttl).expect("ttl")).queued()
}

fn etcdctl_elect(etcd: &Etcd, key: &str, value: &str) -> tokio::process::Child {
    etcd.etcdctl_elect(key, value)
}

/// The keys queued under `election/<name>/`, oldest first.
async fn queued_keys(etcd: &Etcd, n: &str) -> Vec<etcd_client::KeyValue> {
    let mut raw = etcd.client().await;
    let prefix = format!("election/{n}/");
    raw.get(
        prefix.as_str(),
        Some(GetOptions::new().with_prefix().with_sort(
            etcd_client::SortTarget::Create,
            etcd_client::SortOrder::Ascend,
        )),
    )
    .await
    .expect("get")
    .kvs()
    .to_vec()
}

/// The values queued under `election/<name>/`, oldest first.
async fn queue(etcd: &Etcd, n: &str) -> Vec<String> {
    queued_keys(etcd, n)
        .await
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
        .collect()
}

async fn queue_is(etcd: &Etcd, n: &str, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let q = queue(etcd, n).await;
        if q == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "queue of {n} is {q:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn waiter(c: &Client, n: &ElectionName, id: &str, ttl: u64) -> JoinHandle<Leadership> {
    let (c, n, id) = (c.clone(), n.clone(), id.to_owned());
    tokio::spawn(async move {
        c.campaign_wait(&n, &id, &queued(ttl), None)
            .await
            .expect("campaign")
    })
}

async fn won(h: JoinHandle<Leadership>) -> Leadership {
    tokio::time::timeout(Duration::from_secs(15), h)
        .await
        .expect("won in time")
        .expect("task")
}

/// The first line `etcdctl elect` prints once elected. The rest of its
/// output is drained, not dropped: etcdctl 3.5 writes again when it resigns
/// on SIGINT, and a closed pipe would kill it with SIGPIPE before it
/// deletes its key (found: 2 runs in 6 on etcd 3.5.1 waited 60 s for the
/// key's lease).
async fn elected(child: &mut Child) -> String {
    let out = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(out).lines();
    let first = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
        .await
        .expect("etcdctl elect was elected")
        .expect("read")
        .expect("a line");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenure_and_etcdctl_candidates_form_one_fifo_queue() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("fifo");
    let key = c.keys().leader_key(&n);

    // e1 (etcdctl) leads; then queue: t-killed (a tenure campaign process
    // that is killed -9 while waiting), t2, e2 (etcdctl), t3.
    let mut e1 = etcdctl_elect(&etcd, &key, "e1");
    assert!(elected(&mut e1).await.starts_with(&format!("{key}/")));
    let mut killed = Command::new(tenure_bin())
        .args([
            "campaign", "fifo", "--queue", "--wait", "--ttl", "2", "--id", "t-killed",
        ])
        .args(["--", "sleep", "600"])
        .env("TENURE_ENDPOINTS", etcd.endpoint())
        .env_remove("TENURE_PREFIX")
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    queue_is(&etcd, "fifo", &["e1", "t-killed"]).await;
    let t2 = waiter(&c, &n, "t2", 10);
    queue_is(&etcd, "fifo", &["e1", "t-killed", "t2"]).await;
    let mut e2 = etcdctl_elect(&etcd, &key, "e2");
    queue_is(&etcd, "fifo", &["e1", "t-killed", "t2", "e2"]).await;
    let t3 = waiter(&c, &n, "t3", 10);
    queue_is(&etcd, "fifo", &["e1", "t-killed", "t2", "e2", "t3"]).await;
    let status = c.leader(&n).await.expect("leader").expect("leads");
    assert_eq!(
        (status.leader.holder.as_str(), status.leader.layout),
        ("e1", KeyLayout::Queue)
    );
    let waiting: Vec<&str> = status.waiting.iter().map(|w| w.holder.as_str()).collect();
    assert_eq!(
        waiting,
        ["t-killed", "t2", "e2", "t3"],
        "leader shows who waits, in order"
    );

    // A killed candidate's key expires; the queue keeps its order.
    kill(
        Pid::from_raw(killed.id().expect("pid") as i32),
        Signal::SIGKILL,
    )
    .expect("kill");
    let _ = killed.wait().await;
    queue_is(&etcd, "fifo", &["e1", "t2", "e2", "t3"]).await;
    assert!(!t2.is_finished(), "t2 waits behind e1");

    // e1 resigns (etcdctl resigns on SIGINT): t2, next in line, leads.
    kill(Pid::from_raw(e1.id().expect("pid") as i32), Signal::SIGINT).expect("SIGINT");
    let t2 = won(t2).await;
    assert_eq!(
        c.leader(&n)
            .await
            .expect("leader")
            .expect("leads")
            .leader
            .holder,
        "t2"
    );
    assert!(t2.token() > status.leader.token, "tokens grow");
    assert!(!t3.is_finished(), "t3 waits behind e2");

    // t2 resigns: e2 (etcdctl) is elected.
    let t2_token = t2.token();
    t2.resign().await.expect("resign");
    let line = elected(&mut e2).await;
    assert!(line.starts_with(&format!("{key}/")), "{line}");
    assert_eq!(
        c.leader(&n)
            .await
            .expect("leader")
            .expect("leads")
            .leader
            .holder,
        "e2"
    );
    queue_is(&etcd, "fifo", &["e2", "t3"]).await;

    // e2 goes: t3 leads, with the highest token so far.
    kill(Pid::from_raw(e2.id().expect("pid") as i32), Signal::SIGINT).expect("SIGINT");
    let t3 = won(t3).await;
    assert!(t3.token() > t2_token);
    assert_eq!(t3.key(), format!("{key}/{:x}", t3.lease_id()));
    t3.resign().await.expect("resign");
    queue_is(&etcd, "fifo", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_expiry_hands_over_in_order() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("expiry");
    // The leader's lease expires (keepalive never starts: a raw lease).
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(2, None).await.expect("grant").id();
    raw.put(
        format!("election/expiry/{lease:x}"),
        "frozen",
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .expect("put");
    let a = waiter(&c, &n, "a", 10);
    queue_is(&etcd, "expiry", &["frozen", "a"]).await;
    let b = waiter(&c, &n, "b", 10);
    queue_is(&etcd, "expiry", &["frozen", "a", "b"]).await;
    let a = won(a).await;
    assert!(!b.is_finished(), "b waits behind a");
    assert_eq!(
        c.leader(&n)
            .await
            .expect("leader")
            .expect("leads")
            .leader
            .holder,
        "a"
    );
    a.resign().await.expect("resign");
    let b = won(b).await;
    b.resign().await.expect("resign");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_takes_queue_tokens() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("fenced");
    let first = c
        .campaign_wait(&n, "first", &queued(10), None)
        .await
        .expect("first leads");
    let second = waiter(&c, &n, "second", 10);
    queue_is(&etcd, "fenced", &["first", "second"]).await;

    // The holder's own fence, and the fence by token alone.
    assert!(first.fence("db").await.expect("fence").accepted);
    let d = c.fence(&n, "db", first.token()).await.expect("fence");
    assert!(d.accepted, "same term again: {d:?}");
    assert_eq!(d.current_token, Some(first.token()));
    // The waiter's key is queued but does not lead: refused.
    let waiting_token = queued_keys(&etcd, "fenced")
        .await
        .last()
        .expect("a waiter")
        .create_revision();
    let d = c.fence(&n, "db", waiting_token).await.expect("fence");
    assert!(!d.accepted, "a waiting candidate's token: {d:?}");
    assert_eq!(d.reason, Some(FenceReason::TermEnded));
    // proclaim moves the value, not the token.
    first.proclaim("first-v2").await.expect("proclaim");
    let status = c.leader(&n).await.expect("leader").expect("leads");
    assert_eq!(
        (status.leader.holder.as_str(), status.leader.token),
        ("first-v2", first.token())
    );

    let old = first.token();
    first.resign().await.expect("resign");
    let second = won(second).await;
    assert!(second.fence("db").await.expect("fence").accepted);
    let d = c.fence(&n, "db", old).await.expect("fence");
    assert!(!d.accepted);
    assert_eq!(d.reason, Some(FenceReason::StaleToken), "{d:?}");
    let d = c.fence(&n, "orders", old).await.expect("fence");
    assert_eq!(d.reason, Some(FenceReason::TermEnded), "{d:?}");
    // guarded_txn by token finds the queued key.
    c.guarded_txn(&n, second.token(), vec![])
        .await
        .expect("guarded txn of the current queue term");
    assert!(c.guarded_txn(&n, old, vec![]).await.is_err());
    let last = second.token();
    second.resign().await.expect("resign");
    let d = c.fence(&n, "db", last).await.expect("fence");
    assert_eq!(d.reason, Some(FenceReason::NoLeader), "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_queues_and_leader_shows_the_queue_term() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("cli");
    let holder = c
        .campaign_wait(&n, "lib", &queued(10), None)
        .await
        .expect("lib leads");
    let mut cli = Command::new(tenure_bin())
        .args([
            "campaign", "cli", "--queue", "--wait", "--ttl", "4", "--id", "cli-1",
        ])
        .args(["--", "sh", "-c", "echo \"$TENURE_TOKEN\"; exec sleep 600"])
        .env("TENURE_ENDPOINTS", etcd.endpoint())
        .env_remove("TENURE_PREFIX")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    queue_is(&etcd, "cli", &["lib", "cli-1"]).await;
    holder.resign().await.expect("resign");
    let mut out = BufReader::new(cli.stdout.take().expect("stdout")).lines();
    let token: i64 = tokio::time::timeout(Duration::from_secs(15), out.next_line())
        .await
        .expect("the command ran")
        .expect("read")
        .expect("line")
        .trim()
        .parse()
        .expect("token");
    let status = c.leader(&n).await.expect("leader").expect("leads");
    assert_eq!(status.leader.holder, "cli-1");
    assert_eq!(status.leader.layout, KeyLayout::Queue);
    assert_eq!(status.leader.token, token);
    kill(
        Pid::from_raw(cli.id().expect("pid") as i32),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let code = cli.wait().await.expect("wait").code();
    assert_eq!(code, Some(143));
    queue_is(&etcd, "cli", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_key_was_deleted_does_not_lead_beside_its_successor() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("kicked");
    let a = c
        .campaign_wait(&n, "a", &queued(10), None)
        .await
        .expect("a leads");
    let w1 = waiter(&c, &n, "w1", 10);
    queue_is(&etcd, "kicked", &["a", "w1"]).await;
    let w2 = waiter(&c, &n, "w2", 10);
    queue_is(&etcd, "kicked", &["a", "w1", "w2"]).await;
    // An operator removes w1's queued key by hand.
    let mut raw = etcd.client().await;
    let w1_key = queued_keys(&etcd, "kicked").await[1].key().to_vec();
    raw.delete(w1_key, None).await.expect("delete w1's key");
    a.resign().await.expect("a resigns");
    let w2 = won(w2).await;
    // w1 saw a's key go too, but its own key is gone: it queues again,
    // behind w2, and does not lead.
    queue_is(&etcd, "kicked", &["w2", "w1"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!w1.is_finished(), "w1 led without a key, beside w2");
    assert_eq!(
        c.leader(&n)
            .await
            .expect("leader")
            .expect("leads")
            .leader
            .holder,
        "w2"
    );
    w2.resign().await.expect("resign");
    won(w1).await.resign().await.expect("resign");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_key_waiters_behind_a_queue_leader_do_not_wake_each_other() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("mixed");
    let q = c
        .campaign_wait(&n, "q", &queued(10), None)
        .await
        .expect("q leads");
    let single = |id: &str| {
        let (c, n, id) = (c.clone(), n.clone(), id.to_owned());
        tokio::spawn(async move {
            let opts = CampaignOptions::new(Ttl::from_secs(10).expect("ttl"));
            c.campaign_wait(&n, &id, &opts, None)
                .await
                .expect("campaign")
        })
    };
    let (s1, s2) = (single("s1"), single("s2"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut raw = etcd.client().await;
    let before = raw
        .get("x", None)
        .await
        .expect("get")
        .header()
        .map(|h| h.revision());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = raw
        .get("x", None)
        .await
        .expect("get")
        .header()
        .map(|h| h.revision());
    let writes = after.unwrap_or(0) - before.unwrap_or(0);
    println!("[figure] two single-key waiters behind a queue leader: {writes} revisions in 2 s");
    assert!(
        writes <= 2,
        "the waiters keep writing: {writes} revisions in 2 s"
    );
    assert!(!s1.is_finished() && !s2.is_finished());
    // The queue leader goes: one of them leads.
    q.resign().await.expect("resign");
    let (mut s1, mut s2) = (s1, s2);
    let (leader, other) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            l = &mut s1 => (l.expect("task"), s2),
            l = &mut s2 => (l.expect("task"), s1),
        }
    })
    .await
    .expect("a single-key waiter took over");
    assert_eq!(
        c.leader(&n)
            .await
            .expect("leader")
            .expect("leads")
            .leader
            .token,
        leader.token()
    );
    leader.resign().await.expect("resign");
    won(other).await.resign().await.expect("resign");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_refuses_a_younger_single_key_beside_a_queue_leader() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("fmix");
    let q = c
        .campaign_wait(&n, "q", &queued(10), None)
        .await
        .expect("q leads");
    assert!(q.fence("db").await.expect("fence").accepted);
    // A single-key client that does not know the queue layout writes its
    // key anyway: younger than q's, so it does not lead.
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(30, None).await.expect("grant").id();
    let put = raw
        .put(
            "election/fmix",
            "intruder",
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    let intruder = put.header().expect("header").revision();
    for resource in ["db", "fresh"] {
        let d = c.fence(&n, resource, intruder).await.expect("fence");
        assert!(!d.accepted, "{resource}: a term that does not lead: {d:?}");
        assert_eq!(d.reason, Some(FenceReason::TermEnded), "{d:?}");
        assert_eq!(d.current_token, Some(q.token()));
    }
    assert!(c.guarded_txn(&n, intruder, vec![]).await.is_err());
    // q, the leader, still writes.
    assert!(c.fence(&n, "db", q.token()).await.expect("fence").accepted);
    assert!(c.guarded_txn(&n, q.token(), vec![]).await.is_ok());
    let _ = raw.lease_revoke(lease).await;
    q.resign().await.expect("resign");
}

/// One JSON line of `tenure observe --queue --json`: (leader's holder and
/// token, the waiters' (holder, token) in order).
type Seen = (Option<(String, i64)>, Vec<(String, i64)>);

fn seen_of(line: &str) -> Seen {
    let v: serde_json::Value = serde_json::from_str(line).expect("observe prints JSON");
    let who = |l: &serde_json::Value| {
        (
            l["holder"].as_str().expect("holder").to_owned(),
            l["token"].as_i64().expect("token"),
        )
    };
    let leader = (!v["leader"].is_null()).then(|| who(&v["leader"]));
    let waiting = v["waiting"]
        .as_array()
        .expect("waiting")
        .iter()
        .map(who)
        .collect();
    (leader, waiting)
}

/// Waits until serve's `tenure_candidates_waiting` is `n`.
async fn waiting_metric_is(serve: &support::Serve, n: f64) {
    support::wait::wait_until_async(
        &format!("tenure_candidates_waiting = {n}"),
        Duration::from_secs(10),
        || async { serve.metric("tenure_candidates_waiting").await == Some(n) },
    )
    .await;
}

/// Reads `observe`'s lines until one shows `want`.
async fn next_seen(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    want: Seen,
) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("observe never showed {want:?}"))
            .expect("read")
            .expect("observe exited");
        if seen_of(&line) == want {
            return;
        }
    }
}

/// The queue as `tenure observe --queue`, `tenure serve`'s history and its
/// API see it, against etcd's own keys read here: Go's candidate (etcdctl
/// elect) and tenure's queue together, one leaves, the next in line leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_observed_and_recorded_as_etcd_holds_it() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = support::Serve::start(&[etcd.endpoint()], &dir.path().join("h.db"), &[], &[]).await;
    serve.ready().await;
    let c = client(&etcd).await;
    let n = "q/observed";
    let alice = match c.campaign(&name(n), "alice", &queued(10)).await {
        Ok(tenure::election::Campaigned::Leader(l)) => l,
        other => panic!("alice leads: {:?}", other.err()),
    };
    let mut observe = Command::new(tenure_bin())
        .env("TENURE_ENDPOINTS", etcd.endpoint())
        .args(["observe", "--queue", "--json", n])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("tenure observe");
    let mut lines = BufReader::new(observe.stdout.take().expect("stdout")).lines();
    let a = ("alice".to_owned(), alice.token());
    next_seen(&mut lines, (Some(a.clone()), vec![])).await;

    let mut bob = etcdctl_elect(&etcd, &format!("election/{n}"), "bob");
    queue_is(&etcd, n, &["alice", "bob"]).await;
    let carol = {
        let c = c.clone();
        tokio::spawn(async move { c.campaign_wait(&name(n), "carol", &queued(10), None).await })
    };
    queue_is(&etcd, n, &["alice", "bob", "carol"]).await;
    // The tokens, from etcd's own keys: each key's CreateRevision.
    let keys = queued_keys(&etcd, n).await;
    let (b, k) = (
        ("bob".to_owned(), keys[1].create_revision()),
        ("carol".to_owned(), keys[2].create_revision()),
    );
    next_seen(&mut lines, (Some(a.clone()), vec![b.clone(), k.clone()])).await;
    // serve counts the same two (fleet-wide; per election only with
    // --per-election-detail: 12 series per election at most by default).
    waiting_metric_is(&serve, 2.0).await;

    // bob gives up (etcdctl resigns on SIGINT): carol is next.
    kill(Pid::from_raw(bob.id().expect("pid") as i32), Signal::SIGINT).expect("SIGINT");
    let _ = tokio::time::timeout(Duration::from_secs(10), bob.wait()).await;
    queue_is(&etcd, n, &["alice", "carol"]).await;
    next_seen(&mut lines, (Some(a.clone()), vec![k.clone()])).await;
    waiting_metric_is(&serve, 1.0).await;

    // alice resigns: carol leads with her key's CreateRevision.
    alice.resign().await.expect("resign");
    let carol = carol.await.expect("join").expect("carol leads");
    assert_eq!(carol.token(), k.1);
    next_seen(&mut lines, (Some(k.clone()), vec![])).await;
    waiting_metric_is(&serve, 0.0).await;

    // History: each arrival, departure and handover once, with the tokens
    // etcd gave the keys.
    let rev = etcd
        .client()
        .await
        .get("x", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision();
    serve.caught_up(rev).await;
    let v: serde_json::Value =
        reqwest::get(serve.url("/api/v1/elections/q%2Fobserved/events?limit=100"))
            .await
            .expect("GET")
            .json()
            .await
            .expect("json");
    let got: Vec<(String, i64, String)> = v["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["election"] == n)
        .map(|e| {
            (
                e["type"].as_str().expect("type").to_owned(),
                e["token"].as_i64().expect("token"),
                e["holder"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let ev = |t: &str, who: &(String, i64)| (t.to_owned(), who.1, who.0.clone());
    assert_eq!(
        got,
        vec![
            ev("term_started", &a),
            ev("candidate_queued", &b),
            ev("candidate_queued", &k),
            ev("candidate_left", &b),
            ev("term_ended", &a),
            ev("term_started", &k),
            // alice's acting record, in her resign's own txn (issue 22):
            // after the revision's terms.
            ev("acting", &a),
        ],
        "{v:#}"
    );
    // The election page's queue table: bob left, carol led.
    let page = reqwest::get(serve.url("/elections/q%2Fobserved"))
        .await
        .expect("GET")
        .text()
        .await
        .expect("page");
    for (who, outcome) in [(&b, "left"), (&k, "led")] {
        assert!(
            page.contains(&format!(
                "<tr data-token=\"{}\" data-outcome=\"{outcome}\">",
                who.1
            )),
            "{} should have {outcome}: {page}",
            who.0
        );
    }
    drop(carol);
    serve.stop().await;
}
