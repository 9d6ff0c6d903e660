//! What serve may read of a source: one it cannot read is refused before
//! anything is written; a role that reads exactly the watched prefixes runs it.

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::fixtures::{merges_several_ranges, tenure, text};
use crate::support::{Etcd, Serve};
use crate::{get_json, terms, WAIT};

/// `tenure serve ARGS` expected to refuse: its exit code and stderr.
async fn refused(etcd: &Etcd, db: &std::path::Path, args: &[&str]) -> String {
    let out = tokio::time::timeout(
        WAIT,
        tenure(etcd)
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(args)
            .output(),
    )
    .await
    .expect("serve refused in time")
    .expect("run serve");
    assert!(!out.status.success(), "serve {args:?} started");
    text(&out.stderr)
}

#[tokio::test]
async fn a_source_that_cannot_be_read_is_refused_before_anything_is_written() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    for (args, says) in [
        (
            vec!["--source", "key:election/x"],
            "overlap: every key must belong to one source",
        ),
        (
            vec!["--source", "nosuch:/a/"],
            "no layout is called `nosuch`",
        ),
        (vec!["--source", "concurrency"], "is not LAYOUT:PREFIX"),
        (vec!["--source", "key:"], "may not claim the whole keyspace"),
        (
            vec!["--source", "key:/a/", "--source", "concurrency:a/b/"],
            "overlap",
        ),
    ] {
        let err = refused(&etcd, &db, &args).await;
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !db.exists(),
            "{args:?}: a refused serve created its history"
        );
    }
}

/// etcd with authentication; serve's user may read exactly tenure's two
/// prefixes and the source's, nothing between or beside them (etcd 3.5
/// refuses it `Status`: the version comes from `/version`).
#[tokio::test]
async fn a_role_with_read_on_only_the_watched_prefixes_runs_serve() {
    use crate::support::secure::etcdctl;
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let several = merges_several_ranges(&mut raw).await;
    let ep = etcd.endpoint();
    let root = ["--user".to_owned(), "root:root-pw".to_owned()];
    etcdctl(
        &ep,
        &[],
        &["user", "add", "root", "--new-user-password", "root-pw"],
    );
    etcdctl(&ep, &[], &["user", "grant-role", "root", "root"]);
    etcdctl(&ep, &[], &["role", "add", "watcher"]);
    for p in ["election/", "fence/", "/vault/core/"] {
        etcdctl(
            &ep,
            &[],
            &[
                "role",
                "grant-permission",
                "watcher",
                "--prefix=true",
                "read",
                p,
            ],
        );
    }
    etcdctl(
        &ep,
        &[],
        &[
            "user",
            "add",
            "watcher",
            "--new-user-password",
            "watcher-pw",
        ],
    );
    etcdctl(&ep, &[], &["user", "grant-role", "watcher", "watcher"]);
    etcdctl(&ep, &[], &["auth", "enable"]);

    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    if !several {
        // Several ranges, an etcd that cannot merge them, and a role that
        // may not read the range covering them: refused with one line that
        // says every way out, nothing created.
        let err = refused(
            &etcd,
            &db,
            &[
                "--user",
                "watcher:watcher-pw",
                "--source",
                "concurrency:/vault/core/",
            ],
        )
        .await;
        assert!(err.contains("etcd issues 15220 and 17507"), "{err}");
        assert!(
            err.contains("etcdctl role grant-permission ROLE read /vault/core/ fence0"),
            "{err}"
        );
        assert!(err.contains("--sources-only"), "{err}");
        assert!(!db.exists(), "a refused serve created its history");
    }
    let mut args = vec!["--source", "concurrency:/vault/core/"];
    if !several {
        args.insert(0, "--sources-only");
    }
    let env = [
        ("TENURE_USER", "watcher"),
        ("TENURE_PASSWORD", "watcher-pw"),
    ];
    let serve = Serve::start(std::slice::from_ref(&ep), &db, &args, &env).await;
    serve.ready().await;

    // A Vault-style HA lock, taken by etcdctl as root.
    let mut lock = tokio::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={ep}"))
        .args(&root)
        .args(["elect", "/vault/core/lock", "vault-1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("etcdctl");
    let mut lines = BufReader::new(lock.stdout.take().expect("stdout")).lines();
    tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("elected")
        .expect("read");
    if several {
        etcdctl(&ep, &root, &["put", "election/own", "me"]);
    }
    let out = etcdctl(
        &ep,
        &root,
        &["get", "/vault/core/lock", "--prefix", "-w", "json"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let token = v["kvs"][0]["create_revision"]
        .as_i64()
        .expect("create revision");
    let rev = v["header"]["revision"].as_i64().expect("revision");
    serve.caught_up(rev).await;
    let got = terms(&serve, "/vault/core/lock").await;
    assert_eq!(got, vec![(token, "vault-1".to_owned(), None)]);
    if several {
        let (status, own) = get_json(&serve, "/api/v1/elections/own/terms").await;
        assert_eq!(status, 200);
        assert_eq!(own["terms"][0]["holder"], "me", "{own}");
    }
    let logs = serve.log_text();
    assert!(!logs.contains("permission denied"), "{logs}");
    serve.stop().await;
}
