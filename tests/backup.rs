//! The SQLite history as an operator backs it up (issue 20.8): after a clean
//! stop the `.db` file alone holds everything (no `-wal` needed), and the
//! documented online backup (`sqlite3 DB ".backup COPY"`, docs/operations.md)
//! taken while `serve` runs holds every term recorded before it.

mod support;

use std::path::Path;

use support::fixtures::lead;
use support::{Etcd, Serve};
use tenure::election::Client;

async fn revision(etcd: &Etcd) -> i64 {
    let mut raw = etcd.client().await;
    raw.get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

/// The terms a file holds, read by SQLite alone, without tenure: `(election,
/// token)` in token order. Panics with the tables it found when `terms` is
/// missing.
fn terms_in(db: &Path) -> Vec<(String, i64)> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .expect("open the copy");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("tables")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert!(
        tables.iter().any(|t| t == "terms"),
        "{} has no `terms` table; its tables: {tables:?}",
        db.display()
    );
    let terms = conn
        .prepare("SELECT election, token FROM terms ORDER BY token")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("terms")
        .collect::<Result<_, _>>()
        .expect("rows");
    terms
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_db_file_alone_holds_the_history_after_a_clean_stop() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let mut tokens = Vec::new();
    for i in 0..5 {
        let l = lead(&c, "backup", &format!("h{i}"), 30).await;
        tokens.push(l.token());
        l.resign().await.expect("resign");
    }
    serve.caught_up(revision(&etcd).await).await;

    // The documented online backup, while serve runs and holds the file.
    let online = dir.path().join("online.db");
    let out = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg(format!(".backup {}", online.display()))
        .output()
        .expect("run sqlite3 (Debian's sqlite3 package)");
    assert!(out.status.success(), "{out:?}");
    let want: Vec<(String, i64)> = tokens.iter().map(|t| ("backup".into(), *t)).collect();
    assert_eq!(terms_in(&online), want, "the online backup");

    assert_eq!(serve.stop().await, Some(0), "a clean stop");
    // The naive backup: the main file copied alone, without its `-wal`.
    let copy_dir = tempfile::tempdir().expect("tempdir");
    let copy = copy_dir.path().join("history.db");
    std::fs::copy(&db, &copy).expect("copy the .db file");
    assert_eq!(terms_in(&copy), want, "the .db file copied alone");
    let wal = dir.path().join("history.db-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(wal_len, 0, "the -wal file is empty after a clean stop");
}
