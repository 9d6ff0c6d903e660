//! The watcher against a real etcd: a scripted scenario gives exactly the
//! expected events; foreign layouts are seen; restarts resume exactly;
//! compaction gives a gap; etcd restarts and member deaths are survived.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use etcd_client::CompactionOptions;
use support::fixtures::{lead, name};
use support::{Etcd, EtcdCluster};
use tenure::election::{CampaignOptions, Client, KeyLayout, Ttl};
use tenure::events::{
    now_ms, Batch, EndCause, Event, EventKind, RestartReason, Update, WatchStatus,
};
use tenure::watch::{Resume, WatchConfig, Watcher};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(15);

struct Running {
    rx: mpsc::Receiver<Update>,
    task: JoinHandle<()>,
    /// Every update seen so far, in order.
    seen: Vec<Update>,
    revision: i64,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn start(client: &Client, resume: Option<Resume>, cfg: WatchConfig) -> Running {
    let (tx, rx) = mpsc::channel(1024);
    let watcher = Watcher::new(client.clone(), cfg);
    let task = tokio::spawn(async move {
        let _ = watcher.run(resume, tx).await;
    });
    Running {
        rx,
        task,
        seen: Vec::new(),
        revision: 0,
    }
}

/// Held by this binary's tests that load the machine (a three-member
/// cluster, 4 MiB responses) and by the part of the scripted scenario whose
/// verdict depends on timing (an expiry), so the two never overlap.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn fast() -> WatchConfig {
    WatchConfig {
        probe_after: Duration::from_secs(1),
        lease_sample_interval: Duration::from_millis(200),
        ..WatchConfig::default()
    }
}

impl Running {
    /// Waits for the next `n` events (from batches), in order. `Unobserved`
    /// markers (changes replayed after a reconnect: times are bounds) are
    /// not counted; [`Running::unobserved`] returns them. Nor are the
    /// holders' acting records (the library's resign writes one; what
    /// they say is tests/acting.rs's business).
    async fn events(&mut self, n: usize) -> Vec<Event> {
        let mut out = Vec::new();
        while out.len() < n {
            let u = tokio::time::timeout(WAIT, self.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("waited for {n} events, got {out:#?}"))
                .expect("watcher alive");
            if let Update::Batch(Batch { revision, events }) = &u {
                assert!(*revision >= self.revision, "batches in revision order");
                self.revision = *revision;
                out.extend(
                    events
                        .iter()
                        .filter(|e| {
                            !matches!(
                                e.kind,
                                EventKind::Unobserved { .. } | EventKind::Acting { .. }
                            )
                        })
                        .cloned(),
                );
            }
            self.seen.push(u);
        }
        assert_eq!(out.len(), n, "more events than expected: {out:#?}");
        out
    }

    /// The `Unobserved` markers received so far.
    fn unobserved(&self) -> Vec<Event> {
        self.seen
            .iter()
            .filter_map(|u| match u {
                Update::Batch(b) => Some(b.events.iter()),
                _ => None,
            })
            .flatten()
            .filter(|e| matches!(e.kind, EventKind::Unobserved { .. }))
            .cloned()
            .collect()
    }

    /// Waits until a status update matching `f` arrives.
    async fn status(&mut self, f: impl Fn(&WatchStatus) -> bool) {
        loop {
            let u = tokio::time::timeout(WAIT, self.rx.recv())
                .await
                .expect("status in time")
                .expect("alive");
            let hit = matches!(&u, Update::Watch(s) if f(s));
            if let Update::Batch(b) = &u {
                assert!(
                    b.events.is_empty(),
                    "unexpected events while waiting for a status: {:#?}",
                    b.events
                );
                self.revision = b.revision;
            }
            self.seen.push(u);
            if hit {
                return;
            }
        }
    }

