use std::collections::BTreeMap;

use crate::common::*;
use crate::support::{Etcd, Serve};
use etcd_client::CompactionOptions;
use tenure::events::{EndCause, EventKind};
use tenure::history::{Query, Reader, MAX_LIMIT};

// ---------------------------------------------------------------------------
// 6. Compaction while tenure is down: an explicit gap every time the
//    revisions it had not seen are gone, and none when they are not.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compaction {
    /// Compact at the head: the resume revision and everything after are gone.
    AtHead,
    /// Compact at exactly the resume revision: still readable, nothing lost.
    AtResume,
    /// Compact at the resume revision + 1: the resume revision is gone.
    AfterResume,
}

async fn compaction_while_down(scenario: &str, rounds: usize) {
    let etcd = Etcd::start().await;
    let eps = vec![etcd.endpoint()];
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let client = tenure_client(&eps).await;
    let mut raw = etcd.client().await;
    let n = name("compact/job");
    let mut holder = client
        .acquire_detached(&n, "h0", ttl(600), None)
        .await
        .expect("campaign")
        .expect("free");
    let mut gaps_expected = 0;
    let mut kinds = BTreeMap::new();
    for round in 0..rounds {
        let kind = [
            Compaction::AtHead,
            Compaction::AtResume,
            Compaction::AfterResume,
        ][round % 3];
        *kinds.entry(format!("{kind:?}")).or_insert(0) += 1;
        // A write, so the resume revision is past the previous compaction.
        assert!(
            client
                .fence(&n, "db", holder.token)
                .await
                .expect("fence")
                .accepted
        );
        let serve = Serve::start(&eps, &db, &[], &[]).await;
        serve.caught_up(head_revision(&mut raw).await).await;
        assert_eq!(serve.stop().await, Some(0));
        let resume = Reader::open(&db)
            .expect("reader")
            .resume_point()
            .expect("resume")
            .expect("some");
        // While tenure is down: the holder resigns, a refusal, a new holder.
        client.resign(&n, holder.token).await.expect("resign");
        let refused = client.fence(&n, "db", holder.token).await.expect("fence");
        assert!(!refused.accepted);
        let ended = holder.token;
        holder = client
            .acquire_detached(&n, &format!("h{}", round + 1), ttl(600), None)
            .await
            .expect("campaign")
            .expect("free");
        let head = head_revision(&mut raw).await;
        let at = match kind {
            Compaction::AtHead => head,
            Compaction::AtResume => resume.revision,
            Compaction::AfterResume => resume.revision + 1,
        };
        raw.compact(at, Some(CompactionOptions::new().with_physical()))
            .await
            .expect("compact");
        let gap = kind != Compaction::AtResume;
        gaps_expected += usize::from(gap);

        let serve = Serve::start(&eps, &db, &[], &[]).await;
        serve.caught_up(head).await;
        assert_eq!(
            serve
                .metric("tenure_history_gaps_total")
                .await
                .unwrap_or(0.0) as usize,
            usize::from(gap),
            "round {round} ({kind:?}): gaps counted by this process"
        );
        assert_eq!(serve.stop().await, Some(0));

        let reader = Reader::open(&db).expect("reader");
        let all = reader
            .events(
                None,
                &Query {
                    limit: Some(MAX_LIMIT),
                    ..Query::default()
                },
            )
            .expect("events");
        let gaps: Vec<(i64, i64, i64)> = all
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Gap {
                    from_revision,
                    to_revision,
                } => Some((e.revision, from_revision, to_revision)),
                _ => None,
            })
            .collect();
        assert_eq!(
            gaps.len(),
            gaps_expected,
            "round {round} ({kind:?}): {gaps:?}"
        );
        let terms = reader
            .terms(
                "compact/job",
                &Query {
                    limit: Some(MAX_LIMIT),
                    ..Query::default()
                },
            )
            .expect("terms");
        let old = terms.iter().find(|t| t.token == ended).expect("old term");
        let new = terms
            .iter()
            .find(|t| t.token == holder.token)
            .expect("new term");
        let refusals = reader
            .refusals(Some("compact/job"), &Query::default())
            .expect("refusals");
        let refusal_seen = refusals.iter().any(|r| r.token == ended);
        if gap {
            let (rev, from, to) = *gaps.last().expect("gap");
            assert_eq!(
                from,
                resume.revision + 1,
                "the gap starts after what history had"
            );
            assert!(
                to >= head && rev == to,
                "the gap ends at the snapshot: {gaps:?}, head {head}"
            );
            assert_eq!(
                old.end_cause,
                Some(EndCause::Unknown),
                "ended inside the gap: unknown"
            );
            assert!(new.from_snapshot, "the new term was seen in the snapshot");
            assert!(
                !refusal_seen,
                "a refusal inside the gap cannot be known one by one"
            );
        } else {
            assert_eq!(
                old.end_cause,
                Some(EndCause::Resigned),
                "nothing lost: exact cause"
            );
            assert!(!new.from_snapshot, "nothing lost: the start was replayed");
            assert!(refusal_seen, "nothing lost: the refusal was replayed");
        }
    }
    figure(
        scenario,
        format!(
            "{rounds} restarts after compaction ({kinds:?}): {gaps_expected} explicit gaps recorded, \
             one for each compaction past the resume revision, none otherwise"
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s06_compaction_while_down_gap_every_time() {
    compaction_while_down("6 compaction while down", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full run (24 rounds): cargo test --test faults -- --ignored --nocapture"]
async fn s06_full_compaction_while_down_24_rounds() {
    compaction_while_down("6 compaction while down (full)", 24).await;
}
