//! Kubernetes' Leases read through its API (`serve --kubeconfig`), beside
//! a serve reading the same Leases from kube-apiserver's etcd (`--source
//! kubernetes:/registry/`), with the real parts: kube-apiserver v1.37 on
//! the harness etcd, client-go v0.37 `leaderelection` candidates on
//! `default/demo`, and tenure's ServiceAccount bound to the ClusterRole
//! deploy/kubernetes ships (get, list and watch on leases: shown to read
//! Leases and nothing else).
//!
//! The scenario: a release, a kill -9 (expiry), the API serve killed -9
//! and restarted, a forced takeover through the API, the Lease deleted, a
//! release, then a frozen leader alone (its Lease lapses, counted by both
//! serves, until a new candidate takes it: expired) and a last release. Both histories must equal the test's own record (its
//! etcd watch of the Lease key, `support::kube::LeaseLog`): the same
//! holders, tokens (etcd revisions), ends and causes. Then the API serve
//! is stopped while a term begins and ends, etcd is compacted and
//! kube-apiserver restarted (its watch cache starts over): the API serve
//! resumes at a resourceVersion nobody has any more (410 Gone), lists
//! afresh and records a gap over that term, never the term itself; the
//! etcd serve, which watched throughout, has it. Once more without the
//! compaction: the exact list at the stored resourceVersion is read from
//! etcd, and the new watch cache refuses the watch from there (410).
//!
//! Within it: `tenure leader` on the Lease, from etcd and through the API,
//! against the Lease as kube-apiserver returns it and the test's etcd
//! watch; a user no role is bound to (403: said on stderr and in /readyz,
//! retried until a binding grants the verbs). Beside it: an API that never
//! answers (/readyz names the API, not etcd) and one whose
//! resourceVersions are not integers (serve exits 1 saying what to do).
//!
//! Beside it, what the API's sizes and connections may do: a tenant's 55
//! Leases with a 1.3 MB holderIdentity (a 72 MB list) beside a renewed
//! Lease in another namespace (recorded, ready); a proxy whose open
//! connections stop forwarding (noticed within 12 s, the handover
//! recorded); 100 Leases per etcd transaction (every one recorded).
//!
//! Wall time: 39-45 s on 2 shared cores (kube-apiserver started three
//! times, 3-6 s each; three 4 s Leases run out).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::kube::{self, Candidate, KubeApiserver, LeaseLog, Recorded, Term, Write};
use support::{Etcd, Serve};

const KEY: &str = "/registry/leases/default/demo";
const NAME: &str = "default/demo";
const INTRUDER: &str = "intruder";
const LEASE_API: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/demo";