    /// Waits until the watcher has sampled `lease` (it tells expiry from
    /// revocation by these samples; an unsampled lease's end is unknown).
    async fn sampled(&mut self, lease: i64) {
        loop {
            let u = tokio::time::timeout(WAIT, self.rx.recv())
                .await
                .expect("lease sampled in time")
                .expect("alive");
            let hit = matches!(&u, Update::LeaseSampled { lease_id, remaining_seconds: Some(_), .. } if *lease_id == lease);
            if let Update::Batch(b) = &u {
                assert!(b.events.is_empty(), "unexpected events: {:#?}", b.events);
                self.revision = b.revision;
            }
            self.seen.push(u);
            if hit {
                return;
            }
        }
    }

    /// Waits for the first batch (the snapshot) and returns its events.
    async fn snapshot(&mut self) -> Vec<Event> {
        loop {
            let u = tokio::time::timeout(WAIT, self.rx.recv())
                .await
                .expect("snapshot in time")
                .expect("alive");
            if let Update::Batch(b) = &u {
                self.revision = b.revision;
                let events = b.events.clone();
                self.seen.push(u);
                return events;
            }
            self.seen.push(u);
        }
    }
}

fn started(e: &Event) -> (i64, &str, KeyLayout) {
    match &e.kind {
        EventKind::TermStarted {
            token,
            holder,
            layout,
            ..
        } => (*token, holder.as_str(), *layout),
        other => panic!("expected term_started, got {other:?}"),
    }
}

