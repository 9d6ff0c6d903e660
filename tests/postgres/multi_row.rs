//! The multi-row writer against the SQLite writer: the same batches, the
//! same terms, events, refusals and elections table.

use std::time::Duration;

use serde_json::Value;

use crate::assert_elections_table_matches;
use crate::support::postgres::Postgres;

/// The PostgreSQL writer sends a transaction's rows as a few multi-row
/// statements (issue 23); what it stores must be what the SQLite writer,
/// one statement per event, stores from the same batches: the same terms,
/// events in the same order, refusals, and elections table. The batches
/// hold the cases where order matters: a term ended before it started
/// (recorded from its end, its later start ignored), two ends of one term
/// (the first stands), a start repeated, a reset (a new timeline repeating
/// a token), gaps, refusals; written back to back, so the writers commit
/// several per transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_multi_row_writer_stores_what_the_sqlite_writer_stores() {
    use tenure::election::{FenceReason, KeyLayout};
    use tenure::events::{Batch, EndCause, Event, EventKind};
    use tenure::history::{Query, Reader, Store};

    let pg = Postgres::start();
    let url = pg.create_database("rows");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rows.db");
    let u = url.clone();
    let shared = tokio::task::spawn_blocking(move || {
        Store::open_postgres(
            &u,
            Duration::ZERO,
            1,
            "w",
            crate::support::postgres::revision_at(i64::MAX),
        )
    })
    .await
    .expect("join")
    .expect("open");
    let lite = Store::open(&file, Duration::ZERO).expect("sqlite");
    let t0 = tenure::events::now_ms() - 60_000;
    let start = |token: i64, holder: &str| EventKind::TermStarted {
        token,
        holder: holder.into(),
        lease_id: token * 7,
        layout: KeyLayout::Queue,
        previous_holder: None,
        from_snapshot: token % 3 == 0,
    };
    let end = |token: i64, cause: EndCause| EventKind::TermEnded {
        token,
        holder: format!("h{token}"),
        lease_id: token * 7,
        cause,
        started_revision: token,
        started_at_ms: t0 + token,
        renewals: None,
    };
    let refusal = |token: i64| EventKind::FenceRefused {
        resource: "db".into(),
        token,
        reason: FenceReason::StaleToken,
        current_token: Some(token + 1),
        current_holder: None,
    };
    let mut batches = Vec::new();
    let mut rev = 10;
    let mut batch = |events: Vec<(&str, EventKind)>| {
        rev += 1;
        let events = events
            .into_iter()
            .enumerate()
            .map(|(i, (e, kind))| Event {
                revision: rev,
                at_ms: t0 + rev * 100 + i as i64,
                election: e.into(),
                kind,
            })
            .collect();
        batches.push(Batch {
            revision: rev,
            events,
        });
    };
    batch(vec![("a", start(11, "h11")), ("b", start(12, "h12"))]);
    batch(vec![
        ("a", end(11, EndCause::Resigned)),
        ("a", start(13, "h13")),
        ("a", end(13, EndCause::Expired)),
        ("a", end(13, EndCause::Deleted)),
        ("b", refusal(5)),
    ]);
    // Ended before it started (in one batch), then started again.
    batch(vec![
        ("c", end(20, EndCause::Unknown)),
        ("c", start(20, "late")),
        ("c", start(21, "h21")),
        ("c", start(21, "again")),
    ]);
    batch(vec![
        (
            "",
            EventKind::Gap {
                from_revision: 14,
                to_revision: 18,
            },
        ),
        ("b", end(12, EndCause::Superseded)),
        ("b", refusal(12)),
        ("c", end(21, EndCause::Resigned)),
    ]);
    // A new timeline: tokens start over; a repeated token is a new term.
    batch(vec![
        (
            "",
            EventKind::Reset {
                from_revision: 14,
                to_revision: 3,
                previous_cluster_id: Some(1),
                cluster_id: 2,
            },
        ),
        ("a", start(11, "new-timeline")),
        ("d", end(4, EndCause::Expired)),
    ]);
    batch(vec![
        ("a", end(11, EndCause::Resigned)),
        ("a", start(15, "h15")),
    ]);
    // Stored open by one transaction; then started again and ended in one
    // flush of the next (the end folded into a start that is not inserted).
    batch(vec![("e", start(30, "h30"))]);
    batch(vec![
        ("e", start(30, "again")),
        ("e", end(30, EndCause::Resigned)),
    ]);
    let (last, first) = batches.split_last().expect("batches");
    for b in first {
        shared.write(b.clone()).await.expect("write pg");
        lite.write(b.clone()).await.expect("write sqlite");
    }
    shared.flush().await.expect("flush pg");
    lite.flush().await.expect("flush sqlite");
    shared.write(last.clone()).await.expect("write pg");
    lite.write(last.clone()).await.expect("write sqlite");
    shared.flush().await.expect("flush pg");
    lite.flush().await.expect("flush sqlite");

    let pg_reader = shared.reader();
    let lite_reader: Reader = lite.reader();
    let all = Query {
        limit: Some(tenure::history::MAX_LIMIT),
        ..Query::default()
    };
    let (p, l) = (pg_reader.clone(), lite_reader.clone());
    let (pg_view, lite_view) = tokio::task::spawn_blocking(move || {
        let view = |r: &Reader| {
            let elections = r.elections().expect("elections");
            let mut out = vec![serde_json::to_value(&elections).expect("json")];
            for e in &elections {
                out.push(
                    serde_json::to_value(r.terms(&e.election, &all).expect("terms")).expect("json"),
                );
                out.push(
                    serde_json::to_value(r.events(Some(&e.election), &all).expect("events"))
                        .expect("json"),
                );
            }
            out.push(
                serde_json::to_value(r.refusals(None, &all).expect("refusals")).expect("json"),
            );
            out.push(serde_json::to_value(r.events(None, &all).expect("events")).expect("json"));
            out
        };
        (view(&p), view(&l))
    })
    .await
    .expect("join");
    assert_eq!(pg_view.len(), lite_view.len());
    for (p, l) in pg_view.iter().zip(&lite_view) {
        assert_eq!(p, l);
    }
    // The cases did what they are there for.
    let c_terms = lite_view[1 + 2 * 2].as_array().expect("c's terms");
    let t20 = c_terms.iter().find(|t| t["token"] == 20).expect("term 20");
    assert_eq!(
        (&t20["holder"], &t20["from_snapshot"], &t20["end_cause"]),
        (
            &Value::from("h20"),
            &Value::from(true),
            &Value::from("unknown")
        ),
        "recorded from its end, its later start ignored: {t20}"
    );
    let e_terms = lite_view[1 + 4 * 2].as_array().expect("e's terms");
    let t30 = e_terms.iter().find(|t| t["token"] == 30).expect("term 30");
    assert_eq!(
        (&t30["holder"], &t30["end_cause"]),
        (&Value::from("h30"), &Value::from("resigned")),
        "stored open, then ended by a flush that starts it again: {t30}"
    );
    assert_elections_table_matches(&pg, "rows");
    // When the watcher was last live never goes backwards (a clock step
    // back, a standby's old news), in either backend.
    let later = tenure::events::now_ms() + 3_600_000;
    for at in [later, later - 5_000] {
        shared.watched(at).await.expect("watched pg");
        lite.watched(at).await.expect("watched sqlite");
        shared.flush().await.expect("flush pg");
        lite.flush().await.expect("flush sqlite");
    }
    let watched = tokio::task::spawn_blocking(move || {
        (
            pg_reader.watched_until().expect("pg"),
            lite_reader.watched_until().expect("sqlite"),
        )
    })
    .await
    .expect("join");
    assert_eq!(watched, (Some(later), Some(later)));
    let _ = shared.close().await;
    let _ = lite.close().await;
}
