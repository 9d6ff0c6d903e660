//! A `key`-layout key written over changes hands: live and across a crash,
//! and while serve was down, with etcd keeping its log or compacting it.

use etcd_client::Client as EtcdClient;

use crate::support::{Etcd, Serve};
use crate::{events_of, get_json, now_revision, terms};

/// A `key`-layout leader whose key another client writes over (a put
/// without a lease strips the leader's): the key changed hands. The old
/// term ends `taken_over` at that put, the new holder's term starts there,
/// its token that put's revision (as etcd answered it); across a crash of
/// serve while the new holder rewrites its value in place, the same term
/// goes on, with the same token.
#[tokio::test]
async fn a_key_written_over_by_another_client_changed_hands() {
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let args = ["--source", "key:/svc/"];
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;
    let lease = raw.lease_grant(60, None).await.expect("lease").id();
    let first = raw
        .put(
            "/svc/leader",
            "node-1",
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision();
    let over = raw
        .put("/svc/leader", "intruder", None)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision();
    serve.caught_up(over).await;
    let want = vec![
        (first, "node-1".to_owned(), Some("taken_over".to_owned())),
        (over, "intruder".to_owned(), None),
    ];
    assert_eq!(terms(&serve, "/svc/leader").await, want);
    let (_, detail) = get_json(&serve, "/api/v1/elections/%2Fsvc%2Fleader").await;
    assert_eq!(detail["holder"], "intruder", "{detail}");

    // The holder writes its own value again: the same term. serve, reading
    // from after that write at its restart, sees only it in its snapshot.
    raw.put("/svc/leader", "intruder", None).await.expect("put");
    let rev = now_revision(&mut raw).await;
    serve.caught_up(rev).await;
    assert_eq!(terms(&serve, "/svc/leader").await, want);
    // serve dies; the holder writes its own value again, twice.
    serve.crash().await;
    raw.put("/svc/leader", "intruder", None).await.expect("put");
    raw.put("/svc/leader", "intruder", None).await.expect("put");
    let rev = now_revision(&mut raw).await;
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;
    serve.caught_up(rev).await;
    assert_eq!(terms(&serve, "/svc/leader").await, want);
    // Its deletion ends the term at last: lease-less, `deleted`.
    raw.delete("/svc/leader", None).await.expect("delete");
    let rev = now_revision(&mut raw).await;
    serve.caught_up(rev).await;
    let got = terms(&serve, "/svc/leader").await;
    assert_eq!(
        got[1],
        (over, "intruder".to_owned(), Some("deleted".to_owned()))
    );
    serve.stop().await;
}

/// `key` put at `key` under `lease` (0: none): the revision etcd answered.
async fn put_at(raw: &mut EtcdClient, key: &str, value: &str, lease: i64) -> i64 {
    let opts = (lease != 0).then(|| etcd_client::PutOptions::new().with_lease(lease));
    raw.put(key, value, opts)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision()
}

/// Where etcd compacts its log while serve is down: not at all, up to the
/// present after the writes, or before them (past what serve saw).
#[derive(PartialEq)]
enum Compact {
    No,
    AfterWrites,
    BeforeWrites,
}

/// serve with `--source key:/svc/` sees holder A put `/svc/x` under its
/// lease, and stops; while it is down, `writes` (value, lease) are put at
/// `/svc/x`, etcd compacting its log as `compact` says. Returns serve
/// restarted and caught up, the first put's revision and the revisions
/// etcd answered for `writes`.
async fn key_written_while_down(
    etcd: &Etcd,
    db: &std::path::Path,
    writes: &[(&str, Option<usize>)],
    compact: Compact,
) -> (Serve, i64, Vec<i64>) {
    let mut raw = etcd.client().await;
    let args = ["--source", "key:/svc/"];
    let serve = Serve::start(&[etcd.endpoint()], db, &args, &[]).await;
    serve.ready().await;
    let leases = [
        raw.lease_grant(300, None).await.expect("lease").id(),
        raw.lease_grant(300, None).await.expect("lease").id(),
    ];
    let first = put_at(&mut raw, "/svc/x", "A", leases[0]).await;
    serve.caught_up(first).await;
    assert_eq!(
        terms(&serve, "/svc/x").await,
        vec![(first, "A".to_owned(), None)]
    );
    serve.stop().await;
    if compact == Compact::BeforeWrites {
        // A write of another key, then the log compacted up to it.
        let at = put_at(&mut raw, "/svc/y", "other", 0).await;
        raw.compact(
            at,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .expect("compact");
    }
    let mut revs = Vec::new();
    for (value, lease) in writes {
        let lease = lease.map_or(0, |i| leases[i]);
        revs.push(put_at(&mut raw, "/svc/x", value, lease).await);
    }
    let now = now_revision(&mut raw).await;
    if compact == Compact::AfterWrites {
        raw.compact(
            now,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .expect("compact");
    }
    let serve = Serve::start(&[etcd.endpoint()], db, &args, &[]).await;
    serve.ready().await;
    serve.caught_up(now).await;
    (serve, first, revs)
}

/// A `key`-layout key taken by another lease, then put back under the
/// first holder's lease, while serve was down (etcd keeps its log): three
/// terms, each from the put that started it (etcd's revisions of the puts),
/// not one term going on unbroken.
#[tokio::test]
async fn a_key_that_changed_hands_and_back_while_serve_was_down_is_three_terms() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let writes = [("B", Some(1)), ("A", Some(0))];
    let (serve, first, revs) = key_written_while_down(&etcd, &db, &writes, Compact::No).await;
    let taken = Some("taken_over".to_owned());
    assert_eq!(
        terms(&serve, "/svc/x").await,
        vec![
            (first, "A".to_owned(), taken.clone()),
            (revs[0], "B".to_owned(), taken),
            (revs[1], "A".to_owned(), None),
        ]
    );
    serve.stop().await;
}

/// The same while a put without a lease (a foreign write that strips the
/// holder's) comes between, then etcd compacts its log past the puts: what
/// happened between is not known, so the term is not said to go on
/// unbroken: it ends `unknown`, A's term from the snapshot starts no
/// earlier than A's last put, and a gap of the election covers the puts.
#[tokio::test]
async fn a_key_written_while_serve_was_down_and_compacted_is_no_unbroken_term() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let writes = [("B", None), ("A", Some(0))];
    let (serve, first, revs) =
        key_written_while_down(&etcd, &db, &writes, Compact::AfterWrites).await;
    let got = terms(&serve, "/svc/x").await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], (first, "A".to_owned(), Some("unknown".to_owned())));
    assert_eq!((got[1].1.as_str(), got[1].2.as_deref()), ("A", None));
    assert!(got[1].0 >= revs[1], "{got:?} started before {revs:?}");
    let events = events_of(&serve, "/svc/x").await;
    assert!(
        events.iter().any(|(name, kind, from, to)| name == "/svc/x"
            && kind == "gap"
            && from.is_some_and(|f| f <= revs[0])
            && to.is_some_and(|t| t >= revs[1])),
        "no gap over {revs:?}: {events:?}"
    );
    serve.stop().await;
}