fn ended(e: &Event) -> (i64, EndCause) {
    match &e.kind {
        EventKind::TermEnded { token, cause, .. } => (*token, *cause),
        other => panic!("expected term_ended, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_scenario_gives_exactly_the_expected_events() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let mut w = start(&c, None, fast());
    assert!(w.snapshot().await.is_empty());

    // Campaign, proclaim, fence, resign.
    let a = lead(&c, "jobs", "alpha", 10).await;
    let ev = w.events(1).await;
    assert_eq!(started(&ev[0]), (a.token(), "alpha", KeyLayout::Single));
    assert_eq!(ev[0].revision, a.token());
    a.proclaim("alpha-v2").await.expect("proclaim");
    let ev = w.events(1).await;
    assert!(
        matches!(&ev[0].kind, EventKind::LeaderValueChanged { holder, previous, .. } if holder == "alpha-v2" && previous == "alpha")
    );
    assert!(a.fence("db").await.expect("fence").accepted);
    let ev = w.events(1).await;
    assert!(
        matches!(&ev[0].kind, EventKind::FenceAccepted { resource, token } if resource == "db" && *token == a.token())
    );
    let t_alpha = a.token();
    a.resign().await.expect("resign");
    let ev = w.events(1).await;
    assert_eq!(ended(&ev[0]), (t_alpha, EndCause::Resigned));

    // Depose.
    let b = lead(&c, "jobs", "bravo", 10).await;
    assert_eq!(started(&w.events(1).await[0]).1, "bravo");
    c.depose(&name("jobs")).await.expect("depose");
    assert_eq!(ended(&w.events(1).await[0]), (b.token(), EndCause::Deleted));
    drop(b);

    // A refusal: the old token, nobody leads.
    let d = c.fence(&name("jobs"), "db", t_alpha).await.expect("fence");
    assert!(!d.accepted);
    let ev = w.events(1).await;
    assert!(
        matches!(&ev[0].kind, EventKind::FenceRefused { token, reason, .. } if *token == t_alpha && reason.as_str() == "no_leader")
    );

    // Expiry: the reference Go Campaign's txn, from etcdctl, on a lease nobody renews.
    // `expired` is said only when the lease samples make it certain; on a
    // loaded machine a late sample makes it `unknown` (never anything
    // else): the deletion must arrive after the latest expiry the samples
    // allow, and etcd's expiry check (every 500 ms) sometimes revokes the
    // lease sooner than that. Up to six expiries, none beside this
    // binary's heavy tests (a CI run once gave three `unknown`s beside the
    // 4 MiB one): at least one must be called expired.
    let quiet = HEAVY.lock().await;
    let mut raw = etcd.client().await;
    let mut causes = Vec::new();
    for _ in 0..6 {
        let lease = raw.lease_grant(2, None).await.expect("grant").id();
        etcdctl_txn_campaign(&etcd, "election/jobs", "go-holder", lease).await;
        let ev = w.events(1).await;
        let (t_go, holder, layout) = started(&ev[0]);
        assert_eq!((holder, layout), ("go-holder", KeyLayout::Single));
        let ev = w.events(1).await;
        let (token, cause) = ended(&ev[0]);
        assert_eq!(token, t_go);
        assert!(
            matches!(cause, EndCause::Expired | EndCause::Unknown),
            "an expiry called {cause:?}"
        );
        causes.push(cause);
        if cause == EndCause::Expired {
            break;
        }
    }
    assert!(
        causes.contains(&EndCause::Expired),
        "six expiries, none called expired: {causes:?}"
    );
    drop(quiet);

    // A key deleted by hand while its lease lives.
    let lease = raw.lease_grant(30, None).await.expect("grant").id();
    etcdctl_txn_campaign(&etcd, "election/jobs", "manual", lease).await;
    let t_manual = started(&w.events(1).await[0]).0;
    raw.delete("election/jobs", None).await.expect("delete");
    assert_eq!(ended(&w.events(1).await[0]), (t_manual, EndCause::Deleted));

    // A revoked lease without tenure's marker (a Go session closing).
    etcdctl_txn_campaign(&etcd, "election/jobs", "closer", lease).await;
    let t_closer = started(&w.events(1).await[0]).0;
    w.sampled(lease).await;
    raw.lease_revoke(lease).await.expect("revoke");
    assert_eq!(ended(&w.events(1).await[0]), (t_closer, EndCause::Resigned));

    // Every batch was in revision order and nothing else came.
    assert!(w
        .rx
        .try_recv()
        .map(|u| !matches!(u, Update::Batch(ref b) if !b.events.is_empty()))
        .unwrap_or(true));
}

async fn etcdctl_txn_campaign(etcd: &Etcd, key: &str, value: &str, lease: i64) {
    use tokio::io::AsyncWriteExt;
    let mut child = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd.endpoint()))
        .arg("txn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("etcdctl");
    let script = format!("create(\"{key}\") = \"0\"\n\nput {key} {value} --lease={lease:x}\n\n\n");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .await
        .expect("write");
    let out = child.wait_with_output().await.expect("etcdctl txn");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("SUCCESS"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_queue_layout_is_seen_with_holder_and_token() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let mut w = start(&c, None, fast());
    w.snapshot().await;
    let mut alice = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd.endpoint()))
        .args(["elect", "election/queue", "alice"])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("etcdctl");
    let ev = w.events(1).await;
    let (token, holder, layout) = started(&ev[0]);
    assert_eq!((holder, layout), ("alice", KeyLayout::Queue));
    let status = c
        .leader(&name("queue"))
        .await
        .expect("leader")
        .expect("leads");
    assert_eq!(status.leader.token, token);
    let _ = alice.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_resumes_exactly_and_compaction_gives_a_gap() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let a = lead(&c, "svc", "a", 30).await;
    let mut w = start(&c, None, fast());
    let snap = w.snapshot().await;
    assert_eq!(snap.len(), 1);
    assert!(matches!(
        &snap[0].kind,
        EventKind::TermStarted {
            from_snapshot: true,
            ..
        }
    ));
    let resume = Resume {
        revision: w.revision,
        open_terms: vec![tenure::watch::OpenTerm {
            election: "svc".into(),
            token: a.token(),
            holder: "a".into(),
            lease_id: a.lease_id(),
            layout: KeyLayout::Single,
            started_revision: a.token(),
            started_at_ms: snap[0].at_ms,
        }],
        cluster_id: None,
        live_at_ms: Some(now_ms()),
        witnesses: Vec::new(),
    };
    drop(w);

    // While the watcher is down: a resigns, b and c lead in turn.
    let t_a = a.token();
    a.resign().await.expect("resign");
    let b = lead(&c, "svc", "b", 30).await;
    let t_b = b.token();
    b.resign().await.expect("resign");
    let cc = lead(&c, "svc", "c", 30).await;

    // Restart from the committed revision: each transition exactly once.
    let mut w = start(&c, Some(resume.clone()), fast());
    assert!(
        w.snapshot().await.is_empty(),
        "state at the resume revision matches history"
    );
    let ev = w.events(4).await;
    assert_eq!(ended(&ev[0]), (t_a, EndCause::Resigned));
    assert_eq!(started(&ev[1]).0, t_b);
    assert_eq!(ended(&ev[2]), (t_b, EndCause::Resigned));
    assert_eq!(started(&ev[3]), (cc.token(), "c", KeyLayout::Single));
    // All four were replayed: their times are only known to be after what
    // history last saw.
    let replayed = w.unobserved();
    for x in &ev {
        assert!(
            replayed.iter().any(|u| u.at_ms == x.at_ms
                && matches!(u.kind,
                    EventKind::Unobserved { from_revision, to_revision, since_ms }
                        if (from_revision..=to_revision).contains(&x.revision)
                            && since_ms == resume.live_at_ms)),
            "{x:?} not marked replayed: {replayed:#?}"
        );
    }
    drop(w);

    // Compaction past the resume revision while the watcher is down.
    let mut raw = etcd.client().await;
    let now = raw
        .get("x", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision();
    raw.compact(now, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
    let resume_rev = resume.revision;
    let mut w = start(&c, Some(resume), fast());
    let ev = w.snapshot().await;
    assert!(
        matches!(&ev[0].kind, EventKind::Gap { from_revision, to_revision } if *from_revision == resume_rev + 1 && *to_revision >= now),
        "{ev:#?}"
    );
    // a's term ended unseen; c leads now (seen from the snapshot).
    assert_eq!(ended(&ev[1]), (t_a, EndCause::Unknown));
    assert!(
        matches!(&ev[2].kind, EventKind::TermStarted { token, from_snapshot: true, previous_holder: Some(p), .. } if *token == cc.token() && p == "a")
    );
    assert_eq!(ev.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_etcd_restart_and_a_dead_member() {
    let _heavy = HEAVY.lock().await;
    // Single member killed and restarted on the same data dir.
    let mut etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let mut w = start(&c, None, fast());
    w.snapshot().await;
    etcd.kill().await;
    w.status(|s| {
        matches!(
            s,
            WatchStatus::Restarted(RestartReason::StreamError) | WatchStatus::EtcdUp(false)
        )
    })
    .await;
    etcd.restart().await;
    let a = lead(&c, "after-restart", "a", 10).await;
    assert_eq!(started(&w.events(1).await[0]).0, a.token());
    drop(w);

    // A 3-member cluster: kill the member the watcher streams from.
    let mut cluster = EtcdCluster::start().await;
    let c = Client::connect(&cluster.endpoints(), "")
        .await
        .expect("connect");
    let mut w = start(&c, None, fast());
    w.snapshot().await;
    let before = lead(&c, "cluster", "x", 10).await;
    assert_eq!(started(&w.events(1).await[0]).0, before.token());
    before.resign().await.expect("resign");
    w.events(1).await;
    for i in 0..cluster.len() {
        // We don't know which member serves the stream: kill each in turn,
        // writing a transition while it is down, then bring it back.
        cluster.kill(i).await;

        let writer = Client::connect(&cluster.endpoints_except(i), "")
            .await
            .expect("connect");
        // Writes may wait for a new etcd leader: campaign_wait retries.
        let opts = CampaignOptions::new(Ttl::from_secs(10).expect("ttl"));
        let l = writer
            .campaign_wait(&name("cluster"), &format!("during-{i}"), &opts, Some(WAIT))
            .await
            .expect("campaign while a member is down");
        let ev = w.events(1).await;
        assert_eq!(
            started(&ev[0]),
            (l.token(), format!("during-{i}").as_str(), KeyLayout::Single)
        );
        l.resign().await.expect("resign");
        assert_eq!(ended(&w.events(1).await[0]).1, EndCause::Resigned);
        cluster.restart(i).await;
    }
}

/// Four 1.2 MB keys: a snapshot of 4.8 MB, and (the watcher down, then
/// resuming behind) four revisions of new 1.2 MB values and one deleting
/// them all, which etcd sends a watcher catching up in one response of
/// about 4.8 MB (a single revision is at most `--max-request-bytes`: the
/// watch asks for no previous values). Both are over gRPC's default 4 MiB.
/// The watcher loads the snapshot, applies the revisions, and the next
/// term is still seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_over_4_mib_neither_stall_the_watch_nor_the_snapshot() {
    let _heavy = HEAVY.lock().await;
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let mut raw = etcd.client().await;
    let big = "x".repeat(1_200_000);
    let keys: Vec<String> = (0..4).map(|i| format!("election/big/k{i}")).collect();
    for k in &keys {
        raw.put(k.as_str(), big.as_str(), None).await.expect("put");
    }
    let mut w = start(&c, None, fast());
    let snap = w.snapshot().await;
    assert_eq!(snap.len(), 4, "the 4.8 MB snapshot loads");
    // The history holds the snapshot's four terms open.
    let open_terms = snap
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TermStarted {
                token,
                holder,
                lease_id,
                layout,
                ..
            } => Some(tenure::watch::OpenTerm {
                election: e.election.clone(),
                token: *token,
                holder: holder.clone(),
                lease_id: *lease_id,
                layout: *layout,
                started_revision: e.revision,
                started_at_ms: e.at_ms,
            }),
            _ => None,
        })
        .collect();
    let resume = Resume {
        revision: w.revision,
        open_terms,
        cluster_id: None,
        live_at_ms: Some(now_ms()),
        witnesses: Vec::new(),
    };
    drop(w);
    let bigger = "y".repeat(1_200_000);
    for k in &keys {
        raw.put(k.as_str(), bigger.as_str(), None)
            .await
            .expect("put");
    }
    let ops: Vec<etcd_client::TxnOp> = keys
        .iter()
        .map(|k| etcd_client::TxnOp::delete(k.as_str(), None))
        .collect();
    raw.txn(etcd_client::Txn::new().and_then(ops))
        .await
        .expect("delete all in one revision");
    let mut w = start(&c, Some(resume), fast());
    let ev = w.events(8).await;
    let kinds: Vec<&str> = ev.iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "leader_value_changed")
            .count(),
        4,
        "{kinds:?}"
    );
    let ends: Vec<&Event> = ev
        .iter()
        .filter(|e| matches!(e.kind, EventKind::TermEnded { .. }))
        .collect();
    assert_eq!(ends.len(), 4, "{kinds:?}");
    assert!(
        ends.iter().all(|e| ended(e).1 == EndCause::Deleted),
        "{ends:#?}"
    );
    let l = lead(&c, "after", "next", 30).await;
    let ev = w.events(1).await;
    assert_eq!(started(&ev[0]), (l.token(), "next", KeyLayout::Single));
    assert!(
        !w.seen
            .iter()
            .any(|u| matches!(u, Update::Watch(WatchStatus::Stuck { .. }))),
        "never stuck"
    );
}

