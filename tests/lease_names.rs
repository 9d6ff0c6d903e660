//! A history written when Kubernetes' Leases were named by their etcd path
//! (`/registry/NAMESPACE/NAME`) is renamed once, at the writer's start, to
//! the names the watcher gives them now (`NAMESPACE/NAME`), in SQLite and
//! in PostgreSQL: every row of a Lease follows it, nothing else is renamed,
//! and a name already taken is left as it was (nothing merged, nothing lost).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::postgres::{revision_at, Postgres};
use tenure::election::KeyLayout;
use tenure::events::{Batch, EndCause, Event, EventKind};
use tenure::history::{Query, Reader, Store, MAX_LIMIT};

fn start(election: &str, revision: i64, holder: &str, layout: KeyLayout) -> Event {
    Event {
        revision,
        at_ms: tenure::events::now_ms() - 60_000 + revision,
        election: election.into(),
        kind: EventKind::TermStarted {
            token: revision,
            holder: holder.into(),
            lease_id: 0,
            layout,
            previous_holder: None,
            from_snapshot: false,
        },
    }
}

/// What the previous tenure wrote: a controller's Lease in two terms, a
/// Lease whose new name one of tenure's own elections already has, a Lease
/// of a named cluster, and a Patroni election whose path also ends in two
/// segments (not a Lease: never renamed).
fn old_story() -> Vec<Batch> {
    let lease = KeyLayout::Lease;
    vec![
        Batch {
            revision: 10,
            events: vec![
                start("/registry/kube-system/ctrl", 10, "a_1", lease),
                start("team/db", 10, "own", KeyLayout::Single),
                start("/service/pg", 10, "pg-0", KeyLayout::Single),
                start("/registry/team/db", 10, "squatter", lease),
                start("c1//registry/ns/y", 10, "y_1", lease),
            ],
        },
        Batch {
            revision: 20,
            events: vec![
                Event {
                    revision: 20,
                    at_ms: tenure::events::now_ms() - 30_000,
                    election: "/registry/kube-system/ctrl".into(),
                    kind: EventKind::TermEnded {
                        token: 10,
                        holder: "a_1".into(),
                        lease_id: 0,
                        cause: EndCause::TakenOver,
                        started_revision: 10,
                        started_at_ms: tenure::events::now_ms() - 60_000,
                        renewals: None,
                    },
                },
                start("/registry/kube-system/ctrl", 20, "b_2", lease),
            ],
        },
    ]
}

fn all() -> Query {
    Query {
        limit: Some(MAX_LIMIT),
        ..Query::default()
    }
}

/// The history after the rename, as any reader reads it.
fn check(r: &Reader) {
    let names: BTreeSet<String> = r
        .elections()
        .unwrap()
        .into_iter()
        .map(|e| e.election)
        .collect();
    let want: BTreeSet<String> = [
        "kube-system/ctrl",
        "team/db",
        "/service/pg",
        "/registry/team/db",
        "c1/ns/y",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(names, want);
    let terms = r.terms("kube-system/ctrl", &all()).unwrap();
    let holders: BTreeSet<&str> = terms.iter().map(|t| t.holder.as_str()).collect();
    assert_eq!(holders, ["a_1", "b_2"].into());
    let events = r.events(Some("kube-system/ctrl"), &all()).unwrap();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(events.iter().all(|e| e.election == "kube-system/ctrl"));
    assert!(r
        .terms("/registry/kube-system/ctrl", &all())
        .unwrap()
        .is_empty());
    assert!(r
        .events(Some("/registry/kube-system/ctrl"), &all())
        .unwrap()
        .is_empty());
    // Left as they were: a taken name's Lease, tenure's own, Patroni's.
    for (name, holder) in [
        ("/registry/team/db", "squatter"),
        ("team/db", "own"),
        ("/service/pg", "pg-0"),
        ("c1/ns/y", "y_1"),
    ] {
        let t = r.terms(name, &all()).unwrap();
        assert_eq!(t.len(), 1, "{name}");
        assert_eq!(t[0].holder, holder, "{name}");
    }
    let summary = r.election("kube-system/ctrl").unwrap().expect("a summary");
    assert_eq!(summary.terms, 2);
    assert_eq!(summary.current.map(|c| c.holder).as_deref(), Some("b_2"));
}

async fn write(store: &Store, batches: Vec<Batch>) {
    for b in batches {
        store.write(b).await.unwrap();
    }
    store.flush().await.unwrap();
}

#[tokio::test]
async fn a_sqlite_history_renames_its_leases_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.db");
    let store = Store::open(&path, Duration::ZERO).unwrap();
    write(&store, old_story()).await;
    store.close().await.unwrap();
    // Back to the version before the rename.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 4;")
        .unwrap();
    assert!(
        Reader::open(&path).is_err(),
        "a reader of this build refuses the old version until a writer migrates it"
    );
    let store = Store::open(&path, Duration::ZERO).unwrap();
    check(&store.reader());
    store.close().await.unwrap();
    // Once: opening again changes nothing.
    let store = Store::open(&path, Duration::ZERO).unwrap();
    check(&store.reader());
    store.close().await.unwrap();
    check(&Reader::open(&path).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_history_renames_its_leases_once() {
    let pg = Postgres::start();
    let url = pg.create_database("leases");
    let open = |token: i64| {
        let u = url.clone();
        tokio::task::spawn_blocking(move || {
            Store::open_postgres(&u, Duration::ZERO, token, "w", revision_at(i64::MAX))
        })
    };
    let store = open(7).await.unwrap().unwrap();
    write(&store, old_story()).await;
    let _ = store.close().await;
    pg.psql("leases", "UPDATE tenure_schema SET version = 6");
    let store = open(8).await.unwrap().expect("migrate and claim");
    assert_eq!(
        pg.psql("leases", "SELECT version FROM tenure_schema"),
        tenure::history::PG_SCHEMA_VERSION.to_string()
    );
    let r = store.reader();
    tokio::task::spawn_blocking(move || check(&r))
        .await
        .unwrap();
    let _ = store.close().await;
    let store = open(9).await.unwrap().unwrap();
    let r = store.reader();
    tokio::task::spawn_blocking(move || check(&r))
        .await
        .unwrap();
    let _ = store.close().await;
}
