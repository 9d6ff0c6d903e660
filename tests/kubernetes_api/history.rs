//! The scenario: Leases through the API have the history etcd gives, across
//! a release, a kill -9, the API serve killed and restarted, a forced
//! takeover, the Lease deleted, a lapse, and a 410 (list or watch) as a gap.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::denied::{denied_is_said, refused_is_said};
use crate::leader::{leader_agrees, leader_says_nobody};
use crate::page::lease_page_speaks_kubernetes;
use crate::support::kube::{self, Candidate, KubeApiserver, LeaseLog, Recorded, Term, Write};
use crate::support::{Etcd, Serve};
use crate::{gaps, reader, KEY, LEASE_API, NAME};

const INTRUDER: &str = "intruder";

/// Waits (20 s at most) until `serve` recorded `want`; what it recorded.
async fn settled(serve: &Serve, want: &[Recorded]) -> Vec<Recorded> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = kube::recorded(serve, NAME).await;
        if got == want || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The elections serve lists.
async fn names(serve: &Serve) -> Vec<String> {
    let v: Value = reqwest::get(serve.url("/api/v1/elections"))
        .await
        .expect("elections")
        .json()
        .await
        .expect("json");
    v["elections"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .filter_map(|e| e["name"].as_str().map(str::to_owned))
        .collect()
}

/// Waits (20 s at most) for a gap over `[token, ended]`; the gaps.
async fn wait_for_gap(serve: &Serve, token: i64, ended: i64) -> Vec<(i64, i64)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = gaps(serve).await;
        let over = found
            .iter()
            .any(|(from, to)| *from <= token && ended <= *to);
        if over || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a term unseen by the API serve needs.
struct Parts<'a> {
    etcd: &'a Etcd,
    log: &'a LeaseLog,
    dir: &'a Path,
    db: &'a Path,
}

