//! tenure beside a real Go service: etcd's own `clientv3/concurrency`
//! (`Session`, `Election`, `Mutex`) in `tests/go/etcdactor`, against a real
//! etcd. Every assertion is about what etcd holds and what the Go client
//! observes (its `Election`, `Mutex.IsOwner()`, `Session.Done()`, its
//! lease's `TimeToLive`), not about what tenure reports of itself.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use etcd_client::{GetOptions, SortOrder, SortTarget};
use support::fixtures::{run, tenure, text};
use support::go::{GoActor, ANSWER};
use support::wait::{poll, wait_until_async};
use support::Etcd;

/// Session TTL of the Go actors: a revoked lease would be noticed by Go's
/// keep-alive (every TTL/3) well within [`QUIET`].
const TTL: u64 = 4;
/// How long a negative check ("nothing happened") watches.
const QUIET: Duration = Duration::from_secs(3);
/// "Still waiting" checks.
const STILL: Duration = Duration::from_secs(1);

fn ok(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout {} stderr {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The key-values under `prefix`, oldest CreateRevision first.
async fn under(etcd: &Etcd, prefix: &str) -> Vec<etcd_client::KeyValue> {
    etcd.client()
        .await
        .get(
            prefix,
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend),
            ),
        )
        .await
        .expect("get")
        .kvs()
        .to_vec()
}

async fn get(etcd: &Etcd, key: &str) -> Option<etcd_client::KeyValue> {
    etcd.client()
        .await
        .get(key, None)
        .await
        .expect("get")
        .kvs()
        .first()
        .cloned()
}

