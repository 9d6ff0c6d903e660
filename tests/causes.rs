//! End causes against a real etcd, with short TTLs: kept-alive leases revoked
//! by their holder at random moments must never be recorded `expired`, and
//! leases left to run out never `resigned` or `deleted`. A cause is right or
//! `unknown`. The figures (how many were right, how many unknown) are
//! printed and kept in RELIABILITY.md.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::PutOptions;
use support::Etcd;
use tenure::election::Client;
use tenure::events::{EndCause, EventKind, Update};
use tenure::watch::{WatchConfig, Watcher};
use tokio::sync::mpsc;

const TTLS: [i64; 4] = [2, 3, 5, 10];
const REVOKED_PER_TTL: usize = 10;
const EXPIRED_PER_TTL: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    Revoked,
    Expired,
}

/// A small deterministic generator (the seed is printed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn between_ms(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// The end cause of each of `n` terms, by election, as the watcher reports
/// them before `deadline`.
async fn ends(
    rx: &mut mpsc::Receiver<Update>,
    n: usize,
    deadline: tokio::time::Instant,
) -> HashMap<String, EndCause> {
    let mut causes = HashMap::new();
    while causes.len() < n {
        let u = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("ends seen: {} of {n}: {causes:?}", causes.len()))
            .expect("watcher alive");
        if let Update::Batch(b) = u {
            for e in b.events {
                if let EventKind::TermEnded { cause, .. } = e.kind {
                    causes.insert(e.election, cause);
                }
            }
        }
    }
    causes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_ttl_causes_are_right_or_unknown_never_wrong() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let (tx, mut rx) = mpsc::channel(4096);
    let watcher = Watcher::new(c.clone(), WatchConfig::default());
    let task = tokio::spawn(async move {
        let _ = watcher.run(None, tx).await;
    });
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    println!("seed {seed}");
    let mut rng = Rng(seed);

    let mut truth: HashMap<String, (i64, Truth)> = HashMap::new();
    let mut holders = tokio::task::JoinSet::new();
    for ttl in TTLS {
        for i in 0..REVOKED_PER_TTL + EXPIRED_PER_TTL {
            let kind = if i < REVOKED_PER_TTL {
                Truth::Revoked
            } else {
                Truth::Expired
            };
            let name = format!("c{ttl}-{i}");
            truth.insert(name.clone(), (ttl, kind));
            // Revoked at a random moment between 0.3 s and 2.5 TTLs.
            let revoke_after = Duration::from_millis(rng.between_ms(300, ttl as u64 * 2500));
            let start_after = Duration::from_millis(rng.between_ms(0, 2000));
            let mut etcd_c = etcd.client().await;
            holders.spawn(async move {
                tokio::time::sleep(start_after).await;
                let lease = etcd_c.lease_grant(ttl, None).await.expect("grant").id();
                etcd_c
                    .put(
                        format!("election/{name}"),
                        "holder",
                        Some(PutOptions::new().with_lease(lease)),
                    )
                    .await
                    .expect("put");
                if kind == Truth::Expired {
                    return;
                }
                // Kept alive every TTL/3, as Go's client does, then revoked.
                let (mut keeper, mut stream) =
                    etcd_c.lease_keep_alive(lease).await.expect("keepalive");
                let until = tokio::time::Instant::now() + revoke_after;
                let every = Duration::from_millis(ttl as u64 * 1000 / 3);
                loop {
                    let next = tokio::time::Instant::now() + every;
                    if next >= until {
                        tokio::time::sleep_until(until).await;
                        break;
                    }
                    tokio::time::sleep_until(next).await;
                    keeper.keep_alive().await.expect("keepalive sent");
                    let _ = stream.message().await;
                }
                etcd_c.lease_revoke(lease).await.expect("revoke");
            });
        }
    }
    while let Some(r) = holders.join_next().await {
        r.expect("holder task");
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let causes = ends(&mut rx, truth.len(), deadline).await;
    task.abort();

    let mut contradictions = Vec::new();
    println!("ttl  truth    right  unknown  wrong");
    for ttl in TTLS {
        for kind in [Truth::Revoked, Truth::Expired] {
            let (mut right, mut unknown, mut wrong) = (0, 0, 0);
            for (name, (t, k)) in &truth {
                if *t != ttl || *k != kind {
                    continue;
                }
                let cause = causes[name];
                match (kind, cause) {
                    (_, EndCause::Unknown) => unknown += 1,
                    (Truth::Revoked, EndCause::Resigned) | (Truth::Expired, EndCause::Expired) => {
                        right += 1
                    }
                    _ => {
                        wrong += 1;
                        contradictions.push((name.clone(), kind, cause));
                    }
                }
            }
            println!("{ttl:>3}  {kind:?}  {right:>5}  {unknown:>7}  {wrong:>5}");
        }
    }
    assert!(
        contradictions.is_empty(),
        "causes contradicting what happened (seed {seed}): {contradictions:?}"
    );
}