impl Parts<'_> {
    /// The API serve stopped; candidate `id` takes the Lease and releases
    /// it; etcd compacted (`compact`); kube-apiserver restarted (its watch
    /// cache starts at the present); the API serve started again. The
    /// new kube-apiserver, the serve, and the term it did not see.
    async fn unseen_term(
        &self,
        api: KubeApiserver,
        by_api: Serve,
        id: &str,
        compact: bool,
    ) -> (KubeApiserver, Serve, Term) {
        let long = Duration::from_secs(30);
        assert_eq!(by_api.stop().await, Some(0));
        let before = self.log.writes().last().expect("a write").revision;
        let mut c = Candidate::start(&api, "default", "demo", id);
        self.log
            .wait_for("its hold", long, |w| w.holder == id)
            .await;
        c.signal(Signal::SIGTERM);
        assert_eq!(c.wait(long).await, Some(0));
        let released = |w: &Write| w.revision > before + 1 && !w.deleted && w.holder.is_empty();
        self.log.wait_for("its release", long, released).await;
        if compact {
            let head = kube::head(self.etcd).await;
            let mut raw = self.etcd.client().await;
            raw.compact(head, None).await.expect("compact");
        }
        drop(api);
        let api = KubeApiserver::start(&self.etcd.endpoint()).await;
        // Its CA, port and signing key are new: a new token and kubeconfig.
        let kubeconfig = reader(&api, self.dir).await;
        let nowhere = ["http://127.0.0.1:9".to_owned()];
        let args = ["--kubeconfig", kubeconfig.as_str()];
        let by_api = Serve::start(&nowhere, self.db, &args, &[]).await;
        by_api.ready().await;
        let term = kube::terms_of(&self.log.writes(), INTRUDER)
            .pop()
            .expect("its term");
        assert_eq!(
            (term.holder.as_str(), term.ended_as),
            (id, Some("resigned"))
        );
        (api, by_api, term)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_through_the_api_have_the_history_etcd_gives() {
    if !kube::available() {
        return;
    }
    let began = Instant::now();
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let log = LeaseLog::start(etcd.client().await, KEY).await;
    let api = KubeApiserver::start(&etcd.endpoint()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = reader(&api, dir.path()).await;

    refused_is_said(&api, dir.path()).await;
    denied_is_said(&api, dir.path()).await;

    let source = "kubernetes:/registry/";
    let etcd_args: Vec<&str> = if crate::support::fixtures::merges_several_ranges(&mut raw).await {
        vec!["--source", source]
    } else {
        vec!["--sources-only", "--source", source]
    };
    let etcd_db = dir.path().join("etcd.db");
    let api_db = dir.path().join("api.db");
    let by_etcd = Serve::start(&[etcd.endpoint()], &etcd_db, &etcd_args, &[]).await;
    let api_args = ["--kubeconfig", kubeconfig.as_str()];
    // No etcd to reach: the endpoints given are never used.
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let by_api = Serve::start(&nowhere, &api_db, &api_args, &[]).await;
    by_etcd.ready().await;
    by_api.ready().await;
    eprintln!("both serves ready after {:?}", began.elapsed());
    // Each page's header names what its feed reads, and how it counts.
    let page = |s: &Serve| reqwest::get(s.url("/"));
    let api_page = page(&by_api)
        .await
        .expect("GET /")
        .text()
        .await
        .expect("body");
    assert!(api_page.contains("Kubernetes API reachable"), "{api_page}");
    assert!(api_page.contains("resourceVersion <b"), "{api_page}");
    assert!(!api_page.contains("etcd reachable"), "{api_page}");
    let etcd_page = page(&by_etcd)
        .await
        .expect("GET /")
        .text()
        .await
        .expect("body");
    assert!(etcd_page.contains("etcd reachable"), "{etcd_page}");
    assert!(etcd_page.contains("rev <b"), "{etcd_page}");

    let mut cs = kube::candidates(&api, "default", "demo", &["a", "b", "c"]);
    let long = Duration::from_secs(30);
    let held = |w: &Write| !w.deleted && !w.holder.is_empty();
    let l1 = log.wait_for("a first holder", long, held).await.holder;

    // A release (SIGTERM: client-go writes an empty holder).
    kube::by_id(&mut cs, &l1).signal(Signal::SIGTERM);
    assert_eq!(kube::by_id(&mut cs, &l1).wait(long).await, Some(0));
    let l2 = log
        .wait_for("a second holder", long, |w| held(w) && w.holder != l1)
        .await
        .holder;

    // kill -9 of the leader: the last one takes it once it ran out.
    // Once it says it leads (its own word is checked below).
    kube::by_id(&mut cs, &l2)
        .said_by_now("started-leading")
        .await;
    kube::by_id(&mut cs, &l2).signal(Signal::SIGKILL);
    let l3 = log
        .wait_for("a third holder", long, |w| {
            held(w) && w.holder != l1 && w.holder != l2
        })
        .await
        .holder;

    // The API serve killed -9 and restarted while l3 leads: it resumes at
    // its stored resourceVersion.
    by_api.crash().await;
    let by_api = Serve::start(&nowhere, &api_db, &api_args, &[]).await;
    by_api.ready().await;
    // Resumed, not listed afresh: no gap (a restart that forgot its
    // resume point would record one).
    assert_eq!(gaps(&by_api).await, [], "{}", by_api.log_text());
    lease_page_speaks_kubernetes(&by_api, &api).await;

    // A forced takeover through the API while l3 still renews; nobody
    // renews the intruder's claim, a new candidate takes it after 4 s.
    kube::take_over(&api, LEASE_API, &l3, INTRUDER).await;
    cs.push(Candidate::start(&api, "default", "demo", "d"));
    let l4 = log
        .wait_for("a holder after the intruder", long, |w| {
            held(w) && w.holder == "d"
        })
        .await
        .holder;
    assert_eq!(kube::by_id(&mut cs, &l3).wait(long).await, Some(1));

    // The Lease deleted: l4's next renewal creates it again (a new term).
    let (status, body) = api.curl("DELETE", LEASE_API, None).await;
    assert_eq!(status, 200, "{body}");
    let gone = log.wait_for("the deletion", long, |w| w.deleted).await;
    log.wait_for("the Lease created again", long, |w| {
        w.revision > gone.revision && held(w)
    })
    .await;

    // A last release.
    kube::by_id(&mut cs, &l4).signal(Signal::SIGTERM);
    assert_eq!(kube::by_id(&mut cs, &l4).wait(long).await, Some(0));
    log.wait_for("l4's release", long, |w| {
        w.revision > gone.revision && !w.deleted && w.holder.is_empty()
    })
    .await;

    // A frozen leader alone: its Lease lapses (renewals stopped, nobody
    // took over yet), counted by both serves; a candidate that comes takes
    // it once it ran out (expired), and releases it.
    let e = Candidate::start(&api, "default", "demo", "e");
    let e_held = log.wait_for("e holding", long, |w| w.holder == "e").await;
    // Renewed at least once: its value's revision is not its token.
    log.wait_for("e renewing", long, |w| {
        w.holder == "e" && w.revision > e_held.revision
    })
    .await;
    e.said_by_now("started-leading").await;
    e.signal(Signal::SIGSTOP);
    // A renewal sent just before it stopped lands first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e_term = kube::terms_of(&log.writes(), INTRUDER)
        .pop()
        .expect("e's term");
    assert_eq!(e_term.holder, "e");
    assert_eq!(e_term.token, e_held.revision);
    leader_agrees(&api, &etcd.endpoint(), &kubeconfig, e_term.token, false).await;
    kube::lapsed(&by_etcd, 1.0).await;
    kube::lapsed(&by_api, 1.0).await;
    leader_agrees(&api, &etcd.endpoint(), &kubeconfig, e_term.token, true).await;
    let mut f = Candidate::start(&api, "default", "demo", "f");
    let f_held = log.wait_for("f holding", long, |w| w.holder == "f").await;
    kube::lapsed(&by_etcd, 0.0).await;
    kube::lapsed(&by_api, 0.0).await;
    e.signal(Signal::SIGKILL);
    f.signal(Signal::SIGTERM);
    assert_eq!(f.wait(long).await, Some(0));
    log.wait_for("f's release", long, |w| {
        w.revision > f_held.revision && !w.deleted && w.holder.is_empty()
    })
    .await;
    leader_says_nobody(&etcd.endpoint(), &kubeconfig).await;
    cs.push(e);
    cs.push(f);

    // Both histories against the test's own record, and so each other.
    let truth = kube::terms_of(&log.writes(), INTRUDER);
    let holders: Vec<&str> = truth.iter().map(|t| t.holder.as_str()).collect();
    assert_eq!(
        holders,
        [&*l1, &*l2, &*l3, INTRUDER, &*l4, &*l4, "e", "f"],
        "{}",
        log.timeline()
    );
    let want = kube::wanted(&truth);
    let causes: Vec<&str> = truth.iter().filter_map(|t| t.ended_as).collect();
    // A SIGTERM's release can lose its write to its own renewal (seen on
    // etcd 3.7.4): the Lease then runs out and is taken, expired.
    assert!(
        matches!(causes[0], "resigned" | "expired")
            && causes[1..]
                == [
                    "expired",
                    "taken_over",
                    "expired",
                    "deleted",
                    "resigned",
                    "expired",
                    "resigned"
                ],
        "{causes:?}{}",
        log.timeline()
    );
    let from_etcd = settled(&by_etcd, &want).await;
    assert_eq!(from_etcd, want, "from etcd\n{}", log.timeline());
    let from_api = settled(&by_api, &want).await;
    assert_eq!(from_api, want, "through the API\n{}", log.timeline());
    // The handovers too (last renewal to the next acquisition), either way:
    // one after each term the Lease's own record ends as run out or taken
    // (four, or five when l1's release lost its race and it ran out).
    let handovers = kube::handovers(&log.writes());
    let expected = truth
        .windows(2)
        .filter(|p| matches!(p[0].ended_as, Some("expired" | "taken_over")))
        .count();
    assert_eq!(handovers.len(), expected, "{}", log.timeline());
    for serve in [&by_etcd, &by_api] {
        assert_eq!(
            kube::recorded_handovers(serve, NAME).await,
            handovers,
            "{}",
            log.timeline()
        );
    }
    // Heartbeats are no elections (kube-apiserver's identity lease): the
    // one election is the Lease, named alike; one forced takeover each.
    for serve in [&by_etcd, &by_api] {
        assert_eq!(names(serve).await, [NAME]);
        let taken = "tenure_term_ends_total{cause=\"taken_over\"}";
        assert_eq!(serve.metric(taken).await, Some(1.0), "{taken}");
    }
    eprintln!(
        "{} terms, the same from etcd and through the API, after {:?}",
        want.len(),
        began.elapsed()
    );

    // A 410 on the list: the API serve stopped while a term begins and
    // ends, etcd compacted and kube-apiserver restarted, so neither etcd
    // nor the watch cache has its resourceVersion.
    let parts = Parts {
        etcd: &etcd,
        log: &log,
        dir: dir.path(),
        db: &api_db,
    };
    let (api, by_api, g) = parts.unseen_term(api, by_api, "g", true).await;
    // A 410 on the watch: the same without the compaction, so the exact
    // list at the stored resourceVersion reads it from etcd, and only the
    // new watch cache cannot start there.
    let (api, by_api, h) = parts.unseen_term(api, by_api, "h", false).await;
    let truth = kube::terms_of(&log.writes(), INTRUDER);
    let with_both = kube::wanted(&truth);
    assert_eq!(settled(&by_etcd, &with_both).await, with_both, "from etcd");
    for t in [&g, &h] {
        let ended = t.ended.expect("ended");
        let found = wait_for_gap(&by_api, t.token, ended).await;
        assert!(
            found
                .iter()
                .any(|(from, to)| *from <= t.token && ended <= *to),
            "no gap over {}'s term [{}, {ended}]: {found:?}\n{}",
            t.holder,
            t.token,
            by_api.log_text()
        );
    }
    // Unseen: never invented.
    assert_eq!(kube::recorded(&by_api, NAME).await, want, "through the API");

    for serve in [&by_etcd, &by_api] {
        assert_eq!(names(serve).await, [NAME]);
    }
    by_api.stop().await;
    by_etcd.stop().await;
    drop(cs);
    drop(api);
    eprintln!("the scenario took {:?}", began.elapsed());
}