/// Waits until the values queued under `election/<name>/` are `want`.
async fn queue_is(etcd: &Etcd, name: &str, want: &[&str]) {
    let prefix = format!("election/{name}/");
    poll(
        &format!("queue of {name} is {want:?}"),
        Duration::from_secs(15),
        Duration::from_millis(20),
        || async {
            let q: Vec<String> = under(etcd, &prefix)
                .await
                .iter()
                .map(|kv| text(kv.value()))
                .collect();
            (q == want).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// `tenure leader NAME --json`.
async fn leader_json(etcd: &Etcd, name: &str) -> serde_json::Value {
    let out = run(etcd, &["leader", name, "--json"]).await;
    ok(&out);
    serde_json::from_slice(&out.stdout).expect("leader --json")
}

/// What a Go service with one session for two elections and a lock must
/// still have after tenure ended one of its terms: the other key, the lock
/// (owned, per `Mutex.IsOwner()` in a txn) and a live session.
async fn session_intact(go: &mut GoActor, etcd: &Etcd, lock: &str) {
    let lock_key = format!("{lock}/{}", go.lease_hex);
    let kv = get(etcd, &lock_key)
        .await
        .expect("the lock key still exists");
    assert_eq!(kv.lease(), go.lease_id(), "still on the session's lease");
    assert!(go.owns(lock).await, "Go still owns {lock}");
    let ttl = go.lease_ttl().await;
    assert!(ttl > 0, "the session's lease lives: TimeToLive {ttl}");
    go.expect_none("session-done", QUIET).await;
    assert!(go.owns(lock).await, "Go still owns {lock} after {QUIET:?}");
}

/// (a) One Go session leads `orders` and `billing` and holds a mutex.
/// `tenure resign orders --token <Go's Rev>` deletes that key only; `tenure
/// depose billing` too. The lease, the lock and the session survive both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_and_depose_of_a_go_session_leader_touch_nothing_else_of_the_session() {
    let etcd = Etcd::start().await;
    let mut go = GoActor::spawn("svc", &etcd.endpoint(), TTL).await;
    go.campaign("orders", "svc-orders").await;
    let (orders_rev, orders_key) = go.elected("orders", ANSWER).await;
    go.campaign("billing", "svc-billing").await;
    let (_, billing_key) = go.elected("billing", ANSWER).await;
    go.lock("locks/invoice").await;
    assert_eq!(orders_key, format!("election/orders/{}", go.lease_hex));
    assert_eq!(billing_key, format!("election/billing/{}", go.lease_hex));
    let billing_before = get(&etcd, &billing_key).await.expect("billing key");

    let out = run(
        &etcd,
        &["resign", "orders", "--token", &orders_rev.to_string()],
    )
    .await;
    ok(&out);
    assert!(get(&etcd, &orders_key).await.is_none(), "orders' key went");
    assert_eq!(
        go.ask("leader orders", "leader orders ").await,
        "leader orders none",
        "Go's Election sees no leader of orders"
    );
    let billing_after = get(&etcd, &billing_key).await.expect("billing untouched");
    assert_eq!(billing_after.mod_revision(), billing_before.mod_revision());
    session_intact(&mut go, &etcd, "locks/invoice").await;
    assert_eq!(
        go.ask("proclaim billing svc-billing-2", "proclaim ").await,
        "proclaim ok billing",
        "Go still leads billing"
    );
    let billing_now = get(&etcd, &billing_key).await.expect("billing key");
    assert_eq!(text(billing_now.value()), "svc-billing-2");

    let out = run(&etcd, &["depose", "billing"]).await;
    ok(&out);
    assert!(
        text(&out.stdout).contains("svc-billing-2"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        get(&etcd, &billing_key).await.is_none(),
        "billing's key went"
    );
    session_intact(&mut go, &etcd, "locks/invoice").await;
    assert!(
        go.ask("proclaim billing svc-billing-3", "proclaim ")
            .await
            .starts_with("proclaim err billing"),
        "Go's Election learns it no longer leads billing"
    );
    // Only the lock is left on the session's lease, and no key of the Go
    // elections' prefixes was added.
    assert!(under(&etcd, "election/orders/").await.is_empty());
    assert!(under(&etcd, "election/billing/").await.is_empty());
    // The session can campaign again on the same lease.
    go.campaign("orders", "svc-orders-2").await;
    let (rev2, _) = go.elected("orders", ANSWER).await;
    assert!(rev2 > orders_rev);
}

/// (a, HTTP) The JSON API's resign of a Go session's term ends that term
/// only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_resign_of_a_go_session_leader_touches_nothing_else_of_the_session() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut go = GoActor::spawn("svc", &etcd.endpoint(), TTL).await;
    go.campaign("orders", "svc-orders").await;
    let (orders_rev, orders_key) = go.elected("orders", ANSWER).await;
    go.campaign("billing", "svc-billing").await;
    let (_, billing_key) = go.elected("billing", ANSWER).await;
    go.lock("locks/invoice").await;
    let serve = support::fixtures::serve_with_api(&etcd, dir.path()).await;
    support::fixtures::http_resign(&serve, "orders", orders_rev).await;
    assert!(get(&etcd, &orders_key).await.is_none(), "orders' key went");
    assert!(
        get(&etcd, &billing_key).await.is_some(),
        "billing untouched"
    );
    session_intact(&mut go, &etcd, "locks/invoice").await;
    assert_eq!(
        go.ask("proclaim billing svc-billing-2", "proclaim ").await,
        "proclaim ok billing"
    );
    let _ = serve.stop().await;
}

/// (b) `tenure depose` of a Go leader: the next Go candidate (waiting in
/// `Election.Campaign`) wins, tenure names it, and tenure left nothing in
/// the candidates' prefix (a key there would queue as a candidate and
/// block Go's `Election` forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depose_of_a_go_leader_elects_the_waiting_go_candidate() {
    let etcd = Etcd::start().await;
    let mut a = GoActor::spawn("a", &etcd.endpoint(), TTL).await;
    let mut b = GoActor::spawn("b", &etcd.endpoint(), TTL).await;
    a.campaign("jobs", "a-1").await;
    let (a_rev, a_key) = a.elected("jobs", ANSWER).await;
    b.campaign("jobs", "b-1").await;
    queue_is(&etcd, "jobs", &["a-1", "b-1"]).await;
    b.expect_none("elected jobs ", STILL).await;

    let out = run(&etcd, &["depose", "jobs"]).await;
    ok(&out);
    assert!(text(&out.stdout).contains("a-1"), "{}", text(&out.stdout));
    let (b_rev, b_key) = b.elected("jobs", Duration::from_secs(5)).await;
    assert!(b_rev > a_rev);
    assert!(get(&etcd, &a_key).await.is_none(), "a's key went");

    let v = leader_json(&etcd, "jobs").await;
    assert_eq!(v["holder"], "b-1", "{v}");
    assert_eq!(v["token"], b_rev, "{v}");
    assert_eq!(v["key"], b_key.as_str(), "{v}");
    assert_eq!(
        b.ask("leader jobs", "leader jobs ").await,
        format!("leader jobs {b_key} b-1 {b_rev}"),
        "Go's Election agrees"
    );
    let keys: Vec<(String, i64)> = under(&etcd, "election/jobs/")
        .await
        .iter()
        .map(|kv| (text(kv.key()), kv.lease()))
        .collect();
    assert_eq!(
        keys,
        [(b_key.clone(), b.lease_id())],
        "only Go's own candidate keys under election/jobs/"
    );
    // The deposed service's session is untouched: it can queue again.
    assert!(a.lease_ttl().await > 0);
    a.expect_none("session-done", STILL).await;
    a.campaign("jobs", "a-2").await;
    queue_is(&etcd, "jobs", &["b-1", "a-2"]).await;
    a.expect_none("elected jobs ", STILL).await;
}

/// (c) Go and tenure candidates in one FIFO queue: Go A leads, tenure
/// queues, Go B queues; they lead in that order with growing tokens, and
/// tenure's command gets its key's CreateRevision as `TENURE_TOKEN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_and_tenure_candidates_lead_in_queue_order() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    let stop_file = dir.path().join("stop");
    let mut a = GoActor::spawn("a", &etcd.endpoint(), TTL).await;
    let mut b = GoActor::spawn("b", &etcd.endpoint(), TTL).await;
    a.campaign("q", "go-a").await;
    let (a_rev, _) = a.elected("q", ANSWER).await;

    let script = format!(
        "echo \"$TENURE_TOKEN\" > {t}.tmp && mv {t}.tmp {t}; \
         while [ ! -e {s} ]; do sleep 0.05; done",
        t = token_file.display(),
        s = stop_file.display()
    );
    let mut campaign = tenure(&etcd)
        .args([
            "campaign", "q", "--queue", "--wait", "--ttl", "4", "--id", "tenure-t",
        ])
        .args(["--", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tenure campaign");
    queue_is(&etcd, "q", &["go-a", "tenure-t"]).await;
    b.campaign("q", "go-b").await;
    queue_is(&etcd, "q", &["go-a", "tenure-t", "go-b"]).await;
    let queued = under(&etcd, "election/q/").await;
    let t_kv = queued[1].clone();
    let b_kv = queued[2].clone();
    assert_eq!(text(b_kv.key()), format!("election/q/{}", b.lease_hex));
    assert!(!token_file.exists(), "tenure waits behind Go A");

    // A resigns: tenure, next in line, runs its command.
    assert_eq!(a.ask("resign q", "resign ").await, "resign ok q");
    let token = read_token(&token_file).await;
    assert_eq!(
        token,
        t_kv.create_revision(),
        "TENURE_TOKEN is the key's CreateRevision"
    );
    assert!(token > a_rev);
    let v = leader_json(&etcd, "q").await;
    assert_eq!(
        (v["holder"].as_str(), v["token"].as_i64()),
        (Some("tenure-t"), Some(token)),
        "{v}"
    );
    b.expect_none("elected q ", STILL).await;
    // While tenure leads, B's key is untouched.
    let b_now = get(&etcd, &text(b_kv.key())).await.expect("B's key");
    assert_eq!(
        (b_now.mod_revision(), b_now.lease(), b_now.value()),
        (b_kv.mod_revision(), b.lease_id(), b_kv.value())
    );
    assert!(b.lease_ttl().await > 0);

    // The command exits: tenure resigns and B leads.
    std::fs::write(&stop_file, b"").expect("stop file");
    let status = tokio::time::timeout(Duration::from_secs(15), campaign.wait())
        .await
        .expect("tenure campaign exits after its command")
        .expect("wait");
    assert_eq!(status.code(), Some(0), "CMD's status");
    let (b_rev, b_key) = b.elected("q", Duration::from_secs(5)).await;
    assert_eq!(b_rev, b_kv.create_revision());
    assert!(
        a_rev < token && token < b_rev,
        "tokens grow: {a_rev} {token} {b_rev}"
    );
    assert!(
        get(&etcd, &text(t_kv.key())).await.is_none(),
        "tenure's key went"
    );
    let v = leader_json(&etcd, "q").await;
    assert_eq!(v["holder"], "go-b", "{v}");
    assert_eq!(v["key"], b_key.as_str(), "{v}");
    let keys: Vec<String> = under(&etcd, "election/q/")
        .await
        .iter()
        .map(|kv| text(kv.key()))
        .collect();
    assert_eq!(keys, [b_key], "only B's key is left in the queue");
}

async fn read_token(path: &Path) -> i64 {
    poll(
        "tenure's command wrote TENURE_TOKEN",
        Duration::from_secs(15),
        Duration::from_millis(20),
        || async {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// (d) The fence takes Go's `Election.Rev()` as the token: accepted while
/// that Go term leads, refused once another Go candidate leads, whose Rev
/// is then accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_takes_go_election_revs() {
    let etcd = Etcd::start().await;
    let mut a = GoActor::spawn("a", &etcd.endpoint(), TTL).await;
    let mut b = GoActor::spawn("b", &etcd.endpoint(), TTL).await;
    a.campaign("pay", "go-a").await;
    let (r, _) = a.elected("pay", ANSWER).await;
    b.campaign("pay", "go-b").await;
    queue_is(&etcd, "pay", &["go-a", "go-b"]).await;

    let fence = |token: i64| {
        let cmd = ["fence", "pay", "db", "--token", &token.to_string()].map(str::to_owned);
        let mut c = tenure(&etcd);
        c.args(cmd);
        async move { c.output().await.expect("run tenure fence") }
    };
    let out = fence(r).await;
    ok(&out);
    let b_waiting = under(&etcd, "election/pay/").await[1].create_revision();
    let out = fence(b_waiting).await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "a waiting Go candidate's Rev: {}",
        text(&out.stdout)
    );

    assert_eq!(a.ask("resign pay", "resign ").await, "resign ok pay");
    let (rb, _) = b.elected("pay", ANSWER).await;
    assert_eq!(rb, b_waiting);
    let out = fence(r).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("refused"),
        "{}",
        text(&out.stdout)
    );
    let out = fence(rb).await;
    ok(&out);
    // And once a stale token was refused, the current one still passes.
    let out = fence(r).await;
    assert_eq!(out.status.code(), Some(3));
    wait_until_async(
        "the fence key holds B's Rev",
        Duration::from_secs(5),
        || async {
            get(&etcd, "fence/pay/db")
                .await
                .map(|kv| text(kv.value()).trim_start_matches('0') == rb.to_string())
                .unwrap_or(false)
        },
    )
    .await;
}
