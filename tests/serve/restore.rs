//! etcd restored from an earlier snapshot, with serve stopped or running:
//! recorded as a reset, the old timeline's terms kept, the new one recorded.

use tenure::election::Client;
use tenure::events::{EndCause, EventKind};
use tenure::history::{Query, Reader};

use crate::revision;
use crate::support::fixtures::{lead, name, ttl};
use crate::support::{Etcd, Serve};

fn etcdctl(etcd: &Etcd) -> std::process::Command {
    let mut cmd = std::process::Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd.endpoint()));
    cmd
}

/// `etcdctl snapshot restore` of an earlier snapshot puts etcd's revision
/// behind the stored one (and, with another cluster token, changes the
/// cluster id). History records an explicit reset, keeps every term of the
/// old timeline, and goes on recording the new one, where tokens repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_from_a_snapshot_is_recorded_as_a_reset() {
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let snap = dir.path().join("snap.db");
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    let a = lead(&c, "jobs", "a", 30).await;
    let t_a = a.token();
    serve.caught_up(revision(&etcd).await).await;
    let out = etcdctl(&etcd)
        .args(["snapshot", "save"])
        .arg(&snap)
        .output()
        .expect("etcdctl snapshot save");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snapshot_rev = revision(&etcd).await;

    // The old timeline goes on: three more terms.
    a.resign().await.expect("resign");
    let b = lead(&c, "jobs", "b", 30).await;
    let t_b = b.token();
    b.resign().await.expect("resign");
    let cc = lead(&c, "jobs", "c", 30).await;
    let t_c = cc.token();
    let old_rev = revision(&etcd).await;
    serve.caught_up(old_rev).await;
    assert_eq!(serve.stop().await, Some(0));
    drop(cc);

    // Restore the snapshot in place (another cluster token: another id).
    etcd.kill().await;
    let data = etcd.data_dir().to_owned();
    std::fs::remove_dir_all(&data).expect("remove data dir");
    let peer = format!("http://127.0.0.1:{}", etcd.peer_port());
    // etcdutl: 3.6 removed etcdctl's restore (3.4's server gets 3.5's).
    let out = std::process::Command::new(crate::support::etcdutl_bin())
        .args(["snapshot", "restore"])
        .arg(&snap)
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--name",
            "m0",
            "--initial-cluster",
            &format!("m0={peer}"),
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster-token",
            "restored",
        ])
        .output()
        .expect("etcdctl snapshot restore");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    etcd.restart().await;
    let restored_rev = revision(&etcd).await;
    assert!(restored_rev < old_rev, "{restored_rev} < {old_rev}");
    assert_eq!(restored_rev, snapshot_rev);

    // The new timeline: a (restored) is deposed, d leads with a token the
    // old timeline gave b.
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    c.depose(&name("jobs")).await.expect("depose");
    let d = lead(&c, "jobs", "d", 30).await;
    assert_eq!(d.token(), t_b, "the new timeline repeats a token");

    // Another cluster token made another etcd cluster id: not taken for
    // this history's etcd until the operator adopts it (issue 43.1).
    let (before, now) = (
        Reader::open(&db)
            .expect("reader")
            .resume_point()
            .expect("resume"),
        c.etcd()
            .clone()
            .get("any", None)
            .await
            .expect("get")
            .header()
            .expect("header")
            .cluster_id(),
    );
    let recorded = before.as_ref().and_then(|r| r.cluster_id).expect("an id");
    let out = tokio::process::Command::new(crate::support::tenure_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(&db)
        .env("TENURE_ENDPOINTS", etcd.endpoint())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {err}");
    assert!(
        err.contains(&format!("{recorded:x}")) && err.contains(&format!("--adopt-etcd {now:x}")),
        "{err}"
    );
    let after = Reader::open(&db)
        .expect("reader")
        .resume_point()
        .expect("resume");
    assert_eq!(
        after, before,
        "the refused serve left the history as it was"
    );
    let adopt = format!("{now:x}");
    let serve = Serve::start(&[etcd.endpoint()], &db, &["--adopt-etcd", &adopt], &[]).await;
    serve.caught_up(d.token()).await;
    serve.ready().await;
    let ready = reqwest::get(serve.url("/readyz"))
        .await
        .expect("readyz")
        .text()
        .await
        .expect("body");
    let at: i64 = ready
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("{ready}"));
    assert!(
        at >= d.token() && at < old_rev,
        "readyz reports the new timeline's revision: {ready}"
    );
    // Recording goes on in the new timeline. Its tokens repeat the old
    // one's: serve raised tenure's token floor (issue 20.1), so a campaign
    // is refused until etcd's revision passes it (here: by writes; an
    // operator restores with --bump-revision instead, tests/restore.rs).
    let t_d = d.token();
    d.resign().await.expect("resign");
    let e = above_the_floor(&etcd, &c, "e", old_rev).await;
    serve.caught_up(e.token()).await;
    assert_eq!(serve.metric("tenure_history_gaps_total").await, Some(1.0));
    // The timeline page marks the reset like a gap.
    let page = reqwest::get(serve.url("/elections/jobs"))
        .await
        .expect("page")
        .text()
        .await
        .expect("body");
    assert!(
        page.contains(r#"watcher gap: <b class="num">1</b>"#),
        "the reset is drawn as a gap"
    );
    assert_eq!(serve.stop().await, Some(0));

    let reader = Reader::open(&db).expect("reader");
    let events = reader.events(None, &Query::default()).expect("events");
    let resets: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Reset {
                from_revision,
                to_revision,
                previous_cluster_id,
                cluster_id,
            } => Some((
                *from_revision,
                *to_revision,
                *previous_cluster_id,
                *cluster_id,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(resets.len(), 1, "{events:#?}");
    let (from, to, previous, now) = resets[0];
    assert_eq!(from, old_rev);
    assert!(to >= restored_rev && to < old_rev, "{to}");
    assert!(
        previous.is_some() && previous != Some(now),
        "{previous:?} {now}"
    );
    let terms: Vec<_> = reader
        .terms("jobs", &Query::default())
        .expect("terms")
        .into_iter()
        .map(|t| (t.holder, t.token, t.end_cause))
        .collect();
    assert_eq!(
        terms,
        vec![
            ("a".to_owned(), t_a, Some(EndCause::Resigned)),
            ("b".to_owned(), t_b, Some(EndCause::Resigned)),
            ("c".to_owned(), t_c, Some(EndCause::Unknown)),
            // The restored a ended before serve saw the new timeline: like
            // terms inside a gap, it is not known one by one (the reset says
            // so). d was there when serve started: from the snapshot.
            ("d".to_owned(), t_d, Some(EndCause::Resigned)),
            ("e".to_owned(), e.token(), None),
        ],
        "every term of both timelines, none lost"
    );
}

/// The same restore under a running `tenure serve`, keeping the cluster id
/// (same token): only the revision tells. The watch reopens after etcd's
/// restart, sees etcd behind what it applied, records the reset and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_under_a_running_serve_is_recorded_as_a_reset() {
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let snap = dir.path().join("snap.db");
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let serve = Serve::start(&[etcd.endpoint()], &db, &["--timeout", "2"], &[]).await;
    let a = lead(&c, "jobs", "a", 30).await;
    serve.caught_up(revision(&etcd).await).await;
    let out = etcdctl(&etcd)
        .args(["snapshot", "save"])
        .arg(&snap)
        .output()
        .expect("etcdctl snapshot save");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    a.resign().await.expect("resign");
    let b = lead(&c, "jobs", "b", 30).await;
    let t_b = b.token();
    let old_rev = revision(&etcd).await;
    serve.caught_up(old_rev).await;

    // b still leads when etcd dies: a drop before the kill revokes its
    // lease and publishes its acting record (issue 22) in the background,
    // and serve could see those writes first, so the old timeline would
    // end after `old_rev`. Dropped now, neither can land: etcd is down,
    // and the restored timeline has neither b's lease nor its key.
    etcd.kill().await;
    drop(b);
    let data = etcd.data_dir().to_owned();
    std::fs::remove_dir_all(&data).expect("remove data dir");
    let peer = format!("http://127.0.0.1:{}", etcd.peer_port());
    // etcdutl: 3.6 removed etcdctl's restore (3.4's server gets 3.5's).
    let out = std::process::Command::new(crate::support::etcdutl_bin())
        .args(["snapshot", "restore"])
        .arg(&snap)
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--name",
            "m0",
            "--initial-cluster",
            &format!("m0={peer}"),
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster-token",
            etcd.cluster_token(),
        ])
        .output()
        .expect("etcdctl snapshot restore");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    etcd.restart().await;
    assert!(revision(&etcd).await < old_rev);

    // Recording goes on: once serve has the reset, a new term is recorded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while serve.metric("tenure_history_gaps_total").await != Some(1.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "no reset seen: {:?}",
            serve.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    c.depose(&name("jobs"))
        .await
        .expect("depose the restored a");
    // The new timeline would repeat b's token: serve raised tenure's
    // token floor (issue 20.1), so the campaign is refused until etcd's
    // revision passes it.
    let d = above_the_floor(&etcd, &c, "d", old_rev).await;
    serve.caught_up(d.token()).await;
    let h = serve
        .metric(r#"tenure_election_has_leader{election="jobs"}"#)
        .await;
    assert_eq!(h, Some(1.0));
    assert_eq!(serve.stop().await, Some(0));

    let reader = Reader::open(&db).expect("reader");
    let events = reader.events(None, &Query::default()).expect("events");
    let resets: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Reset {
                previous_cluster_id,
                cluster_id,
                from_revision,
                ..
            } => Some((*from_revision, *previous_cluster_id, *cluster_id)),
            _ => None,
        })
        .collect();
    assert_eq!(resets.len(), 1, "{events:#?}");
    assert_eq!(resets[0].0, old_rev);
    assert_eq!(resets[0].1, Some(resets[0].2), "same cluster id");
    let terms: Vec<_> = reader
        .terms("jobs", &Query::default())
        .expect("terms")
        .into_iter()
        .map(|t| (t.holder, t.token, t.end_cause))
        .collect();
    assert_eq!(
        terms,
        vec![
            ("a".to_owned(), a_token(&terms), Some(EndCause::Resigned)),
            ("b".to_owned(), t_b, Some(EndCause::Unknown)),
            ("a".to_owned(), a_token(&terms), Some(EndCause::Deleted)),
            ("d".to_owned(), d.token(), None),
        ],
    );
}