/// Only the holder's own updates (the same lease) while serve was down,
/// etcd keeping its log: one term and no gap (no false alarm).
#[tokio::test]
async fn own_updates_while_serve_was_down_are_one_term() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let writes = [("A2", Some(0)), ("A3", Some(0))];
    let (serve, first, _) = key_written_while_down(&etcd, &db, &writes, Compact::No).await;
    assert_eq!(
        terms(&serve, "/svc/x").await,
        vec![(first, "A".to_owned(), None)]
    );
    let events = events_of(&serve, "/svc/x").await;
    assert!(
        events.iter().all(|(_, kind, ..)| kind != "gap"),
        "a gap without one: {events:?}"
    );
    serve.stop().await;
}

/// etcd compacted its log past what serve saw, before the writes while it
/// was down: the log still kept shows every write of `/svc/x` since. Only
/// the holder's own updates: one term, no gap of the election (etcd's
/// compaction is still a gap of every election). Taken and put back: not
/// one term (it ends `unknown`, a gap of the election covers the writes).
#[tokio::test]
async fn writes_after_a_compaction_while_serve_was_down_are_read_from_the_log() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let writes = [("A2", Some(0)), ("A3", Some(0))];
    let (serve, first, _) =
        key_written_while_down(&etcd, &db, &writes, Compact::BeforeWrites).await;
    assert_eq!(
        terms(&serve, "/svc/x").await,
        vec![(first, "A".to_owned(), None)]
    );
    let events = events_of(&serve, "/svc/x").await;
    assert!(
        events
            .iter()
            .any(|(name, kind, ..)| name.is_empty() && kind == "gap"),
        "no gap of every election: {events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|(name, kind, ..)| name == "/svc/x" && kind == "gap"),
        "a gap of the election: {events:?}"
    );
    serve.stop().await;

    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let etcd = Etcd::start().await;
    let writes = [("B", Some(1)), ("A", Some(0))];
    let (serve, first, revs) =
        key_written_while_down(&etcd, &db, &writes, Compact::BeforeWrites).await;
    let got = terms(&serve, "/svc/x").await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], (first, "A".to_owned(), Some("unknown".to_owned())));
    assert!(got[1].0 >= revs[1], "{got:?} started before {revs:?}");
    let events = events_of(&serve, "/svc/x").await;
    assert!(
        events
            .iter()
            .any(|(name, kind, _, to)| name == "/svc/x" && kind == "gap" && *to == Some(revs[1])),
        "no gap of the election: {events:?}"
    );
    serve.stop().await;
}