/// What a short term's holder did to end it (issue 20.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Short {
    /// Revoked its lease 100–300 ms after the put.
    Revoked,
    /// Deleted the key 100–300 ms after the put; the lease lives on.
    Deleted,
    /// Put the key on a 2 s lease granted 0.8–1.5 s earlier and let it run
    /// out: a term of about 0.5–1.2 s.
    Expired,
}

const SHORT_PER_KIND: usize = 20;

/// Terms of 100–300 ms get a cause like any other: the lease of a new term
/// is sampled when the term starts, not at the sampler's next round (1 s
/// later, by which time such a term had ended `unknown`). The cause must
/// match what the test itself did, never contradict it, and be known for
/// nearly every revoked and deleted term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_terms_get_the_cause_the_holder_gave_them() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let (tx, mut rx) = mpsc::channel(4096);
    let watcher = Watcher::new(c.clone(), WatchConfig::default());
    let task = tokio::spawn(async move {
        let _ = watcher.run(None, tx).await;
    });
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    println!("seed {seed}");
    let mut rng = Rng(seed);
    // The watcher is watching before the first term starts.
    let mut probe = etcd.client().await;
    probe.put("election/~probe", "x", None).await.expect("put");
    loop {
        let u = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("the watcher reports")
            .expect("watcher alive");
        if matches!(u, Update::Batch(ref b) if b.revision > 0) {
            break;
        }
    }

    let mut truth: HashMap<String, Short> = HashMap::new();
    let mut holders = tokio::task::JoinSet::new();
    for kind in [Short::Revoked, Short::Deleted, Short::Expired] {
        for i in 0..SHORT_PER_KIND {
            let name = format!("short-{kind:?}-{i}").to_lowercase();
            truth.insert(name.clone(), kind);
            let start_after = Duration::from_millis(rng.between_ms(0, 4000));
            let held = Duration::from_millis(rng.between_ms(100, 300));
            let aged = Duration::from_millis(rng.between_ms(800, 1500));
            let mut etcd_c = etcd.client().await;
            holders.spawn(async move {
                tokio::time::sleep(start_after).await;
                let ttl = if kind == Short::Expired { 2 } else { 5 };
                let lease = etcd_c.lease_grant(ttl, None).await.expect("grant").id();
                if kind == Short::Expired {
                    tokio::time::sleep(aged).await;
                }
                let key = format!("election/{name}");
                etcd_c
                    .put(
                        key.as_str(),
                        "holder",
                        Some(PutOptions::new().with_lease(lease)),
                    )
                    .await
                    .expect("put");
                match kind {
                    Short::Expired => {}
                    Short::Revoked => {
                        tokio::time::sleep(held).await;
                        etcd_c.lease_revoke(lease).await.expect("revoke");
                    }
                    Short::Deleted => {
                        tokio::time::sleep(held).await;
                        // The lease is left to run out (5 s): revoked at
                        // once it would race the watcher's lookup, which
                        // would find it gone.
                        etcd_c.delete(key.as_str(), None).await.expect("delete");
                    }
                }
            });
        }
    }
    while let Some(r) = holders.join_next().await {
        r.expect("holder task");
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let causes = ends(&mut rx, truth.len(), deadline).await;
    task.abort();

    let mut contradictions = Vec::new();
    let mut known: HashMap<Short, usize> = HashMap::new();
    println!("truth     right  unknown  wrong");
    for kind in [Short::Revoked, Short::Deleted, Short::Expired] {
        let (mut right, mut unknown, mut wrong) = (0, 0, 0);
        for (name, k) in &truth {
            if *k != kind {
                continue;
            }
            let cause = causes[name];
            match (kind, cause) {
                (_, EndCause::Unknown) => unknown += 1,
                (Short::Revoked, EndCause::Resigned)
                | (Short::Deleted, EndCause::Deleted)
                | (Short::Expired, EndCause::Expired) => right += 1,
                _ => {
                    wrong += 1;
                    contradictions.push((name.clone(), kind, cause));
                }
            }
        }
        known.insert(kind, right);
        println!(
            "{:<8}  {right:>5}  {unknown:>7}  {wrong:>5}",
            format!("{kind:?}")
        );
    }
    assert!(
        contradictions.is_empty(),
        "causes contradicting what happened (seed {seed}): {contradictions:?}"
    );
    // A lookup may miss in a loaded run (the term ends while its sample is
    // in flight, and the 60 holders share the watcher's two threads): that
    // is `unknown`, allowed now and then (4 in 20), never the rule.
    for kind in [Short::Revoked, Short::Deleted] {
        assert!(
            known[&kind] * 5 >= SHORT_PER_KIND * 4,
            "{kind:?}: only {} of {SHORT_PER_KIND} short terms got their cause (seed {seed})",
            known[&kind]
        );
    }
}