/// Waits (20 s at most) until `serve` recorded `want`; what it recorded.
/// The Lease's page through the API, once its renewals are read: no etcd
/// lease or TTL, no "not read live" banner, when the lease runs out.
async fn lease_page_speaks_kubernetes(serve: &Serve, api: &KubeApiserver) {
    let url = serve.url(&format!("/elections/{}", NAME.replace('/', "%2F")));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let page = loop {
        let page = reqwest::get(&url)
            .await
            .expect("GET")
            .text()
            .await
            .expect("body");
        if page.contains("id=\"runs-out\">in ") {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no 'runs out in': {page}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for etcd_word in [
        "not read live",
        "0 <span class=\"muted\">· lease",
        "TTL left",
        "etcd reachable",
    ] {
        assert!(
            !page.contains(etcd_word),
            "{etcd_word:?} on the Lease page: {page}"
        );
    }
    assert!(page.contains("Kubernetes Lease"), "{page}");
    // Named as Kubernetes names it; kube-apiserver's etcd prefix nowhere.
    assert!(
        page.contains(&format!("<h1 class=\"election-name\">{NAME}</h1>")),
        "{page}"
    );
    assert!(!page.contains("/registry"), "{page}");
    // Its own figures, as the API has them (its holder renews steadily).
    let (status, body) = api.curl("GET", LEASE_API, None).await;
    assert_eq!(status, 200, "{body}");
    let lease: Value = serde_json::from_str(&body).expect("a Lease");
    let transitions = lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0);
    let duration = lease["spec"]["leaseDurationSeconds"]
        .as_i64()
        .expect("duration");
    for figure in [
        format!("id=\"transitions\">{transitions} "),
        format!("id=\"lease-duration\">{duration} s "),
        "renewTime, by the holder's clock".to_owned(),
        "id=\"no-margin\"".to_owned(),
    ] {
        assert!(page.contains(&figure), "{figure:?} not on the page: {page}");
    }
    // Its holder's identity is no hostname_uuid: no pod guessed.
    assert!(!page.contains("holder-pod"), "{page}");
    assert!(!page.contains(">Margin</th>"), "{page}");
    no_etcd_word_in_a_browser(serve).await;
}

/// The overview and the Lease's page as a browser shows them (headless
/// Chromium): named as Kubernetes names it, and no word of etcd in any
/// text a reader sees.
async fn no_etcd_word_in_a_browser(serve: &Serve) {
    let browser = support::Browser::start().await;
    let check = format!(
        "const t = document.body.innerText; \
         return t.includes('{NAME}') && !t.toLowerCase().includes('etcd') \
         && !t.includes('/registry')"
    );
    browser.goto(&serve.url("/")).await;
    browser
        .wait_for(&check, "the overview: the Lease named, no etcd word")
        .await;
    browser
        .goto(&serve.url(&format!("/elections/{}", NAME.replace('/', "%2F"))))
        .await;
    browser
        .wait_for(
            &format!("{check} && document.getElementById('runs-out') !== null"),
            "the Lease's page: no etcd word",
        )
        .await;
    browser.quit().await;
}

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

/// The gaps serve recorded: (from, to) revisions.
async fn gaps(serve: &Serve) -> Vec<(i64, i64)> {
    kube::events(serve, NAME)
        .await
        .iter()
        .filter(|e| e["type"] == "gap")
        .map(|e| {
            let rev = |k: &str| e[k].as_i64().unwrap_or_else(|| panic!("{k} in {e}"));
            (rev("from_revision"), rev("to_revision"))
        })
        .collect()
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

/// A token of tenure's ServiceAccount in `dir/token`, and a kubeconfig
/// for it at `dir/kubeconfig`; the account reads Leases and nothing else.
async fn reader(api: &KubeApiserver, dir: &Path) -> String {
    let kubeconfig = api.reader_kubeconfig(dir).await;
    let token = std::fs::read_to_string(dir.join("token")).unwrap();
    let leases = "/apis/coordination.k8s.io/v1/leases";
    assert_eq!(api.status_as(&token, leases).await, 200);
    assert_eq!(api.status_as(&token, "/api/v1/secrets").await, 403);
    assert_eq!(
        api.status_as(&token, "/api/v1/namespaces/default/configmaps")
            .await,
        403
    );
    kubeconfig.display().to_string()
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

/// A token the API does not accept: serve says to give a fresh one (not
/// to grant a role, which cannot help), and is not ready.
async fn refused_is_said(api: &KubeApiserver, dir: &Path) {
    let bad = dir.join("refused");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("token"), "not-a-token").unwrap();
    let kubeconfig = bad.join("kubeconfig");
    api.kubeconfig_for("token", &kubeconfig);
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &bad.join("h.db"), &args, &[]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !serve
        .log_text()
        .contains("did not accept tenure's credentials")
    {
        assert!(Instant::now() < deadline, "{}", serve.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(serve.log_text().contains("(401)"), "{}", serve.log_text());
    assert!(
        !serve.log_text().contains("ClusterRole tenure-lease-reader"),
        "{}",
        serve.log_text()
    );
    let ready = reqwest::get(serve.url("/readyz")).await.expect("readyz");
    assert_eq!(ready.status().as_u16(), 503);
    serve.stop().await;
}

/// A user no role is bound to (kube-apiserver's static token `unbound`):
/// serve says on stderr and in /readyz which verbs on which resource it
/// lacks, and keeps trying: once a binding grants them, it is ready.
async fn denied_is_said(api: &KubeApiserver, dir: &Path) {
    let denied = dir.join("denied");
    std::fs::create_dir(&denied).unwrap();
    std::fs::copy(api.dir.path().join("unbound-token"), denied.join("token")).unwrap();
    let kubeconfig = denied.join("kubeconfig");
    api.kubeconfig_for("token", &kubeconfig);
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &denied.join("h.db"), &args, &[]).await;
    let what = "needs get, list and watch on coordination.k8s.io leases in every namespace";
    let deadline = Instant::now() + Duration::from_secs(20);
    while !serve.log_text().contains("(403)") {
        assert!(Instant::now() < deadline, "{}", serve.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(serve.log_text().contains(what), "{}", serve.log_text());
    let ready = reqwest::get(serve.url("/readyz")).await.expect("readyz");
    assert_eq!(ready.status().as_u16(), 503);
    let text = ready.text().await.unwrap();
    for said in [what, "(403)", "ClusterRole tenure-lease-reader", "unbound"] {
        assert!(text.contains(said), "/readyz lacks {said:?}: {text}");
    }
    // Granted meanwhile: the retries read the Leases.
    let binding = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"unbound-reads-leases"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"tenure-lease-reader"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"unbound"}]}"#;
    let path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let (status, body) = api.curl("POST", path, Some(binding)).await;
    assert_eq!(status, 201, "{body}");
    serve.ready().await;
    serve.stop().await;
}

/// `tenure leader NAME --json` with `args`; its exit code, the JSON it
/// printed (`Null` when none) and its stderr.
async fn leader(endpoint: &str, args: &[&str]) -> (Option<i32>, Value, String) {
    let out = tokio::process::Command::new(support::tenure_bin())
        .args(["leader", NAME, "--json"])
        .args(args)
        .env("TENURE_ENDPOINTS", endpoint)
        .env_remove("TENURE_SOURCES")
        .env_remove("TENURE_PREFIX")
        .output()
        .await
        .expect("tenure leader");
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), json, err)
}