/// etcd before 3.4.25 / 3.5.8 (Debian bookworm's 3.4.23) can send a requested
/// progress notification ahead of events still pending (etcd issue 15220).
/// The watcher persists a progress revision (an empty batch: history's
/// resume point) only once the next progress notification confirmed it with
/// no event in between — never the first one it gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_revision_is_persisted_only_once_confirmed() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let mut raw = etcd.client().await;
    let version = raw.status().await.expect("status").version().to_owned();
    println!("etcd {version}");
    let mut w = start(&c, None, fast());
    w.snapshot().await;
    let l = lead(&c, "quiet", "a", 30).await;
    w.events(1).await;
    // Revisions move on outside the watched range.
    for i in 0..5 {
        raw.put(format!("outside/{i}"), "x", None)
            .await
            .expect("put");
    }
    let head = raw
        .get("outside/0", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision();
    // Updates until the first empty batch at or past `head`.
    let mut progress_seen = 0;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let u = tokio::time::timeout_at(deadline, w.rx.recv())
            .await
            .expect("a persisted progress in time")
            .expect("alive");
        match &u {
            Update::Watch(WatchStatus::CaughtUp { revision }) if *revision >= head => {
                progress_seen += 1
            }
            Update::Batch(b) if b.revision >= head => {
                assert!(b.events.is_empty());
                break;
            }
            _ => {}
        }
    }
    // 3.4.23 is before the fix: persisted only once a second progress confirmed it.
    // 3.5.30 has it: persisted at the first progress notification, before its
    // `CaughtUp`.
    let ordered = {
        let v: Vec<u64> = version
            .split(['.', '-'])
            .filter_map(|p| p.parse().ok())
            .collect();
        matches!(v.as_slice(), [3, 4, p, ..] if *p >= 25)
            || matches!(v.as_slice(), [3, 5, p, ..] if *p >= 8)
            || matches!(v.as_slice(), [3, m, ..] if *m >= 6)
    };
    if ordered {
        assert_eq!(
            progress_seen, 0,
            "etcd {version} orders progress notifications: the first one at {head} is persisted at once"
        );
    } else {
        assert!(
            progress_seen >= 1,
            "etcd {version}: the first progress at {head} was persisted on its own"
        );
    }
    drop(l);
}