/// Sampling new terms as they start keeps the rate bound: with 5 samples
/// per second allowed and 60 terms starting within a second and lasting
/// 3 s, at most 5 samples are sent per second (plus the first interval's),
/// whatever the number of new terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_terms_are_sampled_within_the_rate_bound() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let (tx, mut rx) = mpsc::channel(4096);
    let cfg = WatchConfig {
        lease_samples_per_interval: 5,
        ..WatchConfig::default()
    };
    let watcher = Watcher::new(c.clone(), cfg);
    let task = tokio::spawn(async move {
        let _ = watcher.run(None, tx).await;
    });
    let mut raw = etcd.client().await;
    let started = tokio::time::Instant::now();
    for i in 0..60 {
        let lease = raw.lease_grant(30, None).await.expect("grant").id();
        raw.put(
            format!("election/rate-{i}"),
            "h",
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    }
    let window = Duration::from_secs(3);
    let mut samples = 0;
    while let Ok(Some(u)) = tokio::time::timeout_at(started + window, rx.recv()).await {
        if matches!(u, Update::LeaseSampled { .. }) {
            samples += 1;
        }
    }
    task.abort();
    println!("{samples} lease samples in {window:?} for 60 new terms, 5 allowed per second");
    assert!(samples > 0, "new terms are sampled");
    assert!(
        samples <= 5 * 4,
        "{samples} samples in 3 s exceed 5 per second"
    );
}

/// One request ending many terms (issue 23): a DeleteRange of 300 leader
/// keys on 300 leases, one of 100 keys on one shared lease, and the
/// revocation of a lease 50 keys share, with every request from the
/// watcher to etcd slowed by 150 ms (16 lookups in flight: 400 lookups
/// take 25 rounds, 3.75 s, past the 2 s budget). Each cause against
/// what the test did: the two deletions are `deleted`, every one of them
/// (they once were 400 lookups, most past the 2 s budget: `unknown`); the
/// revoked lease's terms are `resigned` or `unknown`, never `deleted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_ending_many_terms_gives_each_its_cause() {
    use support::proxy::Proxy;

    let etcd = Etcd::start().await;
    let proxy = Proxy::start(etcd.client_addr()).await;
    let c = Client::connect(&[proxy.endpoint()], "")
        .await
        .expect("connect");
    let (tx, mut rx) = mpsc::channel(4096);
    // Few lease samples: the lookups are what is measured here.
    let cfg = WatchConfig {
        lease_samples_per_interval: 1,
        ..WatchConfig::default()
    };
    let watcher = Watcher::new(c.clone(), cfg);
    let task = tokio::spawn(async move {
        let _ = watcher.run(None, tx).await;
    });
    let mut raw = etcd.client().await;
    let writer = raw.clone();
    let put = |key: String, lease: i64| {
        let mut raw = writer.clone();
        async move {
            raw.put(key, "h", Some(PutOptions::new().with_lease(lease)))
                .await
                .expect("put");
        }
    };
    let mut expected = 0;
    for i in 0..300 {
        let lease = raw.lease_grant(600, None).await.expect("grant").id();
        put(format!("election/mass-{i:03}"), lease).await;
        expected += 1;
    }
    let shared = raw.lease_grant(600, None).await.expect("grant").id();
    for i in 0..100 {
        put(format!("election/shared-{i:03}"), shared).await;
        expected += 1;
    }
    let revoked = raw.lease_grant(600, None).await.expect("grant").id();
    for i in 0..50 {
        put(format!("election/revoked-{i:03}"), revoked).await;
        expected += 1;
    }
    // Every term seen starting before the ends.
    let mut started = 0;
    while started < expected {
        let u = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("the watcher reports")
            .expect("watcher alive");
        if let Update::Batch(b) = u {
            started += b
                .events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::TermStarted { .. }))
                .count();
        }
    }
    proxy.set_delay_up(Duration::from_millis(150));
    for p in ["election/mass-", "election/shared-"] {
        let deleted = raw
            .delete(p, Some(etcd_client::DeleteOptions::new().with_prefix()))
            .await
            .expect("delete range");
        assert!(deleted.deleted() > 0);
    }
    raw.lease_revoke(revoked).await.expect("revoke");
    let causes = ends(
        &mut rx,
        expected,
        tokio::time::Instant::now() + Duration::from_secs(60),
    )
    .await;
    task.abort();
    let mut tally: HashMap<(&str, EndCause), usize> = HashMap::new();
    for (name, cause) in &causes {
        let kind = name.split('-').next().unwrap_or_default();
        *tally.entry((kind, *cause)).or_default() += 1;
    }
    println!("[figure] causes by what the test did: {tally:?}");
    for (name, cause) in &causes {
        if name.starts_with("revoked-") {
            // Revoked by the test: `resigned`, or `unknown` where the
            // samples cannot tell, never another cause.
            assert!(
                matches!(cause, EndCause::Resigned | EndCause::Unknown),
                "{name}: its lease was revoked, recorded {cause:?}"
            );
        } else {
            assert_eq!(
                *cause,
                EndCause::Deleted,
                "{name}: deleted by a DeleteRange"
            );
        }
    }
}