/// `tenure leader` from etcd and through the API, against the Lease as
/// kube-apiserver returns it (its holder frozen: nothing writes it) and
/// the test's own etcd watch (`token`: the revision of the write that gave
/// it to its holder). Whether it lapsed (`lapsed`: read once its renewTime
/// plus duration passed, else before), by its own clock fields.
async fn leader_agrees(
    api: &KubeApiserver,
    etcd: &str,
    kubeconfig: &str,
    token: i64,
    lapsed: bool,
) {
    let (status, body) = api.curl("GET", LEASE_API, None).await;
    assert_eq!(status, 200, "{body}");
    let lease: Value = serde_json::from_str(&body).unwrap();
    let spec = &lease["spec"];
    let rv: i64 = lease["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let from_etcd = ["--source", "kubernetes:/registry/"];
    let through_api = ["--kubeconfig", kubeconfig];
    for (args, token_is, want) in [
        (&from_etcd, "acquisition", token),
        (&through_api, "value_revision", rv),
    ] {
        let (got, before, after) = loop {
            let before = kube::unix_us();
            let (code, got, err) = leader(etcd, args).await;
            let after = kube::unix_us();
            assert_eq!(code, Some(0), "{args:?}: {err}");
            let out = got["runs_out_us"].as_i64().unwrap_or(i64::MAX);
            // Lapsed wanted: read again once its moment passed.
            if !lapsed || before > out {
                break (got, before, after);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(got["holder"], spec["holderIdentity"], "{got}");
        // A plain identity (`e`) names no pod.
        assert_eq!(got["pod"], Value::Null, "{got}");
        let token_got = (got["token"].as_i64(), got["token_is"].as_str());
        assert_eq!(token_got, (Some(want), Some(token_is)), "{got}");
        assert_eq!(got["revision"].as_i64(), Some(rv), "{got}");
        let time = |k: &str| got[k].as_i64().map(kube::micro_time);
        let renewed = spec["renewTime"].as_str();
        assert_eq!(time("renewed_us").as_deref(), renewed, "{got}");
        let acquired = spec["acquireTime"].as_str();
        assert_eq!(time("acquired_us").as_deref(), acquired, "{got}");
        assert_eq!(
            got["duration_seconds"], spec["leaseDurationSeconds"],
            "{got}"
        );
        assert_eq!(got["transitions"], spec["leaseTransitions"], "{got}");
        // renewTime (checked above) plus the duration, on the test's clock.
        let out = got["renewed_us"].as_i64().unwrap()
            + spec["leaseDurationSeconds"].as_i64().unwrap() * 1_000_000;
        assert_eq!(got["runs_out_us"].as_i64(), Some(out), "{got}");
        if lapsed {
            assert!(before > out);
        } else {
            assert!(
                after < out,
                "read {} µs after it ran out: too late",
                after - out
            );
        }
        assert_eq!(got["lapsed"], lapsed, "{got}");
    }
}

/// Nobody holds the Lease: `tenure leader` says so both ways, exit 1.
async fn leader_says_nobody(etcd: &str, kubeconfig: &str) {
    for args in [
        ["--source", "kubernetes:/registry/"],
        ["--kubeconfig", kubeconfig],
    ] {
        let (code, got, err) = leader(etcd, &args).await;
        assert_eq!(code, Some(1), "{args:?}: {got} {err}");
        assert!(err.contains("nobody leads"), "{err}");
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
    let etcd_args: Vec<&str> = if support::fixtures::merges_several_ranges(&mut raw).await {
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

/// A Kubernetes API that never answers (a port that accepts and is
/// silent): /readyz names it, not etcd (which this serve never reads),
/// while the first list waits, then says why it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_the_kubernetes_api_it_cannot_reach() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    // Connections complete in its backlog; nothing ever answers them.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context:\n    \
         cluster: k\n    user: u\nclusters:\n- name: k\n  cluster:\n    server: \
         https://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    token: t\n"
    );
    std::fs::write(&kubeconfig, text).unwrap();
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    let readyz = || async {
        let ready = reqwest::get(serve.url("/readyz")).await.expect("readyz");
        assert_eq!(ready.status().as_u16(), 503);
        ready.text().await.unwrap()
    };
    // The first list waits up to 10 s for an answer.
    assert_eq!(
        readyz().await,
        "not ready: the Kubernetes API unreachable or the watcher has not loaded its \
         snapshot yet\n"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = readyz().await;
        assert!(!text.contains("etcd"), "{text}");
        if text.contains(&format!(
            "the Kubernetes API at 127.0.0.1:{port} did not answer"
        )) {
            break;
        }
        assert!(text.contains("the Kubernetes API"), "{text}");
        assert!(Instant::now() < deadline, "{text}\n{}", serve.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    serve.stop().await;
    drop(silent);
}

/// An API server whose resourceVersions are not integers (not etcd's
/// revisions: a Python HTTPS server answering every GET with such a
/// LeaseList): serve says what to do instead and exits 1, never relisting
/// for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_version_that_is_no_revision_stops_serve_with_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = serving_cert(dir.path()).await;
    let server = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","metadata":{"resourceVersion":"a1b2"},"items":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
    let mut fake = tokio::process::Command::new("python3")
        .args(["-c", server])
        .arg(&cert)
        .arg(&key)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    use tokio::io::AsyncBufReadExt;
    let out = fake.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(out).lines();
    let port: u16 = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the fake server's port")
        .unwrap()
        .expect("a port line")
        .trim()
        .parse()
        .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context:\n    \
         cluster: k\n    user: u\nclusters:\n- name: k\n  cluster:\n    server: \
         https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    \
         token: t\n",
        ca.display()
    );
    std::fs::write(&kubeconfig, text).unwrap();
    let args = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let mut serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    assert_eq!(serve.exited(Duration::from_secs(20)).await, Some(1));
    let log = serve.log_text();
    for said in [
        "resourceVersion \"a1b2\", which is not an integer",
        "--source kubernetes:/registry/",
        "the watcher of the Kubernetes API stopped",
    ] {
        assert!(log.contains(said), "{said:?} not in\n{log}");
    }
    let _ = fake.kill().await;
}

/// A CA and a serving certificate for 127.0.0.1 signed by it (rustls takes
/// no CA as a leaf): (ca.crt, server.crt, server.key) under `dir`.
async fn serving_cert(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let p = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    std::fs::write(
        dir.join("ext"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    .unwrap();
    let steps: [Vec<String>; 3] = [
        [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=ca",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain(["-keyout", &p("ca.key"), "-out", &p("ca.crt")].map(str::to_owned))
        .collect(),
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=fake"]
            .map(str::to_owned)
            .into_iter()
            .chain(["-keyout", &p("server.key"), "-out", &p("server.csr")].map(str::to_owned))
            .collect(),
        ["x509", "-req", "-days", "1", "-CAcreateserial"]
            .map(str::to_owned)
            .into_iter()
            .chain(
                [
                    "-in",
                    &p("server.csr"),
                    "-CA",
                    &p("ca.crt"),
                    "-CAkey",
                    &p("ca.key"),
                    "-extfile",
                    &p("ext"),
                    "-out",
                    &p("server.crt"),
                ]
                .map(str::to_owned),
            )
            .collect(),
    ];
    for args in steps {
        let out = tokio::process::Command::new("openssl")
            .args(&args)
            .output()
            .await
            .expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    }
    (
        dir.join("ca.crt"),
        dir.join("server.crt"),
        dir.join("server.key"),
    )
}

/// A tenant who may create Leases in one namespace (`default`) writes 55
/// of them, each held by a 1.3 MB holderIdentity (kube-apiserver accepts
/// it; etcd's default request limit is 1.5 MiB): one list of them all
/// passes 64 MiB. A controller renews its Lease in another namespace
/// (`kube-system/kcm`) throughout. `serve --kubeconfig` loads anyway,
/// records the controller's term and is ready; the tenant's Leases are
/// read one at a time, their holders cut as from etcd (256 bytes, `…`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_huge_leases_never_blind_the_record_of_another_namespace() {
    if !kube::available() {
        return;
    }
    let began = Instant::now();
    let etcd = Etcd::start().await;
    let api = KubeApiserver::start(&etcd.endpoint()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = reader(&api, dir.path()).await;
    api.create_big_leases("default", 55, 1_300_000).await;
    // And one the layout cannot read (a time before 1970): named, counted.
    let old = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"old","namespace":"default"},"spec":{"holderIdentity":"o","acquireTime":"1969-12-31T23:59:59.000000Z"}}"#;
    let path = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let (status, body) = api.curl("POST", path, Some(old)).await;
    assert_eq!(status, 201, "{body}");
    let renewer = kube::JsonRenewer::start(&etcd).await;
    eprintln!("55 Leases of 1.3 MB written after {:?}", began.elapsed());
    let args = ["--kubeconfig", kubeconfig.as_str()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    serve.ready().await;
    let loaded = began.elapsed();
    kube::renewing_read(&serve).await;
    let terms = kube::recorded(&serve, kube::RENEWED).await;
    assert!(
        matches!(terms.as_slice(), [(holder, _, None, None)] if holder == kube::RENEWER),
        "{terms:?}\n{}",
        serve.log_text()
    );
    // The tenant's own Leases are recorded too, their holders cut.
    let big = kube::recorded(&serve, "default/big-7").await;
    let cut = format!("{}…", "h".repeat(256));
    assert!(
        matches!(big.as_slice(), [(holder, _, None, None)] if *holder == cut),
        "{:?}",
        big.iter().map(|t| t.0.len()).collect::<Vec<_>>()
    );
    let said = "/registry/leases/default/old: a Lease whose spec cannot be read";
    assert!(serve.log_text().contains(said), "{}", serve.log_text());
    let ignored = serve.metric("tenure_watch_ignored_keys_total").await;
    assert!(ignored >= Some(1.0), "{ignored:?}");
    assert_eq!(kube::recorded(&serve, "default/old").await, []);
    renewer.stop().await;
    serve.stop().await;
    eprintln!(
        "ready after {loaded:?}, the test took {:?}",
        began.elapsed()
    );
}

/// The API serve reads through a TCP proxy whose open connections then
/// stop forwarding (half-open: nothing closes, nothing arrives), and the
/// leader releases the Lease to the other candidate. The watch's silence
/// is noticed (a live one bookmarks or ends within 10 s), /readyz says so
/// meanwhile, and a new watch on a new connection records the handover
/// within 20 s, not as a gap (kube-apiserver still has the revisions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_watch_is_noticed_and_the_handover_recorded_within_20_s() {
    if !kube::available() {
        return;
    }
    let etcd = Etcd::start().await;
    let log = LeaseLog::start(etcd.client().await, KEY).await;
    let api = KubeApiserver::start(&etcd.endpoint()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = reader(&api, dir.path()).await;
    let target = format!("127.0.0.1:{}", api.port).parse().unwrap();
    let proxy = support::proxy::Proxy::start(target).await;
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let through = text.replace(
        &format!("https://127.0.0.1:{}", api.port),
        &format!("https://{}", proxy.addr),
    );
    std::fs::write(&kubeconfig, through).unwrap();
    let mut cs = kube::candidates(&api, "default", "demo", &["a", "b"]);
    let long = Duration::from_secs(30);
    let first = log
        .wait_for("a holder", long, |w| !w.deleted && !w.holder.is_empty())
        .await;
    let args = ["--kubeconfig", kubeconfig.as_str()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    serve.ready().await;
    let one = settled_count(&serve, 1).await;
    assert_eq!(one[0].0, first.holder);

    let blackholed = proxy.blackhole_existing();
    assert!(blackholed >= 1, "no connection to blackhole");
    let released = Instant::now();
    kube::by_id(&mut cs, &first.holder).signal(Signal::SIGTERM);
    let watcher = {
        let url = serve.url("/readyz");
        tokio::spawn(async move {
            // Until it was not ready and is ready again, 30 s at most.
            let mut not_ready = 0;
            while released.elapsed() < Duration::from_secs(30) {
                if let Ok(r) = reqwest::get(&url).await {
                    match r.status().as_u16() {
                        503 => not_ready += 1,
                        200 if not_ready > 0 => break,
                        _ => {}
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            not_ready
        })
    };
    let two = settled_count(&serve, 2).await;
    let took = released.elapsed();
    assert!(
        two[0].3.as_deref() == Some("resigned") && two[1].0 != first.holder,
        "{two:?}\n{}",
        log.timeline()
    );
    assert!(took < Duration::from_secs(20), "the handover took {took:?}");
    assert_eq!(gaps(&serve).await, [], "{}", serve.log_text());
    // Noticed: the watch's silence, or (the connection went dead while a
    // watch was being opened) the answer that never came.
    let text = serve.log_text();
    assert!(
        text.contains("said nothing for 12 s") || text.contains("did not answer within 10s"),
        "{text}"
    );
    // /readyz said it, then ready again (polled 30 s at most).
    let not_ready = watcher.await.unwrap();
    assert!(not_ready > 0, "/readyz never said the watch stalled");
    serve.ready().await;
    eprintln!(
        "handover recorded {took:?} after the release; /readyz 503 for ~{} ms",
        not_ready * 50
    );
    serve.stop().await;
    drop(cs);
    drop(proxy);
}

/// Waits (25 s at most) until `serve` recorded `n` terms of the Lease, the
/// first `n - 1` ended; what it recorded.
async fn settled_count(serve: &Serve, n: usize) -> Vec<Recorded> {
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let got = kube::recorded(serve, NAME).await;
        let ended = got.iter().take(n - 1).all(|t| t.2.is_some());
        if (got.len() >= n && ended) || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Leases written 100 to an etcd transaction, straight into
/// kube-apiserver's etcd (JSON values, as `kube::JsonRenewer` writes):
/// every object of a revision reaches the API serve's record, though the
/// watch gives them one by one and the history takes one batch per
/// revision (80 of 8,000 were lost when a batch ended within a revision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lease_of_one_revision_is_recorded() {
    use etcd_client::{Txn, TxnOp};
    if !kube::available() {
        return;
    }
    let etcd = Etcd::start().await;
    let api = KubeApiserver::start(&etcd.endpoint()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = reader(&api, dir.path()).await;
    let args = ["--kubeconfig", kubeconfig.as_str()];
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    let serve = Serve::start(&nowhere, &dir.path().join("h.db"), &args, &[]).await;
    serve.ready().await;
    let (txns, per) = (60, 100);
    let mut raw = etcd.client().await;
    let now = kube::micro_time(kube::unix_us());
    for t in 0..txns {
        let ops: Vec<TxnOp> = (0..per)
            .map(|i| {
                let lease = serde_json::json!({
                    "kind": "Lease",
                    "apiVersion": "coordination.k8s.io/v1",
                    "metadata": {"name": format!("l-{t}-{i}"), "namespace": "batch"},
                    "spec": {"holderIdentity": format!("h{i}"), "leaseDurationSeconds": 3600,
                             "acquireTime": now, "renewTime": now}
                });
                let key = format!("/registry/leases/batch/l-{t}-{i}");
                TxnOp::put(key, lease.to_string(), None)
            })
            .collect();
        raw.txn(Txn::new().and_then(ops)).await.expect("txn");
    }
    let want = f64::from(txns * per);
    let written = Instant::now();
    let deadline = written + Duration::from_secs(60);
    let mut got = None;
    while Instant::now() < deadline {
        got = serve.metric("tenure_watch_elections").await;
        if got == Some(want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(got, Some(want), "{}", serve.log_text());
    eprintln!(
        "{want} Leases of {txns} revisions recorded {:?} after the last write",
        written.elapsed()
    );
    // And each as a term, in the history.
    for (t, i) in [(0, 0), (txns / 2, per - 1), (txns - 1, per / 2)] {
        let name = format!("batch/l-{t}-{i}");
        let terms = kube::recorded(&serve, &name).await;
        assert!(
            matches!(terms.as_slice(), [(h, _, None, None)] if *h == format!("h{i}")),
            "{name}: {terms:?}"
        );
    }
    serve.stop().await;
}