/// Several ranges merged: a change to one is handed on only once every
/// other range is known complete up to it, by a progress notification it
/// asks for. etcd drops the progress request of a watch that starts past
/// its revision (etcd PR 20229, in 3.5.31 and 3.6.17), as every range of a
/// quiet etcd does, and the range that saw nothing was deaf to the merge's
/// asks while it probed its silence: the first change after a quiet spell
/// longer than the probe interval waited for a stalled reopen (2 to 5.5 s
/// with the default 5 s interval), was marked unobserved, and every range
/// reopened every two probe intervals of quiet. Handed on at once now, with
/// no reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_change_after_quiet_is_handed_on_at_once_across_ranges() {
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let app = tenure::layout::Source::parse("concurrency:/app/").expect("source");
    // As serve plans it: merged ranges, or one covering watch on an etcd
    // that cannot merge them (3.4.23).
    let plan = tenure::watch::Watcher::sources(&c, vec![app], false)
        .await
        .expect("sources");
    let probe_after = Duration::from_secs(2);
    let cfg = WatchConfig {
        sources: Some(plan.sources),
        covering: plan.covering,
        probe_after,
        ..fast()
    };
    let mut w = start(&c, None, cfg);
    w.snapshot().await;
    // Quiet until the middle of the first probe's wait for its answer
    // (etcd drops the request: nothing to wait for).
    let quiet = tokio::time::Instant::now() + probe_after * 3 / 2;
    while let Ok(Some(u)) = tokio::time::timeout_at(quiet, w.rx.recv()).await {
        w.seen.push(u);
    }
    let put = tokio::time::Instant::now();
    raw.put("election/first", "a", None).await.expect("put");
    let ev = w.events(1).await;
    let took = put.elapsed();
    assert_eq!(started(&ev[0]).1, "a");
    assert!(
        took < Duration::from_millis(500),
        "the first change after quiet took {took:?}"
    );
    // The other source too, after another quiet spell, now that etcd
    // reached where every range's watch starts.
    let quiet = tokio::time::Instant::now() + probe_after * 5 / 2;
    while let Ok(Some(u)) = tokio::time::timeout_at(quiet, w.rx.recv()).await {
        w.seen.push(u);
    }
    let lease = raw.lease_grant(30, None).await.expect("lease").id();
    let put = tokio::time::Instant::now();
    raw.put(
        format!("/app/job/{lease:x}"),
        "b",
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .expect("put");
    let ev = w.events(1).await;
    let took = put.elapsed();
    assert_eq!(started(&ev[0]).1, "b");
    assert!(took < Duration::from_millis(500), "took {took:?}");
    let reopened: Vec<_> = w
        .seen
        .iter()
        .filter(|u| matches!(u, Update::Watch(WatchStatus::Restarted(_))))
        .collect();
    assert!(
        reopened.is_empty(),
        "a quiet watch was reopened: {reopened:?}"
    );
    assert!(w.unobserved().is_empty(), "{:#?}", w.unobserved());
}