/// Once serve has raised tenure's token floor to `old_rev` (issue 20.1), a
/// campaign for `jobs` as `id` is refused while its token would be at or
/// below it; past it (here: by writes; an operator restores with
/// --bump-revision instead, tests/restore.rs) it leads with a token above
/// every earlier one.
async fn above_the_floor(
    etcd: &Etcd,
    c: &Client,
    id: &str,
    old_rev: i64,
) -> tenure::election::Leadership {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let floor = c.floor().await.expect("floor");
        if floor == Some(old_rev) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the floor is {floor:?}, not the old timeline's last revision {old_rev}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let opts = tenure::election::CampaignOptions::new(ttl(30));
    let mut raw = etcd.client().await;
    loop {
        match c.campaign(&name("jobs"), id, &opts).await {
            Ok(tenure::election::Campaigned::Leader(l)) => {
                assert!(l.token() > old_rev, "{} > {old_rev}", l.token());
                return l;
            }
            Err(tenure::election::Error::BelowFloor { floor, token, .. }) => {
                assert_eq!(floor, old_rev);
                assert!(token <= old_rev);
                raw.put("filler", "x", None).await.expect("put");
            }
            Ok(tenure::election::Campaigned::Held(h)) => panic!("held by {h:?}"),
            Err(e) => panic!("{e}"),
        }
    }
}

fn a_token(terms: &[(String, i64, Option<EndCause>)]) -> i64 {
    terms.first().map(|t| t.1).unwrap_or_default()
}
