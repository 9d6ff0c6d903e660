use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::common::*;
use crate::oracle::*;
use crate::support::Etcd;
use crate::workload::*;
use tenure::election::Keys;
use tenure::history::{Query, Reader, MAX_LIMIT};

// ---------------------------------------------------------------------------
// 1. Baseline: random operations; history == etcd.
// ---------------------------------------------------------------------------

async fn baseline(ops: u64, workers: usize) {
    const S: &str = "1 baseline";
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    // Every term below starts after the watcher's first snapshot.
    let (serve, db, start_rev, _dir) = record(&[etcd.endpoint()], &mut raw).await;
    let work = Workload::new(&[etcd.endpoint()]).await;
    let mut rng = seeded_rng(S);
    let t0 = Instant::now();
    work.run("base", workers, ops, &mut rng).await;
    let ran = t0.elapsed();
    // Until every never-renewed lease (2 s TTL) has expired.
    short_leases_expired(&mut raw, 2).await;
    let last = head_revision(&mut raw).await;
    serve.caught_up(last).await;
    assert_eq!(serve.stop().await, Some(0));

    let cause = cause_from(&work.intents);
    let v = verify_history(&mut raw, &db, start_rev, &cause, 0, false).await;
    let log = etcd_log(&mut raw, start_rev, v.resume_revision).await;
    let fences = audit_fences(&log, &oracle(&Keys::new(""), &log), &Keys::new(""));
    figure(
        S,
        format!(
            "{} operations by {workers} workers in {:.1} s ({:.0} ops/s), {} etcd revisions",
            work.ops.load(Ordering::Relaxed),
            ran.as_secs_f64(),
            work.ops.load(Ordering::Relaxed) as f64 / ran.as_secs_f64(),
            last - start_rev
        ),
    );
    figure(S, format!("operations: {}", work.tally.summary()));
    figure(S, v.summary());
    figure(
        S,
        format!(
            "fence: {} accepted, {} refused in etcd's log; {} stale accepted; {} regressions",
            fences.accepted,
            fences.refused,
            fences.stale_accepted.len(),
            fences.regressions.len()
        ),
    );
    let reader = Reader::open(&db).expect("reader");
    let refusals = reader
        .refusals(
            None,
            &Query {
                limit: Some(MAX_LIMIT),
                ..Query::default()
            },
        )
        .expect("refusals");
    assert_eq!(
        refusals.len(),
        fences.refused,
        "every refusal recorded once"
    );
    fences.assert_clean();
    work.assert_no_violations();
    v.assert_none(S);
    assert!(v.etcd_terms > 0 && v.heuristic_ends > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s01_baseline_1k_random_operations_history_equals_etcd() {
    baseline(1_000, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full run (10,000 operations): cargo test --test faults -- --ignored --nocapture"]
async fn s01_full_baseline_10k_random_operations_history_equals_etcd() {
    baseline(10_000, 6).await;
}
