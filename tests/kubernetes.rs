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
const NAME: &str = "/registry/default/demo";
/// The holder the test writes over a live one through the API.
const INTRUDER: &str = "intruder";
const LEASE_API: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/demo";

/// One term as the test's own record groups the writes: a run of one
/// holder and one acquisition; the token is its first write's revision.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Term {
    holder: String,
    token: i64,
    ended: Option<i64>,
    started_seen_us: i64,
    ended_seen_us: Option<i64>,
    /// How the write that ended it shows the end: an empty holder
    /// (`resigned`), the object deleted (`deleted`), the intruder written
    /// over a live holder (`taken_over`), a candidate taking it
    /// (`expired`: client-go takes a Lease only once it ran out).
    ended_as: Option<&'static str>,
}

fn terms_of(writes: &[Write]) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    let mut open: Option<(String, Option<i64>)> = None;
    for w in writes {
        let now = (!w.deleted && !w.holder.is_empty()).then(|| (w.holder.clone(), w.acquire_us));
        if now == open {
            continue;
        }
        if open.is_some() {
            let last = out.last_mut().expect("open term");
            last.ended = Some(w.revision);
            last.ended_seen_us = Some(w.seen_us);
            last.ended_as = Some(if w.deleted {
                "deleted"
            } else if w.holder.is_empty() {
                "resigned"
            } else if w.holder == INTRUDER {
                "taken_over"
            } else {
                "expired"
            });
        }
        if let Some((holder, _)) = &now {
            out.push(Term {
                holder: holder.clone(),
                token: w.revision,
                ended: None,
                started_seen_us: w.seen_us,
                ended_seen_us: None,
                ended_as: None,
            });
        }
        open = now;
    }
    out
}

/// The terms serve recorded: (holder, token, ended revision, cause).
async fn recorded(serve: &Serve) -> Vec<(String, i64, Option<i64>, Option<String>)> {
    let url = serve.url("/api/v1/elections/%2Fregistry%2Fdefault%2Fdemo/terms?limit=1000");
    let v: Value = reqwest::get(url)
        .await
        .expect("terms")
        .json()
        .await
        .expect("json");
    let mut got: Vec<_> = v["terms"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| {
            (
                t["holder"].as_str().expect("holder").to_owned(),
                t["token"].as_i64().expect("token"),
                t["ended_revision"].as_i64(),
                t["end_cause"].as_str().map(str::to_owned),
            )
        })
        .collect();
    got.sort_by_key(|t| t.1);
    got
}

async fn revision(etcd: &Etcd) -> i64 {
    let mut c = etcd.client().await;
    c.get("x", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

/// The candidate of `id` among `cs`.
fn by_id<'a>(cs: &'a mut [Candidate], id: &str) -> &'a mut Candidate {
    cs.iter_mut()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no candidate {id}"))
}

