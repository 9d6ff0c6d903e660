//! Two clusters in one history (issue 25): each cluster's resume revision,
//! cluster id and open terms are its own; a reset of one starts a new
//! timeline without ending, or hiding, the other's running terms.

use std::sync::Arc;

use tenure::events::*;
use tenure::history::*;

use crate::fixtures::*;

#[tokio::test]
async fn each_cluster_resumes_at_its_own_and_a_reset_leaves_the_other_running() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir), WEEK).unwrap();
    let (a, b): (Scope, Scope) = (Some(Arc::from("a")), Some(Arc::from("b")));
    let t = now_ms();
    // A at revisions 10.., B at 500..: both start a term of "jobs".
    store
        .write_in(
            a.clone(),
            batch(10, vec![ev(10, t, "a/jobs", started(10, "x"))]),
        )
        .await
        .unwrap();
    store
        .write_in(
            b.clone(),
            batch(500, vec![ev(500, t, "b/jobs", started(500, "y"))]),
        )
        .await
        .unwrap();
    store.set_cluster_in(a.clone(), 1).await.unwrap();
    store.set_cluster_in(b.clone(), 2).await.unwrap();
    // A batch of B at or below B's own revision is ignored; one of A at 11
    // is not, though below B's 500.
    store
        .write_in(
            b.clone(),
            batch(400, vec![ev(400, t, "b/old", started(400, "z"))]),
        )
        .await
        .unwrap();
    store
        .write_in(
            a.clone(),
            batch(11, vec![ev(11, t, "a/web", started(11, "w"))]),
        )
        .await
        .unwrap();
    store.flush().await.unwrap();
    let reader = store.reader();
    let ra = reader.resume_point_of(Some("a")).unwrap().unwrap();
    let rb = reader.resume_point_of(Some("b")).unwrap().unwrap();
    assert_eq!((ra.revision, ra.cluster_id), (11, Some(1)));
    assert_eq!((rb.revision, rb.cluster_id), (500, Some(2)));
    // Open terms by the names their watcher gives them.
    let names = |r: &ResumePoint| -> Vec<(String, i64)> {
        r.open_terms
            .iter()
            .map(|t| (t.election.clone(), t.token))
            .collect()
    };
    assert_eq!(
        names(&ra),
        [("jobs".to_owned(), 10), ("web".to_owned(), 11)]
    );
    assert_eq!(names(&rb), [("jobs".to_owned(), 500)]);
    assert!(reader.terms("b/old", &all()).unwrap().is_empty());
    assert!(reader.resume_point_of(Some("c")).unwrap().is_none());

    // A is restored: a reset back to 5 (A's own terms end unknown, then
    // the reset, as the watcher says them), a new term of token 10 again in A's new
    // timeline. B's term goes on, and its end is recorded as its end.
    store
        .write_in(
            a.clone(),
            batch(
                5,
                vec![
                    ev(
                        11,
                        t + 1,
                        "a/jobs",
                        ended(10, "x", EndCause::Unknown, 10, t),
                    ),
                    ev(11, t + 1, "a/web", ended(11, "w", EndCause::Unknown, 11, t)),
                    ev(5, t + 1, "a/", reset(11, 5, 1)),
                ],
            ),
        )
        .await
        .unwrap();
    store
        .write_in(
            a.clone(),
            batch(10, vec![ev(10, t + 2, "a/jobs", started(10, "x2"))]),
        )
        .await
        .unwrap();
    store
        .write_in(
            b.clone(),
            batch(
                501,
                vec![ev(
                    501,
                    t + 3,
                    "b/jobs",
                    ended(500, "y", EndCause::Resigned, 500, t),
                )],
            ),
        )
        .await
        .unwrap();
    store.flush().await.unwrap();
    let rb = reader.resume_point_of(Some("b")).unwrap().unwrap();
    assert!(rb.open_terms.is_empty(), "{:?}", rb.open_terms);
    let b_terms = reader.terms("b/jobs", &all()).unwrap();
    assert_eq!(b_terms.len(), 1, "one term, started and ended: {b_terms:?}");
    assert_eq!(b_terms[0].end_cause, Some(EndCause::Resigned));
    assert_eq!(b_terms[0].holder, "y");
    let a_terms: Vec<(String, i64, Option<EndCause>)> = reader
        .terms("a/jobs", &all())
        .unwrap()
        .into_iter()
        .map(|t| (t.holder, t.token, t.end_cause))
        .collect();
    assert_eq!(
        a_terms,
        [
            ("x".to_owned(), 10, Some(EndCause::Unknown)),
            ("x2".to_owned(), 10, None)
        ]
    );
    let ra = reader.resume_point_of(Some("a")).unwrap().unwrap();
    assert_eq!(names(&ra), [("jobs".to_owned(), 10)]);
    assert_eq!(ra.revision, 10);
    // The reset is A's: B's events do not carry it.
    let b_events = reader.events(Some("b/jobs"), &all()).unwrap();
    assert!(
        b_events.iter().all(|e| e.kind.name() != "reset"),
        "{b_events:?}"
    );
    let a_events = reader.events(Some("a/jobs"), &all()).unwrap();
    assert!(a_events.iter().any(|e| e.kind.name() == "reset"));
    store.close().await.unwrap();
}
