//! The fence in the database transaction, without etcd: a lower token
//! neither claims nor commits once a higher one wrote.

use std::time::Duration;

use crate::support::postgres::Postgres;

/// The fence itself, without etcd: a lower token cannot claim, nor commit
/// once a higher one has written; the schema's version is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_refuses_a_lower_token_in_the_transaction() {
    use tenure::election::KeyLayout;
    use tenure::events::{Batch, Event, EventKind};
    use tenure::history::{HistoryError, Reader, Store};
    let pg = Postgres::start();
    let url = pg.create_database("fence");
    let open = |token: i64| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            Store::open_postgres(
                &url,
                Duration::ZERO,
                token,
                &format!("w{token}"),
                crate::support::postgres::revision_at(i64::MAX),
            )
        })
    };
    let batch = |revision: i64, token: i64| Batch {
        revision,
        events: vec![Event {
            revision,
            at_ms: tenure::events::now_ms(),
            election: "e".into(),
            kind: EventKind::TermStarted {
                token,
                holder: format!("h{token}"),
                lease_id: 1,
                layout: KeyLayout::Single,
                previous_holder: None,
                from_snapshot: false,
            },
        }],
    };
    let old = open(3).await.expect("join").expect("token 3 claims");
    old.write(batch(10, 10)).await.expect("queued");
    assert_eq!(old.flush().await.expect("token 3 commits"), 10);
    let new = open(5).await.expect("join").expect("token 5 claims");
    assert_eq!(
        pg.psql("fence", "SELECT token, holder FROM history_writer"),
        "5|w5"
    );
    // The old writer's next commit is refused inside its transaction.
    old.write(batch(11, 11)).await.expect("queued");
    let err = old.flush().await.expect_err("token 3 is fenced off");
    assert!(err.to_string().contains("refused"), "{err}");
    assert_eq!(old.refused_commits(), 1);
    drop(old);
    // Nothing of it was stored; the new writer continues from revision 10.
    assert_eq!(pg.psql("fence", "SELECT COUNT(*) FROM events"), "1");
    new.write(batch(11, 11)).await.expect("queued");
    assert_eq!(new.flush().await.expect("token 5 commits"), 11);
    // A writer with a lower token cannot even claim.
    match open(4).await.expect("join") {
        Err(e @ HistoryError::Fenced { .. }) => assert!(e.is_fenced()),
        other => panic!("token 4 claimed after 5: {other:?}"),
    }
    new.close().await.expect("close");
    let reader = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || Reader::open_postgres(&url))
            .await
            .expect("join")
            .expect("reader")
    };
    let terms =
        tokio::task::spawn_blocking(move || reader.terms("e", &tenure::history::Query::default()))
            .await
            .expect("join")
            .expect("terms");
    assert_eq!(
        terms.iter().map(|t| t.token).collect::<Vec<_>>(),
        [10, 11],
        "each term once, none from the stale writer"
    );
    // A schema newer than this build is refused with the versions named.
    pg.psql("fence", "UPDATE tenure_schema SET version = 99");
    let err = tokio::task::spawn_blocking(move || Reader::open_postgres(&url))
        .await
        .expect("join")
        .expect_err("schema 99 refused");
    assert!(err.to_string().contains("newer tenure"), "{err}");
}
