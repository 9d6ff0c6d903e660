//! Kubernetes Leases, whose values define their terms: runs of one holder,
//! ended as the values say; a resumed Lease keeps history's token.

use super::*;
use crate::events::{EventKind, OpenTerm};

fn k8s() -> State {
    let sources = Sources::new(vec![
        crate::layout::Source::parse("kubernetes:/registry/").expect("kubernetes")
    ]);
    State::new(sources, 10)
}

const KCM: &str = "/registry/leases/kube-system/kcm";

fn ends(p: &[Pending]) -> Vec<(i64, EndCause)> {
    p.iter()
        .filter_map(|p| match &p.event.kind {
            EventKind::TermEnded { token, cause, .. } => Some((*token, *cause)),
            _ => None,
        })
        .collect()
}

fn starts(p: &[Pending]) -> Vec<(i64, String)> {
    p.iter()
        .filter_map(|p| match &p.event.kind {
            EventKind::TermStarted { token, holder, .. } => Some((*token, holder.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lease_s_terms_are_runs_of_one_holder_ended_as_its_values_say() {
    let mut s = k8s();
    let name = "kube-system/kcm";
    let (p, _) = s.apply(10, &[put(KCM, &lease("a", 0, 0, 0), 10, 10, 0)], 1000);
    assert_eq!(starts(&p), [(10, "a".into())]);
    // Renewals: no event, the token stays the acquiring write's.
    for (rev, at) in [(11, 2), (12, 4)] {
        let (p, _) = s.apply(rev, &[put(KCM, &lease("a", 0, at, 0), 10, rev, 0)], 1000);
        assert!(p.is_empty(), "{p:?}");
    }
    assert_eq!(s.leader(name).map(|t| t.token), Some(10));
    let (lapsed, changed) = s.renewing(1000);
    assert_eq!(lapsed, 0);
    let r = changed
        .iter()
        .find(|l| l.election == name)
        .expect("reported");
    assert_eq!(
        (r.renewals, r.every_us, r.duration_s, r.held.clone()),
        (2, Some(2_000_000), Some(15), Some(("a".into(), 10)))
    );
    // Reported again only once written again or lapsed.
    assert!(s.renewing(1000).1.is_empty());
    assert_eq!(s.renewing(16_001).0, 1);
    // Released: resigned; nobody leads.
    let (p, _) = s.apply(13, &[put(KCM, &lease("", 5, 5, 0), 10, 13, 0)], 1000);
    assert_eq!(ends(&p), [(10, EndCause::Resigned)]);
    assert!(s.leader(name).is_none());
    // b acquires, then c takes it 5 s after b's renewal of a 15 s lease.
    let (p, _) = s.apply(14, &[put(KCM, &lease("b", 8, 8, 1), 10, 14, 0)], 1000);
    assert_eq!(starts(&p), [(14, "b".into())]);
    s.apply(15, &[put(KCM, &lease("b", 8, 10, 1), 10, 15, 0)], 1000);
    let (p, _) = s.apply(16, &[put(KCM, &lease("c", 15, 15, 2), 10, 16, 0)], 1000);
    assert_eq!(ends(&p), [(14, EndCause::TakenOver)]);
    // Its renewals go with its end: b renewed once, at 10 s; c acquired at 15.
    let renewals = p.iter().find_map(|p| match &p.event.kind {
        EventKind::TermEnded { renewals, .. } => *renewals,
        _ => None,
    });
    let r = renewals.expect("b's renewals");
    assert_eq!(
        (r.count, r.last_us, r.handover_us),
        (1, Some(10_000_000), Some(5_000_000))
    );
    assert_eq!(starts(&p), [(16, "c".into())]);
    // d after c's 15 s had run out: expired; the count jumped by two: one
    // term between was not seen, recorded as a gap of this election first.
    let (p, _) = s.apply(20, &[put(KCM, &lease("d", 31, 31, 4), 10, 20, 0)], 1000);
    assert_eq!(kinds(&p), ["gap", "term_ended", "term_started"]);
    assert_eq!(p[0].event.election, name);
    assert_eq!(ends(&p), [(16, EndCause::Expired)]);
    // An unreadable value changes nothing; encrypted is named.
    let (p, st) = s.apply(21, &[put(KCM, "k8s:enc:aescbc:v1:k:xx", 10, 21, 0)], 1000);
    assert!(p.is_empty());
    assert_eq!(st, [WatchStatus::EncryptedValue]);
    // The object deleted: deleted, with no lookup.
    let (p, _) = s.apply(22, &[del(KCM, 22, 0)], 1000);
    assert_eq!(ends(&p), [(20, EndCause::Deleted)]);
    // d's renewals go with it too, with no acquisition after it.
    assert!(matches!(
        &p[0].event.kind,
        EventKind::TermEnded { renewals: Some(r), .. } if r.handover_us.is_none() && r.last_us == Some(31_000_000)
    ));
    assert_eq!(p[0].cause_lookup, None);
    // Heartbeats are no elections.
    let node = "/registry/leases/kube-node-lease/n1";
    let (p, st) = s.apply(23, &[put(node, &lease("n1", 0, 0, 0), 23, 23, 0)], 1000);
    assert!(p.is_empty() && st.is_empty());
}

#[test]
fn a_resumed_lease_keeps_the_token_history_holds() {
    let name = "kube-system/kcm";
    let kv = Kv {
        key: KCM.as_bytes().to_vec(),
        value: lease("b", 8, 40, 1).into_bytes(),
        create_revision: 10,
        mod_revision: 30,
        lease: 0,
    };
    let open = OpenTerm {
        election: name.into(),
        token: 14,
        holder: "b".into(),
        lease_id: 0,
        layout: KeyLayout::Lease,
        started_revision: 14,
        started_at_ms: 900,
    };
    let mut s = k8s();
    let (events, _) = s.load(
        30,
        std::slice::from_ref(&kv),
        std::slice::from_ref(&open),
        1000,
    );
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(s.leader(name).map(|t| t.token), Some(14));
    // And the term goes on under it: a renewal is nothing, a release ends 14.
    let (p, _) = s.apply(31, &[put(KCM, &lease("b", 8, 42, 1), 10, 31, 0)], 1000);
    assert!(p.is_empty());
    let (p, _) = s.apply(32, &[put(KCM, &lease("", 43, 43, 1), 10, 32, 0)], 1000);
    assert_eq!(ends(&p), [(14, EndCause::Resigned)]);
    // Another holder in the snapshot than history's: history's term ended
    // unknown, the snapshot's starts at the value's revision.
    let mut s = k8s();
    let other = Kv {
        value: lease("c", 20, 40, 2).into_bytes(),
        ..kv
    };
    let (events, _) = s.load(30, std::slice::from_ref(&other), &[open], 1000);
    let kinds: Vec<_> = events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds, ["term_ended", "term_started"]);
    assert_eq!(s.leader(name).map(|t| t.token), Some(30));
    // An encrypted value in a snapshot: counted, nothing tracked.
    let mut s = k8s();
    let sealed = Kv {
        value: b"k8s:enc:kms:v2:key:\x00\x01".to_vec(),
        ..other
    };
    let (events, st) = s.load(30, &[sealed], &[], 1000);
    assert!(events.is_empty());
    assert_eq!(st, [WatchStatus::EncryptedValue]);
    assert!(s.is_empty());
}