/// One act, one word, whenever etcd is asked: a key deleted and its lease
/// revoked right after (etcd's `Election.Resign` then `Session.Close`, a
/// Vault unlock: 1–3 ms apart; 48 acts, gaps of 0–20 ms) is `resigned` (`unknown` at worst, when etcd
/// answers late) for every act done within 30 ms, though a lookup sent
/// between the two finds the lease alive; a key deleted while its lease
/// lives on is `deleted`. Every lease is sampled
/// before the acts (an unsampled lease found gone is `unknown`, honestly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_then_its_leases_revoke_is_one_word_whatever_the_gap() {
    const GAPS_MS: [u64; 8] = [0, 1, 2, 3, 5, 10, 15, 20];
    const KEPT: usize = 4;
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let (tx, mut rx) = mpsc::channel(4096);
    let watcher = Watcher::new(c.clone(), WatchConfig::default());
    let task = tokio::spawn(async move {
        let _ = watcher.run(None, tx).await;
    });
    let mut raw = etcd.client().await;
    // (name, lease, gap before the revoke: None = never revoked)
    let mut acts: Vec<(String, i64, Option<u64>)> = Vec::new();
    for (i, gap) in GAPS_MS.iter().cycle().take(6 * GAPS_MS.len()).enumerate() {
        acts.push((format!("closed-{i}"), 0, Some(*gap)));
    }
    for i in 0..KEPT {
        acts.push((format!("kept-{i}"), 0, None));
    }
    for (name, lease, _) in acts.iter_mut() {
        *lease = raw.lease_grant(30, None).await.expect("grant").id();
        raw.put(
            format!("election/{name}"),
            "h",
            Some(PutOptions::new().with_lease(*lease)),
        )
        .await
        .expect("put");
    }
    let mut sampled = std::collections::HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while sampled.len() < acts.len() {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Update::LeaseSampled { lease_id, .. })) => {
                sampled.insert(lease_id);
            }
            Ok(Some(_)) => {}
            _ => panic!("leases sampled: {} of {}", sampled.len(), acts.len()),
        }
    }
    // How long each act took by the test's clock: from sending the delete
    // to the revoke's answer (a loaded machine stretches the gaps asked for).
    let mut spans: HashMap<&str, Duration> = HashMap::new();
    for (name, lease, gap) in &acts {
        let sent = tokio::time::Instant::now();
        raw.delete(format!("election/{name}"), None)
            .await
            .expect("delete");
        if let Some(gap) = gap {
            tokio::time::sleep(Duration::from_millis(*gap)).await;
            raw.lease_revoke(*lease).await.expect("revoke");
            spans.insert(name.as_str(), sent.elapsed());
        }
    }
    let causes = ends(&mut rx, acts.len(), deadline).await;
    task.abort();
    // The watcher asks again 30 ms after the deletion reached it, which is
    // after the delete was sent: an act whose revoke was answered within
    // 30 ms of that is gone by then, so never `deleted`; `unknown` only when
    // etcd's answers came late. A lease that lives on is `deleted`.
    let within = Duration::from_millis(30);
    let (mut checked, mut resigned, mut wrong) = (0, 0, Vec::new());
    for (name, _, gap) in &acts {
        let got = causes[name.as_str()];
        let span = spans.get(name.as_str()).copied();
        println!("{name}: gap {gap:?} ms, act {span:?}: {got}");
        let ok = match span {
            None => got == EndCause::Deleted,
            Some(span) if span < within => {
                checked += 1;
                resigned += usize::from(got == EndCause::Resigned);
                matches!(got, EndCause::Resigned | EndCause::Unknown)
            }
            Some(_) => got != EndCause::Expired,
        };
        if !ok {
            wrong.push(format!("{name} (gap {gap:?} ms, act {span:?}): {got}"));
        }
    }
    assert!(wrong.is_empty(), "one act, two words: {wrong:?}");
    assert!(
        checked >= 8,
        "only {checked} acts were within {within:?}: the machine is too busy to tell"
    );
    assert!(
        resigned * 4 >= checked * 3,
        "only {resigned} of {checked} acts within {within:?} were `resigned`"
    );
}