/// Waits until serve counts `n` lapsed Leases (counted at most once a
/// second, after a watch answer: an idle stream answers a probe every few
/// seconds).
async fn lapsed(serve: &Serve, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while serve.metric("tenure_leases_lapsed").await != Some(n) {
        assert!(Instant::now() < deadline, "tenure_leases_lapsed never {n}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An RFC 3339 time with microseconds of unix µs `us`.
fn micro_time(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (H. Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        us.rem_euclid(1_000_000)
    )
}

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

    let mut cs: Vec<Candidate> = ["a", "b", "c"]
        .iter()
        .map(|id| Candidate::start(&api, "default", "demo", id))
        .collect();
    let long = Duration::from_secs(30);
    let held = |w: &Write| !w.deleted && !w.holder.is_empty();
    let first = log.wait_for("a first holder", long, held).await;
    let mut causes = Vec::new();

    // 1. A release: SIGTERM, client-go writes an empty holder.
    let l1 = first.holder.clone();
    by_id(&mut cs, &l1).signal(Signal::SIGTERM);
    assert_eq!(by_id(&mut cs, &l1).wait(long).await, Some(0));
    causes.push("resigned");
    let w = log
        .wait_for("a second holder", long, |w| held(w) && w.holder != l1)
        .await;
    let l2 = w.holder.clone();
    cs.push(Candidate::start(&api, "default", "demo", "d"));

    // 2. kill -9 of the leader: another takes it once the Lease ran out.
    by_id(&mut cs, &l2).signal(Signal::SIGKILL);
    causes.push("expired");
    let w = log
        .wait_for("a third holder", long, |w| {
            held(w) && w.holder != l1 && w.holder != l2
        })
        .await;
    let l3 = w.holder.clone();

    // serve killed -9 and restarted while l3 leads.
    serve.crash().await;
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;

    // 3. A forced takeover: the Lease edited to another holder through the
    // API while l3 still renews (its renewal two seconds old at most).
    let intruder = INTRUDER;
    loop {
        let (status, body) = api.curl("GET", LEASE_API, None).await;
        assert_eq!(status, 200, "{body}");
        let mut lease: Value = serde_json::from_str(&body).expect("lease");
        let spec = &mut lease["spec"];
        assert_eq!(spec["holderIdentity"].as_str(), Some(l3.as_str()));
        let now = micro_time(kube::unix_us());
        let transitions = spec["leaseTransitions"].as_i64().unwrap_or(0) + 1;
        spec["holderIdentity"] = intruder.into();
        spec["acquireTime"] = now.clone().into();
        spec["renewTime"] = now.into();
        spec["leaseTransitions"] = transitions.into();
        let (status, body) = api.curl("PUT", LEASE_API, Some(&lease.to_string())).await;
        match status {
            200 => break,
            // l3's renewal came first: read it again.
            409 => continue,
            s => panic!("PUT lease: {s} {body}"),
        }
    }
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
    assert_eq!(by_id(&mut cs, &l3).wait(long).await, Some(1));

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
    by_id(&mut cs, &l4).signal(Signal::SIGTERM);
    assert_eq!(by_id(&mut cs, &l4).wait(long).await, Some(0));
    causes.push("resigned");
    let head = revision(&etcd).await;
    log.wait_for("the last write", long, |w| {
        w.revision >= head - 1 && w.holder.is_empty()
    })
    .await;

    // 6. A frozen leader, nobody else: its Lease lapses (renewals stopped,
    // nobody took over yet), counted by tenure_leases_lapsed; a candidate
    // that comes takes it once it ran out: expired.
    let e = Candidate::start(&api, "default", "demo", "e");
    log.wait_for("e holding", long, |w| w.holder == "e").await;
    e.signal(Signal::SIGSTOP);
    causes.push("expired");
    lapsed(&serve, 1.0).await;
    let mut f = Candidate::start(&api, "default", "demo", "f");
    log.wait_for("f holding", long, |w| w.holder == "f").await;
    lapsed(&serve, 0.0).await;
    e.signal(Signal::SIGKILL);
    f.signal(Signal::SIGTERM);
    assert_eq!(f.wait(long).await, Some(0));
    causes.push("resigned");
    let head = revision(&etcd).await;
    log.wait_for("f's release", long, |w| {
        w.revision >= head - 1 && w.holder.is_empty()
    })
    .await;
    cs.push(e);
    cs.push(f);
    serve.caught_up(revision(&etcd).await).await;

    // The test's own record against tenure's.
    let truth = terms_of(&log.writes());
    assert_eq!(truth.len(), 8, "{}", log.timeline());
    let got = recorded(&serve).await;
    // Each end as the record shows it, and as the test meant it: a
    // SIGTERM's release can lose its write (client-go's release conflicts
    // with its own renewal right after acquiring: seen on etcd 3.7.4), and
    // then the Lease runs out and is taken: expired. Nothing else may differ.
    for (t, meant) in truth.iter().zip(&causes) {
        let shown = t.ended_as.expect("ended");
        if (*meant, shown) == ("resigned", "expired") {
            eprintln!("{}'s release was not written: its Lease ran out", t.holder);
        } else {
            assert_eq!(shown, *meant, "{t:?}\n{}", log.timeline());
        }
    }
    let want: Vec<_> = truth
        .iter()
        .map(|t| {
            (
                t.holder.clone(),
                t.token,
                t.ended,
                t.ended_as.map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        got,
        want,
        "\ngot  {got:?}\nwant {want:?}\n{}",
        log.timeline()
    );
    let holders: Vec<&str> = truth.iter().map(|t| t.holder.as_str()).collect();
    assert_eq!(holders, [&*l1, &*l2, &*l3, intruder, &*l4, &*l4, "e", "f"]);

    // Each candidate's own word on one clock: it started leading when etcd
    // took its acquiring write (within a second of the watch's arrival).
    for t in truth.iter().filter(|t| t.holder != intruder) {
        let starts = by_id(&mut cs, &t.holder).times("started-leading");
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
    let stop = |cs: &mut [Candidate], id: &str| by_id(cs, id).times("stopped-leading");
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
