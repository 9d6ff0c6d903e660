//! tenure watching Kubernetes' own leader election from kube-apiserver's
//! etcd (`serve --source kubernetes:/registry/`), with the real parts: a
//! kube-apiserver v1.37 on the harness etcd and client-go v0.37
//! `leaderelection` candidates (LeaseLock) on one Lease `default/demo`.
//!
//! The scenario: a release (SIGTERM, client-go's ReleaseOnCancel), a kill
//! -9 of the leader (the Lease left to run out), serve killed -9 and
//! restarted, a forced takeover (the Lease edited to another holder through
//! the API while its holder still renews), the Lease deleted, and a last
//! release, then a frozen leader alone (SIGSTOP: its Lease lapses, counted
//! by tenure_leases_lapsed, until a new candidate takes it: expired). Every
//! term tenure recorded is checked against the test's own
//! record, not tenure's code: its etcd watch of the Lease key (each write's
//! revision and holder, read by a wire walk of its own,
//! `support::kube::LeaseLog`), what the test did (the cause each end must
//! have), and each candidate's own started/stopped-leading lines, on the
//! host's clock like the watch's arrivals.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::kube::{self, Candidate, KubeApiserver, LeaseLog, Write};
use support::{Etcd, Serve};

const KEY: &str = "/registry/leases/default/demo";
const NAME: &str = "default/demo";
/// The holder the test writes over a live one through the API.
const INTRUDER: &str = "intruder";
const LEASE_API: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/demo";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_terms_are_recorded_as_kube_apiserver_wrote_them() {
    if !kube::available() {
        return;
    }
    let began = Instant::now();
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let log = LeaseLog::start(etcd.client().await, KEY).await;
    let api = KubeApiserver::start(&etcd.endpoint()).await;
    eprintln!("kube-apiserver ready after {:?}", began.elapsed());
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let source = "kubernetes:/registry/";
    let args: Vec<&str> = if support::fixtures::merges_several_ranges(&mut raw).await {
        vec!["--source", source]
    } else {
        vec!["--sources-only", "--source", source]
    };
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;

    let mut cs = kube::candidates(&api, "default", "demo", &["a", "b", "c"]);
    let long = Duration::from_secs(30);
    let held = |w: &Write| !w.deleted && !w.holder.is_empty();
    let first = log.wait_for("a first holder", long, held).await;
    let mut causes = Vec::new();

    // 1. A release: SIGTERM, client-go writes an empty holder.
    let l1 = first.holder.clone();
    kube::by_id(&mut cs, &l1).signal(Signal::SIGTERM);
    assert_eq!(kube::by_id(&mut cs, &l1).wait(long).await, Some(0));
    causes.push("resigned");
    let w = log
        .wait_for("a second holder", long, |w| held(w) && w.holder != l1)
        .await;
    let l2 = w.holder.clone();
    cs.push(Candidate::start(&api, "default", "demo", "d"));

    // 2. kill -9 of the leader: another takes it once the Lease ran out.
    // Once it says it leads (its own word is checked below).
    kube::by_id(&mut cs, &l2)
        .said_by_now("started-leading")
        .await;
    kube::by_id(&mut cs, &l2).signal(Signal::SIGKILL);
    causes.push("expired");
    let w = log
        .wait_for("a third holder", long, |w| {
            held(w) && w.holder != l1 && w.holder != l2
        })
        .await;
    let l3 = w.holder.clone();

    // serve killed -9 and restarted while l3 leads, once it recorded l3's
    // acquisition: l3's term, not l2's, is the one read again after the
    // restart (its renewals counted from that read).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !kube::events(&serve, NAME)
        .await
        .iter()
        .any(|e| e["type"] == "term_started" && e["holder"] == l3.as_str())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "l3's term never recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    serve.crash().await;
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;

    // 3. A forced takeover: the Lease edited to another holder through the
    // API while l3 still renews (its renewal two seconds old at most).
    let intruder = INTRUDER;
    kube::take_over(&api, LEASE_API, &l3, intruder).await;
    causes.push("taken_over");
    // Nobody renews the intruder's claim: the one candidate left takes it
    // after its 4 s.
    let w = log
        .wait_for("a holder after the intruder", long, |w| {
            held(w)
                && ![l1.as_str(), l2.as_str(), l3.as_str(), intruder].contains(&w.holder.as_str())
        })
        .await;
    causes.push("expired");
    let l4 = w.holder.clone();
    // l3 learns it lost at its next renewal and stops leading (exit 1).
    assert_eq!(kube::by_id(&mut cs, &l3).wait(long).await, Some(1));

    // 4. The Lease deleted through the API: l4's next renewal creates it
    // again, with the acquireTime and leaseTransitions client-go kept (the
    // same bytes as before but a new object: a new term).
    let (status, body) = api.curl("DELETE", LEASE_API, None).await;
    assert_eq!(status, 200, "{body}");
    causes.push("deleted");
    let gone = log.wait_for("the deletion", long, |w| w.deleted).await;
    log.wait_for("the Lease created again", long, |w| {
        w.revision > gone.revision && held(w)
    })
    .await;

    // 5. A last release.
    kube::by_id(&mut cs, &l4).signal(Signal::SIGTERM);
    assert_eq!(kube::by_id(&mut cs, &l4).wait(long).await, Some(0));
    causes.push("resigned");
    let head = kube::head(&etcd).await;
    log.wait_for("the last write", long, |w| {
        w.revision >= head - 1 && w.holder.is_empty()
    })
    .await;

    // 6. A frozen leader, nobody else: its Lease lapses (renewals stopped,
    // nobody took over yet), counted by tenure_leases_lapsed; a candidate
    // that comes takes it once it ran out: expired.
    let e = Candidate::start(&api, "default", "demo", "e");
    log.wait_for("e holding", long, |w| w.holder == "e").await;
    e.said_by_now("started-leading").await;
    // Renewed twice at least (its cadence is read off the page below).
    log.wait_for("e renewing", long, |w| {
        w.holder == "e"
            && w.renew_us
                .zip(w.acquire_us)
                .is_some_and(|(r, a)| r - a >= 900_000)
    })
    .await;
    e.signal(Signal::SIGSTOP);
    causes.push("expired");
    kube::lapsed(&serve, 1.0).await;
    // The page says it lapsed, and e's cadence as its own last two
    // renewals in the test's watch give it (client-go's 500 ms retry).
    let page = kube::page(&serve, NAME).await;
    assert!(
        page.contains(r#"id="lapsed""#),
        "no lapsed warning:\n{page}"
    );
    let renewed: Vec<i64> = log
        .writes()
        .iter()
        .filter(|w| w.holder == "e")
        .filter_map(|w| w.renew_us)
        .collect();
    let every = renewed[renewed.len() - 1] - renewed[renewed.len() - 2];
    let every = format!(
        "every {} by its clock",
        tenure::history::format_duration_ms(every / 1000)
    );
    assert!(page.contains(&every), "{every:?} not on the page:\n{page}");
    let mut f = Candidate::start(&api, "default", "demo", "f");
    log.wait_for("f holding", long, |w| w.holder == "f").await;
    kube::lapsed(&serve, 0.0).await;
    e.signal(Signal::SIGKILL);
    f.signal(Signal::SIGTERM);
    assert_eq!(f.wait(long).await, Some(0));
    causes.push("resigned");
    let head = kube::head(&etcd).await;
    log.wait_for("f's release", long, |w| {
        w.revision >= head - 1 && w.holder.is_empty()
    })
    .await;
    cs.push(e);
    cs.push(f);
    serve.caught_up(kube::head(&etcd).await).await;

    // The test's own record against tenure's.
    let truth = kube::terms_of(&log.writes(), INTRUDER);
    assert_eq!(truth.len(), 8, "{}", log.timeline());
    let got = kube::recorded(&serve, NAME).await;
    // Each end as the record shows it, and as the test meant it: a
    // SIGTERM's release can lose its write (client-go's release conflicts
    // with its own renewal right after acquiring: seen on etcd 3.7.4), and
    // then the Lease runs out and is taken: expired. Nothing else may differ.
    let mut ran_out = Vec::new();
    for (t, meant) in truth.iter().zip(&causes) {
        let shown = t.ended_as.expect("ended");
        if (*meant, shown) == ("resigned", "expired") {
            eprintln!("{}'s release was not written: its Lease ran out", t.holder);
            ran_out.push(t.holder.as_str());
        } else {
            assert_eq!(shown, *meant, "{t:?}\n{}", log.timeline());
        }
    }
    let want = kube::wanted(&truth);
    assert_eq!(
        got,
        want,
        "\ngot  {got:?}\nwant {want:?}\n{}",
        log.timeline()
    );
    // Each handover (last renewal to the next acquisition) as the test's
    // watch read the values: l2 killed, l3 forced out, the intruder never
    // renewing, e frozen.
    let handovers = kube::handovers(&log.writes());
    assert_eq!(
        kube::recorded_handovers(&serve, NAME).await,
        handovers,
        "\n{}",
        log.timeline()
    );
    // A release that was not written is a handover too (its Lease ran
    // out and was taken).
    let who: Vec<&str> = handovers.iter().map(|(h, _)| h.as_str()).collect();
    let meant: Vec<&str> = who
        .iter()
        .copied()
        .filter(|h| !ran_out.contains(h))
        .collect();
    assert_eq!(meant, [&*l2, &*l3, intruder, "e"]);
    assert!(
        ran_out.iter().all(|h| who.contains(h)),
        "{who:?} {ran_out:?}"
    );
    // Only l3's term ran through serve's restart: its renewal count is a
    // floor (counted from the restarted serve's read); every other term's
    // is whole.
    let partial: Vec<String> = kube::events(&serve, NAME)
        .await
        .iter()
        .filter(|e| e["type"] == "term_ended" && e["renewals"]["partial"] == true)
        .map(|e| e["holder"].as_str().expect("holder").to_owned())
        .collect();
    assert_eq!(partial, std::slice::from_ref(&l3), "{}", log.timeline());
    let holders: Vec<&str> = truth.iter().map(|t| t.holder.as_str()).collect();
    assert_eq!(holders, [&*l1, &*l2, &*l3, intruder, &*l4, &*l4, "e", "f"]);

    // Each candidate's own word on one clock: it started leading when etcd
    // took its acquiring write (within a second of the watch's arrival).
    for t in truth.iter().filter(|t| t.holder != intruder) {
        let starts = kube::by_id(&mut cs, &t.holder).times("started-leading");
        assert!(
            starts
                .iter()
                .any(|s| (s - t.started_seen_us).abs() < 1_000_000),
            "{} started leading at {starts:?}, its term's first write arrived at {}",
            t.holder,
            t.started_seen_us
        );
    }
    // The released ones stopped before (or as) their release arrived; the
    // one taken over still believed it led after the intruder's write: the
    // two-leaders the cause names.
    let stop = |cs: &mut [Candidate], id: &str| kube::by_id(cs, id).times("stopped-leading");
    let released = truth[0].ended_seen_us.expect("released");
    assert!(stop(&mut cs, &l1)
        .iter()
        .any(|s| *s <= released + 1_000_000));
    assert!(stop(&mut cs, &l2).is_empty(), "killed -9: no word");
    let taken = truth[2].ended_seen_us.expect("taken over");
    let l3_stopped = stop(&mut cs, &l3);
    assert!(
        l3_stopped.iter().all(|s| *s > taken),
        "{l3} stopped at {l3_stopped:?}, taken over at {taken}"
    );
    eprintln!(
        "{l3} kept leading {:?} ms after the forced takeover",
        l3_stopped.first().map(|s| (s - taken) / 1000)
    );

    // Heartbeats are no elections: kube-apiserver's identity lease is not
    // listed; the one election is the Lease.
    let v: Value = reqwest::get(serve.url("/api/v1/elections"))
        .await
        .expect("elections")
        .json()
        .await
        .expect("json");
    let names: Vec<&str> = v["elections"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, [NAME], "{v}");
    assert_eq!(
        serve
            .metric("tenure_term_ends_total{cause=\"taken_over\"}")
            .await,
        Some(1.0)
    );
    serve.stop().await;
    drop(cs);
    drop(api);
    eprintln!("the scenario took {:?}", began.elapsed());
}
